"""Probe sweeps on SmolLM2: the speed target and the real tasks' curves.

1. Speed: a sweep over all 30 layers with 5,000 examples (subject_number), collection included,
   with the control task and the bootstrap on, collected in float32 and under bfloat16 autocast.
   The same features are also fitted layer by layer with scikit-learn's ``LogisticRegression`` (on
   ``--sklearn-layers`` layers, same strength grid and split) for the ratio and the accuracy gap.
   Written to the ``speed`` section of the data file (run it on a quiet machine).
2. The tasks: every registered task's sweep, with its peak, selectivity and baseline (its 95%
   bootstrap interval is the sweep's own); the curves are written as PNG and the tables as Parquet
   under ``--results``. Each task is cached as it finishes, so a stopped run resumes.

    HF_HUB_OFFLINE=1 python benchmarks/probes.py                    # both parts
    HF_HUB_OFFLINE=1 python benchmarks/probes.py --skip-speed       # the tasks: docs/data/probes.json
    HF_HUB_OFFLINE=1 python benchmarks/probes.py --skip-tasks       # the speed section only
    PYTHONPATH=. python benchmarks/probes.py --quick --model toy-2l  # a check (out/quick/)

Each part replaces only its own section of the data file (``tasks`` or ``speed``), which keeps its
own date and thread count; the file's provenance record is the last part's run.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import harness
import torch
from doc_tables.schemas.probes import ProbesData, ProbeSpeed, ProbeTask, SklearnSpeed, SpeedRun

from lmsci_mi import LensModel, load_model
from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.data.probing import subject_number_dataset
from lmsci_mi.probes import (
    PROBE_TASKS,
    ProbeSweepConfig,
    ProbeTaskConfig,
    Split,
    fit_probes,
    probe_task,
)
from lmsci_mi.sites import hook_name


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--results", type=Path, default=Path("out/probes"),
                        help="each task's result, Parquet table and curve")
    parser.add_argument("--n-examples", type=int, default=5000, help="the speed part's examples")
    parser.add_argument("--sklearn-layers", type=int, default=3)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-tasks", action="store_true")


# --- 1. speed ----------------------------------------------------------------------------------


def timed_sweep(lm: LensModel, texts: list[str], labels: list, autocast: str | None, config: ProbeSweepConfig):
    """Collect every layer's ``resid_post`` and fit the probes (and the control's), timed."""
    hooks = [hook_name("resid_post", layer) for layer in range(lm.cfg.n_layers)]
    start = time.perf_counter()
    acts = collect_activations(lm, texts, hooks, config=CollectConfig(progress=False, autocast=autocast))
    collected = time.perf_counter()
    split = Split.random(len(acts), seed=0)
    features = acts.stack(hooks).to(lm.device)
    fits, _ = fit_probes(features, labels, split, config, word_types=acts.token.tolist())
    fitted = time.perf_counter()
    scores = torch.tensor([f.score for f in fits])
    run = SpeedRun(collect_s=round(collected - start, 1), fit_s=round(fitted - collected, 1),
                   total_s=round(fitted - start, 1), peak_layer=int(scores.argmax()), peak_accuracy=float(scores.max()))
    print(f"  {autocast or 'float32':9s} collect {run['collect_s']:6.1f} s   fit {run['fit_s']:6.1f} s   total "
          f"{run['total_s']:6.1f} s   peak layer {run['peak_layer']}: accuracy {run['peak_accuracy']:.3f}")
    return run, scores, features, split, fits


def sklearn_speed(features, labels, split, config, fits, n_layers: int) -> SklearnSpeed:
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
        gaps.append(abs(best[1].score(z[split.test], y[split.test].numpy()) - fits[layer].score))
    seconds = time.perf_counter() - start
    print(f"  scikit-learn, task only, {n_layers} layers: {seconds:.1f} s; largest test-accuracy gap to lmsci-mi "
          f"{max(gaps) * 100:.2f} points")
    return SklearnSpeed(layers=layers, seconds=round(seconds, 1),
                        seconds_all_layers_estimate=round(seconds / n_layers * features.shape[0], 1),
                        max_gap_points=round(max(gaps) * 100, 2))


def speed(lm: LensModel, n_examples: int, sklearn_layers: int) -> ProbeSpeed:
    data = subject_number_dataset(n_examples, seed=0)
    n_tokens = sum(len(lm.encode(t)) for t in data.texts)
    config = ProbeSweepConfig()
    print(f"speed: {lm.cfg.n_layers} layers x {n_examples} examples ({n_tokens} tokens), probe + control, "
          f"{len(config.l2_grid)} strengths, {config.bootstrap} bootstrap resamples (target: 60 s)")
    runs, peaks, sklearn = {}, {}, None
    for autocast in (None, "bfloat16"):
        run, peaks[autocast], features, split, fits = timed_sweep(lm, data.texts, list(data.labels), autocast, config)
        runs[autocast or "float32"] = run
        if autocast is None and sklearn_layers:
            sklearn = sklearn_speed(features, data.labels, split, config, fits, sklearn_layers)
    gap = (peaks[None] - peaks["bfloat16"]).abs().max()
    return ProbeSpeed(date=datetime.date.today().isoformat(), threads=torch.get_num_threads(), task="subject_number",
                      n_examples=n_examples, n_tokens=n_tokens, layers=lm.cfg.n_layers, strengths=len(config.l2_grid),
                      bootstrap=config.bootstrap, runs=runs,
                      bfloat16_max_layer_difference_points=round(float(gap) * 100, 2), sklearn=sklearn)


# --- 2. the tasks ------------------------------------------------------------------------------


def one_task(lm: LensModel, name: str, results: Path, task_config: ProbeTaskConfig) -> ProbeTask:
    """One task's sweep: its peak layer, interval, control, selectivity and curves."""
    start = time.perf_counter()
    result = probe_task(lm, name, task_config=task_config)
    seconds = time.perf_counter() - start
    result.save(results / f"{name}.json")
    result.export(results / f"{name}.parquet")
    result.plot(results / f"{name}.png")
    peak = result.peak()
    layer = int(peak.layer)
    task = ProbeTask(
        peak_layer=layer, accuracy=float(peak.score),
        ci95=[float(result.metric("ci_low")[layer]), float(result.metric("ci_high")[layer])],
        control=float(peak.control), selectivity=float(peak.selectivity), majority=float(peak.baseline),
        n_train=result.n_train, n_val=result.n_val, n_test=result.n_test, seconds=round(seconds, 1),
        per_layer=result.metric("score").tolist(), control_per_layer=result.metric("control").tolist(),
    )
    print(f"{name:15s} peak layer {layer}: {task['accuracy']:.3f} [{task['ci95'][0]:.3f}, {task['ci95'][1]:.3f}], "
          f"control {task['control']:.3f}, selectivity {task['selectivity']:+.3f}, majority {task['majority']:.3f}, "
          f"{task['n_train']}/{task['n_val']}/{task['n_test']}, {seconds:.1f} s")
    return task


def tasks(run: harness.Run, lm: LensModel) -> dict[str, ProbeTask]:
    results = harness.QUICK / "probes" if run.quick else run.args.results
    results.mkdir(parents=True, exist_ok=True)
    # --quick draws 60 examples per task (the toy model's check); the tasks' own sizes otherwise
    task_config = ProbeTaskConfig(n_examples=60 if run.quick else None)
    cache = run.cache(exclude=["results", "n_examples", "sklearn_layers", "skip_speed", "skip_tasks"])
    return {name: cache.get(name, lambda name=name: one_task(lm, name, results, task_config))
            for name in PROBE_TASKS.names()}


def main() -> None:
    run = harness.start(__doc__, __file__, threads=2, flags=add_flags)
    args = run.args
    lm = load_model(args.model)
    lm.encode("warm up the tokenizer")
    data: ProbesData = harness.read_json(run.out, {})
    if not args.skip_speed:
        with run.timed("speed"):
            data["speed"] = speed(lm, 200 if run.quick else args.n_examples, args.sklearn_layers)
    if not args.skip_tasks:
        with run.timed("tasks"):
            data.update(model=lm.name, site="resid_post", split="60/20/20, seed 0",
                        date=datetime.date.today().isoformat(), threads=torch.get_num_threads(), tasks=tasks(run, lm))
    data.pop("timings", None)  # the harness writes this run's
    run.write(data)


if __name__ == "__main__":
    main()
