"""Long inputs through TransformerLens attention: query-chunked attention, rotary tables past
``n_ctx``, and the per-layer facts (local or global, window, rotary base) length analyses need.

TransformerLens materialises every attention score (``[batch, head, query, key]``), so twice a
model's trained length runs out of memory; :func:`chunked_attention` computes the scores one block
of queries at a time (all keys, causal) and gives the normal path's numbers up to float rounding.
The attention modules' internals (rotary tables, q/k norms, masks) are touched here and nowhere else.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import einops
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from transformer_lens.components import AbstractAttention, GroupedQueryAttention

from lmsci_mi.errors import UserInputError

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "LayerAttention",
    "QueryChunk",
    "attention_layers",
    "chunked_attention",
    "current_query_chunk",
    "extended_rotary",
    "long_input_path",
    "pre_rotary",
    "rotate_at",
    "score_query_positions",
]


@dataclass(frozen=True)
class LayerAttention:
    """How one layer attends: ``kind`` ``"local"`` (a sliding window of ``window`` keys, e.g.
    Gemma 3's five of six layers) or ``"global"``, and the rotary base of that layer type
    (None without rotary positions)."""

    layer: int
    kind: Literal["global", "local"]
    window: int | None
    rotary_base: float | None


@dataclass(frozen=True)
class QueryChunk:
    """The block of queries ``[start, stop)`` whose scores are being computed in ``layer``."""

    layer: int
    start: int
    stop: int


_CHUNK: contextvars.ContextVar[QueryChunk | None] = contextvars.ContextVar("query_chunk", default=None)


def current_query_chunk() -> QueryChunk | None:
    """The query block of the running :func:`chunked_attention` pass (None outside one).

    A hook on ``hook_attn_scores`` or ``hook_pattern`` sees ``[batch, head, chunk, key]`` there,
    one call per block; this says which queries the rows are."""
    return _CHUNK.get()


def score_query_positions(scores: Tensor) -> Tensor:
    """The absolute query positions of the rows of an attention-score or pattern block
    (``[..., query, key]``): the chunk's inside :func:`chunked_attention`, else the last
    ``query`` of ``key`` positions (a whole sequence, or the new tokens of a cached pass)."""
    n_query, n_key = scores.shape[-2], scores.shape[-1]
    chunk = current_query_chunk()
    start = chunk.start if chunk is not None else n_key - n_query
    return torch.arange(start, start + n_query, device=scores.device)


def _attn(lm: LensModel, layer: int) -> Any:
    if not 0 <= layer < lm.cfg.n_layers:
        raise UserInputError(f"layer {layer} does not exist: {lm.name} has {lm.cfg.n_layers} layers")
    return lm.model.blocks[layer].attn


def attention_layers(lm: LensModel) -> tuple[LayerAttention, ...]:
    """Each layer's attention kind, window and rotary base, as the loaded model has them
    (TransformerLens marks Gemma 3's sliding-window layers ``attn_type == "local"``).

    >>> from lmsci_mi import load_model
    >>> attention_layers(load_model("toy-2l"))[0]
    LayerAttention(layer=0, kind='global', window=None, rotary_base=10000.0)
    """
    rotary = lm.cfg.positional_embedding_type == "rotary"
    out = []
    for layer in range(lm.cfg.n_layers):
        attn = _attn(lm, layer)
        local = attn.attn_type == "local"
        out.append(LayerAttention(
            layer=layer,
            kind="local" if local else "global",
            window=int(lm.cfg.window_size) if local else None,
            rotary_base=float(attn._rotary_base()) if rotary else None,
        ))
    return tuple(out)


# ----------------------------------------------------------------------------- rotary


def _require_rotary(lm: LensModel, what: str) -> None:
    if lm.cfg.positional_embedding_type != "rotary":
        raise UserInputError(
            f"{what} needs rotary positions, but {lm.name} uses "
            f"{lm.cfg.positional_embedding_type!r} positional embeddings"
        )


def _tables(attn: Any, length: int) -> tuple[Tensor, Tensor]:
    """``(sin, cos)`` with at least ``length`` rows: the module's own, or longer ones computed
    the way TransformerLens computes them (row p depends on p only, so a longer table's first
    rows equal the shorter's bit for bit)."""
    if attn.rotary_cos.shape[0] >= length:
        return attn.rotary_sin, attn.rotary_cos
    sin, cos = attn.calculate_sin_cos_rotary(
        attn.cfg.rotary_dim, length, base=attn._rotary_base(), dtype=attn.cfg.dtype
    )
    return sin.to(attn.rotary_sin.device), cos.to(attn.rotary_cos.device)


def _ensure_tables(attn: Any, length: int) -> None:
    if attn.rotary_cos.shape[0] < length:
        attn.rotary_sin, attn.rotary_cos = _tables(attn, length)


def rotate_at(
    lm: LensModel,
    layer: int,
    x: Float[Tensor, "batch pos head d_head"],
    positions: int | Tensor,
) -> Float[Tensor, "batch pos head d_head"]:
    """``x`` (queries or keys before rotary) rotated as at ``positions`` (one int for every row,
    or one per row) with ``layer``'s own rotary base and pairing; reads the model only.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> with lm.hooks.capture(["blocks.0.attn.hook_q", "blocks.0.attn.hook_rot_q"]) as cap:
    ...     _ = lm.model(torch.tensor([[1, 2, 3]]))
    >>> q = pre_rotary(lm, 0, cap["blocks.0.attn.hook_q"], "q")
    >>> bool(torch.allclose(rotate_at(lm, 0, q, torch.arange(3)), cap["blocks.0.attn.hook_rot_q"]))
    True
    """
    _require_rotary(lm, "rotate_at")
    attn = _attn(lm, layer)
    pos = torch.as_tensor(positions, device=x.device).long().reshape(-1)
    sin, cos = _tables(attn, int(pos.max()) + 1)
    pos = pos.to(cos.device).expand(x.shape[1]) if pos.numel() == 1 else pos.to(cos.device)
    rot = attn.cfg.rotary_dim
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    turned = x_rot * cos[pos][None, :, None] + attn.rotate_every_two(x_rot) * sin[pos][None, :, None]
    return torch.cat([turned.to(x.dtype), x_pass], dim=-1)


def pre_rotary(
    lm: LensModel, layer: int, x: Float[Tensor, "batch pos head d_head"], which: Literal["q", "k"]
) -> Float[Tensor, "batch pos head d_head"]:
    """What rotary turns, from ``hook_q``/``hook_k``'s activation: the same vectors, or their
    q/k-norm where the model has one (Gemma 3 normalises queries and keys after those hooks)."""
    attn = _attn(lm, layer)
    if not attn.cfg.use_qk_norm:
        return x
    norm = attn.q_norm if which == "q" else attn.k_norm
    return attn._apply_qk_norm(x, norm)


@contextmanager
def extended_rotary(lm: LensModel, length: int) -> Iterator[None]:
    """Rotary tables of at least ``length`` positions in every layer for the block, so inputs
    longer than ``cfg.n_ctx`` run (TransformerLens extends its tables lazily, but never past
    ``n_ctx``, which loading caps at 8192); the original tables are put back on exit.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> with extended_rotary(lm, 300):
    ...     lm.model(torch.zeros(1, 300, dtype=torch.long)).shape[1]
    300
    """
    saved = _save_tables(lm)
    try:
        if saved:
            for layer in range(lm.cfg.n_layers):
                _ensure_tables(_attn(lm, layer), length)
        yield
    finally:
        _restore_tables(lm, saved)


def _save_tables(lm: LensModel) -> dict[int, tuple[Tensor, Tensor]]:
    if lm.cfg.positional_embedding_type != "rotary":
        return {}
    return {i: (block.attn.rotary_sin, block.attn.rotary_cos) for i, block in enumerate(lm.model.blocks)}


def _restore_tables(lm: LensModel, saved: dict[int, tuple[Tensor, Tensor]]) -> None:
    for layer, (sin, cos) in saved.items():
        attn = lm.model.blocks[layer].attn
        attn.rotary_sin, attn.rotary_cos = sin, cos


# ----------------------------------------------------------------------------- chunked path


@contextmanager
def long_input_path(lm: LensModel, length: int, chunk_size: int | None) -> Iterator[None]:
    """The attention path for inputs of ``length`` tokens: :func:`chunked_attention` with
    ``chunk_size`` queries per block, or TransformerLens's own path (``chunk_size=None``) with
    its rotary tables extended to ``length`` (:func:`extended_rotary`)."""
    if chunk_size is None:
        with extended_rotary(lm, length):
            yield
    else:
        with chunked_attention(lm, chunk_size):
            yield


_UNSUPPORTED = (
    ("load_in_4bit", "4-bit weights"),
    ("use_logn_attn", "log-n query scaling"),
    ("use_attention_sinks", "learned attention sinks"),
    ("clip_qkv", "clipped q/k/v"),
)


def _check_supported(lm: LensModel) -> None:
    cfg = lm.cfg
    problems = [what for name, what in _UNSUPPORTED if getattr(cfg, name, None) not in (None, False)]
    if cfg.positional_embedding_type in ("alibi", "relative_positional_bias"):
        problems.append(f"{cfg.positional_embedding_type} positions")
    if cfg.attention_dir != "causal":
        problems.append("bidirectional attention")
    if cfg.original_architecture in ("OlmoeForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM"):
        problems.append("OLMo's whole-vector q/k norms")
    if problems:
        raise UserInputError(
            f"chunked attention does not cover {', '.join(problems)} ({lm.name}); run this model "
            "without it (inputs short enough for TransformerLens's own attention)"
        )


@contextmanager
def chunked_attention(lm: LensModel, chunk_size: int = 512) -> Iterator[None]:
    """Compute attention ``chunk_size`` queries at a time in every layer, for the block.

    Each block of queries attends to every key, under the causal mask and a local layer's window,
    so the largest score tensor is ``[batch, head, chunk_size, key]`` instead of
    ``[batch, head, key, key]``. Hooks fire as on the normal path, except ``hook_attn_scores``
    and ``hook_pattern``, which fire once per block with that block's rows
    (:func:`current_query_chunk`, :func:`score_query_positions` say which). Rotary tables grow
    as inputs need (past ``n_ctx`` too). Every attention module's forward and tables are
    restored on exit, also on error. Cached generation passes (one new token) take the normal path.

    Raises:
        UserInputError: ``chunk_size`` < 1, or a model feature this path does not cover.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> tokens = torch.tensor([[1, 2, 3, 4, 5]])
    >>> with chunked_attention(lm, chunk_size=2):
    ...     chunked = lm.model(tokens)
    >>> bool(torch.allclose(chunked, lm.model(tokens), atol=1e-5))
    True
    """
    if chunk_size < 1:
        raise UserInputError(f"chunk_size must be at least 1, not {chunk_size}")
    _check_supported(lm)
    saved_tables = _save_tables(lm)
    modules = [block.attn for block in lm.model.blocks]
    # An instance attribute shadows the class's forward; an outer block's own is kept to restore.
    previous = [attn.__dict__.get("forward") for attn in modules]
    try:
        for layer, attn in enumerate(modules):
            original = previous[layer] or attn.forward
            attn.forward = types.MethodType(_chunked_forward(layer, chunk_size, original), attn)
        yield
    finally:
        for attn, before in zip(modules, previous, strict=True):
            if before is None:
                attn.__dict__.pop("forward", None)
            else:
                attn.forward = before
        _restore_tables(lm, saved_tables)


def _chunked_forward(layer: int, chunk_size: int, original: Any) -> Any:
    def forward(
        attn: Any,
        query_input: Tensor,
        key_input: Tensor,
        value_input: Tensor,
        past_kv_cache_entry: Any = None,
        additive_attention_mask: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_bias: Tensor | None = None,
    ) -> Tensor:
        n_pos = query_input.shape[1]
        if attn.cfg.positional_embedding_type == "rotary":
            past = 0 if past_kv_cache_entry is None else past_kv_cache_entry.past_keys.size(1)
            _ensure_tables(attn, past + n_pos)
        if past_kv_cache_entry is not None or n_pos <= chunk_size:
            return original(
                query_input, key_input, value_input, past_kv_cache_entry=past_kv_cache_entry,
                additive_attention_mask=additive_attention_mask, attention_mask=attention_mask,
                position_bias=position_bias,
            )
        q, k, v = attn.calculate_qkv_matrices(query_input, key_input, value_input)
        if attn.cfg.positional_embedding_type == "rotary":
            q = attn.hook_rot_q(attn.apply_rotary(q, 0, attention_mask))
            k = attn.hook_rot_k(attn.apply_rotary(k, 0, attention_mask))
        if isinstance(attn, GroupedQueryAttention) and not attn.cfg.ungroup_grouped_query_attention:
            # Once per layer rather than once per block, as the grouped module would.
            k = torch.repeat_interleave(k, dim=2, repeats=attn.repeat_kv_heads)
            v = torch.repeat_interleave(v, dim=2, repeats=attn.repeat_kv_heads)
        v_heads = einops.rearrange(v, "batch key head d -> batch head key d")
        parts = []
        for start in range(0, n_pos, chunk_size):
            stop = min(n_pos, start + chunk_size)
            pattern = _chunk_pattern(
                attn, QueryChunk(layer, start, stop), q[:, start:stop], k, attention_mask,
                additive_attention_mask,
            )
            parts.append(pattern.to(v.dtype) @ v_heads)  # [batch, head, chunk, d_head]
        z = attn.hook_z(einops.rearrange(torch.cat(parts, dim=2), "batch head pos d -> batch pos head d"))
        return _project_out(attn, z)

    return forward


def _chunk_pattern(
    attn: Any,
    chunk: QueryChunk,
    q: Tensor,
    k: Tensor,
    attention_mask: Tensor | None,
    additive_attention_mask: Tensor | None,
) -> Tensor:
    """One block's attention pattern, the steps and hooks of TransformerLens's forward."""
    token = _CHUNK.set(chunk)
    try:
        # The base class's scores: k already has one head per query head.
        scores = AbstractAttention.calculate_attention_scores(attn, q, k)  # [batch, head, chunk, key]
        mask = attn._make_causal_mask(chunk.stop - chunk.start, k.shape[1], chunk.start, scores.device)
        if attention_mask is not None:
            mask = mask & attention_mask[:, None, None, :].bool().to(mask.device)
        scores = torch.where(mask, scores, attn.IGNORE.to(scores.device))
        if additive_attention_mask is not None:
            scores = scores + additive_attention_mask
        scores = attn.hook_attn_scores(scores)
        pattern = F.softmax(scores, dim=-1)
        pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
        return attn.hook_pattern(pattern)
    finally:
        _CHUNK.reset(token)


def _project_out(attn: Any, z: Tensor) -> Tensor:
    """``W_O`` and ``b_O`` as TransformerLens applies them (``hook_result`` when it is on)."""
    batch, n_pos, n_heads, d_head = z.shape
    if not attn.cfg.use_attn_result:
        w = einops.rearrange(attn.W_O, "head d_head d_model -> d_model (head d_head)")
        return F.linear(z.reshape(batch, n_pos, n_heads * d_head), w, attn.b_O)
    result = attn.hook_result((z[..., None] * attn.W_O[None, None]).sum(-2))
    return result.sum(2) + attn.b_O
