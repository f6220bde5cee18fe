"""Issue 23's benchmark: the AIE over 20 facts on SmolLM2-135M, one process with one thread
against two single-threaded Ray actors on this 2-core machine (the same facts, the same config,
nothing else running), and where the Ray run's time goes.

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/cluster.py     # ~8 min; docs/data/cluster.json

Phases of the Ray run, each timed: starting the local instance (``ray.init``); starting the
actors (each imports lmsci-mi and loads the model, then checks its weights fingerprint); the
sharded run on warm actors (``run_sharded``: planning on the driver, the shards, the merge).
The overhead per shard is the actor-seconds the sharded run spent beyond the single process's
compute: (wall × workers − single-process seconds) / shards. The traces are not cached
(``AIEConfig.cache=False``), so both runs compute every fact; the sharded AIE must equal the
single-process one exactly (traces are seeded per fact). --quick traces 4 facts.
"""

from __future__ import annotations

import argparse

import harness
import torch
from doc_tables.schemas.cluster import ClusterData

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits.aie import (
    AIEConfig,
    AverageIndirectEffect,
    average_indirect_effect,
    plan_fact_traces,
)
from lmsci_mi.circuits.tracing import TraceConfig
from lmsci_mi.cluster import ClusterConfig, run_sharded
from lmsci_mi.cluster.ray_backend import import_ray, ray_workers
from lmsci_mi.cluster.spec import ModelSpec
from lmsci_mi.data import Fact, load_facts


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--facts", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=None, help="default: 4 per worker")


def single_process(run: harness.Run, lm: LensModel, facts: list[Fact], config: AIEConfig) -> AverageIndirectEffect:
    """The AIE in this process; its planning timed apart (both runs plan on the driver)."""
    with run.timed("plan"):
        plan_fact_traces(lm, facts, config)
    with run.timed("single_process"):
        single = average_indirect_effect(lm, facts, config)
    print(f"one process, one thread: {run.timings['single_process']:.1f} s for {single.n_facts} facts "
          f"(planning {run.timings['plan']:.1f} s)", flush=True)
    return single


def on_ray(run: harness.Run, lm: LensModel, facts: list[Fact], config: AIEConfig) -> tuple[AverageIndirectEffect, str]:
    """The same AIE on warm Ray actors of one thread each; returns it and Ray's version."""
    ray = import_ray()
    workers = run.args.workers
    with run.timed("ray_init"):
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    cluster = ClusterConfig(address="auto", workers=workers, shards=run.args.shards, progress=False)
    with run.timed("actors_start"):
        actors = ray_workers(ray, ModelSpec.of(lm), cluster, workers, 0)
        ray.get([a.device.remote() for a in actors])
    with run.timed("ray_run_warm"):
        sharded = run_sharded("aie", lm, facts, config, cluster=cluster)
    ray.shutdown()
    return sharded, ray.__version__


def record(run: harness.Run, model: str, single: AverageIndirectEffect, shards: int, ray: str) -> ClusterData:
    t, workers = run.timings, run.args.workers
    compute = t["single_process"] - t["plan"]  # the traces and the merge, without the planning both runs do
    overhead = (t["ray_run_warm"] - t["plan"]) * workers - compute
    total = t["ray_init"] + t["actors_start"] + t["ray_run_warm"]
    return ClusterData(
        model=model, machine="the project's 2-core CPU, nothing else running", ray=ray,
        analysis="AIE, STR, every kind, window 10, no trace cache", n_facts=single.n_facts,
        workers=workers, threads_per_worker=1, shards=shards,
        seconds={"plan": t["plan"], "single_process": t["single_process"], "ray_init": t["ray_init"],
                 "actors_start": t["actors_start"], "ray_run_warm": t["ray_run_warm"], "ray_total": total},
        per_fact_single=compute / single.n_facts, speedup_warm=t["single_process"] / t["ray_run_warm"],
        speedup_cold=t["single_process"] / total, overhead_per_shard=overhead / shards, equal=True,
    )


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags)
    lm = load_model("smollm2-135m")
    # docs/aie.md's SmolLM2 run: symmetric token replacement, every kind, window 10.
    config = AIEConfig(n_facts=4 if run.quick else run.args.facts, cache=False,
                       trace=TraceConfig(corruption="str"))
    facts = load_facts("facts")
    single = single_process(run, lm, facts, config)
    sharded, ray = on_ray(run, lm, facts, config)
    if not (torch.equal(sharded.values, single.values) and torch.equal(sharded.band, single.band)):
        raise SystemExit("the sharded AIE differs from the single-process one")
    data = record(run, lm.name, single, int(sharded.meta.params["cluster.shards"]), ray)
    run.write(data)
    s = data["seconds"]
    print("| run | seconds | speed-up |\n|---|---|---|")
    print(f"| one process, one thread | {s['single_process']:.1f} | 1.00× |")
    print(f"| {data['workers']} Ray actors, warm | {s['ray_run_warm']:.1f} | {data['speedup_warm']:.2f}× |")
    print(f"| … with ray.init ({s['ray_init']:.1f} s) and actor start ({s['actors_start']:.1f} s) | "
          f"{s['ray_total']:.1f} | {data['speedup_cold']:.2f}× |")
    print(f"overhead per shard: {data['overhead_per_shard']:.2f} actor-seconds over {data['shards']} shards")


if __name__ == "__main__":
    main()
