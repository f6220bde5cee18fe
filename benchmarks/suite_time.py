"""How long the README's test command takes: the fast part and the whole suite, timed as CI runs them.

Run quiet, alone on the machine (the timings are the budget's measure: fast part ≤ 2 min, whole
suite ≤ 20 min on the project's 2-core CPU)::

    python benchmarks/suite_time.py                 # both, docs/data/test_suite.json
    python benchmarks/suite_time.py --runs fast     # the fast part only

Each run is ``scripts/test.sh`` as the README gives it (``-m "not slow"`` for the fast part), with
``-p no:cacheprovider`` so that no earlier run's order or cache changes it. The wall time is taken
from outside; pytest's own time and the outcome counts from its last line. Each run is merged into
the data file as it ends. A run whose suite fails is recorded with its failures, and the script
exits 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data" / "test_suite.json"
RUNS = {
    "fast": ("`scripts/test.sh -m \"not slow\"`", ["-m", "not slow"]),
    "whole": ("`scripts/test.sh` (the whole suite)", []),
}
SUMMARY = re.compile(r"^=* ?(?P<counts>\d+ \w+.*?) in (?P<seconds>[\d.]+)s(?: \([\d:]+\))? ?=*$", re.M)


def run_once(name: str) -> dict:
    label, extra = RUNS[name]
    began = time.perf_counter()
    proc = subprocess.run(
        ["scripts/test.sh", "-p", "no:cacheprovider", *extra],
        cwd=ROOT, capture_output=True, text=True, env=dict(os.environ),
    )
    wall = time.perf_counter() - began
    found = SUMMARY.findall(proc.stdout)
    if not found:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"no pytest summary line in the {name} run (exit {proc.returncode})")
    counts_text, seconds = found[-1]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", counts_text)}
    return {
        "run": label,
        "counts": counts,
        "pytest_s": float(seconds),
        "wall_s": round(wall, 1),
        "exit": proc.returncode,
        "failures": re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    args = parser.parse_args()
    data = json.loads(DATA.read_text()) if DATA.exists() else {"runs": {}}
    failed = False
    for name in args.runs:
        print(f"{name}: running …", flush=True)
        row = run_once(name)
        row.update(
            date=datetime.date.today().isoformat(),
            commit=subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                  capture_output=True, text=True).stdout.strip(),
            workers=os.environ.get("LMSCI_MI_TEST_WORKERS", "2"),
        )
        data["runs"][name] = row
        data["runs"] = {k: data["runs"][k] for k in RUNS if k in data["runs"]}
        DATA.write_text(json.dumps(data, indent=1) + "\n")
        # The README's test table is generated from this file: rewrite it now, or the next run's
        # docs-vs-data test fails on the table this run just made stale.
        subprocess.run([sys.executable, "scripts/doc_tables.py"], cwd=ROOT, check=True, capture_output=True)
        print(f"{name}: {row['counts']} in {row['pytest_s']:.1f} s (wall {row['wall_s']:.1f} s), exit {row['exit']}",
              flush=True)
        failed |= row["exit"] != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
