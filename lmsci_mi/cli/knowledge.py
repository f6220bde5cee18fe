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
    read_text_file,
    write_outputs,
)
from lmsci_mi.cli.knowledge_neurons import add_neurons_command
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.knowledge import (
    AgreementConfig,
    SubUpdateConfig,
    TriggerConfig,
    ValueVectorConfig,
    key_value_agreement,
    knowledge_neurons,
    sub_updates,
    trigger_examples,
    value_vectors,
)
from lmsci_mi.lenses import logit_lens
from lmsci_mi.loading import load_model
from lmsci_mi.model import LensModel


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
            line for line in read_text_file(args.texts, "--texts").splitlines() if line.strip()
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


EIFFEL_PROMPT = "The Eiffel Tower is located in the city of"
EIFFEL_PARAPHRASES = (
    EIFFEL_PROMPT,
    "The Eiffel Tower stands in the city of",
    "You can visit the Eiffel Tower in the city of",
)


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "knowledge",
            "Where is 'the Eiffel Tower is in Paris' stored? The logit lens and knowledge neurons",
            _step_knowledge,
            "from lmsci_mi.lenses import logit_lens; from lmsci_mi.knowledge import "
            f'knowledge_neurons; logit_lens(lm, "{EIFFEL_PROMPT}", " Paris"); '
            f'knowledge_neurons(lm, {list(EIFFEL_PARAPHRASES)!r}, " Paris")',
            seconds=15,
        ),
    ]


def _step_knowledge(lm: LensModel, out_dir: Path) -> StepOutput:
    """The logit lens of the Eiffel prompt, then the fact's knowledge neurons over 3 paraphrases."""
    lens = logit_lens(lm, EIFFEL_PROMPT, " Paris")
    probs = lens.last()
    first = next((i for i, p in enumerate(probs.tolist()) if p >= 0.1), None)
    neurons = knowledge_neurons(lm, list(EIFFEL_PARAPHRASES), " Paris")
    top = ", ".join(str(n) for n in neurons.top(5))
    where = (
        f"first reaches p ≥ 0.1 at layer {lens.axis_labels(1)[first]}"
        if first is not None
        else ("never reaches p ≥ 0.1 before the last layer")
    )
    summary = (
        f"logit lens: p(' Paris') at the last token {where} (final {float(probs[-1]):.2f}); "
        f"{len(neurons.neurons)} knowledge neurons shared by the paraphrases, top: {top or 'none'}"
    )
    text = lens.summary() + "\n\n" + neurons.summary()
    return StepOutput(
        summary, {"logit_lens_eiffel": lens, "knowledge_neurons_eiffel": neurons}, text=text
    )
