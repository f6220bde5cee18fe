"""Mean ablation of a set of attention heads: each head's output (``hook_z``) replaced by its mean
over a reference batch, per position (Wang et al. 2022; Olsson et al. 2022 ablate induction heads
the same way). Induction ablation and the IOI faithfulness checks both run through this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.model import LensModel
from lmsci_mi.sites import Head, hook_name

__all__ = ["all_heads", "head_means", "mean_ablate_heads", "mean_ablated_logits", "z_hooks"]


def z_hooks(lm: LensModel) -> list[str]:
    """The ``hook_z`` name of every layer (each head's output before ``W_O``)."""
    return [hook_name("z", layer) for layer in range(lm.cfg.n_layers)]


def all_heads(lm: LensModel) -> tuple[Head, ...]:
    """Every attention head of the model, layer by layer."""
    return tuple(Head(layer, head) for layer in range(lm.cfg.n_layers) for head in range(lm.cfg.n_heads))


@torch.no_grad()
def head_means(lm: LensModel, tokens: Int[Tensor, "batch pos"]) -> dict[str, Tensor]:
    """Each layer's ``hook_z`` averaged over the batch, per position (``[1, pos, head, d_head]``)."""
    return lm.hooks.mean_activations(z_hooks(lm), tokens)


@contextmanager
def mean_ablate_heads(
    lm: LensModel, heads: Iterable[Head | tuple[int, int]], means: Mapping[str, Tensor]
) -> Iterator[None]:
    """Within the block, every head in ``heads`` outputs its mean (``means`` from :func:`head_means`)
    at every position. All hooks go through the registry's ``ablate`` and are removed on exit.
    """
    by_hook: dict[str, list[int]] = {}
    for head in map(Head.parse, heads):
        by_hook.setdefault(hook_name("z", head.layer), []).append(head.head)
    if not by_hook:
        yield
        return
    with lm.hooks.ablate(list(by_hook), mode="mean", means=means, heads=by_hook):
        yield


@torch.no_grad()
def mean_ablated_logits(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"],
    heads: Iterable[Head | tuple[int, int]],
    means: Mapping[str, Tensor],
) -> Float[Tensor, "batch pos vocab"]:
    """The logits on ``tokens`` with ``heads`` mean-ablated. Reads the model only.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> tokens = torch.tensor([[0, 5, 6, 7, 5, 6, 7], [0, 9, 8, 7, 9, 8, 7]])
    >>> ablated = mean_ablated_logits(lm, tokens, all_heads(lm), head_means(lm, tokens))
    >>> clean = mean_ablated_logits(lm, tokens, [], {})
    >>> bool(torch.equal(clean, lm(tokens))), bool(torch.equal(ablated, clean))
    (True, False)
    """
    with mean_ablate_heads(lm, heads, means):
        return lm.model(tokens)
