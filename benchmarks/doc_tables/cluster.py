"""Renderers of docs/cluster.md: the AIE on two Ray actors, and the plan for 10,000 items."""

from __future__ import annotations

import math

from . import markdown, num, table
from .schemas.cluster import ClusterData

PLAN_WORKERS = (1, 8, 64, 512)
PLAN_ITEMS = 10_000


@table("cluster_run")
def cluster_run(data: ClusterData) -> str:
    """benchmarks/cluster.py: one process against the Ray actors, and where the time goes."""
    s, w = data["seconds"], data["workers"]
    return markdown(
        ["run", "seconds", "speed-up"],
        [
            [f"one process, one thread ({data['n_facts']} facts)", num(s["single_process"], 1), "1.00×"],
            [f"{w} Ray actors of one thread, warm ({data['shards']} shards)", num(s["ray_run_warm"], 1),
             f"{data['speedup_warm']:.2f}×"],
            [f"… plus `ray.init` ({num(s['ray_init'], 1)} s) and starting the actors ({num(s['actors_start'], 1)} s: "
             "imports, model load, fingerprint)", num(s["ray_total"], 1), f"{data['speedup_cold']:.2f}×"],
            ["planning on the driver (known facts, STR partners), in both runs", num(s["plan"], 1), ""],
            ["overhead per shard (actor-seconds beyond the single process's compute)",
             num(data["overhead_per_shard"], 2), ""],
        ],
    )


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


@table("cluster_plan")
def cluster_plan(docs: dict) -> str:
    """The expected wall time of 10,000 items at N one-thread CPU workers, from the per-item
    seconds measured here: plan + items / N × t + start + shards per worker × overhead."""
    c, e = docs["cluster"], docs["edges"]
    shipped = docs["aie"]["smollm2-str"]["n_candidates"]  # the fact set the planning went over
    s = c["seconds"]
    start = s["ray_init"] + s["actors_start"]
    per_shard = c["overhead_per_shard"]
    plan_per_fact = s["plan"] / shipped
    rows = []
    work = {
        f"AIE, {c['analysis'].split(',')[1].strip()}": (c["per_fact_single"], plan_per_fact * PLAN_ITEMS,
                                                      "per fact, one thread"),
        "EAP-IG (m = 5), all edges": (e["seconds_EAP-IG"] / e["prompts"], 0.0, f"per prompt, {e['prompts']} prompts, 2 threads"),
    }
    for name, (t, plan, unit) in work.items():
        cells = []
        for n in PLAN_WORKERS:
            shards_each = 4
            wall = plan + math.ceil(PLAN_ITEMS / n) * t + start + shards_each * per_shard
            cells.append(_hours(wall))
        rows.append([name, f"{num(t, 2)} s ({unit})", _hours(plan) if plan else "–", *cells])
    return markdown(
        ["analysis of 10,000 items", "measured here", "planning on the driver",
         *(f"{n} worker{'s' if n > 1 else ''}" for n in PLAN_WORKERS)],
        rows,
    )
