"""The `lmsci-mi` command: one subcommand per analysis, each with --model and the output flags.

Each feature has its own module here that adds its subcommands (`register`) so that the parser is
assembled in one place but written next to the feature it drives.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from lmsci_mi.cli import (
    circuits,
    concepts,
    core,
    edges,
    editing,
    graphs,
    heads,
    icl,
    knowledge,
    lens,
    outliers,
    probe,
    report,
    sae,
    steer,
)
from lmsci_mi.cli.common import check_outputs
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.loading import ModelNotAvailableError

__all__ = ["USER_ERRORS", "build_parser", "main"]

USER_ERRORS: tuple[type[Exception], ...] = (
    UserInputError,  # bad input: a prompt that is not one token, a bad config, not a result file
    UnknownNameError,  # a name no registry or table holds (also a UserInputError)
    ModelNotAvailableError,
    # Paths the user gave: missing, a folder where a file is needed, not writable.
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
"""What bad input raises. `main` reports these in one line and exits 2. Anything else, a plain
KeyError or ValueError included, is a bug: it is raised on, with its traceback."""

_FEATURES = (
    core, circuits, edges, heads, lens, knowledge, editing, probe, steer, concepts, icl, outliers, sae,
    graphs, report
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lmsci-mi",
        description="Mechanistic interpretability on TransformerLens hook points.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for feature in _FEATURES:
        feature.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Weights come from packages or the local cache; never let a library reach for the hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        check_outputs(args)
        return int(args.run(args) or 0)
    except USER_ERRORS as error:
        # Bad input is the user's to fix: show the message, not a traceback.
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"lmsci-mi {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
