"""Sequential editing on SmolLM2-135M: ROME, MEMIT and AlphaEdit over 200 edits (issue 21).

    PYTHONPATH=. .venv/bin/python benchmarks/sequential_editing.py        # resumable: run until "done"
    PYTHONPATH=. .venv/bin/python benchmarks/sequential_editing.py --methods alphaedit memit
    PYTHONPATH=. python benchmarks/sequential_editing.py --quick --model toy-2l   # a check

200 facts of the shipped editing fact set, in a seeded random order, are edited one batch after
another without restoring: ROME one fact per edit, MEMIT and AlphaEdit 10 per edit. Every 20
edits an ``EditingSession`` measures ES and PS retained over all facts edited so far,
NS on neighbourhood prompts whose subjects are never edited, specificity (top-1 kept) against
the original model's answers, and GE (50 tokens from every fact's rewrite prompt). Step 0 is the
unedited model. Each method's session is saved after every 20 edits in the harness's per-item
cache and resumed from there, so an interrupted run continues. When every method is done it writes
docs/data/sequential_editing.json and docs/img/sequential_editing.png (beside --out when --out is
elsewhere). --partial writes them from the steps saved so far, without the model. --quick edits 4
facts, evaluated every 2, batches of 2, with 4 fit steps and 5 tokens of GE.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import harness
from doc_tables.schemas.editing import SequentialCurve, SequentialEditingData

from lmsci_mi import LensModel, load_model
from lmsci_mi.config import Config
from lmsci_mi.editing import (
    AlphaEditHyperParams,
    EditingSession,
    EditRequest,
    EvaluationConfig,
    KeyStatistics,
    MEMITHyperParams,
    ROMEHyperParams,
    SessionConfig,
    SessionResult,
    StatsConfig,
    default_memit_layers,
    default_rome_layer,
    key_statistics,
    load_facts,
)
from lmsci_mi.stats import binomial_standard_error

FIGURE = harness.ROOT / "docs" / "img" / "sequential_editing.png"
METHODS: dict[str, tuple[Config, int]] = {
    "rome": (ROMEHyperParams(), 1),
    "memit": (MEMITHyperParams(), 10),
    "alphaedit": (AlphaEditHyperParams(), 10),
}
"""Each method's config and facts per edit."""
METRICS = ("ES", "PS", "NS", "specificity", "GE")
COUNTED = ("ES", "PS", "NS", "specificity")
"""The percentages, whose prompts are counted for a binomial standard error (GE is a mean)."""
QUICK_FIT = {"steps": 4, "n_contexts": 2}
"""--quick's fit: a check of the script, not of the method."""
QUICK = {"edits": 4, "every": 2, "batch": 2, "stats_tokens": 2_048, "ge_tokens": 5}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--methods", nargs="+", default=["alphaedit", "memit", "rome"], choices=sorted(METHODS))
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--every", type=int, default=20, help="evaluate (and save) every N edits")
    parser.add_argument("--seed", type=int, default=0, help="order of the facts")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="start no edit after this many seconds (run again to resume)")
    parser.add_argument("--partial", action="store_true",
                        help="write the data and plot from the steps saved so far (no model run)")
    parser.add_argument("--model", default="smollm2-135m")


def session_for(run: harness.Run, lm: LensModel, name: str, stats: KeyStatistics,
                folder: Path) -> EditingSession:
    """The method's session: resumed from ``folder`` when one was saved there, else new."""
    config, batch = METHODS[name]
    evaluation = EvaluationConfig()
    if run.quick:
        config, batch = config.replace(**QUICK_FIT), min(batch, QUICK["batch"])
        evaluation = EvaluationConfig(generation_tokens=QUICK["ge_tokens"])
    session_config = SessionConfig(batch_size=batch, evaluation=evaluation)
    if (folder / "session.json").exists():
        return EditingSession.resume(lm, folder, config, session_config, stats=stats)
    return EditingSession(lm, config, session_config, stats=stats)


def run_method(session: EditingSession, name: str, facts: list[EditRequest], every: int,
               folder: Path, deadline: float) -> SessionResult | None:
    """Edit ``every`` facts at a time, evaluating and saving after each; None past the deadline."""
    try:
        while len(session.order) < len(facts):
            if time.perf_counter() > deadline:
                return None
            done = len(session.order)
            result = session.run(facts[done : done + every])
            session.save(folder)
            row = dict(zip(result.labels[1], result.values[-1].tolist(), strict=True))
            print(f"{name}: {result.n_edited[-1]} edits, {result.seconds[-1]:.0f} s of edits: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
        return session.result()
    finally:
        session.restore()


def curve(result: SessionResult, config: Config) -> SequentialCurve:
    """A finished session's steps; ``add_errors`` adds the counts and standard errors."""
    return SequentialCurve(batch_size=result.batch_size, n_edited=list(result.n_edited),
                           seconds=list(result.seconds),
                           metrics={m: result.metric(m) for m in result.labels[1]},
                           config=config.params(), n={}, se={})


def partial_curves(cache: harness.ItemCache, methods: list[str], edits: int) -> dict[str, SequentialCurve]:
    """The curves of the sessions saved so far (a run stopped before the end), from their files."""
    curves = {}
    for name in methods:
        state = harness.read_json(cache.folder / name / "session.json")
        if state is None:
            continue
        steps = state["steps"]
        curves[name] = SequentialCurve(
            batch_size=state["session"]["batch_size"], n_edited=[n for n, _, _ in steps],
            seconds=[t for _, t, _ in steps],
            metrics={m: [row[i] for _, _, row in steps] for i, m in enumerate(METRICS)},
            config=state["config"], n={}, se={},
            complete=state["n_edits"] * state["session"]["batch_size"] >= edits,
        )
    return curves


def add_errors(curves: dict[str, SequentialCurve], facts: list[EditRequest], every: int) -> None:
    """Per step, how many prompts each metric counts and its binomial standard error (percent
    points): ES over the facts edited so far, PS over their paraphrases, NS and specificity over
    the never-edited neighbour prompts of the first run's facts (the session's fixed set)."""
    first = facts[:every]
    subjects = {r.subject for r in first}
    n_neighbours = sum(
        1 for r in first for p in r.neighborhood_prompts if r.target_true and not any(s in p for s in subjects)
    )
    for c in curves.values():
        edited = [facts[:n] if n else first for n in c["n_edited"]]  # step 0: the first run's facts
        c["n"] = {"ES": [len(e) for e in edited], "PS": [sum(len(r.paraphrase_prompts) for r in e) for e in edited],
                  "NS": [n_neighbours] * len(edited), "specificity": [n_neighbours] * len(edited)}
        c["se"] = {m: [binomial_standard_error(p, k, scale=100) for p, k in zip(c["metrics"][m], c["n"][m],
                                                                                strict=True)]
                   for m in COUNTED}


def plot(curves: dict[str, SequentialCurve], model: str, path: Path) -> None:
    """One panel per metric against the edits applied, ± one binomial s.e. (none for GE)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 6.4))
    axes = fig.subplots(2, 3).ravel()
    colors = {"rome": "tab:orange", "memit": "tab:blue", "alphaedit": "tab:green"}
    for ax, name in zip(axes, METRICS, strict=False):
        for method, c in curves.items():
            ax.errorbar(c["n_edited"], c["metrics"][name], yerr=c["se"].get(name), marker="o", ms=3, capsize=2,
                        color=colors[method], label=f"{method} (b={c['batch_size']})")
        ax.set_title(name + (" (retained, edited facts so far)" if name in ("ES", "PS") else "")
                     + (" ± s.e." if name != "GE" else ""), fontsize=9)
        ax.set_xlabel("edits applied", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[-1].axis("off")
    n = max(c["n_edited"][-1] for c in curves.values())
    fig.suptitle(f"Sequential editing on {model}: {n} facts, never restored (step 0 = unedited)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def ordered_facts(seed: int, n: int | None = None) -> list[EditRequest]:
    """The editing fact set in the seeded order (editing.py --table: the same order), the first
    ``n`` (all by default)."""
    facts = load_facts("edit_facts")
    random.Random(seed).shuffle(facts)
    return facts[:n]


def write(run: harness.Run, curves: dict[str, SequentialCurve], every: int, stats_tokens: int | None) -> None:
    args = run.args
    n_facts = QUICK["edits"] if run.quick else args.edits
    add_errors(curves, ordered_facts(args.seed), every)
    run.write(SequentialEditingData(
        model=args.model, n_facts=n_facts, order_seed=args.seed, every=every, stats_tokens=stats_tokens,
        metrics="percent; ES/PS over the facts edited so far, NS and specificity over never-edited "
                "neighbourhood prompts (specificity: the original model's top-1 kept), GE of 50 tokens; "
                "n: prompts counted per step; se: binomial standard error in points",
        methods=curves,
    ))
    plot(curves, args.model, figure_path(run))


def figure_path(run: harness.Run) -> Path:
    """docs/img/ for the docs' data file, else beside --out."""
    return FIGURE if run.out == harness.DATA / "sequential_editing.json" else run.out.with_suffix(".png")


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    edits, every = (QUICK["edits"], QUICK["every"]) if run.quick else (args.edits, args.every)
    cache = run.cache({"model": args.model, "seed": args.seed, "every": every, "quick": run.quick})
    if args.partial:
        write(run, partial_curves(cache, args.methods, edits), every, stats_tokens=None)
        return
    deadline = time.perf_counter() + args.max_seconds
    with run.timed("load"):
        lm = load_model(args.model)
    facts = ordered_facts(args.seed, edits)
    layers = sorted({default_rome_layer(lm), *default_memit_layers(lm)})
    with run.timed("statistics"):
        stats = key_statistics(lm, layers, StatsConfig(
            n_tokens=QUICK["stats_tokens"] if run.quick else ROMEHyperParams().stats_tokens))
    curves = {}
    for name in args.methods:
        folder = cache.folder / name
        session = session_for(run, lm, name, stats, folder)
        with run.timed(name):
            result = run_method(session, name, facts, every, folder, deadline)
        if result is None:
            print("stopped at --max-seconds: run again to resume")
            return
        result.save(cache.path(f"{name}-result"))
        curves[name] = curve(result, session.config)
    write(run, curves, every, stats_tokens=stats.n_tokens)
    print("done")


if __name__ == "__main__":
    main()
