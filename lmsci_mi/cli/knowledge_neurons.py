"""`lmsci-mi knowledge neurons`: a fact's knowledge neurons (Dai et al. 2022) from the command line.

One prompt gives the integrated-gradients scores of every MLP neuron; paraphrases (``--paraphrase``,
repeatable) add the refinement across prompts. The ``knowledge`` command group calls
:func:`add_neurons_command` to add this subcommand.
"""

from __future__ import annotations

import argparse
from typing import Any

from lmsci_mi.cli.common import (
    add_config_args,
    add_model_args,
    add_output_args,
    config_from_args,
    load_from_args,
    write_outputs,
)
from lmsci_mi.errors import UserInputError

__all__ = ["add_neurons_command"]


def add_neurons_command(sub: Any) -> argparse.ArgumentParser:
    """Add ``neurons`` to a group's subparsers; its flags come from KnowledgeNeuronsConfig."""
    from lmsci_mi.knowledge.neurons import KnowledgeNeuronsConfig

    neurons = sub.add_parser(
        "neurons",
        help="knowledge neurons of a fact: integrated gradients over MLP neurons (Dai et al. 2022)",
    )
    add_model_args(neurons)
    neurons.add_argument(
        "--prompt", required=True, help="e.g. 'The Eiffel Tower is located in the city of'"
    )
    neurons.add_argument("--target", required=True, help="the answer, e.g. ' Paris'")
    neurons.add_argument(
        "--paraphrase",
        action="append",
        default=[],
        help="another prompt of the same fact (repeat); with them the neurons are refined",
    )
    neurons.add_argument("--top", type=int, default=10, help="neurons to print (default 10)")
    add_config_args(neurons, KnowledgeNeuronsConfig)
    add_output_args(neurons)
    neurons.set_defaults(run=_run_neurons)
    return neurons


def _run_neurons(args: argparse.Namespace) -> int:
    from lmsci_mi.knowledge.neurons import (
        KnowledgeNeuronsConfig,
        integrated_gradients,
        knowledge_neurons,
    )

    if args.top < 1:
        raise UserInputError(f"--top {args.top}: give at least 1")
    config = config_from_args(KnowledgeNeuronsConfig, args)
    lm = load_from_args(args)
    if args.paraphrase:
        result: Any = knowledge_neurons(lm, [args.prompt, *args.paraphrase], args.target, config)
    else:
        result = integrated_gradients(lm, args.prompt, args.target, config)
    print(result.summary(args.top))
    write_outputs(result, args)
    return 0
