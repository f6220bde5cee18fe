"""Average indirect effect of causal tracing over the shipped fact set (ROME Fig. 2 / Fig. 3,
Zhang & Nanda 2024), on SmolLM2-135M and Gemma 3 270M. Resumable: each fact's trace is cached.

    python benchmarks/aie.py --piece smollm2-str --budget 420   # trace for at most ~7 min, exit
    python benchmarks/aie.py --piece gemma3-str --budget 420    # (repeat until it says complete)
    python benchmarks/aie.py --piece smollm2-gaussian --budget 420
    python benchmarks/aie.py --piece smollm2-sever --budget 420
    python benchmarks/aie.py --write      # all pieces complete: docs/data/aie.json + docs/img/aie_*.png

Each piece prints its seconds per new fact (wall-clock, on the shared 2-core CPU); the seconds
and facts of every piece's runs add up in the harness's cache, and --write records them per fact.
The traces themselves are cached by ``trace_facts`` (under the lmsci-mi cache root). --quick with
--piece traces for 30 s at most; with --write it writes under out/quick/ (figures beside it).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import harness
from doc_tables.schemas.circuits import AIEData, AIEMLPCheck, AIEPeak, AIERun

from lmsci_mi import load_model
from lmsci_mi.circuits.aie import (
    CATEGORIES,
    AIEConfig,
    AverageIndirectEffect,
    aggregate_traces,
    trace_facts,
)
from lmsci_mi.circuits.tracing import SEVERED_KINDS, TRACE_KINDS, TraceConfig
from lmsci_mi.data import load_facts

DATA = harness.DATA / "aie.json"
IMG = harness.ROOT / "docs" / "img"

# name: (model, corruption, noise samples, facts (None: all known and paired), kinds)
PIECES: dict[str, tuple[str, str, int, int | None, tuple[str, ...]]] = {
    "smollm2-str": ("smollm2-135m", "str", 1, None, TRACE_KINDS),
    "gemma3-str": ("gemma3-270m", "str", 1, None, TRACE_KINDS),
    "smollm2-gaussian": ("smollm2-135m", "gaussian", 5, 30, TRACE_KINDS),
    "smollm2-sever": ("smollm2-135m", "str", 1, 30, ("resid", *SEVERED_KINDS)),
}
QUICK_BUDGET = 30.0


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--piece", choices=sorted(PIECES))
    parser.add_argument("--budget", type=float, default=420.0, help="seconds of new tracing per run")
    parser.add_argument("--write", action="store_true")


def config_of(piece: str) -> AIEConfig:
    _, corruption, samples, n_facts, kinds = PIECES[piece]
    return AIEConfig(
        n_facts=n_facts, trace=TraceConfig(corruption=corruption, n_samples=samples, kinds=kinds)
    )


def run_piece(piece: str, budget: float, timings: harness.ItemCache) -> None:
    """Trace the piece's facts for at most ``budget`` seconds; add the new facts and their
    seconds to the piece's running record."""
    lm = load_model(PIECES[piece][0])
    before = time.perf_counter()
    done = trace_facts(lm, load_facts("facts"), config_of(piece), budget_s=budget)
    seconds = time.perf_counter() - before
    record = timings.load(piece, {"done": 0, "seconds": 0.0, "new": 0})
    new = len(done.traces) - record["done"]
    if new > 0:
        timings.save(piece, {"done": len(done.traces), "seconds": record["seconds"] + seconds,
                             "new": record["new"] + new})
    per = seconds / new if new > 0 else float("nan")
    print(
        f"{piece}: {len(done.traces)}/{len(done.facts)} facts traced ({new} new, {per:.1f} s each, "
        f"{seconds:.0f} s incl. setup); known {done.n_known} of {done.n_candidates}, "
        f"{done.n_unpaired} without an STR partner; {'complete' if done.complete else 'INCOMPLETE'}"
    )


def written_piece(piece: str, timing: dict | None, img: Path) -> tuple[AverageIndirectEffect, AIERun] | None:
    """The piece's AIE from its cached traces (none traced: None), plotted into ``img``."""
    done = trace_facts(load_model(PIECES[piece][0]), load_facts("facts"), config_of(piece), max_new=0)
    if not done.traces:
        print(f"{piece}: nothing traced yet, skipped (run its pieces first)")
        return None
    if not done.complete:
        # Published as partial, with its n: the deadline came before every piece finished.
        print(f"{piece}: PARTIAL, {len(done.traces)}/{len(done.facts)} facts traced")
    result = aggregate_traces(
        done.traces, n_candidates=done.n_candidates, n_known=done.n_known, n_unpaired=done.n_unpaired
    )
    print(result.summary())
    result.plot(img / f"aie_{piece}.png")
    return result, AIERun(**describe(result, timing), n_samples=config_of(piece).trace.n_samples,
                          complete=done.complete, n_planned=len(done.facts))


def write(run: harness.Run, timings: harness.ItemCache) -> None:
    img = IMG if run.out == DATA else run.out.parent
    data = AIEData(categories=list(CATEGORIES))
    results = {}
    for piece in PIECES:
        written = written_piece(piece, timings.load(piece), img)
        if written is not None:
            results[piece], data[piece] = written  # type: ignore[literal-required]
    print(markdown_table(results))
    if "smollm2-sever" in results:
        results["smollm2-sever"].plot_severing(img / "aie_smollm2-sever_fig3.png")
    run.write(data)


def peaks(result: AverageIndirectEffect) -> dict[str, AIEPeak]:
    """Each kind's peak per token category, keyed "kind/category"."""
    out = {}
    for kind in result.kinds:
        for c, category in enumerate(CATEGORIES):
            if result.n[c]:
                layer, value, band = result.peak(kind, category)
                out[f"{kind}/{category}"] = AIEPeak(layer=layer, aie=round(value, 4),
                                                    band95=round(band, 4), n=result.n[c])
    return out


def mlp_check(result: AverageIndirectEffect) -> AIEMLPCheck:
    """Is the MLP's last-subject-token peak a mid-layer one (ROME's finding)?"""
    if "mlp" not in result.kinds:
        return AIEMLPCheck()
    subject, last = result.curve("mlp", "last subject"), result.curve("mlp", "last token")
    layer, n_layers = int(subject.argmax()), subject.shape[0]
    return AIEMLPCheck(
        mlp_last_subject_peak_layer=layer,
        n_layers=n_layers,
        # A window that still holds layer 0 is an early-layer effect, wherever its centre.
        window_holds_layer_0=layer - result.window // 2 <= 0,
        mid_layer=n_layers // 6 <= layer <= (5 * n_layers) // 6 and layer - result.window // 2 > 0,
        peak_over_last_token_mlp_at_that_layer=round(float(subject[layer] - last[layer]), 4),
    )


def by_kind_and_category(result: AverageIndirectEffect, values) -> dict[str, dict[str, list[float]]]:
    """``values(kind, category)``'s per-layer list, rounded, by kind then category."""
    return {k: {c: [round(float(v), 4) for v in values(k, c)] for c in CATEGORIES} for k in result.kinds}


def describe(result: AverageIndirectEffect, timing: dict | None) -> dict:
    """The numbers the doc page shows: peak per kind and category, the mid-layer MLP check."""
    band = lambda k, c: result.band[result.kinds.index(k), CATEGORIES.index(c)]  # noqa: E731
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
        "peaks": peaks(result),
        "mlp_check": mlp_check(result),
        "curves": by_kind_and_category(result, result.curve),
        "band95": by_kind_and_category(result, band),
        "seconds_per_fact": round(timing["seconds"] / timing["new"], 2) if timing and timing.get("new") else None,
    }


def markdown_table(results: dict[str, AverageIndirectEffect]) -> str:
    """Peak AIE per run, kind and category: the table docs/aie.md shows."""
    lines = ["| run | kind | category | n | peak layer | peak AIE ± 95% |", "|---|---|---|---|---|---|"]
    for piece, result in results.items():
        for key, p in peaks(result).items():
            kind, category = key.split("/")
            lines.append(f"| {piece} | {kind} | {category} | {p['n']} | {p['layer']} | "
                         f"{p['aie']:.3f} ± {p['band95']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=DATA)
    # One record per piece of its facts and seconds so far, whatever the run's flags.
    timings = run.cache({"record": "seconds per piece"})
    if run.args.piece:
        run_piece(run.args.piece, QUICK_BUDGET if run.quick else run.args.budget, timings)
    if run.args.write:
        write(run, timings)


if __name__ == "__main__":
    main()
