"""Concept directions under the causal inner product (Park, Choe, Veitch, ICML 2024) on SmolLM2 and
Gemma 3: per concept the usable pairs and the held-out projection against random pairs (their
Fig. 2), the causal and Euclidean cosine matrices between concepts (their Fig. 3), and the
intervention table (their Fig. 4, over every concept at once).

    python benchmarks/concepts.py --model smollm2-135m
    python benchmarks/concepts.py --model gemma3-270m
    python benchmarks/concepts.py --model toy-2l --out /tmp/concepts     # smoke test, seconds

Writes <out>/data/concepts_<model>.json and <out>/img/concepts_{inner_products,projections,
intervention}_<model>.png (``--out`` defaults to docs). Intervals: 95% bootstrap (``--bootstrap``
resamples, seeded) over pairs, and over concepts for the mean |cosine| between concepts. Concepts with fewer than ``--min-pairs`` single-token pairs in
the model's tokenizer are left out and listed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from lmsci_mi import load_model
from lmsci_mi.data.concepts import concept_pairs_source, load_concept_pairs
from lmsci_mi.model import LensModel
from lmsci_mi.representations import (
    ConceptConfig,
    ConceptInterventionConfig,
    causal_inner_product,
    concept_inner_products,
    concept_intervention,
    concept_projections,
    single_token_pairs,
)

PAPER = ("Park, Choe, Veitch, 'The Linear Representation Hypothesis and the Geometry of Large "
         "Language Models', ICML 2024")


def interval(values: np.ndarray, rng: np.random.Generator, n_boot: int, statistic=np.mean) -> list[float]:
    """95% percentile bootstrap interval of ``statistic`` over the rows of ``values``."""
    n = len(values)
    if n < 2:
        return [math.nan, math.nan]
    draws = [statistic(values[rng.integers(0, n, n)]) for _ in range(n_boot)]
    return [round(float(q), 4) for q in np.quantile(draws, [0.025, 0.975])]


def off_diagonal_interval(matrix: torch.Tensor, rng: np.random.Generator, n_boot: int) -> list[float]:
    """95% bootstrap interval over concepts of the mean |cosine| between distinct concepts.

    Concepts are resampled, not pairs: resampling each concept's pairs on its own would break the
    words that concepts share (walk → walked, walk → walking) and bias the cosines down.
    """
    n = matrix.shape[0]
    values = matrix.abs().numpy()
    draws = []
    for _ in range(n_boot):
        pick = rng.integers(0, n, n)
        distinct = pick[:, None] != pick[None, :]
        draws.append(float(values[np.ix_(pick, pick)][distinct].mean()))
    return [round(float(q), 4) for q in np.quantile(draws, [0.025, 0.975])]


def shared_word_floor(lm: LensModel, concepts, config: ConceptConfig, draws: int = 20) -> torch.Tensor:
    """The cosines between concept directions when every token's γ is an independent isotropic
    Gaussian vector (averaged over ``draws``): what shared words alone produce. Concepts that share
    their base words (walk → walked, walk → walking) come out near 0.5 with no geometry at all."""
    tokens = [single_token_pairs(lm, pairs, first_token=config.first_token, drop=True)
              for pairs in concepts.values()]
    ids = torch.cat([torch.cat([t.base_ids, t.target_ids]) for t in tokens]).unique()
    index = {int(i): k for k, i in enumerate(ids)}
    generator = torch.Generator().manual_seed(config.seed)
    total = torch.zeros(len(tokens), len(tokens), dtype=torch.float64)
    for _ in range(draws):
        gamma = torch.randn(len(ids), lm.cfg.d_model, generator=generator, dtype=torch.float64)
        rows = []
        for t in tokens:
            diff = (gamma[[index[int(i)] for i in t.target_ids]]
                    - gamma[[index[int(i)] for i in t.base_ids]])
            if config.estimator == "mean_unit_difference":
                diff = diff / diff.norm(dim=-1, keepdim=True)
            mean = diff.mean(0)
            rows.append(mean / mean.norm())
        stacked = torch.stack(rows)
        total += stacked @ stacked.T
    return total / draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=Path("docs"),
                        help="writes <out>/data/concepts_<model>.json and <out>/img/*.png")
    parser.add_argument("--min-pairs", type=int, default=8,
                        help="concepts with fewer single-token pairs are left out")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    ConceptInterventionConfig.add_arguments(parser, skip=("prompts",))
    args = parser.parse_args()

    start = time.perf_counter()
    lm = load_model(args.model)
    config = ConceptConfig(min_pairs=max(3, args.min_pairs), seed=args.seed)
    intervention_config = ConceptInterventionConfig.from_args(args, concept=config)
    rng = np.random.default_rng(args.seed)

    shipped = load_concept_pairs()
    usable = {name: len(single_token_pairs(lm, pairs, drop=True)) for name, pairs in shipped.items()}
    concepts = {name: pairs for name, pairs in shipped.items() if usable[name] >= config.min_pairs}
    left_out = {name: n for name, n in usable.items() if name not in concepts}
    print(f"{lm.name}: {len(concepts)} concepts with >= {config.min_pairs} single-token pairs; "
          f"left out: {left_out or 'none'}")

    ip = causal_inner_product(lm, config.inner_product)
    print(f"Cov(γ) over {ip.n_tokens} tokens: {time.perf_counter() - start:.1f} s since start")
    projections = concept_projections(lm, concepts, config, inner_product=ip)
    inner = concept_inner_products(lm, concepts, config, inner_product=ip)
    steer = concept_intervention(lm, concepts, intervention_config, inner_product=ip)
    print(projections.summary(), inner.summary(), steer.summary(), sep="\n\n")

    img = args.out / "img"
    data = args.out / "data"
    figures = {
        "inner_products": inner.plot(img / f"concepts_inner_products_{lm.name}.png"),
        "projections": projections.plot(img / f"concepts_projections_{lm.name}.png"),
        "intervention": steer.plot(img / f"concepts_intervention_{lm.name}.png"),
    }

    rows = []
    own, others = steer.target_effect(), steer.off_target_effect()
    for i, name in enumerate(projections.axis_labels(0)):
        held = projections.heldout[projections.heldout_concept == i].numpy()
        stats = dict(zip(projections.axis_labels(1), projections.values[i].tolist(), strict=True))
        changes = steer.per_pair[i, steer.pair_concept == i].numpy()
        rows.append({
            "concept": name,
            "label": shipped[name].label,
            "n_pairs_listed": len(shipped[name]),
            "n_pairs_single_token": usable[name],
            "n_fit": int(projections.n_fit[i]),
            "n_heldout": int(projections.n_heldout[i]),
            "heldout_projection_mean": round(stats["heldout_mean"], 4),
            "heldout_projection_ci95": interval(held, rng, args.bootstrap),
            "random_projection_mean": round(stats["random_mean"], 4),
            "random_projection_sd": round(stats["random_sd"], 4),
            "effect_size": round(stats["effect_size"], 3),
            "heldout_above_random_p95": round(stats["above_random_p95"], 3),
            "intervention_own_change": round(float(own[i]), 4),
            "intervention_own_ci95": interval(changes, rng, args.bootstrap),
            "intervention_mean_abs_change_on_others": round(float(others[i]), 4),
        })

    off_ci = {name: off_diagonal_interval(inner.values[k], rng, args.bootstrap)
              for k, name in enumerate(("causal", "euclidean"))}
    floor = shared_word_floor(lm, concepts, config)
    n_concepts = floor.shape[0]
    upper = torch.triu_indices(n_concepts, n_concepts, offset=1)
    d_model = lm.cfg.d_model
    document = {
        "command": " ".join(["python", "benchmarks/concepts.py", *sys.argv[1:]]),
        "paper": PAPER,
        "model": lm.name,
        "data_source": concept_pairs_source(),
        "config": config.params(),
        "intervention_config": {k: v for k, v in intervention_config.params().items() if k != "concept"},
        "n_vocabulary_tokens": ip.n_tokens,
        "bootstrap_resamples": args.bootstrap,
        "concepts_left_out": left_out,
        "concepts": rows,
        "inner_products": {
            "concepts": list(inner.axis_labels(1)),
            "n_pairs": inner.n_pairs.tolist(),
            "causal": [[round(v, 4) for v in row] for row in inner.causal().tolist()],
            "euclidean": [[round(v, 4) for v in row] for row in inner.euclidean().tolist()],
            "mean_abs_cosine_between_concepts": {
                "causal": round(float(inner.off_diagonal(0).abs().mean()), 4),
                "causal_ci95": off_ci["causal"],
                "euclidean": round(float(inner.off_diagonal(1).abs().mean()), 4),
                "euclidean_ci95": off_ci["euclidean"],
                # E|cos| of two independent random directions in d_model dimensions, ≈ √(2/(π d))
                "random_directions": round(math.sqrt(2 / (math.pi * d_model)), 4),
                "shared_word_floor_mean_abs": round(float(floor[upper[0], upper[1]].abs().mean()), 4),
            },
            "shared_word_floor": {
                "note": ("cosines when every token's γ is an independent isotropic Gaussian (mean "
                         "of 20 draws): what concepts sharing their words give with no geometry"),
                "matrix": [[round(v, 3) for v in row] for row in floor.tolist()],
            },
        },
        "intervention": {
            "site": steer.site,
            "scale": round(steer.scale, 4),
            "site_norm": round(steer.site_norm, 4),
            "prompts": list(steer.meta.prompts),
            "note": ("at the final norm's output the change is linear in the added vector: "
                     "scale · λ̂ᵀ(γ(y₁) − γ(y₀)) before any logit soft cap"),
            "steered_by_measured": [[round(v, 4) for v in row] for row in steer.values.tolist()],
            "se": [[round(v, 4) for v in row] for row in steer.se.tolist()],
        },
        "figures": {k: str(img / f"concepts_{k}_{lm.name}.png") for k in figures},
        "seconds": round(time.perf_counter() - start, 1),
    }
    data.mkdir(parents=True, exist_ok=True)
    out = data / f"concepts_{lm.name}.json"
    out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out} and {len(figures)} figures under {img} ({document['seconds']} s)")


if __name__ == "__main__":
    main()
