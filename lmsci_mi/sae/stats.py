"""How good an SAE is, on held-out tokens: explained variance, L0, dead features, and the increase
in next-token loss when the reconstruction replaces the activation.

Explained variance follows sae-lens: 1 − E‖x − x̂‖² / (E‖x‖² − ‖E x‖²). The loss is measured with
the reconstruction spliced in at every position but the sink (the SAE never sees the sink), next
to the clean loss and the loss with the site zero-ablated, as in sae-lens's evaluator. Every
measure leaves out the positions of one :class:`~lmsci_mi.positions.Exclude` (``exclude=``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from lmsci_mi.collect import CollectConfig, collect_activations
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.results import Result, result_type
from lmsci_mi.sae.core import LensSAE

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["SAEStats", "SpliceHooks", "reconstruction_loss", "sae_stats", "spliced_token_losses"]

_TOP = 10  # a feature's typical maximum is the mean of its 10 largest held-out activations


@result_type
class SAEStats(Result):
    """An SAE's quality on held-out tokens. ``values`` is each feature's activation density
    (fraction of tokens where it fires), axis ``("feature",)``.

    Attributes:
        hook: the site.
        explained_variance: sae-lens's definition, on float32 activations.
        explained_variance_autocast: the same on activations harvested under the training
            harvest's autocast (None when training used none): the effect of bfloat16.
        l0: mean active features per token.
        dead_fraction: features that never fire on the held-out tokens.
        loss_clean, loss_sae, loss_zero: next-token loss of the model as it is, with the
            reconstruction spliced in, and with the site zero-ablated (positions after the sink).
        n_tokens: held-out tokens (sink excluded).
        feature_scale: each feature's typical maximum activation (mean of its 10 largest).
        costs: seconds spent on text, harvest and training, training tokens, and the trainer's
            dead features in its last window.
    """

    hook: str
    explained_variance: float
    explained_variance_autocast: float | None
    l0: float
    dead_fraction: float
    loss_clean: float
    loss_sae: float
    loss_zero: float
    n_tokens: int
    feature_scale: Tensor
    costs: dict[str, float]

    @property
    def loss_increase(self) -> float:
        """How much the next-token loss rises when the reconstruction replaces the activation."""
        return self.loss_sae - self.loss_clean

    @property
    def fraction_recovered(self) -> float:
        """(loss_zero − loss_sae) / (loss_zero − loss_clean): 1 is a perfect reconstruction."""
        return (self.loss_zero - self.loss_sae) / max(self.loss_zero - self.loss_clean, 1e-9)

    def summary(self, rows: int = 10) -> str:
        """The statistics as a plain-text table (``rows`` unused: every statistic is shown)."""
        table = [
            ("site", self.hook),
            ("features", str(self.values.numel())),
            ("held-out tokens", str(self.n_tokens)),
            ("explained variance", f"{self.explained_variance:.3f}"),
            *(
                [("explained variance (bf16 harvest)", f"{self.explained_variance_autocast:.3f}")]
                if self.explained_variance_autocast is not None
                else []
            ),
            ("L0", f"{self.l0:.1f}"),
            ("dead fraction (held-out)", f"{self.dead_fraction:.3f}"),
            (
                "next-token loss clean / SAE / zero",
                f"{self.loss_clean:.3f} / {self.loss_sae:.3f} / {self.loss_zero:.3f}",
            ),
            ("loss increase", f"{self.loss_increase:+.3f}"),
            ("fraction of loss recovered", f"{self.fraction_recovered:.3f}"),
            *((name, f"{value:.1f}") for name, value in self.costs.items()),
        ]
        width = max(len(name) for name, _ in table)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in table)

    def default_title(self, **options: object) -> str:
        return f"SAE feature density — {self.meta.model} {self.hook}"

    def _draw(self, title: str) -> Figure:
        """Histogram of log10 feature density (dead features left out)."""
        import matplotlib.pyplot as plt

        density = self.values[self.values > 0].float().log10()
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.hist(density.numpy(), bins=50)
        ax.set_xlabel("log10 activation density")
        ax.set_ylabel("features")
        ax.set_title(title)
        fig.tight_layout()
        return fig


@torch.no_grad()
def feature_summary(
    sae: LensSAE, acts: Float[Tensor, "token d_model"], chunk: int = 4096
) -> tuple[float, float, Tensor, Tensor]:
    """(explained variance, L0, density ``[d_sae]``, typical max ``[d_sae]``) of ``acts``."""
    device = sae.sae.device
    sq_err = sq_norm = 0.0
    total = torch.zeros(acts.shape[-1], dtype=torch.float64)
    fired = torch.zeros(sae.d_sae, dtype=torch.float64)
    top = torch.zeros(_TOP, sae.d_sae)
    for start in range(0, len(acts), chunk):
        x = acts[start : start + chunk].to(device, torch.float32)
        f = sae.encode(x)
        x_hat = sae.decode(f)
        sq_err += float((x - x_hat).pow(2).sum())
        sq_norm += float(x.pow(2).sum())
        total += x.sum(0).double().cpu()
        fired += (f > 0).sum(0).double().cpu()
        top = torch.cat([top, f.cpu().float()]).topk(min(_TOP, len(top) + len(f)), dim=0).values
    n = len(acts)
    mean = total / n
    variance = sq_norm / n - float(mean.pow(2).sum())
    explained = 1.0 - (sq_err / n) / variance
    l0 = float(fired.sum() / n)
    density = (fired / n).float()
    scale = top.mean(0)
    alive = scale > 0
    fallback = scale[alive].median() if alive.any() else torch.tensor(1.0)
    return explained, l0, density, torch.where(alive, scale, fallback)


SpliceHooks = Callable[[Tensor, int], list[tuple[str, Callable[..., Any]]]]
"""``hooks(keep, lo)`` -> the (hook name, function) pairs that splice one batch: ``keep`` is the
batch's ``[batch, pos]`` keep-mask, ``lo`` the first column any row keeps."""


def spliced_token_losses(
    lm: LensModel,
    rows: list[list[int]],
    hooks: SpliceHooks | None,
    *,
    batch_size: int = 16,
    progress: bool = False,
    exclude: Exclude | None = None,
    label: str = "splice",
) -> Iterator[tuple[Tensor, Tensor]]:
    """Batch by batch of ``rows``: the next-token losses with the hooks ``hooks(keep, lo)``
    builds attached (None: the clean model), and the mask of the predictions that count, those
    made from the positions ``exclude`` keeps (None: every position but the sink).

    The loop behind :func:`reconstruction_loss`, shared with the transcoders' splice (an input
    hook read, an output hook replaced). Reads the model only; hooks go through the registry.

    Yields:
        (``[batch, pos]`` float32 losses, ``[batch, pos]`` bool mask), rows in order.
    """
    chosen = resolve_exclude(exclude)
    for start in tqdm(range(0, len(rows), batch_size), desc=label, disable=not progress):
        batch = lm.pad_batch(rows[start : start + batch_size])
        tokens = batch.tokens.to(lm.device)
        keep = chosen.keep(tokens)
        # Columns before `lo` are left out in every row, so the default (the sink) splices
        # exactly the positions it always did.
        lo = _first_kept(keep)
        attached = [] if hooks is None else hooks(keep, lo)
        with torch.no_grad(), lm.hooks.hooks(fwd=attached, label=label):
            logits = lm.model(tokens)
        # The prediction from position p (of token p + 1) counts where p is kept and p + 1 real.
        targets = tokens[:, lo + 1 :]
        mask = keep[:, lo:-1] & batch.mask[:, lo + 1 :].to(lm.device)
        losses = F.cross_entropy(
            logits[:, lo:-1].float().transpose(1, 2), targets, reduction="none"
        )
        yield losses, mask


@torch.no_grad()
def reconstruction_loss(
    lm: LensModel,
    sae: LensSAE,
    rows: list[list[int]],
    mode: str,
    *,
    batch_size: int = 16,
    progress: bool = False,
    exclude: Exclude | None = None,
) -> float:
    """Mean next-token loss on ``rows`` with the site ``"clean"``, replaced by the SAE's
    reconstruction (``"sae"``) or zero-ablated (``"zero"``), at every position ``exclude``
    keeps (None: every position but the sink), counting the predictions made from those
    positions (the sink's prediction never sees the SAE).

    Reads the model only; the hook goes through the registry.
    """

    def hooks(keep: Tensor, lo: int) -> list[tuple[str, Callable[..., Any]]]:
        def splice(activation: Tensor, hook: Any) -> Tensor:
            out = activation.clone()
            part = keep[:, lo:, None]
            if mode == "sae":
                new = sae.decode(sae.encode(activation[:, lo:].float())).to(activation.dtype)
            else:
                new = torch.zeros_like(activation[:, lo:])
            out[:, lo:] = torch.where(part, new, activation[:, lo:])
            return out

        return [(sae.hook, splice)]

    total, count = 0.0, 0
    for losses, mask in spliced_token_losses(
        lm, rows, None if mode == "clean" else hooks, batch_size=batch_size, progress=progress,
        exclude=exclude, label=f"sae-{mode}",
    ):
        total += float((losses * mask).sum())
        count += int(mask.sum())
    return total / max(count, 1)


def _with_exclude(params: Mapping[str, Any] | None, exclude: Exclude) -> dict[str, Any]:
    """``params``, with the exclusion recorded where it is not the default (the sink)."""
    out = dict(params or {})
    if not exclude.is_default:
        out["exclude"] = exclude.params()
    return out


def _held_out(
    lm: LensModel, rows: list[list[int]], hook: str, config: CollectConfig, exclude: Exclude
) -> Tensor:
    """The activations at ``hook`` of the positions of ``rows`` that ``exclude`` keeps."""
    collected = collect_activations(lm, rows, [hook], positions="all", config=config)
    keep = exclude.keep_at(collected.position, collected.token)
    acts = collected.acts[hook]
    # Collection already leaves a sink token out; the check spares the default a copy.
    return acts if bool(keep.all()) else acts[keep]


def _first_kept(keep: Tensor) -> int:
    """The first column some row keeps (the sink's column is left out everywhere)."""
    columns = keep.any(0)
    return int(columns.float().argmax()) if bool(columns.any()) else keep.shape[1]


def sae_stats(
    lm: LensModel,
    sae: LensSAE,
    rows: list[list[int]],
    *,
    progress: bool = True,
    autocast_check: str | None = None,
    params: Mapping[str, Any] | None = None,
    data_source: str = "",
    extra: Mapping[str, float] | None = None,
    exclude: Exclude | None = None,
) -> SAEStats:
    """Measure ``sae`` on held-out token ``rows`` (each starting with the sink).

    Reads the model only.

    Args:
        lm: the model the SAE was trained on (checked).
        sae: the SAE.
        rows: held-out token rows.
        autocast_check: also measure EV on activations harvested under this autocast dtype.
        params, data_source, extra: provenance recorded in the result.
        exclude: the positions every measure leaves out (None: the sink).
    """
    sae.check(lm)
    chosen = resolve_exclude(exclude)
    acts = _held_out(lm, rows, sae.hook, CollectConfig(progress=progress), chosen)
    explained, l0, density, scale = feature_summary(sae, acts)
    explained_autocast = None
    if autocast_check is not None:
        config = CollectConfig(progress=progress, autocast=autocast_check)
        explained_autocast = feature_summary(sae, _held_out(lm, rows, sae.hook, config, chosen))[0]
    losses = {
        m: reconstruction_loss(lm, sae, rows, m, progress=progress, exclude=chosen)
        for m in ("clean", "sae", "zero")
    }
    return SAEStats(
        values=density,
        axes=("feature",),
        labels=((),),
        meta=lm.meta((), data_source=data_source, params=_with_exclude(params, chosen)),
        hook=sae.hook,
        explained_variance=explained,
        explained_variance_autocast=explained_autocast,
        l0=l0,
        dead_fraction=float((density == 0).float().mean()),
        loss_clean=losses["clean"],
        loss_sae=losses["sae"],
        loss_zero=losses["zero"],
        n_tokens=len(acts),
        feature_scale=scale,
        costs=dict(extra or {}),
    )
