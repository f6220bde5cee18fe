"""Benchmark: cold load (GGUF dequantisation + conversion) vs cached load of the bundled model.

Each load runs in a fresh Python process, so import and file-system caches are the same as a
user's first and second `load_model` calls. The cold load uses an empty cache folder.

    .venv/bin/python benchmarks/loading.py [--model smollm2-135m] [--repeats 2]
    .venv/bin/python benchmarks/loading.py --model smollm2-135m gemma3-270m --write
    PYTHONPATH=. python benchmarks/loading.py --quick --model toy-2l --write     # a check (1 repeat)

``--write`` records every run, per model, in --out, docs/data/loading.json (the README's load table).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import harness
from doc_tables.project import loading as render
from doc_tables.schemas.project import LoadingData, LoadTimes

CHILD = """
import time, torch
t0 = time.perf_counter()
from lmsci_mi import load_model
t1 = time.perf_counter()
lm = load_model({model!r})
t2 = time.perf_counter()
lp = lm(lm.to_tokens("The Eiffel Tower is located in the city of"))[0, -1].log_softmax(-1)
print(f"{{t1 - t0:.3f}} {{t2 - t1:.3f}} {{lm.tokenizer.decode([int(lp.argmax())])!r}}")
"""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", nargs="+", default=["smollm2-135m"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="record the runs in --out")


def load_in_child(model: str, cache: str) -> tuple[float, float, str]:
    """Import and load seconds in a fresh process with ``cache`` as the cache root, and the top
    token after the Eiffel prompt (a check that the load works)."""
    env = {**os.environ, "LMSCI_MI_CACHE": cache, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    out = subprocess.run([sys.executable, "-c", CHILD.format(model=model)], env=env, cwd=harness.ROOT,
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    imports, load, top = out.split(" ", 2)
    return float(imports), float(load), top


def measure(model: str, repeats: int) -> LoadTimes:
    """``repeats`` pairs of loads: into a new empty cache folder, then again from it."""
    cold, warm, imports, tops = [], [], [], []
    with tempfile.TemporaryDirectory() as cache:
        for i in range(repeats):
            folder = os.path.join(cache, f"run{i}")
            for times in (cold, warm):
                seconds, load, top = load_in_child(model, folder)
                imports.append(seconds)
                times.append(load)
                tops.append(top)
    top = tops[0]
    print(f"{model}: cold {', '.join(f'{s:.2f}' for s in cold)} s, cached {', '.join(f'{s:.2f}' for s in warm)} s, "
          f"imports {', '.join(f'{s:.2f}' for s in imports)} s; top-1 after the Eiffel prompt {top}")
    return LoadTimes(cold_s=cold, cached_s=warm, import_s=imports, top1=top)


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    repeats = 1 if run.quick else run.args.repeats
    print(f"load_model, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs")
    models = {}
    for model in run.args.model:
        with run.timed(model):
            models[model] = measure(model, repeats)
    data = LoadingData(cpus=os.cpu_count() or 0, repeats=repeats, models=models)
    print(render(data))
    if run.args.write:
        run.write(data)


if __name__ == "__main__":
    main()
