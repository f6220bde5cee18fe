"""Full LM-Steer run on SmolLM2-135M: training cost, the sentiment control curve, composition with
the topic steer, the SVD probe, keyword highlighting, and transfer to Gemma 3 270M.

    PYTHONPATH=. .venv/bin/python benchmarks/steering.py                 # everything; writes docs/data/steering.json
    PYTHONPATH=. .venv/bin/python benchmarks/steering.py --no-transfer   # skip Gemma (writes no data file)

One steer is trained jointly for sentiment and topic (plus the dummy) on the bundled texts; the
trained steer and every evaluation are cached under the cache folder ($LMSCI_MI_CACHE), keyed by
the settings, so a rerun only prints. Run it alone on the machine: it times training (about 5 min
on two cores); the training costs in the data file are the ones recorded by the run that trained
the steer (``training.trained_this_run`` says whether that was this run).

Writes docs/data/steering.json (the control curve, the composition grid and the transfer to Gemma,
each metric with its standard error over the prompts, plus paired standard errors of the gaps
quoted on docs/steering.md) and docs/img/steering_control_curve.png.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import itertools
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.cache import cache_root
from lmsci_mi.data.steering_texts import steering_texts
from lmsci_mi.results import Result
from lmsci_mi.steering import (
    ControlCurve,
    HighlightConfig,
    LMSteerConfig,
    SteerEvalConfig,
    SteerTrainConfig,
    SVDConfig,
    evaluate_settings,
    highlight_keywords,
    steer_svd,
    train_steer,
    transfer_steer,
)
from lmsci_mi.steering.evaluate import METRICS, sentiment_scores, topic_scores
from lmsci_mi.steering.lm_steer import LMSteer
from lmsci_mi.steering.train import cached_steer_paths

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "data" / "steering.json"
FIGURE = ROOT / "docs" / "img" / "steering_control_curve.png"

STEER = LMSteerConfig()
TRAIN = SteerTrainConfig(steps=200, batch_tokens=512)
GRID = (-2.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.0)
"""Steer values of the control curve (the dummy at 1 throughout). The end value s reported is the
largest of 2, 1, 0.5 whose ±s perplexity stays within 1.5x the unsteered model's; the grid holds
-s, -s/2, 0, s/2, s for each."""
COMPOSITION = 2.0
"""Both steers' magnitude in the composition grid."""
TRANSFER = 1.0
"""The steer value at which the transfer's +s/−s gap is compared."""
EVAL = SteerEvalConfig(values=GRID, n_prompts=60, max_new_tokens=20)
SENTENCES = (
    "The staff were wonderful and the food was absolutely delicious.",
    "The room was filthy, the staff were rude and the trip was a disaster.",
)


def _cached(name: str, key: object, compute: Callable[[], Result]) -> tuple[Result, bool]:
    """Load the result saved under ``name`` and ``key``, or compute and save it."""
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True, default=str).encode(), digest_size=8)
    path = cache_root() / "benchmarks" / f"steering-{name}-{digest.hexdigest()}.json"
    if path.is_file():
        return Result.load(path), True
    result = compute()
    result.save(path)
    return result, False


def _se(x: torch.Tensor) -> float:
    """Standard error of the mean of ``x`` (one value per prompt)."""
    return float(x.double().std() / len(x) ** 0.5)


def per_prompt(curve: ControlCurve) -> dict[str, torch.Tensor]:
    """Per setting and prompt, the sentiment and topic scores of the stored continuations
    (``[setting, prompt]``): the paired differences between settings need them."""
    return {
        "sentiment": torch.tensor([sentiment_scores(c) for c in curve.continuations], dtype=torch.float64),
        "topic": torch.tensor([topic_scores(c) for c in curve.continuations], dtype=torch.float64),
    }


def difference(scores: dict[str, torch.Tensor], metric: str, a: int, b: int) -> dict:
    """Row ``a`` minus row ``b`` of one metric, with the standard error of the paired per-prompt
    differences (every setting samples the same prompts with the same seed)."""
    d = scores[metric][a] - scores[metric][b]
    return {"value": float(d.mean()), "se": _se(d)}


def curve_rows(curve: ControlCurve) -> list[dict]:
    """One dict per setting: the steer values, every metric and its standard error over prompts
    (distinct-n is a statistic of the whole set of continuations: no standard error)."""
    rows = []
    for i, setting in enumerate(curve.settings):
        row: dict = {"setting": dict(zip(curve.attributes, setting, strict=True))}
        for j, name in enumerate(METRICS):
            row[name] = float(curve.values[i, j])
            if not name.startswith("distinct"):
                row[f"{name}_se"] = float(curve.errors[i][j])
        rows.append(row)
    return rows


def unsteered_row(curve: ControlCurve) -> dict:
    row = {}
    for j, name in enumerate(METRICS):
        row[name] = curve.unsteered[j]
        if not name.startswith("distinct"):
            row[f"{name}_se"] = curve.unsteered_errors[j]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--no-transfer", action="store_true", help="skip the transfer to Gemma")
    parser.add_argument(
        "--out-dir", type=Path, default=Path("out/steering"), help="figures and tables"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    lm = load_model("smollm2-135m")
    texts = steering_texts(["sentiment", "topic"])
    trained_now = not cached_steer_paths(lm, texts, STEER, TRAIN)[0].is_file()
    load_before = os.getloadavg()
    start = time.perf_counter()
    steer, run = train_steer(lm, texts, STEER, TRAIN)
    wall = time.perf_counter() - start
    load_after = os.getloadavg()
    print(f"## Training ({lm.name}, {steer})\n")
    print(
        f"{run.n_texts} texts, {run.n_tokens} next-token targets; {TRAIN.steps} steps of "
        f"{TRAIN.batch_tokens} tokens, Adam lr {TRAIN.lr}"
    )
    print(f"loss: unsteered {run.unsteered_loss:.3f} -> steered {run.final_loss:.3f} (last tenth)")
    print(
        f"cost: collect states {run.collect_seconds:.1f} s + train {run.train_seconds:.1f} s "
        f"(this call {wall:.1f} s; 0 when cached)\n"
    )
    run.plot(args.out_dir / "loss.png")
    steer_path = steer.save(args.out_dir / "steer-sentiment-topic.safetensors")

    key = {
        "steer": str(steer_path.stat().st_size),
        "p1": float(steer.p1.detach().sum()),
        "eval": EVAL.params(),
    }
    curve, hit = _cached(
        "curve", key, lambda: evaluate_settings(lm, steer, [{"sentiment": v} for v in GRID], EVAL)
    )
    assert isinstance(curve, ControlCurve)
    print(
        f"## Sentiment control curve ({EVAL.n_prompts} neutral prompts, {EVAL.max_new_tokens} new "
        f"tokens, T={EVAL.temperature}, top-p {EVAL.top_p}; topic steer 0, dummy 1){' [cached]' if hit else ''}\n"
    )
    print(curve.summary())
    ppl0 = curve.unsteered[2]
    ppl = dict(zip(GRID, curve.metric("perplexity").tolist(), strict=True))
    sent = dict(zip(GRID, curve.metric("sentiment").tolist(), strict=True))
    fits = [s for s in (2.0, 1.0, 0.5) if max(ppl[s], ppl[-s]) <= 1.5 * ppl0]
    S = fits[0] if fits else 0.5
    five = [sent[v] for v in (-S, -S / 2, 0.0, S / 2, S)]
    monotone = all(a < b for a, b in itertools.pairwise(five))
    print(
        f"\ns = {S:g}: sentiment at -s, -s/2, 0, s/2, s = {', '.join(f'{v:+.3f}' for v in five)} "
        f"(monotone: {monotone}); gap(+s, -s) = {sent[S] - sent[-S]:+.3f}; perplexity at -s / +s = "
        f"{ppl[-S] / ppl0:.2f}x / {ppl[S] / ppl0:.2f}x unsteered ({ppl0:.2f})\n"
    )
    curve.plot(args.out_dir / "control_curve.png")
    for label, samples in zip(curve.axis_labels(0), curve.continuations, strict=True):
        print(f"  {label}: {samples[0]!r} | {samples[1]!r}")
    scores = per_prompt(curve)
    at = {v: i for i, v in enumerate(GRID)}
    summary = {
        "s": S,
        "rule": "the largest of 2, 1, 0.5 whose perplexity at +s and -s is within 1.5x the unsteered model's",
        "values_at": [-S, -S / 2, 0.0, S / 2, S],
        "sentiment_at": five,
        "monotone_at_s": monotone,
        "monotone_whole_grid": curve.is_monotone("sentiment"),
        "gap": difference(scores, "sentiment", at[S], at[-S]),
        "perplexity_ratio_minus": ppl[-S] / ppl0,
        "perplexity_ratio_plus": ppl[S] / ppl0,
        "gap_at_1": difference(scores, "sentiment", at[1.0], at[-1.0]),
        "perplexity_ratio_minus_1": ppl[-1.0] / ppl0,
        "perplexity_ratio_plus_1": ppl[1.0] / ppl0,
        "gap_at_2": difference(scores, "sentiment", at[2.0], at[-2.0]),
        "dummy_minus_unsteered": {
            "perplexity": [ppl0, ppl[0.0]],
            "distinct_1": [curve.unsteered[METRICS.index("distinct_1")],
                           float(curve.metric("distinct_1")[at[0.0]])],
        },
    }

    S, T = COMPOSITION, COMPOSITION
    grid = [
        {"sentiment": a, "topic": b}
        for a, b in ((0, 0), (S, 0), (0, T), (S, T), (-S, -T), (S, -T), (-S, T))
    ]
    both, hit = _cached(
        "composition", {**key, "grid": grid}, lambda: evaluate_settings(lm, steer, grid, EVAL)
    )
    assert isinstance(both, ControlCurve)
    print(f"\n## Composition: sentiment and topic together{' [cached]' if hit else ''}\n")
    print(both.summary())
    row = {tuple(v): both.values[i] for i, v in enumerate(both.settings)}
    sentiment_effect = row[(S, T)][0] - row[(-S, T)][0]
    topic_effect = row[(S, T)][1] - row[(S, -T)][1]
    both_scores = per_prompt(both)
    index = {tuple(v): i for i, v in enumerate(both.settings)}
    effects = {
        "sentiment_at_topic_plus": difference(both_scores, "sentiment", index[(S, T)], index[(-S, T)]),
        "topic_at_sentiment_plus": difference(both_scores, "topic", index[(S, T)], index[(S, -T)]),
        "both_sentiment": difference(both_scores, "sentiment", index[(S, T)], index[(-S, -T)]),
        "both_topic": difference(both_scores, "topic", index[(S, T)], index[(-S, -T)]),
        "topic_alone_sentiment": difference(both_scores, "sentiment", index[(0, T)], index[(0, 0)]),
    }
    print(
        f"\nwith both steers on: sentiment +{S:g} vs -{S:g} (topic at +{T:g}) moves sentiment by "
        f"{sentiment_effect:+.3f}; topic +{T:g} vs -{T:g} (sentiment at +{S:g}) moves the topic "
        f"score by {topic_effect:+.3f}; (+,+) vs (-,-): sentiment "
        f"{row[(S, T)][0] - row[(-S, -T)][0]:+.3f}, topic {row[(S, T)][1] - row[(-S, -T)][1]:+.3f}"
    )

    probe = steer_svd(lm, steer, SVDConfig(n_directions=3))
    print("\n## SVD probe of the sentiment steer's W\n")
    for j, value in enumerate(probe.values.tolist()):
        print(
            f"direction {j} (σ {value:.3g})\n  raised:  {' '.join(probe.top_words[j])}\n"
            f"  lowered: {' '.join(probe.bottom_words[j])}"
        )
    print(
        f"mean |VADER valence| of direction 0's 2x20 end words: {probe.end_valence:.3f}; "
        f"of 20 random vocabulary words: {probe.random_valence:.3f} ({' '.join(probe.random_words)})"
    )
    probe.to_dataframe().to_csv(args.out_dir / "svd_words.csv", index=False)

    print("\n## Keyword highlighting (4 spans of at most 10 tokens; s = 5)\n")
    highlights = []
    for sentence, sign in zip(SENTENCES, (1, -1), strict=True):
        config = HighlightConfig(value=5.0 * sign)
        result = highlight_keywords(lm, steer, sentence, config)
        result.save_html(args.out_dir / f"highlight_{'positive' if sign > 0 else 'negative'}.html")
        print(
            f"{sentence}\n  evidence for the {'positive' if sign > 0 else 'negative'} pole: "
            f"{result.span_texts()}"
        )
        highlights.append({"text": sentence, "value": config.value, "spans": result.span_texts()})

    if args.no_transfer:
        return
    gemma = load_model("gemma3-270m")
    moved, fit = transfer_steer(steer, lm, gemma)
    print(
        f"\n## Transfer to {gemma.name}\n\nmap fitted on {fit.n_shared} shared token strings, "
        f"held-out R² {fit.r2:.3f}"
    )
    S = TRANSFER
    ends = [{"sentiment": -S}, {"sentiment": S}]
    moved_curve, hit = _cached(
        "transfer",
        {**key, "r2": fit.r2, "s": S, "map": "ridge both ways"},
        lambda: evaluate_settings(gemma, moved, ends, EVAL),
    )
    assert isinstance(moved_curve, ControlCurve)
    print(moved_curve.summary())
    source_gap = sent[S] - sent[-S]
    print(
        f"gap(+{S:g}, -{S:g}) on {gemma.name}: {moved_curve.gap():+.3f}; on {lm.name}: "
        f"{source_gap:+.3f}; fraction kept {moved_curve.gap() / source_gap:.2f}"
        f"{' [cached]' if hit else ''}"
    )
    LMSteer.save(moved, args.out_dir / "steer-gemma3-270m.safetensors")

    moved_scores = per_prompt(moved_curve)
    moved_gap = difference(moved_scores, "sentiment", 1, 0)
    kept = moved_gap["value"] / summary["gap_at_1"]["value"]
    # The two models' samples are independent: the ratio's standard error by the delta method.
    kept_se = abs(kept) * (
        (moved_gap["se"] / moved_gap["value"]) ** 2
        + (summary["gap_at_1"]["se"] / summary["gap_at_1"]["value"]) ** 2
    ) ** 0.5 if moved_gap["value"] else float("nan")
    data = {
        "model": lm.name,
        "command": "PYTHONPATH=. .venv/bin/python benchmarks/steering.py",
        "date": datetime.date.today().isoformat(),
        "steer": {"attributes": list(steer.attributes), **STEER.params(), "file_bytes": steer_path.stat().st_size},
        "training": {
            "n_texts": run.n_texts, "n_tokens": run.n_tokens, "steps": TRAIN.steps,
            "batch_tokens": TRAIN.batch_tokens, "lr": TRAIN.lr, "seed": TRAIN.seed,
            "unsteered_loss": run.unsteered_loss, "final_loss": run.final_loss,
            "final_loss_over": "the last tenth of the steps",
            "collect_seconds": run.collect_seconds, "train_seconds": run.train_seconds,
            "seconds_per_step": run.train_seconds / TRAIN.steps,
            "trained_this_run": trained_now,
            "cost_conditions": {
                "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                "load_average_1min_before_after": [load_before[0], load_after[0]],
                "note": "the training record's own timings; measured on a shared machine (not quiet)",
            } if trained_now else "recorded by an earlier run that trained the cached steer",
        },
        "evaluation": {
            "prompts": EVAL.n_prompts, "samples_per_prompt": 1, "max_new_tokens": EVAL.max_new_tokens,
            "temperature": EVAL.temperature, "top_p": EVAL.top_p, "seed": EVAL.seed,
            "prompts_source": "the bundled neutral prompts",
            "standard_errors": "over prompts (one sample each, so prompt and sampling variation together); "
                               "perplexity's by the delta method on the per-prompt mean NLL; gaps between "
                               "settings are paired per prompt",
        },
        "curve": {"rows": curve_rows(curve), "unsteered": unsteered_row(curve), "summary": summary,
                  "sample_prompts": list(curve.meta.prompts[:2]),
                  "samples": {label: list(c[:2]) for label, c in zip(curve.axis_labels(0), curve.continuations, strict=True)}},
        "composition": {"value": COMPOSITION, "rows": curve_rows(both), "unsteered": unsteered_row(both),
                        "effects": effects},
        "svd": {"singular_values": probe.values.tolist(), "raised": list(probe.top_words[0]),
                "lowered": list(probe.bottom_words[0]), "end_valence": probe.end_valence,
                "random_valence": probe.random_valence, "random_words": list(probe.random_words),
                "n_end_words": len(probe.top_words[0]) + len(probe.bottom_words[0])},
        "highlight": highlights,
        "transfer": {
            "to": gemma.name, "n_shared": fit.n_shared, "r2": fit.r2, "value": S,
            "rows": curve_rows(moved_curve), "unsteered": unsteered_row(moved_curve),
            "gap": moved_gap, "source_gap": summary["gap_at_1"], "fraction_kept": kept,
            "fraction_kept_se": kept_se,
        },
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    curve.plot(FIGURE)
    print(f"wrote {OUT} and {FIGURE}")


if __name__ == "__main__":
    main()
