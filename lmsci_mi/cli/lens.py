"""`lmsci-mi lens logit|tuned|dla`: the logit lens, the tuned lens and direct logit attribution."""

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
from lmsci_mi.lenses.dla import DLAConfig, direct_logit_attribution
from lmsci_mi.lenses.logit_lens import LogitLensConfig, logit_lens
from lmsci_mi.lenses.tuned_lens import TunedLensConfig, tuned_lens, tuned_lens_for

EIFFEL_PROMPT = "The Eiffel Tower is located in the city of"


def register(commands: Any) -> None:
    """Add `lens` and its three analyses to the parser; flags come from the configs."""
    lens = commands.add_parser("lens", help="logit lens, tuned lens, direct logit attribution")
    kinds = lens.add_subparsers(dest="lens_kind", required=True, metavar="KIND")

    logit = kinds.add_parser(
        "logit", help="each layer's stream read through the final norm and W_U"
    )
    _common(logit)
    add_config_args(logit, LogitLensConfig)
    logit.set_defaults(run=_run_logit)

    tuned = kinds.add_parser(
        "tuned",
        help="the tuned lens (Belrose et al.'s KL training, or --method least_squares for Din "
        "et al.'s map; trained once on CPU, then cached)",
    )
    _common(tuned)
    add_config_args(tuned, LogitLensConfig, skip=("site",))
    group = tuned.add_argument_group("training (TunedLensConfig)")
    add_config_args(group, TunedLensConfig, skip=("seed",))
    tuned.set_defaults(run=_run_tuned)

    dla = kinds.add_parser("dla", help="direct logit attribution to heads, MLPs and the embedding")
    _common(dla, answer_required=True)
    dla.add_argument("--wrong", default=None, help="subtract this token's logit, e.g. ' London'")
    add_config_args(dla, DLAConfig)
    dla.set_defaults(run=_run_dla)


def _common(parser: argparse.ArgumentParser, *, answer_required: bool = False) -> None:
    add_model_args(parser)
    parser.add_argument(
        "--prompt",
        action="append",
        default=None,
        help=f"a prompt (repeat for several; default {EIFFEL_PROMPT!r})",
    )
    parser.add_argument(
        "--answer",
        required=answer_required,
        default=None,
        help="the answer token, e.g. ' Paris'"
        + ("" if answer_required else " (default: the model's own top token)"),
    )
    add_output_args(parser)


def _prompts(args: argparse.Namespace) -> list[str]:
    return args.prompt or [EIFFEL_PROMPT]


def _run_logit(args: argparse.Namespace) -> int:
    config = config_from_args(LogitLensConfig, args)
    lm = load_from_args(args)
    result = logit_lens(lm, _prompts(args), args.answer, config)
    print(result.summary())
    write_outputs(result, args)
    return 0


def _run_tuned(args: argparse.Namespace) -> int:
    training = TunedLensConfig.from_args(args)
    # The lens is read where it was trained: --site is the translators' site.
    config = config_from_args(LogitLensConfig, args, site=training.site)
    lm = load_from_args(args)
    lens = tuned_lens_for(lm, training)
    print(f"tuned lens of {lm.name}: trained in {lens.train_seconds:.0f} s (cached)")
    result = tuned_lens(lm, _prompts(args), args.answer, lens, config)
    print(result.summary())
    write_outputs(result, args)
    return 0


def _run_dla(args: argparse.Namespace) -> int:
    config = config_from_args(DLAConfig, args)
    lm = load_from_args(args)
    result = direct_logit_attribution(lm, _prompts(args), args.answer, args.wrong, config)
    print(result.summary())
    write_outputs(result, args)
    return 0
