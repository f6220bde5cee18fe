"""Three ways to steer SmolLM2-135M towards positive sentiment, side by side (issue 24): a
mean-difference vector (ActAdd-style) at its best layer, the shipped LM-Steer, and the best
feature of the shipped SAE, on the same prompts and seeds.

    PYTHONPATH=. python benchmarks/steering_compare.py              # docs/data/steering_compare.json
    PYTHONPATH=. python benchmarks/steering_compare.py --plot-only  # redraw the figure from the data
    PYTHONPATH=. python benchmarks/steering_compare.py --quick      # 2 layers, 2 features, 8 prompts

The 60 bundled neutral prompts are split: 20 (dev) choose the mean-difference vector's layer and the SAE feature,
40 (test) give the curves. Every curve is the existing steering evaluation (one 20-token sample
per prompt, T = 1, top-p 0.9, seed 0; VADER sentiment, perplexity under the unsteered model,
distinct-n; standard errors over prompts). The comparison reads each curve at its largest
strength whose perplexity stays within 1.5x the unsteered model's (the "budget":
``lmsci_mi.steering.at_fluency_budget``; the dev choice is ``choose_within_budget``). Each curve
is cached as it finishes, so a stopped run resumes. Also draws docs/img/steering_compare.png.
The vector here is a mean difference over free text (ActAdd-style), not CAA as Rimsky et al.
define it (read at the answer letter of A/B items): that one is benchmarks/caa.py.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import harness
import torch
from doc_tables.schemas.steering import AtBudget, CompareCurve, DevPoint, SteeringCompareData

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.contrasts import contrast_pairs
from lmsci_mi.data.steering_texts import neutral_prompts, steering_texts
from lmsci_mi.sae import (
    LensSAE,
    SAEDataConfig,
    SAETrainConfig,
    promoted_tokens,
    steer_with_sae_feature,
    train_sae,
)
from lmsci_mi.sae.compact import dropped_features
from lmsci_mi.steering import (
    ControlCurve,
    MeanDifferenceConfig,
    SteerEvalConfig,
    SteeringVector,
    at_fluency_budget,
    choose_within_budget,
    evaluate_intervention,
    mean_difference_vector,
    train_steer,
)
from lmsci_mi.steering.budget import FLUENCY_BUDGET
from lmsci_mi.steering.evaluate import vader_valence

FIGURE = harness.ROOT / "docs" / "img" / "steering_compare.png"
MEAN_DIFFERENCE_LAYERS = (3, 6, 9, 12, 15, 18, 21, 24)
MEAN_DIFFERENCE_VALUES = (0.0, 1.0, 2.0, 4.0, 8.0)
"""Multiples of the raw mean difference."""
LM_STEER_VALUES = (0.0, 0.25, 0.5, 1.0, 2.0)
SAE_VALUES = (0.0, 1.0, 2.0, 4.0, 8.0)
"""Multiples of the feature's typical maximum activation."""
SELECT_AT = {"mean_difference": 4.0, "sae": 4.0}
"""The strength at which dev prompts choose the mean-difference vector's layer and the SAE feature."""
N_FEATURE_CANDIDATES = 8
EVAL = SteerEvalConfig(progress=False)
"""The existing steering evaluation's sampling and metrics, for every curve."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--plot-only", action="store_true", help="redraw the figure from the data file")


def at_budget(curve: ControlCurve) -> AtBudget:
    """The curve's point at its largest strength within the perplexity budget."""
    p = at_fluency_budget(curve, FLUENCY_BUDGET)
    return AtBudget(strength=p.strength, sentiment=p.value, sentiment_se=p.value_se, perplexity=p.perplexity,
                    perplexity_se=p.perplexity_se, distinct_2=float(curve.metric("distinct_2")[p.index]),
                    gain=p.gain, budget_perplexity=p.budget_perplexity)


def curve_json(curve: ControlCurve) -> CompareCurve:
    return CompareCurve(
        strengths=[s[0] for s in curve.settings], sentiment=curve.metric("sentiment").tolist(),
        sentiment_se=curve.error("sentiment").tolist(), perplexity=curve.metric("perplexity").tolist(),
        perplexity_se=curve.error("perplexity").tolist(), distinct_2=curve.metric("distinct_2").tolist(),
        unsteered=list(curve.unsteered), unsteered_se=list(curve.unsteered_errors),
        examples=list(curve.continuations[-1][:3]),
    )


def dev_points(curves: dict) -> dict[str, DevPoint]:
    return {str(k): DevPoint(sentiment=float(c.metric("sentiment")[0]), perplexity=float(c.metric("perplexity")[0]))
            for k, c in curves.items()}


def positive_features(lm: LensModel, sae: LensSAE, n: int) -> dict[int, float]:
    """The live features whose 10 promoted tokens have the highest mean VADER valence."""
    dropped = dropped_features(sae) if "shipped" in sae.info else torch.zeros(sae.d_sae, dtype=torch.bool)
    live = [i for i in range(sae.d_sae) if not bool(dropped[i]) and float(sae.feature_scale[i]) > 0]
    ids, _ = promoted_tokens(lm, sae, live)
    valence = [sum(vader_valence(lm.tokenizer.decode([t]).strip()) for t in top) / len(top) for top in ids]
    ranked = sorted(range(len(live)), key=lambda j: -valence[j])[:n]
    return {live[j]: valence[j] for j in ranked}


def evaluate(cache: harness.ItemCache, item: str, lm: LensModel, intervention: Callable, values: Sequence[float],
             prompts: list[str], name: str = "coefficient") -> ControlCurve:
    """The intervention's control curve on ``prompts``, cached as ``item``."""
    return cache.result(item, lambda: evaluate_intervention(lm, intervention, values, EVAL, name=name,
                                                            prompts=prompts))


def mean_difference_vectors(lm: LensModel, layers: Sequence[int]) -> dict[int, SteeringVector]:
    """Mean-difference (ActAdd-style) vectors from 100 positive and 100 negative first-person remarks (the
    LM-Steer training texts' set), read as the mean over each remark's tokens, added at every
    position but the sink."""
    pairs = contrast_pairs("sentiment", template=False)
    return {layer: mean_difference_vector(lm, pairs.positive, pairs.negative,
                                          MeanDifferenceConfig(layer=layer, read="mean"))
            for layer in layers}


@dataclass(frozen=True)
class Choice:
    """What the dev prompts chose, and the dev curves behind it."""

    vector: SteeringVector
    layer: int
    dev_vector: dict[int, ControlCurve]
    sae: LensSAE
    feature: int
    candidates: dict[int, float]
    dev_sae: dict[int, ControlCurve]


def choose_on_dev(run: harness.Run, lm: LensModel, cache: harness.ItemCache, dev: list[str]) -> Choice:
    """The mean-difference vector's layer and the SAE feature, each the candidate with the highest dev sentiment
    within the budget at its selection strength."""
    # --quick: two layers (6 and 15 of SmolLM2's 30) and two candidate features
    quick = ((lm.cfg.n_layers // 5, lm.cfg.n_layers // 2), 2)
    layers, n_candidates = quick if run.quick else (MEAN_DIFFERENCE_LAYERS, N_FEATURE_CANDIDATES)
    vectors = mean_difference_vectors(lm, layers)
    dev_vector = {layer: evaluate(cache, f"dev-mean-difference-{layer}", lm, lambda c, v=v: v.apply(lm, c),
                                  [SELECT_AT["mean_difference"]], dev)
                  for layer, v in vectors.items()}
    unsteered = next(iter(dev_vector.values())).unsteered[2]
    sae, _ = train_sae(lm, SAEDataConfig(), SAETrainConfig())
    candidates = positive_features(lm, sae, n_candidates)
    dev_sae = {f: evaluate(cache, f"dev-sae-{f}", lm, lambda c, f=f: steer_with_sae_feature(lm, sae, f, c),
                           [SELECT_AT["sae"]], dev)
               for f in candidates}
    layer = choose_within_budget(dev_vector, unsteered, FLUENCY_BUDGET)
    feature = choose_within_budget(dev_sae, unsteered, FLUENCY_BUDGET)
    return Choice(vectors[layer], layer, dev_vector, sae, feature, candidates, dev_sae)


def held_out_curves(lm: LensModel, cache: harness.ItemCache, choice: Choice, test: list[str]) -> dict[str, ControlCurve]:
    """Each method's whole curve on the test prompts."""
    with torch.enable_grad():  # the shipped steer loads; any other model's trains
        steer, _ = train_steer(lm, steering_texts("sentiment"))
    return {
        "mean_difference": evaluate(cache, "mean-difference", lm, lambda c: choice.vector.apply(lm, c),
                                    MEAN_DIFFERENCE_VALUES, test, "mean_difference"),
        "lm_steer": evaluate(cache, "lm_steer", lm, lambda c: steer.apply(lm, {"sentiment": c}), LM_STEER_VALUES,
                             test, "lm_steer"),
        "sae": evaluate(cache, "sae", lm, lambda c: steer_with_sae_feature(lm, choice.sae, choice.feature, c),
                        SAE_VALUES, test, "sae"),
    }


def document(lm: LensModel, choice: Choice, curves: dict[str, ControlCurve], dev: list[str],
             test: list[str]) -> SteeringCompareData:
    v = choice.vector
    return SteeringCompareData(
        model=lm.name,
        prompts={"dev": len(dev), "test": len(test), "source": "bundled neutral prompts (dev: 41-60, test: 1-40)"},
        sampling={"max_new_tokens": EVAL.generation.max_new_tokens, "temperature": EVAL.generation.temperature,
                  "top_p": EVAL.generation.top_p, "seed": EVAL.generation.seed, "samples_per_prompt": 1},
        budget=f"perplexity <= {FLUENCY_BUDGET} x unsteered",
        mean_difference={"layer": choice.layer, "site": v.hook, "read": "mean", "scope": "all positions but the sink",
             "vector_norm": v.norm, "n_pairs": len(contrast_pairs("sentiment", template=False).positive),
             "dev": dev_points(choice.dev_vector)},
        sae={"feature": choice.feature, "hook": choice.sae.hook,
             "candidates": {str(k): x for k, x in choice.candidates.items()}, "dev": dev_points(choice.dev_sae)},
        lm_steer={"texts": "sentiment", "steer": "the shipped LM-Steer (seed 0)"},
        curves={k: curve_json(c) for k, c in curves.items()},
        at_budget={k: at_budget(c) for k, c in curves.items()},
        seconds=0.0,
    )


def plot(data: SteeringCompareData, path: Path = FIGURE) -> None:
    """Sentiment against perplexity per method, each point labelled with its strength."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.6))
    ax = fig.add_subplot()
    labels = {"mean_difference": f"mean difference (ActAdd-style), layer {data['mean_difference']['layer']}",
              "lm_steer": "LM-Steer (steer value, dummy on)",
              "sae": f"SAE feature {data['sae']['feature']} (× typical max)"}
    for name, curve in data["curves"].items():
        line = ax.errorbar(curve["perplexity"], curve["sentiment"], xerr=curve["perplexity_se"],
                           yerr=curve["sentiment_se"], fmt="o-", capsize=2, label=labels[name])
        for x, y, strength in zip(curve["perplexity"], curve["sentiment"], curve["strengths"], strict=True):
            ax.annotate(f"{strength:g}", (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=line[0].get_color())
    base = next(iter(data["curves"].values()))["unsteered"]
    ax.plot([base[2]], [base[0]], "k*", ms=10, label="unsteered")
    ax.axvline(FLUENCY_BUDGET * base[2], ls=":", color="grey", label=f"{FLUENCY_BUDGET}x unsteered perplexity")
    ax.set_xscale("log")
    ax.set_xlabel("perplexity of the continuations under the unsteered model (log)")
    ax.set_ylabel("mean VADER sentiment (± s.e. over prompts)")
    ax.set_title(f"Positive-sentiment steering on {data['model']}: {data['prompts']['test']} test prompts, "
                 "one sample each", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    torch.set_grad_enabled(False)
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    figure = harness.QUICK / FIGURE.name if run.quick else FIGURE
    if run.args.plot_only:
        plot(harness.read_json(run.out), figure)
        return
    began = time.perf_counter()
    lm = load_model(run.args.model)
    prompts = neutral_prompts()
    dev, test = (list(prompts[40:44]), list(prompts[:8])) if run.quick else (list(prompts[40:]), list(prompts[:40]))
    # Every curve depends on these constants too: a changed grid must not read an old curve.
    cache = run.cache({**run.settings(exclude=["plot_only"]), "eval": harness.flat_params(EVAL), "select_at": SELECT_AT,
                       "values": [MEAN_DIFFERENCE_VALUES, LM_STEER_VALUES, SAE_VALUES]})
    with run.timed("dev"):
        choice = choose_on_dev(run, lm, cache, dev)
    with run.timed("test"):
        curves = held_out_curves(lm, cache, choice, test)
    data = document(lm, choice, curves, dev, test)
    data["seconds"] = time.perf_counter() - began
    run.write(data)
    plot(data, figure)
    for k, row in data["at_budget"].items():
        print(f"{k}: strength {row['strength']:g}, sentiment {row['sentiment']:.3f} ± {row['sentiment_se']:.3f} "
              f"(gain {row['gain']:+.3f}), perplexity {row['perplexity']:.1f}")


if __name__ == "__main__":
    main()
