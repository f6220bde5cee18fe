"""Renamed names and moved modules kept importable under their old names (PEP 562 module
``__getattr__``): the old name returns the new object, with a DeprecationWarning that names the
new one."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["moved", "renamed"]


def renamed(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names renamed in ``module``: ``names`` maps old to new.

    In the module: ``__getattr__ = renamed(__name__, {"ROMEHyperParams": "ROMEConfig"})``.
    ``from module import OldName`` and ``module.OldName`` then still work, each with a
    DeprecationWarning; any other missing name is the usual AttributeError.

    >>> import lmsci_mi.editing.rome as rome
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     old = rome.ROMEHyperParams
    >>> old is rome.ROMEConfig, str(caught[0].message)
    (True, 'lmsci_mi.editing.rome.ROMEHyperParams is deprecated: use ROMEConfig')
    """

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is deprecated: use {new}", DeprecationWarning, stacklevel=2)
        return getattr(sys.modules[module], new)

    return __getattr__


def moved(old: str, new: ModuleType) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the module ``old``, whose code moved to ``new``: every name of
    ``new`` resolves there, with a DeprecationWarning naming its new home (dunder names are the
    old module's own).

    In the old module (a file of three lines): ``__all__ = new.__all__`` and
    ``__getattr__ = moved(__name__, new)``.
    """

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or not hasattr(new, name):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} is deprecated: {old} moved to {new.__name__}; use {new.__name__}.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(new, name)

    return __getattr__
