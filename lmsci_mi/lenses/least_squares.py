"""The linear shortcut of Din et al. 2023 ("Jump to Conclusions: Short-Cutting Transformers with
Linear Transformations"): each layer's stream mapped to the final one by least squares.

One ridge regression per layer, solved in one shot from the normal equations, with each token's
row divided by the final norm's scale so that every token counts as it does after the norm. It is
what ``TunedLensConfig(method="least_squares")`` fits; Belrose et al.'s KL-trained translators are
the default (:mod:`lmsci_mi.lenses.tuned_lens`).
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.model import LensModel
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.sites import hook_name

__all__ = ["least_squares_translators", "normal_equations", "solve_translators"]

log = logging.getLogger(__name__)


def _final_name(lm: LensModel) -> str:
    return hook_name("resid_post", lm.cfg.n_layers - 1)


@torch.no_grad()
def normal_equations(
    lm: LensModel, rows: Tensor, site: str = "resid_pre", exclude: Exclude | None = None
) -> tuple[Tensor, Tensor]:
    """``X^T X`` and ``X^T Y`` of every layer (X = ``[stream at site, 1]``, Y = the final stream,
    each token's row divided by the final norm's scale), summed over the kept tokens of ``rows``.

    Returns:
        ``[layer, d + 1, d + 1]`` and ``[layer, d + 1, d]``, float64.
    """
    n_layers, d = lm.cfg.n_layers, lm.cfg.d_model
    names = [hook_name(site, layer) for layer in range(n_layers)]
    final_name = _final_name(lm)
    xtx = torch.zeros(n_layers, d + 1, d + 1, dtype=torch.float64)
    xty = torch.zeros(n_layers, d + 1, d, dtype=torch.float64)
    chosen = resolve_exclude(exclude)
    n_batches = -(-rows.shape[0] // 8)
    for index, batch in enumerate(rows.split(8)):
        log.info("least-squares lens: batch %d of %d", index + 1, n_batches)
        with lm.hooks.capture([*names, final_name]) as cap:
            lm.model(batch.to(lm.device), stop_at_layer=n_layers)
        # The sink is a resting place for attention, not a prediction: left out (with any other
        # excluded position).
        keep = chosen.keep(batch).to(lm.device)
        final = cap[final_name][keep].reshape(-1, d).float().cpu()
        weight = 1 / readout.final_norm_scale(lm, final)
        ones = torch.ones(len(final), 1)
        target = final * weight
        for layer, name in enumerate(names):
            stream = cap[name][keep].reshape(-1, d).float().cpu()
            x = torch.cat([stream, ones], 1) * weight
            xtx[layer] += (x.T @ x).double()
            xty[layer] += (x.T @ target).double()
    return xtx, xty


def solve_translators(
    xtx: Tensor, xty: Tensor, ridge: float, *, last_is_final: bool
) -> tuple[Tensor, Tensor]:
    """Ridge least squares per layer (``ridge`` relative to the mean variance). With
    ``last_is_final`` (the last layer's stream is the final stream, as at ``resid_post``), the last
    translator is the identity."""
    n_layers, d = xty.shape[0], xty.shape[2]
    fitted = n_layers - 1 if last_is_final else n_layers
    weights, biases = [], []
    for layer in range(fitted):
        a = xtx[layer]
        a = a + ridge * a.diagonal()[:d].mean() * torch.eye(d + 1, dtype=a.dtype)
        solution = torch.linalg.solve(a, xty[layer]).float()
        weights.append(solution[:d])
        biases.append(solution[d])
    if last_is_final:
        weights.append(torch.eye(d))
        biases.append(torch.zeros(d))
    return torch.stack(weights), torch.stack(biases)


def least_squares_translators(
    lm: LensModel,
    rows: Tensor,
    *,
    site: str = "resid_pre",
    ridge: float = 1e-3,
    exclude: Exclude | None = None,
) -> tuple[Tensor, Tensor]:
    """Din et al.'s linear shortcut from each layer's ``site`` to the final stream.

    Args:
        lm: the model (read only).
        rows: ``[row, seq]`` token ids to fit on.
        site: ``resid_pre`` (the stream entering each block) or ``resid_post``.
        ridge: the ridge, relative to the mean variance of the layer's stream.
        exclude: positions left out (None: the sink).

    Returns:
        ``weight [layer, d, d]`` and ``bias [layer, d]``: ``stream @ weight + bias``.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.text_corpus import text_chunks
    >>> lm = load_model("toy-2l")
    >>> weight, bias = least_squares_translators(lm, text_chunks(lm, 256, 32))
    >>> weight.shape, bias.shape
    (torch.Size([2, 64, 64]), torch.Size([2, 64]))
    """
    xtx, xty = normal_equations(lm, rows, site, exclude)
    return solve_translators(xtx, xty, ridge, last_is_final=site == "resid_post")
