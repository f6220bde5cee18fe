"""`lmsci-mi models` and `lmsci-mi tour`, the guided run of every analysis on the bundled model.

The tour is the README's main job. It loads the model once and runs each feature's tour steps in
order (lmsci_mi.cli.tour), each with a progress bar and a one-line summary, saves every result under
``--out-dir`` and writes one self-contained HTML report of them all.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import field
from pathlib import Path
from typing import Any

import torch

from lmsci_mi.circuits.attention import attention_summary
from lmsci_mi.cli.common import add_config_args, add_model_args, config_from_args, load_from_args
from lmsci_mi.cli.report import CircuitsView
from lmsci_mi.cli.tour import StepOutput, TourStep
from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError
from lmsci_mi.loading import list_models
from lmsci_mi.model import LensModel
from lmsci_mi.sites import Head

EIFFEL = "The Eiffel Tower is located in the city of"
PROMPTS = (
    EIFFEL,
    "The capital of Germany is",
    "When Mary and John went to the store, John gave a drink to",
)


@config
class TourConfig(Config):
    """What `lmsci-mi tour` runs and where its files go."""

    out_dir: str = field(default="out/tour", metadata={"help": "where the results and PNGs go"})
    quick: bool = field(default=False, metadata={"help": "only the quick steps (a few minutes)"})
    steps: str = field(
        default="",
        metadata={"help": "only these steps, comma-separated (e.g. 'rome,steer'; default: all)"},
    )
    report: str = field(
        default="",
        metadata={
            "help": "where to write the HTML report (default OUT_DIR/report.html; 'none': no report)"
        },
    )

    def validate(self) -> None:
        if not self.out_dir.strip():
            raise UserInputError("out_dir must name a folder")
        if (
            self.report
            and self.report != "none"
            and not self.report.lower().endswith((".html", ".htm"))
        ):
            raise UserInputError(f"report {self.report!r}: use a file ending in .html, or 'none'")

    def step_names(self) -> tuple[str, ...]:
        """The names in ``steps`` (empty: every step)."""
        return tuple(name.strip() for name in self.steps.split(",") if name.strip())

    def report_path(self) -> Path | None:
        """The report's path, or None for no report."""
        if self.report == "none":
            return None
        return Path(self.report) if self.report else Path(self.out_dir) / "report.html"


def register(commands: Any) -> None:
    models = commands.add_parser("models", help="list the models and whether they load offline")
    models.set_defaults(run=_run_models)

    tour = commands.add_parser("tour", help="run every analysis on the bundled model")
    add_model_args(tour)
    add_config_args(tour, TourConfig)
    tour.add_argument(
        "--list-steps",
        action="store_true",
        help="print the steps (name, title, quick, estimate_s, first_run) as JSON and exit; "
        "loads no model",
    )
    tour.set_defaults(run=_run_tour)


def _run_models(args: argparse.Namespace) -> int:
    rows = list_models()
    print(f"{'name':<22} {'offline':<8} {'cached':<7} source / description")
    for row in rows:
        print(
            f"{row.name:<22} {'yes' if row.available_offline else 'no':<8} "
            f"{'yes' if row.cached else 'no':<7} {row.source}: {row.description}"
        )
    return 0


def _run_tour(args: argparse.Namespace) -> int:
    from lmsci_mi.cli import _FEATURES
    from lmsci_mi.cli.tour import collect_steps, run_tour, steps_to_fail

    tour = config_from_args(TourConfig, args)
    steps = collect_steps(_FEATURES, quick=tour.quick, only=tour.step_names())
    if getattr(args, "list_steps", False):
        print(json.dumps([_step_record(step) for step in steps], indent=1, ensure_ascii=False))
        return 0
    steps_to_fail(steps)  # a bad LMSCI_MI_TOUR_FAIL is an error before anything runs
    out_dir = Path(tour.out_dir)
    report = tour.report_path()
    if report is not None and report.is_dir():
        raise IsADirectoryError(
            f"--report {report} is a folder; give a file, e.g. {report / 'report.html'}"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    lm = load_from_args(args)
    print(
        f"Loaded {lm!r} from {lm.source} in {time.perf_counter() - start:.1f} s (sink {lm.sink!r})"
    )
    return run_tour(lm, steps, out_dir, report=report, verbose=args.verbose)


def _step_record(step: TourStep) -> dict[str, Any]:
    """What ``--list-steps`` prints of a step (benchmarks/tour.py records it beside the timings)."""
    return {"name": step.name, "title": step.title, "quick": step.quick,
            "estimate_s": step.seconds, "first_run": step.first_run}


def tour_steps() -> list[TourStep]:
    """The core's steps of `lmsci-mi tour`: predictions and the attention heads at a glance."""
    return [
        TourStep(
            "predictions",
            "What the model predicts next",
            _step_predictions,
            'lm.top_tokens("The Eiffel Tower is located in the city of", k=5)',
            seconds=1,
            quick=True,
        ),
        TourStep(
            "attention_summary",
            "Attention heads at a glance: sink, previous-token and self heads",
            _step_attention_summary,
            "from lmsci_mi.circuits.attention import attention_summary; "
            'attention_summary(lm, "The Eiffel Tower is located in the city of")',
            seconds=1,
            quick=True,
        ),
    ]


def _step_predictions(lm: LensModel, out_dir: Path) -> StepOutput:
    """What the model predicts next (top-5 tokens for three prompts)."""
    results, lines, firsts = {}, [], []
    for prompt in PROMPTS:
        top = lm.top_tokens(prompt, k=5)
        # One result is saved and plotted; the text gives all three (three rank plots say little).
        results.setdefault("predictions_eiffel", top)
        pairs = list(zip(top.labels[0], top.values.tolist(), strict=True))
        lines.append(f"{prompt!r} -> " + ", ".join(f"{label!r} {p:.2f}" for label, p in pairs))
        firsts.append(f"{pairs[0][0]!r} ({pairs[0][1]:.2f})")
    summary = "Top next tokens: " + "; ".join(
        f"…{prompt.split()[-1]} → {first}" for prompt, first in zip(PROMPTS, firsts, strict=True)
    )
    return StepOutput(summary, results, text="\n".join(lines))


def _step_attention_summary(lm: LensModel, out_dir: Path) -> StepOutput:
    """A summary of the attention heads on the Eiffel prompt, and a view of the clearest ones."""
    from lmsci_mi.circuits.attention import attention_html

    summary = attention_summary(lm, EIFFEL)
    sink, previous, _ = summary.values
    n_heads = sink.numel()
    top_prev = torch.topk(previous.flatten(), min(5, n_heads))
    top_heads = [Head(int(i) // sink.shape[1], int(i) % sink.shape[1]) for i in top_prev.indices]
    heads = [
        f"{head} ({v:.2f})" for head, v in zip(top_heads, top_prev.values.tolist(), strict=True)
    ]
    first = f"sink token {lm.sink!r}" if lm.sink is not None else "first token (no sink)"
    text = (
        f"{(sink > 0.5).sum().item()} of {n_heads} heads put over half their attention on the "
        f"{first} (mean {sink.mean():.2f}).\n"
        f"Most previous-token-like heads: {', '.join(heads)}."
    )
    view = CircuitsView.from_html(
        attention_html(lm, EIFFEL, top_heads[:4]),
        caption=f"The four most previous-token-like heads on {EIFFEL!r} (hover a head to zoom)",
    )
    line = (
        f"{(sink > 0.5).sum().item()} of {n_heads} heads put most attention on the {first}; "
        f"top previous-token head {heads[0]}"
    )
    return StepOutput(line, {"attention_summary": summary}, text=text, views=[view])
