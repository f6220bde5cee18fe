"""A small language model trained here at a short context, where the failure beyond the training
length shows on this CPU (issue 40, item 5).

Trains the byte-level, Llama-shaped model of ``ShortLMConfig()`` (lmsci_mi/outliers/
short_context_lm.py: 4 layers, d_model 128, rotary positions, rows of 256 tokens of the standard
library's prose; cached under the lmsci-mi cache folder, keyed by its config; a stopped run resumes
from its last checkpoint), then on held-out documents writes docs/data/short_context_lm.json: the
training cost and loss curve, and the held-out NLL by position on rows of 8x the training length
(2,048 tokens) in position bins, each with a 95 % percentile-bootstrap interval over rows, and three
paired differences over rows against positions 128-255: positions 1-7 (the NLL falls with
position), 16-31 (the model uses context further back) and 1,536-2,047 (worse beyond the training
length). The Λ-mask's curve and the "starts to rise" rule are the length diagnostics'
(lmsci_mi/outliers/length.py, lambda_mask.py).

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/short_context_lm.py --threads 1
    PYTHONPATH=. python benchmarks/short_context_lm.py --quick     # a tiny model, 40 steps (out/quick/)
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

import harness
import torch
from doc_tables.schemas.short_context_lm import (
    Difference,
    PositionBins,
    ShortLMData,
    ShortLMTraining,
)

from lmsci_mi.model import LensModel
from lmsci_mi.outliers import ShortLMConfig, heldout_rows, load_short_context_lm
from lmsci_mi.stats import bootstrap_interval, paired_bootstrap_interval

QUICK = ShortLMConfig(n_layers=2, d_model=32, n_heads=2, n_key_value_heads=1, d_mlp=64, context=32,
                      steps=40, batch_size=8, warmup=5)
"""The --quick run's model: every section end to end in seconds, no claim about learning."""
CURVE_EVERY = 50
"""Steps per point of the stored loss curve."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--retrain", action="store_true", help="train even when cached")
    parser.add_argument("--rows", type=int, default=64,
                        help="held-out rows of 8x the training length (default 64; about 95 fit)")
    parser.add_argument("--batch", type=int, default=4, help="rows per forward pass (default 4)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--progress", action="store_true", help="show the training progress bar")
    parser.add_argument("--quiet-machine", action="store_true",
                        help="label the training cost as timed on a quiet machine (default: shared)")


def bin_edges(context: int, length: int) -> list[int]:
    """Target positions' bin edges: powers of two below the training length, the training length,
    then steps of 1.5x and 4/3x up to ``length`` (1, 2, 4, …, 128, 256, 384, 512, 768, 1024, 1536,
    2048 at 256 and 2048).

    >>> bin_edges(32, 256)
    [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256]
    """
    edges = [2**i for i in range(context.bit_length()) if 2**i < context] + [context]
    scale = context
    while edges[-1] < length:
        edges += [3 * scale // 2, 2 * scale]
        scale *= 2
    return sorted({min(e, length) for e in edges})


@torch.no_grad()
def position_nll(lm: LensModel, rows: torch.Tensor, batch: int) -> torch.Tensor:
    """``[row, position - 1]``: each target's NLL given the row before it (the model as it is)."""
    out = []
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch].to(lm.device)
        log_probs = lm(chunk).float().log_softmax(-1)[:, :-1]
        out.append(-log_probs.gather(-1, chunk[:, 1:, None])[..., 0].cpu())
    return torch.cat(out)


def binned(nll: torch.Tensor, edges: list[int]) -> list[list[float]]:
    """Per row, the mean NLL of the targets in each bin ``[edges[i], edges[i + 1])``."""
    return [[float(row[a - 1 : b - 1].mean()) for a, b in itertools.pairwise(edges)]
            for row in nll]


def span_mean(per_row: torch.Tensor, edges: list[int], span: tuple[int, int]) -> torch.Tensor:
    """Per row, the mean NLL over the targets of ``span`` (a union of whole bins), from the bins'
    means weighted by their widths."""
    inside = [(i, b - a) for i, (a, b) in enumerate(itertools.pairwise(edges))
              if span[0] <= a and b <= span[1]]
    if not inside:
        raise ValueError(f"no whole bin inside {span} (edges {edges})")
    columns, widths = zip(*inside, strict=True)
    weights = torch.tensor(widths, dtype=per_row.dtype)
    return (per_row[:, list(columns)] * weights).sum(1) / weights.sum()


def difference(per_row: torch.Tensor, edges: list[int], first: tuple[int, int],
               second: tuple[int, int], n_resamples: int) -> Difference:
    """NLL over ``first`` minus NLL over ``second``, paired over rows."""
    interval = paired_bootstrap_interval(span_mean(per_row, edges, first),
                                         span_mean(per_row, edges, second), n_resamples=n_resamples)
    return Difference(first=list(first), second=list(second), estimate=round(interval.estimate, 4),
                      ci95=[round(v, 4) for v in interval.as_list()])


def training_section(record: dict[str, Any], config: ShortLMConfig, quiet: bool) -> ShortLMTraining:
    run = record["run"]
    losses = run["losses"]
    blocks = [losses[i : i + CURVE_EVERY] for i in range(0, len(losses), CURVE_EVERY)]
    tail = losses[-100:]
    threads = run["threads"]
    return ShortLMTraining(
        seconds=round(run["seconds"], 1), cpu_seconds=round(run["cpu_seconds"], 1), threads=threads,
        device=run["device"], steps=run["steps"], resumed_from=run["resumed_from"],
        tokens=run["steps"] * config.batch_size * config.context,
        final_loss=round(sum(tail) / len(tail), 4), curve_every=CURVE_EVERY,
        loss_curve=[round(sum(b) / len(b), 4) for b in blocks],
        label=f"{'quiet' if quiet else 'shared'} machine, {threads} thread{'s' if threads > 1 else ''}",
    )


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags)
    args = run.args
    config = QUICK if run.quick else ShortLMConfig()
    n_rows = 8 if run.quick else args.rows
    with run.timed("train"):
        lm, record = load_short_context_lm(config, retrain=args.retrain, threads=args.threads,
                                           progress=args.progress, device="cpu")
    # keyed by the flags and the model (not --retrain: the same config trains the same weights)
    cache = run.cache({**run.settings(exclude=["retrain", "progress", "quiet_machine"]),
                       "model": lm.name})
    edges = bin_edges(config.context, config.n_ctx)
    with run.timed("evaluate"):
        per_row = cache.get("nll", lambda: binned(
            position_nll(lm, heldout_rows(lm, n_rows, config=config), args.batch), edges))
    values = torch.tensor(per_row, dtype=torch.float64)
    intervals = [bootstrap_interval(values[:, i], n_resamples=args.bootstrap)
                 for i in range(values.shape[1])]
    context, length = config.context, config.n_ctx
    last_inside = (context // 2, context)  # [128, 256) at 256
    run.write(ShortLMData(
        config=config.params(), model=lm.name, data=record["data"],
        trained_context=record["trained_context"], eval_length=length, n_rows=n_rows,
        training=training_section(record, config, args.quiet_machine),
        nll=PositionBins(starts=edges[:-1], ends=edges[1:],
                         mean=[round(i.estimate, 4) for i in intervals],
                         ci95=[[round(v, 4) for v in i.as_list()] for i in intervals]),
        in_context_gain=difference(values, edges, (1, max(2, context // 32)), last_inside,
                                   args.bootstrap),
        long_context_gain=difference(values, edges, (context // 16, context // 8), last_inside,
                                     args.bootstrap),
        beyond_training=difference(values, edges, (edges[-2], length), last_inside, args.bootstrap),
    ))


if __name__ == "__main__":
    main()
