"""Average indirect effect of causal tracing over the shipped fact set (ROME Fig. 2 / Fig. 3,
Zhang & Nanda 2024), on SmolLM2-135M and Gemma 3 270M. Resumable: each fact's trace is cached.

    python benchmarks/aie.py --piece smollm2-str --budget 420   # trace for at most ~7 min, exit
    python benchmarks/aie.py --piece gemma3-str --budget 420    # (repeat until it says complete)
    python benchmarks/aie.py --piece smollm2-gaussian --budget 420
    python benchmarks/aie.py --piece smollm2-sever --budget 420
    python benchmarks/aie.py --write      # all pieces complete: docs/data/aie.json + docs/img/aie_*.png

Each piece prints its seconds per new fact (wall-clock, on the shared 2-core CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.cache import cache_root
from lmsci_mi.circuits.aie import (
    CATEGORIES,
    AIEConfig,
    AverageIndirectEffect,
    aggregate_traces,
    load_fact_set,
    trace_facts,
)
from lmsci_mi.circuits.tracing import SEVERED_KINDS, TRACE_KINDS, TraceConfig

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data" / "aie.json"
IMG = ROOT / "docs" / "img"

# name: (model, corruption, noise samples, facts (None: all known and paired), kinds)
PIECES: dict[str, tuple[str, str, int, int | None, tuple[str, ...]]] = {
    "smollm2-str": ("smollm2-135m", "str", 1, None, TRACE_KINDS),
    "gemma3-str": ("gemma3-270m", "str", 1, None, TRACE_KINDS),
    "smollm2-gaussian": ("smollm2-135m", "gaussian", 5, 30, TRACE_KINDS),
    "smollm2-sever": ("smollm2-135m", "str", 1, 30, ("resid", *SEVERED_KINDS)),
}
TIMINGS = cache_root() / "aie" / "benchmark_timings.json"


def config_of(piece: str) -> AIEConfig:
    _, corruption, samples, n_facts, kinds = PIECES[piece]
    return AIEConfig(
        n_facts=n_facts, trace=TraceConfig(corruption=corruption, n_samples=samples, kinds=kinds)
    )


def run_piece(piece: str, budget: float) -> None:
    lm = load_model(PIECES[piece][0])
    before = time.perf_counter()
    done = trace_facts(lm, load_fact_set("shipped"), config_of(piece), budget_s=budget)
    seconds = time.perf_counter() - before
    timings = json.loads(TIMINGS.read_text()) if TIMINGS.is_file() else {}
    new = len(done.traces) - timings.get(piece, {}).get("done", 0)
    if new > 0:
        timings[piece] = {
            "done": len(done.traces),
            "seconds": timings.get(piece, {}).get("seconds", 0.0) + seconds,
            "new": timings.get(piece, {}).get("new", 0) + new,
        }
        TIMINGS.parent.mkdir(parents=True, exist_ok=True)
        TIMINGS.write_text(json.dumps(timings, indent=1))
    per = seconds / new if new > 0 else float("nan")
    print(
        f"{piece}: {len(done.traces)}/{len(done.facts)} facts traced ({new} new, {per:.1f} s each, "
        f"{seconds:.0f} s incl. setup); known {done.n_known} of {done.n_candidates}, "
        f"{done.n_unpaired} without an STR partner; {'complete' if done.complete else 'INCOMPLETE'}"
    )


def write() -> None:
    out: dict[str, object] = {
        "command": "python benchmarks/aie.py --piece NAME --budget 420 (repeat); "
        "python benchmarks/aie.py --write",
        "categories": list(CATEGORIES),
    }
    timings = json.loads(TIMINGS.read_text()) if TIMINGS.is_file() else {}
    results = {}
    for piece, (model, *_rest) in PIECES.items():
        lm = load_model(model)
        done = trace_facts(lm, load_fact_set("shipped"), config_of(piece), max_new=0)
        if not done.traces:
            print(f"{piece}: nothing traced yet, skipped (run its pieces first)")
            continue
        if not done.complete:
            # Published as partial, with its n: the deadline came before every piece finished.
            print(f"{piece}: PARTIAL, {len(done.traces)}/{len(done.facts)} facts traced")
        result = aggregate_traces(
            done.traces,
            n_candidates=done.n_candidates,
            n_known=done.n_known,
            n_unpaired=done.n_unpaired,
        )
        results[piece] = result
        print(result.summary())
        result.plot(IMG / f"aie_{piece}.png")
        out[piece] = {
            **describe(result, timings.get(piece)),
            "n_samples": config_of(piece).trace.n_samples,
            "complete": done.complete,
            "n_planned": len(done.facts),
        }
    print(markdown_table(results))
    if "smollm2-sever" in results:
        results["smollm2-sever"].plot_severing(IMG / "aie_smollm2-sever_fig3.png")
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(out, indent=1))
    print(f"wrote {DATA}")


def describe(result: AverageIndirectEffect, timing: dict[str, float] | None) -> dict[str, object]:
    """The numbers the doc page shows: peak per kind and category, the mid-layer MLP check."""
    peaks = {}
    for kind in result.kinds:
        for c, category in enumerate(CATEGORIES):
            if result.n[c]:
                layer, value, band = result.peak(kind, category)
                peaks[f"{kind}/{category}"] = {
                    "layer": layer,
                    "aie": round(value, 4),
                    "band95": round(band, 4),
                    "n": result.n[c],
                }
    check = {}
    if "mlp" in result.kinds:
        subject, last = result.curve("mlp", "last subject"), result.curve("mlp", "last token")
        layer = int(subject.argmax())
        n_layers = subject.shape[0]
        check = {
            "mlp_last_subject_peak_layer": layer,
            "n_layers": n_layers,
            # A window that still holds layer 0 is an early-layer effect, wherever its centre.
            "window_holds_layer_0": layer - result.window // 2 <= 0,
            "mid_layer": n_layers // 6 <= layer <= (5 * n_layers) // 6
            and layer - result.window // 2 > 0,
            "peak_over_last_token_mlp_at_that_layer": round(float(subject[layer] - last[layer]), 4),
        }
    return {
        "model": result.meta.model,
        "corruption": result.corruption,
        "metric": result.metric,
        "n_facts": result.n_facts,
        "n_known": result.n_known,
        "n_candidates": result.n_candidates,
        "n_unpaired": result.n_unpaired,
        "n_per_category": dict(zip(CATEGORIES, result.n, strict=True)),
        "clean_mean": round(result.clean_mean, 4),
        "corrupted_mean": round(result.corrupted_mean, 4),
        "noise_scale": round(result.noise_scale, 5),
        "window": result.window,
        "kinds": list(result.kinds),
        "peaks": peaks,
        "mlp_check": check,
        "curves": {
            k: {c: [round(float(v), 4) for v in result.curve(k, c)] for c in CATEGORIES}
            for k in result.kinds
        },
        "band95": {
            k: {
                c: [
                    round(float(v), 4)
                    for v in result.band[result.kinds.index(k), CATEGORIES.index(c)]
                ]
                for c in CATEGORIES
            }
            for k in result.kinds
        },
        "seconds_per_fact": round(timing["seconds"] / timing["new"], 2)
        if timing and timing.get("new")
        else None,
    }


def markdown_table(results: dict[str, AverageIndirectEffect]) -> str:
    """Peak AIE per run, kind and category: the table docs/aie.md shows."""
    lines = [
        "| run | kind | category | n | peak layer | peak AIE ± 95% |",
        "|---|---|---|---|---|---|",
    ]
    for piece, result in results.items():
        for kind in result.kinds:
            for c, category in enumerate(CATEGORIES):
                if result.n[c]:
                    layer, value, band = result.peak(kind, category)
                    lines.append(
                        f"| {piece} | {kind} | {category} | {result.n[c]} | {layer} | "
                        f"{value:.3f} ± {band:.3f} |"
                    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--piece", choices=sorted(PIECES))
    parser.add_argument(
        "--budget", type=float, default=420.0, help="seconds of new tracing per run"
    )
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.piece:
        run_piece(args.piece, args.budget)
    if args.write:
        write()


if __name__ == "__main__":
    main()
