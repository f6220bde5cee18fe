"""`lmsci-mi` subcommands for head detection, IOI and attention views (filled in by its issue)."""

from __future__ import annotations

from typing import Any


def register(commands: Any) -> None:
    """Add this feature's subcommands to the parser."""


def tour_steps() -> list[Any]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.core)."""
    return []
