"""Benchmark: cold load (GGUF dequantisation + conversion) vs cached load of the bundled model.

Each load runs in a fresh Python process, so import and file-system caches are the same as a
user's first and second `load_model` calls. The cold load uses an empty cache folder.

    .venv/bin/python benchmarks/loading.py [--model smollm2-135m] [--repeats 2]
    .venv/bin/python benchmarks/loading.py --model smollm2-135m gemma3-270m --write

``--write`` records every run, per model, in docs/data/loading.json (the README's load table).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "loading.json"

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


def run(model: str, cache: str) -> tuple[float, float, str]:
    env = {**os.environ, "LMSCI_MI_CACHE": cache, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    out = subprocess.run([sys.executable, "-c", CHILD.format(model=model)], env=env,
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    imports, load, top = out.split(" ", 2)
    return float(imports), float(load), top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", nargs="+", default=["smollm2-135m"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--write", action="store_true", help=f"record the runs in {DATA.name}")
    args = parser.parse_args()
    models = {}
    for model in args.model:
        rows = []
        with tempfile.TemporaryDirectory() as cache:
            for i in range(args.repeats):
                # A new empty cache folder for each cold run, the same folder for the warm run after it.
                cold_cache = os.path.join(cache, f"run{i}")
                rows.append(("cold (empty cache)", *run(model, cold_cache)))
                rows.append(("cached", *run(model, cold_cache)))
        print(f"\nload_model({model!r}), {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs")
        print(f"{'load':<20} {'import s':>9} {'load s':>8}  top-1 after the Eiffel prompt")
        for name, imports, load, top in rows:
            print(f"{name:<20} {imports:>9.2f} {load:>8.2f}  {top}")
        cold = [r[2] for r in rows if r[0].startswith("cold")]
        warm = [r[2] for r in rows if r[0] == "cached"]
        print(f"\nbest cold {min(cold):.2f} s, best cached {min(warm):.2f} s: "
              f"cached load is {min(cold) / min(warm):.1f}x faster")
        models[model] = {
            "cold_s": cold, "cached_s": warm,
            "import_s": [r[1] for r in rows], "top1": rows[0][3],
        }
    if args.write:
        DATA.write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "cpus": os.cpu_count(),
            "repeats": args.repeats, "models": models,
        }, indent=1) + "\n")
        print(f"wrote {DATA}")


if __name__ == "__main__":
    main()
