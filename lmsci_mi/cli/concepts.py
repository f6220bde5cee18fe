"""`lmsci-mi concepts projections|inner|intervention`: concept directions under the causal inner
product (Park et al. 2024) on the shipped concept pairs or a JSON file of your own."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import (
    add_config_args,
    add_model_args,
    add_output_args,
    config_from_args,
    load_from_args,
    write_outputs,
)


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
        raise ValueError("give --concepts (shipped) or --pairs (your file), not both")
    if args.pairs is None:
        names = None if args.concepts is None else [n.strip() for n in args.concepts.split(",") if n.strip()]
        return dict(load_concept_pairs(names))
    if not args.pairs.is_file():
        raise ValueError(f"{args.pairs} is not a file: give a JSON file of concept pairs")
    data = json.loads(args.pairs.read_text(encoding="utf-8"))
    ok = isinstance(data, dict) and data and all(
        isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(w, str) for w in p) for p in v)
        for v in data.values()
    )
    if not ok:
        raise ValueError(
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
