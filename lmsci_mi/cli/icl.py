"""`lmsci-mi icl kernel|vectors|regression`: in-context learning (issue 39). Kernel-regression heads
(Han et al. 2023), task and function vectors (Hendel et al. 2023; Todd et al. 2024) and the
transformer that learns regression in context (Garg et al. 2022), each with its flags built from
its configs; the tour step finds one task's kernel-regression heads."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lmsci_mi.cli.common import (
    add_config_args,
    add_model_args,
    add_output_args,
    config_from_args,
    load_from_args,
    write_outputs,
)
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.errors import UserInputError
from lmsci_mi.icl import (
    ICL_CLASSIFICATION_TASKS,
    ICL_PAIR_TASKS,
    ICL_VECTOR_METHODS,
    ICLPromptConfig,
    ICLPromptSet,
    ICLRegressionConfig,
    ICLTask,
    KernelRegressionConfig,
    KernelRegressionHeads,
    KernelRegressionTable,
    choose_kr_heads,
    evaluate_regression,
    icl_gain_recovery,
    icl_prompts,
    kernel_regression_heads,
    kr_table,
    load_icl_task,
    load_regression_model,
    regression_folder,
)
from lmsci_mi.model import LensModel
from lmsci_mi.sites import Head
from lmsci_mi.stats import Interval

__all__ = [
    "TOUR_KERNEL",
    "TOUR_PROMPTS",
    "TOUR_TASK",
    "kernel_lines",
    "kernel_regression_report",
    "register",
    "tour_kernel_inputs",
    "tour_steps",
]

TOUR_TASK = "sentiment"
TOUR_PROMPTS = ICLPromptConfig(n_demonstrations=4, n_prompts=16)
"""The tour's draw: 16 dev and 16 held-out prompts of 4 demonstrations (about 75 SmolLM2 tokens
each), enough to show the heads and the interval they come with, in seconds."""
TOUR_KERNEL = KernelRegressionConfig(pearson=False)
"""The tour skips Pearson r: its predicted similarity needs a standalone run of every item."""


def register(commands: Any) -> None:
    """Add `icl` and its three analyses to the parser; flags come from the configs."""
    icl = commands.add_parser(
        "icl", help="in-context learning: kernel-regression heads, task and function vectors, "
        "a transformer that learns regression in context")
    kinds = icl.add_subparsers(dest="icl_kind", required=True, metavar="KIND")
    _register_kernel(kinds)
    _register_vectors(kinds)
    _register_regression(kinds)


def _register_kernel(kinds: Any) -> None:
    kernel = kinds.add_parser(
        "kernel",
        help="kernel-regression heads of a classification task (Han et al. 2023): chosen on dev "
        "prompts, reported on held-out ones",
        description="Every head's kernel-regression prediction on a task's dev and held-out ICL "
        "prompts; the best head of each weighting is chosen on dev and reported on held-out "
        "beside the model's ICL accuracy and the baseline kernel regression, with 95 % Wilson "
        "intervals. --out, --plot, --export and --html write the held-out result (its plot is the "
        "head map).",
    )
    add_model_args(kernel)
    kernel.add_argument(
        "--task", default=TOUR_TASK,
        help=f"a classification task: {', '.join(ICL_CLASSIFICATION_TASKS)} (default {TOUR_TASK})",
    )
    kernel.add_argument(
        "--select-by", choices=("agreement", "accuracy"), default="agreement",
        help="how dev chooses the best heads: agreement with the model's ICL answer (the paper's "
        "Table 2) or accuracy against gold (default: agreement)",
    )
    add_output_args(kernel)
    # zero_shot asks for prompts without demonstrations, which kernel regression cannot read.
    add_config_args(kernel.add_argument_group("prompts (ICLPromptConfig)"), ICLPromptConfig, skip=("zero_shot",))
    add_config_args(kernel.add_argument_group("kernel regression (KernelRegressionConfig)"), KernelRegressionConfig)
    kernel.set_defaults(run=_run_kernel)


def _register_vectors(kinds: Any) -> None:
    vectors = kinds.add_parser(
        "vectors",
        help="task vectors (Hendel et al. 2023) or function vectors (Todd et al. 2024): the share "
        "of the ICL gain recovered in zero-shot prompts by layer, against a random vector",
    )
    methods = vectors.add_subparsers(dest="icl_method", required=True, metavar="METHOD")
    for method in ICL_VECTOR_METHODS:
        parser = methods.add_parser(
            method.name,
            help=method.description,
            description=f"{method.description}. The layer is chosen on dev prompts and reported on "
            "held-out ones with 95 % bootstrap intervals; --out, --plot, --export and --html write "
            "the recovery curves. The defaults are the paper code's.",
        )
        add_model_args(parser)
        parser.add_argument(
            "--task", default="antonyms",
            help=f"a task: {', '.join(ICL_PAIR_TASKS)}, facts:RELATION, or a classification task "
            "whose label words are one token in the method's format (default antonyms)",
        )
        add_output_args(parser)
        add_config_args(parser.add_argument_group(f"{method.name} ({method.config_type.__name__})"),
                        method.config_type)
        parser.set_defaults(run=_run_vectors)


def _register_regression(kinds: Any) -> None:
    regression = kinds.add_parser(
        "regression",
        help="train (or load from the cache) the transformer that learns linear regression in "
        "context, and compare its error with least squares at n = 2d",
        description="Trains the regression GPT of the flags on the CPU (cached by its config; a "
        "stopped run resumes), then compares its squared error per number of in-context examples "
        "with least squares, ridge, one step of gradient descent, k-nearest neighbours and "
        "averaging on held-out prompts. The defaults train 10,000 steps (about 20 min at 1 "
        "thread); --out, --plot, --export and --html write the error curves.",
    )
    regression.add_argument("--prompts", type=int, default=1000,
                            help="held-out prompts the errors average over (default 1000)")
    regression.add_argument("--retrain", action="store_true", help="train even when a model is cached")
    regression.add_argument("--no-train", action="store_true",
                            help="use a cached model only: an error when none is cached")
    regression.add_argument("--threads", type=int, default=None,
                            help="torch threads while training (default: torch's setting)")
    add_output_args(regression)
    add_config_args(regression.add_argument_group("model and training (ICLRegressionConfig)"),
                    ICLRegressionConfig)
    regression.set_defaults(run=_run_regression)


# ------------------------------------------------------------------------------ kernel


def _task(name: str, *, classification: bool = False) -> ICLTask:
    """The named task, checked before any model loads (an unknown name lists the bundled ones)."""
    task = load_icl_task(name)
    if classification and not task.is_classification:
        raise UserInputError(
            f"--task {name}: kernel regression votes among labels, so it needs a classification "
            f"task: {', '.join(ICL_CLASSIFICATION_TASKS)}"
        )
    return task


def kernel_regression_report(
    lm: LensModel, prompts: dict[str, ICLPromptSet], config: KernelRegressionConfig,
    select_by: str = "agreement",
) -> tuple[dict[str, KernelRegressionHeads], KernelRegressionTable]:
    """One task's kernel-regression heads on its ``"dev"`` and ``"held_out"`` prompt sets, the best
    head of each weighting chosen on dev, and the held-out table (the command's and the tour's
    analysis). Reads the model only."""
    runs = {split: kernel_regression_heads(lm, prompts[split], config) for split in ("dev", "held_out")}
    task = prompts["dev"].task.name
    choice = choose_kr_heads({task: runs["dev"]}, select_by)  # type: ignore[arg-type]
    return runs, kr_table(choice, {task: runs["held_out"]})


def _interval(estimate: float, low: float, high: float, digits: int = 2) -> str:
    return f"{estimate:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _share(cell: Interval) -> str:
    return _interval(cell.estimate, cell.low, cell.high)


def kernel_lines(table: KernelRegressionTable, held_out: KernelRegressionHeads, n_dev: int) -> list[str]:
    """The held-out figures as lines: ICL accuracy, the baseline, and per weighting the dev-chosen
    head's accuracy and agreement with the model (with Pearson r when it was computed)."""
    task = held_out.task
    lines = [
        f"{task} on {table.meta.model}: heads chosen on {n_dev} dev prompts (by {table.choice['select_by']}), "
        f"reported on {held_out.n_prompts} held-out prompts; share of prompts [95 % Wilson interval]",
        f"  {'ICL accuracy of the model':<38} {_share(table.cell('icl', task))}",
        f"  {'KR on ' + held_out.similarity + ' similarity':<38} {_share(table.cell('baseline', task))}",
    ]
    has_pearson = held_out.predicted_similarity.numel() > 0
    for weighting in held_out.weightings:
        head = table.heads[table.axis_labels(0).index(f"task_best:{weighting}")][0]
        line = (f"  {f'best head, {weighting} weighting: {head}':<38} "
                f"{_share(table.cell(f'task_best:{weighting}', task))}, agreement with ICL "
                f"{_share(table.cell(f'task_best:{weighting}:agreement', task))}")
        if has_pearson:
            chosen = Head.parse(head)
            r = held_out.pearson("logit")[held_out.axis_labels(2).index(str(chosen.layer)), chosen.head]
            line += f", Pearson r {float(r):.2f}"
        lines.append(line)
    if has_pearson:
        lines.append("  (Pearson r: a demonstration's attention logit vs the predicted similarity, §5.3)")
    return lines


def _run_kernel(args: argparse.Namespace) -> int:
    task = _task(args.task, classification=True)
    prompt_config = config_from_args(ICLPromptConfig, args)
    config = config_from_args(KernelRegressionConfig, args)
    lm = load_from_args(args)
    # Both splits are drawn (and their label words checked) before the first forward pass.
    prompts = {split: icl_prompts(lm, task, prompt_config, split=split) for split in ("dev", "held_out")}
    runs, table = kernel_regression_report(lm, prompts, config, args.select_by)
    print("\n".join(kernel_lines(table, runs["held_out"], len(prompts["dev"]))))
    write_outputs(runs["held_out"], args)
    return 0


# ------------------------------------------------------------------------------ vectors


def _run_vectors(args: argparse.Namespace) -> int:
    method = ICL_VECTOR_METHODS.get(args.icl_method)
    task = _task(args.task)
    config = config_from_args(method.config_type, args)
    lm = load_from_args(args)
    result = icl_gain_recovery(lm, task, method.name, config)
    print(result.summary())
    write_outputs(result, args)
    return 0


# ------------------------------------------------------------------------------ regression


def _run_regression(args: argparse.Namespace) -> int:
    if args.prompts < 2:
        raise UserInputError(f"--prompts {args.prompts}: the intervals need at least 2 held-out prompts")
    if args.threads is not None and args.threads < 1:
        raise UserInputError(f"--threads {args.threads}: give 1 or more")
    if args.retrain and args.no_train:
        raise UserInputError("--retrain trains and --no-train forbids it: give one of them")
    config = config_from_args(ICLRegressionConfig, args)
    folder = regression_folder(config)
    cached = (folder / "record.json").is_file() and not args.retrain
    if not cached and not args.no_train:
        print(f"training the regression transformer ({config.steps:,} steps; cached in {folder}, "
              "a stopped run resumes)", flush=True)
    model, record = load_regression_model(config, train=not args.no_train, retrain=args.retrain,
                                          threads=args.threads)
    run = record["run"]
    print(f"{'cached' if cached else 'trained'}: {run['steps']:,} steps in {run['seconds']:.1f} s "
          f"({run['threads']} thread{'s' * (run['threads'] != 1)}, {run['device']})")
    evaluation = evaluate_regression(model, config, n_prompts=args.prompts, n_dev=args.prompts)
    n = min(2 * config.d, config.n_points - 1)  # n = 2d, or the most examples a prompt holds
    print(f"squared error / d at n = {n} examples (d = {config.d}, noise σ = {config.noise_std:g}), "
          f"mean over {args.prompts} held-out prompts [95 % bootstrap interval]:")
    for series in evaluation.errors.axis_labels(0):
        print(f"  {series:<14} {_interval(*evaluation.errors.at(series, n), digits=3)}")
    ratio, ridge = evaluation.error_ratio(n), evaluation.error_ratio(n, "ridge")
    print(f"model / least squares at n = {n}: {_share(ratio)} (paired bootstrap; at most 1.2 is "
          f"within 20 %; ridge / least squares {_share(ridge)})")
    write_outputs(evaluation.errors, args)
    return 0


# ------------------------------------------------------------------------------ the tour


def tour_steps() -> list[TourStep]:
    """Steps this feature adds to `lmsci-mi tour` (see lmsci_mi.cli.tour)."""
    return [
        TourStep(
            "icl_kernel",
            "In-context learning: kernel-regression heads and the model's ICL accuracy",
            _step_kernel,
            "from lmsci_mi.icl import ICLPromptConfig, KernelRegressionConfig, icl_prompts, "
            "kernel_regression_heads; kernel_regression_heads(lm, icl_prompts(lm, 'sentiment', "
            "ICLPromptConfig(n_demonstrations=4, n_prompts=16), split='held_out'), "
            "KernelRegressionConfig(pearson=False))",
            # 2 × 16 prompts of about 75 tokens (2.4k tokens, some 0.5 TFLOP on SmolLM2), and no
            # Pearson runs: an estimate; benchmarks/tour.py measures it.
            seconds=12,
        ),
    ]


def tour_kernel_inputs(lm: LensModel) -> dict[str, ICLPromptSet]:
    """The tour's prompt sets: :data:`TOUR_TASK`'s dev and held-out prompts of :data:`TOUR_PROMPTS`."""
    return {split: icl_prompts(lm, TOUR_TASK, TOUR_PROMPTS, split=split) for split in ("dev", "held_out")}


def _step_kernel(lm: LensModel, out_dir: Path) -> StepOutput:
    """One task's kernel-regression heads, chosen on dev and reported on held-out."""
    prompts = tour_kernel_inputs(lm)
    runs, table = kernel_regression_report(lm, prompts, TOUR_KERNEL)
    held = runs["held_out"]
    icl = table.cell("icl", TOUR_TASK)
    best = {w: (table.heads[table.axis_labels(0).index(f"task_best:{w}")][0], table.cell(f"task_best:{w}", TOUR_TASK))
            for w in held.weightings}
    summary = (
        f"{TOUR_TASK}, {held.n_prompts} held-out prompts: ICL accuracy {icl.estimate:.2f}; best KR head "
        + ", ".join(f"{w} {head} ({cell.estimate:.2f})" for w, (head, cell) in best.items())
        + f"; {held.similarity} baseline {table.cell('baseline', TOUR_TASK).estimate:.2f}"
    )
    text = "\n".join([
        *kernel_lines(table, held, len(prompts["dev"])),
        "",
        "benchmarks/icl_kernel.py runs every task, with Pearson r, on 60 prompts per split (docs/icl.md).",
    ])
    return StepOutput(summary, {"icl_kernel_heads": held}, text=text)
