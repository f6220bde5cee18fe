"""Which layer should ROME edit on SmolLM2-135M? A layer sweep (issue 21, item 6).

    PYTHONPATH=. .venv/bin/python benchmarks/rome_layers.py            # resumable: run until "done"
    PYTHONPATH=. .venv/bin/python benchmarks/rome_layers.py --max-seconds 600

ROME edits each of 10 facts (spread over the shipped fact set's relations) alone at layers
0, 2, …, 14 and measures ES, PS, NS and GE (50 tokens) per edit, restoring the weights between
edits. Hase et al. (2023) found that where causal tracing peaks does not predict where an edit
works; this measures the edit itself. Each (layer, fact) evaluation is cached in ``--cache``, so an
interrupted run continues where it stopped; when all are done it writes
``docs/data/rome_layers.json`` (per layer: the means with bootstrap 95% intervals over facts) and
``docs/img/rome_layers.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.editing import (
    EditEvaluation,
    EvaluationConfig,
    ROMEHyperParams,
    evaluate_edits,
    key_statistics,
    load_facts,
)
from lmsci_mi.editing.stats import StatsConfig

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "data" / "rome_layers.json"
FIGURE = ROOT / "docs" / "img" / "rome_layers.png"
SHOWN = ("S", "ES", "PS", "NS", "GE")


def spread(n_total: int, n: int) -> list[int]:
    """``n`` indices spread evenly over ``range(n_total)`` (every relation gets its share)."""
    return sorted({round(i * n_total / n) for i in range(n)})


def summarise(parts: dict[int, list[EditEvaluation]], facts: list[str], stats_tokens: int) -> dict:
    rows = {}
    for layer, evaluations in sorted(parts.items()):
        ev = EditEvaluation.combine(evaluations)
        rows[str(layer)] = {
            "n_facts": len(ev.subjects),
            "seconds_per_edit": ev.seconds_per_edit,
            **{name: ev.metric(name) for name in SHOWN},
            **{f"{name}_ci": ev.interval(name) for name in SHOWN},
            "unedited": {name: ev.metric(name, edited=False) for name in SHOWN},
        }
    best = max(rows, key=lambda layer: rows[layer]["S"])
    return {
        "model": "smollm2-135m",
        "facts": facts,
        "stats_tokens": stats_tokens,
        "generation_tokens": EvaluationConfig().generation_tokens,
        "interval": "percentile bootstrap over facts, 2000 resamples, 95%",
        "best_layer_by_S": int(best),
        "layers": rows,
    }


def plot(data: dict) -> None:
    from matplotlib.figure import Figure

    layers = [int(layer) for layer in data["layers"]]
    fig = Figure(figsize=(8, 3.4))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for name, color in zip(("S", "ES", "PS", "NS"), ("black", "tab:blue", "tab:green", "tab:red"), strict=True):
        values = [data["layers"][str(layer)][name] for layer in layers]
        low = [data["layers"][str(layer)][f"{name}_ci"][0] for layer in layers]
        high = [data["layers"][str(layer)][f"{name}_ci"][1] for layer in layers]
        left.plot(layers, values, marker="o", color=color, label=name)
        left.fill_between(layers, low, high, color=color, alpha=0.12)
    left.set_xlabel("edited MLP layer")
    left.set_ylabel("% of prompts (S: harmonic mean)")
    left.set_xticks(layers)
    left.legend(fontsize=8, ncol=4)
    left.grid(alpha=0.3)
    ge = [data["layers"][str(layer)]["GE"] for layer in layers]
    right.plot(layers, ge, marker="o", color="tab:purple", label="edited")
    right.axhline(data["layers"][str(layers[0])]["unedited"]["GE"], color="grey", ls="--", label="unedited")
    right.set_xlabel("edited MLP layer")
    right.set_ylabel("generation entropy GE")
    right.set_xticks(layers)
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    n = data["layers"][str(layers[0])]["n_facts"]
    fig.suptitle(f"ROME on SmolLM2-135M, one edit at a time, {n} facts per layer (95% bootstrap bands)", fontsize=10)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=list(range(0, 15, 2)))
    parser.add_argument("--facts", type=int, default=10, help="facts spread over the shipped set")
    parser.add_argument("--cache", default="out/rome_layers")
    parser.add_argument("--max-seconds", type=float, default=float("inf"))
    args = parser.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    lm = load_model("smollm2-135m")
    every = load_facts()
    chosen = spread(len(every), args.facts)
    facts = [every[i] for i in chosen]
    stats = key_statistics(lm, args.layers, StatsConfig(n_tokens=ROMEHyperParams().stats_tokens))
    start = time.perf_counter()
    parts: dict[int, list[EditEvaluation]] = {}
    complete = True
    for layer in args.layers:
        for i, fact in zip(chosen, facts, strict=True):
            path = cache / f"layer{layer:02d}_fact{i:03d}.json"
            if not path.exists():
                if time.perf_counter() - start > args.max_seconds:
                    complete = False
                    continue
                ev = evaluate_edits(lm, [fact], ROMEHyperParams(layer=layer), stats=stats)
                ev.save(path)
                print(f"layer {layer} fact {i} ({fact.subject}): ES {ev.metric('ES'):.0f} "
                      f"PS {ev.metric('PS'):.0f} NS {ev.metric('NS'):.0f} GE {ev.metric('GE'):.0f} "
                      f"{ev.seconds_per_edit:.1f} s", flush=True)
            parts.setdefault(layer, []).append(EditEvaluation.load(path))
    if not complete:
        print("stopped at --max-seconds: run again to resume")
        return
    data = summarise(parts, [f.subject for f in facts], stats.n_tokens)
    OUT.write_text(json.dumps(data, indent=1))
    plot(data)
    print(f"| layer | n | {' | '.join(SHOWN)} | s/edit |\n|---|---|{'---|' * len(SHOWN)}---|")
    for layer, row in data["layers"].items():
        cells = " | ".join(
            f"{row[name]:.1f} [{row[f'{name}_ci'][0]:.1f}, {row[f'{name}_ci'][1]:.1f}]" for name in SHOWN
        )
        print(f"| {layer} | {row['n_facts']} | {cells} | {row['seconds_per_edit']:.1f} |")
    print(f"best layer by S: {data['best_layer_by_S']}; done")


if __name__ == "__main__":
    main()
