"""Three ways to steer SmolLM2-135M towards positive sentiment, side by side (issue 24): a
difference-of-means vector (CAA/ActAdd) at its best layer, the shipped LM-Steer, and the best
feature of the shipped SAE, on the same prompts and seeds.

    PYTHONPATH=. .venv/bin/python benchmarks/steering_compare.py

The 60 bundled neutral prompts are split: 20 (dev) choose the CAA layer and the SAE feature,
40 (test) give the curves. Every curve is the existing steering evaluation (one 20-token sample
per prompt, T = 1, top-p 0.9, seed 0; VADER sentiment, perplexity under the unsteered model,
distinct-n; standard errors over prompts). The comparison reads each curve at its largest
strength whose perplexity stays within 1.5x the unsteered model's (the "budget").
Writes docs/data/steering_compare.json and docs/img/steering_compare.png.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.data.contrasts import contrast_pairs
from lmsci_mi.data.steering_texts import neutral_prompts, steering_texts
from lmsci_mi.sae import SAEDataConfig, SAETrainConfig, steer_with_sae_feature, train_sae
from lmsci_mi.sae.compact import dropped_features
from lmsci_mi.sae.features import promoted_tokens
from lmsci_mi.steering import (
    ControlCurve,
    MeanDifferenceConfig,
    SteerEvalConfig,
    evaluate_intervention,
    mean_difference_vector,
    train_steer,
)
from lmsci_mi.steering.evaluate import vader_valence

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "data" / "steering_compare.json"
FIGURE = ROOT / "docs" / "img" / "steering_compare.png"
BUDGET = 1.5
"""A strength is within budget when its perplexity is at most this multiple of the unsteered."""
CAA_LAYERS = (3, 6, 9, 12, 15, 18, 21, 24)
CAA_VALUES = (0.0, 1.0, 2.0, 4.0, 8.0)
"""Multiples of the raw mean difference (CAA's multiplier)."""
LM_STEER_VALUES = (0.0, 0.25, 0.5, 1.0, 2.0)
SAE_VALUES = (0.0, 1.0, 2.0, 4.0, 8.0)
"""Multiples of the feature's typical maximum activation."""
SELECT_AT = {"caa": 4.0, "sae": 4.0}
"""The strength at which dev prompts choose the CAA layer and the SAE feature."""
N_FEATURE_CANDIDATES = 8


def at_budget(curve: ControlCurve) -> dict:
    """The curve's point at its largest strength within the perplexity budget."""
    limit = BUDGET * curve.unsteered[2]
    ppl = curve.metric("perplexity").tolist()
    within = [i for i, p in enumerate(ppl) if p <= limit] or [0]
    i = max(within)
    return {
        "strength": curve.settings[i][0],
        "sentiment": float(curve.metric("sentiment")[i]),
        "sentiment_se": float(curve.error("sentiment")[i]),
        "perplexity": ppl[i],
        "perplexity_se": float(curve.error("perplexity")[i]),
        "distinct_2": float(curve.metric("distinct_2")[i]),
        "gain": float(curve.metric("sentiment")[i]) - curve.unsteered[0],
        "budget_perplexity": limit,
    }


def choose(curves: dict, unsteered_ppl: float) -> str:
    """The dev candidate with the highest sentiment within budget (else the lowest perplexity)."""
    ok = {k: c for k, c in curves.items() if c.metric("perplexity")[-1] <= BUDGET * unsteered_ppl}
    if ok:
        return max(ok, key=lambda k: float(ok[k].metric("sentiment")[-1]))
    return min(curves, key=lambda k: float(curves[k].metric("perplexity")[-1]))


def curve_json(curve: ControlCurve) -> dict:
    return {
        "strengths": [s[0] for s in curve.settings],
        "sentiment": curve.metric("sentiment").tolist(),
        "sentiment_se": curve.error("sentiment").tolist(),
        "perplexity": curve.metric("perplexity").tolist(),
        "perplexity_se": curve.error("perplexity").tolist(),
        "distinct_2": curve.metric("distinct_2").tolist(),
        "unsteered": list(curve.unsteered),
        "unsteered_se": list(curve.unsteered_errors),
        "examples": list(curve.continuations[-1][:3]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--quick", action="store_true", help="2 layers, 2 features, 8 prompts (smoke test)")
    parser.add_argument("--plot-only", action="store_true", help="redraw the figure from the data file")
    args = parser.parse_args()
    if args.plot_only:
        plot(json.loads(OUT.read_text()))
        return
    start = time.perf_counter()
    lm = load_model(args.model)
    prompts = neutral_prompts()
    dev, test = list(prompts[40:]), list(prompts[:40])
    layers, n_candidates = CAA_LAYERS, N_FEATURE_CANDIDATES
    if args.quick:
        dev, test, layers, n_candidates = dev[:4], test[:8], (6, 15), 2
    config = SteerEvalConfig(progress=False)

    # CAA: 100 positive and 100 negative first-person remarks (the LM-Steer training texts' set),
    # read as the mean over each remark's tokens, added at every position but the sink.
    pairs = contrast_pairs("sentiment", template=False)
    vectors = {
        layer: mean_difference_vector(lm, pairs.positive, pairs.negative, MeanDifferenceConfig(layer=layer, read="mean"))
        for layer in layers
    }
    dev_caa = {
        layer: evaluate_intervention(lm, lambda c, v=v: v.apply(lm, c), [SELECT_AT["caa"]], config, prompts=dev)
        for layer, v in vectors.items()
    }
    unsteered_dev = next(iter(dev_caa.values())).unsteered[2]
    layer = choose(dev_caa, unsteered_dev)
    vector = vectors[layer]

    # SAE: the shipped SAE's features whose promoted tokens are most positive (VADER valence of
    # the top 10), then the best on dev.
    sae, _ = train_sae(lm, SAEDataConfig(), SAETrainConfig())
    dropped = dropped_features(sae) if "shipped" in sae.info else torch.zeros(sae.d_sae, dtype=torch.bool)
    live = [i for i in range(sae.d_sae) if not bool(dropped[i]) and float(sae.feature_scale[i]) > 0]
    ids, _ = promoted_tokens(lm, sae, live)
    valence = [
        sum(vader_valence(lm.tokenizer.decode([t]).strip()) for t in top) / len(top) for top in ids
    ]
    ranked = sorted(range(len(live)), key=lambda j: -valence[j])[:n_candidates]
    candidates = {live[j]: valence[j] for j in ranked}
    dev_sae = {
        f: evaluate_intervention(
            lm, lambda c, f=f: steer_with_sae_feature(lm, sae, f, c), [SELECT_AT["sae"]], config, prompts=dev
        )
        for f in candidates
    }
    feature = choose(dev_sae, unsteered_dev)

    steer, _ = train_steer(lm, steering_texts("sentiment"))
    curves = {
        "caa": evaluate_intervention(lm, lambda c: vector.apply(lm, c), CAA_VALUES, config, name="caa", prompts=test),
        "lm_steer": evaluate_intervention(
            lm, lambda c: steer.apply(lm, {"sentiment": c}), LM_STEER_VALUES, config, name="lm_steer", prompts=test
        ),
        "sae": evaluate_intervention(
            lm, lambda c: steer_with_sae_feature(lm, sae, feature, c), SAE_VALUES, config, name="sae", prompts=test
        ),
    }
    data = {
        "model": lm.name,
        "command": "PYTHONPATH=. .venv/bin/python benchmarks/steering_compare.py",
        "prompts": {"dev": len(dev), "test": len(test), "source": "bundled neutral prompts (dev: 41-60, test: 1-40)"},
        "sampling": {"max_new_tokens": config.max_new_tokens, "temperature": config.temperature,
                     "top_p": config.top_p, "seed": config.seed, "samples_per_prompt": 1},
        "budget": f"perplexity <= {BUDGET} x unsteered",
        "caa": {"layer": layer, "site": vector.hook, "read": "mean", "scope": "all positions but the sink",
                "vector_norm": vector.norm, "n_pairs": len(pairs.positive),
                "dev": {str(k): {"sentiment": float(c.metric("sentiment")[0]), "perplexity": float(c.metric("perplexity")[0])}
                        for k, c in dev_caa.items()}},
        "sae": {"feature": feature, "hook": sae.hook, "candidates": candidates,
                "dev": {str(k): {"sentiment": float(c.metric("sentiment")[0]), "perplexity": float(c.metric("perplexity")[0])}
                        for k, c in dev_sae.items()}},
        "lm_steer": {"texts": "sentiment", "steer": "the shipped LM-Steer (seed 0)"},
        "curves": {k: curve_json(c) for k, c in curves.items()},
        "at_budget": {k: at_budget(c) for k, c in curves.items()},
        "seconds": time.perf_counter() - start,
    }
    if args.quick:
        print(json.dumps(data["at_budget"], indent=1))
        return
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    plot(data)
    for k, row in data["at_budget"].items():
        print(f"{k}: strength {row['strength']:g}, sentiment {row['sentiment']:.3f} ± {row['sentiment_se']:.3f} "
              f"(gain {row['gain']:+.3f}), perplexity {row['perplexity']:.1f}")


def plot(data: dict) -> None:
    """Sentiment against perplexity per method, each point labelled with its strength."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.6))
    ax = fig.add_subplot()
    labels = {"caa": f"CAA vector, layer {data['caa']['layer']} (× mean difference)",
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
    ax.axvline(BUDGET * base[2], ls=":", color="grey", label=f"{BUDGET}x unsteered perplexity")
    ax.set_xscale("log")
    ax.set_xlabel("perplexity of the continuations under the unsteered model (log)")
    ax.set_ylabel("mean VADER sentiment (± s.e. over prompts)")
    ax.set_title(f"Positive-sentiment steering on {data['model']}: {data['prompts']['test']} test prompts, "
                 "one sample each", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=120)


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
