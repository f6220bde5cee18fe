"""`lmsci-mi models` and `lmsci-mi tour`, the guided run of every analysis on the bundled model.

The tour is the README's main job. It loads the model once and runs each feature's tour steps in
order, printing a short account of each and writing results and PNGs under ``--out-dir``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lmsci_mi.cli.common import add_model_args, load_from_args
from lmsci_mi.loading import list_models
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type

TourStep = Callable[[LensModel, Path], str]
"""One step of the tour: runs an analysis, writes its files under the folder, returns a report."""

EIFFEL = "The Eiffel Tower is located in the city of"
PROMPTS = (EIFFEL, "The capital of Germany is", "When Mary and John went to the store, John gave a drink to")


def register(commands: Any) -> None:
    models = commands.add_parser("models", help="list the models and whether they load offline")
    models.set_defaults(run=_run_models)

    tour = commands.add_parser("tour", help="run every analysis on the bundled model")
    add_model_args(tour)
    tour.add_argument("--out-dir", type=Path, default=Path("out/tour"), help="where files go")
    tour.add_argument("--quick", action="store_true", help="only the core steps")
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

    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    lm = load_from_args(args)
    print(f"== Loaded {lm!r} from {lm.source} in {time.perf_counter() - start:.1f} s")
    steps: list[TourStep] = [_step_predictions, _step_attention_summary]
    if not args.quick:
        for feature in (circuits, heads, editing):
            steps.extend(feature.tour_steps())
    for step in steps:
        began = time.perf_counter()
        report = step(lm, args.out_dir)
        print(f"\n== {step.__doc__.strip().splitlines()[0] if step.__doc__ else step.__name__}"
              f" ({time.perf_counter() - began:.1f} s)")
        print(report)
    print(f"\nTour finished in {time.perf_counter() - start:.1f} s; files are in {args.out_dir}/")
    return 0


def _step_predictions(lm: LensModel, out_dir: Path) -> str:
    """What the model predicts next (top-5 tokens for three prompts)."""
    lines = []
    for prompt in PROMPTS:
        top = lm.top_tokens(prompt, k=5)
        shown = ", ".join(f"{label!r} {p:.2f}" for label, p in zip(top.labels[0], top.values.tolist(), strict=True))
        lines.append(f"{prompt!r} -> {shown}")
    return "\n".join(lines)


@result_type
class AttentionSummary(Result):
    """Per head, on one prompt: mean attention to the sink, to the previous token, to itself.

    ``values`` is ``[measure, layer, head]`` with measures ``sink``, ``previous``, ``self``.
    """


@torch.no_grad()
def attention_summary(lm: LensModel, prompt: str) -> AttentionSummary:
    """Where each head looks on ``prompt``, averaged over query positions after the first."""
    tokens = lm.to_tokens(prompt)
    with lm.hooks.capture(lambda name: name.endswith("hook_pattern")) as cap:
        lm(tokens)
    rows = []
    for layer in range(lm.cfg.n_layers):
        pattern = cap[f"blocks.{layer}.attn.hook_pattern"][0]  # [head, query, key]
        queries = torch.arange(1, pattern.shape[-1], device=pattern.device)
        sink = pattern[:, queries, 0].mean(-1)
        previous = pattern[:, queries, queries - 1].mean(-1)
        own = pattern[:, queries, queries].mean(-1)
        rows.append(torch.stack([sink, previous, own]))
    values = torch.stack(rows, dim=1).cpu()  # [measure, layer, head]
    return AttentionSummary(
        values=values,
        axes=("measure", "layer", "head"),
        labels=(("sink", "previous", "self"), (), ()),
        meta=lm.meta([prompt]),
    )


def _step_attention_summary(lm: LensModel, out_dir: Path) -> str:
    """A summary of the attention heads on the Eiffel prompt."""
    summary = attention_summary(lm, EIFFEL)
    summary.save(out_dir / "attention_summary.json")
    summary.plot(out_dir / "attention_summary.png")
    sink, previous, _ = summary.values
    n_heads = sink.numel()
    top_prev = torch.topk(previous.flatten(), 5)
    heads = [f"L{int(i) // sink.shape[1]}.H{int(i) % sink.shape[1]} ({v:.2f})"
             for v, i in zip(top_prev.values.tolist(), top_prev.indices, strict=True)]
    return (
        f"{(sink > 0.5).sum().item()} of {n_heads} heads put over half their attention on the "
        f"sink token (mean {sink.mean():.2f}).\n"
        f"Most previous-token-like heads: {', '.join(heads)}.\n"
        f"Heatmaps: {out_dir / 'attention_summary.png'}"
    )
