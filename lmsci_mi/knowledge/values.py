"""Value vectors in vocabulary space (Geva et al. 2021, "Transformer Feed-Forward Layers Are
Key-Value Memories"; Geva et al. 2022, "... Build Predictions by Promoting Concepts").

Neuron i of an MLP adds ``coefficient_i * W_out[i]`` to the residual stream; the row ``W_out[i]``
(TransformerLens shape ``[d_mlp, d_model]``) is its *value*. Projected to the vocabulary it names
the tokens the neuron promotes (top) and suppresses (bottom), when its coefficient is positive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import Config, config
from lmsci_mi.errors import UnknownNameError, UserInputError
from lmsci_mi.readout import final_norm_gain, gains_folded, post_mlp_gain
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from lmsci_mi.model import LensModel

__all__ = [
    "PROJECTIONS",
    "ValueVectorConfig",
    "ValueVectors",
    "checked_neurons",
    "decode_tokens",
    "final_norm_gain",
    "neuron_label",
    "post_mlp_gain",
    "value_directions",
    "value_vectors",
    "vocab_projection",
]

PROJECTIONS = ("normed", "raw")
"""``normed``: the value through every gain the model applies to it on the way to the logits (the
post-MLP norm's, then the final norm's), then ``W_U``: what the neuron does to the logits per unit
coefficient, up to the positive per-token norm divisors, which change no ranking. ``raw``: the value
row times ``W_U`` with no norm gain at all, as LM-Debugger and Geva 2022 project it."""

_SIDES = ("top", "bottom")
_CHUNK = 64  # neurons projected at once: 64 x 262k Gemma logits is 67 MB


def neuron_label(layer: int, neuron: int) -> str:
    """How a neuron prints everywhere: ``L12.N345``.

    >>> neuron_label(12, 345)
    'L12.N345'
    """
    return f"L{int(layer)}.N{int(neuron)}"


def checked_neurons(lm: LensModel, layer: int, neurons: int | Sequence[int]) -> tuple[int, ...]:
    """``neurons`` of ``layer`` as a tuple, checked against the model's shape.

    Raises:
        ValueError: a layer or neuron index outside the model, or no neuron; the message gives
            the valid range.
    """
    n_layers, d_mlp = lm.cfg.n_layers, int(lm.cfg.d_mlp or 0)
    if isinstance(layer, bool) or not 0 <= int(layer) < n_layers:
        raise UserInputError(f"layer {layer} does not exist: {lm.name} has layers 0..{n_layers - 1}")
    chosen = (neurons,) if isinstance(neurons, int) else tuple(int(n) for n in neurons)
    if not chosen:
        raise UserInputError("no neuron given; name at least one, e.g. neurons=[17]")
    bad = [n for n in chosen if not 0 <= n < d_mlp]
    if bad:
        raise UserInputError(
            f"neuron {bad[0]} does not exist: {lm.name}'s MLPs have neurons 0..{d_mlp - 1}"
        )
    return chosen


def value_directions(
    lm: LensModel, layer: int, neurons: Sequence[int], *, gains: bool = True
) -> Float[Tensor, "neuron d_model"]:
    """The value rows ``W_out[layer][neurons]``, times the post-MLP norm's gain when ``gains``."""
    values = lm.model.blocks[layer].mlp.W_out.detach()[list(neurons)].float()
    post = post_mlp_gain(lm, layer) if gains else None
    return values * post.float() if post is not None else values


def vocab_projection(
    lm: LensModel, directions: Float[Tensor, "n d_model"], kind: str = "normed"
) -> Float[Tensor, "n vocab"]:
    """Residual-stream directions projected to the vocabulary (:func:`lmsci_mi.readout.vocab_projection`
    in the ``"resid"`` space).

    ``normed`` centres them (LayerNorm models), multiplies by the final norm's gain (already in
    ``W_U`` when folded) and unembeds; ``raw`` unembeds with ``W_U`` alone, so it needs the gain
    outside ``W_U``: a folded model cannot give it.

    Raises:
        ValueError: ``raw`` on a model whose final-norm gain is folded into ``W_U``; an unknown
            ``kind``.
    """
    if kind not in PROJECTIONS:
        raise UnknownNameError(f"projection must be one of {list(PROJECTIONS)}, not {kind!r}")
    return readout.vocab_projection(lm, directions.float(), space="resid", gain=kind == "normed")


@config
class ValueVectorConfig(Config):
    """How many tokens to show per side of each value vector."""

    top_k: int = field(
        default=10, metadata={"help": "tokens per side (promoted, suppressed)", "ge": 1}
    )


@result_type
class ValueVectors(Result):
    """Tokens that value vectors promote and suppress (Geva 2022).

    ``values[n, p, s, r]`` is the logit change per unit coefficient of the ``r``-th token of side
    ``s`` (``top``: raised most, ``bottom``: lowered most) of neuron ``n`` under projection ``p``
    (see :data:`PROJECTIONS`; ``raw`` is left out when the model's final norm gain is folded).
    The token of each cell is in ``token_ids`` and ``tokens`` (flattened in the same order).

    Sign: a neuron's coefficient is ``mlp_post`` (``act(gate) * up`` in a gated MLP) and can be
    negative. A negative coefficient reverses the value: it then promotes the *bottom* tokens.

    Attributes:
        layer, neurons: which neurons.
        projections: the projections along axis 1.
        token_ids: ``[neuron, projection, side, rank]`` token ids.
        tokens: the decoded tokens, flattened in ``values``' order.
        gated: whether the MLP is gated (coefficients of both signs are common).
        folded: whether the final norm's gain was folded into ``W_U`` when loaded.
        post_norm: whether a post-MLP norm gain was applied (Gemma 2/3).
    """

    layer: int
    neurons: tuple[int, ...]
    projections: tuple[str, ...]
    token_ids: Tensor
    tokens: tuple[str, ...]
    gated: bool
    folded: bool
    post_norm: bool

    def top_tokens(self, neuron: int, side: str = "top", projection: str = "normed") -> list[str]:
        """The tokens of one side of one neuron's value, best first."""
        n, p, s = self.neurons.index(neuron), self.projections.index(projection), _SIDES.index(side)
        k = self.values.shape[-1]
        start = ((n * len(self.projections) + p) * 2 + s) * k
        return list(self.tokens[start : start + k])

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (neuron, projection, side, rank), with the token and its id."""
        frame = super().to_dataframe()
        frame["token"] = list(self.tokens)
        frame["token_id"] = self.token_ids.reshape(-1).tolist()
        return frame

    def summary(self, rows: int = 10) -> str:
        """Per neuron and projection, the promoted and suppressed tokens."""
        lines = [
            f"Value vectors of layer {self.layer} on {self.meta.model} ({', '.join(self.projections)})"
        ]
        for proj in self.projections:
            lines.append(f"  {proj}: {_PROJECTION_TEXT[proj]}")
        if self.folded and "raw" not in self.projections:
            lines.append(
                "  raw: not available, the final norm's gain is folded into W_U "
                "(load_model(..., fold_ln=False) gives it)"
            )
        for neuron in self.neurons:
            for proj in self.projections:
                label = neuron_label(self.layer, neuron)
                top = ", ".join(repr(t) for t in self.top_tokens(neuron, "top", proj)[:rows])
                bottom = ", ".join(repr(t) for t in self.top_tokens(neuron, "bottom", proj)[:rows])
                lines += [
                    f"{label} [{proj}] promotes:   {top}",
                    f"{label} [{proj}] suppresses: {bottom}",
                ]
        lines.append(
            "A negative coefficient (mlp_post"
            + (" = act(gate)*up, common in this gated MLP" if self.gated else "")
            + ") reverses a value: the bottom tokens are then promoted."
        )
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"Value vectors — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Per neuron, bars of the promoted and suppressed tokens (first projection)."""
        from matplotlib.figure import Figure

        n = len(self.neurons)
        fig = Figure(figsize=(7, 0.28 * self.values.shape[-1] * 2 * n + 1.5))
        axes = fig.subplots(n, 1, squeeze=False)
        for i, neuron in enumerate(self.neurons):
            ax = axes[i][0]
            top = self.values[i, 0, 0].tolist()
            bottom = self.values[i, 0, 1].tolist()[::-1]
            labels = self.top_tokens(neuron, "top") + self.top_tokens(neuron, "bottom")[::-1]
            ax.barh(
                range(len(labels)),
                top + bottom,
                color=["tab:blue"] * len(top) + ["tab:red"] * len(bottom),
            )
            ax.set_yticks(range(len(labels)), [repr(t) for t in labels], fontsize=7)
            ax.invert_yaxis()
            ax.set_title(f"{neuron_label(self.layer, neuron)} ({self.projections[0]})", fontsize=9)
            ax.axvline(0, color="grey", linewidth=0.5)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        return fig


_PROJECTION_TEXT = {
    "normed": "value x post-MLP norm gain x final norm gain, then W_U (what the model applies)",
    "raw": "value x W_U, no norm gain (LM-Debugger / Geva 2022)",
}


@torch.no_grad()
def value_vectors(
    lm: LensModel,
    layer: int,
    neurons: int | Sequence[int],
    config: ValueVectorConfig | None = None,
) -> ValueVectors:
    """The tokens that the value vectors of ``neurons`` in ``layer`` promote and suppress.

    Reads the weights only (no forward pass, nothing changed).

    Args:
        lm: the model; with ``fold_ln=False`` both projections are given, with the default
            ``fold_ln=True`` only ``normed`` (the gain is then inside ``W_U``).
        layer: the block.
        neurons: one neuron index or several.
        config: tokens per side.

    Returns:
        :class:`ValueVectors`.

    Raises:
        ValueError: an unknown layer or neuron index.

    >>> from lmsci_mi import load_model
    >>> vv = value_vectors(load_model("toy-2l"), 1, [3, 5], ValueVectorConfig(top_k=4))
    >>> tuple(vv.values.shape), vv.projections
    ((2, 2, 2, 4), ('normed', 'raw'))
    """
    cfg = config or ValueVectorConfig()
    chosen = checked_neurons(lm, layer, neurons)
    folded = gains_folded(lm)
    projections = ("normed",) if folded else PROJECTIONS
    k = min(cfg.top_k, lm.cfg.d_vocab)
    scores = torch.empty(len(chosen), len(projections), 2, k)
    ids = torch.empty(len(chosen), len(projections), 2, k, dtype=torch.long)
    for p, proj in enumerate(projections):
        dirs = value_directions(lm, layer, chosen, gains=proj == "normed")
        logits = vocab_projection(lm, dirs, proj)
        for s, largest in enumerate((True, False)):
            top = logits.topk(k, dim=-1, largest=largest)
            scores[:, p, s], ids[:, p, s] = top.values.cpu(), top.indices.cpu()
    return ValueVectors(
        values=scores,
        axes=("neuron", "projection", "side", "rank"),
        labels=(tuple(neuron_label(layer, n) for n in chosen), projections, _SIDES, ()),
        meta=lm.meta(
            data_source="weights",
            params={
                **cfg.params(),
                "layer": int(layer),
                "neurons": chosen,
                "method": "Geva et al. 2022 value-vector projection",
            },
        ),
        layer=int(layer),
        neurons=chosen,
        projections=projections,
        token_ids=ids,
        tokens=tuple(decode_tokens(lm, ids.reshape(-1).tolist())),
        gated=bool(lm.cfg.gated_mlp),
        folded=folded,
        post_norm=post_mlp_gain(lm, layer) is not None,
    )


def decode_tokens(lm: LensModel, ids: Sequence[int]) -> list[str]:
    """Each token id as its text (``<id>`` for a model without a tokenizer)."""
    if lm.tokenizer is None:
        return [f"<{i}>" for i in ids]
    return [lm.tokenizer.decode([int(i)]) for i in ids]
