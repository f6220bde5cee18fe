"""The editing-method registry: ROME, MEMIT and any new method register here by name, with
their config type, and `evaluate_edits` and `lmsci-mi edit --method` find them here.

A registered function takes ``(lm, requests, config, *, stats=None)`` and returns an applied
:class:`~lmsci_mi.editing.handle.EditHandle`. A config whose class sets
``one_fact_per_edit = True`` is evaluated one fact at a time. A new method is one module with a
config and one ``@EDITING_METHODS.register(...)``, imported in ``lmsci_mi/editing/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lmsci_mi.config import Config
from lmsci_mi.registry import Method, MethodRegistry

if TYPE_CHECKING:
    from lmsci_mi.editing.handle import EditHandle

EditFunction = Callable[..., "EditHandle"]
"""``(lm, requests: Sequence[EditRequest], config, *, stats: KeyStatistics | None) -> EditHandle``"""

__all__ = ["EDITING_METHODS", "EditFunction", "method_for"]

EDITING_METHODS: MethodRegistry[EditFunction] = MethodRegistry("editing")
"""Editing methods by name (``"rome"``, ``"memit"``)."""


def method_for(config: Config | str) -> tuple[Method[EditFunction], Config]:
    """The registered method of a config (or of a method name, with its default config).

    Raises:
        KeyError: an unknown method name (the message lists the registered ones).
        TypeError: a config type no method registered.
    """
    if isinstance(config, str):
        method = EDITING_METHODS.get(config)
        return method, method.config_type()
    for method in EDITING_METHODS:
        if type(config) is method.config_type:
            return method, config
    raise TypeError(
        f"no editing method takes a {type(config).__name__}; registered: "
        + ", ".join(f"{m.name} ({m.config_type.__name__})" for m in EDITING_METHODS)
    )

