"""The old module paths of the edge files (``lmsci_mi.circuits.graph``, ``.eap``, ``.edge_patching``,
``.pruning``, ``.faithfulness``), kept importable as deprecated aliases after the move to
:mod:`lmsci_mi.circuits.edges` (issue 36): each name resolves in its new home, with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["moved_module"]


def moved_module(old: str, new: ModuleType) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the deprecated module ``old``: any name of ``new``, with a
    DeprecationWarning naming the new home (dunder names are the old module's own)."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or not hasattr(new, name):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} is deprecated: the edge files moved to lmsci_mi.circuits.edges; "
            f"use {new.__name__}.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(new, name)

    return __getattr__
