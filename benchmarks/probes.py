"""Probe sweeps on SmolLM2: the speed target and the real tasks' curves.

1. Speed: a sweep over all 30 layers with 5,000 examples (subject_number), collection included,
   with the control task and the bootstrap on. Prints collection and fit seconds. The same
   features are also fitted layer by layer with scikit-learn's ``LogisticRegression`` (on
   ``--sklearn-layers`` layers, same strength grid and split) for the ratio and the accuracy gap.
   Written to the ``speed`` section of ``--data`` (run it on a quiet machine).
2. The tasks: every registered task's sweep, with its peak, selectivity and baseline; the curves
   are written as PNG and the tables as Parquet under ``--out``.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/probes.py [--out out/probes] [--sklearn-layers 3]
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/probes.py --skip-speed    # the tasks: docs/data/probes.json
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/probes.py --skip-tasks    # the speed section only

Each part replaces only its own section of the data file (``tasks`` or ``speed``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from lmsci_mi import load_model
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.data.probing import subject_number_dataset
from lmsci_mi.probes import PROBE_TASKS, ProbeSweepConfig, Split, fit_probes, probe_task
from lmsci_mi.sites import hook_name


def speed(lm, n_examples: int, sklearn_layers: int) -> dict:
    data = subject_number_dataset(n_examples, seed=0)
    hooks = [hook_name("resid_post", layer) for layer in range(lm.cfg.n_layers)]
    n_tokens = sum(len(lm.encode(t)) for t in data.texts)
    config = ProbeSweepConfig()
    print(f"speed: {len(hooks)} layers x {n_examples} examples ({n_tokens} tokens), probe + control, "
          f"{len(config.l2_grid)} strengths, {config.bootstrap} bootstrap resamples (target: 60 s)")
    peaks, runs, sklearn = {}, {}, None
    for autocast in (None, "bfloat16"):
        start = time.perf_counter()
        acts = collect_activations(lm, data.texts, hooks,
                                   config=CollectConfig(progress=False, autocast=autocast))
        collected = time.perf_counter()
        split = Split.random(len(acts), seed=0)
        features = acts.stack(hooks).to(lm.device)
        fits, _control = fit_probes(features, list(data.labels), split, config,
                                   word_types=acts.token.tolist())
        fitted = time.perf_counter()
        scores = torch.tensor([f.score for f in fits])
        peaks[autocast] = scores
        runs[autocast or "float32"] = {
            "collect_s": round(collected - start, 1), "fit_s": round(fitted - collected, 1),
            "total_s": round(fitted - start, 1), "peak_layer": int(scores.argmax()),
            "peak_accuracy": float(scores.max()),
        }
        print(f"  {autocast or 'float32':9s} collect {collected - start:6.1f} s ({n_tokens / (collected - start):.0f} "
              f"tok/s)   fit {fitted - collected:6.1f} s   total {fitted - start:6.1f} s   "
              f"peak layer {int(scores.argmax())}: accuracy {scores.max():.3f}")
        if autocast is None and sklearn_layers:
            sklearn = _sklearn(features, data.labels, split, config, fits, sklearn_layers)
    gap = (peaks[None] - peaks["bfloat16"]).abs().max()
    print(f"  largest per-layer accuracy difference, float32 vs bfloat16 collection: {gap * 100:.2f} points")
    return {
        "date": datetime.date.today().isoformat(), "threads": torch.get_num_threads(),
        "task": "subject_number", "n_examples": n_examples, "n_tokens": n_tokens, "layers": len(hooks),
        "strengths": len(config.l2_grid), "bootstrap": config.bootstrap, "runs": runs,
        "bfloat16_max_layer_difference_points": round(float(gap) * 100, 2), "sklearn": sklearn,
    }


def _sklearn(features, labels, split, config, fits, n_layers: int) -> dict:
    """scikit-learn on the same standardised features, strength grid and split, layer by layer."""
    from sklearn.linear_model import LogisticRegression

    classes = sorted(set(labels))
    y = torch.tensor([classes.index(v) for v in labels])
    layers = torch.linspace(0, features.shape[0] - 1, n_layers).round().long().tolist()
    start = time.perf_counter()
    gaps = []
    for layer in layers:
        x = features[layer].cpu()
        mean, std = x[split.train].mean(0), x[split.train].std(0).clamp_min(1e-6)
        z = ((x - mean) / std).numpy()
        best = (-1.0, None)
        for l2 in config.l2_grid:
            model = LogisticRegression(C=1 / (l2 * len(split.train)), max_iter=1000)
            model.fit(z[split.train], y[split.train].numpy())
            val = model.score(z[split.val], y[split.val].numpy())
            if val > best[0]:
                best = (val, model)
        test = best[1].score(z[split.test], y[split.test].numpy())
        gaps.append(abs(test - fits[layer].score))
    seconds = time.perf_counter() - start
    print(f"  scikit-learn, task only, {n_layers} layers: {seconds:.1f} s "
          f"(~{seconds / n_layers * features.shape[0]:.0f} s for all layers, task only); "
          f"largest test-accuracy gap to lmsci-mi {max(gaps) * 100:.2f} points")
    return {"layers": layers, "seconds": round(seconds, 1),
            "seconds_all_layers_estimate": round(seconds / n_layers * features.shape[0], 1),
            "max_gap_points": round(max(gaps) * 100, 2)}


def _write(data_file: Path, section: dict) -> None:
    """Replace the given sections of the data file, keeping the others."""
    data = json.loads(data_file.read_text()) if data_file.exists() else {}
    data.update(section)
    data_file.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {data_file}")


def tasks(lm, out: Path, data_file: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    print(f"{'task':15s} {'peak layer':>10s} {'accuracy':>9s} {'95% CI':>13s} {'control':>8s} "
          f"{'selectivity':>11s} {'majority':>8s} {'n (train/val/test)':>19s} {'seconds':>8s}")
    for name in PROBE_TASKS.names():
        start = time.perf_counter()
        result = probe_task(lm, name)
        seconds = time.perf_counter() - start
        result.save(out / f"{name}.json")
        result.export(out / f"{name}.parquet")
        result.plot(out / f"{name}.png")
        peak = result.peak()
        row = result.values[int(peak.layer)]
        interval = f"[{row[4]:.3f},{row[5]:.3f}]"
        sizes = f"{result.n_train}/{result.n_val}/{result.n_test}"
        print(f"{name:15s} {peak.layer:>10s} {peak.score:9.3f} {interval:>13s} {peak.control:8.3f} "
              f"{peak.selectivity:+11.3f} {peak.baseline:8.3f} {sizes:>19s} {seconds:8.1f}")
        print("   per layer: " + " ".join(f"{v:.2f}" for v in result.metric("score").tolist()))
        print("   control:   " + " ".join(f"{v:.2f}" for v in result.metric("control").tolist()))
        rows[name] = {
            "peak_layer": int(peak.layer), "accuracy": float(peak.score),
            "ci95": [float(row[4]), float(row[5])], "control": float(peak.control),
            "selectivity": float(peak.selectivity), "majority": float(peak.baseline),
            "n_train": result.n_train, "n_val": result.n_val, "n_test": result.n_test,
            "seconds": round(seconds, 1),
            "per_layer": result.metric("score").tolist(), "control_per_layer": result.metric("control").tolist(),
        }
    _write(data_file, {
        "model": "smollm2-135m", "site": "resid_post", "split": "60/20/20, seed 0",
        "date": datetime.date.today().isoformat(), "threads": torch.get_num_threads(),
        "tasks": rows,
    })


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("out/probes"))
    parser.add_argument("--n-examples", type=int, default=5000)
    parser.add_argument("--sklearn-layers", type=int, default=3)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-tasks", action="store_true")
    parser.add_argument("--data", type=Path, default=Path("docs/data/probes.json"),
                        help="the tasks' figures for the docs' tables")
    args = parser.parse_args()
    lm = load_model("smollm2-135m")
    lm.encode("warm up the tokenizer")
    if not args.skip_speed:
        _write(args.data, {"speed": speed(lm, args.n_examples, args.sklearn_layers)})
    if not args.skip_tasks:
        tasks(lm, args.out, args.data)


if __name__ == "__main__":
    main()
