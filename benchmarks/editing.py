"""Speed and the editing table of lmsci_mi.editing on SmolLM2-135M (issue 21).

    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --speed    # quiet machine: the timings
    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --floor    # alone: FLOPs per edit, matmul rate
    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --table    # resumable: run until "done"
    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --table --methods memit alphaedit
    PYTHONPATH=. python benchmarks/editing.py --quick --model toy-2l --speed --floor --table   # a check

--speed times, with cached key statistics and context prefixes, on the first facts of the small
shipped set (``load_facts``, where issue 21's "before" figures come from): one ROME edit at its
default layer (5 facts) with the fit of before issue 38 and with the default, alternated fact by
fact, each with its steps, positions run (real and padded) and p(new), p(true) after the edit
(``rome_fits``; --rome-only: nothing else; the data says the CPU was shared unless --quiet),
MEMIT on 50 facts in one batch (and, with --memit-before N, on N facts with the fit's prefix reuse
on and off: off is how it was done before), AlphaEdit on the same facts after it, timed as a user
runs it (its own δ fits included, ``cache_fits=False`` as for MEMIT: none reused from MEMIT's), and
the full evaluation of one fact with 50-token generation entropy (unedited baseline uncached, the
edit, the edited scores). --rome-only, --memit-only and --alphaedit-only time that part alone (give
several to time several) and keep the other rows. Wall-clock and CPU seconds; writes
editing_speed.json beside --out (docs/data/), keeping the rows it did not measure and the floor.

--floor counts the floating-point operations of one ROME edit (the same 5 facts) at the paper's
settings, running only the positions its fit needs (the default), and as implemented before issue
38 (the edit-aware fit, rows padded: its padding share recorded), and of MEMIT per fact as
implemented (8 facts, every δ fitted; --floor-memit 0 keeps the last count), and probes this CPU's
float32 matmul rate at 1 and 2 threads (--keep-rate: the last probe's, on a shared CPU): the FLOPs
over the rate is the least time those settings take at that rate. Run it alone (the rate probe
needs the cores); it adds ``arithmetic_floor`` to editing_speed.json.

--table evaluates ROME (one fact at a time, restored between facts), MEMIT and AlphaEdit (all
facts in one batch) on every fact of the shipped editing fact set, with GE, against the unedited
model. ROME's facts are cached in chunks of 10; a batch method's edit is cached once and its
edited scores in chunks of 25 facts (``batch_evaluation``), in the harness's per-item cache, so an
interrupted run continues (--backward: a second process takes ROME's chunks from the end); the
unedited baseline is cached per fact and shared. --partial writes the table from what is done
(ROME on its first facts). When every method is done it writes --out, docs/data/editing_table.json
(every metric with a 95% percentile-bootstrap interval over facts), and prints the markdown table.

ROME's per-fact edits are cached once per config (``rome_edits``) and read by --table and by
editing_wild.py alike; --rome-edits only fills that cache, every --stride-th fact from --offset,
so two one-thread processes (--offset 0 and 1, --stride 2) fit the 250 facts together:

    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --threads 1 --rome-edits --before --facts 250 --stride 2 --offset 0

--quick: 4 fit steps, 2,048 statistics tokens, 5 tokens of GE; --speed times 1 ROME edit, MEMIT
and AlphaEdit on 2 facts, --floor probes the rate for 0.5 s and counts 1 ROME edit and MEMIT on 2 facts, --table
runs 4 facts in chunks of 2.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import harness
import torch
from doc_tables.editing import editing_cost, editing_floor, editing_rome_fits, editing_table
from doc_tables.schemas.editing import (
    ArithmeticFloor,
    CostBefore,
    CostRow,
    EditingSpeedData,
    EditingTableData,
    EditRow,
    RomeFitRun,
    RomeFits,
    RomeFloor,
)

from lmsci_mi import LensModel, load_model
from lmsci_mi.config import Config
from lmsci_mi.editing import (
    EDITING_METHODS,
    METRICS,
    PER_FACT,
    AlphaEditConfig,
    EditEvaluation,
    EditHandle,
    EditRequest,
    EvaluationConfig,
    KeyStatistics,
    MEMITConfig,
    ROMEConfig,
    StatsConfig,
    alphaedit_edit,
    context_templates,
    default_memit_layers,
    default_rome_layer,
    evaluate_edits,
    key_statistics,
    load_facts,
    memit_edit,
    rome_edit,
)
from lmsci_mi.editing.installed import target_probabilities, with_true_targets
from lmsci_mi.editing.metrics import (
    EditedScores,
    assemble_evaluation,
    edited_scores,
    plan_evaluation,
    unedited_scores,
)
from lmsci_mi.weights import read_deltas

T = TypeVar("T")
# MEMIT and AlphaEdit fit the same δ on the unedited model: cached, each is fitted once.
CONFIGS: dict[str, Config] = {
    "rome": ROMEConfig(),
    "memit": MEMITConfig(cache_fits=True),
    "alphaedit": AlphaEditConfig(cache_fits=True),
}
BEFORE_38: dict[str, Config] = {
    "rome": ROMEConfig(fit="edit_aware", n_contexts=5, steps=40, stop_on="nll", weight_decay=0.05,
                       decay="squared"),
    "memit": MEMITConfig(cache_fits=True, stop_on="nll", decay="squared"),
    "alphaedit": AlphaEditConfig(cache_fits=True, stop_on="nll", decay="squared"),
}
"""Each method's defaults before issue 38, for --table --before: ROME's edit-aware fit (5 prefixes,
up to 40 steps stopped on the NLL, decay 0.05·(‖δ‖/‖v̄₀‖)²) and MEMIT's and AlphaEdit's fit
stopped on the NLL with the squared decay. ROME's rows run grouped, not padded as they were: the
same δ to float rounding (tested), in less time."""
ROME_CHUNK = 10
SCORE_CHUNK = 25
PROBES = ("NEG", "REV", "2HOP", "ORL")
BEFORE_ISSUE_21 = CostBefore(source="issue 21 (measured by an earlier session on this CPU)",
                             rome_edit_s="5-16", memit_50_facts_s=434, evaluation_one_fact_s=70)
QUICK_FIT = {"steps": 4, "n_contexts": 2}
"""--quick's fit: a check of the script, not of the method."""
QUICK = {"stats_tokens": 2_048, "ge_tokens": 5, "n_rome": 1, "n_memit": 2, "rate_seconds": 0.5,
         "facts": 4, "chunk": 2}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--speed", action="store_true", help="the timings (quiet machine)")
    parser.add_argument("--table", action="store_true", help="the editing table (resumable)")
    parser.add_argument("--floor", action="store_true",
                        help="FLOPs per edit and the matmul rate: the targets' arithmetic floor (alone)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n-rome", type=int, default=5, help="--speed and --floor: ROME edits timed or counted")
    parser.add_argument("--rome-only", action="store_true", help="--speed: time ROME only (no MEMIT, no evaluation)")
    parser.add_argument("--memit-only", action="store_true",
                        help="--speed and --floor: MEMIT only (ROME's and the evaluation's last figures kept)")
    parser.add_argument("--alphaedit-only", action="store_true",
                        help="--speed: AlphaEdit only, on --n-memit facts (the other rows' last figures kept)")
    parser.add_argument("--quiet", action="store_true",
                        help="--speed: record that nothing else ran (default: the data says the CPU was shared)")
    parser.add_argument("--n-memit", type=int, default=50, help="--speed: facts in the MEMIT and AlphaEdit batch")
    parser.add_argument("--memit-before", type=int, default=0, metavar="N",
                        help="--speed: also time MEMIT on N facts with the fit's passes of before issue 38 "
                             "(8 facts a call) and the default, alternated")
    parser.add_argument("--floor-memit", type=int, default=8,
                        help="--floor: facts whose MEMIT FLOPs are counted (0: keep the last count)")
    parser.add_argument("--keep-rate", action="store_true",
                        help="--floor: keep the last run's matmul rate (the CPU is shared now)")
    parser.add_argument("--methods", nargs="+", default=["memit", "alphaedit", "rome"], choices=sorted(CONFIGS))
    parser.add_argument("--facts", type=int, default=None,
                        help="--table: the first N facts in a seeded random order (default all)")
    parser.add_argument("--rome-facts", type=int, default=None,
                        help="--table: ROME on the first N of those facts only (default all)")
    parser.add_argument("--backward", action="store_true",
                        help="--table: take ROME's chunks from the last (a second process beside a forward one)")
    parser.add_argument("--partial", action="store_true",
                        help="--table: write the table from the methods done so far (ROME on its first facts)")
    parser.add_argument("--rome-edits", action="store_true",
                        help="only fit and cache ROME's per-fact edits of the table's facts (with --before also "
                             "at the defaults before issue 38), every --stride-th from --offset: two processes "
                             "of one thread fill the cache that --table and editing_wild.py read")
    parser.add_argument("--stride", type=int, default=1, help="--rome-edits: every N-th fact")
    parser.add_argument("--offset", type=int, default=0, help="--rome-edits: starting at this fact")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="--table: start no chunk after this many seconds (run again to resume)")
    parser.add_argument("--before", nargs="*", choices=sorted(EDITING_METHODS.names()), default=None,
                        metavar="METHOD",
                        help="--table: also these methods (none named: every --methods one) at their defaults "
                             "before issue 38 (rows '<method> before 38'), and the paired differences new - "
                             "before of S, ES, PS and NS")


# --- what every part shares ----------------------------------------------------------------------


@dataclass
class Setup:
    """The model with its key statistics and the methods' configs, as every part uses them."""

    lm: LensModel
    stats: KeyStatistics
    configs: dict[str, Config]
    evaluation: EvaluationConfig
    rome_layer: int
    memit_layers: list[int]


def prepare(run: harness.Run) -> Setup:
    """Load the model, gather the key statistics of ROME's and MEMIT's default layers (cached)
    and sample the context prefixes once (they are per model, not part of an edit's time)."""
    quick = run.quick
    configs = {name: c.replace(**QUICK_FIT) if quick else c for name, c in CONFIGS.items()}
    configs |= {f"{name}-before-38": c.replace(**QUICK_FIT) if quick else c for name, c in BEFORE_38.items()}
    with run.timed("load"):
        lm = load_model(run.args.model)
    layer, layers = default_rome_layer(lm), list(default_memit_layers(lm))
    n_tokens = QUICK["stats_tokens"] if quick else ROMEConfig().stats_tokens
    with run.timed("statistics"):
        stats = key_statistics(lm, sorted({layer, *layers}), StatsConfig(n_tokens=n_tokens))
        for name in ("rome", "memit"):
            c = configs[name]
            context_templates(lm, c.n_contexts, c.context_lengths, seed=c.seed)
    evaluation = EvaluationConfig(**({"generation_tokens": QUICK["ge_tokens"]} if quick else {}))
    return Setup(lm, stats, configs, evaluation, layer, layers)


def clocked(fn: Callable[[], T]) -> tuple[T, float, float]:
    """``fn()``'s value with its wall-clock and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def speed_file(run: harness.Run) -> Path:
    return run.out.with_name("editing_speed.json")


# --- --speed --------------------------------------------------------------------------------------


BEFORE_ROME = BEFORE_38["rome"].replace(pad_rows=True)
"""ROME's defaults before issue 38 as they ran: :data:`BEFORE_38`'s, rows padded to the longest."""
ROME_FITS = {"before": ("edit-aware fit, rows padded (the defaults before issue 38)", BEFORE_ROME),
             "after": ("the paper's fit, rows grouped (the default)", CONFIGS["rome"]),
             "decay": ("the paper's fit with the decay of before (0.05·(‖δ‖/‖v̄₀‖)²)",
                       CONFIGS["rome"].replace(weight_decay=0.05, decay="squared"))}
"""--speed's ROME fits. "decay" tells whether the paper's weight decay is what an edit that does
not install lacks on this model (the decay the edit-aware fit had)."""


def rome_fit_run(label: str, hp: ROMEConfig, times: list[tuple[float, float, EditHandle, list]]) -> RomeFitRun:
    """One fit's timings, fit counts and installs over the facts, as the data file holds them."""
    walls = [w for w, _, _, _ in times]
    details = [h.details for _, _, h, _ in times]
    real = [d["real_tokens"] for d in details]
    padded = [d["padded_tokens"] for d in details]
    p = [after for _, _, _, after in times]
    return RomeFitRun(
        label=label, config=hp.params(), wall_s_each=walls, cpu_s_each=[c for _, c, _, _ in times],
        median_s=statistics.median(walls), min_s=min(walls), max_s=max(walls),
        steps_each=[d["fit_steps"] for d in details], real_tokens_each=real, padded_tokens_each=padded,
        padding_share=sum(padded) / max(1, sum(real) + sum(padded)),
        p_new_each=[x.new for x in p], p_true_each=[x.true for x in p],
        installed=sum(x.new > x.true for x in p),
    )


def time_rome(s: Setup, facts: list[EditRequest], warm: EditRequest) -> tuple[list[CostRow], list[RomeFitRun]]:
    """One ROME edit per fact at the default layer with each fit of ``ROME_FITS``, alternated fact
    by fact after one untimed edit of each (``warm``), restored after each; with p(new) and
    p(true) on the edited model."""
    configs = {key: (label, hp.replace(layer=s.rome_layer)) for key, (label, hp) in ROME_FITS.items()}
    for _, hp in configs.values():
        rome_edit(s.lm, warm, hp, stats=s.stats).restore()
    times: dict[str, list] = {key: [] for key in configs}
    for fact in facts:
        for key, (_, hp) in configs.items():
            handle, wall, cpu = clocked(lambda f=fact, hp=hp: rome_edit(s.lm, f, hp, stats=s.stats))
            (after,) = target_probabilities(s.lm, [fact])
            handle.restore()
            times[key].append((wall, cpu, handle, after))
            print(f"ROME {key} {fact.subject} -> {fact.target_new}: {wall:.1f} s, {handle.details['fit_steps']} "
                  f"steps, p(new) {after.new:.3f} p(true) {after.true:.3f}", flush=True)
    runs = [rome_fit_run(configs[key][0], configs[key][1], t) for key, t in times.items() if t]
    rows = [CostRow(what=f"one ROME edit, layer {s.rome_layer}, {run['label']} (median of {len(facts)} facts)",
                    wall_s=run["median_s"], cpu_s=statistics.median(run["cpu_s_each"]),
                    wall_s_each=run["wall_s_each"], target_s=5 if key == "after" else None, date="")
            for key, run in zip(times, runs, strict=True)]
    return rows, runs


MEMIT_FITS = {
    "after": ("the paper's fit (compute_z), all facts' rows in shared passes (the default)", CONFIGS["memit"]),
    "passes": ("the same fit, 8 facts a call (the passes of before issue 38)",
               CONFIGS["memit"].replace(batch_size=8, pass_tokens=10**9)),
    "before": ("stop on the NLL, decay (‖δ‖/‖h̄₀‖)², 8 facts a call (the defaults before issue 38)",
               CONFIGS["memit"].replace(batch_size=8, pass_tokens=10**9, stop_on="nll", decay="squared")),
}
"""MEMIT's fits: "passes" differs from "after" only in how rows share passes (the same δ);
"before" also in the stop rule and the decay (the fit of before issue 38)."""


def memit_run(label: str, hp: MEMITConfig, n: int, wall: float, cpu: float, details: dict) -> dict:
    """One timed MEMIT edit as the data file holds it: its fit's steps and positions run."""
    real, padded = details["real_tokens"], details["padded_tokens"]
    return {"label": label, "config": hp.params(), "n_facts": n, "wall_s": wall, "cpu_s": cpu,
            "fit_steps_each": details["fit_steps"], "real_tokens": real, "padded_tokens": padded,
            "padding_share": padded / max(1, real + padded)}


def time_memit(s: Setup, facts: list[EditRequest], n: int, before: int) -> tuple[list[CostRow], list[dict]]:
    """MEMIT on ``n`` facts in one batch at the default; with ``before``, also on that many facts
    with the passes of before issue 38 and the default, alternated (untimed warm-up first)."""
    runs = [(n, "after")] if n else []
    if before:
        runs += [(before, "passes"), (before, "after")]
        warm = s.configs["memit"].replace(cache_fits=False, steps=2)
        memit_edit(s.lm, facts[:2], warm, stats=s.stats).restore()
    rows, fits = [], []
    for count, key in runs:
        label, hp = MEMIT_FITS[key]
        hp = hp.replace(cache_fits=False, **{k: getattr(s.configs["memit"], k) for k in QUICK_FIT})
        handle, wall, cpu = clocked(lambda hp=hp, count=count: memit_edit(s.lm, facts[:count], hp, stats=s.stats))
        handle.restore()
        fits.append(memit_run(label, hp, count, wall, cpu, handle.details))
        rows.append(CostRow(what=f"MEMIT, {count} facts in one batch, {label}", wall_s=wall, cpu_s=cpu,
                            target_s=150 if count == 50 and key == "after" else None, date=""))
        print(f"{rows[-1]['what']}: {wall:.1f} s, steps {handle.details['fit_steps']}", flush=True)
    return rows, fits


ALPHAEDIT_FIT = "the paper's fit (compute_z), all facts' rows in shared passes, its own δ fits (the default)"
"""--speed's AlphaEdit row: MEMIT's default fit, fitted again rather than read from MEMIT's."""


def time_alphaedit(s: Setup, facts: list[EditRequest], n: int) -> tuple[list[CostRow], list[dict]]:
    """AlphaEdit on ``n`` facts in one batch at the default, as a user runs it: ``cache_fits=False``
    as MEMIT is timed, so its δ fits are in the time (the null-space projectors too)."""
    hp = s.configs["alphaedit"].replace(cache_fits=False)
    handle, wall, cpu = clocked(lambda: alphaedit_edit(s.lm, facts[:n], hp, stats=s.stats))
    handle.restore()
    row = CostRow(what=f"AlphaEdit, {n} facts in one batch, {ALPHAEDIT_FIT}", wall_s=wall, cpu_s=cpu,
                  target_s=None, date="")
    print(f"{row['what']}: {wall:.1f} s, steps {handle.details['fit_steps']}", flush=True)
    return [row], [memit_run(ALPHAEDIT_FIT, hp, n, wall, cpu, handle.details)]


def time_evaluation(s: Setup, fact: EditRequest) -> list[CostRow]:
    """The evaluation of one fact with GE: the unedited baseline computed, then from its cache."""
    hp = s.configs["rome"].replace(layer=s.rome_layer)

    def evaluate(use_cache: bool) -> EditEvaluation:
        return evaluate_edits(s.lm, [fact], hp, stats=s.stats, evaluation=s.evaluation, use_cache=use_cache)

    ev, wall, cpu = clocked(lambda: evaluate(False))
    rows = [
        CostRow(what=f"evaluation of one fact, GE {s.evaluation.generation_tokens} tokens, baseline computed "
                     "(ROME edit included)", wall_s=wall, cpu_s=cpu, target_s=None, date=""),
        CostRow(what="… the same, the edit excluded", wall_s=wall - ev.seconds_per_edit, cpu_s=None,
                target_s=None, date=""),
    ]
    evaluate(True)  # fills the cache
    ev, wall, _ = clocked(lambda: evaluate(True))
    rows.append(CostRow(what="evaluation of one fact, unedited baseline cached (the edit excluded)",
                        wall_s=wall - ev.seconds_per_edit, cpu_s=None, target_s=10, date=""))
    return rows


SPEED_PARTS = ("rome", "memit", "alphaedit", "evaluation")
"""What --speed times; the --*-only flags choose some of them."""


def speed_parts(args: argparse.Namespace) -> set[str]:
    """Every part, or those the --rome-only, --memit-only and --alphaedit-only flags name."""
    only = {part for part in SPEED_PARTS[:3] if getattr(args, f"{part}_only")}
    return only or set(SPEED_PARTS)


def row_part(what: str) -> str:
    """The part of --speed a row of ``rows`` belongs to."""
    starts = {"one ROME edit": "rome", "MEMIT": "memit", "AlphaEdit": "alphaedit"}
    return next((part for start, part in starts.items() if what.startswith(start)), "evaluation")


def kept_rows(previous: EditingSpeedData | None, rows: list[CostRow], parts: set[str]) -> list[CostRow]:
    """A partial run keeps the rows it did not measure: ROME's and the evaluation's rows go as a
    whole when this run times that part; MEMIT's and AlphaEdit's one by one (a run on another
    fact count keeps the others)."""
    measured = {r["what"] for r in rows}
    return [r for r in (previous or {}).get("rows", []) if r["what"] not in measured
            and (row_part(r["what"]) not in parts or row_part(r["what"]) in ("memit", "alphaedit"))]


def merged_fits(previous: dict | None, runs: list[dict], today: str, quiet: bool) -> dict:
    """``memit_fits`` or ``alphaedit_fits`` with this run's timed edits, keeping the runs of
    another label or fact count."""
    done = {(r["label"], r["n_facts"]) for r in runs}
    kept = [r for r in (previous or {}).get("runs", []) if (r["label"], r["n_facts"]) not in done]
    return {"threads": torch.get_num_threads(), "quiet": quiet, "runs": kept + [{**r, "date": today} for r in runs]}


def speed(run: harness.Run, s: Setup) -> None:
    args, quick = run.args, run.quick
    facts = with_true_targets(s.lm, load_facts())  # the set issue 21's "before" figures come from
    n_rome, n_batch = (QUICK["n_rome"], QUICK["n_memit"]) if quick else (args.n_rome, args.n_memit)
    parts = speed_parts(args)
    rows, fits, batch_fits = [], [], {}
    with run.timed("speed"):
        if "rome" in parts:
            rows, fits = time_rome(s, facts[:n_rome], facts[n_rome])
        if "memit" in parts:
            memit_rows, batch_fits["memit_fits"] = time_memit(s, facts, n_batch, 0 if quick else args.memit_before)
            rows += memit_rows
        if "alphaedit" in parts and n_batch:  # after MEMIT, on the same facts
            alphaedit_rows, batch_fits["alphaedit_fits"] = time_alphaedit(s, facts, n_batch)
            rows += alphaedit_rows
        if "evaluation" in parts:
            rows += time_evaluation(s, facts[0])
    today = time.strftime("%Y-%m-%d")
    rows = [CostRow(**{**row, "date": today}) for row in rows]
    previous = harness.read_json(speed_file(run))
    kept = kept_rows(previous, rows, parts)
    data = EditingSpeedData(model=s.lm.name, stats_tokens=s.stats.n_tokens, rome_layer=s.rome_layer,
                            memit_layers=s.memit_layers, rows=kept + rows, before_issue_21=BEFORE_ISSUE_21)
    for key in ("arithmetic_floor", "rome_fits", "memit_fits", "alphaedit_fits"):  # what this run did not measure
        if previous and key in previous:
            data[key] = previous[key]  # type: ignore[literal-required]
    if fits:
        data["rome_fits"] = RomeFits(date=today, threads=torch.get_num_threads(), quiet=args.quiet,
                                     facts=[f.subject for f in facts[:n_rome]], runs=fits)
    for key, runs in batch_fits.items():
        if runs:
            data[key] = merged_fits(data.get(key), runs, today, args.quiet)  # type: ignore[literal-required]
    run.write(data, speed_file(run))
    print(editing_cost(data))
    if "rome_fits" in data:
        print(editing_rome_fits(data))


# --- --floor --------------------------------------------------------------------------------------


def matmul_rate(threads: int, size: int = 2048, seconds: float = 5.0) -> float:
    """GFLOP/s of float32 square matmuls at ``threads`` threads: the most this CPU gives the fits,
    whose time is mostly in such matmuls (the profile in docs/editing.md)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        a @ b  # warm-up
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            n += 1
        return 2 * size**3 * n / (time.perf_counter() - start) / 1e9
    finally:
        torch.set_num_threads(before)


def gflop(fn: Callable[[], EditHandle]) -> tuple[float, dict]:
    """GFLOPs of one edit, counted by torch's FlopCounterMode (matmuls and convolutions), and
    the handle's details; the edit is restored."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        handle = fn()
    handle.restore()
    return counter.get_total_flops() / 1e9, handle.details


def rome_floor(s: Setup, facts: list[EditRequest], key: str) -> RomeFloor:
    """The counted FLOPs of one ROME edit per fact with one of ``ROME_FITS``, and the positions
    its fit ran (real and padded)."""
    label, hp = ROME_FITS[key]
    hp = hp.replace(layer=s.rome_layer)
    rome_edit(s.lm, facts[0], hp, stats=s.stats).restore()  # samples its prefixes, uncounted
    gflops, real, padded = [], [], []
    for fact in facts:
        count, details = gflop(lambda f=fact: rome_edit(s.lm, f, hp, stats=s.stats))
        gflops.append(count)
        real.append(details["real_tokens"])
        padded.append(details["padded_tokens"])
        print(f"ROME {key} {fact.subject}: {count:.0f} GFLOP, {real[-1]} + {padded[-1]} positions", flush=True)
    return RomeFloor(label=label, config=hp.params(), gflop_per_edit=gflops, gflop_mean=sum(gflops) / len(gflops),
                     real_tokens_each=real, padded_tokens_each=padded,
                     padding_share=sum(padded) / max(1, sum(real) + sum(padded)))


def compute_z_pass_gflop(s: Setup, fact: EditRequest, templates: tuple[str, ...]) -> float:
    """GFLOPs of one pass of MEMIT's own code (kmeng01/memit compute_z) on ``fact``: every row
    (the prefixed prompts ⊕ target[:-1] and "{subject} is a") right-padded, through the whole
    model with δ added at the top layer's subject token, logits at every position, and the
    backward to δ. Its step count is the same loop's as ours."""
    from torch.utils.flop_counter import FlopCounterMode

    from lmsci_mi.editing.fit import subject_row
    from lmsci_mi.sites import hook_name

    lm, top = s.lm, s.memit_layers[-1]
    target = lm.continuation_ids(fact.target_new)
    rows = [subject_row(lm, t, fact.prompt, fact.subject, target) for t in templates]
    rows.append(subject_row(lm, "{}", "{} is a", fact.subject))
    tokens = lm.pad_batch([r.ids for r in rows]).tokens
    delta = torch.zeros(lm.cfg.d_model, requires_grad=True)
    index = torch.tensor([r.subject_last for r in rows])

    def add(resid: torch.Tensor, hook: object) -> torch.Tensor:
        return resid.index_put((torch.arange(len(rows)), index), resid[torch.arange(len(rows)), index] + delta)

    params = [p for p in lm.model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        with FlopCounterMode(display=False) as counter, lm.hooks.hooks(fwd=[(hook_name("resid_post", top), add)]):
            lm.model(tokens).log_softmax(-1).sum().backward()
    finally:
        for p in params:
            p.requires_grad_(True)
    return counter.get_total_flops() / 1e9


def memit_floor(s: Setup, facts: list[EditRequest], key: str) -> dict:
    """The counted FLOPs per fact of MEMIT (the whole edit, every δ fitted) with one of
    ``MEMIT_FITS``, its fit's steps and positions; with, for the paper's fit, the arithmetic of
    MEMIT's own code (:func:`compute_z_pass_gflop` times each fact's passes)."""
    label, hp = MEMIT_FITS[key]
    hp = hp.replace(cache_fits=False, **{k: getattr(s.configs["memit"], k) for k in QUICK_FIT})
    count, details = gflop(lambda: memit_edit(s.lm, facts, hp, stats=s.stats))
    real, padded = details["real_tokens"], details["padded_tokens"]
    out = {"label": label, "config": hp.params(), "n_facts": len(facts), "gflop_per_fact": count / len(facts),
           "fit_steps_each": details["fit_steps"], "real_tokens": real, "padded_tokens": padded,
           "padding_share": padded / max(1, real + padded)}
    if hp.stop_on == "loss":  # compute_z's loop: each fact runs its updates and one checking pass
        templates = context_templates(s.lm, hp.n_contexts, hp.context_lengths, seed=hp.seed)
        code = [compute_z_pass_gflop(s, f, templates) * (steps + 1)
                for f, steps in zip(facts, details["fit_steps"], strict=True)]
        out["compute_z_gflop_per_fact"] = sum(code) / len(code)
    print(f"MEMIT {key}: {out['gflop_per_fact']:.0f} GFLOP per fact, {real} + {padded} positions", flush=True)
    return out


def floor(run: harness.Run, s: Setup, rates: dict[str, float]) -> None:
    """The arithmetic of the speed targets: FLOPs of one ROME edit at the paper's settings (only
    the positions they need) and as implemented before issue 38 (with its padding share), and of
    MEMIT per fact, on the --speed facts, over the machine's matmul rate (probed before the
    model loaded; --keep-rate: the last probe's, for a shared CPU)."""
    args, quick = run.args, run.quick
    facts = load_facts()
    data = harness.read_json(speed_file(run), {})
    last = data.get("arithmetic_floor", {})
    if args.memit_only:  # ROME's last counts stand
        rome = last["rome"]
    else:
        rome = [rome_floor(s, facts[: QUICK["n_rome"] if quick else args.n_rome], key) for key in ("after", "before")]
    n = QUICK["n_memit"] if quick else args.floor_memit
    memit_fits = last.get("memit", [])
    if n:  # no cached fits: every fact's δ is fitted, as in the timed run
        memit_fits = [memit_floor(s, facts[:n], key) for key in ("after", "before")]
        memit = memit_fits[0]["gflop_per_fact"]
    else:  # --floor-memit 0: the last count stands
        memit, n = last["memit_gflop_per_fact"], last["memit_facts_counted"]
    data["arithmetic_floor"] = ArithmeticFloor(
        date=time.strftime("%Y-%m-%d"), matmul_gflops=rates, rome=rome, rome_layer=s.rome_layer,
        memit_gflop_per_fact=memit, memit_facts_counted=n, rome_target_s=5,
        memit_50_floor_s=50 * memit / rates["2"], memit_target_s=150,
        how="FLOPs counted by torch.utils.flop_counter.FlopCounterMode (matmuls and convolutions only); "
            "floor = FLOPs / the 2-thread float32 matmul rate: the least time these settings take at that "
            "rate; ROME's 'paper' row runs only the positions its fit needs, the 'before' row is the "
            "implementation before issue 38 (its padded positions counted)",
    )
    if memit_fits:
        data["arithmetic_floor"]["memit"] = memit_fits  # type: ignore[typeddict-unknown-key]
    data.pop("timings", None)  # this run's own timings replace the last run's
    run.write(data, speed_file(run))
    print(editing_floor(data))


# --- --table ---------------------------------------------------------------------------------------


def ordered_edit_facts(n: int | None) -> list[EditRequest]:
    """The editing fact set in a seeded order that puts every relation in any prefix
    (sequential_editing.py: the same order), the first ``n``."""
    facts = load_facts("edit_facts")
    random.Random(0).shuffle(facts)
    return facts[:n]


def rome_edits(s: Setup, model: str, label: str = "rome") -> harness.ItemCache:
    """The folder of ROME's per-fact edits at ``s.configs[label]``, shared by --table and
    editing_wild.py: keyed by the model, the config and the key statistics, so each fact is
    fitted once whichever benchmark reaches it first (a fit at the paper's settings is ~17 s)."""
    from lmsci_mi.cache import cache_key, cache_root

    settings = {"model": model, "rome": s.configs[label].params(),
                "stats": {"tokens": s.stats.n_tokens, "source": s.stats.source}}
    folder = cache_root() / "benchmarks" / "rome-edits" / cache_key(settings)
    harness.write_json(folder / "settings.json", settings)
    return harness.ItemCache(folder)


def rome_fact_edit(s: Setup, edits: harness.ItemCache, request: EditRequest,
                   label: str = "rome") -> tuple[dict[str, torch.Tensor], float]:
    """One fact's ROME deltas at ``s.configs[label]`` and the edit's wall-clock seconds, from
    ``edits`` (:func:`rome_edits` of the same label; computed and saved there first when
    missing; the weights are restored either way)."""
    from lmsci_mi.cache import cache_key

    path = edits.path(f"rome-{cache_key(request.to_json(), length=16)}", ".safetensors")
    if not path.is_file():
        begin = time.perf_counter()
        with EDITING_METHODS.get("rome").function(s.lm, [request], s.configs[label], stats=s.stats) as handle:
            seconds = time.perf_counter() - begin
            saved_atomically(lambda p: handle.save(p, {"seconds": repr(seconds)}), path)
    deltas, metadata = read_deltas(path)
    return dict(deltas), float(metadata["seconds"])


def rome_chunk(s: Setup, edits: harness.ItemCache, facts: list[EditRequest], label: str = "rome") -> EditEvaluation:
    """``evaluate_edits`` of ROME at ``s.configs[label]`` on ``facts`` (one fact per edit,
    restored between), each fact's edit read from ``edits``: the same scores, without fitting a
    fact twice."""
    plan = plan_evaluation(s.lm, facts, s.configs[label], s.evaluation)
    before = unedited_scores(s.lm, plan, range(len(facts)))
    parts, seconds = [], []
    for i, request in enumerate(plan.requests):
        deltas, took = rome_fact_edit(s, edits, request, label)
        parts.append(edited_scores(s.lm, plan, [[i]], deltas=deltas))
        seconds.append(took)
    after = EditedScores(tuple(range(len(facts))), torch.cat([p.scores for p in parts]),
                         tuple(layers for p in parts for layers in p.layers), ())
    return assemble_evaluation(s.lm, plan, before, after, seconds=seconds, stats=s.stats)


def rome_evaluation(run: harness.Run, cache: harness.ItemCache, s: Setup, facts: list[EditRequest],
                    chunk: int, deadline: float, label: str = "rome") -> EditEvaluation | None:
    """ROME one fact at a time, cached a chunk of facts at a time, combined in the facts' order
    as far as the chunks are done (None when none is, or when not all are and not --partial)."""
    firsts = list(range(0, len(facts), chunk))
    edits = rome_edits(s, run.args.model, label)

    def item(first: int) -> str:
        return f"{label}-{first:04d}-{min(first + chunk, len(facts)) - 1:04d}"

    # --backward: a second process can take the chunks from the end while the first goes
    # forward; each skips a chunk the other has written.
    for first in reversed(firsts) if run.args.backward else firsts:
        path = cache.path(item(first))
        if path.is_file() or time.perf_counter() > deadline:
            continue
        ev = rome_chunk(s, edits, facts[first : first + chunk], label)
        ev.save(path)
        print(f"{label} facts {first}..{first + len(ev.subjects) - 1}: S {ev.metric('S'):.1f}, "
              f"{ev.seconds_per_edit:.1f} s/edit", flush=True)
    parts = []
    for first in firsts:
        if not cache.path(item(first)).is_file():
            break
        parts.append(EditEvaluation.load(cache.path(item(first))))
    done = sum(len(p.subjects) for p in parts)
    if not parts or (done < len(facts) and not run.args.partial):
        return None
    if done < len(facts):
        print(f"{label}: {done} of {len(facts)} facts so far")
    return EditEvaluation.combine(parts)


def saved_atomically(save: Callable[[Path], object], path: Path) -> None:
    """Write through ``save`` beside ``path`` and rename: never a half-written cache item."""
    partial = path.with_name(path.name + ".partial" + path.suffix)
    save(partial)
    os.replace(partial, path)


def batch_evaluation(cache: harness.ItemCache, s: Setup, name: str, facts: list[EditRequest], chunk: int,
                     deadline: float) -> EditEvaluation | None:
    """A batch method's evaluation (MEMIT, AlphaEdit), resumable: the one edit of every fact is
    computed once and its deltas cached; the edited model is then scored ``chunk`` facts at a
    time, each chunk's rows cached, so an interrupted run loses at most one chunk. The rows equal
    one ``evaluate_edits`` call's (a fact's scores do not depend on the others scored with it).
    None when ``deadline`` passes first."""
    plan = plan_evaluation(s.lm, facts, s.configs[name], s.evaluation)
    n = len(plan.requests)
    edit_path = cache.path(f"{name}-{n}.edit", ".safetensors")
    if not edit_path.is_file():
        function = EDITING_METHODS.get(plan.method).function
        begin = time.perf_counter()
        with function(s.lm, list(plan.requests), plan.config, stats=s.stats) as handle:
            seconds = time.perf_counter() - begin
            saved_atomically(lambda p: handle.save(p, {"seconds": repr(seconds)}), edit_path)
        print(f"{name}: one edit of {n} facts in {seconds:.0f} s", flush=True)
    deltas, metadata = read_deltas(edit_path)
    before = unedited_scores(s.lm, plan, range(n))
    rows = []
    for first in range(0, n, chunk):
        path = cache.path(f"{name}-{n}.scores-{first:04d}", ".pt")
        if not path.is_file():
            if time.perf_counter() > deadline:
                return None
            indices = list(range(first, min(n, first + chunk)))
            scores = edited_scores(s.lm, plan, [indices], deltas=deltas).scores
            saved_atomically(lambda p, scores=scores: torch.save(scores, p), path)
            print(f"{name} facts {first}..{indices[-1]} scored", flush=True)
        rows.append(torch.load(path))
    layers = EditHandle(s.lm, deltas, method=plan.method).layers
    after = EditedScores(tuple(range(n)), torch.cat(rows), (layers,) * n, ())
    return assemble_evaluation(s.lm, plan, before, after, seconds=[float(metadata["seconds"])], stats=s.stats)


def cached_batch_evaluation(cache: harness.ItemCache, s: Setup, name: str, facts: list[EditRequest],
                            chunk: int, deadline: float) -> EditEvaluation | None:
    """:func:`batch_evaluation`, kept whole once it is done."""
    path = cache.path(f"{name}-{len(facts)}")
    if path.is_file():
        return EditEvaluation.load(path)
    ev = batch_evaluation(cache, s, name, facts, chunk, deadline)
    if ev is not None:
        ev.save(path)
        print(f"{name}: S {ev.metric('S'):.1f}, one edit of {len(facts)} facts in {ev.seconds_per_edit:.0f} s",
              flush=True)
    return ev


def table_rows(results: dict[str, EditEvaluation], facts: list[EditRequest]) -> list[EditRow]:
    """One row per method, and one unedited row per fact count (ROME may run on the first N
    facts of the same order only)."""
    named: list[tuple[str, EditEvaluation, bool]] = []
    for name, ev in sorted(results.items(), key=lambda item: -len(item[1].subjects)):
        if all(len(other.subjects) != len(ev.subjects) for _, other, _ in named):
            named.append(("unedited", ev, False))
        named.append((name, ev, True))
    rows = []
    for label, ev, edited in named:
        probed = facts[: len(ev.subjects)]  # every row's facts are the first of the same order
        rows.append(EditRow(
            model=label, n_facts=len(ev.subjects),
            # The facts that carry each messy-knowledge probe (its rate's sample size).
            probe_facts={m: int((~ev.per_fact[0, :, PER_FACT.index(m)].isnan()).sum()) for m in PROBES},
            other_relation_prompts=sum(len(f.other_relation_prompts) for f in probed),
            n_edits=ev.n_edits if edited else 0, seconds_per_edit=ev.seconds_per_edit if edited else None,
            metrics={m: ev.metric(m, edited=edited) for m in METRICS},
            ci95={m: list(ev.interval(m, edited=edited)) for m in METRICS},
        ))
    return rows


def fill_rome_edits(run: harness.Run, s: Setup) -> None:
    """--rome-edits: each of this process's facts edited once per ROME config and cached
    (:func:`rome_fact_edit`); a fact another process has cached meanwhile is read, not refitted."""
    args = run.args
    facts = ordered_edit_facts(QUICK["facts"] if run.quick else args.facts)[: args.rome_facts]
    deadline = time.perf_counter() + args.max_seconds
    for label in ["rome", *(["rome-before-38"] if "rome" in before_methods(args) else [])]:
        edits = rome_edits(s, args.model, label)
        for i in range(args.offset, len(facts), args.stride):
            if time.perf_counter() > deadline:
                print(f"{label}: stopped at fact {i} (--max-seconds); run again to resume")
                return
            _, seconds = rome_fact_edit(s, edits, facts[i], label)
            print(f"{label} fact {i}: {seconds:.1f} s", flush=True)
    print("done")


def before_methods(args: argparse.Namespace) -> list[str]:
    """The methods --before asks for: those it names, or every --methods one when it names none."""
    if args.before is None:
        return []
    return [name for name in args.methods if not args.before or name in args.before]


BEFORE_DIFFERENCES = ("S", "ES", "PS", "NS")
"""--table --before: the metrics whose paired difference new - before is written."""


def table_evaluations(run: harness.Run, s: Setup, facts: list[EditRequest]) -> dict[str, EditEvaluation]:
    """Each method's evaluation (and with --before its defaults' before issue 38) as far as done."""
    args, quick = run.args, run.quick
    rome_size, score_size = (QUICK["chunk"],) * 2 if quick else (ROME_CHUNK, SCORE_CHUNK)
    # Every item names its method and facts; the configs are in the key, so a changed default
    # (issue 38: ROME's fit) never resumes from items of another.
    cache = run.cache({"model": args.model, "quick": quick,
                       "configs": {name: s.configs[name].params() for name in sorted(s.configs)}})
    deadline = time.perf_counter() + args.max_seconds
    labels = [*args.methods, *(f"{name}-before-38" for name in before_methods(args))]
    results: dict[str, EditEvaluation] = {}
    for label in labels:
        with run.timed(label):
            if getattr(s.configs[label], "one_fact_per_edit", False):  # ROME
                ev = rome_evaluation(run, cache, s, facts[: args.rome_facts], rome_size, deadline, label)
            else:
                ev = cached_batch_evaluation(cache, s, label, facts, score_size, deadline)
        if ev is not None:
            results[label] = ev
    if set(results) != set(labels) and not (args.partial and results):
        print(f"done so far: {sorted(results)}; run again to resume")
        return {}
    return results


def before_differences(results: dict[str, EditEvaluation]) -> dict[str, dict[str, dict]]:
    """Per method evaluated at both: new - before of each :data:`BEFORE_DIFFERENCES` metric on
    the same facts, with its paired bootstrap interval (2,000 resamples, seed 0)."""
    return {name: {m: ev.difference(results[f"{name}-before-38"], m).as_dict() for m in BEFORE_DIFFERENCES}
            for name, ev in results.items() if f"{name}-before-38" in results}


def table(run: harness.Run, s: Setup) -> None:
    args = run.args
    facts = ordered_edit_facts(QUICK["facts"] if run.quick else args.facts)
    results = table_evaluations(run, s, facts)
    if not results:
        return
    data = EditingTableData(
        model=args.model, facts="lmsci_mi/data/edit_facts.json", n_facts=len(facts),
        stats_tokens=s.stats.n_tokens, stats_source=s.stats.source,
        generation_tokens=s.evaluation.generation_tokens,
        interval="percentile bootstrap over facts, 2000 resamples, 95%",
        configs={name: s.configs[name].params() for name in results}, rows=table_rows(results, facts),
    )
    if differences := before_differences(results):
        data["before_38"] = differences
    run.write(data)
    print(editing_table(data))
    print("done")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=harness.DATA / "editing_table.json")
    args = run.args
    if not (args.speed or args.table or args.floor or args.rome_edits):
        raise SystemExit("give --speed, --floor, --table or --rome-edits")
    rates = {}
    if args.floor and args.keep_rate:  # a shared CPU: the last quiet probe's rate
        rates = harness.read_json(speed_file(run), {})["arithmetic_floor"]["matmul_gflops"]
    elif args.floor:  # first, while nothing else runs
        seconds = QUICK["rate_seconds"] if run.quick else 5.0
        rates = {str(t): matmul_rate(t, seconds=seconds) for t in (1, 2)}
        print(f"float32 matmul: {rates['1']:.1f} GFLOP/s at 1 thread, {rates['2']:.1f} at 2", flush=True)
    s = prepare(run)
    if args.floor:
        floor(run, s, rates)
    if args.speed:
        speed(run, s)
    if args.rome_edits:
        fill_rome_edits(run, s)
    if args.table:
        table(run, s)


if __name__ == "__main__":
    main()
