"""`lmsci-mi concepts projections|inner|intervention`: concept directions under the causal inner
product (Park et al. 2024) on the shipped concept pairs or a JSON file of your own."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import (
    add_config_args,
    add_model_args,
    add_output_args,
    config_from_args,
    load_from_args,
    read_json_file,
    write_outputs,
)
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel


def register(commands: Any) -> None:
    """Add `concepts` and its three checks to the parser; flags come from the configs."""
    from lmsci_mi.representations.concepts import ConceptConfig, ConceptInterventionConfig

    concepts = commands.add_parser(
        "concepts",
        help="concept directions (Park et al. 2024): projections, inner products, intervention",
        description="Concept directions under the causal inner product, from counterfactual word "
        "pairs: the shipped 16 concepts (--concepts picks some) or --pairs FILE.json "
        '({"name": [[" king", " queen"], ...], ...}). Pairs whose words are not single tokens '
        "are dropped and listed.",
    )
    checks = concepts.add_subparsers(dest="concepts_check", required=True, metavar="CHECK")
    for name, text in (
        ("projections", "held-out pairs' projections on each direction against random pairs"),
        ("inner", "cosines between concepts, causal and Euclidean"),
        ("intervention", "add each λ̄ at the last position; the change of every concept's pairs"),
    ):
        parser = checks.add_parser(name, help=text)
        add_model_args(parser)
        parser.add_argument("--concepts", default=None, help="shipped concepts, comma-separated")
        parser.add_argument("--pairs", type=Path, default=None, help="a JSON file of your own pairs")
        add_output_args(parser)
        if name == "intervention":
            add_config_args(parser.add_argument_group("intervention"), ConceptInterventionConfig)
        add_config_args(parser.add_argument_group("directions (ConceptConfig)"), ConceptConfig)
        parser.set_defaults(run=_run, check=name)


def _pairs(args: argparse.Namespace) -> dict[str, Any]:
    """The concepts asked for: shipped ones by name, or a user's JSON file (checked first)."""
    from lmsci_mi.data.concepts import load_concept_pairs

    if args.pairs is not None and args.concepts is not None:
        raise UserInputError("give --concepts (shipped) or --pairs (your file), not both")
    if args.pairs is None:
        names = None if args.concepts is None else [n.strip() for n in args.concepts.split(",") if n.strip()]
        return dict(load_concept_pairs(names))
    if not args.pairs.is_file():
        raise UserInputError(f"{args.pairs} is not a file: give a JSON file of concept pairs")
    data = read_json_file(args.pairs, "--pairs")
    ok = isinstance(data, dict) and data and all(
        isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(w, str) for w in p) for p in v)
        for v in data.values()
    )
    if not ok:
        raise UserInputError(
            f'{args.pairs}: expected {{"concept": [["base", "target"], ...], ...}} with two words per pair'
        )
    return {name: [tuple(p) for p in pairs] for name, pairs in data.items()}


def _run(args: argparse.Namespace) -> int:
    from lmsci_mi.representations.concepts import (
        ConceptConfig,
        ConceptInterventionConfig,
        concept_inner_products,
        concept_intervention,
        concept_projections,
    )

    concepts = _pairs(args)  # a bad file or name fails before the model loads
    direction = config_from_args(ConceptConfig, args)
    checks = {
        "projections": lambda lm: concept_projections(lm, concepts, direction),
        "inner": lambda lm: concept_inner_products(lm, concepts, direction),
        "intervention": lambda lm: concept_intervention(
            lm, concepts, config_from_args(ConceptInterventionConfig, args).replace(concept=direction)
        ),
    }
    result = checks[args.check](load_from_args(args))
    print(result.summary())
    write_outputs(result, args)
    return 0


TOUR_VECTOR_DEPTH = 0.2
"""Where the sentiment mean-difference (ActAdd-style) vector is read and added, as a share of the
layers: layer 6 of SmolLM2's 30, the layer `benchmarks/steering_compare.py` chose on its dev
prompts (docs/data/steering_compare.json)."""
TOUR_VECTOR_COEFFICIENTS = (0.0, 4.0)
TOUR_VECTOR_PROMPTS = ("The weather this morning was", "My first day at the new job")
# Deprecated names: the vector is a mean difference over free text, not CAA.
TOUR_CAA_DEPTH, TOUR_CAA_COEFFICIENTS, TOUR_CAA_PROMPTS = (
    TOUR_VECTOR_DEPTH, TOUR_VECTOR_COEFFICIENTS, TOUR_VECTOR_PROMPTS)


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "concepts",
            "Concept directions under the causal inner product, and a steering vector",
            _step_concepts,
            "from lmsci_mi.data.concepts import load_concept_pairs; from lmsci_mi.representations "
            "import concept_projections, concept_inner_products; pairs = load_concept_pairs(); "
            "concept_projections(lm, pairs), concept_inner_products(lm, pairs)",
            seconds=15,
        ),
    ]


def _step_concepts(lm: LensModel, out_dir: Path) -> StepOutput:
    """The shipped concepts' held-out projections and inner products (Park et al. 2024), then a
    sentiment mean-difference (ActAdd-style) vector and greedy continuations without and with it."""
    from lmsci_mi.data.concepts import load_concept_pairs
    from lmsci_mi.data.contrasts import contrast_pairs
    from lmsci_mi.generation import GenerationConfig, generate
    from lmsci_mi.representations import concept_inner_products, concept_projections
    from lmsci_mi.steering.vectors import MeanDifferenceConfig, mean_difference_vector

    pairs = dict(load_concept_pairs())
    projections = concept_projections(lm, pairs)
    inner = concept_inner_products(lm, pairs)
    texts = contrast_pairs("sentiment", template=False)
    layer = round(TOUR_VECTOR_DEPTH * lm.cfg.n_layers)
    vector = mean_difference_vector(
        lm, texts.positive, texts.negative, MeanDifferenceConfig(layer=layer, read="mean")
    )
    greedy = GenerationConfig(max_new_tokens=16, temperature=0.0)
    lines = []
    for coefficient in TOUR_VECTOR_COEFFICIENTS:
        with vector.apply(lm, coefficient):
            continuations = generate(lm, list(TOUR_VECTOR_PROMPTS), greedy).texts
        lines += [
            f"{coefficient:+g} × vector: {p!r} → {c!r}"
            for p, c in zip(TOUR_VECTOR_PROMPTS, continuations, strict=True)
        ]
    effect = projections.statistic("effect_size")
    causal = float(inner.off_diagonal(0).abs().mean())
    euclidean = float(inner.off_diagonal(1).abs().mean())
    summary = (
        f"{len(pairs)} concepts: held-out pairs lie {float(effect.median()):.1f} random s.d. above "
        f"random pairs (median); mean |cos| between concepts {causal:.3f} causal vs {euclidean:.3f} "
        f"Euclidean; sentiment vector at layer {layer} (norm {float(vector.values.norm()):.1f})"
    )
    text = "\n".join([projections.summary(), "", inner.summary(), "", *lines])
    results = {"concept_projections": projections, "concept_inner_products": inner, "mean_difference_vector": vector}
    return StepOutput(summary, results, text=text)
