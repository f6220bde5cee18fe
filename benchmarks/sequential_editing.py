"""Sequential editing on SmolLM2-135M: ROME, MEMIT and AlphaEdit over 200 edits (issue 21).

    PYTHONPATH=. .venv/bin/python benchmarks/sequential_editing.py        # resumable: run until "done"
    PYTHONPATH=. .venv/bin/python benchmarks/sequential_editing.py --methods alphaedit memit

200 facts of the shipped editing fact set, in a seeded random order, are edited one batch after
another without restoring: ROME one fact per edit, MEMIT and AlphaEdit 10 per edit. Every 20
edits an ``EditingSession`` measures ES and PS retained over all facts edited so far,
NS on neighbourhood prompts whose subjects are never edited, specificity (top-1 kept) against
the original model's answers, and GE (50 tokens from every fact's rewrite prompt). Step 0 is the
unedited model. The session is saved after every 20 edits in --cache and resumed from there, so an
interrupted run continues. When every method is done it writes docs/data/sequential_editing.json
and docs/img/sequential_editing.png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.editing import (
    AlphaEditHyperParams,
    EditingSession,
    MEMITHyperParams,
    ROMEHyperParams,
    SessionConfig,
    SessionResult,
    default_memit_layers,
    default_rome_layer,
    key_statistics,
    load_edit_facts,
)
from lmsci_mi.editing.stats import StatsConfig

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "data" / "sequential_editing.json"
FIGURE = ROOT / "docs" / "img" / "sequential_editing.png"
METHODS = {
    "rome": (ROMEHyperParams(), 1),
    "memit": (MEMITHyperParams(), 10),
    "alphaedit": (AlphaEditHyperParams(), 10),
}


def run_method(lm, name: str, facts: list, args: argparse.Namespace, stats, deadline: float) -> SessionResult | None:
    config, batch = METHODS[name]
    session_config = SessionConfig(batch_size=batch)
    folder = Path(args.cache) / name
    if (folder / "session.json").exists():
        session = EditingSession.resume(lm, folder, config, session_config, stats=stats)
    else:
        session = EditingSession(lm, config, session_config, stats=stats)
    try:
        while len(session.order) < len(facts):
            if time.perf_counter() > deadline:
                return None
            done = len(session.order)
            result = session.run(facts[done : done + args.every])
            session.save(folder)
            row = dict(zip(result.labels[1], result.values[-1].tolist(), strict=True))
            print(f"{name}: {result.n_edited[-1]} edits, {result.seconds[-1]:.0f} s of edits: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
        return session.result()
    finally:
        session.restore()


def plot(curves: dict[str, dict]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 6.4))
    axes = fig.subplots(2, 3).ravel()
    colors = {"rome": "tab:orange", "memit": "tab:blue", "alphaedit": "tab:green"}
    for ax, name in zip(axes, ("ES", "PS", "NS", "specificity", "GE"), strict=False):
        for method, curve in curves.items():
            # One binomial standard error (no error bar for GE, a mean of entropies).
            ax.errorbar(curve["n_edited"], curve["metrics"][name], yerr=curve.get("se", {}).get(name),
                        marker="o", ms=3, capsize=2, color=colors[method],
                        label=f"{method} (b={curve['batch_size']})")
        ax.set_title(name + (" (retained, edited facts so far)" if name in ("ES", "PS") else "")
                     + (" ± s.e." if name != "GE" else ""), fontsize=9)
        ax.set_xlabel("edits applied", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[-1].axis("off")
    n = max(curve["n_edited"][-1] for curve in curves.values())
    fig.suptitle(f"Sequential editing on SmolLM2-135M: {n} facts, never restored (step 0 = unedited)", fontsize=10)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="+", default=["alphaedit", "memit", "rome"], choices=sorted(METHODS))
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--every", type=int, default=20, help="evaluate (and save) every N edits")
    parser.add_argument("--seed", type=int, default=0, help="order of the facts")
    parser.add_argument("--cache", default="out/sequential")
    parser.add_argument("--max-seconds", type=float, default=float("inf"))
    parser.add_argument("--partial", action="store_true",
                        help="write the data and plot from the steps saved so far (no model run)")
    args = parser.parse_args()
    if args.partial:
        write(partial_curves(args), args, stats_tokens=None, n_facts=args.edits)
        return
    deadline = time.perf_counter() + args.max_seconds
    lm = load_model("smollm2-135m")
    facts = load_edit_facts()
    random.Random(args.seed).shuffle(facts)
    facts = facts[: args.edits]
    layers = sorted({default_rome_layer(lm), *default_memit_layers(lm)})
    stats = key_statistics(lm, layers, StatsConfig(n_tokens=ROMEHyperParams().stats_tokens))
    curves = {}
    for name in args.methods:
        result = run_method(lm, name, facts, args, stats, deadline)
        if result is None:
            print("stopped at --max-seconds: run again to resume")
            return
        result.save(Path(args.cache) / f"{name}_result.json")
        curves[name] = {
            "batch_size": result.batch_size,
            "n_edited": list(result.n_edited),
            "seconds": list(result.seconds),
            "metrics": {m: result.metric(m) for m in result.labels[1]},
            "config": METHODS[name][0].params(),
        }
    write(curves, args, stats_tokens=stats.n_tokens, n_facts=len(facts))
    print("done")


def partial_curves(args: argparse.Namespace) -> dict[str, dict]:
    """The curves of the sessions saved in --cache so far (a run stopped before the end)."""
    curves = {}
    for name in args.methods:
        path = Path(args.cache) / name / "session.json"
        if not path.exists():
            continue
        state = json.loads(path.read_text())
        names = ("ES", "PS", "NS", "specificity", "GE")
        curves[name] = {
            "batch_size": state["session"]["batch_size"],
            "n_edited": [n for n, _, _ in state["steps"]],
            "seconds": [t for _, t, _ in state["steps"]],
            "metrics": {m: [row[i] for _, _, row in state["steps"]] for i, m in enumerate(names)},
            "config": state["config"],
            "complete": state["n_edits"] * state["session"]["batch_size"] >= args.edits,
        }
    return curves


def add_errors(curves: dict[str, dict], facts: list) -> None:
    """Per step, how many prompts each metric counts and its binomial standard error (percent
    points): ES over the facts edited so far, PS over their paraphrases, NS and specificity over
    the never-edited neighbour prompts of the first 20 facts (the session's fixed set)."""
    first = facts[:20]
    subjects = {r.subject for r in first}
    n_neighbours = sum(
        1 for r in first for p in r.neighborhood_prompts if r.target_true and not any(s in p for s in subjects)
    )
    for curve in curves.values():
        counts = {"ES": [], "PS": [], "NS": [], "specificity": []}
        for n in curve["n_edited"]:
            edited = facts[:n] if n else first  # step 0: the first run call's facts
            counts["ES"].append(len(edited))
            counts["PS"].append(sum(len(r.paraphrase_prompts) for r in edited))
            counts["NS"].append(n_neighbours)
            counts["specificity"].append(n_neighbours)
        curve["n"] = counts
        curve["se"] = {
            m: [(p * (100 - p) / k) ** 0.5 if k else float("nan") for p, k in zip(curve["metrics"][m], ks, strict=True)]
            for m, ks in counts.items()
        }


def write(curves: dict[str, dict], args: argparse.Namespace, *, stats_tokens: int | None, n_facts: int) -> None:
    facts = load_edit_facts()
    random.Random(args.seed).shuffle(facts)
    add_errors(curves, facts)
    data = {
        "model": "smollm2-135m",
        "n_facts": n_facts,
        "order_seed": args.seed,
        "every": args.every,
        "stats_tokens": stats_tokens,
        "metrics": "percent; ES/PS over the facts edited so far, NS and specificity over never-edited "
                   "neighbourhood prompts (specificity: the original model's top-1 kept), GE of 50 tokens; "
                   "n: prompts counted per step; se: binomial standard error in points",
        "methods": curves,
    }
    OUT.write_text(json.dumps(data, indent=1))
    plot(curves)


if __name__ == "__main__":
    main()
