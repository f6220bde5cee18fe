"""Repeated random token sequences: the standard probe for induction and prefix-matching heads.

A sequence is ``[sink, t_1 … t_n, t_1 … t_n]`` with the ``t_i`` drawn uniformly (seeded). On the
second copy an induction head attends from ``t_i`` to the token after its first occurrence and
predicts it (Olsson et al. 2022, "In-context learning and induction heads").
"""

from __future__ import annotations

import torch
from jaxtyping import Int
from torch import Tensor

from lmsci_mi.errors import UserInputError

__all__ = ["repeated_random_tokens"]


def repeated_random_tokens(
    n_sequences: int,
    half_length: int,
    *,
    vocab: tuple[int, int] | range,
    sink_token_id: int | None,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> Int[Tensor, "batch pos"]:
    """Draw ``n_sequences`` random halves of ``half_length`` tokens and repeat each once.

    Args:
        n_sequences: batch size.
        half_length: tokens in each half (the sequence has ``2 * half_length`` tokens plus the
            sink).
        vocab: ``(low, high)`` token-id range to draw from (high exclusive). For a real model
            pick ordinary word pieces, e.g. ``(1000, 10000)`` as TransformerLens's demo does,
            so that special tokens never appear.
        sink_token_id: put in front of every sequence (lmsci-mi's tokenisation policy); None
            for a model trained without one.
        seed: the draw depends only on this seed (a private generator, not the global RNG).
        device: where the tensor goes.

    Returns:
        ``[n_sequences, 2 * half_length (+1 with a sink)]`` token ids. Tokens within one half are
        distinct, so every second-half token has exactly one earlier copy.

    >>> toks = repeated_random_tokens(2, 5, vocab=(10, 100), sink_token_id=0, seed=1)
    >>> toks.shape
    torch.Size([2, 11])
    >>> bool((toks[:, 1:6] == toks[:, 6:]).all())
    True
    """
    low, high = (vocab.start, vocab.stop) if isinstance(vocab, range) else vocab
    if high - low < half_length:
        raise UserInputError(f"vocab range {low}..{high} is smaller than half_length {half_length}")
    if n_sequences < 1 or half_length < 1:
        raise UserInputError("n_sequences and half_length must be positive")
    generator = torch.Generator().manual_seed(seed)
    # Distinct tokens within a half: a repeated token inside one half would give a second,
    # ambiguous induction target and blur the score.
    halves = torch.stack(
        [torch.randperm(high - low, generator=generator)[:half_length] + low for _ in range(n_sequences)]
    )
    tokens = torch.cat([halves, halves], dim=1)
    if sink_token_id is not None:
        sink = torch.full((n_sequences, 1), sink_token_id, dtype=torch.long)
        tokens = torch.cat([sink, tokens], dim=1)
    return tokens.to(device) if device is not None else tokens
