"""What makes an analysis shardable: its inputs split into independent items, a shard of items runs
anywhere the model is loaded, and the shards' parts merge into the one result a single process
would give.

A shardable analysis is one class (one file under ``lmsci_mi/cluster/analyses/``) with three
methods, registered once in :data:`SHARDABLE`:

- ``prepare(lm, ...)``, on the driver: check the inputs, make the choices that need the whole set
  (which facts are known, a noise scale, a batch edit's deltas) and return a :class:`Job`: the
  items, and the context every shard needs.
- ``run(lm, context, items)``, on a worker: the ordinary single-process code on one shard.
- ``merge(lm, job, parts)``, on the driver: the parts, in shard order, into one result (the
  single-process function's type).

Nothing here imports Ray: :func:`lmsci_mi.cluster.run_sharded` runs the same three steps in this
process (``backend="process"``) or over a Ray cluster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from lmsci_mi.registry import MethodRegistry

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["SHARDABLE", "Job", "Shardable", "split"]

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

    @abstractmethod
    def prepare(self, lm: LensModel, *args: Any, **kwargs: Any) -> Job:
        """Check the inputs and plan the work on the driver; raise ``ValueError`` on bad input
        before any worker starts."""

    @abstractmethod
    def run(self, lm: LensModel, context: Any, items: Sequence[Any]) -> Part:
        """One shard's part, computed on a worker's model."""

    @abstractmethod
    def merge(self, lm: LensModel, job: Job, parts: Sequence[Part]) -> Any:
        """The result of the whole job from its shards' parts, in shard order: what the
        single-process function returns (a ``Result``, or ``Activations``)."""


SHARDABLE: MethodRegistry[type[Shardable[Any]]] = MethodRegistry("shardable analysis")
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
        raise ValueError(f"n_shards must be at least 1, not {n_shards}")
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
