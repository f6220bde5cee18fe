"""Average indirect effect of causal tracing over the shipped fact set (ROME Fig. 2 / Fig. 3,
Zhang & Nanda 2024), on SmolLM2-135M and Gemma 3 270M. Resumable: each fact's trace is cached.

    python benchmarks/aie.py --piece smollm2-str --budget 420   # trace for at most ~7 min, exit
    python benchmarks/aie.py --piece gemma3-str --budget 420    # (repeat until it says complete)
    python benchmarks/aie.py --piece smollm2-gaussian --budget 420
    python benchmarks/aie.py --piece smollm2-sever --budget 420
    python benchmarks/aie.py --piece smollm2-str-w1 --budget 420 --threads 1   # issue 37's windows:
    #   1 and max(1, round(0.2 x depth)), MLP and attention only; also gemma3-str-w1,
    #   smollm2-str-w0.2, gemma3-str-w0.2, smollm2-gaussian-w0.2, smollm2-gaussian-w1
    python benchmarks/aie.py --write      # all pieces complete: docs/data/aie.json + docs/img/aie_*.png

Each piece prints its seconds per new fact (wall-clock, on the shared 2-core CPU); the seconds
and facts of every piece's runs add up in the harness's cache, and --write records them per fact.
The traces themselves are cached by ``trace_facts`` (under the lmsci-mi cache root, in a folder
keyed by the trace config, window and kinds included, so no piece reuses another's traces); --write
keeps, with its provenance, the entry of any piece this machine holds no traces of. --quick with
--piece traces for 30 s at most; with --write it writes under out/quick/ (figures beside it).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import harness
import torch
from doc_tables.schemas.circuits import (
    AIEData,
    AIELocalisation,
    AIEMLPCheck,
    AIEPeak,
    AIEPoint,
    AIERun,
)

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
from lmsci_mi.viz.plots import save_figure

DATA = harness.DATA / "aie.json"
IMG = harness.ROOT / "docs" / "img"


@dataclass(frozen=True)
class Piece:
    """One run of the benchmark: a model, a corruption, the facts and the restored kinds."""

    model: str
    corruption: str
    samples: int
    n_facts: int | None
    """Facts planned: the first this many known (and paired) ones; None: all. Gaussian noise's σ
    is taken over the planned facts, so a piece cut by ``cap`` keeps its uncut piece's σ."""
    kinds: tuple[str, ...]
    window: float = 10
    """Layers restored together for mlp/attn: an integer, or a fraction of the model's depth."""
    cap: int | None = None
    """Trace only the first this many planned facts (the compute budget); None: all of them."""


FIFTH = 0.2
"""The short window: ``max(1, round(0.2 × n_layers))`` layers (SmolLM2's 30 → 6, Gemma 3's 18 → 4)."""
GAUSSIAN_CAP = 20
"""Facts of the 30 planned that the Gaussian window pieces trace (the first ones, both windows
alike; σ stays the 30 facts' σ): what issue 37's ~100 minutes of tracing left after the four STR
pieces, at the Gaussian pieces' measured 30–40 s per fact (one thread, shared machine)."""
MLP_ATTN = ("mlp", "attn")
"""The new windows' kinds: restoring the stream (``resid``) does not depend on the window."""

PIECES: dict[str, Piece] = {
    "smollm2-str": Piece("smollm2-135m", "str", 1, None, TRACE_KINDS),
    "gemma3-str": Piece("gemma3-270m", "str", 1, None, TRACE_KINDS),
    "smollm2-gaussian": Piece("smollm2-135m", "gaussian", 5, 30, TRACE_KINDS),
    "smollm2-sever": Piece("smollm2-135m", "str", 1, 30, ("resid", *SEVERED_KINDS)),
    # Issue 37: single layers, and a window near a fifth of depth, in the order they were run.
    "smollm2-str-w1": Piece("smollm2-135m", "str", 1, None, MLP_ATTN, window=1),
    "gemma3-str-w1": Piece("gemma3-270m", "str", 1, None, MLP_ATTN, window=1),
    "smollm2-str-w0.2": Piece("smollm2-135m", "str", 1, None, MLP_ATTN, window=FIFTH),
    "gemma3-str-w0.2": Piece("gemma3-270m", "str", 1, None, MLP_ATTN, window=FIFTH),
    "smollm2-gaussian-w0.2": Piece("smollm2-135m", "gaussian", 5, 30, MLP_ATTN, window=FIFTH,
                                   cap=GAUSSIAN_CAP),
    "smollm2-gaussian-w1": Piece("smollm2-135m", "gaussian", 5, 30, MLP_ATTN, window=1,
                                 cap=GAUSSIAN_CAP),
}
QUICK_BUDGET = 30.0


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--piece", choices=sorted(PIECES))
    parser.add_argument("--budget", type=float, default=420.0, help="seconds of new tracing per run")
    parser.add_argument("--write", action="store_true")


def window_of(piece: Piece, n_layers: int) -> int:
    """The piece's mlp/attn window in layers: its integer, or its fraction of ``n_layers``."""
    w = piece.window
    return int(w) if w >= 1 else max(1, round(w * n_layers))


def config_of(piece: str, n_layers: int) -> AIEConfig:
    p = PIECES[piece]
    trace = TraceConfig(corruption=p.corruption, n_samples=p.samples, kinds=p.kinds,
                        window=window_of(p, n_layers))
    return AIEConfig(n_facts=p.n_facts, trace=trace)


def run_piece(piece: str, budget: float, timings: harness.ItemCache) -> None:
    """Trace the piece's facts for at most ``budget`` seconds (and at most its ``cap``); add the
    new facts and their seconds to the piece's running record."""
    lm, cap = load_model(PIECES[piece].model), PIECES[piece].cap
    cfg, facts = config_of(piece, lm.cfg.n_layers), load_facts("facts")
    before = time.perf_counter()
    max_new = None
    if cap is not None:  # the traces cached so far (the same plan), then only up to the cap
        max_new = max(0, cap - len(trace_facts(lm, facts, cfg, max_new=0).traces))
    done = trace_facts(lm, facts, cfg, budget_s=budget, max_new=max_new)
    seconds = time.perf_counter() - before
    record = timings.load(piece, {"done": 0, "seconds": 0.0, "new": 0})
    new = len(done.traces) - record["done"]
    if new > 0:
        timings.save(piece, {"done": len(done.traces), "seconds": record["seconds"] + seconds,
                             "new": record["new"] + new, "threads": torch.get_num_threads()})
    per = seconds / new if new > 0 else float("nan")
    target = len(done.facts) if cap is None else min(cap, len(done.facts))
    print(
        f"{piece} (window {cfg.trace.window}): {len(done.traces)}/{target} facts traced "
        f"({new} new, {per:.1f} s each, {seconds:.0f} s incl. setup); known {done.n_known} of "
        f"{done.n_candidates}, {done.n_unpaired} without an STR partner; "
        f"{'complete' if len(done.traces) >= target else 'INCOMPLETE'}"
    )


def written_piece(piece: str, timing: dict | None, img: Path) -> tuple[AverageIndirectEffect, AIERun] | None:
    """The piece's AIE from its cached traces (none traced: None), plotted into ``img``."""
    lm, cap = load_model(PIECES[piece].model), PIECES[piece].cap
    cfg = config_of(piece, lm.cfg.n_layers)
    done = trace_facts(lm, load_facts("facts"), cfg, max_new=0)
    traces = done.traces[:cap]
    if not traces:
        print(f"{piece}: nothing traced yet, skipped (run its pieces first)")
        return None
    target = len(done.facts) if cap is None else min(cap, len(done.facts))
    if len(traces) < target:
        # Published as partial, with its n: the deadline came before every piece finished.
        print(f"{piece}: PARTIAL, {len(traces)}/{target} facts traced")
    result = aggregate_traces(
        traces, n_candidates=done.n_candidates, n_known=done.n_known, n_unpaired=done.n_unpaired
    )
    print(result.summary())
    result.plot(img / f"aie_{piece}.png")
    run = AIERun(**describe(result, timing), n_samples=cfg.trace.n_samples,
                 complete=len(traces) >= target, n_planned=len(done.facts))
    if PIECES[piece].window < 1:
        run["window_rule"] = f"max(1, round({PIECES[piece].window} × {lm.cfg.n_layers} layers))"
    if cap is not None:
        run["n_cap"] = cap
    run["threads"] = (timing or {}).get("threads")
    return result, run


def write(run: harness.Run, timings: harness.ItemCache) -> None:
    """Every piece traced here into the data file; a piece whose traces this machine's cache
    lacks keeps the entry (and the provenance) the file already has."""
    img = IMG if run.out == DATA else run.out.parent
    before = harness.read_json(run.out, {})
    data = AIEData(categories=list(CATEGORIES))
    provenance = dict(before.get("run_provenance", {}))
    results = {}
    for piece in PIECES:
        written = written_piece(piece, timings.load(piece), img)
        if written is not None:
            results[piece], data[piece] = written  # type: ignore[literal-required]
            provenance[piece] = run.provenance()
        elif piece in before:
            print(f"{piece}: kept from {run.out.name} (no traces cached here)")
            data[piece] = before[piece]  # type: ignore[literal-required]
            provenance.setdefault(piece, before.get("provenance"))
    for piece in PIECES:
        if piece in data and (where := localisation(data[piece])) is not None:  # type: ignore[literal-required]
            data[piece]["localisation"] = where  # type: ignore[literal-required]
    data["run_provenance"] = provenance
    for group, pieces in window_groups(data).items():
        if len(pieces) > 1:
            plot_windows(data, pieces, img / f"aie_windows_{group.replace('/', '_')}.png")
    print(markdown_table(results))
    if "smollm2-sever" in results:
        results["smollm2-sever"].plot_severing(img / "aie_smollm2-sever_fig3.png")
    run.write(data)


def window_groups(data: AIEData) -> dict[str, list[str]]:
    """The runs restoring mlp and attn, grouped by model and corruption ("smollm2-135m/str"),
    widest window first."""
    groups: dict[str, list[str]] = {}
    for piece in PIECES:
        run = data.get(piece)
        if isinstance(run, dict) and {"mlp", "attn"} <= set(run["kinds"]):
            groups.setdefault(f"{run['model']}/{run['corruption']}", []).append(piece)
    return {k: sorted(v, key=lambda p: -data[p]["window"]) for k, v in groups.items()}  # type: ignore[literal-required]


def plot_windows(data: AIEData, pieces: list[str], path: Path) -> None:
    """One model and corruption at every window: the MLP at the last subject token and attention
    at the last token, per window centre, with 95 % bands."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.2))
    axes = fig.subplots(1, 2)
    for ax, (kind, category, name) in zip(
        axes, [("mlp", "last subject", "MLP, last subject token"), ("attn", "last token", "attention, last token")],
        strict=True,
    ):
        for piece in pieces:
            run = data[piece]  # type: ignore[literal-required]
            mean, band = run["curves"][kind][category], run["band95"][kind][category]
            layers = range(len(mean))
            ax.plot(layers, mean, lw=1.6, label=f"window {run['window']} (n={run['n_facts']})")
            ax.fill_between(layers, [m - b for m, b in zip(mean, band, strict=True)],
                            [m + b for m, b in zip(mean, band, strict=True)], alpha=0.18)
        ax.set_title(f"restoring {name}", fontsize=10)
        ax.set_xlabel("window centre layer (window 1: the layer)")
        ax.axhline(0, color="grey", lw=0.6)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    run = data[pieces[0]]  # type: ignore[literal-required]
    unit = "logit diff" if run["metric"] == "logit_diff" else "p(target)"
    axes[0].set_ylabel(f"average indirect effect ({unit})")
    fig.suptitle(f"{run['model']}, {run['corruption']}: AIE by window (bands: 95 %)", fontsize=11)
    fig.tight_layout()
    save_figure(fig, path)


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
        # The middle third, as ``localisation``'s rule (runs written before 2026-11-28 used
        # n_layers // 6 to 5 · n_layers // 6; every one of them reads False under either).
        mid_layer=n_layers // 3 <= layer <= (2 * n_layers) // 3 and layer - result.window // 2 > 0,
        peak_over_last_token_mlp_at_that_layer=round(float(subject[layer] - last[layer]), 4),
    )


BUMP_RULE = (
    "a mid-layer MLP peak: the largest value among the middle third of the layers "
    "(n_layers // 3 to 2 · n_layers // 3) exceeds the largest value before them by more than the "
    "two 95 % half-bands added, so the curve rises in the middle layers above every earlier one "
    "(the shape of ROME's Fig. 2)"
)


def point(run: AIERun, kind: str, category: str, layer: int) -> AIEPoint:
    """The run's ``kind`` curve at ``category`` and window centre ``layer``, with the window's span."""
    window, n_layers = run["window"], len(run["curves"][kind][category])
    value = run["curves"][kind][category][layer]
    gap = run["clean_mean"] - run["corrupted_mean"]
    first, last = max(0, layer - window // 2), min(n_layers, layer - (-window // 2)) - 1
    return AIEPoint(layer=layer, layers=[first, last], aie=value,
                    band95=run["band95"][kind][category][layer], of_gap=round(value / gap, 4))


def localisation(run: AIERun) -> AIELocalisation | None:
    """Where the run's MLP (last subject) and attention (last token) effects sit, read from its
    curves alike for every window; None for a run without both kinds."""
    if not {"mlp", "attn"} <= set(run["kinds"]):
        return None
    mlp, attn = run["curves"]["mlp"]["last subject"], run["curves"]["attn"]["last token"]
    n_layers, window = len(mlp), run["window"]
    at = lambda curve, layers: max(layers, key=lambda i: curve[i])  # noqa: E731
    middle = range(n_layers // 3, (2 * n_layers) // 3 + 1)
    # A window leaves layer 0 out once its first layer, centre − window // 2, is above 0.
    peak, without_0 = at(mlp, range(n_layers)), at(mlp, range(window // 2 + 1, n_layers))
    mid = point(run, "mlp", "last subject", at(mlp, middle))
    before = point(run, "mlp", "last subject", at(mlp, range(middle[0])))
    top = at(attn, range(n_layers))
    half = next(i for i in range(n_layers) if attn[i] >= attn[top] / 2)
    return AIELocalisation(
        gap=round(run["clean_mean"] - run["corrupted_mean"], 4),
        mlp_peak=point(run, "mlp", "last subject", peak),
        mlp_peak_without_layer_0=point(run, "mlp", "last subject", without_0),
        mlp_middle_max=mid,
        mlp_before_middle=before,
        mlp_middle_bump=mid["aie"] - before["aie"] > mid["band95"] + before["band95"],
        middle=[middle[0], middle[-1]],
        attn_peak=point(run, "attn", "last token", top),
        attn_half=point(run, "attn", "last token", half),
        rule=BUMP_RULE,
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
