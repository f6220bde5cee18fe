"""How long the README's test command takes: the fast part and the whole suite, timed as CI runs them.

Run quiet, alone on the machine (the timings are the budget's measure: fast part ≤ 2 min, whole
suite ≤ 20 min on the project's 2-core CPU)::

    python benchmarks/suite_time.py                 # both, docs/data/test_suite.json
    python benchmarks/suite_time.py --runs fast     # the fast part only
    python benchmarks/suite_time.py --quick         # a check: one small test file as the fast part

Each run is ``scripts/test.sh`` as the README gives it (``-m "not slow"`` for the fast part), with
``-p no:cacheprovider`` so that no earlier run's order or cache changes it, and ``--durations=0``
for the seconds each test file takes (``per_file_s``: what an issue's tests cost of the budget). The wall time is taken
from outside; pytest's own time and the outcome counts from its last line. Each run is merged into
the data file as it ends (and the README's table regenerated from docs/data/test_suite.json). A run
whose suite fails is recorded with its failures, and the script exits 1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import time

import harness
from doc_tables.schemas.project import SuiteRun, SuiteTimeData

RUNS = {
    "fast": ("`scripts/test.sh -m \"not slow\"`", ["-m", "not slow"]),
    "whole": ("`scripts/test.sh` (the whole suite)", []),
}
QUICK_TESTS = ["tests/unit/test_stats.py"]
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?:setup|call|teardown)\s+(?P<test>\S+)", re.M)
SUMMARY = re.compile(r"^=* ?(?P<counts>\d+ \w+.*?) in (?P<seconds>[\d.]+)s(?: \([\d:]+\))? ?=*$", re.M)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))


def run_once(name: str, quick: bool) -> SuiteRun:
    """One run of scripts/test.sh, timed from outside; pytest's counts and time from its last line."""
    label, extra = RUNS[name]
    began = time.perf_counter()
    proc = subprocess.run(
        ["scripts/test.sh", "-p", "no:cacheprovider", "--durations=0", *extra, *(QUICK_TESTS if quick else [])],
        cwd=harness.ROOT, capture_output=True, text=True, env=dict(os.environ),
    )
    wall = time.perf_counter() - began
    found = SUMMARY.findall(proc.stdout)
    if not found:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"no pytest summary line in the {name} run (exit {proc.returncode})")
    counts_text, seconds = found[-1]
    return SuiteRun(
        run=label + (f" on {' '.join(QUICK_TESTS)} (--quick)" if quick else ""), counts={kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", counts_text)},
        pytest_s=float(seconds), wall_s=round(wall, 1), exit=proc.returncode,
        failures=re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M),
        date=datetime.date.today().isoformat(), commit=harness.git_commit(),
        workers=os.environ.get("LMSCI_MI_TEST_WORKERS", "2"), per_file_s=per_file(proc.stdout),
    )


def per_file(stdout: str) -> dict[str, float]:
    """Seconds per test file from ``--durations=0``'s lines (durations under 5 ms are not listed)."""
    files: dict[str, float] = {}
    for seconds, test in DURATION.findall(stdout):
        name = test.split("::")[0]
        files[name] = files.get(name, 0.0) + float(seconds)
    return {name: round(s, 2) for name, s in sorted(files.items(), key=lambda kv: -kv[1])}


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags, out=harness.DATA / "test_suite.json")
    names = ["fast"] if run.quick else run.args.runs
    data: SuiteTimeData = harness.read_json(run.out, {"runs": {}})
    data.pop("timings", None)  # this run's timings replace the last run's
    failed = False
    for name in names:
        print(f"{name}: running …", flush=True)
        with run.timed(name):
            row = run_once(name, run.quick)
        data["runs"][name] = row
        data["runs"] = {k: data["runs"][k] for k in RUNS if k in data["runs"]}
        run.write(data)
        if run.out == harness.DATA / "test_suite.json":
            # The README's test table is generated from this file: rewrite it now, or the next
            # run's docs-vs-data test fails on the table this run just made stale.
            subprocess.run([sys.executable, "scripts/doc_tables.py"], cwd=harness.ROOT, check=True,
                           capture_output=True)
        print(f"{name}: {row['counts']} in {row['pytest_s']:.1f} s (wall {row['wall_s']:.1f} s), exit {row['exit']}",
              flush=True)
        failed |= row["exit"] != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
