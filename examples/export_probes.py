"""Probe every layer of SmolLM2 for a city's country, then export the table for your own analysis.

    python examples/export_probes.py [--task country] [--out out/probes] [--quick]

Writes the per-layer table as CSV, Parquet and JSON, the curve as PNG, and the full result (with
each layer's probe weights) as JSON + safetensors that `Result.load` reads back. About a minute
on two CPU cores; `--quick` (or LMSCI_MI_QUICK=1) probes six layers on 240 examples.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pandas as pd

from lmsci_mi import load_model
from lmsci_mi.config import quick_mode
from lmsci_mi.probes import ProbeSweep, ProbeSweepConfig, ProbeTaskConfig, probe_task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="country")
    parser.add_argument("--out", type=Path, default=Path("out/probes"))
    parser.add_argument("--quick", action="store_true", default=quick_mode(),
                        help="6 layers, 240 examples (default: on when LMSCI_MI_QUICK is set)")
    args = parser.parse_args()

    lm = load_model("smollm2-135m")
    config = ProbeSweepConfig(layers=(0, 3, 6, 9, 12, 15) if args.quick else None)
    task_config = ProbeTaskConfig(n_examples=240 if args.quick else None)
    sweep = probe_task(lm, args.task, config, task_config)

    peak = sweep.peak()
    print(f"{args.task}: best layer {peak.layer}, accuracy {peak.score:.3f}, "
          f"selectivity {peak.selectivity:+.3f} (majority class {peak.baseline:.3f})")
    args.out.mkdir(parents=True, exist_ok=True)
    for suffix in ("csv", "parquet", "json"):
        print("wrote", sweep.export(args.out / f"{args.task}.{suffix}"))
    sweep.plot(args.out / f"{args.task}.png")
    saved = sweep.save(args.out / f"{args.task}_result.json")

    # The exported table is plain data: pandas (or R, or a spreadsheet) reads it back.
    table = pd.read_parquet(args.out / f"{args.task}.parquet")
    print(table[["layer", "accuracy", "control_accuracy", "selectivity", "majority"]].round(3).to_string(index=False))
    assert ProbeSweep.load(saved) == sweep


if __name__ == "__main__":
    main()
