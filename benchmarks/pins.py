"""The pins of the integration tests: every deterministic real-model value they check, computed on
the bundled SmolLM2 at each test's exact small setting (tests/pins.py, ``MEASURES``: the test and
this script run the same function), at 1 and at 2 torch threads. Writes tests/data/pins.json: per
pin the 1-thread values (the suite runs one thread per worker), the largest difference the thread
count made, and the tolerance the tests apply: max(5 × that difference, 1e-4 × |value|, 1e-5) on
CPU (a list's: over its elements); on CUDA at least 2e-2 × |value| (TF32; tests/pins.py says why).

    HF_HUB_OFFLINE=1 PYTHONPATH=. OMP_NUM_THREADS=1 flock /work/model.lock \\
        python benchmarks/pins.py                       # every pin, at 1 and 2 threads
    python benchmarks/pins.py --only aie,reading        # some pins; the others stay as they were
    python benchmarks/pins.py --only memit --thread-counts 1   # no thread difference (floors)

Cost: about 5 minutes for every pin at 1 thread on the project's 2-core CPU (the probes, steering,
MEMIT and the tuned lens take most); a 2-thread pass on a shared machine took 2-8x longer. The
first file (2026-11-28) measured both counts for core, ioi_prompts, ioi_circuit, attribution,
eiffel_trace and both probes: the largest difference was 9e-7 (p(Paris)), most were 0, so the
1e-4 relative floor sets those tolerances; the other pins were run at 1 thread only (their
``thread_difference`` is null), for lack of machine time.

Regenerate the pins after an intended change of a method, a default or a data set (a test then
fails on its pin), and say in the commit message why the pinned values moved: a regenerated pin
with no reason hides the regression the pin is there to catch. Each pin's values are cached per
thread count, keyed by a hash of lmsci_mi/ and of the pin's function, so a stopped run resumes
and a change of the code recomputes (--fresh after changing a helper the functions share). Values that rest on a per-machine cache (MEMIT's key statistics)
are pinned given that cache; the thread-count difference does not cover rebuilding it.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import inspect
import sys
import time

import harness
import torch

sys.path.insert(0, str(harness.ROOT))  # tests/pins.py: the settings the tests run

from lmsci_mi import load_model
from tests.pins import (
    ABS_FLOOR,
    CUDA_REL,
    MEASURES,
    REL_FLOOR,
    TESTS,
    THREAD_FACTOR,
    Value,
    measure,
    tolerance,
)

OUT = harness.ROOT / "tests" / "data" / "pins.json"
MODEL = "smollm2-135m"


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", default="", help=f"comma-separated pins (default all: {', '.join(MEASURES)})")
    parser.add_argument("--thread-counts", default="1,2",
                        help="the first is the pinned run; the others give the thread-count difference")


def library_hash() -> str:
    """A hash of what every value depends on besides the model: the library and its data."""
    digest = hashlib.sha256()
    files = sorted(p for p in (harness.ROOT / "lmsci_mi").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(str(path.relative_to(harness.ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def setting_hash(name: str) -> str:
    """A hash of one pin's setting: its function's source less the ``@pinned`` line (renaming the
    test recomputes nothing; a shared helper it calls is not in it: after changing one, --fresh)."""
    lines = inspect.getsource(MEASURES[name]).splitlines()
    body = "\n".join(line for line in lines if not line.startswith("@pinned("))
    return hashlib.sha256(body.encode()).hexdigest()[:12]


def measured(name: str, lm, threads: int) -> dict:
    """One pin's values at ``threads`` torch threads, and the seconds they took."""
    torch.set_num_threads(threads)
    began = time.perf_counter()
    values = measure(name, lm).values
    return {"values": values, "seconds": round(time.perf_counter() - began, 2)}


def difference(a: Value, b: Value) -> Value:
    if isinstance(a, list):
        return [abs(x - y) for x, y in zip(a, b, strict=True)]  # type: ignore[arg-type]
    return abs(a - b)  # type: ignore[operator]


def pin_record(name: str, runs: dict[int, dict], commit: str | None) -> dict:
    """The pin as the tests read it: values of the first thread count, the largest difference any
    other count made (per value, elementwise for a list; None when only one count ran, and the
    tolerance is then the floors'), and the tolerance from it."""
    first, *others = runs
    values = runs[first]["values"]
    diffs: dict[str, Value | None] = {}
    for key, value in values.items():
        per_count = [difference(value, runs[t]["values"][key]) for t in others]
        if not per_count:
            diffs[key] = None
        elif isinstance(value, list):
            diffs[key] = [max(d[i] for d in per_count) for i in range(len(value))]  # type: ignore[index]
        else:
            diffs[key] = max(per_count)  # type: ignore[type-var]
    return {
        "test": f"tests/integration/{TESTS[name]}",
        "threads": list(runs),
        "values": values,
        "thread_difference": diffs,
        "tolerance": {k: tolerance(v, diffs[k] or 0.0) for k, v in values.items()},
        "seconds": {str(t): r["seconds"] for t, r in runs.items()},
        "commit": commit,
        "date": datetime.date.today().isoformat(),
    }


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags, out=OUT)
    names = run.args.only.split(",") if run.args.only else list(MEASURES)
    unknown = sorted(set(names) - set(MEASURES))
    if unknown:
        raise SystemExit(f"no pin {unknown}; pins: {', '.join(MEASURES)}")
    counts = [int(t) for t in run.args.thread_counts.split(",")]
    cache = run.cache({"model": MODEL, "library": library_hash()})
    models: list = []

    def model():  # loaded only when an item is not cached: a rewrite of the file needs none
        if not models:
            with run.timed("load"):
                models.append(load_model(MODEL))
        return models[0]

    pins = harness.read_json(run.out, {}).get("pins", {})
    for name in names:
        with run.timed(name):
            runs = {t: cache.get(f"{name}-{setting_hash(name)}-t{t}",
                                 lambda t=t, name=name: measured(name, model(), t)) for t in counts}
        pins[name] = pin_record(name, runs, run.commit)
        print(f"{name}: {runs[counts[0]]['seconds']} s at {counts[0]} thread(s); tolerance "
              f"{pins[name]['tolerance']}")
    torch.set_num_threads(run.args.threads)
    run.write({
        "model": MODEL,
        "rule": {"thread_factor": THREAD_FACTOR, "rel_floor": REL_FLOOR, "abs_floor": ABS_FLOOR,
                 "cuda_rel": CUDA_REL,
                 "cpu": "max(thread_factor x the largest 1-vs-2-thread difference, rel_floor x |value|, abs_floor)",
                 "cuda": "max(the CPU tolerance, cuda_rel x |value| (a list's largest)): TF32; chosen, not measured (no GPU here)"},
        "pins": dict(sorted(pins.items())),
    })


if __name__ == "__main__":
    main()
