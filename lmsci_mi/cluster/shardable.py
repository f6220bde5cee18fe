"""What makes an analysis shardable: its inputs split into independent items, a shard of items runs
anywhere the model is loaded, and the shards' parts merge into the one result a single process
would give.

A shardable analysis is one class, beside the feature it shards (``lmsci_mi/circuits/shards.py``,
``lmsci_mi/editing/shards.py``; activation collection in ``lmsci_mi/collect.py``), naming its
single-process ``function`` and registered once in :data:`SHARDABLE`, with three methods:

- ``prepare(lm, arguments)``, on the driver: check the inputs (``function``'s arguments after the
  model, bound to its signature with its defaults, so no default is written twice), make the
  choices that need the whole set (which facts are known, a noise scale, a batch edit's deltas)
  and return a :class:`Job`: the items, and the context every shard needs.
- ``run(lm, context, items)``, on a worker: the ordinary single-process code on one shard.
- ``merge(lm, job, parts)``, on the driver: the parts, in shard order, into one result (the
  single-process function's type).

The cluster imports no feature: a feature imports this module to register its analyses.
:data:`BUILTIN_HOMES` names the module of each analysis that ships with lmsci-mi, and the
registry imports it the first time that name is asked for, so ``run_sharded("aie", ...)`` works
after importing only :mod:`lmsci_mi.cluster`, and so does a fresh Ray worker.

Nothing here imports Ray: :func:`lmsci_mi.cluster.run_sharded` runs the same three steps in this
process (``address="process"``) or over a Ray cluster.
"""

from __future__ import annotations

import importlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from lmsci_mi.errors import UserInputError
from lmsci_mi.registry import Method, MethodRegistry

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["BUILTIN_HOMES", "SHARDABLE", "Job", "Shardable", "ShardableRegistry", "split"]

Part = TypeVar("Part")


@dataclass(frozen=True)
class Job:
    """A prepared analysis: ``items`` (one per independent unit: a fact, a prompt pair, a text)
    and ``context`` (what every shard needs; sent to each worker once). Both must pickle."""

    items: tuple[Any, ...]
    context: Any


class Shardable(ABC, Generic[Part]):
    """An analysis whose work splits into independent items (see the module docstring)."""

    name: ClassVar[str]
    function: ClassVar[Callable[..., Any]]
    """The single-process function (a ``staticmethod``): its signature is the analysis's, after
    the model, and the merged result is what it returns."""

    def arguments(self, lm: LensModel, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``args`` and ``kwargs`` bound to :attr:`function`'s parameters after the model, with
        its defaults filled in (its ``cluster`` parameter left out).

        Raises:
            TypeError: arguments the function would not take (the message names them).
        """
        bound = inspect.signature(self.function).bind(lm, *args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        named.pop(next(iter(named)))  # the model
        named.pop("cluster", None)
        return named

    @abstractmethod
    def prepare(self, lm: LensModel, arguments: Mapping[str, Any]) -> Job:
        """Check the inputs (:meth:`arguments`) and plan the work on the driver; raise
        ``ValueError`` on bad input before any worker starts."""

    @abstractmethod
    def run(self, lm: LensModel, context: Any, items: Sequence[Any]) -> Part:
        """One shard's part, computed on a worker's model."""

    @abstractmethod
    def merge(self, lm: LensModel, job: Job, parts: Sequence[Part]) -> Any:
        """The result of the whole job from its shards' parts, in shard order: what the
        single-process function returns (a ``Result``, or ``Activations``)."""


ShardableType = type[Shardable[Any]]


class ShardableRegistry(MethodRegistry[ShardableType]):
    """A :class:`~lmsci_mi.registry.MethodRegistry` of shardable analyses that imports a built-in
    analysis's home module (``homes``: name -> module) the first time the name is looked up,
    listed or iterated. The feature registers itself on import; the cluster never imports a
    feature at import time."""

    def __init__(self, family: str, homes: Mapping[str, str]) -> None:
        super().__init__(family)
        self.homes = dict(homes)

    def _load(self, names: Sequence[str]) -> None:
        for name in names:
            if name in self.homes and not super().__contains__(name):
                importlib.import_module(self.homes[name])

    def get(self, name: str) -> Method[ShardableType]:
        self._load([name])
        return super().get(name)

    def names(self) -> tuple[str, ...]:
        self._load(sorted(self.homes))
        return super().names()

    def __iter__(self) -> Iterator[Method[ShardableType]]:
        self._load(sorted(self.homes))
        return super().__iter__()

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self._load([name])
        return super().__contains__(name)


BUILTIN_HOMES: Mapping[str, str] = {
    "aie": "lmsci_mi.circuits.shards",
    "collect": "lmsci_mi.collect",
    "edges": "lmsci_mi.circuits.shards",
    "edit-eval": "lmsci_mi.editing.shards",
}
"""Where each shardable analysis that ships with lmsci-mi registers itself (a test checks that
each module registers its names). An analysis of your own registers when you import its module."""

SHARDABLE: ShardableRegistry = ShardableRegistry("shardable analysis", BUILTIN_HOMES)
"""Every shardable analysis by name (``"aie"``, ``"edges"``, ``"collect"``, ``"edit-eval"``)."""


def split(items: Sequence[Any], n_shards: int) -> list[tuple[Any, ...]]:
    """``items`` in ``n_shards`` contiguous shards whose sizes differ by at most one (fewer
    shards when there are fewer items); order kept, so concatenating the shards gives ``items``.

    >>> split(range(7), 3)
    [(0, 1, 2), (3, 4), (5, 6)]
    >>> split(range(2), 4)
    [(0,), (1,)]
    """
    if n_shards < 1:
        raise UserInputError(f"n_shards must be at least 1, not {n_shards}")
    items = tuple(items)
    n = min(n_shards, len(items))
    if n == 0:
        return []
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for k in range(n):
        stop = start + size + (k < extra)
        out.append(items[start:stop])
        start = stop
    return out
