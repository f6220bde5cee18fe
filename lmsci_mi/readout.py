"""Residual-space vectors to logits, in one place: the final norm, ``W_U`` and ``b_U``, the soft cap.

Every readout names its space: ``"resid"`` (the raw stream) or ``"normalized"`` (what
``ln_final.hook_normalized`` holds); the final norm runs live, recomputed or with its divisor
frozen. Every function reads the model only. After nostalgebraist 2020 (the logit lens) and
Elhage et al. 2021 (direct logit attribution).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.components import LayerNorm, LayerNormPre
from transformer_lens.utilities.activation_functions import apply_softcap, softcap_enabled

from lmsci_mi.errors import UserInputError
from lmsci_mi.sites import hook_name


class _Model(Protocol):
    """What a readout uses of a :class:`lmsci_mi.model.LensModel` (``model`` imports this module,
    so this one names the attributes it reads instead of importing it back)."""

    model: Any
    cfg: Any
    hooks: Any
    name: str

    def to_tokens(self, *args: Any, **kwargs: Any) -> Tensor: ...

__all__ = [
    "NORM_MODES",
    "SPACES",
    "LogitDirections",
    "NormMode",
    "Space",
    "centres",
    "final_norm_gain",
    "final_norm_module",
    "final_norm_scale",
    "frozen_norm",
    "gains_folded",
    "has_final_norm",
    "logit_directions",
    "logits",
    "norm_gain",
    "normalized",
    "post_mlp_gain",
    "post_mlp_norm",
    "soft_cap",
    "undo_soft_cap",
    "unembed_input",
    "unembedding_vectors",
    "vocab_projection",
]

Space = Literal["resid", "normalized"]
"""``"resid"``: the raw residual stream (the final norm still to apply); ``"normalized"``: the
final norm's output at ``ln_final.hook_normalized`` (its gain and bias, if not folded, still to
apply)."""

NormMode = Literal["live", "recompute", "frozen"]
"""How a ``"resid"`` vector passes the final norm: ``"live"`` calls the model's ``ln_final`` (its
hooks fire, so a capture or a steer there sees the readout); ``"recompute"`` computes the norm here
with its divisor from the vector itself (no hook fires); ``"frozen"`` divides by a given divisor
(a captured ``ln_final.hook_scale``), which makes the readout linear in the vector."""

SPACES: tuple[str, ...] = get_args(Space)
NORM_MODES: tuple[str, ...] = get_args(NormMode)

TokenIds = Int[Tensor, " n"] | Sequence[int]


# --------------------------------------------------------------------------- the norms


def final_norm_module(lm: _Model) -> nn.Module | None:
    """The model's final norm (``ln_final``), or None for a model without one.

    This is the one place that asks whether there is a final norm.
    """
    return getattr(lm.model, "ln_final", None)


def has_final_norm(lm: _Model) -> bool:
    """Whether the model normalises the stream before the unembedding.

    >>> from lmsci_mi import load_model
    >>> has_final_norm(load_model("toy-2l"))
    True
    """
    return final_norm_module(lm) is not None


def centres(norm: nn.Module) -> bool:
    """Whether ``norm`` subtracts each vector's mean before dividing (LayerNorm, folded or not),
    or only divides (RMSNorm).

    The one place that asks "is this a LayerNorm?". It asks the module, not
    ``cfg.normalization_type``: a model with ``normalization_type="LN"`` and ``final_rms=True``
    has LayerNorms in its blocks and an RMSNorm at the end.

    >>> from lmsci_mi import load_model
    >>> centres(load_model("toy-gpt2-2l").model.ln_final), centres(load_model("toy-2l").model.ln_final)
    (True, False)
    """
    return isinstance(norm, (LayerNorm, LayerNormPre))


def norm_gain(norm: nn.Module | None) -> Float[Tensor, " d_model"] | None:
    """A norm's gain (weight), detached, or None when it has none: no norm at all, or a norm whose
    gain ``fold_ln`` moved into the next weights (TransformerLens then keeps a weightless
    ``RMSNormPre``/``LayerNormPre``). The one function every gain is read through."""
    weight = getattr(norm, "w", None) if norm is not None else None
    return weight.detach() if isinstance(weight, Tensor) else None


def final_norm_gain(lm: _Model) -> Float[Tensor, " d_model"] | None:
    """The final norm's gain, or None when ``load_model(fold_ln=True)`` has folded it into ``W_U``
    (or the model has no final norm).

    >>> from lmsci_mi import load_model
    >>> final_norm_gain(load_model("toy-2l")).shape
    torch.Size([64])
    """
    return norm_gain(final_norm_module(lm))


def post_mlp_norm(lm: _Model, layer: int) -> nn.Module | None:
    """The norm a block applies to its MLP's output before it enters the stream (Gemma 2/3
    ``ln2_post``), or None for a model without post-norms."""
    if not getattr(lm.cfg, "use_normalization_before_and_after", False):
        return None
    return getattr(lm.model.blocks[layer], "ln2_post", None)


def post_mlp_gain(lm: _Model, layer: int) -> Float[Tensor, " d_model"] | None:
    """The post-MLP norm's gain (Gemma 2/3 ``ln2_post``, which ``fold_ln`` never folds), or None
    for a model without post-norms.

    >>> from lmsci_mi import load_model
    >>> post_mlp_gain(load_model("toy-2l"), 0) is None
    True
    """
    return norm_gain(post_mlp_norm(lm, layer))


def gains_folded(lm: _Model) -> bool:
    """Whether the final norm's gain sits inside ``W_U`` (a final norm without a gain of its own).

    >>> from lmsci_mi import load_model
    >>> gains_folded(load_model("toy-2l"))
    False
    """
    return has_final_norm(lm) and final_norm_gain(lm) is None


def _affine(norm: nn.Module | None, x: Tensor) -> Tensor:
    """What a norm does after its ``hook_normalized``: its gain and bias (detached), if any."""
    gain = norm_gain(norm)
    bias = getattr(norm, "b", None) if norm is not None else None
    if gain is not None:
        x = x * gain.to(x.dtype)
    if isinstance(bias, Tensor):
        x = x + bias.detach().to(x.dtype)
    return x


def _centred(norm: nn.Module, x: Tensor) -> Tensor:
    # Centring is linear, so it may be applied to parts of a vector or to directions alike.
    return x - x.mean(-1, keepdim=True) if centres(norm) else x


def _at_least_float32(x: Tensor) -> Tensor:
    # TransformerLens's norms compute in float32 for a half-precision model; so do we.
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def final_norm_scale(
    lm: _Model, resid: Float[Tensor, "... d_model"]
) -> Float[Tensor, "... 1"]:
    """The final norm's divisor recomputed on ``resid`` (what ``ln_final.hook_scale`` would hold):
    the root mean square after centring (LayerNorm) or without (RMSNorm), with the norm's eps;
    ones for a model without a final norm. Computed in float32 at least.

    >>> from lmsci_mi import load_model
    >>> final_norm_scale(load_model("toy-2l"), torch.full((3, 64), 2.0)).flatten().round().tolist()
    [2.0, 2.0, 2.0]
    """
    x = _at_least_float32(resid)
    norm = final_norm_module(lm)
    if norm is None:
        return torch.ones_like(x[..., :1])
    eps = float(getattr(norm, "eps", lm.cfg.eps))
    x = _centred(norm, x)
    return (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()


def frozen_norm(
    norm: nn.Module, x: Float[Tensor, "... d"], scale: Tensor, *, bias: bool = False
) -> Float[Tensor, "... d"]:
    """``x`` through any TransformerLens norm with its divisor frozen at ``scale`` (broadcast):
    centred if the norm centres, divided, times the gain; the norm's bias only when ``bias``.

    With the divisor frozen the norm is linear (affine with ``bias``), so parts of a vector can be
    passed one by one and still sum to the whole: what direct logit attribution does with the final
    norm and with Gemma's post-attention norm.

    >>> from lmsci_mi import load_model
    >>> norm = load_model("toy-2l").model.ln_final
    >>> frozen_norm(norm, torch.ones(2, 64), torch.tensor(2.0))[0, :2].tolist()
    [0.5, 0.5]
    """
    out = _centred(norm, x) / scale
    gain = norm_gain(norm)
    if gain is not None:
        out = out * gain.to(out.dtype)
    if bias:
        b = getattr(norm, "b", None)
        if isinstance(b, Tensor):
            out = out + b.detach().to(out.dtype)
    return out


def _check(space: str, norm: str, scale: Tensor | None) -> None:
    if space not in SPACES:
        raise UserInputError(f"space must be one of {list(SPACES)}, not {space!r}")
    if norm not in NORM_MODES:
        raise UserInputError(f"norm must be one of {list(NORM_MODES)}, not {norm!r}")
    if space == "normalized" and scale is not None:
        raise UserInputError("a 'normalized' vector is past the final norm's divisor: give no scale")
    if norm == "frozen" and space == "resid" and scale is None:
        raise UserInputError("norm='frozen' needs scale: the final norm's divisor "
                         "(the captured ln_final.hook_scale)")
    if norm != "frozen" and scale is not None:
        raise UserInputError(f"scale is the frozen divisor: pass norm='frozen', not {norm!r}")


def normalized(
    lm: _Model,
    resid: Float[Tensor, "... d_model"],
    *,
    norm: NormMode = "recompute",
    scale: Tensor | None = None,
) -> Float[Tensor, "... d_model"]:
    """Residual-stream vectors moved to the ``"normalized"`` space: what ``ln_final.hook_normalized``
    holds for them (the stream itself for a model without a final norm).

    Args:
        lm: the model.
        resid: raw residual-stream vectors.
        norm: ``"live"`` runs ``ln_final`` and returns what its hook saw (hooks on the final norm
            fire, an intervention there applies); ``"recompute"`` or ``"frozen"`` (with ``scale``)
            compute it here (see :data:`NormMode`).
        scale: the frozen divisor, broadcast against ``resid[..., :1]``.

    Returns:
        ``[..., d_model]``, in float32 at least except for ``"live"`` (the model's dtype).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> x = torch.randn(3, 64)
    >>> bool(torch.allclose(normalized(lm, x, norm="live"), normalized(lm, x)))
    True
    """
    _check("resid", norm, scale)
    final = final_norm_module(lm)
    if final is None:
        return resid
    if norm == "live":
        with lm.hooks.capture([hook_name("ln_final")]) as captured:
            final(resid)
        return captured[hook_name("ln_final")]
    x = _at_least_float32(resid)
    # _check has made sure a scale is given exactly when the norm is frozen.
    divisor = final_norm_scale(lm, x) if scale is None else scale
    return _centred(final, x) / divisor


def unembed_input(
    lm: _Model,
    x: Float[Tensor, "... d_model"],
    *,
    space: Space,
    norm: NormMode = "recompute",
    scale: Tensor | None = None,
) -> Float[Tensor, "... d_model"]:
    """What ``W_U`` reads for ``x``: the final norm (for ``"resid"``), then its gain and bias where
    they are not folded into ``W_U``.

    Args:
        lm: the model.
        x: vectors in ``space``.
        space: ``"resid"`` or ``"normalized"`` (see :data:`Space`).
        norm, scale: how a ``"resid"`` vector passes the final norm (see :func:`normalized`).

    Returns:
        ``[..., d_model]``; weights are detached, so no gradient reaches the model (a tuned lens's
        translators train through this).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> x = torch.randn(2, 64)
    >>> bool(torch.allclose(unembed_input(lm, x, space="resid"), lm.model.ln_final(x)))
    True
    """
    _check(space, norm, scale)
    final = final_norm_module(lm)
    if final is None:
        return x
    if space == "normalized":
        return _affine(final, x)
    if norm == "live":
        return final(x)
    return _affine(final, normalized(lm, x, norm=norm, scale=scale))


# --------------------------------------------------------------------------- logits


def soft_cap(lm: _Model, logits: Float[Tensor, "... vocab"]) -> Float[Tensor, "... vocab"]:
    """The model's output soft cap, ``cap * tanh(logits / cap)`` (Gemma 2), or ``logits`` itself."""
    return apply_softcap(logits, lm.cfg.output_logits_soft_cap)


def undo_soft_cap(lm: _Model, logits: Float[Tensor, "... vocab"]) -> Float[Tensor, "... vocab"]:
    """The logits before the model's soft cap (``cap * atanh(logits / cap)``): what a sum of
    direct contributions adds up to. ``logits`` itself for a model without a cap."""
    cap = lm.cfg.output_logits_soft_cap
    if not softcap_enabled(cap):
        return logits
    return cap * torch.atanh((logits / cap).clamp(-1 + 1e-7, 1 - 1e-7))


def _unembedding(lm: _Model, token_ids: TokenIds | None) -> tuple[Tensor, Tensor]:
    """``W_U`` and ``b_U`` (detached), only the columns of ``token_ids`` when given."""
    w_u, b_u = lm.model.W_U.detach(), lm.model.b_U.detach()
    if token_ids is None:
        return w_u, b_u
    ids = torch.as_tensor(token_ids, device=w_u.device).long()
    return w_u[:, ids], b_u[ids]


def logits(
    lm: _Model,
    x: Float[Tensor, "... d_model"],
    *,
    space: Space,
    norm: NormMode = "recompute",
    scale: Tensor | None = None,
    token_ids: TokenIds | None = None,
    cap: bool = True,
) -> Float[Tensor, "... vocab"]:
    """Logits of vectors in ``space``: the final norm, ``W_U`` and ``b_U``, and the soft cap.

    Args:
        lm: the model.
        x: the vectors; pass only the positions you read (unembedding every position costs a
            quarter of SmolLM2's forward FLOPs).
        space: ``"resid"`` (raw stream) or ``"normalized"`` (the final norm's output).
        norm: how a ``"resid"`` vector passes the final norm (:data:`NormMode`); ``"live"`` with
            every token runs the model's own ``ln_final`` and ``unembed`` modules, so their hooks
            fire and the numbers are the forward pass's own.
        scale: the frozen divisor for ``norm="frozen"``.
        token_ids: only these tokens' logits (default: the whole vocabulary).
        cap: apply the model's output soft cap (False: the logits before it).

    Returns:
        ``[..., vocab]`` or ``[..., len(token_ids)]``, in ``x``'s dtype (float32 at least for a
        recomputed or frozen norm).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> tokens = lm.to_tokens("The cat sat")
    >>> with lm.hooks.capture([hook_name("resid_post", 1)]) as cap:
    ...     out = lm(tokens)
    >>> bool(torch.allclose(logits(lm, cap[hook_name("resid_post", 1)], space="resid"), out, atol=1e-5))
    True
    """
    u = unembed_input(lm, x, space=space, norm=norm, scale=scale)
    if norm == "live" and space == "resid" and token_ids is None:
        out = lm.model.unembed(u)
    else:
        w_u, b_u = _unembedding(lm, token_ids)
        # F.linear on W_U's transpose is the kernel TransformerLens's Unembed runs.
        out = F.linear(u, w_u.T.to(u.dtype), b_u.to(u.dtype))
    return soft_cap(lm, out) if cap else out


# --------------------------------------------------------------------------- directions


@dataclass(frozen=True)
class LogitDirections:
    """Per row, the direction and constant that turn a vector into one logit (difference) before
    the soft cap: ``logit = x @ vectors[i] + bias[i]`` for ``x`` in the space they were built for,
    the final norm's divisor frozen.

    Attributes:
        vectors: ``[n, d_model]``; bias: ``[n]`` (``b_U`` and the final norm's bias read through
            ``W_U``), both float32.
    """

    vectors: Float[Tensor, "n d_model"]
    bias: Float[Tensor, " n"]


def logit_directions(
    lm: _Model,
    answers: TokenIds,
    wrongs: TokenIds | None = None,
    *,
    space: Space,
    scale: Tensor | None = None,
) -> LogitDirections:
    """The directions whose inner products give ``logit(answer) − logit(wrong)`` (or the answer's
    logit), one per row, through the final norm with its divisor frozen (direct logit attribution,
    Geva 2022's sub-updates).

    Args:
        lm: the model.
        answers: ``[n]`` answer token ids; ``wrongs``: ``[n]`` token ids subtracted, if any.
        space: ``"resid"``: the directions read raw stream vectors, so they are centred (LayerNorm)
            and divided by ``scale``; ``"normalized"``: they read ``ln_final.hook_normalized``.
        scale: for ``"resid"`` on a model with a final norm, the frozen divisor of each row
            (``[n]`` or ``[n, 1]``, a captured ``ln_final.hook_scale``).

    Returns:
        :class:`LogitDirections`.

    Raises:
        ValueError: ``"resid"`` without ``scale`` on a model with a final norm.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> tokens = lm.to_tokens("The cat sat")
    >>> with lm.hooks.capture([hook_name("resid_post", 1), hook_name("ln_final_scale")]) as cap:
    ...     out = lm(tokens)[0, -1]
    >>> d = logit_directions(lm, [7], [9], space="resid", scale=cap[hook_name("ln_final_scale")][0, -1])
    >>> diff = cap[hook_name("resid_post", 1)][0, -1] @ d.vectors[0] + d.bias[0]
    >>> bool(torch.isclose(diff, out[7] - out[9], atol=1e-4))
    True
    """
    w_u, b_u = _unembedding(lm, answers)
    vectors, bias = w_u.T.float(), b_u.float()
    if wrongs is not None:
        w_wrong, b_wrong = _unembedding(lm, wrongs)
        vectors, bias = vectors - w_wrong.T.float(), bias - b_wrong.float()
    final = final_norm_module(lm)
    if final is None:
        return LogitDirections(vectors, bias)
    final_bias = getattr(final, "b", None)
    if isinstance(final_bias, Tensor):  # the norm's bias is a constant read through W_U
        bias = bias + vectors @ final_bias.detach().float()
    gain = final_norm_gain(lm)
    if gain is not None:
        vectors = vectors * gain.float()
    if space == "resid":
        if scale is None:
            raise UserInputError("'resid' directions through the final norm need scale, its frozen "
                             "divisor per row (the captured ln_final.hook_scale)")
        # (x - mean x) . v == x . (v - mean v): the centring moves onto the direction.
        vectors = _centred(final, vectors) / scale.float().reshape(-1, 1).to(vectors.device)
    elif space != "normalized":
        raise UserInputError(f"space must be one of {list(SPACES)}, not {space!r}")
    elif scale is not None:
        raise UserInputError("a 'normalized' vector is past the final norm's divisor: give no scale")
    return LogitDirections(vectors, bias)


def _gained(lm: _Model, directions: Tensor, space: str) -> Tensor:
    """Directions carried through the final norm's linear part, up to its divisor: centred
    (``"resid"``, LayerNorm) and times the gain where it is not folded into ``W_U``."""
    if space not in SPACES:
        raise UserInputError(f"space must be one of {list(SPACES)}, not {space!r}")
    final = final_norm_module(lm)
    if final is None:
        return directions
    d = _centred(final, directions) if space == "resid" else directions
    gain = final_norm_gain(lm)
    return d * gain.to(d.dtype) if gain is not None else d


def vocab_projection(
    lm: _Model,
    directions: Float[Tensor, "n d_model"],
    *,
    space: Space,
    token_ids: TokenIds | None = None,
    gain: bool = True,
) -> Float[Tensor, "n vocab"]:
    """Directions projected to the vocabulary: each token's logit change per unit of the direction,
    up to the final norm's positive divisor (which changes no ranking) and without ``b_U``.

    Value vectors, SAE decoder directions and SVD directions all read out here.

    Args:
        lm: the model.
        directions: ``[n, d_model]``, in ``space``; gradients flow through them (not the model).
        space: ``"resid"`` (centred for a LayerNorm, then the gain) or ``"normalized"`` (the gain).
        token_ids: only these tokens (default: the whole vocabulary).
        gain: False: ``W_U`` alone, no norm at all (LM-Debugger's and Geva 2022's projection of
            a value vector).

    Returns:
        ``[n, vocab]`` (or ``[n, len(token_ids)]``) in ``directions``' dtype, on the model's device.

    Raises:
        ValueError: ``gain=False`` on a model whose final-norm gain is folded into ``W_U``.

    >>> from lmsci_mi import load_model
    >>> vocab_projection(load_model("toy-2l"), torch.randn(3, 64), space="resid").shape
    torch.Size([3, 49152])
    """
    w_u, _ = _unembedding(lm, token_ids)
    directions = directions.to(w_u.device)  # a steer's factors may sit on another device
    if gain:
        d = _gained(lm, directions, space)
    elif gains_folded(lm):
        raise UserInputError(
            f"{lm.name} was loaded with fold_ln=True: its final norm's gain is inside W_U, so "
            "the raw projection cannot be separated; load_model(..., fold_ln=False) gives both"
        )
    else:
        d = directions
    return d @ w_u.to(d.dtype)


def unembedding_vectors(
    lm: _Model,
    token_ids: TokenIds | None = None,
    *,
    space: Space,
    dtype: torch.dtype = torch.float32,
) -> Float[Tensor, "n d_model"]:
    """Each token's output embedding as seen from ``space``: the vector whose inner product with a
    vector in ``space`` gives that token's logit, up to a constant per token (``b_U``, the final
    norm's bias) and, for ``"resid"``, the final norm's divisor.

    ``W_U[:, y]`` times the final norm's gain where it is not folded into ``W_U``, centred for a
    LayerNorm read from ``"resid"``.

    Args:
        lm: the model.
        token_ids: the tokens (default: every column of ``W_U``).
        space: ``"resid"`` or ``"normalized"``.
        dtype: computed and returned in this dtype (float64 for covariance estimates).

    Returns:
        ``[n, d_model]`` on the model's device.

    >>> from lmsci_mi import load_model
    >>> unembedding_vectors(load_model("toy-2l"), [5, 7], space="normalized").shape
    torch.Size([2, 64])
    """
    if space not in SPACES:
        raise UserInputError(f"space must be one of {list(SPACES)}, not {space!r}")
    w_u, _ = _unembedding(lm, token_ids)
    gamma = w_u.T.to(dtype)
    gain = final_norm_gain(lm)
    if gain is not None:
        gamma = gamma * gain.to(dtype)
    final = final_norm_module(lm)
    # (x - mean x) . (g u) == x . centred(g u): the gain first, then the centring (the adjoint of
    # vocab_projection's centring then gain).
    return _centred(final, gamma) if space == "resid" and final is not None else gamma
