"""Concept directions under the causal inner product (Park, Choe, Veitch, ICML 2024) on SmolLM2 and
Gemma 3: per concept the usable pairs and the held-out projection against random pairs (their
Fig. 2), the causal and Euclidean cosine matrices between concepts (their Fig. 3), and the
intervention table (their Fig. 4, over every concept at once).

    PYTHONPATH=. python benchmarks/concepts.py --model smollm2-135m    # docs/data/concepts_smollm2-135m.json
    PYTHONPATH=. python benchmarks/concepts.py --model gemma3-270m
    PYTHONPATH=. python benchmarks/concepts.py --quick --model toy-2l  # a check, seconds (out/quick/)

Writes docs/data/concepts_<model>.json and docs/img/concepts_{inner_products,projections,
intervention}_<model>.png (``--img-dir``). Intervals: 95% percentile bootstrap (``--bootstrap``
resamples from one seeded NumPy stream, ``lmsci_mi.stats``) over pairs, and over concepts for the
mean |cosine| between concepts. Concepts with fewer than ``--min-pairs`` single-token pairs in the
model's tokenizer are left out and listed.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import harness
import numpy as np
import torch
from doc_tables.schemas.representations import (
    ConceptRow,
    ConceptsData,
    InnerProducts,
    Intervention,
    MeanAbsCosine,
)

from lmsci_mi import LensModel, load_model
from lmsci_mi.data.concepts import concept_pairs_source, load_concept_pairs
from lmsci_mi.representations import (
    ConceptConfig,
    ConceptInterventionConfig,
    causal_inner_product,
    concept_inner_products,
    concept_intervention,
    concept_projections,
    single_token_pairs,
)
from lmsci_mi.stats import bootstrap_each, bootstrap_interval, percentile_bounds

PAPER = ("Park, Choe, Veitch, 'The Linear Representation Hypothesis and the Geometry of Large "
         "Language Models', ICML 2024")
FLOOR_NOTE = ("cosines when every token's γ is an independent isotropic Gaussian (mean of 20 draws): what "
              "concepts sharing their words give with no geometry")
INTERVENTION_NOTE = ("at the final norm's output the change is linear in the added vector: "
                     "scale · λ̂ᵀ(γ(y₁) − γ(y₀)) before any logit soft cap")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--img-dir", type=Path, default=Path("docs/img"), help="where the figures go")
    parser.add_argument("--min-pairs", type=int, default=8,
                        help="concepts with fewer single-token pairs are left out")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    ConceptInterventionConfig.add_arguments(parser, skip=("prompts",))


def data_file(args: argparse.Namespace) -> Path:
    return harness.DATA / f"concepts_{args.model}.json"


def rounded(bounds: list[float]) -> list[float]:
    return [round(float(q), 4) for q in bounds]


def interval(values: np.ndarray, rng: np.random.Generator, n_boot: int) -> list[float]:
    """95% percentile bootstrap interval of the mean of ``values`` (one row per pair)."""
    if len(values) < 2:
        return [math.nan, math.nan]
    return rounded(bootstrap_interval(values, n_resamples=n_boot, generator=rng).as_list())


def off_diagonal_interval(matrix: torch.Tensor, rng: np.random.Generator, n_boot: int) -> list[float]:
    """95% bootstrap interval over concepts of the mean |cosine| between distinct concepts.

    Concepts are resampled, not pairs: resampling each concept's pairs on its own would break the
    words that concepts share (walk → walked, walk → walking) and bias the cosines down.
    """
    values = matrix.abs().numpy()

    def mean_between(pick: np.ndarray) -> torch.Tensor:
        distinct = pick[:, None] != pick[None, :]
        return torch.tensor(float(values[np.ix_(pick, pick)][distinct].mean()), dtype=torch.float64)

    replicates = bootstrap_each(mean_between, matrix.shape[0], n_resamples=n_boot, generator=rng)
    return rounded(percentile_bounds(replicates).tolist())


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


def usable_concepts(lm: LensModel, config: ConceptConfig) -> tuple[dict, dict[str, int], dict[str, int]]:
    """The shipped concepts with at least ``config.min_pairs`` single-token pairs in the model's
    tokenizer, every concept's usable pair count, and the concepts left out."""
    shipped = load_concept_pairs()
    usable = {name: len(single_token_pairs(lm, pairs, drop=True)) for name, pairs in shipped.items()}
    concepts = {name: pairs for name, pairs in shipped.items() if usable[name] >= config.min_pairs}
    left_out = {name: n for name, n in usable.items() if name not in concepts}
    print(f"{lm.name}: {len(concepts)} concepts with >= {config.min_pairs} single-token pairs; "
          f"left out: {left_out or 'none'}")
    return concepts, usable, left_out


def concept_rows(concepts: dict, usable: dict[str, int], projections, steer, rng: np.random.Generator,
                 n_boot: int) -> list[ConceptRow]:
    """Per concept: its pairs, the held-out projection against random pairs, the intervention's
    change of its own logit gap and the others' (the intervals draw from ``rng`` in this order)."""
    rows = []
    own, others = steer.target_effect(), steer.off_target_effect()
    for i, name in enumerate(projections.axis_labels(0)):
        held = projections.heldout[projections.heldout_concept == i].numpy()
        stats = dict(zip(projections.axis_labels(1), projections.values[i].tolist(), strict=True))
        changes = steer.per_pair[i, steer.pair_concept == i].numpy()
        rows.append(ConceptRow(
            concept=name, label=concepts[name].label, n_pairs_listed=len(concepts[name]),
            n_pairs_single_token=usable[name], n_fit=int(projections.n_fit[i]),
            n_heldout=int(projections.n_heldout[i]), heldout_projection_mean=round(stats["heldout_mean"], 4),
            heldout_projection_ci95=interval(held, rng, n_boot),
            random_projection_mean=round(stats["random_mean"], 4), random_projection_sd=round(stats["random_sd"], 4),
            effect_size=round(stats["effect_size"], 3), heldout_above_random_p95=round(stats["above_random_p95"], 3),
            intervention_own_change=round(float(own[i]), 4), intervention_own_ci95=interval(changes, rng, n_boot),
            intervention_mean_abs_change_on_others=round(float(others[i]), 4),
        ))
    return rows


def inner_products_record(lm: LensModel, concepts: dict, config: ConceptConfig, inner,
                          rng: np.random.Generator, n_boot: int) -> InnerProducts:
    """The cosine matrices, the mean |cosine| between concepts with intervals, and the floors."""
    ci = {name: off_diagonal_interval(inner.values[k], rng, n_boot) for k, name in enumerate(("causal", "euclidean"))}
    floor = shared_word_floor(lm, concepts, config)
    upper = torch.triu_indices(floor.shape[0], floor.shape[0], offset=1)
    return InnerProducts(
        concepts=list(inner.axis_labels(1)), n_pairs=inner.n_pairs.tolist(),
        causal=[[round(v, 4) for v in row] for row in inner.causal().tolist()],
        euclidean=[[round(v, 4) for v in row] for row in inner.euclidean().tolist()],
        mean_abs_cosine_between_concepts=MeanAbsCosine(
            causal=round(float(inner.off_diagonal(0).abs().mean()), 4), causal_ci95=ci["causal"],
            euclidean=round(float(inner.off_diagonal(1).abs().mean()), 4), euclidean_ci95=ci["euclidean"],
            # E|cos| of two independent random directions in d_model dimensions, ≈ √(2/(π d))
            random_directions=round(math.sqrt(2 / (math.pi * lm.cfg.d_model)), 4),
            shared_word_floor_mean_abs=round(float(floor[upper[0], upper[1]].abs().mean()), 4),
        ),
        shared_word_floor={"note": FLOOR_NOTE, "matrix": [[round(v, 3) for v in row] for row in floor.tolist()]},
    )


def intervention_record(steer) -> Intervention:
    return Intervention(
        site=steer.site, scale=round(steer.scale, 4), site_norm=round(steer.site_norm, 4),
        prompts=list(steer.meta.prompts), note=INTERVENTION_NOTE,
        steered_by_measured=[[round(v, 4) for v in row] for row in steer.values.tolist()],
        se=[[round(v, 4) for v in row] for row in steer.se.tolist()],
    )


def main() -> None:
    began = time.perf_counter()
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=data_file)
    args = run.args
    lm = load_model(args.model)
    config = ConceptConfig(min_pairs=max(3, args.min_pairs), seed=args.seed)
    intervention_config = ConceptInterventionConfig.from_args(args, concept=config)
    concepts, usable, left_out = usable_concepts(lm, config)
    with run.timed("concepts"):
        ip = causal_inner_product(lm, config.inner_product)
        projections = concept_projections(lm, concepts, config, inner_product=ip)
        inner = concept_inner_products(lm, concepts, config, inner_product=ip)
        steer = concept_intervention(lm, concepts, intervention_config, inner_product=ip)
    print(projections.summary(), inner.summary(), steer.summary(), sep="\n\n")
    img = harness.QUICK if run.quick else args.img_dir
    figures = {"inner_products": inner, "projections": projections, "intervention": steer}
    for kind, result in figures.items():
        result.plot(img / f"concepts_{kind}_{lm.name}.png")
    rng = np.random.default_rng(args.seed)  # one stream: the concepts' intervals, then the matrices'
    rows = concept_rows(concepts, usable, projections, steer, rng, args.bootstrap)
    run.write(ConceptsData(
        paper=PAPER, model=lm.name, data_source=concept_pairs_source(), config=config.params(),
        intervention_config={k: v for k, v in intervention_config.params().items() if k != "concept"},
        n_vocabulary_tokens=ip.n_tokens, bootstrap_resamples=args.bootstrap, concepts_left_out=left_out,
        concepts=rows, inner_products=inner_products_record(lm, concepts, config, inner, rng, args.bootstrap),
        intervention=intervention_record(steer),
        figures={k: str(img / f"concepts_{k}_{lm.name}.png") for k in figures},
        seconds=round(time.perf_counter() - began, 1),
    ), ensure_ascii=False)


if __name__ == "__main__":
    main()
