"""How good a transcoder set is, per layer, on held-out text: explained variance (1 − FVU), L0,
the dead fraction, and the next-token loss recovered when a transcoder replaces its MLP.

FVU is Σ‖y − ŷ‖² / Σ‖y − ȳ‖² over the held-out tokens (Paulo et al. 2025's loss). The loss is
measured as sae-lens's evaluator and our SAE statistics do (:func:`lmsci_mi.sae.stats.
spliced_token_losses`): clean, with the transcoder's output in place of the MLP's at every position
but the sink, and with the MLP zero-ablated there; recovered = (zero − spliced) / (zero − clean).
Every figure has a percentile-bootstrap interval over held-out texts (:mod:`lmsci_mi.stats`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.stats import Interval, percentile_bounds, resample_counts
from lmsci_mi.transcoders.data import collect_pairs
from lmsci_mi.transcoders.model import Transcoder, TranscoderSet

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MEASURES", "LayerQuality", "TranscoderMetrics", "clean_losses", "transcoder_metrics"]

MEASURES = ("explained_variance", "l0", "dead_fraction", "loss_recovered")
"""The measures of :class:`TranscoderMetrics`' values, in column order."""

_METHOD = "percentile bootstrap over texts"


@dataclass(frozen=True)
class LayerQuality:
    """One layer's transcoder on held-out text; every interval is over texts.

    Attributes:
        layer: the layer.
        explained_variance: 1 − FVU of the MLP output.
        l0: active latents per token.
        dead_fraction: latents that never fire on the held-out tokens. Its interval tends to
            lie above the estimate: a resample holds fewer distinct texts, so more latents go
            unseen; read it as the spread of a dead count over a sample of this size.
        loss_recovered: (loss_zero − loss_spliced) / (loss_zero − loss_clean).
        loss_clean, loss_spliced, loss_zero: mean next-token loss (nats) of the model as it is,
            with the transcoder spliced in, and with the MLP zero-ablated.
        negative_kept_fraction: kept activations below zero (TopK keeps the k largest
            pre-activations as they are; sparsify's ReLU would zero these).
        n_tokens: held-out tokens (sink excluded).
    """

    layer: int
    explained_variance: Interval
    l0: Interval
    dead_fraction: Interval
    loss_recovered: Interval
    loss_clean: float
    loss_spliced: float
    loss_zero: float
    negative_kept_fraction: float
    n_tokens: int


@result_type
class TranscoderMetrics(Result):
    """Per-layer quality of a transcoder set. ``values`` ``[layer, measure]`` holds the estimates
    of :data:`MEASURES`; ``layers`` the full records with their intervals."""

    layers: tuple[LayerQuality, ...]
    input_site: str
    output_site: str
    n_texts: int

    def summary(self, rows: int = 10) -> str:
        """One line per layer: EV, L0, dead fraction and loss recovered with their intervals."""
        lines = [f"{'layer':>5}  {'EV':>22}  {'L0':>22}  {'dead':>22}  {'loss recovered':>22}"]
        for q in self.layers:
            cells = [str(getattr(q, m)) for m in MEASURES]
            lines.append(f"{q.layer:>5}  " + "  ".join(f"{c:>22}" for c in cells))
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"Transcoder quality — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(MEASURES), figsize=(12, 3))
        x = [q.layer for q in self.layers]
        for ax, measure in zip(axes, MEASURES, strict=True):
            intervals = [getattr(q, measure) for q in self.layers]
            y = [i.estimate for i in intervals]
            err = [[i.estimate - i.low for i in intervals], [i.high - i.estimate for i in intervals]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3)
            ax.set_xlabel("layer")
            ax.set_title(measure.replace("_", " "))
        fig.suptitle(title)
        fig.tight_layout()
        return fig


def _interval(estimate: float, replicates: Tensor, n: int) -> Interval:
    low, high = percentile_bounds(replicates, nan_policy="omit").tolist()
    return Interval(float(estimate), low, high, 0.95, n, _METHOD)


@torch.no_grad()
def _reconstruction(
    tc: Transcoder, x: Tensor, y: Tensor, example: Tensor, n_rows: int, chunk: int = 4096
) -> dict[str, Tensor]:
    """Per held-out row: squared error, Σ‖y‖², Σy, tokens, active latents, and each latent's
    firing count ``[row, d_transcoder]``; plus the negative kept activations in all."""
    device = tc.W_enc.device
    sums = {
        "sq_err": torch.zeros(n_rows, dtype=torch.float64),
        "y_sq": torch.zeros(n_rows, dtype=torch.float64),
        "y_sum": torch.zeros(n_rows, y.shape[1], dtype=torch.float64),
        "tokens": torch.bincount(example, minlength=n_rows).double(),
        "active": torch.zeros(n_rows, dtype=torch.float64),
        "fired": torch.zeros(n_rows, tc.d_transcoder, dtype=torch.float64),
        "negative": torch.zeros((), dtype=torch.float64),
    }
    for start in range(0, len(x), chunk):
        xs = x[start : start + chunk].to(device, torch.float32)
        ys = y[start : start + chunk].to(device, torch.float32)
        rows = example[start : start + chunk]
        acts = tc.encode(xs)
        out = tc.decode(acts) + tc.skip(xs)
        on = (acts != 0).double().cpu()
        sums["sq_err"].index_add_(0, rows, (ys - out).pow(2).sum(-1).double().cpu())
        sums["y_sq"].index_add_(0, rows, ys.pow(2).sum(-1).double().cpu())
        sums["y_sum"].index_add_(0, rows, ys.double().cpu())
        sums["active"].index_add_(0, rows, on.sum(-1))
        sums["fired"].index_add_(0, rows, on)
        sums["negative"] += float((acts < 0).sum())
    return sums


def _summed_losses(lm: LensModel, rows: list[list[int]], hooks: Any, batch_size: int, label: str) -> Tensor:
    """Per row, the summed next-token loss (the sink's and the last position's left out), with
    ``hooks`` (``spliced_token_losses``'s) or none."""
    # imported here: the SAE package is only needed once a loss is measured
    from lmsci_mi.sae.stats import spliced_token_losses

    sums = [
        (losses * mask).sum(1).double().cpu()
        for losses, mask in spliced_token_losses(lm, rows, hooks, batch_size=batch_size, label=label)
    ]
    return torch.cat(sums)


def clean_losses(lm: LensModel, rows: Sequence[Sequence[int]], *, batch_size: int = 16) -> Tensor:
    """Per row of ``rows``, the model's summed next-token loss as it is: the same for every
    layer, so a caller measuring layer by layer computes it once and passes it on
    (:func:`transcoder_metrics`' ``clean``)."""
    return _summed_losses(lm, [list(r) for r in rows], None, batch_size, "transcoder-clean")


def _losses(
    lm: LensModel, tcs: TranscoderSet, layer: int, rows: list[list[int]], mode: str, batch_size: int
) -> Tensor:
    """Per row, the summed next-token loss with ``layer``'s MLP output replaced by the
    transcoder's (``"spliced"``) or by zeros (``"zero"``)."""
    in_hook, out_hook = tcs.hook_names(layer)
    tc = tcs[layer]

    def hooks(keep: Tensor, lo: int) -> list[tuple[str, Any]]:
        held: list[Tensor] = []

        def read(activation: Tensor, hook: Any) -> None:
            held.append(activation[:, lo:])

        def write(activation: Tensor, hook: Any) -> Tensor:
            part = activation[:, lo:]
            new = tc(held.pop().float()).to(activation.dtype) if mode == "spliced" else torch.zeros_like(part)
            out = activation.clone()
            out[:, lo:] = torch.where(keep[:, lo:, None], new, part)
            return out

        return [(in_hook, read), (out_hook, write)] if mode == "spliced" else [(out_hook, write)]

    return _summed_losses(lm, rows, hooks, batch_size, f"transcoder-{mode}")


def transcoder_metrics(
    lm: LensModel,
    tcs: TranscoderSet,
    rows: Sequence[Sequence[int]],
    *,
    layers: Sequence[int] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    batch_size: int = 16,
    progress: bool = False,
    data_source: str = "",
    clean: Tensor | None = None,
) -> TranscoderMetrics:
    """Measure each layer's transcoder on held-out token ``rows`` (each starting with the sink).

    Reads the model only: every hook goes through the registry and is gone on return.

    Args:
        lm: the model the set was trained on (checked).
        tcs: the transcoders.
        rows: held-out token rows.
        layers: the layers to measure (None: every layer of the set).
        n_resamples: bootstrap resamples over texts.
        seed: the bootstrap's seed.
        data_source: where the rows come from (recorded in the result's meta).
        clean: :func:`clean_losses` of ``rows`` (None: computed here); pass it when measuring a
            set layer by layer, so the model's own losses are computed once.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> tcs = TranscoderSet.random(lm, 32, k=4)
    >>> rows = [lm.encode(text) for text in ("The cat sat on the mat", "A dog ran")]
    >>> m = transcoder_metrics(lm, tcs, rows, n_resamples=50)
    >>> m.values.shape, m.layers[1].l0.estimate
    (torch.Size([2, 4]), 4.0)
    """
    tcs.check(lm)
    chosen = sorted(tcs) if layers is None else sorted(set(layers))
    for layer in chosen:
        tcs[layer]  # a layer the set lacks raises here, before anything runs
    rows = [list(r) for r in rows]
    collected, names = collect_pairs(lm, rows, chosen, tcs.input_site, tcs.output_site,
                                     progress=progress)
    counts = resample_counts(len(rows), n_resamples, seed=seed)
    if clean is None:
        clean = clean_losses(lm, rows, batch_size=batch_size)
    elif clean.shape != (len(rows),):
        raise UserInputError(f"clean holds {tuple(clean.shape)} losses; give one per row ({len(rows)}), "
                             "from clean_losses on the same rows")
    qualities = [
        _layer_quality(lm, tcs, layer, rows, collected.acts[names[layer][0]],
                       collected.acts[names[layer][1]], collected.example, counts, clean, batch_size)
        for layer in chosen
    ]
    values = torch.tensor([[getattr(q, m).estimate for m in MEASURES] for q in qualities])
    return TranscoderMetrics(
        values=values,
        axes=("layer", "measure"),
        labels=(tuple(str(layer) for layer in chosen), MEASURES),
        meta=lm.meta((), seed=seed, data_source=data_source,
                     params={"n_resamples": n_resamples, "n_texts": len(rows)}),
        layers=tuple(qualities),
        input_site=tcs.input_site,
        output_site=tcs.output_site,
        n_texts=len(rows),
    )


def _layer_quality(
    lm: LensModel,
    tcs: TranscoderSet,
    layer: int,
    rows: list[list[int]],
    x: Tensor,
    y: Tensor,
    example: Tensor,
    counts: Tensor,
    clean: Tensor,
    batch_size: int,
) -> LayerQuality:
    n = len(rows)
    sums = _reconstruction(tcs[layer], x, y, example, n)
    tokens = counts @ sums["tokens"]
    variance = counts @ sums["y_sq"] - (counts @ sums["y_sum"]).pow(2).sum(-1) / tokens
    ones = torch.ones(1, n, dtype=torch.float64)
    full_variance = float(ones @ sums["y_sq"] - (ones @ sums["y_sum"]).pow(2).sum(-1) / len(x))
    dead = torch.cat([((c @ sums["fired"]) == 0).double().mean(-1) for c in counts.split(100)])
    spliced = _losses(lm, tcs, layer, rows, "spliced", batch_size)
    zero = _losses(lm, tcs, layer, rows, "zero", batch_size)
    recovered = (counts @ zero - counts @ spliced) / (counts @ zero - counts @ clean)
    total = float(sums["tokens"].sum())
    predictions = float(_prediction_count(lm, rows))
    return LayerQuality(
        layer=layer,
        explained_variance=_interval(1 - float(sums["sq_err"].sum()) / full_variance,
                                     1 - counts @ sums["sq_err"] / variance, n),
        l0=_interval(float(sums["active"].sum()) / total, counts @ sums["active"] / tokens, n),
        dead_fraction=_interval(float((sums["fired"].sum(0) == 0).double().mean()), dead, n),
        loss_recovered=_interval(
            float((zero.sum() - spliced.sum()) / (zero.sum() - clean.sum())), recovered, n),
        loss_clean=float(clean.sum()) / predictions,
        loss_spliced=float(spliced.sum()) / predictions,
        loss_zero=float(zero.sum()) / predictions,
        negative_kept_fraction=float(sums["negative"]) / max(float(sums["active"].sum()), 1.0),
        n_tokens=len(x),
    )


def _prediction_count(lm: LensModel, rows: list[list[int]]) -> int:
    """Predictions the losses count: every position but the sink's and the last of each row."""
    sink = 1 if lm.sink_token_id is not None else 0
    return sum(max(len(r) - 1 - sink, 0) for r in rows)
