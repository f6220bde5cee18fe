"""Method registries: analyses that come in several methods (editing, probes, steering) find them
by name here, never through an if/else over method names.

A method registers once, with its config type; a second registration under the same name raises.
Adding a method is one file plus one ``@registry.register(...)``. After SAELens ``registry.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from lmsci_mi.config import Config
from lmsci_mi.errors import UnknownNameError

__all__ = ["Method", "MethodRegistry"]

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class Method(Generic[F]):
    """One registered method: its name, its function and the config type it takes."""

    name: str
    function: F
    config_type: type[Config]
    description: str


class MethodRegistry(Generic[F]):
    """A named family of methods (``"editing"``), each registered once with its config type.

    >>> methods = MethodRegistry("demo")
    >>> @methods.register("double", Config, "multiply by two")
    ... def double(x, config):
    ...     return 2 * x
    >>> methods.get("double").function(3, Config())
    6
    >>> methods.get("triple")
    Traceback (most recent call last):
    ...
    lmsci_mi.errors.UnknownNameError: unknown demo method 'triple'; registered: ['double']
    >>> methods.get("doubel")
    Traceback (most recent call last):
    ...
    lmsci_mi.errors.UnknownNameError: unknown demo method 'doubel' (did you mean 'double'?); registered: ['double']
    """

    def __init__(self, family: str) -> None:
        self.family = family
        self._methods: dict[str, Method[F]] = {}

    def register(self, name: str, config_type: type[Config], description: str = "") -> Callable[[F], F]:
        """Decorator registering a function under ``name``.

        Raises:
            ValueError: ``name`` is already registered in this family.
        """

        def add(function: F) -> F:
            if name in self._methods:
                raise ValueError(
                    f"{self.family} method {name!r} is already registered by "
                    f"{self._methods[name].function.__module__}; choose another name"
                )
            doc = description or (function.__doc__ or "").strip().split("\n")[0]
            self._methods[name] = Method(name, function, config_type, doc)
            return function

        return add

    def get(self, name: str) -> Method[F]:
        """The method registered as ``name``.

        Raises:
            UnknownNameError: no such method (a KeyError); the message lists the closest and
                the registered names.
        """
        if name not in self._methods:
            raise UnknownNameError.among(f"{self.family} method", name, self._methods, listed="registered")
        return self._methods[name]

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._methods))

    def __iter__(self) -> Iterator[Method[F]]:
        return iter(self._methods[name] for name in self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._methods
