"""argparse types shared by the subcommands and the report command: an output file's path,
checked before any work runs.

Its own module so that `lmsci_mi.cli.report` (which `common` imports to write ``--html`` pages) and
`lmsci_mi.cli.common` both take it from here, with no import circle between them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["output_path"]


def output_path(flag: str, suffixes: Sequence[str] | None = None) -> Callable[[str], Path]:
    """The argparse ``type`` of an output or artefact file (a result, a steer, a delta): a file
    name whose folder can be written, with one of ``suffixes`` (any when None). A bad path is a
    usage error before anything runs."""

    def parse(text: str) -> Path:
        path = Path(text)
        if not text.strip() or path.name in ("", ".", "..") or path.is_dir():
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: give a file name, not a folder")
        if suffixes is not None and path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(
                f"{flag} {text}: use a file ending in one of {', '.join(suffixes)}"
            )
        # The nearest existing ancestor must be a folder we may write in (missing ones are made).
        parent = path.absolute().parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise argparse.ArgumentTypeError(f"{flag} {text}: {parent} is not a folder")
        if not os.access(parent, os.W_OK):
            raise argparse.ArgumentTypeError(f"{flag} {text}: cannot write in {parent}")
        return path

    parse.__name__ = f"{flag} path"
    return parse
