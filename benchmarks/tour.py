"""How long the README's first command takes: the tour on SmolLM2, warm, `--quick`, and from a fresh clone.

Run quiet, alone on the machine (nothing else on the 2 cores), from the repository root::

    HF_HUB_OFFLINE=1 python benchmarks/tour.py                  # warm and --quick
    HF_HUB_OFFLINE=1 python benchmarks/tour.py --runs fresh     # a fresh clone, no pip cache

Each run is ``scripts/tour.sh`` as a user types it, timed from outside (wall), with the tour's own
per-step seconds and the report's size read from what it prints. ``warm`` and ``quick`` use this
checkout's .venv and lmsci-mi cache; ``fresh`` clones the committed HEAD into a temporary folder
and runs it with ``PIP_NO_CACHE_DIR=1`` and an empty ``LMSCI_MI_CACHE``, so the install (venv,
torch, the other dependencies) and the one-time conversion of the GGUF model are included.
Each run is one measurement (a run takes minutes; the spread between runs on a quiet machine was a
few seconds). The runs are merged into ``docs/data/tour.json`` as each one ends, so a run cut
short costs only itself.
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

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data" / "tour.json"
RUNS = {
    "fresh": "fresh clone, `PIP_NO_CACHE_DIR=1 LMSCI_MI_CACHE=<empty> scripts/tour.sh` (install included)",
    "warm": "`scripts/tour.sh` again, same caches (warm)",
    "quick": "`scripts/tour.sh --quick` (warm)",
}
STEP = re.compile(r"^✓ (?P<title>.+) \((?P<seconds>[\d.]+) s\):", re.M)
FAILED = re.compile(r"^✗ (?P<title>.+) — FAILED after (?P<seconds>[\d.]+) s", re.M)
TOTAL = re.compile(r"^Tour finished in (?P<seconds>\d+) s", re.M)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def run_once(name: str, scratch: Path) -> dict:
    """Run the tour as ``name`` says and return what was measured."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    repo = ROOT
    args = ["--out-dir", str(scratch / "out")]
    if name == "quick":
        args.append("--quick")
    if name == "fresh":
        repo = scratch / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
        env.update(PIP_NO_CACHE_DIR="1", LMSCI_MI_CACHE=str(scratch / "cache"))
        env.pop("VIRTUAL_ENV", None)
    began = time.perf_counter()
    proc = subprocess.run(
        ["scripts/tour.sh", *args], cwd=repo, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - began
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        sys.stderr.write(output[-4000:])
        raise SystemExit(f"the {name} tour exited {proc.returncode}; nothing recorded for it")
    report = scratch / "out" / "report.html"
    steps = {m["title"]: float(m["seconds"]) for m in STEP.finditer(output)}
    total = TOTAL.search(output)
    return {
        "run": RUNS[name],
        "wall_s": round(wall, 1),
        "tour_s": float(total["seconds"]) if total else None,
        "steps_s": round(sum(steps.values()), 1),
        # Everything before the first step: the install where there is one, importing, loading
        # (and on a fresh cache converting) the model.
        "before_steps_s": round(wall - float(total["seconds"]), 1) if total else None,
        "n_steps": len(steps),
        "failed_steps": [m["title"] for m in FAILED.finditer(output)],
        "step_seconds": steps,
        "report_bytes": report.stat().st_size if report.exists() else None,
    }


def plan() -> list[dict]:
    """The tour's steps as the code declares them: name, title, quick, the estimate it prints."""
    from lmsci_mi import cli
    from lmsci_mi.cli.tour import collect_steps

    quick = {step.name for step in collect_steps(cli._FEATURES, quick=True)}
    return [
        {"name": step.name, "title": step.title, "quick": step.name in quick, "estimate_s": step.seconds}
        for step in collect_steps(cli._FEATURES, quick=False)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="*", choices=list(RUNS), default=["warm", "quick"],
                        help="the runs to measure (none: only refresh the step list)")
    args = parser.parse_args()
    data = json.loads(DATA.read_text()) if DATA.exists() else {"runs": {}}
    data["steps"] = plan()
    DATA.write_text(json.dumps(data, indent=1) + "\n")
    for name in args.runs:
        with tempfile.TemporaryDirectory(prefix=f"lmsci-tour-{name}-") as scratch:
            print(f"{name}: running …", flush=True)
            row = run_once(name, Path(scratch))
        row.update(
            date=datetime.date.today().isoformat(),
            commit=_git("rev-parse", "--short", "HEAD"),
            machine=f"{os.cpu_count()}-core CPU, no GPU",
        )
        data["runs"][name] = row
        # Ordered as the table shows them, whatever order they were measured in.
        data["runs"] = {k: data["runs"][k] for k in RUNS if k in data["runs"]}
        DATA.parent.mkdir(parents=True, exist_ok=True)
        tmp = DATA.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(DATA)
        print(
            f"{name}: wall {row['wall_s']:.1f} s, steps {row['steps_s']:.1f} s over {row['n_steps']}, "
            f"report {row['report_bytes']} bytes",
            flush=True,
        )


if __name__ == "__main__":
    main()
