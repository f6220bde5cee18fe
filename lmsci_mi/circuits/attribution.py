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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.circuits._batching import answer_logits
from lmsci_mi.circuits.metrics import Metric, Normalised
from lmsci_mi.circuits.patching import (
    HEAD_SITES,
    AlignArg,
    PatchingResult,
    PositionsArg,
    TokensArg,
    aligned_source,
    patch_activations,
    prepare_pairs,
    resolve_metric,
    site_hook_name,
    sweep_layers,
)
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    from transformer_lens.hook_points import HookPoint

    from lmsci_mi.model import LensModel

__all__ = ["AttributionResult", "attribution_patch", "spearman"]


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman rank correlation of two tensors of the same shape (flattened; ties averaged).

    >>> import torch
    >>> round(spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 30.0, 20.0])), 6)
    0.5
    """
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
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


@result_type
class AttributionResult(Result):
    """Attribution-patching estimates, laid out like the matching :class:`PatchingResult`.

    ``values`` estimate what exact patching would return: ``corrupted_value + Δ`` (or its
    normalised form), so the two are directly comparable.

    Attributes:
        site / clean_value / corrupted_value / normalised / metric: as in ``PatchingResult``.
        rank_correlation: Spearman correlation with exact patching on the same inputs
            (``nan`` unless computed with ``compare_exact=True`` or :meth:`compare`).
        exact: the exact patching values used for ``rank_correlation`` (empty tensor if none).
    """

    site: str
    clean_value: float
    corrupted_value: float
    normalised: bool
    metric: str
    rank_correlation: float
    exact: Tensor

    def compare(self, exact: PatchingResult) -> float:
        """Spearman rank correlation of these estimates with exact patching results."""
        if exact.axes != self.axes or exact.values.shape != self.values.shape:
            raise ValueError(
                f"exact result has axes {exact.axes} {tuple(exact.values.shape)}, these "
                f"estimates {self.axes} {tuple(self.values.shape)}: patch the same site and positions"
            )
        return spearman(self.values, exact.values)

    def top(self, k: int = 10) -> tuple[tuple[str, float], ...]:
        """The ``k`` largest estimates as (label, value), e.g. ``("L9.H6", 0.4)``."""
        return PatchingResult.top(self, k)  # type: ignore[arg-type]


def attribution_patch(
    lm: LensModel,
    clean: TokensArg,
    corrupted: TokensArg,
    metric: Metric | Literal["kl"],
    *,
    site: str = "z",
    positions: PositionsArg = "all",
    layers: Sequence[int] | None = None,
    align: AlignArg | None = None,
    normalise: bool = False,
    answer_position: int = -1,
    compare_exact: bool = False,
) -> AttributionResult:
    """Estimate every patch of ``site`` from one clean pass and one corrupted forward+backward.

    Reads the model only (no weight or ``.grad`` changes; gradients are taken with
    ``torch.autograd.grad`` on the activations only). Arguments mean what they mean in
    :func:`~lmsci_mi.circuits.patching.patch_activations`; the result has the same axes.

    Args:
        compare_exact: also run exact patching on the same inputs and store the Spearman rank
            correlation (and the exact values) in the result.

    Returns:
        An :class:`AttributionResult`.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.circuits.metrics import LogitDiff
    >>> lm = load_model("toy-2l")
    >>> metric = LogitDiff(lm.token_id(" Mary"), lm.token_id(" John"))
    >>> res = attribution_patch(lm, "Mary and John: John gave it to",
    ...                         "Mary and John: Mary gave it to", metric, site="z")
    >>> res.axes, tuple(res.values.shape)
    (('layer', 'head'), (2, 4))
    """
    layer_list = sweep_layers(lm, site, positions, layers)
    n_layers = lm.cfg.n_layers
    pairs = prepare_pairs(lm, clean, corrupted, align)
    names = [site_hook_name(site, layer) for layer in layer_list]
    lm.hooks.resolve(names)

    with torch.no_grad(), lm.hooks.capture(names) as clean_cap:
        clean_logits = answer_logits(
            lm, lm.model(pairs.clean, stop_at_layer=n_layers), answer_position
        )

    def leaf(activation: Tensor, hook: HookPoint) -> Tensor:
        # A fresh leaf that needs grad: the graph exists even if the weights are frozen, and no
        # gradient ever reaches a weight.
        return activation.detach().requires_grad_(True)

    with torch.enable_grad():
        with (
            lm.hooks.hooks(fwd=[("hook_embed", leaf)], label="attribution leaf"),
            lm.hooks.capture(names, detach=False) as corr_cap,
        ):
            corrupted_logits = answer_logits(
                lm, lm.model(pairs.corrupted, stop_at_layer=n_layers), answer_position
            )
        raw_metric = resolve_metric(metric, clean_logits)
        clean_value = float(raw_metric(clean_logits).float().mean())
        corrupted_value = float(raw_metric(corrupted_logits.detach()).float().mean())
        scorer: Metric = (
            Normalised(raw_metric, clean_logits, corrupted_logits.detach())
            if normalise
            else raw_metric
        )
        score = scorer(corrupted_logits).float().mean()
        acts = [corr_cap[name] for name in names]
        grads = torch.autograd.grad(score, acts)

    base = float(scorer(corrupted_logits.detach()).float().mean())
    rows = []
    with torch.no_grad():
        for name, act, grad in zip(names, acts, grads, strict=True):
            act = act.detach()
            delta = aligned_source(pairs, site, clean_cap[name], act) - act
            rows.append(_reduce(site, delta * grad, pairs, positions, align is not None))
    values = torch.stack(rows).cpu() + base

    layer_labels = tuple(str(layer) for layer in layer_list)
    if site in HEAD_SITES:
        head_labels = tuple(f"H{h}" for h in range(values.shape[-1]))
        if positions == "each":
            axes: tuple[str, ...] = ("layer", "position", "head")
            labels: tuple[tuple[str, ...], ...] = (layer_labels, pairs.position_names, head_labels)
        else:
            axes, labels = ("layer", "head"), (layer_labels, head_labels)
    elif positions == "each":
        axes, labels = ("layer", "position"), (layer_labels, pairs.position_names)
    else:
        axes, labels = ("layer",), (layer_labels,)

    result = AttributionResult(
        values=values,
        axes=axes,
        labels=labels,
        meta=lm.meta(
            pairs.prompts,
            data_source="user prompts",
            params={
                "site": site,
                "positions": positions,
                "aligned": align is not None,
                "normalise": normalise,
                "answer_position": answer_position,
                "method": "attribution patching (first-order), Nanda 2023",
            },
        ),
        site=site,
        clean_value=clean_value,
        corrupted_value=corrupted_value,
        normalised=normalise,
        metric=repr(raw_metric),
        rank_correlation=math.nan,
        exact=torch.empty(0),
    )
    if not compare_exact:
        return result
    exact = patch_activations(
        lm,
        clean,
        corrupted,
        raw_metric,
        site=site,
        positions=positions,
        layers=layer_list,
        align=align,
        normalise=normalise,
        answer_position=answer_position,
    )
    return dataclasses.replace(result, rank_correlation=result.compare(exact), exact=exact.values)


def _reduce(
    site: str,
    contribution: Float[Tensor, "pair ..."],
    pairs: object,
    positions: str,
    aligned: bool,
) -> Tensor:
    """Sum a per-coordinate attribution to the result's layout for one layer."""
    if site == "pattern":
        per_pos = contribution.sum(-1).transpose(1, 2)  # [pair, query, head]
    elif site in HEAD_SITES:
        per_pos = contribution.sum(-1)  # [pair, pos, head]
    else:
        per_pos = contribution.sum(-1)  # [pair, pos]
    corrupted_positions = pairs.corrupted_positions.to(per_pos.device)  # type: ignore[attr-defined]
    pair_index = torch.arange(per_pos.shape[0], device=per_pos.device)
    if aligned:
        # [name, pair, (head)] at the named corrupted positions, summed over pairs.
        named = torch.stack([per_pos[pair_index, row] for row in corrupted_positions]).sum(1)
        return named if positions == "each" else named.sum(0)
    summed = per_pos.sum(0)
    return summed if positions == "each" else summed.sum(0)
