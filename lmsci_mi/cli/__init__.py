"""The `lmsci-mi` command: one subcommand per analysis, each with --model and --out.

Each feature has its own module here that adds its subcommands (`register`) so that the parser is
assembled in one place but written next to the feature it drives.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from lmsci_mi.cli import circuits, core, editing, heads

__all__ = ["build_parser", "main"]

_FEATURES = (core, circuits, heads, editing)


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
        return int(args.run(args) or 0)
    except (ValueError, LookupError, RuntimeError) as error:
        # Bad input is the user's to fix: show the message, not a traceback.
        print(f"lmsci-mi {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
