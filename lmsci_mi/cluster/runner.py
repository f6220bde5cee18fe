"""Run a shardable analysis: prepare on the driver, run the shards (in this process or on Ray
workers), merge; the merged result records the cluster's shape in ``meta.params``.

:func:`run_sharded` is the one entry point; :class:`ClusterConfig` says where the shards run.
Ray is imported only when a Ray address is asked for (:mod:`lmsci_mi.cluster.ray_backend`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from lmsci_mi.cluster.shardable import SHARDABLE, Job, split
from lmsci_mi.cluster.spec import ClusterConfig, FaultInjection, ModelSpec
from lmsci_mi.results import Result

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["run_sharded"]


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
    :func:`~lmsci_mi.editing.evaluate_edits`'s. Those functions call this when given
    ``cluster=``, which is the usual way in. The driver uses ``lm`` to check the inputs and
    plan; each worker loads the same model (:class:`ModelSpec`) once.

    Raises:
        KeyError: an unknown analysis (the message lists them).
        TypeError: arguments the single-process function would not take.
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
    job = shardable.prepare(lm, shardable.arguments(lm, *args, **kwargs))
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
