"""CAA as Rimsky et al. define it beside the mean-difference (ActAdd-style) vector, on SmolLM2-135M:
the A/B effect and the open-ended effect of each, on held-out items, for two behaviours
(issue 37, item 2).

    PYTHONPATH=. python benchmarks/caa.py            # docs/data/caa.json
    PYTHONPATH=. python benchmarks/caa.py --quick    # 3 layers, 8 test items

Each behaviour's 100 bundled A/B items (lmsci_mi/data/steering/ab_<behaviour>.json, letters
alternating) split into 50 that build the vectors, 10 (dev) that choose each method's layer and
40 (test) that give the effects. CAA: the block output at the answer letter, behaviour letter minus
the other, added from the instruction's end (``Answer:``) on. Mean difference (ActAdd-style): the
mean over the tokens of the 50 behaviour answers minus that of the 50 other answers, added at every
position but the sink. Multipliers count in a norm common to both methods at a layer (the mean of
their raw norms there; see ``scaled``). Each method's layer is the one, of every third, whose dev
A/B shift (p at +4 minus p at -4) is largest. A/B effect: p(behaviour letter) / (p(A) + p(B))
after ``Answer: (`` per test item, by multiplier. Open-ended effect: the test questions alone,
continued by the steering evaluation (20 tokens, T = 1, top-p 0.9, seed 0; perplexity under the
unsteered model, distinct-n), each continuation scored offline for the behaviour (VADER compound;
the topic word score). Intervals: percentile bootstrap over items (1000 resamples), paired with
multiplier 0 for the changes.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import harness
import torch

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.ab_items import AB_BEHAVIOURS, ABItem, ab_items
from lmsci_mi.hooks import PositionScope
from lmsci_mi.positions import Exclude
from lmsci_mi.stats import Interval, bootstrap_interval, paired_bootstrap_interval
from lmsci_mi.steering import (
    MeanDifferenceConfig,
    SteerEvalConfig,
    SteeringVector,
    evaluate_intervention,
)
from lmsci_mi.steering import mean_difference_vector as mean_difference
from lmsci_mi.steering.caa import (
    CAAConfig,
    ab_behaviour_probability,
    caa_scope,
    caa_vector,
    open_prompt,
)
from lmsci_mi.steering.evaluate import ControlCurve, sentiment_scores, topic_scores

METHODS = ("caa", "mean_difference")
SPLIT = (50, 10, 40)
"""Items that build the vectors, choose the layer (dev), and measure the effects (test)."""
LAYER_STEP = 3
"""The dev sweep reads every third layer (CAA sweeps every layer; a third of them keeps the run
within its budget on this CPU)."""
SWEEP_MULTIPLIER = 4.0
"""The dev layer sweep's multiplier, +4 against -4."""
AB_MULTIPLIERS = (-8.0, -4.0, -2.0, 0.0, 2.0, 4.0, 8.0)
OPEN_MULTIPLIERS = (-8.0, -4.0, 0.0, 4.0, 8.0)
"""Multiples of the common norm (see ``scaled``). CAA's grids are -1 ... 1 (A/B) and -2 ... 2
(open-ended) of Llama-2's vectors; on SmolLM2 the raw answer-letter difference has a norm of 1-3,
and at 2x moved p(behaviour) by about 0.01 in a --quick run, so the grid is wider."""
EVAL = SteerEvalConfig(progress=False)
SCORERS: dict[str, Callable[[Sequence[str]], list[float]]] = {"sentiment": sentiment_scores, "topic": topic_scores}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")


def interval(i: Interval) -> dict[str, float]:
    return {"mean": i.estimate, "low": i.low, "high": i.high}


def build(lm: LensModel, method: str, items: Sequence[ABItem], layer: int) -> SteeringVector:
    if method == "caa":
        return caa_vector(lm, items, CAAConfig(layer=layer))
    return mean_difference(lm, [i.behaviour_text for i in items], [i.other_text for i in items],
                           MeanDifferenceConfig(layer=layer, read="mean"))


def scaled(lm: LensModel, method: str, items: Sequence[ABItem], layer: int) -> tuple[SteeringVector, float, float]:
    """``method``'s vector at ``layer`` scaled to the mean norm of both methods' raw vectors there,
    as CAA's normalize_vectors.py scales each behaviour's vector to the mean norm across behaviours;
    at one layer a multiplier then moves the residual stream equally far under either method (each
    method runs at its own layer). Also returns the raw norm and the common one."""
    raw = {m: build(lm, m, items, layer) for m in METHODS}
    common = sum(v.norm for v in raw.values()) / len(raw)
    return raw[method].scaled(common), raw[method].norm, common


def ab_scope(lm: LensModel, method: str, items: Sequence[ABItem]) -> PositionScope | None:
    """CAA's positions (None: ab_behaviour_probability's default), or every position but the sink."""
    return None if method == "caa" else PositionScope.all(exclude=Exclude(sink=lm.sink_token_id is not None))


def sweep(cache: harness.ItemCache, lm: LensModel, behaviour: str, layers: Sequence[int],
          train: Sequence[ABItem], dev: Sequence[ABItem]) -> dict[str, dict[str, dict[str, float]]]:
    """Per method and layer: the dev A/B shift p(+m) - p(-m) (vectors at their common norm) and
    the raw and common norms."""
    out: dict[str, dict[str, dict[str, float]]] = {m: {} for m in METHODS}
    for layer in layers:
        def compute(layer: int = layer) -> dict[str, dict[str, float]]:
            raw = {m: build(lm, m, train, layer) for m in METHODS}
            common = sum(v.norm for v in raw.values()) / len(raw)
            row = {}
            for method, v in raw.items():
                p = [ab_behaviour_probability(lm, dev, v.scaled(common), s * SWEEP_MULTIPLIER,
                                              ab_scope(lm, method, dev)).mean() for s in (1.0, -1.0)]
                row[method] = {"shift": float(p[0] - p[1]), "norm": v.norm, "common_norm": common}
            return row

        for method, value in cache.get(f"sweep-{behaviour}-{layer}", compute).items():
            out[method][str(layer)] = value
    return out


def ab_effect(lm: LensModel, v: SteeringVector, method: str, test: Sequence[ABItem]) -> dict[str, object]:
    """p(behaviour letter) per multiplier, and its paired change from multiplier 0."""
    per_item = {m: ab_behaviour_probability(lm, test, v, m, ab_scope(lm, method, test)).double()
                for m in AB_MULTIPLIERS}
    base = per_item[0.0]
    return {
        "multipliers": list(AB_MULTIPLIERS),
        "p": [interval(bootstrap_interval(per_item[m])) for m in AB_MULTIPLIERS],
        "change": [interval(paired_bootstrap_interval(per_item[m], base)) for m in AB_MULTIPLIERS],
        "per_item": {str(m): per_item[m].tolist() for m in AB_MULTIPLIERS},
    }


def open_effect(curve: ControlCurve, behaviour: str) -> dict[str, object]:
    """The behaviour score per multiplier (and its paired change from 0), perplexity, distinct-n."""
    scores = [torch.tensor(SCORERS[behaviour](texts), dtype=torch.float64) for texts in curve.continuations]
    base = scores[[s[0] for s in curve.settings].index(0.0)]
    return {
        "multipliers": [s[0] for s in curve.settings],
        "score": [interval(bootstrap_interval(s)) for s in scores],
        "change": [interval(paired_bootstrap_interval(s, base)) for s in scores],
        "perplexity": curve.metric("perplexity").tolist(),
        "perplexity_se": curve.error("perplexity").tolist(),
        **{f"distinct_{n}": curve.metric(f"distinct_{n}").tolist() for n in (1, 2, 3)},
        "examples": {str(s[0]): list(texts[:2]) for s, texts in zip(curve.settings, curve.continuations, strict=True)},
    }


def behaviour_data(run: harness.Run, cache: harness.ItemCache, lm: LensModel, behaviour: str) -> dict[str, object]:
    bundle = ab_items(behaviour)
    train, dev, test = bundle.split(*SPLIT)
    layers = (lm.cfg.n_layers // 5, lm.cfg.n_layers // 3, lm.cfg.n_layers // 2) if run.quick else range(
        0, lm.cfg.n_layers, LAYER_STEP)
    if run.quick:
        test = test[:8]
    shifts = sweep(cache, lm, behaviour, layers, train, dev)
    methods = {}
    for method in METHODS:
        layer = int(max(shifts[method], key=lambda k: shifts[method][k]["shift"]))
        v, raw_norm, common = scaled(lm, method, train, layer)
        ab = cache.get(f"ab-{behaviour}-{method}", lambda v=v, method=method: ab_effect(lm, v, method, test))
        prompts = [open_prompt(i) for i in test]
        scope = caa_scope(lm, prompts) if method == "caa" else ab_scope(lm, method, test)
        curve = cache.result(f"open-{behaviour}-{method}", lambda v=v, scope=scope, prompts=prompts, name=method:
                             evaluate_intervention(lm, lambda c: v.apply(lm, c, scope), OPEN_MULTIPLIERS, EVAL,
                                                   name=name, prompts=prompts))
        methods[method] = {"layer": layer, "hook": v.hook, "norm": raw_norm, "common_norm": common, "ab": ab,
                           "open": open_effect(curve, behaviour)}
    return {"items": {"n": len(bundle), "vector": SPLIT[0], "dev": SPLIT[1], "test": len(test),
                      "source": bundle.source, "matching": bundle.matching, "not_matching": bundle.not_matching,
                      "scored_by": bundle.scored_by},
            "sweep": shifts, "methods": methods}


def main() -> None:
    torch.set_grad_enabled(False)
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    began = time.perf_counter()
    lm = load_model(run.args.model)
    cache = run.cache({**run.settings(), "eval": harness.flat_params(EVAL), "split": SPLIT,
                       "grid": [LAYER_STEP, SWEEP_MULTIPLIER, AB_MULTIPLIERS, OPEN_MULTIPLIERS], "scale": "common"})
    data: dict[str, object] = {
        "model": lm.name,
        "methods": {"caa": "CAA (Rimsky et al. 2024): block output at the answer letter, behaviour minus other "
                           "letter, added from the instruction's end (Answer:) on",
                    "mean_difference": "mean difference (ActAdd-style): mean over the tokens of the behaviour "
                                       "answers minus the other answers, added at every position but the sink"},
        "sampling": {"max_new_tokens": EVAL.generation.max_new_tokens, "temperature": EVAL.generation.temperature,
                     "top_p": EVAL.generation.top_p, "seed": EVAL.generation.seed, "samples_per_prompt": 1},
        "sweep_multiplier": SWEEP_MULTIPLIER, "layer_step": LAYER_STEP,
        "scale": "multiples of the common norm: the mean of both methods' raw vector norms at the layer",
        "bootstrap": "percentile, 1000 resamples, 95 %",
        "behaviours": {},
    }
    for behaviour in AB_BEHAVIOURS:
        with run.timed(behaviour):
            data["behaviours"][behaviour] = behaviour_data(run, cache, lm, behaviour)
    data["seconds"] = time.perf_counter() - began
    run.write(data)
    for behaviour, b in data["behaviours"].items():
        for method, m in b["methods"].items():
            ab = m["ab"]["change"][AB_MULTIPLIERS.index(SWEEP_MULTIPLIER)]
            print(f"{behaviour} {method} layer {m['layer']}: A/B change at +{SWEEP_MULTIPLIER:g} {ab['mean']:+.3f} "
                  f"[{ab['low']:+.3f}, {ab['high']:+.3f}]")


if __name__ == "__main__":
    main()
