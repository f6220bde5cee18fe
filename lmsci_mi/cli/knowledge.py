"""`lmsci-mi knowledge values|triggers|subupdates|agreement`: FFN key-value memories from the shell
(Geva et al. 2021, 2022). Knowledge neurons (Dai et al. 2022) add `knowledge neurons`."""

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
    write_outputs,
)
from lmsci_mi.cli.knowledge_neurons import add_neurons_command
from lmsci_mi.knowledge import (
    AgreementConfig,
    SubUpdateConfig,
    TriggerConfig,
    ValueVectorConfig,
    key_value_agreement,
    sub_updates,
    trigger_examples,
    value_vectors,
)
from lmsci_mi.loading import load_model


def register(commands: Any) -> None:
    """Add `knowledge` and its subcommands; flags come from the configs."""
    knowledge = commands.add_parser(
        "knowledge", help="where knowledge is stored: FFN key-value memories, knowledge neurons"
    )
    sub = knowledge.add_subparsers(dest="knowledge_command", required=True, metavar="ANALYSIS")

    values = sub.add_parser("values", help="tokens a neuron's value vector promotes and suppresses")
    _neuron_args(values)
    add_config_args(values, ValueVectorConfig)
    values.set_defaults(run=_run_values)

    triggers = sub.add_parser("triggers", help="contexts where a neuron's coefficient is largest")
    _neuron_args(triggers)
    triggers.add_argument(
        "--texts",
        type=Path,
        default=None,
        metavar="FILE",
        help="text set, one text per line (default: the bundled stdlib text)",
    )
    add_config_args(triggers, TriggerConfig)
    triggers.set_defaults(run=_run_triggers)

    subupdates = sub.add_parser("subupdates", help="which neurons raise and lower one prediction")
    add_model_args(subupdates)
    add_output_args(subupdates)
    subupdates.add_argument("--prompt", required=True, help="e.g. 'The Eiffel Tower is in'")
    add_config_args(subupdates, SubUpdateConfig)
    subupdates.set_defaults(run=_run_subupdates)

    agreement = sub.add_parser("agreement", help="key-value agreement per layer (Geva 2021 §4)")
    add_model_args(agreement)
    add_output_args(agreement)
    add_config_args(agreement, AgreementConfig)
    agreement.set_defaults(run=_run_agreement)

    add_neurons_command(sub)


def _neuron_args(parser: argparse.ArgumentParser) -> None:
    add_model_args(parser)
    add_output_args(parser)
    parser.add_argument("--layer", type=int, required=True, help="the block")
    parser.add_argument(
        "--neurons",
        type=_neuron_list,
        required=True,
        metavar="A,B,...",
        help="neuron indices, e.g. 17,301",
    )


def _neuron_list(text: str) -> list[int]:
    try:
        neurons = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of neuron indices"
        ) from None
    if not neurons:
        raise argparse.ArgumentTypeError("no neuron given; write e.g. 17,301")
    return neurons


def _run_values(args: argparse.Namespace) -> int:
    config = config_from_args(ValueVectorConfig, args)
    # Unfolded, the final norm's gain stays outside W_U, so both projections can be shown.
    lm = load_model(args.model, device=args.device, sink=args.sink, fold_ln=False)
    result = value_vectors(lm, args.layer, args.neurons, config)
    print(result.summary())
    write_outputs(result, args)
    return 0


def _run_triggers(args: argparse.Namespace) -> int:
    config = config_from_args(TriggerConfig, args)
    texts = None
    if args.texts is not None:
        texts = [
            line for line in args.texts.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
    lm = load_from_args(args)
    result = trigger_examples(lm, args.layer, args.neurons, texts, config)
    print(result.summary())
    write_outputs(result, args)
    return 0


def _run_subupdates(args: argparse.Namespace) -> int:
    config = config_from_args(SubUpdateConfig, args)
    lm = load_from_args(args)
    result = sub_updates(lm, args.prompt, config)
    print(result.summary())
    write_outputs(result, args)
    return 0


def _run_agreement(args: argparse.Namespace) -> int:
    config = config_from_args(AgreementConfig, args)
    lm = load_from_args(args)
    result = key_value_agreement(lm, config=config)
    print(result.summary())
    write_outputs(result, args)
    return 0
