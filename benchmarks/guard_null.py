"""How often does ROME's traced-layer guard pass a trace with no fact? (issue 37, item 5)

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/guard_null.py      # resumable
    PYTHONPATH=. python benchmarks/guard_null.py --quick --model toy-2l          # a check

``ROMEConfig(trace_layer=True)`` edits the MLP layer where a causal trace peaks at the last
subject token (Gaussian noise 3 × the embedding std, 10 noise samples, window 10, noise seed 0:
what ``traced_layer`` runs) and refuses a trace that does not single one out. Seven guards, on the
same traces:

- old: the peak layer's effect (restored minus corrupted p(target)) above two standard errors
  of that one layer's paired difference: the largest of 30 correlated effects, tested as if it
  had not been selected (the guard before issue 37);
- peak: ``CausalTrace.peak_test``, the peak against the largest of the 30 layers' effects under
  all 1,024 sign flips of the 10 noise samples, at p <= 0.05 (issue 37's first pass);
- gap: ``CausalTrace.gap_test``, the clean run's p(target) above the corrupted runs' (one-sided
  sign-flip test of clean minus each noise sample's corrupted p, exact at 10 samples), p <= 0.05;
- gap and peak: ``traced_layer``'s guard before the material gap;
- material: ``traced_gap_is_material``, the gap (clean minus the mean corrupted p) at least
  ``MIN_TRACED_GAP`` (0.05) and at least ``MIN_TRACED_GAP_SHARE`` (half) of the clean p: what a
  fact's trace must show (the model gives the answer, and the answer rests on the subject);
- guard: gap, material and peak, what ``traced_layer`` accepts now;
- confident: the guard and a confident answer, clean p >= CONFIDENT_P (0.5): measured here, not
  in ``traced_layer`` (it costs a quarter of the power).

The bounds of the material gap are round numbers stated from what a fact's trace must show
(lmsci_mi/editing/rome.py), after draw 0 and the known facts below had been seen (the draw-0
accepts are why a size condition exists) and before the made-up subjects and draw 1 were run:
those two sets are its held-out test. The confident-answer condition was stated after the
made-up subjects' draw 0 had been seen, before their draw 1 was run (its held-out test). No
threshold is fitted to the traces it is judged on.

Sets. Null traces ("no fact"), each a false-positive rate:
- null (draw 0) and null_fresh (draws 1 on): each known fact's rewrite prompt
  (lmsci_mi/data/facts.json) traced for a random target, a token drawn (seeded) from the
  vocabulary's single-token words (a space and 3 or more ASCII letters) that the model gives a
  clean probability below 1e-3 there. The corruption and the restored states are a real fact's;
  the answer is not one the prompt carries. ``--draws`` per fact (default 2), draw j with noise
  seed j. No such target can pass the material gap (its clean p is below 0.05), so these sets
  test the two tests and show what the material gap removes; the next set tests the rule.
- made_up (draw 0) and made_up_fresh (draws 1 on, ``--made-up-draws``, default 2): what a user
  hits: each known fact's prompt template about a made-up subject of the same shape
  (MADE_UP_RULE: pseudo-words from seeded syllables, "The" kept), traced for its clean top-1, as
  ``traced_layer`` traces, draw m with noise seed m.
Known traces: every ``--known-every``-th prompt (default 2nd) for its clean top-1 (the first
token of its true answer), noise seed 0 (the guard's power), and the editing fact of
docs/editing.md ("The Eiffel Tower", noise seeds 0-3).

Each trace is one item of the harness's cache, so a run resumes (``--budget`` seconds of new
tracing per run, then it stops without writing: run it again); it writes docs/data/guard_null.json:
per set the share each guard accepts with a Wilson 95 % interval, and every trace (its corrupted
samples included, so every condition can be recomputed). 4-10 s per trace at one thread (traced
at the last subject token only, which is all the guard reads; the range is the shared machine's
load; 325 new traces took 37 minutes over five --budget runs). Items cached before the gap test
get it from the clean and corrupted runs alone (the trace's own code, noise and seed, its
restorations skipped: about 1 s each), which must reproduce the cached trace's target and
probabilities; items cached before the material gap get it from their clean and corrupted p.
--quick traces 3 facts, 5 noise samples.

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
import time
from collections.abc import Callable, Iterator
from typing import Any

import harness
import torch
from doc_tables.schemas.circuits import GuardNullData, GuardRate, GuardSet, GuardTrace

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits import CausalTrace, TraceConfig, causal_trace
from lmsci_mi.circuits.tracing import PEAK_TEST_ALPHA
from lmsci_mi.data.facts import Fact, load_facts
from lmsci_mi.editing.rome import MIN_TRACED_GAP, MIN_TRACED_GAP_SHARE, traced_gap_is_material
from lmsci_mi.stats import wilson_interval
from lmsci_mi.sweep import SweepStats

SETS = ("null", "null_fresh", "made_up", "made_up_fresh", "known", "eiffel")
CONFIDENT_P = 0.5
"""The confident-answer condition (measured here, not in ``traced_layer``): the model gives its
answer more likely than not (clean p >= 0.5). Stated after the made-up subjects' draw 0 had been
seen, so draw 1 is its held-out test."""
MAX_CLEAN_P = 1e-3
"""A null target's clean probability is below this: the model does not predict it."""
WORD = re.compile(r"^ [A-Za-z]{3,}$")
EIFFEL = Fact("{} is located in the city of", "The Eiffel Tower", target_true=" Paris")
EIFFEL_SEEDS = (0, 1, 2, 3)
QUICK_SAMPLES = 5


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--draws", type=int, default=2,
                        help="random targets per fact (draw 0: the first run's; later draws: held out)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the target draws")
    parser.add_argument("--known-every", type=int, default=2,
                        help="trace every k-th fact for its true answer (the power needs fewer)")
    parser.add_argument("--made-up-draws", type=int, default=2,
                        help="made-up subjects per fact (draw 0: the material gap's test; later draws: held out "
                             "for the confident-answer condition)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of new tracing in this run (resume by running again)")


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


ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "k", "kl", "l", "m", "n", "p", "pl", "r", "s", "sk",
          "t", "tr", "v", "z")
VOWELS = ("a", "e", "i", "o", "u")
CODAS = ("", "", "", "n", "r", "l", "k", "s")
MADE_UP_RULE = ("every word of the subject but a leading 'The' replaced by a pseudo-word of 2 or 3 syllables, "
                "each a random onset, vowel and optional coda from fixed lists, capitalised, and not a "
                "single token of the vocabulary with its leading space (so not a common word)")


def made_up_word(lm: LensModel, rng: random.Random) -> str:
    """A capitalised pseudo-word (see MADE_UP_RULE), drawn again while it is one vocabulary token."""
    while True:
        syllables = rng.choice((2, 3))
        word = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                       for _ in range(syllables)).capitalize()
        if len(lm.tokenizer.encode(" " + word, add_special_tokens=False)) > 1:
            return word


def made_up_fact(lm: LensModel, fact: Fact, rng: random.Random) -> Fact:
    """``fact``'s prompt template about a made-up subject of the same shape: no fact to know."""
    words = fact.subject.split()
    subject = " ".join(w if (k == 0 and w == "The") else made_up_word(lm, rng) for k, w in enumerate(words))
    return Fact(fact.prompt, subject)


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
    guards built from them."""
    gap = trace.gap_test()
    return verdicts({**peak, "corrupted_samples": trace.corrupted_samples.tolist(), "gap": gap.statistic,
                     "gap_p_value": gap.p_value, "gap_accepted": gap.rejects(PEAK_TEST_ALPHA)})


def verdicts(record: dict[str, Any]) -> GuardTrace:
    """``record`` with the material-gap condition (``traced_gap_is_material``, from its clean and
    corrupted p alone), the gap and peak tests together (the guard before the material gap) and
    ``traced_layer``'s verdict: all three."""
    material = traced_gap_is_material(record["clean_prob"], record["corrupted_prob"])
    gap_and_peak = bool(record["gap_accepted"] and record["peak_accepted"])
    accepted = gap_and_peak and material
    return GuardTrace(**{**record, "material_accepted": material, "gap_peak_accepted": gap_and_peak,
                         "accepted": accepted, "confident_accepted": accepted and record["clean_prob"] >= CONFIDENT_P})


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
    if "confident_accepted" not in record:  # cached before these conditions: no run needed
        record = verdicts(record)
        cache.save(key, record)
    return record


def rate(traces: list[GuardTrace], key: str) -> GuardRate:
    accepted = sum(bool(t[key]) for t in traces)
    interval = wilson_interval(accepted, len(traces))
    return GuardRate(n=len(traces), accepted=accepted, rate=interval.estimate, interval=interval.as_list())


def summary(definition: str, traces: list[GuardTrace]) -> GuardSet:
    return GuardSet(definition=definition, old=rate(traces, "old_accepted"),
                    peak=rate(traces, "peak_accepted"), gap=rate(traces, "gap_accepted"),
                    gap_and_peak=rate(traces, "gap_peak_accepted"), material=rate(traces, "material_accepted"),
                    guard=rate(traces, "accepted"), confident=rate(traces, "confident_accepted"),
                    positive_peaks=sum(t["effect"] > 0 for t in traces),
                    clean_above_corrupted=sum(t["clean_prob"] > t["corrupted_prob"] for t in traces),
                    traces=traces)


class Budget:
    """``--budget``: seconds of new tracing in this run; once spent, no new item is started and
    the run stops without writing (the cache keeps what was traced: run it again)."""

    def __init__(self, seconds: float | None) -> None:
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.left_out = 0

    def allows(self, cache: harness.ItemCache, key: str) -> bool:
        if key in cache or self.deadline is None or time.monotonic() < self.deadline:
            return True
        self.left_out += 1
        return False


def trace_all(run: harness.Run, lm: LensModel, budget: Budget) -> dict[str, list[GuardTrace]]:
    """Every trace of every set, cached per item (draw 0's and the known facts' keys are those of
    the runs before the made-up subjects and the later draws were added)."""
    args = run.args
    facts = load_facts()[:3] if run.quick else load_facts()
    draws, samples = (2, QUICK_SAMPLES) if run.quick else (args.draws, TraceConfig().n_samples)
    cache = run.cache({"model": args.model, "samples": samples, "seed": args.seed})
    pool = word_tokens(lm)
    sets: dict[str, list[GuardTrace]] = {name: [] for name in SETS}

    def add(name: str, key: str, fact: Fact, target: Callable[[], str | None], seed: int) -> None:
        if budget.allows(cache, key):
            sets[name].append(cached(cache, key, lm, fact, target, seed, samples))

    # The made-up subjects first: the rule's test, where a --budget run should spend its time.
    # Draw 0 keeps the keys and names of the first run; draw m has noise seed m.
    for m in range(2 if run.quick else args.made_up_draws):
        for i, fact in enumerate(facts):
            key, name_seed = (f"made-up-{i:03d}", f"made-up-{args.seed}-{i}") if m == 0 else (
                f"made-up-{i:03d}-{m}", f"made-up-{args.seed}-{i}-{m}")
            add("made_up" if m == 0 else "made_up_fresh", key,
                made_up_fact(lm, fact, random.Random(name_seed)), lambda: None, m)
    for i, fact in enumerate(facts):
        for j in range(draws):
            rng = random.Random(f"{args.seed}-{i}-{j}")
            add("null" if j == 0 else "null_fresh", f"null-{i:03d}-{j}", fact,
                lambda f=fact, rng=rng: null_target(lm, f.rewrite_prompt, pool, rng), j)
        if i % args.known_every == 0:
            add("known", f"known-{i:03d}", fact, lambda: None, 0)
        print(f"{i + 1}/{len(facts)} {fact.subject}", flush=True)
    for s in EIFFEL_SEEDS:
        add("eiffel", f"eiffel-{s}", EIFFEL, lambda: None, s)
    return sets


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags)
    args = run.args
    with run.timed("load"):
        lm = load_model(args.model)
    budget = Budget(args.budget)
    with run.timed("traces"):
        sets = trace_all(run, lm, budget)
    if budget.left_out:
        print(f"--budget spent: {budget.left_out} traces left; run again to resume (nothing written)")
        return
    samples = QUICK_SAMPLES if run.quick else TraceConfig().n_samples
    draws, made_up_draws = (2, 2) if run.quick else (args.draws, args.made_up_draws)
    target_rule = (f"a single-token word (space + 3 or more ASCII letters) drawn with seed {args.seed} among "
                   f"those with clean p < {MAX_CLEAN_P:g}")
    data = GuardNullData(
        model=args.model, alpha=PEAK_TEST_ALPHA, noise_samples=samples, window=TraceConfig().window,
        noise=TraceConfig().noise, max_clean_p=MAX_CLEAN_P, min_gap=MIN_TRACED_GAP,
        min_gap_share=MIN_TRACED_GAP_SHARE, confident_p=CONFIDENT_P,
        null=summary(f"each known fact's rewrite prompt traced for a random target: {target_rule}; "
                     "draw 0, noise seed 0 (the traces the material-gap rule was stated after)", sets["null"]),
        null_fresh=summary(f"the same prompts, fresh random targets: {target_rule}; draws 1-{draws - 1}, draw j "
                           "with noise seed j (run after the material-gap rule was fixed: held out)",
                           sets["null_fresh"]),
        made_up=summary(f"each known fact's prompt template with its subject replaced by a made-up name "
                        f"({MADE_UP_RULE}; seed {args.seed}), traced for its clean top-1 as traced_layer "
                        "does, noise seed 0 (run after the material-gap rule was fixed: held out)", sets["made_up"]),
        made_up_fresh=summary(f"the same templates, fresh made-up names (draws 1-{made_up_draws - 1}, draw m with "
                              "names seeded by m and noise seed m; run after the confident-answer condition was "
                              "stated: held out)", sets["made_up_fresh"]),
        known=summary(f"one known fact in {args.known_every}: its rewrite prompt (spread over the relations) "
                      "traced for its clean top-1, the first token of its true answer, noise seed 0", sets["known"]),
        eiffel=summary(f"the editing fact of docs/editing.md ({EIFFEL.subject!r}) traced for its clean "
                       f"top-1 at noise seeds {EIFFEL_SEEDS[0]}-{EIFFEL_SEEDS[-1]}", sets["eiffel"]),
    )
    run.write(data)
    for name in SETS:
        for guard in ("old", "peak", "gap", "gap_and_peak", "material", "guard", "confident"):
            r = data[name][guard]
            print(f"{name} {guard}: {r['accepted']}/{r['n']} = {r['rate']:.3f} {r['interval']}")


if __name__ == "__main__":
    main()
