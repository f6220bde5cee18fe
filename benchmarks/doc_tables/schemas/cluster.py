"""Schema of benchmarks/cluster.py's data file (docs/data/cluster.json), read by
doc_tables/cluster.py's renderers (with edges.json and aie.json for the plan)."""

from __future__ import annotations

from typing import TypedDict


class ClusterSeconds(TypedDict):
    plan: float
    """Planning on the driver (known facts, STR partners), in both runs."""
    single_process: float
    ray_init: float
    actors_start: float
    """Starting the actors: each imports lmsci-mi, loads the model and checks its fingerprint."""
    ray_run_warm: float
    ray_total: float


class ClusterData(TypedDict):
    model: str
    machine: str
    ray: str
    """Ray's version."""
    analysis: str
    n_facts: int
    workers: int
    threads_per_worker: int
    shards: int
    seconds: ClusterSeconds
    per_fact_single: float
    speedup_warm: float
    speedup_cold: float
    overhead_per_shard: float
    """Actor-seconds per shard beyond the single process's compute."""
    equal: bool
    """The sharded AIE equals the single-process one exactly."""
