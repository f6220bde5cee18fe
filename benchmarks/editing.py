"""Speed and the editing table of lmsci_mi.editing on SmolLM2-135M (issue 21).

    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --speed    # quiet machine: the timings
    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --floor    # alone: FLOPs per edit, matmul rate
    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --table    # resumable: run until "done"
    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --table --methods memit alphaedit
    PYTHONPATH=. python benchmarks/editing.py --quick --model toy-2l --speed --floor --table   # a check

--speed times, with cached key statistics and context prefixes, on the first facts of the small
shipped set (``load_facts``, where issue 21's "before" figures come from): one ROME edit at its
default layer (5 facts), MEMIT on 50 facts in one batch (and, with --memit-before N, on N facts with the
fit's prefix reuse on and off: off is how it was done before), and the full evaluation of one fact with 50-token generation entropy
(unedited baseline uncached, the edit, the edited scores). Wall-clock and CPU seconds; writes
editing_speed.json beside --out (docs/data/), keeping the rows it did not measure and the floor.

--floor counts the floating-point operations of one ROME edit (the same 5 facts) and of MEMIT per
fact (8 facts, every δ fitted) and probes this CPU's float32 matmul rate at 1 and 2 threads: the
FLOPs over the rate is the least time the method can take here, however it is coded. Run it
alone (the rate probe needs the cores); it adds ``arithmetic_floor`` to editing_speed.json.

--table evaluates ROME (one fact at a time, restored between facts), MEMIT and AlphaEdit (all
facts in one batch) on every fact of the shipped editing fact set, with GE, against the unedited
model. ROME's facts are cached in chunks of 10; a batch method's edit is cached once and its
edited scores in chunks of 25 facts (``batch_evaluation``), in the harness's per-item cache, so an
interrupted run continues (--backward: a second process takes ROME's chunks from the end); the
unedited baseline is cached per fact and shared. --partial writes the table from what is done
(ROME on its first facts). When every method is done it writes --out, docs/data/editing_table.json
(every metric with a 95% percentile-bootstrap interval over facts), and prints the markdown table.

--quick: 4 fit steps, 2,048 statistics tokens, 5 tokens of GE; --speed times 1 ROME edit and MEMIT
on 2 facts, --floor probes the rate for 0.5 s and counts 1 ROME edit and MEMIT on 2 facts, --table
runs 4 facts in chunks of 2.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import harness
import torch
from doc_tables.editing import editing_cost, editing_table
from doc_tables.schemas.editing import (
    ArithmeticFloor,
    CostBefore,
    CostRow,
    EditingSpeedData,
    EditingTableData,
    EditRow,
)

from lmsci_mi import LensModel, load_model
from lmsci_mi.config import Config
from lmsci_mi.editing import (
    EDITING_METHODS,
    METRICS,
    PER_FACT,
    AlphaEditHyperParams,
    EditEvaluation,
    EditHandle,
    EditRequest,
    EvaluationConfig,
    KeyStatistics,
    MEMITHyperParams,
    ROMEHyperParams,
    StatsConfig,
    context_templates,
    default_memit_layers,
    default_rome_layer,
    evaluate_edits,
    key_statistics,
    load_facts,
    memit_edit,
    rome_edit,
)
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
    "rome": ROMEHyperParams(),
    "memit": MEMITHyperParams(cache_fits=True),
    "alphaedit": AlphaEditHyperParams(cache_fits=True),
}
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
    parser.add_argument("--n-memit", type=int, default=50, help="--speed: facts in the MEMIT batch")
    parser.add_argument("--memit-before", type=int, default=0, metavar="N",
                        help="--speed: also time MEMIT on N facts with and without the prefix reuse")
    parser.add_argument("--floor-memit", type=int, default=8, help="--floor: facts whose MEMIT FLOPs are counted")
    parser.add_argument("--methods", nargs="+", default=["memit", "alphaedit", "rome"], choices=sorted(CONFIGS))
    parser.add_argument("--facts", type=int, default=None,
                        help="--table: the first N facts in a seeded random order (default all)")
    parser.add_argument("--rome-facts", type=int, default=None,
                        help="--table: ROME on the first N of those facts only (default all)")
    parser.add_argument("--backward", action="store_true",
                        help="--table: take ROME's chunks from the last (a second process beside a forward one)")
    parser.add_argument("--partial", action="store_true",
                        help="--table: write the table from the methods done so far (ROME on its first facts)")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="--table: start no chunk after this many seconds (run again to resume)")


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
    with run.timed("load"):
        lm = load_model(run.args.model)
    layer, layers = default_rome_layer(lm), list(default_memit_layers(lm))
    n_tokens = QUICK["stats_tokens"] if quick else ROMEHyperParams().stats_tokens
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


def time_rome(s: Setup, facts: list[EditRequest]) -> list[CostRow]:
    """One ROME edit at the default layer per fact, restored after each: the mean."""
    hp = s.configs["rome"].replace(layer=s.rome_layer)
    times = []
    for fact in facts:
        handle, wall, cpu = clocked(lambda f=fact: rome_edit(s.lm, f, hp, stats=s.stats))
        handle.restore()
        times.append((wall, cpu))
        print(f"ROME edit {fact.subject} -> {fact.target_new}: {wall:.1f} s", flush=True)
    if not times:
        return []
    return [CostRow(what=f"one ROME edit, layer {s.rome_layer} (mean of {len(times)} facts)",
                    wall_s=sum(w for w, _ in times) / len(times), cpu_s=sum(c for _, c in times) / len(times),
                    wall_s_each=[w for w, _ in times], target_s=5, date="")]


def time_memit(s: Setup, facts: list[EditRequest], n: int, before: int) -> list[CostRow]:
    """MEMIT on ``n`` facts in one batch; with ``before``, also on that many facts with the fit's
    prefix reuse on and off (off is how it was done before)."""
    runs = [(n, True)] if n else []
    if before:
        runs += [(before, True), (before, False)]
    rows = []
    for count, reuse in runs:
        hp = s.configs["memit"].replace(reuse_prefix=reuse, cache_fits=False)
        handle, wall, cpu = clocked(lambda hp=hp, count=count: memit_edit(s.lm, facts[:count], hp, stats=s.stats))
        handle.restore()
        label = "fit from the subject on" if reuse else "fit over every position (before)"
        rows.append(CostRow(what=f"MEMIT, {count} facts in one batch, {label}", wall_s=wall, cpu_s=cpu,
                            target_s=120 if count == 50 and reuse else None, date=""))
        print(f"{rows[-1]['what']}: {wall:.1f} s", flush=True)
    return rows


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


def kept_rows(previous: EditingSpeedData | None, rows: list[CostRow]) -> list[CostRow]:
    """A partial run (say --n-memit 0) keeps the rows it did not measure (not the evaluation's)."""
    measured = {r["what"] for r in rows}
    return [r for r in (previous or {}).get("rows", [])
            if r["what"] not in measured and "evaluation" not in r["what"] and not r["what"].startswith("…")]


def speed(run: harness.Run, s: Setup) -> None:
    args, quick = run.args, run.quick
    facts = load_facts()  # the set the "before" figures of issue 21 were measured on
    with run.timed("speed"):
        rows = [*time_rome(s, facts[: QUICK["n_rome"] if quick else args.n_rome]),
                *time_memit(s, facts, QUICK["n_memit"] if quick else args.n_memit, 0 if quick else args.memit_before),
                *time_evaluation(s, facts[0])]
    today = time.strftime("%Y-%m-%d")
    rows = [CostRow(**{**row, "date": today}) for row in rows]
    previous = harness.read_json(speed_file(run))
    data = EditingSpeedData(model=s.lm.name, stats_tokens=s.stats.n_tokens, rome_layer=s.rome_layer,
                            memit_layers=s.memit_layers, rows=kept_rows(previous, rows) + rows,
                            before_issue_21=BEFORE_ISSUE_21)
    if previous and "arithmetic_floor" in previous:
        data["arithmetic_floor"] = previous["arithmetic_floor"]
    run.write(data, speed_file(run))
    print(editing_cost(data))


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


def gflop(fn: Callable[[], EditHandle]) -> float:
    """GFLOPs of one edit, counted by torch's FlopCounterMode (matmuls and convolutions); the
    edit is restored."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        handle = fn()
    handle.restore()
    return counter.get_total_flops() / 1e9


def floor(run: harness.Run, s: Setup, rates: dict[str, float]) -> None:
    """The arithmetic floor of the speed targets: FLOPs of one ROME edit and of MEMIT per fact
    on the --speed facts, over the machine's matmul rate (probed before the model loaded)."""
    args, quick = run.args, run.quick
    facts = load_facts()
    rome_hp = s.configs["rome"].replace(layer=s.rome_layer)
    rome = []
    for fact in facts[: QUICK["n_rome"] if quick else args.n_rome]:
        rome.append(gflop(lambda f=fact: rome_edit(s.lm, f, rome_hp, stats=s.stats)))
        print(f"ROME {fact.subject}: {rome[-1]:.0f} GFLOP", flush=True)
    n = QUICK["n_memit"] if quick else args.floor_memit
    # No cached fits: every fact's δ is fitted, as in the timed run.
    memit_hp = s.configs["memit"].replace(cache_fits=False)
    memit = gflop(lambda: memit_edit(s.lm, facts[:n], memit_hp, stats=s.stats)) / n
    print(f"MEMIT: {memit:.0f} GFLOP per fact ({n} facts)", flush=True)
    mean = sum(rome) / len(rome)
    data = harness.read_json(speed_file(run), {})
    data["arithmetic_floor"] = ArithmeticFloor(
        date=time.strftime("%Y-%m-%d"), matmul_gflops=rates, rome_gflop_per_edit=rome, rome_gflop_mean=mean,
        rome_layer=s.rome_layer, memit_gflop_per_fact=memit, memit_facts_counted=n,
        rome_floor_s=mean / rates["2"], rome_target_s=5, memit_50_floor_s=50 * memit / rates["2"],
        memit_target_s=120,
        how="FLOPs counted by torch.utils.flop_counter.FlopCounterMode (matmuls and convolutions only); "
            "floor = FLOPs / the 2-thread float32 matmul rate",
    )
    data.pop("timings", None)  # this run's own timings replace the last run's
    run.write(data, speed_file(run))
    f = data["arithmetic_floor"]
    print(f"floor: ROME {f['rome_floor_s']:.1f} s (target 5), MEMIT 50 facts {f['memit_50_floor_s']:.0f} s "
          "(target 120)")


# --- --table ---------------------------------------------------------------------------------------


def ordered_edit_facts(n: int | None) -> list[EditRequest]:
    """The editing fact set in a seeded order that puts every relation in any prefix
    (sequential_editing.py: the same order), the first ``n``."""
    facts = load_facts("edit_facts")
    random.Random(0).shuffle(facts)
    return facts[:n]


def rome_evaluation(run: harness.Run, cache: harness.ItemCache, s: Setup, facts: list[EditRequest],
                    chunk: int, deadline: float) -> EditEvaluation | None:
    """ROME one fact at a time, cached a chunk of facts at a time, combined in the facts' order
    as far as the chunks are done (None when none is, or when not all are and not --partial)."""
    firsts = list(range(0, len(facts), chunk))

    def item(first: int) -> str:
        return f"rome-{first:04d}-{min(first + chunk, len(facts)) - 1:04d}"

    # --backward: a second process can take the chunks from the end while the first goes
    # forward; each skips a chunk the other has written.
    for first in reversed(firsts) if run.args.backward else firsts:
        path = cache.path(item(first))
        if path.is_file() or time.perf_counter() > deadline:
            continue
        ev = evaluate_edits(s.lm, facts[first : first + chunk], s.configs["rome"], stats=s.stats,
                            evaluation=s.evaluation)
        ev.save(path)
        print(f"rome facts {first}..{first + len(ev.subjects) - 1}: S {ev.metric('S'):.1f}, "
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
        print(f"rome: {done} of {len(facts)} facts so far")
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


def table(run: harness.Run, s: Setup) -> None:
    args, quick = run.args, run.quick
    facts = ordered_edit_facts(QUICK["facts"] if quick else args.facts)
    rome_chunk, score_chunk = (QUICK["chunk"],) * 2 if quick else (ROME_CHUNK, SCORE_CHUNK)
    cache = run.cache({"model": args.model, "quick": quick})  # every item names its method and facts
    deadline = time.perf_counter() + args.max_seconds
    results: dict[str, EditEvaluation] = {}
    for name in args.methods:
        with run.timed(name):
            if name == "rome":
                ev = rome_evaluation(run, cache, s, facts[: args.rome_facts], rome_chunk, deadline)
            else:
                ev = cached_batch_evaluation(cache, s, name, facts, score_chunk, deadline)
        if ev is not None:
            results[name] = ev
    if set(results) != set(args.methods) and not (args.partial and results):
        print(f"done so far: {sorted(results)}; run again to resume")
        return
    data = EditingTableData(
        model=args.model, facts="lmsci_mi/data/edit_facts.json", n_facts=len(facts),
        stats_tokens=s.stats.n_tokens, stats_source=s.stats.source,
        generation_tokens=s.evaluation.generation_tokens,
        interval="percentile bootstrap over facts, 2000 resamples, 95%",
        configs={name: s.configs[name].params() for name in results}, rows=table_rows(results, facts),
    )
    run.write(data)
    print(editing_table(data))
    print("done")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=harness.DATA / "editing_table.json")
    args = run.args
    if not (args.speed or args.table or args.floor):
        raise SystemExit("give --speed, --floor or --table")
    rates = {}
    if args.floor:  # first, while nothing else runs
        seconds = QUICK["rate_seconds"] if run.quick else 5.0
        rates = {str(t): matmul_rate(t, seconds=seconds) for t in (1, 2)}
        print(f"float32 matmul: {rates['1']:.1f} GFLOP/s at 1 thread, {rates['2']:.1f} at 2", flush=True)
    s = prepare(run)
    if args.floor:
        floor(run, s, rates)
    if args.speed:
        speed(run, s)
    if args.table:
        table(run, s)


if __name__ == "__main__":
    main()
