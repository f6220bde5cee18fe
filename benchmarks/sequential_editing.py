"""Sequential editing on SmolLM2-135M: ROME, MEMIT and AlphaEdit over 200 edits (issues 21, 38).

    PYTHONPATH=. .venv/bin/python benchmarks/sequential_editing.py        # resumable: run until "done"
    PYTHONPATH=. .venv/bin/python benchmarks/sequential_editing.py --methods alphaedit memit
    PYTHONPATH=. python benchmarks/sequential_editing.py --quick --model toy-2l   # a check

200 facts of the shipped editing fact set, in a seeded random order, are edited one batch after
another without restoring: ROME one fact per edit, MEMIT and AlphaEdit 10 per edit. Every 20
edits an ``EditingSession`` measures ES and PS retained over all facts edited so far,
NS on neighbourhood prompts whose subjects are never edited, specificity (top-1 kept) against
the original model's answers, and GE (50 tokens from every fact's rewrite prompt). On the same
weights, after the step's edits and before the next, WILD-EM judges them without teacher forcing
(lmsci_mi.editing.wild: greedy generation to ".", a newline or EOS, at most 50 tokens): rewrite
and paraphrase success over the facts edited so far, locality on NS's neighbour prompts (the
generation token for token the unedited model's), each with its count and a Wilson interval; the
unedited generations are cached per prompt (``wild_generate(use_cache=True)``), shared with
editing_wild.py. Step 0 is the unedited model (ES, PS and WILD over the first 20 facts). Each
method's session is saved after every 20 edits and each step's WILD-EM kept, both in the harness's
per-item cache, so an interrupted run continues without editing or generating again. When every
method is done it writes docs/data/sequential_editing.json and docs/img/sequential_editing.png
(beside --out when --out is elsewhere). --partial writes them from the steps saved so far, without
the model. --no-wild leaves WILD-EM out (and finds the sessions such a run saved). --quick edits 4
facts, evaluated every 2, batches of 2, with 4 fit steps, 5 tokens of GE and 8 of WILD-EM.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
from doc_tables.schemas.editing import SequentialCurve, SequentialEditingData

from lmsci_mi import LensModel, load_model
from lmsci_mi.config import Config
from lmsci_mi.editing import (
    AlphaEditConfig,
    EditingSession,
    EditRequest,
    EvaluationConfig,
    KeyStatistics,
    MEMITConfig,
    ROMEConfig,
    SessionConfig,
    SessionResult,
    StatsConfig,
    WildConfig,
    default_memit_layers,
    default_rome_layer,
    key_statistics,
    load_facts,
    wild_generate,
)
from lmsci_mi.editing.wild import WildGeneration, answer_matches
from lmsci_mi.stats import binomial_standard_error, wilson_interval

FIGURE = harness.ROOT / "docs" / "img" / "sequential_editing.png"
METHODS: dict[str, tuple[Config, int]] = {
    "rome": (ROMEConfig(), 1),
    "memit": (MEMITConfig(), 10),
    "alphaedit": (AlphaEditConfig(), 10),
}
"""Each method's config and facts per edit."""
METRICS = ("ES", "PS", "NS", "specificity", "GE")
COUNTED = ("ES", "PS", "NS", "specificity")
"""The percentages, whose prompts are counted for a binomial standard error (GE is a mean)."""
WILD = {"rewrite": "ES", "paraphrase": "PS", "locality": "NS"}
"""WILD-EM's rates, each beside the teacher-forced metric of the same prompts (locality: NS's)."""
QUICK_FIT = {"steps": 4, "n_contexts": 2}
"""--quick's fit: a check of the script, not of the method."""
QUICK = {"edits": 4, "every": 2, "batch": 2, "stats_tokens": 2_048, "ge_tokens": 5, "wild_tokens": 8}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--methods", nargs="+", default=["alphaedit", "memit", "rome"], choices=sorted(METHODS))
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--every", type=int, default=20, help="evaluate (and save) every N edits")
    parser.add_argument("--seed", type=int, default=0, help="order of the facts")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="start no edit or WILD-EM step after this many seconds (run again to resume)")
    parser.add_argument("--partial", action="store_true",
                        help="write the data and plot from the steps saved so far (no model run)")
    parser.add_argument("--no-wild", action="store_true", help="leave WILD-EM out (teacher-forced metrics only)")
    parser.add_argument("--model", default="smollm2-135m")


# --- WILD-EM at each step -------------------------------------------------------------------------


def session_neighbours(first: Sequence[EditRequest]) -> list[str]:
    """The neighbourhood prompts NS and specificity count, as ``EditingSession`` picks them from
    its first call's facts: those of facts with a true target that name none of those subjects."""
    subjects = {r.subject for r in first}
    return [p for r in first for p in r.neighborhood_prompts
            if r.target_true and not any(s in p for s in subjects)]


@dataclass(frozen=True)
class WildProbe:
    """WILD-EM of a session's facts on the model as it is now, against the unedited model's
    generations of the neighbour prompts (``reference``)."""

    config: WildConfig
    facts: tuple[EditRequest, ...]
    """Every fact of the run, in the order they are edited."""
    first: int
    """Facts in the session's first call: step 0 is judged on them, as ES and PS are."""
    near: tuple[str, ...]
    reference: Mapping[str, WildGeneration]

    def step(self, lm: LensModel, done: int) -> dict[str, Any]:
        """Successes and counts after ``done`` edits (reads the model only). Step 0 reads and
        fills the unedited generations' disk cache instead of generating again."""
        edited = [r for r in (self.facts[:done] if done else self.facts[: self.first]) if r.target_true]
        prompts = [p for r in edited for p in (r.rewrite_prompt, *r.paraphrase_prompts)] + list(self.near)
        begin = time.perf_counter()
        out = {g.prompt: g for g in wild_generate(lm, prompts, self.config, use_cache=done == 0)}
        outcomes = {
            "rewrite": [answer_matches(out[r.rewrite_prompt].text, r.target_new) for r in edited],
            "paraphrase": [answer_matches(out[p].text, r.target_new) for r in edited for p in r.paraphrase_prompts],
            "locality": [out[p].tokens == self.reference[p].tokens for p in self.near],
        }
        return {"n_edited": done, "k": {m: sum(v) for m, v in outcomes.items()},
                "n": {m: len(v) for m, v in outcomes.items()}, "seconds": time.perf_counter() - begin}


def wild_probe(lm: LensModel, facts: Sequence[EditRequest], every: int, config: WildConfig) -> WildProbe:
    """The probe of a run, with the unedited model's generations: call it on the unedited model."""
    first = list(facts[:every])
    near = session_neighbours(first)
    unedited = [p for r in first for p in (r.rewrite_prompt, *r.paraphrase_prompts)] + near
    reference = {g.prompt: g for g in wild_generate(lm, unedited, config, use_cache=True)}
    return WildProbe(config, tuple(facts), len(first), tuple(near), reference)


def wild_item(name: str, done: int) -> str:
    return f"{name}-wild-{done:04d}"


def add_wild(curve: SequentialCurve, steps: Sequence[dict[str, Any] | None]) -> None:
    """Put each step's WILD-EM (percent, its count, a 95 % Wilson interval) beside the curve's
    metrics; a step not judged yet (a --partial write) is null."""
    curve["wild"], curve["wild_n"], curve["wild_ci95"] = {}, {}, {}
    for m in WILD:
        intervals = [None if s is None else wilson_interval(s["k"][m], s["n"][m]) for s in steps]
        curve["wild"][m] = [None if w is None else 100 * w.estimate for w in intervals]
        curve["wild_n"][m] = [None if w is None else w.n for w in intervals]
        curve["wild_ci95"][m] = [None if w is None else [100 * w.low, 100 * w.high] for w in intervals]
    curve["wild_seconds"] = [None if s is None else s["seconds"] for s in steps]


# --- the sessions ---------------------------------------------------------------------------------


def method_config(run: harness.Run, name: str) -> tuple[Config, SessionConfig]:
    """The method's config and its session's (--quick: a short fit, small batches, short GE)."""
    config, batch = METHODS[name]
    evaluation = EvaluationConfig()
    if run.quick:
        config, batch = config.replace(**QUICK_FIT), min(batch, QUICK["batch"])
        evaluation = EvaluationConfig(generation_tokens=QUICK["ge_tokens"])
    return config, SessionConfig(batch_size=batch, evaluation=evaluation)


def session_for(run: harness.Run, lm: LensModel, name: str, stats: KeyStatistics,
                folder: Path) -> EditingSession:
    """The method's session: resumed from ``folder`` when one was saved there, else new."""
    config, session_config = method_config(run, name)
    if (folder / "session.json").exists():
        return EditingSession.resume(lm, folder, config, session_config, stats=stats)
    return EditingSession(lm, config, session_config, stats=stats)


def run_method(session: EditingSession, name: str, facts: list[EditRequest], every: int,
               cache: harness.ItemCache, deadline: float, probe: WildProbe | None) -> SessionResult | None:
    """Edit ``every`` facts at a time, evaluating and saving after each, with WILD-EM (``probe``)
    on the weights of each step before the next edit; None past the deadline."""
    folder = cache.folder / name
    try:
        while True:
            done = len(session.order)
            if probe is not None and wild_item(name, done) not in cache:
                if time.perf_counter() > deadline:
                    return None
                step = cache.get(wild_item(name, done), lambda done=done: probe.step(session.lm, done))
                print(f"{name}: {done} edits, WILD-EM " + ", ".join(
                    f"{m} {step['k'][m]}/{step['n'][m]}" for m in WILD) + f" in {step['seconds']:.0f} s", flush=True)
            if done >= len(facts):
                return session.result()
            if time.perf_counter() > deadline:
                return None
            result = session.run(facts[done : done + every])
            session.save(folder)
            row = dict(zip(result.labels[1], result.values[-1].tolist(), strict=True))
            print(f"{name}: {result.n_edited[-1]} edits, {result.seconds[-1]:.0f} s of edits: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
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
    n_neighbours = len(session_neighbours(first))
    for c in curves.values():
        edited = [facts[:n] if n else first for n in c["n_edited"]]  # step 0: the first run's facts
        c["n"] = {"ES": [len(e) for e in edited], "PS": [sum(len(r.paraphrase_prompts) for r in e) for e in edited],
                  "NS": [n_neighbours] * len(edited), "specificity": [n_neighbours] * len(edited)}
        c["se"] = {m: [binomial_standard_error(p, k, scale=100) for p, k in zip(c["metrics"][m], c["n"][m],
                                                                                strict=True)]
                   for m in COUNTED}


COLORS = {"rome": "tab:orange", "memit": "tab:blue", "alphaedit": "tab:green"}
WILD_OF = {tf: m for m, tf in WILD.items()}


def plot(curves: dict[str, SequentialCurve], model: str, path: Path) -> None:
    """One panel per metric against the edits applied, ± one binomial s.e. (none for GE); WILD-EM
    dashed beside ES, PS and NS, with its 95 % Wilson interval, when the run measured it."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    wild = any("wild" in c for c in curves.values())
    fig = Figure(figsize=(11, 6.8 if wild else 6.4))
    axes = fig.subplots(2, 3).ravel()
    for ax, name in zip(axes, METRICS, strict=False):
        for method, c in curves.items():
            ax.errorbar(c["n_edited"], c["metrics"][name], yerr=c["se"].get(name), marker="o", ms=3, capsize=2,
                        color=COLORS.get(method), label=f"{method} (b={c['batch_size']})")
            if name in WILD_OF and "wild" in c:
                plot_wild(ax, c, WILD_OF[name], COLORS.get(method))
        title = name + (" (retained, edited facts so far)" if name in ("ES", "PS") else "")
        title += " ± s.e." if name != "GE" else ""
        title += f"\nWILD-EM {WILD_OF[name]} dashed (95 % Wilson)" if wild and name in WILD_OF else ""
        ax.set_title(title, fontsize=8.5 if wild else 9)
        ax.set_xlabel("edits applied", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[-1].axis("off")
    if wild:
        axes[-1].legend([Line2D([], [], color="gray"), Line2D([], [], color="gray", ls="--")],
                        ["teacher-forced (ES, PS, NS)", "WILD-EM: greedy generation,\nno teacher forcing"],
                        loc="center", fontsize=8)
    n = max(c["n_edited"][-1] for c in curves.values())
    fig.suptitle(f"Sequential editing on {model}: {n} facts, never restored (step 0 = unedited)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def plot_wild(ax: Any, c: SequentialCurve, metric: str, color: str | None) -> None:
    """One method's WILD-EM rate, dashed, with its interval; steps not judged yet are left out."""
    points = [(n, v, ci) for n, v, ci in zip(c["n_edited"], c["wild"][metric], c["wild_ci95"][metric], strict=True)
              if v is not None]
    if points:
        xs, ys, cis = zip(*points, strict=True)
        # max(0, ·): at 0 % or 100 % the Wilson bound equals the rate up to float rounding
        yerr = [[max(0.0, y - lo) for y, (lo, _) in zip(ys, cis, strict=True)],
                [max(0.0, hi - y) for y, (_, hi) in zip(ys, cis, strict=True)]]
        ax.errorbar(xs, ys, yerr=yerr, marker="s", ms=2.5, capsize=2, ls="--", color=color, alpha=0.8)


def ordered_facts(seed: int, n: int | None = None) -> list[EditRequest]:
    """The editing fact set in the seeded order (editing.py --table: the same order), the first
    ``n`` (all by default)."""
    facts = load_facts("edit_facts")
    random.Random(seed).shuffle(facts)
    return facts[:n]


def write(run: harness.Run, curves: dict[str, SequentialCurve], every: int, stats_tokens: int | None,
          wild: WildConfig | None) -> None:
    args = run.args
    n_facts = QUICK["edits"] if run.quick else args.edits
    add_errors(curves, ordered_facts(args.seed), every)
    data = SequentialEditingData(
        model=args.model, n_facts=n_facts, order_seed=args.seed, every=every, stats_tokens=stats_tokens,
        metrics="percent; ES/PS over the facts edited so far, NS and specificity over never-edited "
                "neighbourhood prompts (specificity: the original model's top-1 kept), GE of 50 tokens; "
                "n: prompts counted per step; se: binomial standard error in points",
        methods=curves,
    )
    if wild is not None:
        data["wild"] = wild.params()
        data["wild_metrics"] = (
            "WILD-EM (lmsci_mi.editing.wild), percent, on the weights of each step: rewrite over the facts "
            "edited so far (step 0: the first run's), paraphrase over their paraphrase prompts, locality over "
            "NS's neighbour prompts (generation equal to the unedited model's); wild_n: prompts counted; "
            "wild_ci95: 95 % Wilson interval; wild_seconds: generation time of the step; null: not judged yet")
    run.write(data)
    plot(curves, args.model, figure_path(run))


def figure_path(run: harness.Run) -> Path:
    """docs/img/ for the docs' data file, else beside --out."""
    return FIGURE if run.out == harness.DATA / "sequential_editing.json" else run.out.with_suffix(".png")


def with_wild(curves: dict[str, SequentialCurve], cache: harness.ItemCache) -> None:
    """Each curve's WILD-EM from the step items cached beside its session."""
    for name, c in curves.items():
        add_wild(c, [cache.load(wild_item(name, n)) for n in c["n_edited"]])


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    edits, every = (QUICK["edits"], QUICK["every"]) if run.quick else (args.edits, args.every)
    wild = None if args.no_wild else WildConfig(max_new_tokens=QUICK["wild_tokens"]) if run.quick else WildConfig()
    # The key holds every method's settings (a change of defaults starts new sessions, where the
    # saved ones would refuse to resume) and WILD-EM's: a --no-wild run's sessions go on without
    # it, so a run with it cannot share them (it would miss their steps).
    settings = {"model": args.model, "seed": args.seed, "every": every, "quick": run.quick,
                "methods": {m: [c.params() for c in method_config(run, m)] for m in sorted(METHODS)}}
    cache = run.cache(settings if wild is None else {**settings, "wild": wild.params()})
    if args.partial:
        curves = partial_curves(cache, args.methods, edits)
        if wild is not None:
            with_wild(curves, cache)
        write(run, curves, every, stats_tokens=None, wild=wild)
        return
    deadline = time.perf_counter() + args.max_seconds
    with run.timed("load"):
        lm = load_model(args.model)
    facts = ordered_facts(args.seed, edits)
    layers = sorted({default_rome_layer(lm), *default_memit_layers(lm)})
    with run.timed("statistics"):
        stats = key_statistics(lm, layers, StatsConfig(
            n_tokens=QUICK["stats_tokens"] if run.quick else ROMEConfig().stats_tokens))
    probe = None
    if wild is not None:
        with run.timed("wild unedited"):  # before any session touches the weights
            probe = wild_probe(lm, facts, every, wild)
    curves = {}
    for name in args.methods:
        session = session_for(run, lm, name, stats, cache.folder / name)
        with run.timed(name):
            result = run_method(session, name, facts, every, cache, deadline, probe)
        if result is None:
            print("stopped at --max-seconds: run again to resume")
            return
        result.save(cache.path(f"{name}-result"))
        curves[name] = curve(result, session.config)
    if wild is not None:
        with_wild(curves, cache)
    write(run, curves, every, stats_tokens=stats.n_tokens, wild=wild)
    print("done")


if __name__ == "__main__":
    main()
