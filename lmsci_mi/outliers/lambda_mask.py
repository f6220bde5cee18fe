"""LM-Infinite's Λ-shaped attention mask as an intervention (Han et al., NAACL 2024,
arXiv:2308.16137; `models/lambda_attention.py` and `models/llama.py` of their code).

Each query sees the previous ``local_window`` tokens with their ordinary scores and the first
``n_global`` tokens scored as if they sat ``distance_cap`` tokens back: their keys un-rotated and
the query rotated at the cap. Scores are recomputed from the pre-rotary queries and keys on
``hook_attn_scores``, so it works on TransformerLens's path and on the chunked one
(:func:`lmsci_mi.long_context.chunked_attention`); on Gemma 3 it applies to the global-attention
layers only (the local ones are windowed already), with that layer type's rotary base.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from lmsci_mi.config import Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.long_context import attention_layers, pre_rotary, rotate_at, score_query_positions
from lmsci_mi.model import LensModel
from lmsci_mi.outliers.length import trained_context
from lmsci_mi.sites import hook_name

__all__ = ["LambdaMask", "LambdaMaskConfig", "lambda_mask"]

_SOURCE = "LM-Infinite README (Han et al. 2024, arXiv:2308.16137); reference/phase4_methods.md §9"


@config
class LambdaMaskConfig(Config):
    """Settings of :func:`lambda_mask`, with the paper's values."""

    local_window: int | None = field(
        default=None,
        metadata={"help": "keys each query sees with ordinary scores, itself included (default: the "
                          "model's trained length)", "ge": 1,
                  **paper("L_pretrain (4096 Llama-2; 2048 LLaMA, MPT-7B, GPT-J)", f"{_SOURCE}, --local_branch",
                          why="None resolves to the model's trained length (outliers.length.TRAINED_CONTEXT): "
                              "the paper's rule, per model")},
    )
    n_global: int = field(
        default=100,
        metadata={"help": "first tokens every query also sees (the sink, where there is one, is the first)",
                  "ge": 0,
                  **paper(100, f"{_SOURCE}, --global_branch (perplexity runs; '10-100 gives generally "
                               "similar effect'; 10 for the passkey and 200M-token stream)")},
    )
    distance_cap: int | None = field(
        default=None,
        metadata={"help": "distance at which the first tokens are scored beyond the window "
                          "(default: local_window)", "ge": 0,
                  **paper("L_pretrain", f"{_SOURCE}, --limit_distance",
                          why="None resolves to local_window, which resolves to the trained length")},
    )
    layers: tuple[int, ...] | None = field(
        default=None,
        metadata={"help": "layers to mask (default: every global-attention layer)", "ge": 0},
    )


@dataclass(frozen=True)
class LambdaMask:
    """The mask :func:`lambda_mask` applies, resolved for one model."""

    layers: tuple[int, ...]
    local_window: int
    n_global: int
    distance_cap: int


def _resolve(lm: LensModel, cfg: LambdaMaskConfig) -> LambdaMask:
    if lm.cfg.positional_embedding_type != "rotary":
        raise UserInputError(
            f"the Λ-mask caps distances by rotating queries, but {lm.name} has "
            f"{lm.cfg.positional_embedding_type!r} positions, not rotary ones"
        )
    kinds = attention_layers(lm)
    if cfg.layers is None:
        layers = tuple(a.layer for a in kinds if a.kind == "global")
    else:
        bad = [layer for layer in cfg.layers if layer >= lm.cfg.n_layers]
        if bad:
            raise UserInputError(f"layers {bad} do not exist: {lm.name} has {lm.cfg.n_layers} layers")
        local = [layer for layer in cfg.layers if kinds[layer].kind == "local"]
        if local:
            raise UserInputError(
                f"layers {local} are sliding-window layers already (window {kinds[local[0]].window}); "
                "the Λ-mask is for global-attention layers: leave them out"
            )
        layers = tuple(sorted(set(cfg.layers)))
    window = cfg.local_window if cfg.local_window is not None else trained_context(lm).trained_length
    cap = cfg.distance_cap if cfg.distance_cap is not None else window
    return LambdaMask(layers=layers, local_window=window, n_global=cfg.n_global, distance_cap=cap)


@contextmanager
def lambda_mask(lm: LensModel, cfg: LambdaMaskConfig | None = None) -> Iterator[LambdaMask]:
    """Apply LM-Infinite's Λ-shaped mask to ``lm``'s attention for the block (hooks through the
    registry; all removed on exit, also on error; the weights are not touched).

    Within the window a score is the model's own; a first-``n_global`` key further back gets
    ``rotate(q, cap) · k / scale`` (its key un-rotated, the query rotated at the cap: the score at
    distance = cap); every other key is masked. Full forward passes only (cached generation
    raises), on the normal or the chunked attention path.

    Args:
        lm: the model (rotary positions).
        cfg: window, first tokens, cap and layers (the paper's values by default).

    Yields:
        The resolved :class:`LambdaMask`.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> with lambda_mask(lm, LambdaMaskConfig(local_window=4, n_global=1)) as mask:
    ...     _ = lm.model(torch.arange(1, 9)[None])
    >>> mask, len(lm.hooks.active())
    (LambdaMask(layers=(0, 1), local_window=4, n_global=1, distance_cap=4), 0)
    """
    plan = _resolve(lm, cfg or LambdaMaskConfig())
    hooks: list[tuple[str, Any]] = []
    for layer in plan.layers:
        hooks.extend(_layer_hooks(lm, layer, plan))
    with lm.hooks.hooks(fwd=hooks, label="lambda_mask"):
        yield plan


def _layer_hooks(lm: LensModel, layer: int, plan: LambdaMask) -> list[tuple[str, Any]]:
    seen: dict[str, Tensor] = {}

    def record(activation: Tensor, hook: Any) -> None:
        seen["q" if hook.name.endswith("hook_q") else "k"] = activation

    def mask(scores: Tensor, hook: Any) -> Tensor:
        return _masked_scores(lm, layer, plan, scores, seen["q"], seen["k"])

    return [
        (hook_name("q", layer), record),
        (hook_name("k", layer), record),
        (hook_name("attn_scores", layer), mask),
    ]


def _masked_scores(
    lm: LensModel, layer: int, plan: LambdaMask, scores: Tensor, q: Tensor, k: Tensor
) -> Tensor:
    """``scores`` (``[batch, head, query, key]``, one block of queries) under the Λ-mask."""
    n_query, n_key = scores.shape[-2:]
    if k.shape[1] != n_key:
        raise UserInputError(
            "the Λ-mask recomputes scores from the whole sequence's keys, so it needs full forward "
            "passes (perplexity, diagnostics), not cached generation"
        )
    query_pos = score_query_positions(scores)
    key_pos = torch.arange(n_key, device=scores.device)
    distance = query_pos[:, None] - key_pos[None, :]
    local = (distance >= 0) & (distance < plan.local_window)
    out = scores.masked_fill(~local, float("-inf"))
    n_global = min(plan.n_global, n_key)
    far = ~local[:, :n_global] & (distance[:, :n_global] >= 0)
    if n_global == 0 or not bool(far.any()):
        return out
    attn = lm.model.blocks[layer].attn
    rows = q[:, int(query_pos[0]) : int(query_pos[0]) + n_query]
    query = rotate_at(lm, layer, pre_rotary(lm, layer, rows, "q"), plan.distance_cap)
    keys = pre_rotary(lm, layer, k[:, :n_global], "k")  # un-rotated: as at position 0
    far_scores = attn.calculate_attention_scores(query, keys).to(out.dtype)  # [batch, head, query, n_global]
    out[..., :n_global] = torch.where(far, far_scores, out[..., :n_global])
    return out
