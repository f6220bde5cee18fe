"""Attribution patching: a first-order estimate of every activation patch at once.

``metric(patched) ≈ metric(corrupted) + (a_clean − a_corrupted) · ∂metric/∂a`` at the corrupted
run (Nanda 2023, "Attribution Patching"; Syed, Rager & Conmy 2023). One clean forward pass, one
corrupted forward pass and one backward pass give the estimate for every layer, position and head
of a site. It is poor for large activations (residual stream, early MLPs), so compare it with exact
patching (:func:`~lmsci_mi.circuits.patching.patch_activations`) before trusting a ranking.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import field
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.circuits.metrics import Metric, Normalised, pair_metric
from lmsci_mi.circuits.patching import (
    PATCH_SITES,
    AlignArg,
    AlignedPairs,
    PatchingConfig,
    PatchingResult,
    align_pairs,
    aligned_source,
    answer_rows,
    patch_activations,
    resolve_metric,
    sweep_axes,
    top_cells,
)
from lmsci_mi.config import config
from lmsci_mi.data.pairs import PairsArg, accepts_pairs
from lmsci_mi.errors import UserInputError
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head, hook_name, site

if TYPE_CHECKING:
    from transformer_lens.hook_points import HookPoint

    from lmsci_mi.model import LensModel

__all__ = ["AttributionConfig", "AttributionResult", "attribution_patch", "spearman"]


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman rank correlation of two tensors of the same shape (flattened; ties averaged).

    >>> import torch
    >>> round(spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 30.0, 20.0])), 6)
    0.5
    """
    if a.shape != b.shape:
        raise UserInputError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    ra, rb = _ranks(a.flatten().double()), _ranks(b.flatten().double())
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = float(ra.norm() * rb.norm())
    return float((ra * rb).sum()) / denom if denom > 0 else math.nan


def _ranks(x: Tensor) -> Tensor:
    order = x.argsort()
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(x.numel(), dtype=x.dtype)
    # Average the ranks of tied values so that constant blocks do not create fake order.
    unique, inverse = torch.unique(x, return_inverse=True)
    if unique.numel() < x.numel():
        sums = torch.zeros(unique.numel(), dtype=x.dtype).index_add_(0, inverse, ranks)
        counts = torch.zeros(unique.numel(), dtype=x.dtype).index_add_(
            0, inverse, torch.ones_like(x)
        )
        ranks = (sums / counts)[inverse]
    return ranks


@config
class AttributionConfig(PatchingConfig):
    """A :class:`PatchingConfig` with attribution's defaults (every head, all positions at once)."""

    site: str = field(
        default="z",
        metadata={"help": f"site to attribute: {', '.join(PATCH_SITES)}", "choices": PATCH_SITES},
    )
    positions: Literal["each", "all"] = field(
        default="all", metadata={"help": "one estimate per position, or for all positions at once"})
    compare_exact: bool = field(
        default=False, metadata={"help": "also run exact patching and store the rank correlation"})


@result_type
class AttributionResult(Result):
    """Attribution-patching estimates, laid out like the matching :class:`PatchingResult`.

    ``values`` estimate what exact patching would return: ``corrupted_value + Δ`` (or its
    normalised form), so the two are directly comparable.

    Attributes:
        site / clean_value / corrupted_value / normalised / metric: as in ``PatchingResult``.
        exact: exact patching on the same inputs, when it was asked for (``compare_exact``);
            None when it was not run.
        rank_correlation: Spearman correlation with ``exact``; None when it was not run.
    """

    site: str
    clean_value: float
    corrupted_value: float
    normalised: bool
    metric: str
    exact: PatchingResult | None
    rank_correlation: float | None

    def compare(self, exact: PatchingResult) -> float:
        """Spearman rank correlation of these estimates with exact patching results."""
        if exact.axes != self.axes or exact.values.shape != self.values.shape:
            raise UserInputError(
                f"exact result has axes {exact.axes} {tuple(exact.values.shape)}, these "
                f"estimates {self.axes} {tuple(self.values.shape)}: patch the same site and positions"
            )
        return spearman(self.values, exact.values)

    def top(self, k: int = 10) -> tuple[tuple[Head | str, float], ...]:
        """The ``k`` largest estimates as ``(key, value)``, keyed as in PatchingResult.top."""
        return top_cells(self, k)


@torch.no_grad()
def _clean_run(lm: LensModel, pairs: AlignedPairs, names: list[str]) -> tuple[dict[str, Tensor], Tensor]:
    with lm.hooks.capture(names) as cap:
        resid = lm.model(pairs.clean, stop_at_layer=lm.cfg.n_layers)
    return {n: cap[n] for n in names}, lm.unembed(answer_rows(resid, pairs.clean_answers))


def _corrupted_gradients(lm: LensModel, pairs: AlignedPairs, names: list[str], cfg: PatchingConfig,
                         metric: Metric, clean_logits: Tensor
                         ) -> tuple[list[Tensor], list[Tensor], Tensor, Metric]:
    """The corrupted run's activations, the metric's gradient at each, and the scorer."""

    def leaf(activation: Tensor, hook: HookPoint) -> Tensor:
        # A fresh leaf that needs grad: the graph exists even if the weights are frozen, and no
        # gradient ever reaches a weight.
        return activation.detach().requires_grad_(True)

    with torch.enable_grad():
        with lm.hooks.hooks(fwd=[(hook_name("embed"), leaf)], label="attribution leaf"), \
                lm.hooks.capture(names, detach=False) as cap:
            resid = lm.model(pairs.corrupted, stop_at_layer=lm.cfg.n_layers)
            logits = lm.unembed(answer_rows(resid, pairs.corrupted_answers))
        scorer = Normalised(metric, clean_logits, logits.detach()) if cfg.normalise else metric
        acts = [cap[name] for name in names]
        grads = torch.autograd.grad(scorer(logits).float().mean(), acts)
    return [a.detach() for a in acts], list(grads), logits.detach(), scorer


@accepts_pairs(1)
def attribution_patch(
    lm: LensModel,
    pairs: PairsArg,
    metric: Metric | Literal["kl"] | None = None,
    config: AttributionConfig | None = None,
    *,
    align: AlignArg | None = None,
) -> AttributionResult:
    """Estimate every patch of a site from one clean pass and one corrupted forward+backward.

    Reads the model only (no weight or ``.grad`` changes; gradients are taken with
    ``torch.autograd.grad`` on the activations only). Arguments mean what they mean in
    :func:`~lmsci_mi.circuits.patching.patch_activations`; the result has the same axes.

    Args:
        config: an :class:`AttributionConfig`; ``compare_exact`` also runs exact patching on the
            same inputs and stores it with the Spearman rank correlation.

    Returns:
        An :class:`AttributionResult`.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.pairs import PromptPairs
    >>> lm = load_model("toy-2l")
    >>> pairs = PromptPairs("Mary and John: John gave it to", "Mary and John: Mary gave it to",
    ...                     answers=lm.token_id(" Mary"), wrongs=lm.token_id(" John"))
    >>> res = attribution_patch(lm, pairs)
    >>> res.axes, tuple(res.values.shape)
    (('layer', 'head'), (2, 4))
    """
    cfg = config or AttributionConfig()
    layers = cfg.layer_list(lm.cfg.n_layers)
    aligned = align_pairs(lm, pairs, align, cfg.answer_position)
    names = lm.hooks.resolve([hook_name(cfg.site, layer) for layer in layers])
    clean_acts, clean_logits = _clean_run(lm, aligned, names)
    raw_metric = resolve_metric(pair_metric(metric, pairs), clean_logits)
    acts, grads, corrupted_logits, scorer = _corrupted_gradients(lm, aligned, names, cfg, raw_metric, clean_logits)
    with torch.no_grad():
        base = float(scorer(corrupted_logits).float().mean())
        rows = [_reduce(cfg, (aligned_source(aligned, cfg.site, clean_acts[n], a) - a) * g, aligned)
                for n, a, g in zip(names, acts, grads, strict=True)]
    values = torch.stack(rows).cpu() + base
    head_axis = site(cfg.site).layout.head_axis
    n_heads = acts[0].shape[head_axis] if head_axis is not None else 0
    axes, labels = sweep_axes(aligned, cfg, layers, n_heads)
    exact = patch_activations(lm, pairs, raw_metric, cfg, align=align) if cfg.compare_exact else None
    result = AttributionResult(
        values=values, axes=axes, labels=labels,
        meta=lm.meta(aligned.prompts, data_source=aligned.source,
                     params={**cfg.params(), "aligned": aligned.aligned,
                             "method": "attribution patching (first-order), Nanda 2023"}),
        site=cfg.site,
        clean_value=float(raw_metric(clean_logits).float().mean()),
        corrupted_value=float(raw_metric(corrupted_logits).float().mean()),
        normalised=cfg.normalise, metric=repr(raw_metric), exact=exact, rank_correlation=None,
    )
    return dataclasses.replace(result, rank_correlation=result.compare(exact)) if exact else result


def _reduce(cfg: PatchingConfig, contribution: Float[Tensor, "pair ..."], pairs: AlignedPairs) -> Tensor:
    """Sum a per-coordinate attribution to the result's layout for one layer."""
    per_pos = contribution.sum(-1)  # [pair, pos] or [pair, pos, head]
    if site(cfg.site).layout.position_axis == 2:  # pattern: [pair, head, query] -> [pair, query, head]
        per_pos = per_pos.transpose(1, 2)
    if cfg.exclude is not None:  # as in exact patching, an excluded position is never patched
        keep = cfg.exclude.keep(pairs.corrupted).to(per_pos.device)
        per_pos = per_pos * keep.reshape(*keep.shape, *[1] * (per_pos.ndim - 2))
    pair_index = torch.arange(per_pos.shape[0], device=per_pos.device)
    if pairs.aligned:
        # [name, pair, (head)] at the named corrupted positions, summed over pairs.
        positions = pairs.corrupted_positions.to(per_pos.device)
        named = torch.stack([per_pos[pair_index, row] for row in positions]).sum(1)
        return named if cfg.positions == "each" else named.sum(0)
    summed = per_pos.sum(0)
    return summed if cfg.positions == "each" else summed.sum(0)
