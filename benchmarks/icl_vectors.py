"""Task vectors (Hendel et al. 2023) and function vectors (Todd et al. 2024) per task: the share of
the ICL gain each recovers in zero-shot prompts by layer, against a random vector of the same norm
and operation, the layer chosen on dev and reported on held-out with 95 % intervals.

    OMP_NUM_THREADS=1 flock /work/model.lock env HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/icl_vectors.py --threads 1
    OMP_NUM_THREADS=1 flock /work/model.lock env HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/icl_vectors.py --threads 1 --model gemma3-270m
    PYTHONPATH=. python benchmarks/icl_vectors.py --quick --model toy-2l            # a check, under out/quick/

Tasks: antonyms, country_capital, present_past and the fact relation person_language (Hendel et
al.'s person -> language task). Each method runs with its paper's defaults
(``TaskVectorConfig()``: 5 demonstrations in ``example:{x}->{y}`` lines, 50 prompts per split, 2
dummy queries; ``FunctionVectorConfig()``: 10 demonstrations in ``Q:{x}\\nA:{y}`` lines, mean head
outputs over up to 100 clean dev prompts, indirect effects over 25 shuffled-label dev prompts, the
top 10 heads), on every layer. Each (task, method) result is cached as it finishes, and the
function vector's per-prompt indirect effects are cached inside it, so a stopped run resumes.

Sizing (SmolLM2, 30 layers × 9 heads): the indirect effects are 270 heads × 25 prompts, but the
sweep engine recomputes only the patched last token from the head's layer on, so they cost about
270 × 25 × 15 token-layers (~3k token-equivalents), under the 25 base runs of ~75 tokens (~2k
tokens). The other costs per task: the task vectors' 2 × 2 × 50 dummy prompts (~35 tokens each,
~7k tokens), the ICL baselines (2 × 50 × ~35 and 2 × ~60 × ~75 tokens, ~8k), the 100 clean
prompts' mean (~4k) and the curves (60 rows × ~110 prompts × 1 token × ~15 layers). About 25k
tokens per task, 100k per model: some 10–15 minutes at 1 thread. Run one task first
(``--tasks antonyms``) and scale from its ``seconds``.

Writes docs/data/icl_vectors_<model>.json (schema: doc_tables/schemas/icl_vectors.py) and
docs/img/icl_vectors_<model>.png (the recovery curves).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import harness
from doc_tables.schemas.icl_vectors import ICLVectorCurve, ICLVectorEntry, ICLVectorsData

from lmsci_mi import LensModel, load_model
from lmsci_mi.icl import (
    ICL_VECTOR_METHODS,
    FunctionVectorConfig,
    ICLGainRecovery,
    TaskVectorConfig,
    VectorRecovery,
)
from lmsci_mi.viz.plots import save_figure

TASKS = ("antonyms", "country_capital", "present_past", "facts:person_language")
PAPERS = {"task_vector": "Hendel et al. 2023 (arXiv:2310.15916)",
          "function_vector": "Todd et al. 2024 (arXiv:2310.15213)"}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--methods", default=",".join(ICL_VECTOR_METHODS.names()))
    parser.add_argument("--img-dir", type=Path, default=Path("docs/img"), help="where the figure goes")


def data_file(args: argparse.Namespace) -> Path:
    return harness.DATA / f"icl_vectors_{args.model}.json"


def configs(quick: bool, cache_dir: Path) -> dict[str, Any]:
    """Each method's config: the papers' defaults, or a few prompts for --quick."""
    if quick:
        return {"task_vector": TaskVectorConfig(n_prompts=4),
                "function_vector": FunctionVectorConfig(n_mean_prompts=4, n_aie_prompts=2, n_prompts=4,
                                                        n_top_heads=3, cache_dir=str(cache_dir))}
    return {"task_vector": TaskVectorConfig(), "function_vector": FunctionVectorConfig(cache_dir=str(cache_dir))}


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 6)


def _clean(record: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: a share where ICL gains nothing is null."""
    return {k: _finite(v) if isinstance(v, float) else v for k, v in record.items()}


def curve(recovery: VectorRecovery) -> ICLVectorCurve:
    shares = recovery.shares()
    return ICLVectorCurve(
        n=len(recovery.queries), zero_shot=float(recovery.zero_shot.mean()), icl=float(recovery.icl.mean()),
        vector=[round(float(x), 6) for x in recovery.accuracy("vector")],
        random=[round(float(x), 6) for x in recovery.accuracy("random")],
        share=[_finite(float(x)) for x in shares[0]], random_share=[_finite(float(x)) for x in shares[1]],
    )


def entry(result: ICLGainRecovery, seconds: float) -> ICLVectorEntry:
    report = result.report().to_dict()
    report = {k: _clean(v) if isinstance(v, dict) else v for k, v in report.items()}
    out = ICLVectorEntry(report=report,  # type: ignore[typeddict-item]
                         layers=list(result.dev.layers),
                         curves={"dev": curve(result.dev), "held_out": curve(result.held_out)},
                         seconds=round(seconds, 1))
    if "heads" in result.meta.params:
        out["heads"] = list(result.meta.params["heads"])  # type: ignore[arg-type]
    return out


def figure(results: dict[str, dict[str, ICLGainRecovery]], model: str, path: Path) -> None:
    from matplotlib.figure import Figure

    tasks = list(results)
    methods = sorted({m for per in results.values() for m in per})
    fig = Figure(figsize=(4.2 * len(methods), 2.6 * len(tasks)))
    axes = fig.subplots(len(tasks), len(methods), squeeze=False)
    for i, task in enumerate(tasks):
        for j, method in enumerate(methods):
            ax = axes[i][j]
            if method not in results[task]:
                ax.set_visible(False)
                continue
            result = results[task][method]
            result.draw_curves(ax)
            n = len(result.held_out.queries)
            ax.set_title(f"{task}: {method.replace('_', ' ')} (L{result.best_layer}, held-out n={n})", fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"Share of the ICL gain recovered by layer — {model}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def measure(lm: LensModel, task: str, method: str, config: Any, cache: harness.ItemCache) -> tuple[ICLGainRecovery, ICLVectorEntry]:
    began = time.perf_counter()
    result = cache.result(f"{method}-{task}", lambda: ICL_VECTOR_METHODS.get(method).function(lm, task, config))
    record = cache.get(f"{method}-{task}-entry", lambda: entry(result, time.perf_counter() - began))
    print(result.summary(), flush=True)
    return result, record  # type: ignore[return-value]


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags, out=data_file)
    args = run.args
    with run.timed("load"):
        lm = load_model(args.model)
    cache = run.cache(exclude=["tasks", "methods", "img_dir"])
    chosen = configs(run.quick, cache.folder / "indirect_effects")
    tasks, methods = args.tasks.split(","), args.methods.split(",")
    results: dict[str, dict[str, ICLGainRecovery]] = {}
    entries: dict[str, dict[str, ICLVectorEntry]] = {}
    for task in tasks:
        for method in methods:
            with run.timed(f"{method} {task}"):
                result, record = measure(lm, task, method, chosen[method], cache)
            results.setdefault(task, {})[method] = result
            entries.setdefault(task, {})[method] = record
    run.write(ICLVectorsData(
        model=args.model, tasks=tasks,
        methods={m: {"paper": PAPERS[m], "operation": "replace" if m == "task_vector" else "add",
                     "config": chosen[m].params()} for m in methods},
        results=entries,
    ))
    image = (harness.QUICK if run.quick else args.img_dir) / f"icl_vectors_{args.model}.png"
    figure(results, args.model, image)
    print(f"drew {image}")


if __name__ == "__main__":
    main()
