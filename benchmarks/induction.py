"""Induction heads of SmolLM2 over several draws of repeated random tokens, with their spread.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/induction.py              # seeds 0-9, docs/data/induction.json

Each seed draws ``HeadScoreConfig()``'s sequences (20 repeated random sequences; seed 0 is the one
docs/ioi.md quotes), scores every head with ``induction_scores`` and mean-ablates the heads above
``--threshold`` with ``induction_ablation`` (the second-half loss clean, with those heads ablated,
and with as many random other heads ablated, the mean of 5 draws). The data file keeps every
seed's figures and the mean and standard deviation over seeds; a head's score over seeds is also
kept for the top heads of seed 0.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lmsci_mi import load_model
from lmsci_mi.circuits.heads import (
    HeadScoreConfig,
    InductionAblationConfig,
    induction_ablation,
    induction_scores,
)

ROOT = Path(__file__).resolve().parent.parent
TOP = 4


def _spread(values: list[float]) -> dict:
    return {
        "mean": statistics.fmean(values),
        "sd": statistics.stdev(values) if len(values) > 1 else None,
        "n": len(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--threshold", type=float, default=0.2)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "data" / "induction.json")
    args = parser.parse_args()
    lm = load_model(args.model)
    runs = []
    for seed in args.seeds:
        began = time.perf_counter()
        scores = induction_scores(lm, config=HeadScoreConfig(seed=seed))
        heads = scores.heads_above(args.threshold)
        ablation = induction_ablation(lm, heads, InductionAblationConfig(seed=seed))
        runs.append({
            "seed": seed,
            # Every head, highest first: a head's score in each seed, whatever its rank there.
            "scores": {str(h): round(s, 4) for h, s in scores.top(lm.cfg.n_layers * lm.cfg.n_heads)},
            "heads_above": [str(h) for h in heads],
            "loss_clean": ablation.loss_clean,
            "loss_ablated": ablation.loss_induction_ablated,
            "loss_random": ablation.loss_random_ablated,
            "seconds": round(time.perf_counter() - began, 1),
        })
        r = runs[-1]
        print(f"seed {seed}: {len(heads)} heads above {args.threshold}; loss {r['loss_clean']:.2f} → "
              f"{r['loss_ablated']:.2f} (random {r['loss_random']:.2f}); top {list(r['scores'].items())[:TOP]}",
              flush=True)
    top = list(runs[0]["scores"])[:TOP]
    summary = {
        "top_heads_of_seed_0": {
            head: _spread([r["scores"][head] for r in runs]) for head in top
        },
        "n_heads_above": _spread([len(r["heads_above"]) for r in runs]),
        "loss_clean": _spread([r["loss_clean"] for r in runs]),
        "loss_ablated": _spread([r["loss_ablated"] for r in runs]),
        "loss_random": _spread([r["loss_random"] for r in runs]),
    }
    data = {
        "model": args.model,
        "date": datetime.date.today().isoformat(),
        "threshold": args.threshold,
        "sequences": {"n": HeadScoreConfig().n_sequences, "half_length": HeadScoreConfig().half_length},
        "random_draws": InductionAblationConfig().n_random_draws,
        "runs": runs,
        "summary": summary,
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
