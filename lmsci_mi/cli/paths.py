"""`lmsci-mi circuit path`: path patching (Wang et al. 2022) from the shell.

:func:`add_path_command` adds the `path` subcommand to a subcommand group (`lmsci-mi circuit`);
its flags come from :class:`~lmsci_mi.circuits.path_patching.PathPatchingConfig`.
"""

from __future__ import annotations

import argparse
from typing import Any

from lmsci_mi.circuits.path_patching import PathPatchingConfig
from lmsci_mi.cli.common import (
    add_config_args,
    add_model_args,
    add_output_args,
    config_from_args,
    load_from_args,
    write_outputs,
)

__all__ = ["add_path_command"]


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def add_path_command(commands: Any) -> argparse.ArgumentParser:
    """Add ``path`` to the subcommand group ``commands`` (from ``add_subparsers``) and return
    its parser.

    >>> parser = argparse.ArgumentParser()
    >>> path = add_path_command(parser.add_subparsers(dest="command"))
    >>> args = parser.parse_args(["path", "--clean", "a b", "--corrupted", "a c", "--answer", " b",
    ...                           "--wrong", " c", "--receivers", "L1.H0.q,MLP1"])
    >>> args.receivers, args.senders, args.freeze
    (('L1.H0.q', 'MLP1'), None, 'heads_and_mlps')
    """
    path = commands.add_parser(
        "path",
        help="path patching: each sender's corrupted output reaching only the receivers' inputs",
    )
    add_model_args(path)
    path.add_argument("--clean", required=True, help="clean prompt")
    path.add_argument("--corrupted", required=True, help="corrupted prompt (same token length)")
    path.add_argument("--answer", required=True, help="correct answer token, e.g. ' Mary'")
    path.add_argument("--wrong", required=True, help="competing token, e.g. ' John'")
    path.add_argument(
        "--senders",
        type=_names,
        default=None,
        metavar="L0.H1,MLP3,...",
        help="heads and MLPs to path patch from (default: every head below the receivers)",
    )
    path.add_argument(
        "--receivers",
        type=_names,
        default=("logits",),
        metavar="L9.H6.q,MLP5,...",
        help="head inputs (L9.H6.q / .k / .v), MLP inputs (MLP5) or 'logits' alone (default)",
    )
    path.add_argument(
        "--receiver-position",
        type=int,
        default=None,
        help="patch the receivers' inputs at this position only (default: every position)",
    )
    add_config_args(path, PathPatchingConfig)
    add_output_args(path)
    path.set_defaults(run=_run_path)
    return path


def _run_path(args: argparse.Namespace) -> int:
    from lmsci_mi.circuits.path_patching import path_patch
    from lmsci_mi.data.pairs import PromptPairs

    config = config_from_args(PathPatchingConfig, args)
    lm = load_from_args(args)
    pairs = PromptPairs(args.clean, args.corrupted, lm.token_id(args.answer), lm.token_id(args.wrong))
    result = path_patch(
        lm,
        pairs,  # scored by the pair's logit difference
        senders=args.senders,
        receivers=args.receivers,
        config=config,
        receiver_positions=args.receiver_position,
    )
    print(result.summary())
    write_outputs(result, args)
    return 0
