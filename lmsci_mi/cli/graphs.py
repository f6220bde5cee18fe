"""`lmsci-mi graph`: the attribution graph of a prompt's next token over transcoder features
(circuit-tracer's algorithm, :mod:`lmsci_mi.circuits.graphs`), with its replacement and
completeness scores, and the interactive viewer as ``--html``. The transcoders come from
:func:`lmsci_mi.transcoders.load_transcoders` (cached, shipped for the CFG GPT, or ``--build``).
The tour step draws the CFG GPT's graph of a grammar sentence.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lmsci_mi.circuits.graphs import AttributionGraph, GraphConfig
from lmsci_mi.cli.common import (
    add_config_args,
    add_model_args,
    add_output_args,
    config_from_args,
    load_from_args,
    write_outputs,
)
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel

CFG_GPT = "cfg-gpt"
"""The ``--model`` name of the shipped CFG GPT (its token ids are the grammar's: 0 is BOS)."""
DEFAULT_PROMPT = "The Eiffel Tower is located in the city of"


def register(commands: Any) -> None:
    """Add this feature's subcommand to the parser."""
    graph = commands.add_parser(
        "graph",
        help="the attribution graph of a prompt's next token over transcoder features "
        "(circuit-tracer's algorithm; --html opens the interactive viewer)",
    )
    add_model_args(graph, default_help=f"smollm2-135m; {CFG_GPT}: the shipped CFG GPT")
    add_output_args(graph)
    what = graph.add_mutually_exclusive_group()
    what.add_argument("--prompt", default=None, help=f"text (default {DEFAULT_PROMPT!r})")
    what.add_argument("--tokens", default=None, metavar="IDS",
                      help="token ids separated by spaces, the sink first (the CFG GPT: 0 is BOS)")
    what.add_argument("--sentence", type=int, default=None, metavar="SEED",
                      help=f"{CFG_GPT}: the grammar sentence drawn with this seed, BOS first and "
                      "its last token left for the graph to explain (default 0)")
    graph.add_argument("--build", action="store_true",
                       help="train the model's transcoders when none are cached or shipped")
    add_config_args(graph, GraphConfig)
    graph.set_defaults(run=_run_graph)


def _load(args: argparse.Namespace) -> LensModel:
    if args.model != CFG_GPT:
        return load_from_args(args)
    from lmsci_mi.probes.cfg.model import load_cfg_model

    return load_cfg_model(train=False, device=args.device)[0]


def _token_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise UserInputError(f"--tokens {text!r}: give integers separated by spaces, e.g. '0 3 1 2'") from None
    if not ids:
        raise UserInputError("--tokens is empty: give the prompt's token ids, the sink first")
    return ids


def cfg_sentence_prompt(seed: int) -> list[int]:
    """BOS and the seeded grammar sentence without its last token (the token the graph explains)."""
    from lmsci_mi.data.cfg import CFGConfig, build_grammar

    grammar = build_grammar(CFGConfig())
    sentence = grammar.sample(1, seed=seed).sequences()[0]
    return [grammar.bos, *[int(t) for t in sentence[:-1]]]


def _prompt(args: argparse.Namespace) -> str | list[int]:
    """The prompt the flags give, checked before the model loads."""
    cfg = args.model == CFG_GPT
    if args.tokens is not None:
        return _token_ids(args.tokens)
    if cfg and args.prompt is not None:
        raise UserInputError(f"{CFG_GPT} has no tokenizer: give --sentence SEED or --tokens IDS")
    if not cfg and args.sentence is not None:
        raise UserInputError(f"--sentence draws a grammar sentence for --model {CFG_GPT} only; give --prompt")
    if cfg:
        return cfg_sentence_prompt(args.sentence or 0)
    return args.prompt if args.prompt is not None else DEFAULT_PROMPT


def graph_report(graph: AttributionGraph) -> str:
    """The graph's summary and what circuit-tracer's pruning keeps."""
    pruning = graph.prune()
    return (f"{graph.summary()}\n  pruned at circuit-tracer's thresholds (nodes 0.8, edges 0.98): "
            f"{int(pruning.node_mask.sum())} nodes, {int(pruning.edge_mask.sum())} edges")


def _run_graph(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.graphs import attribution_graph
    from lmsci_mi.transcoders import load_transcoders

    config = config_from_args(GraphConfig, args)
    prompt = _prompt(args)
    lm = _load(args)
    transcoders = load_transcoders(lm, build=args.build)
    graph = attribution_graph(lm, transcoders, prompt, config)
    print(graph_report(graph))
    write_outputs(graph, args)
    return 0


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "cfg_graph",
            "An attribution graph of the CFG GPT over its shipped transcoders",
            _step_cfg_graph,
            "from lmsci_mi.circuits.graphs import GraphConfig, attribution_graph; from lmsci_mi.cli.graphs import "
            "cfg_sentence_prompt; from lmsci_mi.probes.cfg.model import load_cfg_model; from "
            "lmsci_mi.transcoders import load_transcoders; cfg = load_cfg_model(train=False)[0]; "
            "attribution_graph(cfg, load_transcoders(cfg), cfg_sentence_prompt(0), GraphConfig(batch_size=64))",
            seconds=5,
        ),
    ]


def _step_cfg_graph(lm: LensModel, out_dir: Path) -> StepOutput:
    """The CFG GPT's graph of grammar sentence 0 (the tour's model is not used)."""
    from lmsci_mi.circuits.graphs import attribution_graph
    from lmsci_mi.probes.cfg.model import load_cfg_model
    from lmsci_mi.transcoders import load_transcoders

    cfg = load_cfg_model(train=False, device=lm.device)[0]
    # Batch 64, not circuit-tracer's 512: the same graph, about 3x faster on a CPU (docs/graphs.md)
    graph = attribution_graph(cfg, load_transcoders(cfg), cfg_sentence_prompt(0), GraphConfig(batch_size=64))
    scores = graph.scores()
    summary = (f"{graph.layout.n_features} feature nodes; replacement score {scores.replacement:.3f}, "
               f"completeness score {scores.completeness:.3f}")
    return StepOutput(summary, results={"cfg_graph": graph}, text=graph_report(graph))
