"""Which layer should ROME edit on SmolLM2-135M? A layer sweep (issue 21, item 6).

    PYTHONPATH=. .venv/bin/python benchmarks/rome_layers.py            # resumable: run until "done"
    PYTHONPATH=. .venv/bin/python benchmarks/rome_layers.py --max-seconds 600
    PYTHONPATH=. python benchmarks/rome_layers.py --quick --model toy-2l   # a check

ROME edits each of 10 facts (spread over the shipped fact set's relations) alone at layers
0, 2, …, 14 and measures ES, PS, NS and GE (50 tokens) per edit, restoring the weights between
edits. Hase et al. (2023) found that where causal tracing peaks does not predict where an edit
works; this measures the edit itself. Each (layer, fact) evaluation is kept in the harness's
per-item cache, so an interrupted run continues where it stopped; when all are done it writes
docs/data/rome_layers.json (per layer: the means with bootstrap 95% intervals over facts) and
docs/img/rome_layers.png (beside --out when --out is elsewhere). --quick edits 2 facts at the
model's first two layers with 4 fit steps and 5 tokens of GE.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import harness
from doc_tables.editing import rome_layers as render
from doc_tables.schemas.editing import RomeLayer, RomeLayersData

from lmsci_mi import LensModel, load_model
from lmsci_mi.editing import (
    EditEvaluation,
    EditRequest,
    EvaluationConfig,
    KeyStatistics,
    ROMEConfig,
    StatsConfig,
    evaluate_edits,
    key_statistics,
    load_facts,
)

FIGURE = harness.ROOT / "docs" / "img" / "rome_layers.png"
SHOWN = ("S", "ES", "PS", "NS", "GE")
QUICK_FIT = {"steps": 4, "n_contexts": 2}
"""--quick's fit: a check of the script, not of the method."""
QUICK_STATS_TOKENS = 2_048
QUICK_GE_TOKENS = 5


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=int, nargs="+", default=list(range(0, 15, 2)))
    parser.add_argument("--facts", type=int, default=10, help="facts spread over the shipped set")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="start no edit after this many seconds (run again to resume)")
    parser.add_argument("--model", default="smollm2-135m")


def spread(n_total: int, n: int) -> list[int]:
    """``n`` indices spread evenly over ``range(n_total)`` (every relation gets its share)."""
    return sorted({round(i * n_total / n) for i in range(n)})


def summarise(model: str, parts: dict[int, list[EditEvaluation]], facts: list[str], stats_tokens: int,
              generation_tokens: int) -> RomeLayersData:
    """Per layer: every shown metric over the facts, its interval, and the unedited model's."""
    rows: dict[str, RomeLayer] = {}
    for layer, evaluations in sorted(parts.items()):
        ev = EditEvaluation.combine(evaluations)
        rows[str(layer)] = RomeLayer(  # the metric keys are built
            n_facts=len(ev.subjects),
            seconds_per_edit=ev.seconds_per_edit,
            **{name: ev.metric(name) for name in SHOWN},
            **{f"{name}_ci": ev.interval(name) for name in SHOWN},
            unedited={name: ev.metric(name, edited=False) for name in SHOWN},
        )
    best = max(rows, key=lambda layer: rows[layer]["S"])
    return RomeLayersData(
        model=model, facts=facts, stats_tokens=stats_tokens,
        generation_tokens=generation_tokens,
        interval="percentile bootstrap over facts, 2000 resamples, 95%",
        best_layer_by_S=int(best), layers=rows,
    )


def plot(data: RomeLayersData, path: Path) -> None:
    """The metrics against the edited layer with their bands, and GE beside the unedited GE."""
    from matplotlib.figure import Figure

    layers = [int(layer) for layer in data["layers"]]
    rows = [data["layers"][str(layer)] for layer in layers]
    fig = Figure(figsize=(8, 3.4))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for name, color in zip(("S", "ES", "PS", "NS"), ("black", "tab:blue", "tab:green", "tab:red"), strict=True):
        left.plot(layers, [r[name] for r in rows], marker="o", color=color, label=name)
        bands = [r[f"{name}_ci"] for r in rows]
        left.fill_between(layers, [b[0] for b in bands], [b[1] for b in bands], color=color, alpha=0.12)
    left.set_ylabel("% of prompts (S: harmonic mean)")
    left.legend(fontsize=8, ncol=4)
    right.plot(layers, [r["GE"] for r in rows], marker="o", color="tab:purple", label="edited")
    right.axhline(rows[0]["unedited"]["GE"], color="grey", ls="--", label="unedited")
    right.set_ylabel("generation entropy GE")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xlabel("edited MLP layer")
        ax.set_xticks(layers)
        ax.grid(alpha=0.3)
    fig.suptitle(f"ROME on {data['model']}, one edit at a time, {rows[0]['n_facts']} facts per layer "
                 "(95% bootstrap bands)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def evaluated(cache: harness.ItemCache, lm: LensModel, layer: int, index: int, fact: EditRequest,
              hp: ROMEConfig, stats: KeyStatistics, evaluation: EvaluationConfig) -> EditEvaluation:
    """One fact edited alone at one layer, from the cache or computed and cached."""
    path = cache.path(f"layer{layer:02d}-fact{index:03d}")
    if path.is_file():
        return EditEvaluation.load(path)
    ev = evaluate_edits(lm, [fact], hp.replace(layer=layer), stats=stats, evaluation=evaluation)
    ev.save(path)
    print(f"layer {layer} fact {index} ({fact.subject}): ES {ev.metric('ES'):.0f} PS {ev.metric('PS'):.0f} "
          f"NS {ev.metric('NS'):.0f} GE {ev.metric('GE'):.0f} {ev.seconds_per_edit:.1f} s", flush=True)
    return ev


def figure_path(run: harness.Run) -> Path:
    """docs/img/ for the docs' data file, else beside --out."""
    return FIGURE if run.out == harness.DATA / "rome_layers.json" else run.out.with_suffix(".png")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    with run.timed("load"):
        lm = load_model(args.model)
    layers = list(range(min(2, lm.cfg.n_layers))) if run.quick else args.layers
    every = load_facts()
    chosen = spread(len(every), 2 if run.quick else args.facts)
    hp = ROMEConfig(**(QUICK_FIT if run.quick else {}))
    evaluation = EvaluationConfig(**({"generation_tokens": QUICK_GE_TOKENS} if run.quick else {}))
    with run.timed("statistics"):
        stats = key_statistics(lm, layers, StatsConfig(n_tokens=QUICK_STATS_TOKENS if run.quick else hp.stats_tokens))
    cache = run.cache({"model": args.model, "quick": run.quick})  # every item names its layer and fact
    deadline = time.perf_counter() + args.max_seconds
    parts: dict[int, list[EditEvaluation]] = {}
    for layer in layers:
        for i in chosen:
            if f"layer{layer:02d}-fact{i:03d}" not in cache and time.perf_counter() > deadline:
                print("stopped at --max-seconds: run again to resume")
                return
            with run.timed("edits"):
                parts.setdefault(layer, []).append(
                    evaluated(cache, lm, layer, i, every[i], hp, stats, evaluation))
    data = summarise(args.model, parts, [every[i].subject for i in chosen], stats.n_tokens,
                     evaluation.generation_tokens)
    run.write(data)
    plot(data, figure_path(run))
    print(render(data))
    print(f"best layer by S: {data['best_layer_by_S']}; done")


if __name__ == "__main__":
    main()
