"""Shared machinery for batched interventions: resuming a forward pass at a layer, chunking.

Runs that intervene at layer ``l`` agree with the unpatched run on every layer below ``l``, so
they restart from that run's residual stream with TransformerLens's ``start_at_layer`` instead of
recomputing the lower layers. Rotary angles come from the position index and the causal mask from
the length, so an unpadded batch resumed this way equals the full pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens.utilities.activation_functions import apply_softcap

if TYPE_CHECKING:
    from lmsci_mi.hooks import HookFn
    from lmsci_mi.model import LensModel

# Rows per batched forward pass when the caller gives no chunk size: 256 rows of ~15 tokens of
# SmolLM2 keep activations well under 1 GiB (logits are only computed at the answer position).
DEFAULT_TOKENS_PER_CHUNK = 4096


def default_chunk_rows(n_pos: int) -> int:
    """Rows per forward pass so that a chunk holds about DEFAULT_TOKENS_PER_CHUNK tokens."""
    return max(1, DEFAULT_TOKENS_PER_CHUNK // max(1, n_pos))


def answer_logits(
    lm: LensModel,
    resid_final: Float[Tensor, "batch pos d_model"],
    answer_position: int = -1,
) -> Float[Tensor, "batch vocab"]:
    """Final norm and unembedding at one position only: the metric never needs the others.

    Unembedding every position would cost a quarter of SmolLM2's forward FLOPs for nothing.
    """
    model = lm.model
    resid = resid_final[:, answer_position : (answer_position + 1) or None]
    if model.cfg.normalization_type is not None:
        resid = model.ln_final(resid)
    logits = model.unembed(resid)
    logits = apply_softcap(logits, model.cfg.output_logits_soft_cap)
    return logits[:, 0]


def run_from_layer(
    lm: LensModel,
    resid: Float[Tensor, "batch pos d_model"],
    start_layer: int,
    fwd_hooks: Sequence[tuple[str, HookFn]] = (),
    *,
    answer_position: int = -1,
    label: str = "batched run",
) -> Float[Tensor, "batch vocab"]:
    """Run blocks ``start_layer..`` on ``resid`` (the input of that block) and return logits.

    Hooks go through the registry, so they are removed whatever happens.
    """
    n_layers = lm.cfg.n_layers
    with lm.hooks.hooks(fwd=list(fwd_hooks), label=label):
        if start_layer < n_layers:
            resid = lm.model(resid, start_at_layer=start_layer, stop_at_layer=n_layers)
        return answer_logits(lm, resid, answer_position)


def chunks(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices of ``range(n)`` of at most ``size`` elements."""
    size = max(1, int(size))
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def model_device(lm: LensModel) -> torch.device:
    return lm.device
