"""The logit lens: each layer's residual stream read out as next-token predictions.

The final norm is applied to every layer's stream as the model applies it to the last one, with
its statistics recomputed on that stream (TransformerLens ``apply_ln_to_stack(recompute_ln=True)``),
then the unembedding and any soft cap (:func:`lmsci_mi.readout.logits`). Activations are read through hooks, so a lens applied inside an intervention
shows the intervened stream. After nostalgebraist 2020 ("interpreting GPT: the logit lens").
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel, PaddedBatch
from lmsci_mi.positions import Exclude
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from matplotlib.figure import Figure

__all__ = [
    "LENS_SITES",
    "LensReadout",
    "LogitLens",
    "LogitLensConfig",
    "final_norm",
    "lens_readout",
    "logit_lens",
    "resolve_layers",
]

LENS_SITES: tuple[str, ...] = ("resid_pre", "resid_mid", "resid_post")
"""Residual-stream sites a lens can read."""


@config
class LogitLensConfig(Config):
    """Where the logit lens reads and how much it keeps."""

    site: str = dataclasses.field(
        default="resid_post",
        metadata={
            "help": "residual site read at each layer",
            "choices": LENS_SITES,
            **paper(
                NOT_IN_NOTES,
                "nostalgebraist 2020, 'interpreting GPT: the logit lens' (Belrose et al. 2023's "
                "logit-lens baseline reads the stream entering each block, embedding included: "
                "tuned-lens scripts/train_loop.py hidden_states[:-1], inferred from the code)",
            ),
        },
    )
    layers: tuple[int, ...] | None = dataclasses.field(
        default=None, metadata={"help": "layers to read (default: every layer)", "ge": 0}
    )
    batch_size: int = dataclasses.field(
        default=8, metadata={"help": "prompts per forward pass", "ge": 1}
    )


_DEFAULT_CONFIG = LogitLensConfig()


def final_norm(lm: LensModel, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
    """Deprecated: :func:`lmsci_mi.readout.unembed_input` with ``space="resid"`` (what ``W_U``
    reads for ``resid``, the final norm recomputed on it, no hook firing)."""
    warnings.warn(
        "lmsci_mi.lenses.final_norm is deprecated; use lmsci_mi.readout.unembed_input(lm, resid, "
        'space="resid")',
        DeprecationWarning,
        stacklevel=2,
    )
    return readout.unembed_input(lm, resid.float(), space="resid")


@dataclasses.dataclass(frozen=True)
class LensReadout:
    """Per-layer statistics of a lens on one batch, ``[prompt, layer, pos]`` each.

    Attributes:
        prob, rank: the answer token's probability and rank (0 = top) under the lens.
        kl: KL(final ‖ lens) in nats.
        top: the lens's most likely token.
    """

    prob: Tensor
    rank: Tensor
    kl: Tensor
    top: Tensor


def lens_readout(
    lm: LensModel,
    streams: Sequence[Float[Tensor, "prompt pos d_model"]],
    final_logits: Float[Tensor, "prompt pos vocab"],
    answers: Int[Tensor, "prompt pos"],
    translate: Callable[[int, Tensor], Tensor] | None = None,
) -> LensReadout:
    """Statistics of reading each stream through the final norm and unembedding.

    Args:
        lm: the model.
        streams: one residual-stream tensor per lensed layer.
        final_logits: the model's own logits (the reference of the KL).
        answers: the token whose probability and rank are reported, per prompt and position.
        translate: ``(index, stream) -> stream`` applied first (the tuned lens's translators).
    """
    final_logp = final_logits.float().log_softmax(-1)
    final_p = final_logp.exp()
    index = answers[..., None]
    prob, rank, kl, top = [], [], [], []
    for i, stream in enumerate(streams):
        x = stream.float() if translate is None else translate(i, stream.float())
        # Recomputed, not live: no hook on the final norm (a capture, a steer) fires for a lens.
        logp = readout.logits(lm, x, space="resid", norm="recompute").log_softmax(-1)
        answer_logp = logp.gather(-1, index)
        prob.append(answer_logp.exp()[..., 0])
        rank.append((logp > answer_logp).sum(-1))
        kl.append((final_p * (final_logp - logp)).sum(-1).clamp_min(0.0))
        top.append(logp.argmax(-1))
    return LensReadout(*(torch.stack(t, 1) for t in (prob, rank, kl, top)))


def resolve_layers(lm: LensModel, layers: Sequence[int] | None) -> list[int]:
    """The layers to lens (every layer for None), checked against the model.

    Raises:
        ValueError: a layer outside ``0 .. n_layers - 1``, or an empty list.
    """
    n = lm.cfg.n_layers
    chosen = list(range(n)) if layers is None else [int(layer) for layer in layers]
    if not chosen:
        raise UserInputError("no layers given: pass layer indices, or None for every layer")
    bad = [layer for layer in chosen if not 0 <= layer < n]
    if bad:
        raise UserInputError(f"unknown layer(s) {bad}: {lm.name} has layers 0..{n - 1}")
    return chosen


@result_type
class LogitLens(Result):
    """The logit lens on a batch of prompts: ``values`` is the answer's probability
    ``[prompt, layer, position]`` (NaN at padding).

    Attributes:
        rank: ``[prompt, layer, position]`` the answer's rank (0 = top; -1 at padding).
        kl: ``[prompt, layer, position]`` KL(final ‖ lens) in nats (NaN at padding).
        top_tokens: ``[prompt, layer, position]`` id of the lens's top token.
        answer_ids: ``[prompt, position]`` the answer token read at each position.
        tokens: each prompt's tokens (sink included); ``top_text``: each top token's text,
            ``[prompt][layer][position]``.
        site: the residual site read; ``lens``: ``"logit"`` or ``"tuned"``.
        token_ids: ``[prompt, position]`` the prompts' token ids (0 at padding), which
            :meth:`mean_kl` and :meth:`kl_per_prompt` need to leave tokens out (None in results
            saved before they were kept).
    """

    rank: Tensor
    kl: Tensor
    top_tokens: Tensor
    answer_ids: Tensor
    tokens: tuple[tuple[str, ...], ...]
    top_text: tuple[tuple[tuple[str, ...], ...], ...]
    answers: tuple[str, ...]
    site: str
    lens: str
    token_ids: Tensor | None = None

    def _length(self, prompt: int) -> int:
        return len(self.tokens[prompt])

    def last(self, prompt: int = 0) -> Float[Tensor, " layer"]:
        """The answer's probability at each layer, at the prompt's last token."""
        return self.values[prompt, :, self._length(prompt) - 1]

    def _kl_kept(self, exclude: Exclude | None) -> Float[Tensor, "prompt layer position"]:
        """``kl`` with NaN at the positions ``exclude`` leaves out (padding is NaN already)."""
        if exclude is None:
            return self.kl
        if self.token_ids is None:
            if exclude.token_ids:
                raise UserInputError("this result was saved before lens results kept their token ids: "
                                     "run the lens again to leave tokens out")
            kept = exclude.keep_positions(self.kl.shape[0], self.kl.shape[2])
        else:
            kept = exclude.keep(self.token_ids)
        return self.kl.masked_fill(~kept[:, None, :], float("nan"))

    def mean_kl(self, exclude: Exclude | None = None) -> Float[Tensor, " layer"]:
        """KL(final ‖ lens) per layer, averaged over every real token of every prompt (but the
        positions ``exclude`` leaves out, when one is given: :class:`~lmsci_mi.positions.Exclude`)."""
        return self._kl_kept(exclude).nanmean((0, 2))

    def kl_per_prompt(self, exclude: Exclude | None = None) -> Float[Tensor, "prompt layer"]:
        """Each prompt's KL(final ‖ lens) per layer, averaged over its real tokens (but the
        positions ``exclude`` leaves out); NaN for a prompt with no token left.

        >>> from lmsci_mi import load_model
        >>> lens = logit_lens(load_model("toy-2l"), ["The cat sat on the", "A dog"])
        >>> lens.kl_per_prompt(Exclude()).shape
        torch.Size([2, 2])
        """
        return self._kl_kept(exclude).nanmean(-1)

    def summary(self, rows: int = 40) -> str:
        """Per layer at the first prompt's last token: answer probability and rank, KL, top token."""
        last = self._length(0) - 1
        answer = repr(self.answers[0]) if self.answers else "the model's own top token"
        lines = [
            f"{self.lens} lens at {self.site} of {self.meta.model}, prompt {self.meta.prompts[0]!r}, "
            f"answer {answer} (last token)",
            f"{'layer':>6} {'p(answer)':>10} {'rank':>6} {'KL':>8}  top token",
        ]
        for i, label in enumerate(self.axis_labels(1)[:rows]):
            lines.append(
                f"{label:>6} {float(self.values[0, i, last]):>10.4f} {int(self.rank[0, i, last]):>6} "
                f"{float(self.kl[0, i, last]):>8.3f}  {self.top_text[0][i][last]!r}"
            )
        return "\n".join(lines)

    def default_title(self, *, prompt: int = 0, **options: object) -> str:
        answer = repr(self.answers[prompt]) if self.answers else "the model's top token"
        return f"{self.lens} lens: p({answer}), top token in each cell — {self.meta.model}"

    def _draw(self, title: str, *, prompt: int = 0) -> Figure:
        """Heatmap of the answer's probability by layer × position, each cell labelled with the
        lens's top token (one prompt)."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap

        n = self._length(prompt)
        values = self.values[prompt, :, :n]
        n_layers = values.shape[0]
        fig = Figure(figsize=(max(6, 1.0 * n + 2), max(4, 0.3 * n_layers + 1.5)))
        ax = fig.subplots()
        heatmap(
            ax,
            values,
            row_labels=self.axis_labels(1),
            col_labels=list(self.tokens[prompt]),
            row_name=f"layer ({self.site})",
            col_name="position",
            cmap="viridis",
            title=title,
        )
        ax.invert_yaxis()  # the last layer on top, as the stream flows upwards
        for layer in range(n_layers):
            for pos in range(n):
                ax.text(
                    pos,
                    layer,
                    self.top_text[prompt][layer][pos][:8],
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white",
                )
        fig.tight_layout()
        return fig


def _answer_ids(
    lm: LensModel, answer: str | Sequence[str] | None, padded: PaddedBatch, final: Tensor
) -> Tensor:
    """``[prompt, pos]`` answer ids: the given answer at every position, or the model's top token."""
    if answer is None:
        return final.argmax(-1)
    n = padded.tokens.shape[0]
    items = [answer] * n if isinstance(answer, str) else list(answer)
    if len(items) != n:
        raise UserInputError(f"{len(items)} answers for {n} prompts: give one, or one per prompt")
    ids = torch.tensor([lm.token_id(a) for a in items], device=lm.device)
    return ids[:, None].expand_as(padded.tokens)


def check_prompts(prompts: str | Sequence[str]) -> list[str]:
    """The prompts as a list, refusing none and empty ones (ValueError naming the fix)."""
    batch = [prompts] if isinstance(prompts, str) else list(prompts)
    if not batch:
        raise UserInputError("no prompts given: pass a prompt or a list of prompts")
    if any(not p.strip() for p in batch):
        raise UserInputError("empty prompt: every prompt needs some text")
    return batch


@torch.no_grad()
def run_lens(
    lm: LensModel,
    prompts: str | Sequence[str],
    answer: str | Sequence[str] | None,
    config: LogitLensConfig,
    translate: Callable[[int, Tensor], Tensor] | None = None,
    lens: str = "logit",
) -> LogitLens:
    """The shared loop of the logit and tuned lens: batches, captures, readouts, the result."""
    batch = check_prompts(prompts)
    layers = resolve_layers(lm, config.layers)
    names = [hook_name(config.site, layer) for layer in layers]
    if answer is not None:  # check every answer before any forward pass
        for text in [answer] if isinstance(answer, str) else list(answer):
            lm.token_id(text)
    parts: list[tuple[LensReadout, Tensor, PaddedBatch]] = []
    for start in range(0, len(batch), config.batch_size):
        padded = lm.encode_batch(batch[start : start + config.batch_size])
        with lm.hooks.capture(names) as cap:
            final = lm(padded.tokens).float()
        answers = _answer_ids(
            lm, None if answer is None else _slice(answer, start, config.batch_size), padded, final
        )
        stats = lens_readout(lm, [cap[n] for n in names], final, answers, translate)
        parts.append((stats, answers, padded))
    return _lens_result(lm, batch, layers, parts, answer, config, lens)


def _slice(answer: str | Sequence[str], start: int, size: int) -> str | Sequence[str]:
    return answer if isinstance(answer, str) else list(answer)[start : start + size]


def _pad(t: Tensor, width: int, fill: float) -> Tensor:
    out = torch.full((*t.shape[:-1], width), fill, dtype=t.dtype)
    out[..., : t.shape[-1]] = t
    return out


def _lens_result(
    lm: LensModel,
    prompts: list[str],
    layers: list[int],
    parts: list[tuple[LensReadout, Tensor, PaddedBatch]],
    answer: str | Sequence[str] | None,
    config: LogitLensConfig,
    lens: str,
) -> LogitLens:
    width = max(p.tokens.shape[1] for _, _, p in parts)
    prob, rank, kl, top, ans, ids = [], [], [], [], [], []
    for stats, answers, padded in parts:
        pad = ~padded.mask.cpu()[:, None, :]
        prob.append(_pad(stats.prob.cpu().masked_fill(pad, float("nan")), width, float("nan")))
        kl.append(_pad(stats.kl.cpu().masked_fill(pad, float("nan")), width, float("nan")))
        rank.append(_pad(stats.rank.cpu().masked_fill(pad, -1), width, -1))
        top.append(_pad(stats.top.cpu(), width, 0))
        ans.append(_pad(answers.cpu(), width, 0))
        ids.append(_pad(padded.tokens.masked_fill(~padded.mask, 0).cpu(), width, 0))
    tokens = tuple(tuple(lm.to_str_tokens(p)) for p in prompts)
    top_ids = torch.cat(top)
    decode = lm.tokenizer.decode
    top_text = tuple(
        tuple(tuple(decode([int(t)]) for t in row[: len(tokens[i])]) for row in top_ids[i])
        for i in range(len(prompts))
    )
    answers = (
        ()
        if answer is None
        else tuple([answer] * len(prompts) if isinstance(answer, str) else answer)
    )
    return LogitLens(
        values=torch.cat(prob),
        axes=("prompt", "layer", "position"),
        labels=(
            tuple(str(i) for i in range(len(prompts))),
            tuple(str(layer) for layer in layers),
            (),
        ),
        meta=lm.meta(prompts, params=config.params()),
        rank=torch.cat(rank),
        kl=torch.cat(kl),
        top_tokens=top_ids,
        answer_ids=torch.cat(ans),
        tokens=tokens,
        top_text=top_text,
        answers=answers,
        site=config.site,
        lens=lens,
        token_ids=torch.cat(ids),
    )


def logit_lens(
    lm: LensModel,
    prompts: str | Sequence[str],
    answer: str | Sequence[str] | None = None,
    config: LogitLensConfig = _DEFAULT_CONFIG,
) -> LogitLens:
    """The logit lens at every layer (or ``config.layers``) and position of a batch of prompts.

    Reads hooked activations: inside an intervention (``lm.hooks.patch``, an ablation, a steer)
    it shows the intervened stream, and the KL is to the intervened model's output. Reads the
    model only.

    Args:
        lm: the model.
        prompts: one prompt or several (any lengths; right-padded).
        answer: the token whose probability and rank are reported at every position (one token,
            e.g. ``" Paris"``; one for all or one per prompt); None: the model's own top token.
        config: the residual site, the layers and the batch size.

    Returns:
        :class:`LogitLens`.

    Raises:
        ValueError: no or an empty prompt, an unknown layer, an answer that is not one token.

    >>> from lmsci_mi import load_model
    >>> lens = logit_lens(load_model("toy-2l"), "The cat sat on the", " mat")
    >>> lens.values.shape, float(lens.kl[0, -1].max()) < 1e-4
    (torch.Size([1, 2, 6]), True)
    """
    return run_lens(lm, prompts, answer, config)
