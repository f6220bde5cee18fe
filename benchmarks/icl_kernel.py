"""Kernel-regression heads (Han, Wang, Zhao & Ji, arXiv:2305.12766, §5; the tutorial's "Attention Also
Explains In-Context Learning") on the bundled ICL classification tasks: per task, the model's ICL
accuracy, the dev-chosen best heads' kernel-regression accuracy under the paper's weighting (largest
attention in [x_i, y_i]) and the tutorial's (attention on the label token), their agreement with the
model's own answer, and a baseline kernel regression on an offline similarity, on held-out prompts
with 95% Wilson intervals; the attention-on-labels map and Pearson r of attention logits against the
predicted similarity P(o|x_test)ᵀP(o|x_i).

    PYTHONPATH=. python benchmarks/icl_kernel.py --model smollm2-135m --threads 1   # docs/data/icl_kernel_smollm2-135m.json
    PYTHONPATH=. python benchmarks/icl_kernel.py --model gemma3-270m --threads 1
    PYTHONPATH=. python benchmarks/icl_kernel.py --quick                             # toy-2l, seconds (out/quick/)

Each task's dev and held-out sets are cached as soon as they are done (``run.cache``), so a killed
run resumes at the next task. Writes the figure docs/img/icl_kernel_<model>.png (``--img-dir``).

Default size: 60 dev and 60 held-out prompts per task, 8 demonstrations (720 prompts, about 79k
tokens for SmolLM2's tokenizer, 109 per prompt on average). At about 0.21 GFLOP per token (SmolLM2's
106 M non-embedding weights; Gemma 3 270M's 100 M are alike) and about 30 GFLOP/s of forward pass at
one thread (a 1-thread matmul of SmolLM2's MLP shape ran at 77 GFLOP/s on the shared machine; a
forward pass reaches roughly 40% of that), that is about 9 minutes per model, plus the standalone
runs of Pearson's predicted similarity (about 9k tokens). The toy's own time says nothing of this
(a 2-layer d_model 64 model is overhead-bound); ``seconds_per_task`` in the data file gives the
measured figure.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import harness
import torch
from doc_tables.schemas.icl_kernel import HeadMap, ICLKernelData, KRRow, MajorityAnswer, QuotedTable

from lmsci_mi import load_model
from lmsci_mi.icl import (
    ICL_CLASSIFICATION_TASKS,
    ICLPromptConfig,
    KernelRegressionConfig,
    KernelRegressionHeads,
    KernelRegressionTable,
    choose_kr_heads,
    icl_prompts,
    kernel_regression_heads,
    kr_table,
)
from lmsci_mi.sites import Head

PAPER = "Han, Wang, Zhao & Ji, 'Explaining Emergent In-Context Learning as Kernel Regression', arXiv:2305.12766"
TUTORIAL = ("Han & Ji, 'The Quest for A Science of Language Models' (AAAI-25 tutorial), section 'Attention "
            "Also Explains In-Context Learning'")
QUICK = {"model": "toy-2l", "tasks": ["parity", "sentiment"], "n_prompts": 6, "n_demonstrations": 4}
SIMILARITY_NOTE = (
    "The baseline kernel regression weighs each demonstration by a similarity of x_test and x_i that "
    "needs no hub: by default the cosine of character 3-gram counts. The tutorial's baseline rows use "
    "sentence-embedding models (all-MiniLM-L6-v2, bert-base-nli-mean-tokens) that are not available "
    "offline, on other tasks and another model, so those rows are not comparable with ours."
)
GPTJ_ICL = [0.805, 0.383, 0.671, 0.539, 0.519, 0.542]
QUOTED_TASKS = ["sst2", "mnli", "rotten-tomatoes", "tweet_eval (hate)", "tweet_eval (irony)", "tweet_eval (offensive)"]
QUOTED = {
    "tutorial": QuotedTable(
        source=TUTORIAL + ", its KR table (reference/tutorial_tables.md)",
        setting="GPT-J-6B; accuracy; how the heads were chosen and on which items is not stated",
        tasks=QUOTED_TASKS,
        rows={"GPT-J-6B ICL": GPTJ_ICL,
              "all-MiniLM-L6-v2 KR": [0.503, 0.321, 0.478, 0.548, 0.491, 0.588],
              "bert-base-nli-mean-tokens KR": [0.523, 0.325, 0.502, 0.545, 0.479, 0.597],
              "task-specific best head KR": [0.789, 0.974, 0.692, 0.560, 0.584, 0.560],
              "overall best head KR": [0.766, 0.808, 0.648, 0.462, 0.446, 0.462]},
    ),
    "paper_table2": QuotedTable(
        source=PAPER + ", Table 2 (§5.5; reference/phase4_methods.md §6)",
        setting=("GPT-J-6B; the head most in agreement with the model's predictions on 700 validation "
                 "items, evaluated on 300 held-out items (span-max weighting)"),
        tasks=QUOTED_TASKS,
        rows={"GPT-J ICL": GPTJ_ICL,
              "ICL output reconstruction (agreement)": [0.797, 0.597, 0.683, 0.713, 0.722, 0.753],
              "reconstructed performance (accuracy)": [0.750, 0.360, 0.527, 0.587, 0.522, 0.513]},
    ),
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", nargs="+", default=list(ICL_CLASSIFICATION_TASKS), choices=ICL_CLASSIFICATION_TASKS)
    parser.add_argument("--n-prompts", type=int, default=60, help="prompts per split and task")
    parser.add_argument("--n-demonstrations", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="seed of the demonstrations and their order")
    parser.add_argument("--select-by", default="agreement", choices=("agreement", "accuracy"),
                        help="dev criterion of the best heads (agreement with the model: the paper's Table 2)")
    parser.add_argument("--img-dir", type=Path, default=Path("docs/img"), help="where the figure goes")
    KernelRegressionConfig.add_arguments(parser, skip=("layers",))


def data_file(args: argparse.Namespace) -> Path:
    return harness.DATA / f"icl_kernel_{QUICK['model'] if args.quick else args.model}.json"


def settings(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with ``--quick``'s toy model, tasks and sizes in place of the defaults."""
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    return args


def head_map(what: str, values: torch.Tensor, layers: list[str]) -> HeadMap:
    flat = torch.nan_to_num(values.float(), nan=-float("inf")).flatten()
    top = flat.topk(min(5, flat.numel())).indices.tolist()
    n_heads = values.shape[1]
    return HeadMap(what=what, layers=layers, values=[[round(float(v), 4) for v in row] for row in values],
                   top=[[str(Head(int(layers[i // n_heads]), i % n_heads)), round(float(flat[i]), 4)] for i in top])


def maps(held_out: dict[str, KernelRegressionHeads], config: KernelRegressionConfig) -> dict[str, HeadMap]:
    """The head maps, each the mean over tasks of the held-out prompts (no choice is made on them)."""
    results = list(held_out.values())
    layers = results[0].axis_labels(2)
    out = {"agreement_span_max": head_map(
        "KR agreement with the model's ICL answer, span-max weighting",
        torch.stack([r.values[r.weightings.index("span_max"), 1] for r in results]).mean(0), layers)}
    if "label" in config.weightings:
        out["label_attention"] = head_map(
            "attention mass on the demonstrations' label tokens from the test position",
            torch.stack([r.label_attention() for r in results]).mean(0), layers)
    if config.pearson:
        out["pearson"] = head_map(
            "Pearson r of a demonstration's largest attention logit in [x_i, y_i] vs P(o|x_test)ᵀP(o|x_i)",
            torch.stack([r.pearson("logit") for r in results]).nanmean(0), layers)
    return out


def draw(path: Path, model: str, head_maps: dict[str, HeadMap]) -> Path:
    from matplotlib.figure import Figure

    from lmsci_mi.viz.plots import heatmap, save_figure

    order = [k for k in ("label_attention", "pearson", "agreement_span_max") if k in head_maps]
    titles = {"label_attention": "attention on label tokens", "pearson": "Pearson r: attention logit vs similarity",
              "agreement_span_max": "KR agreement with ICL (span max)"}
    first = head_maps[order[0]]
    n_layers, n_heads = len(first["values"]), len(first["values"][0])
    fig = Figure(figsize=(len(order) * max(3.6, 0.45 * n_heads + 2), max(3.2, 0.22 * n_layers + 1.8)))
    for ax, key in zip(fig.subplots(1, len(order), squeeze=False)[0], order, strict=True):
        heatmap(ax, torch.tensor(head_maps[key]["values"]), row_labels=first["layers"],
                col_labels=[f"H{h}" for h in range(n_heads)], row_name="layer", col_name="head", title=titles[key])
    fig.suptitle(f"{model}: kernel-regression heads, held-out prompts, mean over tasks", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def table_rows(table: KernelRegressionTable) -> list[KRRow]:
    tasks = table.axis_labels(1)
    rows = []
    for r, key in enumerate(table.axis_labels(0)):
        cells = {t: {"estimate": round(float(table.values[r, k]), 4), "low": round(float(table.low[r, k]), 4),
                     "high": round(float(table.high[r, k]), 4), "n": int(table.n[k]), "head": table.heads[r][k]}
                 for k, t in enumerate(tasks)}
        rows.append(KRRow(key=key, against="model" if key.endswith(":agreement") else "gold", cells=cells))
    return rows


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags, out=data_file)
    args = settings(run.args)
    lm = load_model(args.model)
    prompt_config = ICLPromptConfig(n_demonstrations=args.n_demonstrations, n_prompts=args.n_prompts, seed=args.seed)
    config = KernelRegressionConfig.from_args(args, layers=None)
    cache = run.cache(exclude=["tasks", "img_dir", "select_by"])
    runs: dict[str, dict[str, KernelRegressionHeads]] = {"dev": {}, "held_out": {}}
    seconds = {}
    earlier = harness.read_json(run.out, {}).get("seconds_per_task", {})
    for task in args.tasks:
        began = time.perf_counter()
        for split in runs:
            runs[split][task] = cache.result(f"{task}-{split}", lambda task=task, split=split: kernel_regression_heads(
                lm, icl_prompts(lm, task, prompt_config, split=split), config))
        # The seconds of the run that computed the task, kept beside its results (a rerun reads them;
        # results cached before the seconds were take theirs from the data file the run wrote).
        seconds[task] = cache.get(f"{task}-seconds", lambda began=began, task=task: earlier.get(
            task) or round(time.perf_counter() - began, 1))
        print(f"{task}: {seconds[task]} s")
    choice = choose_kr_heads(runs["dev"], args.select_by)
    table = kr_table(choice, runs["held_out"])
    print(table.summary(rows=20))
    head_maps = maps(runs["held_out"], config)
    figure = draw((harness.QUICK if run.quick else args.img_dir) / f"icl_kernel_{lm.name}.png", lm.name, head_maps)
    run.write(ICLKernelData(
        paper=PAPER, tutorial=TUTORIAL, model=lm.name, tasks=list(args.tasks),
        prompt_config=prompt_config.params(), kernel_config=config.params(),
        n_prompts={t: {s: runs[s][t].n_prompts for s in runs} for t in args.tasks},
        select_by=args.select_by, similarity_note=SIMILARITY_NOTE, rows=table_rows(table), choice=choice.to_dict(),
        quoted=QUOTED, figures={"heads": str(figure)}, seconds_per_task=seconds,
        model_answers={t: majority_answer(runs["held_out"][t]) for t in args.tasks}, **head_maps,
    ), ensure_ascii=False)


def majority_answer(result: KernelRegressionHeads) -> MajorityAnswer:
    """The model's most frequent ICL answer on the prompts and its share: where one answer is nearly
    all, a head agreeing with the model says little (a head voting that label agrees by default)."""
    answers = result.model_predictions()
    counts = torch.bincount(answers, minlength=len(result.label_names))
    top = int(counts.argmax())
    return MajorityAnswer(label=result.label_names[top], share=round(float(counts[top]) / len(answers), 4),
                          n=len(answers))


if __name__ == "__main__":
    main()
