"""Frozen analysis configs: every parameter of an analysis, with its default written once.

Each analysis takes its data plus one frozen config dataclass (``PatchingConfig``,
``TraceConfig``...). The config records itself into ``Meta.params`` and builds its own command-line
flags, so the library, the results and the CLI share one set of defaults. A field declares its
range in its metadata (``{"help": ..., "ge": 1}``, after pydantic's ``Field``); the base checks it
on creation and prints it in ``--help``. A config nested as a field (``generation:
GenerationConfig``) gives its own fields as flags. A field of a paper-named method also declares
the paper's value (``"paper"``, ``"paper_source"``, ``"why"``), which ``paper_defaults`` lists for
the docs' tables. After SAELens's configs.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import types
import typing
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

from typing_extensions import Self, dataclass_transform

from lmsci_mi.errors import UserInputError

__all__ = [
    "BOUND_KEYS",
    "NOT_IN_NOTES",
    "PAPER_KEYS",
    "QUICK_ENV",
    "Config",
    "PaperDefault",
    "config",
    "paper",
    "paper_defaults",
    "quick_mode",
    "validate_choice",
]

C = TypeVar("C", bound="Config")

BOUND_KEYS = ("gt", "ge", "lt", "le", "choices", "min_length", "max_length")
"""The metadata keys a field declares its valid values with (pydantic's ``Field`` names)."""

PAPER_KEYS = ("paper", "paper_source", "why")
"""The metadata keys a field declares its paper's value with: ``paper`` the value, ``paper_source``
where the paper or its code states it (required with ``paper``), ``why`` the data file or benchmark
behind our default where it differs. :func:`paper` writes them."""

NOT_IN_NOTES = "not in our notes"
"""``paper``'s value where our reference notes lack the paper's: never a guessed number."""

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
    """Class decorator: a frozen, keyword-only dataclass that validates itself on creation.

    A class whose ``_moved`` names fields that moved into a nested config still takes them as
    keywords and attributes, with a DeprecationWarning (see :attr:`Config._moved`).
    """
    wrapped = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    if wrapped._moved:
        _accept_moved(wrapped)
    return wrapped


def _accept_moved(cls: type[Config]) -> None:
    """Let ``cls`` take its moved fields as keywords (folded into their nested config) and read
    them as attributes, each with a DeprecationWarning that names the new place."""
    init = cls.__init__
    nested = {f.name: f for f in dataclasses.fields(cls)}

    @functools.wraps(init)
    def __init__(self: Config, **kwargs: Any) -> None:
        moved = {name: kwargs.pop(name) for name in list(kwargs) if name in cls._moved}
        if moved:
            _warn_moved(cls, moved)
        changes: dict[str, dict[str, Any]] = {}
        for name, value in moved.items():
            outer, inner = cls._moved[name].split(".")
            changes.setdefault(outer, {})[inner] = value
        for outer, values in changes.items():
            f = nested[outer]
            base = kwargs[outer] if outer in kwargs else f.default_factory()  # type: ignore[misc]
            kwargs[outer] = base.replace(**values)
        init(self, **kwargs)

    cls.__init__ = __init__  # type: ignore[method-assign]
    for name, path in cls._moved.items():
        setattr(cls, name, property(functools.partial(_read_moved, name=name, path=path)))


def _warn_moved(cls: type, moved: Mapping[str, Any]) -> None:
    where = ", ".join(f"{name} -> {cls._moved[name]}" for name in moved)  # type: ignore[attr-defined]
    warnings.warn(
        f"{cls.__name__}: {where}; the flat names are deprecated (they will be removed)",
        DeprecationWarning,
        stacklevel=3,
    )


def _read_moved(self: Config, *, name: str, path: str) -> Any:
    _warn_moved(type(self), {name: None})
    outer, inner = path.split(".")
    return getattr(getattr(self, outer), inner)


def validate_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raise a :class:`~lmsci_mi.errors.UserInputError` (a ValueError) naming the field, the
    value and the valid choices."""
    if value not in choices:
        raise UserInputError(f"{name} must be one of {list(choices)}, not {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Base of every analysis config.

    Subclasses are frozen keyword-only dataclasses (decorate with :func:`config`). A field's
    ``metadata["help"]`` becomes its CLI help; ``metadata["cli"] = False`` keeps it off the CLI
    (tensors, callables). A field declares its valid values in the same metadata: the bounds
    ``gt``, ``ge``, ``lt``, ``le``, the ``choices`` of a non-``Literal`` field (a ``Literal``
    field's own values count as its choices), and, for a tuple, ``min_length`` and
    ``max_length``; a tuple's bounds and choices hold for each element, and ``None`` passes an
    optional field. ``__post_init__`` checks them, then calls :meth:`validate`, so a bad config
    never reaches an analysis.

    A field whose type is a config (``generation: GenerationConfig``) nests that config: its
    default is ``default_factory()``, and on the command line each of its fields is a flag of
    its own (``--temperature``), with the nested default.

    >>> @config
    ... class Demo(Config):
    ...     batch_size: int = dataclasses.field(default=8, metadata={"help": "rows", "gt": 0})
    >>> Demo(batch_size=-1)
    Traceback (most recent call last):
    lmsci_mi.errors.UserInputError: Demo.batch_size must be > 0, not -1
    """

    _moved: ClassVar[Mapping[str, str]] = {}
    """Deprecated flat keywords of fields that moved into a nested config, e.g.
    ``{"temperature": "generation.temperature"}``: :func:`config` still accepts and reads them."""

    def __post_init__(self) -> None:
        for rule in _rules(type(self)):
            problem = rule.problem(getattr(self, rule.name))
            if problem is not None:
                raise UserInputError(f"{type(self).__name__}.{rule.name} {problem}")
        self.validate()

    def validate(self) -> None:
        """Check rules across fields ("k <= d_sae"); a single field's range is declared instead.

        Subclasses raise :class:`~lmsci_mi.errors.UserInputError` (a ValueError) with the
        fields' names and the fix.
        """

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
    def add_arguments(
        cls,
        parser: argparse.ArgumentParser,
        *,
        skip: Sequence[str] = (),
        defaults: Config | None = None,
    ) -> None:
        """Add one ``--flag`` per CLI-able field, with the field's default and help.

        A nested config's fields get flags of their own; ``defaults`` (used for those) is the
        instance whose values the flags default to, instead of the field defaults.
        """
        hints = typing.get_type_hints(cls)
        rules = {rule.name: rule for rule in _rules(cls)}
        for f in dataclasses.fields(cls):
            if f.name in skip or not f.metadata.get("cli", True):
                continue
            if defaults is not None:
                default = getattr(defaults, f.name)
            else:
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            if _nested(hints[f.name]):
                _check_nested(cls, hints[f.name])
                hints[f.name].add_arguments(parser, skip=skip, defaults=default)
                continue
            flag = "--" + f.name.replace("_", "-")
            kwargs = _argparse_kwargs(hints[f.name], default)
            rule = rules.get(f.name)
            shown = f"default: {default}"
            if rule is not None:
                kwargs["type"] = _checked(kwargs.get("type", str), rule)
                if rule.choices is not None and not rule.each and "choices" not in kwargs:
                    kwargs["choices"] = [*rule.choices, *([None] if rule.optional else [])]
                shown += f"; {rule.summary()}" if rule.summary() else ""
            # argparse %-formats help strings: a literal "95%" in a field's help must be doubled.
            text = f"{f.metadata.get('help', '')} ({shown})".replace("%", "%%")
            parser.add_argument(flag, dest=f.name, default=default, help=text, **kwargs)

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides: Any) -> Self:
        """The config of parsed arguments; ``overrides`` set fields the CLI does not expose."""
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if not f.metadata.get("cli", True) or f.name in overrides:
                continue
            if _nested(hints[f.name]):  # its fields came as flags of their own
                given = {g.name: getattr(args, g.name) for g in dataclasses.fields(hints[f.name])
                         if g.metadata.get("cli", True) and hasattr(args, g.name)}
                values[f.name] = f.default_factory().replace(**given)  # type: ignore[misc]
            elif hasattr(args, f.name):
                values[f.name] = getattr(args, f.name)
        values.update(overrides)
        return cls(**values)


def _nested(hint: Any) -> bool:
    """Whether a field of type ``hint`` is a nested config."""
    return isinstance(hint, type) and issubclass(hint, Config)


def _check_nested(cls: type[Config], nested: type[Config]) -> None:
    """A nested config's flags share the command's namespace: a name in both would be one flag."""
    shared = {f.name for f in dataclasses.fields(cls)} & {f.name for f in dataclasses.fields(nested)}
    if shared:
        raise TypeError(f"{cls.__name__} and its nested {nested.__name__} both have {sorted(shared)}")


# ----------------------------------------------------------------------- paper defaults


@dataclasses.dataclass(frozen=True)
class PaperDefault:
    """One field of a paper-named method's config beside the paper's value."""

    config: str
    field: str
    ours: Any
    paper: Any
    paper_source: str
    why: str | None

    @property
    def differs(self) -> bool:
        """Whether our default is not the paper's (unknown when the paper's is not in our notes)."""
        return self.paper == NOT_IN_NOTES or _plain(self.ours) != _plain(self.paper)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the values as ``Config.params`` writes them, and ``differs``."""
        return {"config": self.config, "field": self.field, "ours": _plain(self.ours),
                "paper": _plain(self.paper), "paper_source": self.paper_source, "why": self.why,
                "differs": self.differs}


def paper(value: Any, source: str, why: str | None = None) -> dict[str, Any]:
    """The metadata entries that declare a paper's value, to merge into a field's metadata.

    Args:
        value: the paper's value (``NOT_IN_NOTES`` where our reference notes lack it).
        source: where the paper or its code states it (section, table, file and argument).
        why: the data file or benchmark behind our default where it differs.

    Raises:
        TypeError: ``source`` is empty.

    >>> paper(20, "Someone 2024, §3", why="docs/data/x.json")
    {'paper': 20, 'paper_source': 'Someone 2024, §3', 'why': 'docs/data/x.json'}
    """
    if not source:
        raise TypeError("paper(...) needs the source of the paper's value")
    declared = {"paper": value, "paper_source": source}
    if why is not None:
        declared["why"] = why
    return declared


def paper_defaults(cls: type) -> list[PaperDefault]:
    """The fields of ``cls`` that declare a paper's value, in field order.

    Raises:
        TypeError: a field declares ``paper`` without ``paper_source``, or a differing default
            without ``why``.

    >>> @config
    ... class Demo(Config):
    ...     steps: int = dataclasses.field(
    ...         default=5,
    ...         metadata={"help": "steps", **paper(20, "Someone 2024, §3", why="docs/data/x.json")},
    ...     )
    >>> [(d.field, d.ours, d.paper, d.differs) for d in paper_defaults(Demo)]
    [('steps', 5, 20, True)]
    """
    rows = []
    for f in dataclasses.fields(cls):
        if "paper" not in f.metadata:
            continue
        if not f.metadata.get("paper_source"):
            raise TypeError(f"{cls.__name__}.{f.name} declares 'paper' without 'paper_source'")
        ours = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        row = PaperDefault(cls.__name__, f.name, ours, f.metadata["paper"], f.metadata["paper_source"],
                           f.metadata.get("why"))
        if row.differs and row.paper != NOT_IN_NOTES and not row.why:
            raise TypeError(f"{cls.__name__}.{f.name} differs from its paper without 'why'")
        rows.append(row)
    return rows


# ---------------------------------------------------------------------- declared values


@dataclasses.dataclass(frozen=True)
class _Rule:
    """The values one field declares valid: bounds, choices and (for a tuple) a length."""

    name: str
    gt: Any = None
    ge: Any = None
    lt: Any = None
    le: Any = None
    choices: tuple[Any, ...] | None = None
    min_length: int | None = None
    max_length: int | None = None
    each: bool = False  # a tuple: bounds and choices hold for each element
    optional: bool = False

    def _interval(self) -> str:
        low = f"({self.gt}" if self.gt is not None else "" if self.ge is None else f"[{self.ge}"
        high = f"{self.lt})" if self.lt is not None else "" if self.le is None else f"{self.le}]"
        if low and high:
            return f"in {low}, {high}"
        if low:
            return f"> {low[1:]}" if low[0] == "(" else f">= {low[1:]}"
        if high:
            return f"< {high[:-1]}" if high[-1] == ")" else f"<= {high[:-1]}"
        return ""

    def _length(self) -> str:
        low, high = self.min_length, self.max_length
        if low is not None and low == high:
            count = f"{low}"
        elif low is not None and high is not None:
            count = f"{low} to {high}"
        elif low is not None:
            count = f"at least {low}"
        elif high is not None:
            count = f"at most {high}"
        else:
            return ""
        return f"{count} value{'' if (high if low is None else low) == 1 else 's'}"

    def _fits(self, value: Any) -> bool:
        if self.choices is not None and value not in self.choices:
            return False
        if not self._interval():
            return True
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        # Written as "not inside" so that NaN, which compares False to everything, fails.
        return not (
            (self.gt is not None and not value > self.gt)
            or (self.ge is not None and not value >= self.ge)
            or (self.lt is not None and not value < self.lt)
            or (self.le is not None and not value <= self.le)
        )

    def _what(self) -> str:
        parts = [f"one of {list(self.choices)}"] if self.choices is not None else []
        return " and ".join([*parts, self._interval()] if self._interval() else parts)

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` ("must be > 0, not -1"), or None if it is valid."""
        if value is None and self.optional:
            return None
        if not self.each:
            return None if self._fits(value) else f"must be {self._what()}, not {value!r}"
        if isinstance(value, str) or not isinstance(value, Sequence):
            return f"must be a tuple, not {value!r}"
        n = len(value)
        if (self.min_length is not None and n < self.min_length) or (
            self.max_length is not None and n > self.max_length
        ):
            return f"must hold {self._length()}, not {value!r}"
        if all(self._fits(item) for item in value):
            return None
        what = self._what().replace("one of ", "from ", 1)
        return f"must hold values {what}, not {value!r}"

    def summary(self) -> str:
        """The rule for ``--help`` ("> 0", "each >= 1, at least 1 value"); a scalar's choices
        are left to argparse, which lists them."""
        if not self.each:
            return self._interval()
        choices = f"one of {', '.join(map(str, self.choices))}" if self.choices else ""
        what = " and ".join(p for p in (choices, self._interval()) if p)
        return ", ".join(p for p in (f"each {what}" if what else "", self._length()) if p)


@functools.cache
def _rules(cls: type) -> tuple[_Rule, ...]:
    """The declared rules of ``cls``'s fields, read once per class."""
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):  # a hint only a type checker can resolve: read the metadata
        hints = {}
    rules = []
    for f in dataclasses.fields(cls):
        declared = {key: f.metadata[key] for key in BOUND_KEYS if key in f.metadata}
        hint = hints.get(f.name, Any)
        optional = get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint)
        if optional:
            hint = next(a for a in get_args(hint) if a is not type(None))
        each = get_origin(hint) in (tuple, list, Sequence) or (
            hint is Any and isinstance(f.default, tuple)
        )
        element = next((a for a in get_args(hint) if a is not Ellipsis), Any) if each else hint
        if get_origin(element) is Literal and "choices" not in declared:
            declared["choices"] = get_args(element)
        if not declared:
            continue
        if not each and ({"min_length", "max_length"} & declared.keys()):
            raise TypeError(f"{cls.__name__}.{f.name}: min_length/max_length need a tuple field")
        if "choices" in declared:
            declared["choices"] = tuple(declared["choices"])
        rules.append(_Rule(f.name, **declared, each=each, optional=optional))
    return tuple(rules)


def _checked(parse: Any, rule: _Rule) -> Any:
    """``parse`` that also checks the field's declared values, so argparse names the flag."""

    def parse_and_check(text: str) -> Any:
        value = parse(text)
        problem = rule.problem(value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse_and_check.__name__ = getattr(parse, "__name__", "value")
    return parse_and_check


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
        if "choices" in inner:
            inner["choices"] = [*inner["choices"], None]
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
