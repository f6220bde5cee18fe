"""`lmsci-mi models` and `lmsci-mi tour`, the guided run of every analysis on the bundled model.

The tour is the README's main job. It loads the model once and runs each feature's tour steps in
order, printing a short account of each and writing results and PNGs under ``--out-dir``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

import torch

from lmsci_mi.circuits.attention import attention_summary
from lmsci_mi.cli.common import add_config_args, add_model_args, config_from_args, load_from_args
from lmsci_mi.config import Config, config
from lmsci_mi.loading import list_models
from lmsci_mi.model import LensModel
from lmsci_mi.sites import Head

TourStep = Callable[[LensModel, Path], str]
"""One step of the tour: runs an analysis, writes its files under the folder, returns a report."""

EIFFEL = "The Eiffel Tower is located in the city of"
PROMPTS = (EIFFEL, "The capital of Germany is", "When Mary and John went to the store, John gave a drink to")


@config
class TourConfig(Config):
    """What `lmsci-mi tour` runs and where its files go."""

    out_dir: str = field(default="out/tour", metadata={"help": "where the results and PNGs go"})
    quick: bool = field(default=False, metadata={"help": "only the core steps"})

    def validate(self) -> None:
        if not self.out_dir.strip():
            raise ValueError("out_dir must name a folder")


def register(commands: Any) -> None:
    models = commands.add_parser("models", help="list the models and whether they load offline")
    models.set_defaults(run=_run_models)

    tour = commands.add_parser("tour", help="run every analysis on the bundled model")
    add_model_args(tour)
    add_config_args(tour, TourConfig)
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
    from lmsci_mi.cli import circuits, editing, heads

    tour = config_from_args(TourConfig, args)
    out_dir = Path(tour.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    lm = load_from_args(args)
    print(f"== Loaded {lm!r} from {lm.source} in {time.perf_counter() - start:.1f} s "
          f"(sink {lm.sink!r})")
    steps: list[TourStep] = [_step_predictions, _step_attention_summary]
    if not tour.quick:
        for feature in (circuits, heads, editing):
            steps.extend(feature.tour_steps())
    for step in steps:
        began = time.perf_counter()
        report = step(lm, out_dir)
        print(f"\n== {step.__doc__.strip().splitlines()[0] if step.__doc__ else step.__name__}"
              f" ({time.perf_counter() - began:.1f} s)")
        print(report)
    print(f"\nTour finished in {time.perf_counter() - start:.1f} s; files are in {out_dir}/")
    return 0


def _step_predictions(lm: LensModel, out_dir: Path) -> str:
    """What the model predicts next (top-5 tokens for three prompts)."""
    lines = []
    for prompt in PROMPTS:
        top = lm.top_tokens(prompt, k=5)
        shown = ", ".join(f"{label!r} {p:.2f}" for label, p in zip(top.labels[0], top.values.tolist(), strict=True))
        lines.append(f"{prompt!r} -> {shown}")
    return "\n".join(lines)


def _step_attention_summary(lm: LensModel, out_dir: Path) -> str:
    """A summary of the attention heads on the Eiffel prompt."""
    summary = attention_summary(lm, EIFFEL)
    summary.save(out_dir / "attention_summary.json")
    summary.plot(out_dir / "attention_summary.png")
    sink, previous, _ = summary.values
    n_heads = sink.numel()
    top_prev = torch.topk(previous.flatten(), min(5, n_heads))
    heads = [f"{Head(int(i) // sink.shape[1], int(i) % sink.shape[1])} ({v:.2f})"
             for v, i in zip(top_prev.values.tolist(), top_prev.indices, strict=True)]
    first = f"sink token {lm.sink!r}" if lm.sink is not None else "first token (no sink)"
    return (
        f"{(sink > 0.5).sum().item()} of {n_heads} heads put over half their attention on the "
        f"{first} (mean {sink.mean():.2f}).\n"
        f"Most previous-token-like heads: {', '.join(heads)}.\n"
        f"Heatmaps: {out_dir / 'attention_summary.png'}"
    )
