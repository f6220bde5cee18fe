"""Direct logit attribution: what the embedding, each head and each MLP write onto an answer's logit.

Each component's output at the answer position is carried through the norms between it and the
logits with every norm's scale frozen at the clean run (the final norm; Gemma 3's post-attention
norm), then projected on the answer's unembedding direction (or answer minus a wrong token), so
the parts sum exactly to the logit (difference). After Elhage et al. 2021 ("A Mathematical
Framework for Transformer Circuits") and Wang et al. 2022 (IOI, section 3.1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError
from lmsci_mi.hooks import Capture
from lmsci_mi.lenses.logit_lens import check_prompts
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head, hook_name

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DLAConfig",
    "LogitAttribution",
    "LogitContributions",
    "direct_logit_attribution",
    "dla_hook_names",
    "logit_contributions",
]


@config
class DLAConfig(Config):
    """Settings of :func:`direct_logit_attribution`."""

    batch_size: int = dataclasses.field(
        default=16, metadata={"help": "prompts per forward pass", "ge": 1}
    )


_DEFAULT_CONFIG = DLAConfig()


@dataclass(frozen=True)
class LogitContributions:
    """Direct contributions to one logit (difference) per prompt, from one clean run.

    ``embed + heads.sum((1, 2)) + mlp.sum(1) + bias`` equals the model's logit (difference)
    before any logit soft cap.

    Attributes:
        heads: ``[prompt, layer, head]``: ``z @ W_O[h]`` through the frozen norms.
        mlp: ``[prompt, layer]``: ``mlp_out`` through the frozen final norm.
        embed: ``[prompt]``: token (and learned position) embeddings.
        bias: ``[prompt]``: every bias term: attention ``b_O``, post-norm biases, final-norm bias
            and the unembedding bias.
    """

    heads: Float[Tensor, "prompt layer head"]
    mlp: Float[Tensor, "prompt layer"]
    embed: Float[Tensor, " prompt"]
    bias: Float[Tensor, " prompt"]

    def total(self) -> Float[Tensor, " prompt"]:
        """The sum of every part: the logit (difference) the parts explain."""
        return self.embed + self.heads.sum((1, 2)) + self.mlp.sum(1) + self.bias


def dla_hook_names(lm: LensModel) -> list[str]:
    """The hook points :func:`logit_contributions` reads: capture these on the clean run."""
    cfg = lm.cfg
    names = [hook_name("embed")]
    if cfg.positional_embedding_type in ("standard", "shortformer"):
        names.append(hook_name("pos_embed"))
    for layer in range(cfg.n_layers):
        names.append(hook_name("z", layer))
        if not cfg.attn_only:
            names.append(hook_name("mlp_out", layer))
        if cfg.use_normalization_before_and_after:
            names.append(hook_name("ln1_post_scale", layer))
    if readout.has_final_norm(lm):
        names.append(hook_name("ln_final_scale"))
    return names


@torch.no_grad()
def logit_contributions(
    lm: LensModel,
    acts: Mapping[str, Tensor] | Capture,
    positions: Int[Tensor, " prompt"],
    answers: Int[Tensor, " prompt"],
    wrongs: Int[Tensor, " prompt"] | None = None,
) -> LogitContributions:
    """Direct logit attribution from activations captured on a clean run.

    Args:
        lm: the model.
        acts: the activations of :func:`dla_hook_names` (``lm.hooks.capture``), batch first.
        positions: per prompt, the position whose next-token logit is explained.
        answers: per prompt, the answer token id; ``wrongs``: the token subtracted, if any.

    Returns:
        :class:`LogitContributions` (float32, on the model's device).

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> tokens = lm.to_tokens("The cat sat")
    >>> with lm.hooks.capture(dla_hook_names(lm)) as cap:
    ...     logits = lm(tokens)
    >>> parts = logit_contributions(lm, cap, torch.tensor([3]), torch.tensor([7]))
    >>> bool(torch.allclose(parts.total(), logits[0, 3, 7], atol=1e-4))
    True
    """
    model, cfg = lm.model, lm.cfg
    device = lm.device
    rows = torch.arange(len(positions), device=device)
    pos = positions.to(device)
    scale = (
        acts[hook_name("ln_final_scale")][rows, pos] if readout.has_final_norm(lm) else None
    )
    # Through the final norm frozen at the clean run: bias holds b_U and the norm's own bias.
    directions = readout.logit_directions(
        lm, answers.to(device), None if wrongs is None else wrongs.to(device),
        space="resid", scale=scale,
    )
    bias = directions.bias

    def project(x: Tensor) -> Tensor:
        """``[n, ..., d_model]`` -> ``[n, ...]``: onto each prompt's direction."""
        return torch.einsum("n...m,nm->n...", x.float(), directions.vectors)

    embed = acts[hook_name("embed")][rows, pos]
    if hook_name("pos_embed") in acts:
        embed = embed + acts[hook_name("pos_embed")][rows, pos]
    heads, mlp = [], []
    for layer in range(cfg.n_layers):
        block = model.blocks[layer]
        z = acts[hook_name("z", layer)][rows, pos].float()  # [n, head, d_head]
        out = torch.einsum("nhd,hdm->nhm", z, block.attn.W_O.float())
        attn_bias = block.attn.b_O.float().expand(len(rows), -1)
        if cfg.use_normalization_before_and_after:
            # Gemma 3 normalises the attention output before it enters the stream: each head's
            # share passes the post-norm with its divisor frozen at the clean run.
            post_scale = acts[hook_name("ln1_post_scale", layer)][rows, pos].float()  # [n, 1]
            out = readout.frozen_norm(block.ln1_post, out, post_scale[:, None])
            attn_bias = readout.frozen_norm(block.ln1_post, attn_bias, post_scale, bias=True)
        heads.append(project(out))
        bias = bias + project(attn_bias)
        if not cfg.attn_only:
            # hook_mlp_out is what enters the stream (after any post-MLP norm), so it needs no
            # post-norm of its own: its scale is the clean run's by construction.
            mlp.append(project(acts[hook_name("mlp_out", layer)][rows, pos]))
    mlp_parts = torch.stack(mlp, 1) if mlp else torch.zeros(len(rows), 0, device=device)
    return LogitContributions(torch.stack(heads, 1), mlp_parts, project(embed), bias)


@result_type
class LogitAttribution(Result):
    """Direct logit attribution, averaged over prompts: ``values`` is ``[layer, component]``, the
    components being every head (``H0`` …) then ``MLP``.

    Attributes:
        per_prompt: ``[prompt, layer, component]``.
        embed, bias: ``[prompt]``: the embedding's part and every bias term's (see
            :class:`LogitContributions`).
        logit: ``[prompt]``: the model's own logit (difference), before any logit soft cap; the
            parts sum to it.
        positions: ``[prompt]``: the explained position of each prompt.
        answers, wrongs: the answer tokens and the subtracted tokens (empty: plain logit).
    """

    per_prompt: Tensor
    embed: Tensor
    bias: Tensor
    logit: Tensor
    positions: Tensor
    answers: tuple[str, ...]
    wrongs: tuple[str, ...]

    @property
    def n_heads(self) -> int:
        return self.values.shape[1] - 1

    def heads(self) -> Float[Tensor, "layer head"]:
        """The mean DLA of every head, ``[layer, head]``."""
        return self.values[:, : self.n_heads]

    def mlps(self) -> Float[Tensor, " layer"]:
        """The mean DLA of every MLP, ``[layer]``."""
        return self.values[:, self.n_heads]

    def total(self) -> Float[Tensor, " prompt"]:
        """Per prompt, the sum of every part (equals ``logit`` up to float error)."""
        return self.embed + self.per_prompt.sum((1, 2)) + self.bias

    def top(self, k: int = 5, *, negative: bool = False) -> tuple[tuple[Head, float], ...]:
        """The ``k`` heads that raise the logit (difference) most, as ``(Head, mean DLA)``, best
        first; ``negative=True``: those that lower it most."""
        if k < 1:
            raise UserInputError(f"k must be at least 1, not {k}")
        heads = self.heads().float()
        flat = (-heads if negative else heads).flatten()
        order = flat.argsort(descending=True)[: min(k, flat.numel())]
        n = self.n_heads
        return tuple((Head(int(i) // n, int(i) % n), float(heads.flatten()[i])) for i in order)

    def _target(self) -> str:
        answer = self.answers[0] if len(set(self.answers)) == 1 else "answer"
        if not self.wrongs:
            return f"logit({answer!r})"
        wrong = self.wrongs[0] if len(set(self.wrongs)) == 1 else "wrong"
        return f"logit({answer!r}) − logit({wrong!r})"

    def summary(self, rows: int = 5) -> str:
        """The explained logit, the embedding and bias parts, the top heads both ways and MLPs."""
        mlp = self.mlps()
        order = mlp.abs().argsort(descending=True)[:rows]
        lines = [
            f"direct logit attribution to {self._target()} over {self.per_prompt.shape[0]} "
            f"prompt(s) ({self.meta.model})",
            f"  logit: {float(self.logit.mean()):+.3f} = parts {float(self.total().mean()):+.3f} "
            f"(embedding {float(self.embed.mean()):+.3f}, biases {float(self.bias.mean()):+.3f})",
            "  heads raising it: " + ", ".join(f"{h} {v:+.3f}" for h, v in self.top(rows)),
            "  heads lowering it: "
            + (
                ", ".join(f"{h} {v:+.3f}" for h, v in self.top(rows, negative=True) if v < 0)
                or "none"
            ),
            "  MLPs (largest |DLA|): "
            + ", ".join(f"MLP{int(i)} {float(mlp[i]):+.3f}" for i in order),
        ]
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        return f"DLA to {self._target()} — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Heatmap of layer × head, with the MLP as a last column set off by a line."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap

        n_layers, n_cols = self.values.shape
        fig = Figure(figsize=(max(5, 0.5 * n_cols + 2.5), max(4, 0.25 * n_layers + 1.5)))
        ax = fig.subplots()
        heatmap(
            ax,
            self.values,
            row_labels=self.axis_labels(0),
            col_labels=self.axis_labels(1),
            row_name="layer",
            col_name="head | MLP",
            title=title,
        )
        ax.axvline(n_cols - 1.5, color="black", linewidth=1.5)
        fig.tight_layout()
        return fig


def _token_ids(lm: LensModel, texts: str | Sequence[str], n: int, what: str) -> list[int]:
    """One token id per prompt from one text or a text per prompt (each exactly one token)."""
    items = [texts] * n if isinstance(texts, str) else list(texts)
    if len(items) != n:
        raise UserInputError(f"{len(items)} {what}s for {n} prompts: give one, or one per prompt")
    return [lm.token_id(text) for text in items]


@torch.no_grad()
def direct_logit_attribution(
    lm: LensModel,
    prompts: str | Sequence[str],
    answer: str | Sequence[str],
    wrong: str | Sequence[str] | None = None,
    config: DLAConfig = _DEFAULT_CONFIG,
) -> LogitAttribution:
    """Direct logit attribution of the next-token logit of ``answer`` (minus ``wrong``) at the last
    token of each prompt to the embedding, every head, every MLP and the biases.

    Prompts of any lengths are right-padded; norm scales are frozen at each prompt's clean run.
    Reads the model only.

    Args:
        lm: the model.
        prompts: one prompt or several.
        answer: the answer's text (one token, e.g. ``" Paris"``), one for all or one per prompt.
        wrong: a token whose logit is subtracted (one for all or one per prompt), or None.
        config: batch size.

    Returns:
        :class:`LogitAttribution`.

    Raises:
        ValueError: no or an empty prompt; an answer or wrong token that is not exactly one token.

    >>> from lmsci_mi import load_model
    >>> dla = direct_logit_attribution(load_model("toy-2l"), "The cat sat on the", " mat")
    >>> dla.values.shape, bool(torch.allclose(dla.total(), dla.logit, atol=1e-4))
    (torch.Size([2, 5]), True)
    """
    batch = check_prompts(prompts)
    answer_ids = _token_ids(lm, answer, len(batch), "answer")
    wrong_ids = None if wrong is None else _token_ids(lm, wrong, len(batch), "wrong token")
    names = dla_hook_names(lm)
    parts: list[LogitContributions] = []
    logits, positions = [], []
    for start in range(0, len(batch), config.batch_size):
        chunk = slice(start, start + config.batch_size)
        padded = lm.encode_batch(batch[chunk])
        pos = padded.lengths - 1
        ans = torch.tensor(answer_ids[chunk], device=lm.device)
        wr = None if wrong_ids is None else torch.tensor(wrong_ids[chunk], device=lm.device)
        with lm.hooks.capture(names) as cap:
            out = readout.undo_soft_cap(lm, lm(padded.tokens).float())
        part = logit_contributions(lm, cap, pos, ans, wr)
        rows = torch.arange(len(pos), device=lm.device)
        logit = out[rows, pos, ans].float()
        logits.append(logit if wr is None else logit - out[rows, pos, wr].float())
        parts.append(part)
        positions.append(pos)
    return _attribution_result(lm, batch, answer_ids, wrong_ids, parts, logits, positions, config)


def _attribution_result(
    lm: LensModel,
    prompts: list[str],
    answer_ids: list[int],
    wrong_ids: list[int] | None,
    parts: list[LogitContributions],
    logits: list[Tensor],
    positions: list[Tensor],
    config: DLAConfig,
) -> LogitAttribution:
    heads = torch.cat([p.heads for p in parts])
    mlp = torch.cat([p.mlp for p in parts])
    per_prompt = torch.cat([heads, mlp[:, :, None]], dim=2).cpu()
    decode = lm.tokenizer.decode
    return LogitAttribution(
        values=per_prompt.mean(0),
        axes=("layer", "component"),
        labels=(
            tuple(str(i) for i in range(lm.cfg.n_layers)),
            (*Head.axis_labels(lm.cfg.n_heads), "MLP"),
        ),
        meta=lm.meta(prompts, params=config.params()),
        per_prompt=per_prompt,
        embed=torch.cat([p.embed for p in parts]).cpu(),
        bias=torch.cat([p.bias for p in parts]).cpu(),
        logit=torch.cat(logits).cpu(),
        positions=torch.cat(positions).cpu(),
        answers=tuple(decode([i]) for i in answer_ids),
        wrongs=() if wrong_ids is None else tuple(decode([i]) for i in wrong_ids),
    )
