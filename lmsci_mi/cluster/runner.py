"""Run a shardable analysis: prepare on the driver, run the shards (in this process or on Ray
workers), merge; the merged result records the cluster's shape in ``meta.params``.

:func:`run_sharded` is the one entry point; :class:`ClusterConfig` says where the shards run.
Ray is imported only when a Ray address is asked for (:mod:`lmsci_mi.cluster.ray_backend`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from lmsci_mi.cache import weights_fingerprint
from lmsci_mi.cluster.shardable import SHARDABLE, Job, split
from lmsci_mi.config import Config, config
from lmsci_mi.results import Result

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["ClusterConfig", "ModelSpec", "ShardError", "run_sharded"]

LOCAL_ADDRESSES = ("auto", "local", "process")


@config
class ClusterConfig(Config):
    """Where and how the shards of an analysis run.

    ``address``: ``"auto"`` joins the cluster that ``RAY_ADDRESS`` or a running head names, else
    starts a local Ray instance; ``"local"`` starts a local instance; ``"host:port"`` (or
    ``"ray://host:port"``) joins a cluster started with ``ray start --head``; ``"process"`` runs
    the shards one after another in this process, without Ray (the same split and merge; for
    checks and debugging).
    """

    address: str = field(
        default="auto",
        metadata={"help": "auto | local | HOST:PORT (ray start --head) | process (no Ray)"},
    )
    shards: int | None = field(
        default=None, metadata={"help": "shards (default: 4 per worker, for load balance)", "ge": 1}
    )
    workers: int | None = field(
        default=None,
        metadata={"help": "Ray actors (default: as many as the cluster's CPUs or GPUs allow)", "ge": 1},
    )
    cpus_per_worker: int = field(
        default=1, metadata={"help": "CPUs per actor; its torch thread count", "ge": 1}
    )
    gpus_per_worker: float | None = field(
        default=None,
        metadata={"help": "GPUs per actor (default: 1 when the cluster has GPUs, else 0)", "ge": 0},
    )
    max_retries: int = field(
        default=3,
        metadata={"help": "times an actor that dies is restarted and its shard re-run", "ge": 0},
    )
    local_cpus: int | None = field(
        default=None, metadata={"help": "CPUs of a local Ray instance (default: all)", "ge": 1}
    )
    progress: bool = field(default=True, metadata={"help": "show a progress bar", "cli": False})

    def validate(self) -> None:
        a = self.address
        if a not in LOCAL_ADDRESSES and ":" not in a:
            raise ValueError(
                f"ClusterConfig.address must be 'auto', 'local', 'process' or a Ray address like "
                f"'10.0.0.1:6379' (from `ray start --head`), not {a!r}"
            )


@dataclass(frozen=True)
class ModelSpec:
    """How a worker loads the driver's model: :func:`~lmsci_mi.load_model`'s arguments, and the
    weights fingerprint the loaded model must have (a model changed in memory on the driver, or
    another version on a node, is refused instead of silently analysed)."""

    name_or_path: str
    sink: int | None
    dtype: str
    fingerprint: str

    @classmethod
    def of(cls, lm: LensModel) -> ModelSpec:
        source = Path(lm.source)
        name = str(source) if source.is_absolute() and source.exists() else lm.name
        return cls(name, lm.sink_token_id, str(lm.cfg.dtype), weights_fingerprint(lm))

    def load(self) -> LensModel:
        import torch

        from lmsci_mi.loading import load_model

        dtype = getattr(torch, self.dtype.removeprefix("torch."))
        lm = load_model(self.name_or_path, dtype=dtype, sink=self.sink)
        if weights_fingerprint(lm) != self.fingerprint:
            raise ValueError(
                f"the worker's {self.name_or_path!r} has other weights than the driver's model "
                "(was the driver's model edited or steered in memory, or is another version "
                "cached on this node?): shard only models that load_model gives as they are, or "
                "ship an edit's deltas as the editing evaluation does"
            )
        return lm


class ShardError(RuntimeError):
    """A shard failed for a reason a retry cannot fix (bad input, a bug); the whole run fails."""


@dataclass(frozen=True)
class FaultInjection:
    """For tests: the worker running shard ``shard`` dies (``os._exit``) on its first attempt,
    leaving a marker in ``marker_dir`` so the retry runs normally."""

    shards: tuple[int, ...]
    marker_dir: str


def run_sharded(
    analysis: str,
    lm: LensModel,
    *args: Any,
    cluster: ClusterConfig | None = None,
    _faults: FaultInjection | None = None,
    **kwargs: Any,
) -> Any:
    """Run the shardable ``analysis`` (``"aie"``, ``"edges"``, ``"collect"``, ``"edit-eval"``)
    over its inputs in shards and merge them into the result the single-process function gives.

    ``args`` and ``kwargs`` are the single-process function's, after the model: for ``"aie"``
    :func:`~lmsci_mi.circuits.average_indirect_effect`'s, for ``"edges"``
    :func:`~lmsci_mi.circuits.edge_attribution`'s, for ``"collect"``
    :func:`~lmsci_mi.collect.collect_activations`'s, for ``"edit-eval"``
    :func:`~lmsci_mi.editing.evaluate_edits`'s. The driver uses ``lm`` to check the inputs and
    plan; each worker loads the same model (:class:`ModelSpec`) once.

    Raises:
        KeyError: an unknown analysis (the message lists them).
        ValueError: bad inputs (raised on the driver, before any worker starts), a bad cluster
            config, or a worker whose model differs from ``lm``.
        ShardError: a shard failed on a worker (its message says which and why).
        ModuleNotFoundError: a Ray address without Ray installed (the message says how).

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.sites import hook_name
    >>> lm = load_model("toy-2l")
    >>> texts = ["The cat sat", "A dog ran far", "Birds fly"]
    >>> acts = run_sharded("collect", lm, texts, [hook_name("resid_post", 1)],
    ...                    cluster=ClusterConfig(address="process", shards=2, progress=False))
    >>> acts.example.tolist()
    [0, 1, 2]
    """
    cluster = cluster or ClusterConfig()
    shardable = SHARDABLE.get(analysis).function()
    job = shardable.prepare(lm, *args, **kwargs)
    if cluster.address == "process":
        shards = split(job.items, cluster.shards or 1)
        parts = _run_here(shardable, lm, job, shards, cluster)
        shape = {"address": "process", "workers": 1, "shards": len(shards)}
    else:
        from lmsci_mi.cluster.ray_backend import run_on_ray

        parts, shape = run_on_ray(analysis, ModelSpec.of(lm), job, cluster, _faults)
    return _with_shape(shardable.merge(lm, job, parts), shape)


def _run_here(
    shardable: Any, lm: LensModel, job: Job, shards: Sequence[tuple[Any, ...]], cluster: ClusterConfig
) -> list[Any]:
    parts = []
    with tqdm(total=len(job.items), desc=shardable.name, disable=not cluster.progress) as bar:
        for shard in shards:
            parts.append(shardable.run(lm, job.context, shard))
            bar.update(len(shard))
    return parts


def _with_shape(result: Any, shape: dict[str, Any]) -> Any:
    """``result`` with ``meta.params["cluster.*"]`` set (results without a ``meta`` as they are)."""
    if not isinstance(result, Result):
        return result
    params = {**result.meta.params, **{f"cluster.{k}": v for k, v in shape.items()}}
    return dataclasses.replace(result, meta=dataclasses.replace(result.meta, params=params))
