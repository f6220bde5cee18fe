"""Speed and the editing table of lmsci_mi.editing on SmolLM2-135M (issue 21).

    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --speed    # quiet machine: the timings
    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --floor    # alone: FLOPs per edit, matmul rate
    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --table    # resumable: run until "done"
    PYTHONPATH=. .venv/bin/python benchmarks/editing.py --table --methods memit alphaedit

--speed times, with cached key statistics and context prefixes, on the first facts of the small
shipped set (``load_facts``, where issue 21's "before" figures come from): one ROME edit at its
default layer (5 facts), MEMIT on 50 facts in one batch (and, with --memit-before N, on N facts with the
fit's prefix reuse on and off: off is how it was done before), and the full evaluation of one fact with 50-token generation entropy
(unedited baseline uncached, the edit, the edited scores). Wall-clock and CPU seconds; writes
docs/data/editing_speed.json.

--floor counts the floating-point operations of one ROME edit (the same 5 facts) and of MEMIT per
fact (8 facts, every δ fitted) and probes this CPU's float32 matmul rate at 1 and 2 threads: the
FLOPs over the rate is the least time the method can take here, however it is coded. Run it
alone (the rate probe needs the cores); it adds ``arithmetic_floor`` to editing_speed.json.

--table evaluates ROME (one fact at a time, restored between facts), MEMIT and AlphaEdit (all
facts in one batch) on every fact of the shipped editing fact set, with GE, against the unedited
model. ROME's facts are cached in chunks of 10; a batch method's edit is cached once and its
edited scores in chunks of 25 facts (``batch_evaluation``), in --cache, so an interrupted run
continues (--backward: a second process takes ROME's chunks from the end); the unedited baseline
is cached per fact and shared. --partial writes the table from what is done (ROME on its first
facts). When every method is done it writes docs/data/editing_table.json (every metric with a 95%
percentile-bootstrap interval over facts) and prints the markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.editing import (
    METRICS,
    AlphaEditHyperParams,
    EditEvaluation,
    EditHandle,
    EvaluationConfig,
    MEMITHyperParams,
    ROMEHyperParams,
    context_templates,
    default_memit_layers,
    default_rome_layer,
    evaluate_edits,
    key_statistics,
    load_facts,
    memit_edit,
    rome_edit,
)
from lmsci_mi.editing.methods import EDITING_METHODS
from lmsci_mi.editing.metrics import (
    PER_FACT,
    EditedScores,
    assemble_evaluation,
    edited_scores,
    plan_evaluation,
    unedited_scores,
)
from lmsci_mi.editing.stats import StatsConfig
from lmsci_mi.weights import read_deltas

ROOT = Path(__file__).resolve().parent.parent
SPEED = ROOT / "docs" / "data" / "editing_speed.json"
TABLE = ROOT / "docs" / "data" / "editing_table.json"
# MEMIT and AlphaEdit fit the same δ on the unedited model: cached, each is fitted once.
CONFIGS = {
    "rome": ROMEHyperParams(),
    "memit": MEMITHyperParams(cache_fits=True),
    "alphaedit": AlphaEditHyperParams(cache_fits=True),
}
ROME_CHUNK = 10
SCORE_CHUNK = 25
PROBES = ("NEG", "REV", "2HOP", "ORL")


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def speed(args: argparse.Namespace) -> None:
    lm = load_model("smollm2-135m")
    facts = load_facts()  # the set the "before" figures of issue 21 were measured on
    layer, layers = default_rome_layer(lm), default_memit_layers(lm)
    stats = key_statistics(lm, sorted({layer, *layers}), StatsConfig(n_tokens=ROMEHyperParams().stats_tokens))
    context_templates(lm, 5, (5, 10))
    context_templates(lm, 5, (10,))
    rows = []
    rome = []
    for fact in facts[: args.n_rome]:
        handle, wall, cpu = timed(lambda f=fact: rome_edit(lm, f, ROMEHyperParams(layer=layer), stats=stats))
        handle.restore()
        rome.append((wall, cpu))
        print(f"ROME edit {fact.subject} -> {fact.target_new}: {wall:.1f} s", flush=True)
    if rome:
        rows.append({
            "what": f"one ROME edit, layer {layer} (mean of {len(rome)} facts)",
            "wall_s": sum(w for w, _ in rome) / len(rome), "cpu_s": sum(c for _, c in rome) / len(rome),
            "wall_s_each": [w for w, _ in rome], "target_s": 5,
        })
    runs = [(args.n_memit, True)] if args.n_memit else []
    if args.memit_before:  # the same run, the same facts, with and without the prefix reuse
        runs += [(args.memit_before, True), (args.memit_before, False)]
    for n, reuse in runs:
        hp = MEMITHyperParams(reuse_prefix=reuse)
        handle, wall, cpu = timed(lambda hp=hp, n=n: memit_edit(lm, facts[:n], hp, stats=stats))
        handle.restore()
        label = "fit from the subject on" if reuse else "fit over every position (before)"
        rows.append({"what": f"MEMIT, {n} facts in one batch, {label}", "wall_s": wall, "cpu_s": cpu,
                     "target_s": 120 if n == 50 and reuse else None})
        print(rows[-1], flush=True)
    config = EvaluationConfig()
    one = facts[:1]
    ev, wall, cpu = timed(
        lambda: evaluate_edits(lm, one, ROMEHyperParams(layer=layer), stats=stats, evaluation=config, use_cache=False)
    )
    rows.append({"what": f"evaluation of one fact, GE {config.generation_tokens} tokens, baseline computed "
                         "(ROME edit included)", "wall_s": wall, "cpu_s": cpu, "target_s": None})
    rows.append({"what": "… the same, the edit excluded", "wall_s": wall - ev.seconds_per_edit,
                 "cpu_s": None, "target_s": None})
    evaluate_edits(lm, one, ROMEHyperParams(layer=layer), stats=stats, evaluation=config)  # fills the cache
    ev, wall, cpu = timed(
        lambda: evaluate_edits(lm, one, ROMEHyperParams(layer=layer), stats=stats, evaluation=config)
    )
    rows.append({"what": "evaluation of one fact, unedited baseline cached (the edit excluded)",
                 "wall_s": wall - ev.seconds_per_edit, "cpu_s": None, "target_s": 10})
    today = time.strftime("%Y-%m-%d")
    rows = [{**row, "date": today} for row in rows]
    if SPEED.exists():  # a partial run (say --n-memit 0) keeps the rows it did not measure
        kept = [row for row in json.loads(SPEED.read_text())["rows"]
                if row["what"] not in {r["what"] for r in rows}
                and "evaluation" not in row["what"] and not row["what"].startswith("…")]
        rows = kept + rows
    data = {
        "model": lm.name, "torch_threads": torch.get_num_threads(), "stats_tokens": stats.n_tokens,
        "rome_layer": layer, "memit_layers": list(layers), "rows": rows,
        "before_issue_21": {
            "source": "issue 21 (measured by an earlier session on this CPU)",
            "rome_edit_s": "5-16", "memit_50_facts_s": 434, "evaluation_one_fact_s": 70,
        },
    }
    SPEED.write_text(json.dumps(data, indent=1))
    print("| what | wall s | CPU s | target | measured |\n|---|---|---|---|---|")
    for row in rows:
        cpu = "" if row["cpu_s"] is None else f"{row['cpu_s']:.1f}"
        target = "" if row["target_s"] is None else f"≤ {row['target_s']}"
        print(f"| {row['what']} | {row['wall_s']:.1f} | {cpu} | {target} | {row.get('date', '2026-11-26')} |")


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


def floor(args: argparse.Namespace) -> None:
    """The arithmetic floor of the speed targets: FLOPs of one ROME edit and of MEMIT per fact,
    counted by torch's FlopCounterMode on the --speed facts, over the machine's matmul rate.
    Run it alone (the rate is probed first, for 5 s per thread count)."""
    from torch.utils.flop_counter import FlopCounterMode

    rates = {str(t): matmul_rate(t) for t in (1, 2)}
    print(f"float32 matmul: {rates['1']:.1f} GFLOP/s at 1 thread, {rates['2']:.1f} at 2", flush=True)
    lm = load_model("smollm2-135m")
    facts = load_facts()
    layer, layers = default_rome_layer(lm), default_memit_layers(lm)
    stats = key_statistics(lm, sorted({layer, *layers}), StatsConfig(n_tokens=ROMEHyperParams().stats_tokens))
    context_templates(lm, 5, (5, 10))  # sampled once per model: not part of an edit's count
    context_templates(lm, 5, (10,))
    rome = []
    for fact in facts[: args.n_rome]:
        with FlopCounterMode(display=False) as counter:
            handle = rome_edit(lm, fact, ROMEHyperParams(layer=layer), stats=stats)
        handle.restore()
        rome.append(counter.get_total_flops() / 1e9)
        print(f"ROME {fact.subject}: {rome[-1]:.0f} GFLOP", flush=True)
    hp = MEMITHyperParams()  # no cached fits: every fact's δ is fitted, as in the timed run
    n = args.floor_memit
    with FlopCounterMode(display=False) as counter:
        handle = memit_edit(lm, facts[:n], hp, stats=stats)
    handle.restore()
    memit = counter.get_total_flops() / 1e9 / n
    print(f"MEMIT: {memit:.0f} GFLOP per fact ({n} facts)", flush=True)
    rome_mean = sum(rome) / len(rome)
    data = json.loads(SPEED.read_text()) if SPEED.exists() else {}
    data["arithmetic_floor"] = {
        "date": time.strftime("%Y-%m-%d"),
        "matmul_gflops": rates,
        "rome_gflop_per_edit": rome, "rome_gflop_mean": rome_mean, "rome_layer": layer,
        "memit_gflop_per_fact": memit, "memit_facts_counted": n,
        "rome_floor_s": rome_mean / rates["2"], "rome_target_s": 5,
        "memit_50_floor_s": 50 * memit / rates["2"], "memit_target_s": 120,
        "how": "FLOPs counted by torch.utils.flop_counter.FlopCounterMode (matmuls and convolutions "
               "only); floor = FLOPs / the 2-thread float32 matmul rate",
    }
    SPEED.write_text(json.dumps(data, indent=1))
    f = data["arithmetic_floor"]
    print(f"floor: ROME {f['rome_floor_s']:.1f} s (target 5), MEMIT 50 facts {f['memit_50_floor_s']:.0f} s (target 120)")


def table(args: argparse.Namespace) -> None:
    from lmsci_mi.editing import load_edit_facts

    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    lm = load_model("smollm2-135m")
    facts = load_edit_facts()
    random.Random(0).shuffle(facts)  # every relation in any prefix (sequential_editing.py: the same order)
    facts = facts[: args.facts]
    layers = sorted({default_rome_layer(lm), *default_memit_layers(lm)})
    stats = key_statistics(lm, layers, StatsConfig(n_tokens=ROMEHyperParams().stats_tokens))
    evaluation = EvaluationConfig()
    start = time.perf_counter()
    results: dict[str, EditEvaluation] = {}
    for name in args.methods:
        config = CONFIGS[name]
        if name == "rome":
            rome_facts = facts[: args.rome_facts or len(facts)]
            firsts = list(range(0, len(rome_facts), ROME_CHUNK))
            # --backward: a second process can take the chunks from the end while the first
            # goes forward; each skips a chunk the other has written.
            for first in reversed(firsts) if args.backward else firsts:
                path = cache / f"rome_{first:04d}.json"
                if not path.exists():
                    if time.perf_counter() - start > args.max_seconds:
                        break
                    chunk = rome_facts[first : first + ROME_CHUNK]
                    ev = evaluate_edits(lm, chunk, config, stats=stats, evaluation=evaluation)
                    ev.save(path)
                    print(f"rome facts {first}..{first + len(ev.subjects) - 1}: S {ev.metric('S'):.1f}, "
                          f"{ev.seconds_per_edit:.1f} s/edit", flush=True)
            parts = []
            for first in firsts:  # in the facts' order, as far as they are done
                path = cache / f"rome_{first:04d}.json"
                if not path.exists():
                    break
                parts.append(EditEvaluation.load(path))
            if sum(len(p.subjects) for p in parts) == len(rome_facts):
                results[name] = EditEvaluation.combine(parts)
            elif parts and args.partial:  # ROME on the first facts done so far, labelled so
                results[name] = EditEvaluation.combine(parts)
                print(f"rome: {len(results[name].subjects)} of {len(rome_facts)} facts so far")
        else:
            path = cache / f"{name}_{len(facts)}.json"
            if not path.exists():
                ev = batch_evaluation(lm, name, facts, stats, evaluation, cache, deadline=start + args.max_seconds)
                if ev is not None:
                    ev.save(path)
                    print(f"{name}: S {ev.metric('S'):.1f}, one edit of {len(facts)} facts in "
                          f"{ev.seconds_per_edit:.0f} s", flush=True)
            if path.exists():
                results[name] = EditEvaluation.load(path)
    if set(results) != set(args.methods) and not (args.partial and results):
        print(f"done so far: {sorted(results)}; run again to resume")
        return
    write_table(results, facts, stats.n_tokens, stats.source)
    print("done")


def batch_evaluation(lm, name, facts, stats, evaluation, cache: Path, *, deadline: float) -> EditEvaluation | None:
    """A batch method's evaluation (MEMIT, AlphaEdit), resumable: the one edit of every fact is
    computed once and its deltas kept in ``cache``; the edited model is then scored SCORE_CHUNK
    facts at a time, each chunk's rows kept, so an interrupted run loses at most one chunk.
    The rows equal one ``evaluate_edits`` call's (a fact's scores do not depend on the others
    scored with it). None when ``deadline`` passes first."""
    plan = plan_evaluation(lm, facts, CONFIGS[name], evaluation)
    n = len(plan.requests)
    stem = f"{name}_{n}"
    edit_path = cache / f"{stem}.edit.safetensors"
    if not edit_path.exists():
        function = EDITING_METHODS.get(plan.method).function
        begin = time.perf_counter()
        with function(lm, list(plan.requests), plan.config, stats=stats) as handle:
            seconds = time.perf_counter() - begin
            partial = edit_path.with_name(edit_path.name + ".partial.safetensors")
            handle.save(partial, {"seconds": repr(seconds)})
            os.replace(partial, edit_path)  # never a half-written edit
        print(f"{name}: one edit of {n} facts in {seconds:.0f} s", flush=True)
    deltas, metadata = read_deltas(edit_path)
    before = unedited_scores(lm, plan, range(n))
    rows = []
    for first in range(0, n, SCORE_CHUNK):
        path = cache / f"{stem}.scores_{first:04d}.pt"
        if not path.exists():
            if time.perf_counter() > deadline:
                return None
            chunk = list(range(first, min(n, first + SCORE_CHUNK)))
            scores = edited_scores(lm, plan, [chunk], deltas=deltas).scores
            partial = path.with_suffix(".partial")
            torch.save(scores, partial)
            os.replace(partial, path)
            print(f"{name} facts {first}..{chunk[-1]} scored", flush=True)
        rows.append(torch.load(path))
    layers = EditHandle(lm, deltas, method=plan.method).layers
    after = EditedScores(tuple(range(n)), torch.cat(rows), (layers,) * n, ())
    return assemble_evaluation(lm, plan, before, after, seconds=[float(metadata["seconds"])], stats=stats)


def write_table(results: dict[str, EditEvaluation], facts: list, stats_tokens: int, source: str) -> None:
    n_facts = len(facts)
    rows = []
    # One unedited row per fact count (ROME may run on the first N facts of the same order only).
    named = []
    for name, ev in sorted(results.items(), key=lambda item: -len(item[1].subjects)):
        if all(len(other.subjects) != len(ev.subjects) for _, other, _ in named):
            named.append(("unedited", ev, False))
        named.append((name, ev, True))
    for label, ev, edited in named:
        probed = facts[: len(ev.subjects)]  # every row's facts are the first of the same order
        rows.append({
            "model": label,
            "n_facts": len(ev.subjects),
            # The facts that carry each messy-knowledge probe (its rate's sample size).
            "probe_facts": {m: int((~ev.per_fact[0, :, PER_FACT.index(m)].isnan()).sum()) for m in PROBES},
            "other_relation_prompts": sum(len(f.other_relation_prompts) for f in probed),
            "n_edits": ev.n_edits if edited else 0,
            "seconds_per_edit": ev.seconds_per_edit if edited else None,
            "metrics": {m: ev.metric(m, edited=edited) for m in METRICS},
            "ci95": {m: ev.interval(m, edited=edited) for m in METRICS},
        })
    data = {
        "model": "smollm2-135m",
        "facts": "lmsci_mi/data/edit_facts.json",
        "n_facts": n_facts,
        "stats_tokens": stats_tokens,
        "stats_source": source,
        "generation_tokens": EvaluationConfig().generation_tokens,
        "interval": "percentile bootstrap over facts, 2000 resamples, 95%",
        "configs": {name: CONFIGS[name].params() for name in results},
        "rows": rows,
    }
    TABLE.write_text(json.dumps(data, indent=1))
    print("| model + method | facts | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for row in rows:
        cells = []
        for m in METRICS:
            value, (low, high) = row["metrics"][m], row["ci95"][m]
            cells.append("–" if value != value else f"{value:.1f} [{low:.1f}, {high:.1f}]")
        print(f"| {row['model']} | {row['n_facts']} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speed", action="store_true", help="the timings (quiet machine)")
    parser.add_argument("--table", action="store_true", help="the editing table (resumable)")
    parser.add_argument("--n-rome", type=int, default=5, help="--speed: ROME edits timed")
    parser.add_argument("--n-memit", type=int, default=50, help="--speed: facts in the MEMIT batch")
    parser.add_argument("--memit-before", type=int, default=0, metavar="N",
                        help="--speed: also time MEMIT on N facts with and without the prefix reuse")
    parser.add_argument("--methods", nargs="+", default=["memit", "alphaedit", "rome"], choices=sorted(CONFIGS))
    parser.add_argument("--facts", type=int, default=None,
                        help="--table: the first N facts in a seeded random order (default all)")
    parser.add_argument("--backward", action="store_true",
                        help="--table: take ROME's chunks from the last (a second process beside a forward one)")
    parser.add_argument("--partial", action="store_true",
                        help="--table: write the table from the methods done so far (ROME on its first facts)")
    parser.add_argument("--rome-facts", type=int, default=None,
                        help="--table: ROME on the first N of those facts only (default all)")
    parser.add_argument("--cache", default="out/editing_table", help="--table: per-chunk results")
    parser.add_argument("--max-seconds", type=float, default=float("inf"), help="--table: stop starting work after")
    parser.add_argument("--floor", action="store_true",
                        help="FLOPs per edit and the matmul rate: the targets' arithmetic floor (alone)")
    parser.add_argument("--floor-memit", type=int, default=8, help="--floor: facts whose MEMIT FLOPs are counted")
    args = parser.parse_args()
    if args.floor:
        floor(args)
    if args.speed:
        speed(args)
    if args.table:
        table(args)
    if not (args.speed or args.table or args.floor):
        parser.error("give --speed, --floor or --table")


if __name__ == "__main__":
    main()
