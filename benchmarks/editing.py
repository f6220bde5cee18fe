"""Benchmark and full evaluation of lmsci_mi.editing on SmolLM2-135M.

    python benchmarks/editing.py            # timings: statistics cost, ROME per edit, MEMIT batch
    python benchmarks/editing.py --eval     # CounterFact table: ROME x30 (one at a time), MEMIT x50

Timings are wall-clock seconds (and CPU seconds, which are steadier on a shared machine). The
statistics are computed once and cached; the ROME timing is with cached statistics, as the
acceptance target (≤ 15 s) states. On a crowded CPU, OMP_NUM_THREADS=1 is much faster.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.editing import (
    GENERATION_TOKENS,
    EditEvaluation,
    EvaluationConfig,
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
from lmsci_mi.editing.stats import DEFAULT_STATS_TOKENS

PAPERS = """\
| model + method | S | ES | PS | NS | EM | PM | NM | GE |
|---|---|---|---|---|---|---|---|---|
| GPT-2 XL unedited (ROME paper) | 30.5 | 22.2 | 24.7 | 78.1 | −4.8 | −5.0 | 5.0 | 626.6 |
| GPT-2 XL + ROME (ROME paper) | 89.2 | 100.0 | 96.4 | 75.4 | 97.9 | 62.7 | 4.2 | 621.9 |
| GPT-J unedited (ROME paper) | 23.6 | 16.3 | 18.6 | 83.0 | −7.2 | −7.4 | 7.3 | 621.8 |
| GPT-J + ROME (ROME paper) | 91.5 | 99.9 | 99.1 | 78.9 | 99.4 | 74.1 | 5.2 | 620.1 |
| GPT-J + MEMIT, 10k edits (MEMIT paper, via summary) | 85.8 | 98.9 | 88.6 | 73.7 | – | – | – | 619.9 |"""


def spread(n_total: int, n: int) -> list[int]:
    """``n`` indices spread evenly over ``range(n_total)`` (every relation gets its share)."""
    return sorted({round(i * n_total / n) for i in range(n)})


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def benchmark(args: argparse.Namespace) -> None:
    lm = load_model("smollm2-135m")
    facts = load_facts()
    layer = default_rome_layer(lm)
    layers = default_memit_layers(lm)
    print(f"torch threads {torch.get_num_threads()}, ROME layer {layer}, MEMIT layers {layers}")

    print("| what | tokens | wall s | CPU s |\n|---|---|---|---|")
    if args.stats_tokens:
        # Cost of the statistics: a fresh (uncached) run on a few tokens, scaled to the default.
        small = args.stats_tokens
        _, wall, cpu = timed(
            lambda: key_statistics(
                lm, layers, StatsConfig(n_tokens=small), use_cache=False, cache_dir=Path(args.scratch)
            )
        )
        print(
            f"| key statistics, {len(layers)} layers {layers} (one pass) | {small} | {wall:.1f} | {cpu:.1f} |"
        )
        per, per_cpu = wall / small * DEFAULT_STATS_TOKENS, cpu / small * DEFAULT_STATS_TOKENS
        print(
            f"| … scaled to the default budget | {DEFAULT_STATS_TOKENS} | ≈{per:.0f} | ≈{per_cpu:.0f} |"
        )
    stats = key_statistics(lm, sorted(set(layers) | {layer}))  # cached after the first run
    print(f"| cached statistics used: {stats.n_tokens} tokens of {stats.source} | | | |")

    _, wall, cpu = timed(lambda: context_templates(lm, 10))
    print(f"| context prefixes (once per model, cached) | | {wall:.1f} | {cpu:.1f} |")
    for fact in facts[: args.n_rome]:
        handle, wall, cpu = timed(lambda f=fact: rome_edit(lm, f, ROMEHyperParams(layer=layer), stats=stats))
        handle.restore()
        print(f"| ROME edit, {fact.subject} →{fact.target_new} | | {wall:.1f} | {cpu:.1f} |")
    if not args.n_memit:
        return
    batch = facts[: args.n_memit]
    context_templates(lm, 5, (10,))
    handle, wall, cpu = timed(lambda: memit_edit(lm, batch, MEMITHyperParams(layers=layers), stats=stats))
    handle.restore()
    print(f"| MEMIT batch of {len(batch)} facts | | {wall:.1f} | {cpu:.1f} |")


def evaluate(args: argparse.Namespace) -> None:
    lm = load_model("smollm2-135m")
    facts = load_facts()
    layer = default_rome_layer(lm)
    layers = default_memit_layers(lm)
    stats = key_statistics(lm, sorted(set(layers) | {layer}))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: list[EditEvaluation] = []
    shard, n_shards = (int(x) for x in args.shard.split("/"))
    if args.n_rome:
        rome_facts = [facts[i] for i in spread(len(facts), args.n_rome)][shard::n_shards]
        ev = evaluate_edits(
            lm,
            rome_facts,
            ROMEHyperParams(layer=layer),
            stats=stats,
            evaluation=EvaluationConfig(generation_tokens=args.generation_tokens),
        )
        ev.save(out / f"rome_eval_{shard}of{n_shards}.json")
        parts = [EditEvaluation.load(p) for p in sorted(out.glob(f"rome_eval_*of{n_shards}.json"))]
        if len(parts) == n_shards:
            ev = EditEvaluation.combine(parts)
            ev.save(out / "rome_eval.json")
        results.append(ev)
        print(
            ev.summary(),
            f"\nROME: {len(rome_facts)} facts, layer {layer}, {ev.seconds_per_edit:.1f} s/edit",
        )
    if args.n_memit:
        memit_facts = [facts[i] for i in spread(len(facts), args.n_memit)]
        ev = evaluate_edits(
            lm,
            memit_facts,
            MEMITHyperParams(layers=layers),
            stats=stats,
            evaluation=EvaluationConfig(generation_tokens=args.generation_tokens),
        )
        ev.save(out / "memit_eval.json")
        results.append(ev)
        print(
            ev.summary(),
            f"\nMEMIT: {len(memit_facts)} facts, layers {layers}, batch {ev.seconds_per_edit:.1f} s, "
            f"{ev.excluded_neighbours} neighbourhood prompts about edited subjects left out",
        )
    write_table(results, out)


def write_table(results: list[EditEvaluation], out: Path) -> None:
    lines = [
        "| model + method | S | ES | PS | NS | EM | PM | NM | GE |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for ev in results:
        n = len(ev.subjects)
        for i in range(len(ev.labels[0])):
            name = f"SmolLM2-135M {'unedited' if i == 0 else '+ ' + ev.method.upper()} ({n} facts)"
            lines.append(
                f"| {name} | " + " | ".join(f"{float(v):.1f}" for v in ev.values[i]) + " |"
            )
    table = "\n".join(lines) + "\n" + PAPERS.split("\n", 2)[2]
    (out / "editing_table.md").write_text(table + "\n")
    print(table)
    summary = {
        ev.method: {
            "seconds_per_edit": ev.seconds_per_edit,
            "stats_tokens": ev.stats_tokens,
            "fact_layers": ev.fact_layers,
            "excluded_neighbours": ev.excluded_neighbours,
        }
        for ev in results
    }
    (out / "editing_eval.json").write_text(json.dumps(summary, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--eval", action="store_true", help="run the CounterFact evaluation")
    parser.add_argument(
        "--n-rome", type=int, default=None, help="facts for ROME (eval: 30, timing: 3)"
    )
    parser.add_argument(
        "--n-memit", type=int, default=None, help="facts for MEMIT (eval: 50, timing: 10)"
    )
    parser.add_argument("--out", default="out/editing", help="where --eval writes its table")
    parser.add_argument(
        "--stats-tokens",
        type=int,
        default=4000,
        help="tokens for the uncached statistics timing (0 skips)",
    )
    parser.add_argument(
        "--shard", default="0/1", help="ROME facts shard i/k (run k processes, the last combines)"
    )
    parser.add_argument(
        "--generation-tokens", type=int, default=GENERATION_TOKENS, help="tokens per generation for GE"
    )
    parser.add_argument(
        "--table-from",
        nargs="*",
        default=None,
        help="only rebuild the table from saved evaluations",
    )
    parser.add_argument(
        "--scratch", default="out/editing/scratch-stats", help="cache for the uncached stats run"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.table_from:
        write_table([EditEvaluation.load(p) for p in args.table_from], Path(args.out))
    elif args.eval:
        args.n_rome = 30 if args.n_rome is None else args.n_rome
        args.n_memit = 50 if args.n_memit is None else args.n_memit
        evaluate(args)
    else:
        args.n_rome = 3 if args.n_rome is None else args.n_rome
        args.n_memit = 10 if args.n_memit is None else args.n_memit
        benchmark(args)


if __name__ == "__main__":
    main()
