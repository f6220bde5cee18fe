"""Frozen analysis configs: every parameter of an analysis, with its default written once.

Each analysis takes its data plus one frozen config dataclass (``PatchingConfig``,
``TraceConfig``...). The config records itself into ``Meta.params`` and builds its own command-line
flags, so the library, the results and the CLI share one set of defaults. After SAELens's configs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from typing_extensions import Self, dataclass_transform

__all__ = ["QUICK_ENV", "Config", "config", "quick_mode", "validate_choice"]

C = TypeVar("C", bound="Config")

QUICK_ENV = "LMSCI_MI_QUICK"
"""The environment variable that puts the examples and notebooks in quick mode."""


def quick_mode() -> bool:
    """Whether ``LMSCI_MI_QUICK`` asks for quick mode (any value but empty, ``0``, ``false``, ``no``).

    The example scripts and notebooks read it to shrink their workloads (fewer prompts, layers,
    examples and steps) while still running on the real model; the test suite sets it.

    >>> os.environ[QUICK_ENV] = "1"; quick_mode()
    True
    >>> os.environ[QUICK_ENV] = "0"; quick_mode()
    False
    >>> del os.environ[QUICK_ENV]; quick_mode()
    False
    """
    return os.environ.get(QUICK_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


@dataclass_transform(frozen_default=True)
def config(cls: type[C]) -> type[C]:
    """Class decorator: a frozen, keyword-only dataclass that validates itself on creation."""
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


def validate_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raise a ValueError naming the field, the value and the valid choices."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, not {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Base of every analysis config.

    Subclasses are frozen keyword-only dataclasses (decorate with :func:`config`). A field's
    ``metadata["help"]`` becomes its CLI help; ``metadata["cli"] = False`` keeps it off the CLI
    (tensors, callables). ``__post_init__`` checks the values, so a bad config never reaches an
    analysis.
    """

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check field values; subclasses raise ValueError with the field's name and the fix."""

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def params(self) -> dict[str, Any]:
        """The config as JSON-able ``Meta.params`` entries (sequences become tuples)."""
        out: dict[str, Any] = {"config": type(self).__name__}
        for f in dataclasses.fields(self):
            out[f.name] = _plain(getattr(self, f.name))
        return out

    # ------------------------------------------------------------------ command line

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, *, skip: Sequence[str] = ()) -> None:
        """Add one ``--flag`` per CLI-able field, with the field's default and help."""
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in skip or not f.metadata.get("cli", True):
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            flag = "--" + f.name.replace("_", "-")
            parser.add_argument(flag, dest=f.name, default=default,
                                help=f"{f.metadata.get('help', '')} (default: {default})",
                                **_argparse_kwargs(hints[f.name], default))

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides: Any) -> Self:
        """The config of parsed arguments; ``overrides`` set fields the CLI does not expose."""
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
                  if f.metadata.get("cli", True) and hasattr(args, f.name)}
        values.update(overrides)
        return cls(**values)


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Config):
        return value.params()
    if isinstance(value, dict):
        return tuple(sorted((str(k), _plain(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, frozenset, set)):
        return tuple(_plain(v) for v in value)
    return repr(value)


def _argparse_kwargs(hint: Any, default: Any) -> dict[str, Any]:
    """argparse options for a field of type ``hint``: its parser, choices, or a boolean switch."""
    origin = get_origin(hint)
    args = [a for a in get_args(hint) if a is not type(None)]
    if origin in (Union, types.UnionType) and len(args) == 1:
        inner = _argparse_kwargs(args[0], default)
        inner["type"] = _optional(inner.get("type", str))
        return inner
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is Literal:
        return {"choices": list(get_args(hint)), "type": type(get_args(hint)[0])}
    if origin in (tuple, Sequence) or hint in (tuple,):
        element = next((a for a in get_args(hint) if a is not Ellipsis), str)
        parse = {int: _int_list, float: _float_list}.get(element, _str_list)
        return {"type": parse, "metavar": "A,B,..."}
    if hint in (int, float, str):
        return {"type": hint}
    return {"type": str}


def _optional(parse: Any) -> Any:
    def parse_or_none(text: str) -> Any:
        return None if text.lower() in ("none", "") else parse(text)

    parse_or_none.__name__ = getattr(parse, "__name__", "value")
    return parse_or_none


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


_int_list.__name__ = "integer list"


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


_float_list.__name__ = "number list"


def _str_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


_str_list.__name__ = "list"
