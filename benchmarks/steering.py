"""Full LM-Steer run on SmolLM2-135M: training cost, the sentiment control curve, composition with
the topic steer, the SVD probe, keyword highlighting, and transfer to Gemma 3 270M.

    PYTHONPATH=. python benchmarks/steering.py                 # everything; docs/data/steering.json
    PYTHONPATH=. python benchmarks/steering.py --no-transfer   # skip Gemma (writes no data file)
    PYTHONPATH=. python benchmarks/steering.py --quick --model toy-2l --transfer-to toy-gpt2-2l

One steer is trained jointly for sentiment and topic (plus the dummy) on the bundled texts; the
trained steer (the library's cache) and every evaluation (the harness's per-item cache, keyed by
the steer and the settings) are cached, so a rerun only prints. Run it alone on the machine: it
times training (about 5 min on two cores); the training costs in the data file are the ones
recorded by the run that trained the steer (``training.trained_this_run`` says whether that was
this run).

Writes docs/data/steering.json (the control curve, the composition grid and the transfer to Gemma,
each metric with its standard error over the prompts, plus paired standard errors of the gaps
quoted on docs/steering.md) and docs/img/steering_control_curve.png; figures, the steers and the
SVD words go to ``--artefacts`` (out/steering). The end value s of the curve is the largest of 2,
1, 0.5 whose ±s perplexity stays within 1.5x the unsteered model's
(``lmsci_mi.steering.symmetric_strength_within_budget``).
"""

from __future__ import annotations

import argparse
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import harness
import torch
from doc_tables.schemas import ValueSE
from doc_tables.schemas.steering import (
    Composition,
    Curve,
    CurveRow,
    CurveSummary,
    HighlightRow,
    SettingRow,
    SteeringData,
    SVDProbe,
    TrainingInfo,
    Transfer,
)

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.steering_texts import steering_texts
from lmsci_mi.stats import mean_se, ratio_standard_error
from lmsci_mi.steering import (
    ControlCurve,
    HighlightConfig,
    LMSteer,
    LMSteerConfig,
    SteerEvalConfig,
    SteerTrainConfig,
    SteerTraining,
    SVDConfig,
    evaluate_settings,
    highlight_keywords,
    steer_svd,
    symmetric_strength_within_budget,
    train_steer,
    transfer_steer,
)
from lmsci_mi.steering.evaluate import METRICS, sentiment_scores, topic_scores
from lmsci_mi.steering.train import cached_steer_paths

FIGURE = harness.ROOT / "docs" / "img" / "steering_control_curve.png"
STEER = LMSteerConfig()
TRAIN = SteerTrainConfig(steps=200, batch_tokens=512)
GRID = (-2.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.0)
"""Steer values of the control curve (the dummy at 1 throughout); the summary reads -s, -s/2, 0,
s/2, s at the end value s."""
END_VALUES = (2.0, 1.0, 0.5)
"""The candidates for s."""
COMPOSITION = 2.0
"""Both steers' magnitude in the composition grid."""
TRANSFER = 1.0
"""The steer value at which the transfer's +s/−s gap is compared."""
EVAL = SteerEvalConfig(values=GRID, n_prompts=60)  # LM-Steer's sampling: T = 1, top-p 0.9, 20 tokens
SENTENCES = (
    "The staff were wonderful and the food was absolutely delicious.",
    "The room was filthy, the staff were rude and the trip was a disaster.",
)
STANDARD_ERRORS = ("over prompts (one sample each, so prompt and sampling variation together); perplexity's by "
                   "the delta method on the per-prompt mean NLL; gaps between settings are paired per prompt")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--transfer-to", default="gemma3-270m", help="the model the steer is transferred to")
    parser.add_argument("--no-transfer", action="store_true", help="skip the transfer (writes no data file)")
    parser.add_argument("--artefacts", type=Path, default=Path("out/steering"),
                        help="figures, steers and tables besides the data file")


# --- the metrics ------------------------------------------------------------------------------


def per_prompt(curve: ControlCurve) -> dict[str, torch.Tensor]:
    """Per setting and prompt, the sentiment and topic scores of the stored continuations
    (``[setting, prompt]``): the paired differences between settings need them."""
    return {
        "sentiment": torch.tensor([sentiment_scores(c) for c in curve.continuations], dtype=torch.float64),
        "topic": torch.tensor([topic_scores(c) for c in curve.continuations], dtype=torch.float64),
    }


def difference(scores: dict[str, torch.Tensor], metric: str, a: int, b: int) -> ValueSE:
    """Row ``a`` minus row ``b`` of one metric, with the standard error of the paired per-prompt
    differences (every setting samples the same prompts with the same seed)."""
    d = mean_se(scores[metric][a] - scores[metric][b])
    return ValueSE(value=d.mean, se=d.se)


def metrics_row(values: list[float] | tuple[float, ...], errors: list[float] | tuple[float, ...]) -> CurveRow:
    """Every metric and its standard error over prompts (distinct-n is a statistic of the whole
    set of continuations: no standard error)."""
    row: dict = {}
    for j, name in enumerate(METRICS):
        row[name] = float(values[j])
        if not name.startswith("distinct"):
            row[f"{name}_se"] = float(errors[j])
    return row


def curve_rows(curve: ControlCurve) -> list[SettingRow]:
    return [SettingRow(setting=dict(zip(curve.attributes, setting, strict=True)),
                       **metrics_row(curve.values[i].tolist(), curve.errors[i]))
            for i, setting in enumerate(curve.settings)]


# --- the steps ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trained:
    steer: LMSteer
    run: SteerTraining
    path: Path
    """The steer saved under ``--artefacts``."""
    now: bool
    """Whether this run trained it (else the library's cache held it)."""
    load: tuple[float, float]
    """The 1-minute load average before and after training."""


def train(lm: LensModel, folder: Path, steps: int) -> Trained:
    texts = steering_texts(["sentiment", "topic"])
    config = SteerTrainConfig(steps=steps, batch_tokens=TRAIN.batch_tokens)
    now = not cached_steer_paths(lm, texts, STEER, config)[0].is_file()
    before = os.getloadavg()[0]
    steer, run = train_steer(lm, texts, STEER, config)
    after = os.getloadavg()[0]
    print(f"## Training ({lm.name}, {steer})\n\n{run.n_texts} texts, {run.n_tokens} next-token targets; {steps} "
          f"steps of {config.batch_tokens} tokens, Adam lr {config.lr}; loss: unsteered {run.unsteered_loss:.3f} -> "
          f"steered {run.final_loss:.3f} (last tenth); cost: collect {run.collect_seconds:.1f} s + train "
          f"{run.train_seconds:.1f} s\n")
    run.plot(folder / "loss.png")
    return Trained(steer, run, steer.save(folder / "steer-sentiment-topic.safetensors"), now, (before, after))


def training_info(t: Trained, steps: int) -> TrainingInfo:
    conditions = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                  "load_average_1min_before_after": list(t.load),
                  "note": "the training record's own timings; measured on a shared machine (not quiet)"}
    return TrainingInfo(
        n_texts=t.run.n_texts, n_tokens=t.run.n_tokens, steps=steps, batch_tokens=TRAIN.batch_tokens, lr=TRAIN.lr,
        seed=TRAIN.seed, unsteered_loss=t.run.unsteered_loss, final_loss=t.run.final_loss,
        final_loss_over="the last tenth of the steps", collect_seconds=t.run.collect_seconds,
        train_seconds=t.run.train_seconds, seconds_per_step=t.run.train_seconds / steps, trained_this_run=t.now,
        cost_conditions=conditions if t.now else "recorded by an earlier run that trained the cached steer",
    )


def curve_summary(curve: ControlCurve) -> CurveSummary:
    """The curve at its end value s: the five points -s … s, monotonicity, the ±s, ±1 and ±2
    gaps (paired), and the perplexity there against the unsteered model's."""
    ppl0 = curve.unsteered[METRICS.index("perplexity")]
    ppl = dict(zip(GRID, curve.metric("perplexity").tolist(), strict=True))
    sent = dict(zip(GRID, curve.metric("sentiment").tolist(), strict=True))
    s = symmetric_strength_within_budget(curve, END_VALUES, attribute="sentiment")
    at_s = [-s, -s / 2, 0.0, s / 2, s]
    scores, at = per_prompt(curve), {v: i for i, v in enumerate(GRID)}
    print(f"s = {s:g}: sentiment at -s … s = {', '.join(f'{sent[v]:+.3f}' for v in at_s)}; perplexity at -s / +s = "
          f"{ppl[-s] / ppl0:.2f}x / {ppl[s] / ppl0:.2f}x unsteered ({ppl0:.2f})\n")
    return CurveSummary(
        s=s, rule="the largest of 2, 1, 0.5 whose perplexity at +s and -s is within 1.5x the unsteered model's",
        values_at=at_s, sentiment_at=[sent[v] for v in at_s],
        monotone_at_s=all(a < b for a, b in itertools.pairwise(sent[v] for v in at_s)),
        monotone_whole_grid=curve.is_monotone("sentiment"),
        gap=difference(scores, "sentiment", at[s], at[-s]),
        perplexity_ratio_minus=ppl[-s] / ppl0, perplexity_ratio_plus=ppl[s] / ppl0,
        gap_at_1=difference(scores, "sentiment", at[1.0], at[-1.0]),
        perplexity_ratio_minus_1=ppl[-1.0] / ppl0, perplexity_ratio_plus_1=ppl[1.0] / ppl0,
        gap_at_2=difference(scores, "sentiment", at[2.0], at[-2.0]),
        dummy_minus_unsteered={
            "perplexity": [ppl0, ppl[0.0]],
            "distinct_1": [curve.unsteered[METRICS.index("distinct_1")], float(curve.metric("distinct_1")[at[0.0]])],
        },
    )


def control_curve(curve: ControlCurve) -> Curve:
    return Curve(rows=curve_rows(curve), unsteered=metrics_row(curve.unsteered, curve.unsteered_errors),
                 summary=curve_summary(curve), sample_prompts=list(curve.meta.prompts[:2]),
                 samples={label: list(c[:2]) for label, c in zip(curve.axis_labels(0), curve.continuations, strict=True)})


def composition_grid() -> list[dict[str, float]]:
    s = t = COMPOSITION
    return [{"sentiment": a, "topic": b} for a, b in ((0, 0), (s, 0), (0, t), (s, t), (-s, -t), (s, -t), (-s, t))]


def composition(both: ControlCurve) -> Composition:
    """Both steers at once: each steer's effect with the other on, and together (paired)."""
    s = t = COMPOSITION
    scores, index = per_prompt(both), {tuple(v): i for i, v in enumerate(both.settings)}
    effects = {
        "sentiment_at_topic_plus": difference(scores, "sentiment", index[(s, t)], index[(-s, t)]),
        "topic_at_sentiment_plus": difference(scores, "topic", index[(s, t)], index[(s, -t)]),
        "both_sentiment": difference(scores, "sentiment", index[(s, t)], index[(-s, -t)]),
        "both_topic": difference(scores, "topic", index[(s, t)], index[(-s, -t)]),
        "topic_alone_sentiment": difference(scores, "sentiment", index[(0, t)], index[(0, 0)]),
    }
    print("\n".join(f"{k}: {v['value']:+.3f} ± {v['se']:.3f}" for k, v in effects.items()))
    return Composition(value=COMPOSITION, rows=curve_rows(both),
                       unsteered=metrics_row(both.unsteered, both.unsteered_errors), effects=effects)


def svd_probe(lm: LensModel, steer: LMSteer, folder: Path) -> SVDProbe:
    probe = steer_svd(lm, steer, SVDConfig(n_directions=3))
    print(f"SVD direction 0: raised {' '.join(probe.top_words[0])}; lowered {' '.join(probe.bottom_words[0])}; "
          f"end-word valence {probe.end_valence:.3f} vs random {probe.random_valence:.3f}")
    probe.to_dataframe().to_csv(folder / "svd_words.csv", index=False)
    return SVDProbe(singular_values=probe.values.tolist(), raised=list(probe.top_words[0]),
                    lowered=list(probe.bottom_words[0]), end_valence=probe.end_valence,
                    random_valence=probe.random_valence, random_words=list(probe.random_words),
                    n_end_words=len(probe.top_words[0]) + len(probe.bottom_words[0]))


def highlights(lm: LensModel, steer: LMSteer, folder: Path) -> list[HighlightRow]:
    """Keyword highlighting: 4 spans of at most 10 tokens at s = ±5."""
    rows = []
    for sentence, sign in zip(SENTENCES, (1, -1), strict=True):
        config = HighlightConfig(value=5.0 * sign)
        result = highlight_keywords(lm, steer, sentence, config)
        result.save_html(folder / f"highlight_{'positive' if sign > 0 else 'negative'}.html")
        print(f"{sentence}\n  evidence for the {'positive' if sign > 0 else 'negative'} pole: {result.span_texts()}")
        rows.append(HighlightRow(text=sentence, value=config.value, spans=result.span_texts()))
    return rows


def transfer(run: harness.Run, cache: harness.ItemCache, lm: LensModel, steer: LMSteer, config: SteerEvalConfig,
             source_gap: ValueSE) -> Transfer:
    """The steer moved to ``--transfer-to``: its ±TRANSFER gap there against the source's. The two
    models' samples are independent: the ratio's standard error by the delta method."""
    target = load_model(run.args.transfer_to)
    moved, fit = transfer_steer(steer, lm, target)
    print(f"\n## Transfer to {target.name}: map on {fit.n_shared} shared token strings, held-out R² {fit.r2:.3f}")
    with run.timed("transfer"):
        moved_curve = cache.result(f"transfer-{target.name}", lambda: evaluate_settings(
            target, moved, [{"sentiment": -TRANSFER}, {"sentiment": TRANSFER}], config))
    LMSteer.save(moved, run.args.artefacts / f"steer-{target.name}.safetensors")
    gap = difference(per_prompt(moved_curve), "sentiment", 1, 0)
    kept = gap["value"] / source_gap["value"]
    kept_se = ratio_standard_error(gap["value"], gap["se"], source_gap["value"], source_gap["se"])
    print(f"gap(+{TRANSFER:g}, -{TRANSFER:g}) on {target.name}: {gap['value']:+.3f}; fraction kept {kept:.2f}")
    return Transfer(to=target.name, n_shared=fit.n_shared, r2=fit.r2, value=TRANSFER, rows=curve_rows(moved_curve),
                    unsteered=metrics_row(moved_curve.unsteered, moved_curve.unsteered_errors), gap=gap,
                    source_gap=source_gap, fraction_kept=kept, fraction_kept_se=kept_se)


def main() -> None:
    torch.manual_seed(0)
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    folder = run.args.artefacts
    folder.mkdir(parents=True, exist_ok=True)
    quick = EVAL.replace(n_prompts=4, generation=EVAL.generation.replace(max_new_tokens=5))
    steps, config = (20, quick) if run.quick else (TRAIN.steps, EVAL)
    lm = load_model(run.args.model)
    with run.timed("train"):
        trained = train(lm, folder, steps)
    steer = trained.steer
    # Every evaluation depends on the steer (its file size and weights' sum stand for it) too.
    cache = run.cache({**run.settings(exclude=["artefacts", "no_transfer"]), "eval": harness.flat_params(config),
                       "steer": trained.path.stat().st_size, "p1": float(steer.p1.detach().sum())})
    with run.timed("curve"):
        curve = cache.result("curve", lambda: evaluate_settings(lm, steer, [{"sentiment": v} for v in GRID], config))
        both = cache.result("composition", lambda: evaluate_settings(lm, steer, composition_grid(), config))
    print(curve.summary())
    curve.plot(folder / "control_curve.png")
    control, mixed = control_curve(curve), composition(both)
    svd, keywords = svd_probe(lm, steer, folder), highlights(lm, steer, folder)
    if run.args.no_transfer:
        return
    sampling = config.generation
    run.write(SteeringData(
        model=lm.name, steer={"attributes": list(steer.attributes), **STEER.params(),
                              "file_bytes": trained.path.stat().st_size},
        training=training_info(trained, steps),
        evaluation={"prompts": config.n_prompts, "samples_per_prompt": 1, "max_new_tokens": sampling.max_new_tokens,
                    "temperature": sampling.temperature, "top_p": sampling.top_p, "seed": sampling.seed,
                    "prompts_source": "the bundled neutral prompts", "standard_errors": STANDARD_ERRORS},
        curve=control, composition=mixed, svd=svd, highlight=keywords,
        transfer=transfer(run, cache, lm, steer, config, control["summary"]["gap_at_1"]),
    ))
    curve.plot(harness.QUICK / FIGURE.name if run.quick else FIGURE)


if __name__ == "__main__":
    main()
