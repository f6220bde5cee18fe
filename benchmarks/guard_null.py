"""How often does ROME's traced-layer guard pass a trace with no fact? (issue 37, item 5)

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/guard_null.py      # resumable
    PYTHONPATH=. python benchmarks/guard_null.py --quick --model toy-2l          # a check

``ROMEConfig(trace_layer=True)`` edits the MLP layer where a causal trace peaks at the last
subject token (Gaussian noise 3 × the embedding std, 10 noise samples, window 10, noise seed 0:
what ``traced_layer`` runs) and refuses a trace that does not single one out. Four guards, on the
same traces:

- old: the peak layer's effect (restored minus corrupted p(target)) above two standard errors
  of that one layer's paired difference: the largest of 30 correlated effects, tested as if it
  had not been selected (the guard before issue 37);
- peak: ``CausalTrace.peak_test``, the peak against the largest of the 30 layers' effects under
  all 1,024 sign flips of the 10 noise samples, at p <= 0.05 (issue 37's first pass);
- gap: ``CausalTrace.gap_test``, the clean run's p(target) above the corrupted runs' (one-sided
  sign-flip test of clean minus each noise sample's corrupted p, exact at 10 samples), p <= 0.05:
  without it the noise destroys nothing for a peak to locate;
- gap and peak: what ``traced_layer`` accepts now. The gap condition was chosen from what a trace
  needs, before its rates on these traces were measured; no threshold is fitted to them.

Null traces ("no fact"): each known fact's rewrite prompt (lmsci_mi/data/facts.json), traced for a
random target: a token drawn (seeded) from the vocabulary's single-token words (a space and 3 or
more ASCII letters) that the model gives a clean probability below 1e-3 there. The corruption and
the restored states are a real fact's; only the answer is not one the prompt carries. ``--draws``
targets per fact (default 1), draw j with noise seed j. Known traces: every ``--known-every``-th prompt (default 2nd)
for its clean top-1 (the first token of its true answer, what ``traced_layer`` traces),
noise seed 0 (the guard's power), and the editing fact of docs/editing.md ("The Eiffel Tower",
noise seeds 0-3). Each trace is one item of the harness's cache, so a run resumes; it writes
docs/data/guard_null.json: per set the share each guard accepts with a Wilson 95 % interval, and
every trace (its corrupted samples included, so the gap test can be recomputed). 4-10 s per
trace at one thread (traced at the last subject token only, which is all the guard reads; the
range is the shared machine's load): 109 null + 55 known + 4 traces took about half an hour.
Items cached before the gap test get it from the clean and corrupted runs alone (the trace's own
code, noise and seed, its restorations skipped: about 1 s each), which must reproduce the cached
trace's target and probabilities. --quick traces 3 facts, 5 noise samples.

"No fact" is not "no effect": restoring one clean MLP window at the subject's last token into a
noised run moves a random token's probability too, mostly upwards (``positive_peaks`` counts the
null traces whose peak effect is above zero), so the peak test alone passes many null traces;
yet that token is less probable on the clean run than on the corrupted one on most prompts
(``clean_above_corrupted``), which the gap test reads."""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

import harness
import torch
from doc_tables.schemas.circuits import GuardNullData, GuardRate, GuardSet, GuardTrace

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits import CausalTrace, TraceConfig, causal_trace
from lmsci_mi.circuits.tracing import PEAK_TEST_ALPHA
from lmsci_mi.data.facts import Fact, load_facts
from lmsci_mi.stats import wilson_interval
from lmsci_mi.sweep import SweepStats

MAX_CLEAN_P = 1e-3
"""A null target's clean probability is below this: the model does not predict it."""
WORD = re.compile(r"^ [A-Za-z]{3,}$")
EIFFEL = Fact("{} is located in the city of", "The Eiffel Tower", target_true=" Paris")
EIFFEL_SEEDS = (0, 1, 2, 3)
QUICK_SAMPLES = 5


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--draws", type=int, default=1, help="random targets per fact")
    parser.add_argument("--seed", type=int, default=0, help="seed of the target draws")
    parser.add_argument("--known-every", type=int, default=2,
                        help="trace every k-th fact for its true answer (the power needs fewer)")


def word_tokens(lm: LensModel) -> list[int]:
    """Vocabulary ids that decode to a space and 3+ ASCII letters and encode back to themselves."""
    pool = []
    for token in range(lm.cfg.d_vocab):
        text = lm.tokenizer.decode([token])
        if WORD.match(text) and lm.tokenizer.encode(text, add_special_tokens=False) == [token]:
            pool.append(token)
    return pool


@torch.no_grad()
def null_target(lm: LensModel, prompt: str, pool: list[int], rng: random.Random) -> str:
    """A word token the model gives below MAX_CLEAN_P after ``prompt``."""
    probs = lm(lm.to_tokens(prompt))[0, -1].float().softmax(-1)
    while True:
        token = rng.choice(pool)
        if probs[token] < MAX_CLEAN_P:
            return lm.tokenizer.decode([token])


def guard_config(target: str | None, seed: int, samples: int) -> TraceConfig:
    """What ``traced_layer`` traces (for ``target``; None: the clean top-1)."""
    return TraceConfig(kinds=("mlp",), last_subject_only=True, target=target, seed=seed, n_samples=samples)


def traced(lm: LensModel, fact: Fact, target: str | None, seed: int, samples: int) -> GuardTrace:
    """The guard's trace of ``fact``'s rewrite prompt for ``target`` (None: the clean top-1, what
    ``traced_layer`` traces; for a known fact, the first token of its answer), and every guard's
    verdict."""
    trace = causal_trace(lm, fact.rewrite_prompt, fact.subject, guard_config(target, seed, samples))
    layer, effect, se = trace.peak_effect("mlp")
    test = trace.peak_test("mlp")
    peak = {"prompt": fact.rewrite_prompt, "subject": fact.subject, "target": trace.target, "seed": seed,
            "clean_prob": trace.clean_prob, "corrupted_prob": trace.corrupted_prob, "layer": layer,
            "effect": effect, "se": se, "old_accepted": bool(effect > 2 * se), "p_value": test.p_value,
            "test_layer": test.argmax, "peak_accepted": test.rejects(PEAK_TEST_ALPHA)}
    return with_gap(peak, trace)


def with_gap(peak: dict[str, Any], trace: CausalTrace) -> GuardTrace:
    """``peak``'s verdicts and the gap test of ``trace`` (its clean and corrupted runs), and the
    guard's: both."""
    gap = trace.gap_test()
    accepted = gap.rejects(PEAK_TEST_ALPHA)
    return GuardTrace(**peak, corrupted_samples=trace.corrupted_samples.tolist(), gap=gap.statistic,
                      gap_p_value=gap.p_value, gap_accepted=accepted,
                      accepted=accepted and peak["peak_accepted"])


@contextlib.contextmanager
def clean_and_corrupted_only() -> Iterator[None]:
    """``causal_trace`` with its restored runs skipped (zeros in their place): the clean and the
    corrupted runs by the trace's own code, noise and seed, all the gap test reads (about 1 s a
    trace, not 4-10). For traces cached before the gap test; ``gapped`` checks it against them."""
    from lmsci_mi.circuits import tracing

    def nothing_restored(lm, base, clean, positions, readout, cfg):
        shape = (len(cfg.kinds), lm.cfg.n_layers, base.n_pos, base.logits.shape[0])
        return torch.zeros(shape), SweepStats(0, 0, 0, 0, 0)

    restorations = tracing._restorations
    tracing._restorations = nothing_restored
    try:
        yield
    finally:
        tracing._restorations = restorations


def gapped(lm: LensModel, fact: Fact, record: dict[str, Any], samples: int, known: bool) -> GuardTrace:
    """A trace cached before the gap test (``new_accepted`` was the peak test's verdict) with
    its gap test, from the clean and corrupted runs alone; they must give the cached trace's
    target and probabilities."""
    peak = {k: v for k, v in record.items() if k != "new_accepted"} | {"peak_accepted": record["new_accepted"]}
    target = None if known else record["target"]
    with clean_and_corrupted_only():
        trace = causal_trace(lm, fact.rewrite_prompt, fact.subject, guard_config(target, record["seed"], samples))
    same = (trace.target == record["target"]
            and math.isclose(trace.clean_prob, record["clean_prob"], rel_tol=1e-5)
            and math.isclose(trace.corrupted_prob, record["corrupted_prob"], rel_tol=1e-5))
    if not same:
        raise RuntimeError(f"{fact.subject!r}: the runs differ from the cached trace's; run with --fresh")
    return with_gap(peak, trace)


def cached(cache: harness.ItemCache, key: str, lm: LensModel, fact: Fact, target: Callable[[], str | None],
           seed: int, samples: int) -> GuardTrace:
    """The item's trace, traced if not cached, its gap test added if cached without one."""
    record = cache.get(key, lambda: traced(lm, fact, target(), seed, samples))
    if "gap_p_value" not in record:
        record = gapped(lm, fact, record, samples, known=not key.startswith("null"))
        cache.save(key, record)
    return record


def rate(traces: list[GuardTrace], key: str) -> GuardRate:
    accepted = sum(bool(t[key]) for t in traces)
    interval = wilson_interval(accepted, len(traces))
    return GuardRate(n=len(traces), accepted=accepted, rate=interval.estimate, interval=interval.as_list())


def summary(definition: str, traces: list[GuardTrace]) -> GuardSet:
    return GuardSet(definition=definition, old=rate(traces, "old_accepted"),
                    peak=rate(traces, "peak_accepted"), gap=rate(traces, "gap_accepted"),
                    guard=rate(traces, "accepted"),
                    positive_peaks=sum(t["effect"] > 0 for t in traces),
                    clean_above_corrupted=sum(t["clean_prob"] > t["corrupted_prob"] for t in traces),
                    traces=traces)


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags)
    args = run.args
    with run.timed("load"):
        lm = load_model(args.model)
    facts = load_facts()[:3] if run.quick else load_facts()
    draws, samples = (1, QUICK_SAMPLES) if run.quick else (args.draws, TraceConfig().n_samples)
    cache = run.cache({"model": args.model, "samples": samples, "seed": args.seed})
    pool = word_tokens(lm)
    null, known = [], []
    with run.timed("traces"):
        for i, fact in enumerate(facts):
            for j in range(draws):
                rng = random.Random(f"{args.seed}-{i}-{j}")
                null.append(cached(cache, f"null-{i:03d}-{j}", lm, fact, lambda f=fact, rng=rng: null_target(
                    lm, f.rewrite_prompt, pool, rng), j, samples))
            if i % args.known_every == 0:
                known.append(cached(cache, f"known-{i:03d}", lm, fact, lambda: None, 0, samples))
            print(f"{i + 1}/{len(facts)} {fact.subject}: null gap/peak p "
                  f"{[(t['gap_p_value'], t['p_value']) for t in null[-draws:]]}, known gap/peak p "
                  f"{known[-1]['gap_p_value']:.4f}/{known[-1]['p_value']:.4f}", flush=True)
        eiffel = [cached(cache, f"eiffel-{s}", lm, EIFFEL, lambda: None, s, samples) for s in EIFFEL_SEEDS]
    data = GuardNullData(
        model=args.model, alpha=PEAK_TEST_ALPHA, noise_samples=samples, window=TraceConfig().window,
        noise=TraceConfig().noise, max_clean_p=MAX_CLEAN_P,
        null=summary(
            f"each known fact's rewrite prompt traced for a random target: a single-token word "
            f"(space + 3 or more ASCII letters) drawn with seed {args.seed} among those with clean "
            f"p < {MAX_CLEAN_P:g}; {draws} per fact, draw j with noise seed j", null),
        known=summary(f"one known fact in {args.known_every}: its rewrite prompt (spread over the relations) "
                      "traced for its clean top-1, the first token of its true answer, noise seed 0", known),
        eiffel=summary(f"the editing fact of docs/editing.md ({EIFFEL.subject!r}) traced for its clean "
                       f"top-1 at noise seeds {EIFFEL_SEEDS[0]}-{EIFFEL_SEEDS[-1]}", eiffel),
    )
    run.write(data)
    for name in ("null", "known", "eiffel"):
        for guard in ("old", "peak", "gap", "guard"):
            r = data[name][guard]
            print(f"{name} {guard}: {r['accepted']}/{r['n']} = {r['rate']:.3f} {r['interval']}")


if __name__ == "__main__":
    main()
