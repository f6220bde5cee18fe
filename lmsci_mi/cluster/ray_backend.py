"""The shards of an analysis on Ray actors: each actor loads the model once, with the CPUs (and
GPU) Ray gave it; shards go to whichever actor is free; an actor that dies is restarted and its
shard re-run (Ray's actor restarts and task retries); a shard that raises fails the run.

The only module that imports Ray; ``pip install 'lmsci-mi[ray]'`` installs it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from lmsci_mi.cluster.shardable import SHARDABLE, Job, split
from lmsci_mi.cluster.spec import ClusterConfig, FaultInjection, ModelSpec, ShardError
from lmsci_mi.errors import UserInputError

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["ShardWorker", "connect", "import_ray", "ray_workers", "run_on_ray"]

SHARDS_PER_WORKER = 4
"""Default shards per actor: a slow shard then holds back a quarter of one actor's work."""


def import_ray() -> Any:
    """``ray``, or a ModuleNotFoundError that says how to install it."""
    try:
        import ray
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "running on a Ray cluster needs Ray: pip install 'lmsci-mi[ray]' (or pip install ray), "
            "or run without --ray"
        ) from err
    return ray


def connect(address: str, local_cpus: int | None = None) -> bool:
    """Join or start Ray for ``address`` (see :class:`ClusterConfig`); True if this call started
    an instance that the caller should shut down. An instance already initialised in this
    process is used as it is."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address == "local":
        ray.init(num_cpus=local_cpus, **options)
        return True
    if address == "auto":
        try:
            ray.init(address="auto", **options)
            return False
        except ConnectionError:  # no running cluster: start one here
            ray.init(num_cpus=local_cpus, **options)
            return True
    ray.init(address=address, **options)
    return False


class ShardWorker:
    """One Ray actor's state: the model, loaded once, on the device and threads Ray gave it."""

    def __init__(self, spec: ModelSpec, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        # Ray hides the GPUs an actor was not given, so load_model's default device (CUDA when
        # visible, else the CPU) is the one Ray assigned.
        self.lm: LensModel = spec.load()

    def run(self, analysis: str, context: Any, items: tuple[Any, ...], shard: int,
            faults: FaultInjection | None) -> Any:
        if faults is not None and shard in faults.shards:
            marker = Path(faults.marker_dir) / f"shard-{shard}.died"
            if not marker.exists():
                marker.touch()
                os._exit(1)  # an abrupt death, as a lost node or an OOM kill looks to Ray
        return SHARDABLE.get(analysis).function().run(self.lm, context, items)

    def device(self) -> str:
        return str(self.lm.device)


_POOL: dict[tuple[Any, ...], list[Any]] = {}
"""Live actors per (model, resources) while a Ray instance this process did not start is up: a
second analysis on the same model reuses them instead of loading the model again."""


def ray_workers(ray: Any, spec: ModelSpec, cluster: ClusterConfig, n: int, gpus_each: float) -> list[Any]:
    """``n`` actors holding ``spec``'s model: the pool's, plus new ones if it has fewer. With Ray
    initialised by the caller (a notebook, a benchmark), they stay up for the next analysis."""
    key = (spec, cluster.cpus_per_worker, gpus_each, cluster.max_retries)
    pool = _POOL.setdefault(key, [])
    worker = ray.remote(
        num_cpus=cluster.cpus_per_worker,
        num_gpus=gpus_each,
        max_restarts=cluster.max_retries,
        max_task_retries=cluster.max_retries,
    )(ShardWorker)
    pool += [worker.remote(spec, cluster.cpus_per_worker) for _ in range(n - len(pool))]
    return pool[:n]


def _drop_pool(ray: Any) -> None:
    for actors in _POOL.values():
        for actor in actors:
            ray.kill(actor)
    _POOL.clear()


def run_on_ray(
    analysis: str,
    spec: ModelSpec,
    job: Job,
    cluster: ClusterConfig,
    faults: FaultInjection | None = None,
) -> tuple[list[Any], dict[str, Any]]:
    """The parts of ``job``'s shards, in shard order, and the cluster's shape."""
    ray = import_ray()
    if not ray.is_initialized():
        _POOL.clear()  # actors of an instance that is gone
    started = connect(cluster.address, cluster.local_cpus)
    ok = False
    try:
        resources = ray.cluster_resources()
        cpus, gpus = int(resources.get("CPU", 1)), int(resources.get("GPU", 0))
        gpus_each = cluster.gpus_per_worker if cluster.gpus_per_worker is not None else (1 if gpus else 0)
        room = int(gpus // gpus_each) if gpus_each else cpus // cluster.cpus_per_worker
        if room < 1 and cluster.workers is None:
            raise UserInputError(
                f"the cluster has {cpus} CPUs and {gpus} GPUs: no room for one worker of "
                f"{cluster.cpus_per_worker} CPUs and {gpus_each} GPUs; lower cpus_per_worker"
            )
        n_shards = cluster.shards or SHARDS_PER_WORKER * (cluster.workers or room)
        shards = split(job.items, n_shards)
        n_workers = min(cluster.workers or room, len(shards))
        actors = ray_workers(ray, spec, cluster, n_workers, gpus_each)
        context = ray.put(job.context)  # sent once, shared by every shard
        parts = _dispatch(ray, analysis, actors, context, shards, cluster, faults)
        shape = {
            "address": cluster.address if cluster.address != "auto" else ("local" if started else "auto"),
            "workers": n_workers,
            "shards": len(shards),
            "cpus_per_worker": cluster.cpus_per_worker,
            "gpus_per_worker": gpus_each,
            "devices": ",".join(sorted({str(d) for d in ray.get([a.device.remote() for a in actors])})),
        }
        ok = True
        return parts, shape
    finally:
        if started or not ok:  # a failed run may leave actors in any state: start afresh
            _drop_pool(ray)
        if started:
            ray.shutdown()


def _dispatch(
    ray: Any,
    analysis: str,
    actors: list[Any],
    context: Any,
    shards: list[tuple[Any, ...]],
    cluster: ClusterConfig,
    faults: FaultInjection | None,
) -> list[Any]:
    """Each free actor takes the next shard; every shard's part is kept exactly once."""
    waiting = list(range(len(shards)))
    pending: dict[Any, tuple[Any, int]] = {}
    parts: dict[int, Any] = {}

    def submit(actor: Any) -> None:
        k = waiting.pop(0)
        pending[actor.run.remote(analysis, context, shards[k], k, faults)] = (actor, k)

    for actor in actors:
        if waiting:
            submit(actor)
    with tqdm(total=sum(len(s) for s in shards), desc=f"{analysis} on Ray",
              disable=not cluster.progress) as bar:
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            actor, k = pending.pop(ref)
            try:
                part = ray.get(ref)
            except ray.exceptions.RayTaskError as err:
                cause = err.cause if getattr(err, "cause", None) is not None else err
                raise ShardError(
                    f"shard {k} of {len(shards)} ({len(shards[k])} items) failed: "
                    f"{type(cause).__name__}: {cause}"
                ) from cause
            except ray.exceptions.RayActorError as err:
                raise ShardError(
                    f"shard {k}: its worker could not start, or died more than "
                    f"{cluster.max_retries} times (max_retries): {err}"
                ) from err
            if k in parts:  # a retried shard must replace nothing: it never returned before
                raise RuntimeError(f"shard {k} returned twice")
            parts[k] = part
            bar.update(len(shards[k]))
            if waiting:
                submit(actor)
    return [parts[k] for k in range(len(shards))]
