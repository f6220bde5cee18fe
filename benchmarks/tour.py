"""How long the README's first command takes: the tour on SmolLM2, warm, `--quick`, and from a fresh clone.

Run quiet, alone on the machine (nothing else on the 2 cores), from the repository root::

    HF_HUB_OFFLINE=1 python benchmarks/tour.py                  # warm and --quick
    HF_HUB_OFFLINE=1 python benchmarks/tour.py --runs fresh     # a fresh clone, no pip cache
    PYTHONPATH=. python benchmarks/tour.py --quick                  # a check: the step list only

Each run is ``scripts/tour.sh`` as a user types it, timed from outside (wall), with the tour's own
per-step seconds and the report's size read from what it prints. ``warm`` and ``quick`` use this
checkout's .venv and lmsci-mi cache; ``fresh`` clones the committed HEAD into a temporary folder
and runs it with ``PIP_NO_CACHE_DIR=1`` and an empty ``LMSCI_MI_CACHE``, so the install (venv,
torch, the other dependencies) and the one-time conversion of the GGUF model are included.
Each run is one measurement (a run takes minutes; the spread between runs on a quiet machine was a
few seconds). The runs are merged into ``docs/data/tour.json`` as each one ends, so a run cut
short costs only itself; the step list beside them comes from ``lmsci-mi tour --list-steps``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
from doc_tables.schemas.project import TourData, TourRun, TourStep

RUNS = {
    "fresh": "fresh clone, `PIP_NO_CACHE_DIR=1 LMSCI_MI_CACHE=<empty> scripts/tour.sh` (install included)",
    "warm": "`scripts/tour.sh` again, same caches (warm)",
    "quick": "`scripts/tour.sh --quick` (warm)",
}
STEP = re.compile(r"^✓ (?P<title>.+) \((?P<seconds>[\d.]+) s\):", re.M)
FAILED = re.compile(r"^✗ (?P<title>.+) — FAILED after (?P<seconds>[\d.]+) s", re.M)
TOTAL = re.compile(r"^Tour finished in (?P<seconds>\d+) s", re.M)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", nargs="*", choices=list(RUNS), default=["warm", "quick"],
                        help="the runs to measure (none: only refresh the step list)")


def tour_command(name: str, scratch: Path) -> tuple[Path, dict[str, str], list[str]]:
    """Where scripts/tour.sh runs for ``name``, its environment and its arguments: ``fresh``
    clones the committed HEAD and empties the pip and lmsci-mi caches."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    repo = harness.ROOT
    args = ["--out-dir", str(scratch / "out"), *(["--quick"] if name == "quick" else [])]
    if name == "fresh":
        repo = scratch / "clone"
        subprocess.run(["git", "clone", "-q", str(harness.ROOT), str(repo)], check=True)
        env.update(PIP_NO_CACHE_DIR="1", LMSCI_MI_CACHE=str(scratch / "cache"))
        env.pop("VIRTUAL_ENV", None)
    return repo, env, args


def run_once(name: str, scratch: Path) -> TourRun:
    """Run the tour as ``name`` says and return what was measured."""
    repo, env, args = tour_command(name, scratch)
    began = time.perf_counter()
    proc = subprocess.run(["scripts/tour.sh", *args], cwd=repo, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        sys.stderr.write(output[-4000:])
        raise SystemExit(f"the {name} tour exited {proc.returncode}; nothing recorded for it")
    report = scratch / "out" / "report.html"
    steps = {m["title"]: float(m["seconds"]) for m in STEP.finditer(output)}
    total = TOTAL.search(output)
    return TourRun(
        run=RUNS[name], wall_s=round(wall, 1), tour_s=float(total["seconds"]) if total else None,
        steps_s=round(sum(steps.values()), 1),
        # Everything before the first step: the install where there is one, importing, loading
        # (and on a fresh cache converting) the model.
        before_steps_s=round(wall - float(total["seconds"]), 1) if total else None,
        n_steps=len(steps), failed_steps=[m["title"] for m in FAILED.finditer(output)], step_seconds=steps,
        report_bytes=report.stat().st_size if report.exists() else None,
        date=datetime.date.today().isoformat(), commit=harness.git_commit(),
        machine=f"{os.cpu_count()}-core CPU, no GPU",
    )


def plan() -> list[TourStep]:
    """The tour's steps as the code declares them (`lmsci-mi tour --list-steps`, this checkout's):
    name, title, quick, the estimate it prints."""
    listed = subprocess.run([sys.executable, "-m", "lmsci_mi.cli", "tour", "--list-steps"], cwd=harness.ROOT,
                            check=True, capture_output=True, text=True).stdout
    return [TourStep(name=s["name"], title=s["title"], quick=s["quick"], estimate_s=s["estimate_s"])
            for s in json.loads(listed)]


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    data: TourData = harness.read_json(run.out, {"runs": {}})
    data.pop("timings", None)  # this run's timings replace the last run's
    data["steps"] = plan()
    run.write(data)
    for name in [] if run.quick else run.args.runs:
        with tempfile.TemporaryDirectory(prefix=f"lmsci-tour-{name}-") as scratch, run.timed(name):
            print(f"{name}: running …", flush=True)
            row = run_once(name, Path(scratch))
        data["runs"][name] = row
        # Ordered as the table shows them, whatever order they were measured in.
        data["runs"] = {k: data["runs"][k] for k in RUNS if k in data["runs"]}
        run.write(data)
        print(f"{name}: wall {row['wall_s']:.1f} s, steps {row['steps_s']:.1f} s over {row['n_steps']}, "
              f"report {row['report_bytes']} bytes", flush=True)


if __name__ == "__main__":
    main()
