"""AlphaEdit's null-space threshold and MEMIT's λ on SmolLM2-135M (issue 38, items 3 and 4): one
batch of the editing table's first N facts, solved under each setting from the same fitted targets.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/editing_sweeps.py --facts 50 --threads 1   # resumable
    PYTHONPATH=. python benchmarks/editing_sweeps.py --quick --model toy-2l                    # a check

The facts are the first N of the 250-fact table's seeded order (``benchmarks/editing.py
ordered_edit_facts``), all N in one batch, layers 2-6, key statistics from the cache. The target
residuals z = h + δ (``memit_targets``) are fitted once per fact, at MEMITConfig's fit settings
(AlphaEdit shares them), cached per chunk of facts, and every setting solves from them
(``memit_edit``/``alphaedit_edit(targets=...)``): no setting here changes a target. Settings:
AlphaEdit with absolute thresholds (the paper's footnote 1e-2, its code's 2e-2, and values across
SmolLM2's eigenvalues of C, whose medians are 0.004-0.007) and with trace-share thresholds (the
null space holds at most that share of trace(C)); MEMIT with λ = 1,000, 5,000 (ours), 15,000 (the
paper's GPT-J) and 20,000 (GPT-2 XL). Each is scored with the library's teacher-forced ES, PS, NS
(``edited_scores``; GE skipped, as these settings leave the fit alone), with 95% percentile
bootstrap intervals over facts and paired intervals against the code default of its method, and
AlphaEdit's null space recorded per layer (dimension, share of trace(C), ‖Pk‖/‖k‖ of the keys).
Every setting is one cached item: --max-seconds stops between items, a rerun resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import harness
import torch
from doc_tables.editing_sweeps import editing_sweeps
from doc_tables.schemas.editing_sweeps import EditingSweepsData, LayerNullSpace, SweepRow
from editing import ordered_edit_facts

from lmsci_mi import LensModel, load_model
from lmsci_mi.config import Config
from lmsci_mi.editing import (
    PER_FACT,
    AlphaEditConfig,
    EditRequest,
    EvaluationConfig,
    KeyStatistics,
    MEMITConfig,
    StatsConfig,
    default_memit_layers,
    key_statistics,
)
from lmsci_mi.editing.alphaedit import alphaedit_edit
from lmsci_mi.editing.memit import memit_edit, memit_targets
from lmsci_mi.editing.metrics import edited_scores, plan_evaluation, unedited_scores
from lmsci_mi.stats import bootstrap_each, percentile_bounds

SETTINGS: dict[str, tuple[str, dict[str, float]]] = {
    # name: (method, changes to its default config)
    "memit lambda 1000": ("memit", {"mom2_weight": 1_000.0}),
    "memit lambda 5000": ("memit", {"mom2_weight": 5_000.0}),
    "memit lambda 15000": ("memit", {"mom2_weight": 15_000.0}),
    "memit lambda 20000": ("memit", {"mom2_weight": 20_000.0}),
    "alphaedit threshold 0.002": ("alphaedit", {"nullspace_threshold": 2e-3}),
    "alphaedit threshold 0.005": ("alphaedit", {"nullspace_threshold": 5e-3}),
    "alphaedit threshold 0.01": ("alphaedit", {"nullspace_threshold": 1e-2}),
    "alphaedit threshold 0.02": ("alphaedit", {"nullspace_threshold": 2e-2}),
    "alphaedit threshold 0.05": ("alphaedit", {"nullspace_threshold": 5e-2}),
    "alphaedit trace share 0.001": ("alphaedit", {"nullspace_trace_share": 1e-3}),
    "alphaedit trace share 0.01": ("alphaedit", {"nullspace_trace_share": 1e-2}),
    "alphaedit trace share 0.05": ("alphaedit", {"nullspace_trace_share": 5e-2}),
}
REFERENCE = {"memit": "memit lambda 5000", "alphaedit": "alphaedit threshold 0.02"}
"""The row each setting is compared with, paired over facts: the code default of its method."""
METRICS = ("ES", "PS", "NS")
TARGET_CHUNK = 8
QUICK_FIT = {"steps": 4, "n_contexts": 2}
"""--quick's fit: a check of the script, not of the method."""
QUICK_SETTINGS = ("memit lambda 5000", "memit lambda 15000", "alphaedit threshold 0.02",
                  "alphaedit trace share 0.01")


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--facts", type=int, default=50, help="the first N facts of the editing table's order")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="start no item after this many seconds (run again to resume)")


@dataclass
class Setup:
    """What every setting shares: the model, C, the layers, the facts, the fit behind the targets
    and the evaluation (teacher-forced scores only: GE skipped)."""

    lm: LensModel
    stats: KeyStatistics
    layers: list[int]
    facts: list[EditRequest]
    fit: MEMITConfig
    evaluation: EvaluationConfig


def config_of(s: Setup, name: str) -> Config:
    method, changes = SETTINGS[name]
    # AlphaEdit with MEMIT's fit settings: the targets are the same for both.
    fit = {f.name: getattr(s.fit, f.name) for f in dataclasses.fields(s.fit)}
    base = AlphaEditConfig(**fit) if method == "alphaedit" else s.fit
    return base.replace(**changes)


def targets(run: harness.Run, cache: harness.ItemCache, s: Setup, deadline: float) -> torch.Tensor | None:
    """z per fact, fitted a chunk of facts at a time and cached (None when the deadline passes)."""
    parts = []
    for first in range(0, len(s.facts), TARGET_CHUNK):
        path = cache.path(f"targets-{first:04d}", ".pt")
        if not path.is_file():
            if time.perf_counter() > deadline:
                return None
            chunk = s.facts[first : first + TARGET_CHUNK]
            with run.timed("targets") as timer:
                z = memit_targets(s.lm, chunk, s.fit, layers=s.layers)
            torch.save(z.detach().cpu().clone(), path)
            print(f"targets of facts {first}..{first + len(chunk) - 1}: {timer.seconds:.0f} s", flush=True)
        parts.append(torch.load(path))
    return torch.cat(parts)


def solve_and_score(s: Setup, name: str, z: torch.Tensor) -> dict:
    """One setting: the batch edit from the given targets, the edited per-fact scores (the
    weights are restored), and AlphaEdit's null space per layer."""
    config = config_of(s, name)
    plan = plan_evaluation(s.lm, s.facts, config, s.evaluation)
    edit = alphaedit_edit if isinstance(config, AlphaEditConfig) else memit_edit
    begin = time.perf_counter()
    with edit(s.lm, s.facts, config, stats=s.stats, targets=z) as handle:
        seconds = time.perf_counter() - begin
        deltas = {k: v.clone() for k, v in handle.deltas.items()}
        records = handle.details.get("null_space", {})
    after = edited_scores(s.lm, plan, [list(range(len(s.facts)))], deltas=deltas).scores
    null = {str(layer): LayerNullSpace(
        dims=r.dims, d_mlp=r.d_mlp, direction_share=r.direction_share, trace_share=r.trace_share,
        key_norm_kept_mean=statistics.fmean(r.key_norm_kept), key_norm_kept_min=min(r.key_norm_kept),
        key_norm_kept_max=max(r.key_norm_kept)) for layer, r in records.items()}
    return {"config": config.params(), "seconds": seconds, "per_fact": after.tolist(), "null_space": null}


def score_s(per_fact: torch.Tensor, index: torch.Tensor | None = None) -> float:
    """The score S of the facts ``index`` (all when None): the harmonic mean of the ES, PS and
    NS means in percent, 0 when one is 0 (as ``EditEvaluation``'s S)."""
    rows = per_fact if index is None else per_fact[index]
    means = [100 * float(rows[:, PER_FACT.index(m)].mean()) for m in METRICS]
    return statistics.harmonic_mean(means) if min(means) > 0 else 0.0


def _statistic(per_fact: torch.Tensor, metric: str) -> Callable[[torch.Tensor], float]:
    """``metric`` (S, or a per-fact column in percent) of the facts an index picks."""
    if metric == "S":
        return lambda index: score_s(per_fact, index)
    return lambda index: 100 * float(per_fact[index, PER_FACT.index(metric)].mean())


def row(name: str, item: dict, reference: dict | None) -> SweepRow:
    """The setting's S, ES, PS, NS (percent) with bootstrap intervals over facts, and paired
    differences against its method's reference row (the same resampled facts for both)."""
    per_fact = torch.tensor(item["per_fact"])
    base = None if reference is None else torch.tensor(reference["per_fact"])
    metrics, ci95, vs = {}, {}, {}
    everything = torch.arange(len(per_fact))
    for m in ("S", *METRICS):
        mine = _statistic(per_fact, m)
        low, high = percentile_bounds(bootstrap_each(mine, len(per_fact), n_resamples=2000, seed=0)).tolist()
        metrics[m], ci95[m] = mine(everything), [low, high]
        if base is not None:
            theirs = _statistic(base, m)
            replicates = bootstrap_each(lambda i, a=mine, b=theirs: a(i) - b(i), len(per_fact),
                                        n_resamples=2000, seed=0)
            low, high = percentile_bounds(replicates).tolist()
            vs[m] = [metrics[m] - theirs(everything), low, high]
    method, changes = SETTINGS[name]
    return SweepRow(name=name, method=method, changes=changes, metrics=metrics, ci95=ci95,
                    vs_reference=vs, seconds=item["seconds"], null_space=item["null_space"])


def prepare(run: harness.Run) -> Setup:
    with run.timed("load"):
        lm = load_model(run.args.model)
    layers = list(default_memit_layers(lm))
    fit = MEMITConfig(**QUICK_FIT) if run.quick else MEMITConfig()
    n_tokens = 2_048 if run.quick else fit.stats_tokens
    with run.timed("statistics"):
        stats = key_statistics(lm, layers, StatsConfig(n_tokens=n_tokens))
    facts = ordered_edit_facts(4 if run.quick else run.args.facts)
    return Setup(lm, stats, layers, facts, fit, EvaluationConfig(generation_tokens=0))


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags)
    s = prepare(run)
    deadline = time.perf_counter() + run.args.max_seconds
    cache = run.cache({"model": run.args.model, "quick": run.quick, "facts": len(s.facts),
                       "fit": s.fit.params(), "stats_tokens": s.stats.n_tokens})
    z = targets(run, cache, s, deadline)
    names = QUICK_SETTINGS if run.quick else tuple(SETTINGS)
    items = {}
    for name in names:
        if name not in cache and time.perf_counter() > deadline:
            print("deadline: run again to resume", flush=True)
            return
        if z is None:
            print("deadline: run again to resume", flush=True)
            return
        with run.timed("settings"):
            items[name] = cache.get(name, lambda name=name: solve_and_score(s, name, z))
        print(f"{name}: ES/PS/NS " + " ".join(f"{100 * v:.1f}" for v in torch.tensor(
            items[name]["per_fact"])[:, :3].mean(0).tolist()), flush=True)
    plan = plan_evaluation(s.lm, s.facts, s.fit, s.evaluation)
    before = unedited_scores(s.lm, plan, range(len(s.facts)))
    data = EditingSweepsData(
        model=run.args.model, facts="lmsci_mi/data/edit_facts.json (the editing table's order, first N)",
        n_facts=len(s.facts), layers=s.layers, stats_tokens=s.stats.n_tokens, stats_source=s.stats.source,
        fit=s.fit.params(), interval="percentile bootstrap over facts, 2000 resamples, 95%; "
        "vs_reference: paired, the same facts", reference=REFERENCE,
        unedited={"S": score_s(before), **{m: 100 * float(before[:, PER_FACT.index(m)].mean()) for m in METRICS}},
        rows=[row(name, items[name], items.get(REFERENCE[SETTINGS[name][0]]) if name != REFERENCE[SETTINGS[name][0]]
                  else None) for name in names],
    )
    run.write(data)
    print(editing_sweeps(data))


if __name__ == "__main__":
    main()
