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
single-process one exactly (traces are seeded per fact).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.circuits.aie import (
    AIEConfig,
    average_indirect_effect,
    load_fact_set,
    plan_fact_traces,
)
from lmsci_mi.circuits.tracing import TraceConfig
from lmsci_mi.cluster import ClusterConfig, run_sharded
from lmsci_mi.cluster.ray_backend import import_ray, ray_workers
from lmsci_mi.cluster.spec import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data" / "cluster.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=None, help="default: 4 per worker")
    args = parser.parse_args()
    torch.set_num_threads(1)
    lm = load_model("smollm2-135m")
    # docs/aie.md's SmolLM2 run: symmetric token replacement, every kind, window 10.
    config = AIEConfig(n_facts=args.facts, cache=False, trace=TraceConfig(corruption="str"))
    facts = load_fact_set("shipped")

    start = time.perf_counter()
    plan_fact_traces(lm, facts, config)
    plan_s = time.perf_counter() - start
    start = time.perf_counter()
    single = average_indirect_effect(lm, facts, config)
    single_s = time.perf_counter() - start
    print(f"one process, one thread: {single_s:.1f} s for {single.n_facts} facts (planning {plan_s:.1f} s)", flush=True)

    ray = import_ray()
    start = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    init_s = time.perf_counter() - start
    cluster = ClusterConfig(address="auto", workers=args.workers, shards=args.shards, progress=False)
    start = time.perf_counter()
    actors = ray_workers(ray, ModelSpec.of(lm), cluster, args.workers, 0)
    ray.get([a.device.remote() for a in actors])
    actors_s = time.perf_counter() - start
    start = time.perf_counter()
    sharded = run_sharded("aie", lm, facts, config, cluster=cluster)
    run_s = time.perf_counter() - start
    ray.shutdown()
    if not (torch.equal(sharded.values, single.values) and torch.equal(sharded.band, single.band)):
        raise SystemExit("the sharded AIE differs from the single-process one")
    shards = int(sharded.meta.params["cluster.shards"])
    compute = single_s - plan_s  # the traces and the merge, without the planning both runs do
    overhead = (run_s - plan_s) * args.workers - compute
    data = {
        "command": "HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/cluster.py",
        "date": time.strftime("%Y-%m-%d"),
        "model": lm.name,
        "machine": "the project's 2-core CPU, nothing else running",
        "ray": ray.__version__,
        "analysis": "AIE, STR, every kind, window 10, no trace cache",
        "n_facts": single.n_facts,
        "workers": args.workers,
        "threads_per_worker": 1,
        "shards": shards,
        "seconds": {
            "plan": plan_s,
            "single_process": single_s,
            "ray_init": init_s,
            "actors_start": actors_s,
            "ray_run_warm": run_s,
            "ray_total": init_s + actors_s + run_s,
        },
        "per_fact_single": compute / single.n_facts,
        "speedup_warm": single_s / run_s,
        "speedup_cold": single_s / (init_s + actors_s + run_s),
        "overhead_per_shard": overhead / shards,
        "equal": True,
    }
    DATA.write_text(json.dumps(data, indent=1))
    s = data["seconds"]
    print("| run | seconds | speed-up |\n|---|---|---|")
    print(f"| one process, one thread | {s['single_process']:.1f} | 1.00× |")
    print(f"| {args.workers} Ray actors, warm | {s['ray_run_warm']:.1f} | {data['speedup_warm']:.2f}× |")
    print(f"| … with ray.init ({s['ray_init']:.1f} s) and actor start ({s['actors_start']:.1f} s) | "
          f"{s['ray_total']:.1f} | {data['speedup_cold']:.2f}× |")
    print(f"overhead per shard: {data['overhead_per_shard']:.2f} actor-seconds over {shards} shards")


if __name__ == "__main__":
    main()
