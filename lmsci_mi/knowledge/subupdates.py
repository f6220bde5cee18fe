"""Sub-update decomposition of one prediction (Geva et al. 2022, "Transformer Feed-Forward Layers
Build Predictions by Promoting Concepts in the Vocabulary Space", §3).

Each MLP's output is a sum of sub-updates ``coefficient_i * value_i``. With every norm scale the
output passes through frozen at the clean run (the final norm's, and Gemma's post-MLP norm's), a
sub-update's direct effect on a token's logit is linear, so the neurons of all layers can be ranked
by how much they raise or lower it, and they sum to the MLPs' total direct contribution.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError
from lmsci_mi.knowledge.values import neuron_label
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from lmsci_mi.model import LensModel

__all__ = ["SubUpdateConfig", "SubUpdates", "sub_updates"]


@config
class SubUpdateConfig(Config):
    """Which logit to decompose, where, and how many neurons to list."""

    target: str | None = field(
        default=None,
        metadata={
            "help": "the token whose logit is decomposed (default: the top prediction); "
            "a longer text uses its first token"
        },
    )
    position: int = field(default=-1, metadata={"help": "prompt position (negative: from the end)"})
    top_k: int = field(default=10, metadata={"help": "neurons listed per direction", "ge": 1})


@result_type
class SubUpdates(Result):
    """Every neuron's direct contribution to one logit: ``values[layer, neuron]`` is
    ``coefficient * (value . u)``, where ``u`` is the target's unembedding read through the frozen
    norms.

    Attributes:
        prompt, position: where the prediction is made.
        target, target_id: the token whose logit is decomposed.
        coefficients: ``[layer, neuron]`` the ``mlp_post`` coefficients at the position.
        mlp_total: ``[layer]`` each MLP's whole direct contribution (``hook_mlp_out . u``,
            output bias included); equals ``values.sum(1) + bias``.
        bias: ``[layer]`` the output bias's part of ``mlp_total``.
        logit: the target's logit in the clean run.
        top_k: neurons shown per direction; :attr:`top_share` is the raising ones' share.
    """

    prompt: str
    position: int
    target: str
    target_id: int
    coefficients: Tensor
    mlp_total: Tensor
    bias: Tensor
    logit: float
    top_k: int

    def top(self, k: int | None = None, *, lower: bool = False) -> list[tuple[str, float, float]]:
        """The ``k`` neurons that raise (``lower=True``: lower) the logit most, as
        ``(label, contribution, coefficient)``."""
        k = k or self.top_k
        flat = self.values.reshape(-1)
        best = flat.topk(min(k, flat.numel()), largest=not lower).indices.tolist()
        d_mlp = self.values.shape[1]
        return [
            (
                neuron_label(i // d_mlp, i % d_mlp),
                float(flat[i]),
                float(self.coefficients.reshape(-1)[i]),
            )
            for i in best
        ]

    def share(self, k: int | None = None) -> float:
        """The ``k`` most raising neurons' summed contribution over the MLPs' net direct
        contribution (all layers, biases included). Above 1 when other neurons cancel part of it;
        meaningless when the net contribution is near 0 or negative (see :meth:`mass_share`)."""
        k = k or self.top_k
        flat = self.values.reshape(-1)
        return float(flat.topk(min(k, flat.numel())).values.sum() / self.mlp_total.sum())

    def mass_share(self, k: int | None = None) -> float:
        """The fraction of all sub-updates' absolute size that the ``k`` largest (either sign)
        carry: how concentrated the MLPs' effect on this logit is, in [0, 1]."""
        k = k or self.top_k
        size = self.values.reshape(-1).abs()
        return float(size.topk(min(k, size.numel())).values.sum() / size.sum())

    @property
    def top_share(self) -> float:
        """:meth:`share` at ``top_k``."""
        return self.share(self.top_k)

    def summary(self, rows: int = 10) -> str:
        """The neurons that raise and lower the target's logit most, and the top-k shares."""
        k = min(rows, self.top_k)
        lines = [
            f"Sub-updates of the logit of {self.target!r} at position {self.position} of "
            f"{self.prompt!r} ({self.meta.model}); logit {self.logit:.3f}, MLPs' direct "
            f"contribution {float(self.mlp_total.sum()):+.3f} (norm scales frozen)",
            f"the {self.top_k} most raising neurons sum to {self.top_share:.1%} of it; the "
            f"{self.top_k} largest either way hold {self.mass_share():.1%} of all sub-updates' "
            "absolute size",
            "raise most:",
        ]
        lines += [f"  {lab:<10} {c:+.3f}  (coefficient {a:+.3f})" for lab, c, a in self.top(k)]
        lines.append("lower most:")
        lines += [
            f"  {lab:<10} {c:+.3f}  (coefficient {a:+.3f})" for lab, c, a in self.top(k, lower=True)
        ]
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return (
            f"Sub-updates — {self.meta.model}: the top {self.top_k} raising sum to "
            f"{self.top_share:.0%} of the MLPs' net contribution"
        )

    def _draw(self, title: str) -> Figure:
        """The top raising and lowering neurons as bars."""
        from lmsci_mi.viz.plots import plot_bars

        raise_ = self.top(self.top_k)
        lower = self.top(self.top_k, lower=True)[::-1]
        rows = [*raise_, *lower]
        fig = plot_bars(
            [lab for lab, _, _ in rows],
            [c for _, c, _ in rows],
            value_label=f"direct contribution to the logit of {self.target!r}",
            title=title,
            colors=["tab:blue"] * len(raise_) + ["tab:red"] * len(lower),
        )
        return fig


def _check(lm: LensModel, prompt: str, position: int) -> tuple[Tensor, int]:
    if not prompt.strip():
        raise UserInputError("empty prompt; give the text whose prediction to decompose")
    tokens = lm.to_tokens(prompt)
    n_pos = tokens.shape[1]
    pos = position + n_pos if position < 0 else position
    if not 0 <= pos < n_pos:
        raise UserInputError(
            f"position {position} is outside the prompt's {n_pos} tokens (sink included)"
        )
    return tokens, pos


def _target_id(lm: LensModel, target: str | None) -> int | None:
    """The target's first token id (None: the model's top prediction, read after the pass)."""
    if target is None:
        return None
    ids = lm.continuation_ids(target)
    if not ids:
        raise UserInputError(f"target {target!r} tokenises to nothing; give a word, e.g. ' Paris'")
    return ids[0]


def _captured(lm: LensModel) -> list[str]:
    """The hooks the decomposition reads: each MLP's coefficients and output, and the norm scales
    it freezes (Gemma's post-MLP norm, the final norm)."""
    n_layers = lm.cfg.n_layers
    names = [hook_name(s, layer) for layer in range(n_layers) for s in ("mlp_post", "mlp_out")]
    if readout.post_mlp_norm(lm, 0) is not None:
        names += [hook_name("ln2_post_scale", layer) for layer in range(n_layers)]
    return names + ([hook_name("ln_final_scale")] if readout.has_final_norm(lm) else [])


@torch.no_grad()
def sub_updates(lm: LensModel, prompt: str, config: SubUpdateConfig | None = None) -> SubUpdates:
    """Decompose the MLPs' direct effect on one logit into per-neuron sub-updates.

    Reads the model only (one forward pass with capture hooks, removed on return).

    Args:
        lm: the model.
        prompt: the text; the prediction is the one made at ``config.position``.
        config: target token (default: the top prediction), position, neurons listed.

    Returns:
        :class:`SubUpdates`; ``values.sum(1) + bias == mlp_total`` layer by layer.

    Raises:
        ValueError: an empty prompt, a position outside it, or a target that tokenises to nothing.

    >>> from lmsci_mi import load_model
    >>> su = sub_updates(load_model("toy-2l"), "The Eiffel Tower is in", SubUpdateConfig(top_k=3))
    >>> tuple(su.values.shape), round(float(su.values.sum() + su.bias.sum() - su.mlp_total.sum()), 4)
    ((2, 256), 0.0)
    """
    cfg = config or SubUpdateConfig()
    tokens, pos = _check(lm, prompt, cfg.position)
    target_id = _target_id(lm, cfg.target)
    n_layers = lm.cfg.n_layers
    with lm.hooks.capture(_captured(lm)) as cap:
        logits = lm(tokens)[0, pos]
    target_id = int(logits.argmax()) if target_id is None else target_id
    final = cap[hook_name("ln_final_scale")][0, pos] if readout.has_final_norm(lm) else None
    # u: the target's unembedding read through the final norm, its divisor frozen at this run.
    u = readout.logit_directions(lm, [target_id], space="resid", scale=final).vectors[0]
    contrib, totals, biases, coefs = [], [], [], []
    for layer in range(n_layers):
        mlp = lm.model.blocks[layer].mlp
        coef = cap[hook_name("mlp_post", layer)][0, pos].float()
        w_out, b_out = (
            torch.as_tensor(getattr(mlp, n)).detach().float() for n in ("W_out", "b_out")
        )
        post = readout.post_mlp_norm(lm, layer)
        if post is not None:  # ln2_post, its divisor frozen at this run: linear, so row by row
            scale = cap[hook_name("ln2_post_scale", layer)][0, pos].float()
            w_out = readout.frozen_norm(post, w_out, scale)
            b_out = readout.frozen_norm(post, b_out, scale, bias=True)
        coefs.append(coef)
        contrib.append(coef * (w_out @ u))
        biases.append(b_out @ u)
        # The post norm's gain and scale act before hook_mlp_out, so its total reads u itself.
        totals.append(cap[hook_name("mlp_out", layer)][0, pos].float() @ u)
    return SubUpdates(
        values=torch.stack(contrib).cpu(),
        axes=("layer", "neuron"),
        labels=(tuple(str(i) for i in range(n_layers)), ()),
        meta=lm.meta(
            [prompt],
            data_source="user prompt",
            params={
                **cfg.params(),
                "method": "Geva et al. 2022 sub-update decomposition, norm scales "
                "frozen at the clean run",
            },
        ),
        prompt=prompt,
        position=pos,
        target=lm.tokenizer.decode([target_id]) if lm.tokenizer is not None else str(target_id),
        target_id=target_id,
        coefficients=torch.stack(coefs).cpu(),
        mlp_total=torch.stack(totals).cpu(),
        bias=torch.stack(biases).cpu(),
        logit=float(logits[target_id]),
        top_k=cfg.top_k,
    )
