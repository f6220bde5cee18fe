"""Induction heads of SmolLM2 over several draws of repeated random tokens, with their spread.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/induction.py              # seeds 0-9, docs/data/induction.json
    PYTHONPATH=. python benchmarks/induction.py --quick --model toy-2l --threshold 0.033  # a check

Each seed draws ``HeadScoreConfig()``'s sequences (20 repeated random sequences; seed 0 is the one
docs/ioi.md quotes), scores every head with ``induction_scores`` and mean-ablates the heads above
``--threshold`` with ``induction_ablation`` (the second-half loss clean, with those heads ablated,
and with as many random other heads ablated, the mean of 5 draws). The data file keeps every
seed's figures and the mean and standard deviation over seeds; a head's score over seeds is also
kept for the top heads of seed 0. Each seed is cached as it finishes, so a stopped run resumes.
--quick runs seed 0 on 4 sequences.
"""

from __future__ import annotations

import argparse
import statistics
import time

import harness
from doc_tables.schemas import MeanSD
from doc_tables.schemas.circuits import InductionData, InductionRun, InductionSummary

from lmsci_mi import LensModel, load_model
from lmsci_mi.circuits.heads import (
    HeadScoreConfig,
    InductionAblationConfig,
    induction_ablation,
    induction_scores,
)

TOP = 4
"""Seed 0's top heads, whose scores over seeds the summary keeps."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--threshold", type=float, default=0.2)
    parser.add_argument("--model", default="smollm2-135m")


def measure(lm: LensModel, seed: int, threshold: float, scores: HeadScoreConfig) -> InductionRun:
    """One seed: every head's score, the heads above ``threshold``, and their ablation."""
    began = time.perf_counter()
    result = induction_scores(lm, config=scores)
    heads = result.heads_above(threshold)
    ablation = induction_ablation(lm, heads, InductionAblationConfig(seed=seed))
    return InductionRun(
        seed=seed,
        # Every head, highest first: a head's score in each seed, whatever its rank there.
        scores={str(h): round(s, 4) for h, s in result.top(lm.cfg.n_layers * lm.cfg.n_heads)},
        heads_above=[str(h) for h in heads],
        loss_clean=ablation.loss_clean,
        loss_ablated=ablation.loss_induction_ablated,
        loss_random=ablation.loss_random_ablated,
        seconds=round(time.perf_counter() - began, 1),
    )


def spread(values: list[float]) -> MeanSD:
    """The spread over seeds (a description of the draws, not an interval)."""
    sd = statistics.stdev(values) if len(values) > 1 else None
    return MeanSD(mean=statistics.fmean(values), sd=sd, n=len(values))


def summarise(runs: list[InductionRun]) -> InductionSummary:
    top = list(runs[0]["scores"])[:TOP]
    return InductionSummary(
        top_heads_of_seed_0={head: spread([r["scores"][head] for r in runs]) for head in top},
        n_heads_above=spread([len(r["heads_above"]) for r in runs]),
        loss_clean=spread([r["loss_clean"] for r in runs]),
        loss_ablated=spread([r["loss_ablated"] for r in runs]),
        loss_random=spread([r["loss_random"] for r in runs]),
    )


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    seeds = args.seeds[:1] if run.quick else args.seeds
    n_sequences = 4 if run.quick else HeadScoreConfig().n_sequences
    with run.timed("load"):
        lm = load_model(args.model)
    cache = run.cache(exclude=["seeds"])
    runs = []
    for seed in seeds:
        config = HeadScoreConfig(seed=seed, n_sequences=n_sequences)
        r = cache.get(f"seed-{seed}", lambda seed=seed, config=config: measure(lm, seed, args.threshold, config))
        runs.append(r)
        print(f"seed {seed}: {len(r['heads_above'])} heads above {args.threshold}; loss "
              f"{r['loss_clean']:.2f} → {r['loss_ablated']:.2f} (random {r['loss_random']:.2f}); "
              f"top {list(r['scores'].items())[:TOP]}", flush=True)
    run.write(InductionData(
        model=args.model,
        threshold=args.threshold,
        sequences={"n": n_sequences, "half_length": HeadScoreConfig().half_length},
        random_draws=InductionAblationConfig().n_random_draws,
        runs=runs,
        summary=summarise(runs),
    ))


if __name__ == "__main__":
    main()
