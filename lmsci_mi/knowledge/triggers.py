"""Trigger examples of FFN keys (Geva et al. 2021, "Transformer Feed-Forward Layers Are Key-Value
Memories", §3): the text positions where a neuron's coefficient (``mlp_post``) is largest.

One forward pass per batch of texts keeps a running top-n per neuron for every hooked layer at
once, so memory stays ``neurons x n`` whatever the text size. ``collect_activations`` stores every
position's activations instead, which for all layers of a corpus would not fit in memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens.hook_points import HookPoint

from lmsci_mi.config import Config, config
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.knowledge.values import checked_neurons, decode_tokens, neuron_label
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name

if TYPE_CHECKING:
    import pandas as pd

    from lmsci_mi.model import LensModel

__all__ = [
    "SIGNS",
    "TopCoefficients",
    "TriggerConfig",
    "TriggerExamples",
    "text_sequences",
    "top_coefficients",
    "trigger_examples",
]

SIGNS = ("magnitude", "positive", "negative")
"""Which coefficients count as largest: by absolute value (a gated MLP's coefficients ``act(gate)
* up`` take both signs), the most positive (Geva's ReLU keys), or the most negative."""


@config
class TriggerConfig(Config):
    """Which trigger examples to find, and in which text."""

    n_examples: int = field(default=10, metadata={"help": "trigger examples per neuron", "ge": 1})
    sign: str = field(
        default="magnitude", metadata={"help": "rank coefficients by", "choices": SIGNS}
    )
    window: int = field(
        default=8, metadata={"help": "context tokens shown up to the trigger", "ge": 1}
    )
    n_tokens: int = field(
        default=32768,
        metadata={"help": "tokens of the bundled text (when no texts are given)", "ge": 1},
    )
    seq_len: int = field(default=128, metadata={"help": "row length of the bundled text", "ge": 2})
    skip_last: bool = field(
        default=False, metadata={"help": "skip each text's last token (its next token is unknown)"}
    )
    token_budget: int = field(default=8192, metadata={"help": "tokens per forward pass", "ge": 1})
    progress: bool = field(default=False, metadata={"help": "show a progress bar", "cli": False})
    exclude: Exclude | None = field(
        default=None,
        metadata={
            "help": "positions that are never a trigger (None: the sink token, where the model "
            "puts one in front)",
            "cli": False,
        },
    )


@dataclass(frozen=True)
class TopCoefficients:
    """The running top-n of one layer's chosen neurons: ``[neuron, n]`` each; ``text`` is -1 where
    fewer than n positions exist."""

    neurons: tuple[int, ...]
    coefficient: Float[Tensor, "neuron n"]
    text: Int[Tensor, "neuron n"]
    position: Int[Tensor, "neuron n"]


def text_sequences(
    lm: LensModel, texts: Sequence[str] | None, cfg: TriggerConfig
) -> tuple[list[list[int]], str]:
    """Token id lists (sink first) of ``texts``, or of the bundled text; and the data source.

    Raises:
        ValueError: an empty list of texts, or a blank text (the message names it).
    """
    if texts is None:
        rows = text_chunks(lm, cfg.n_tokens, seq_len=cfg.seq_len)
        return rows.tolist(), f"{STDLIB_TEXT_SOURCE} ({rows.numel()} tokens)"
    if len(texts) == 0:
        raise UserInputError("no texts given; pass some texts, or None for the bundled text")
    for i, text in enumerate(texts):
        if not text.strip():
            raise UserInputError(f"text {i} is empty; drop it")
    return [lm.encode(t) for t in texts], f"user texts ({len(texts)})"


def _batches(sequences: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
    """Text indices in batches of ``rows x width <= budget``, longest first (least padding)."""
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * len(sequences[batches[-1][0]]) <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _score(coef: Tensor, sign: str) -> Tensor:
    return coef.abs() if sign == "magnitude" else coef if sign == "positive" else -coef


class _Running:
    """Top-n coefficients of one layer, merged batch by batch."""

    def __init__(self, neurons: Sequence[int], n: int, sign: str, device: torch.device) -> None:
        m = len(neurons)
        self.index = torch.tensor(list(neurons), dtype=torch.long, device=device)
        self.n, self.sign = n, sign
        self.score = torch.full((0, m), -torch.inf, device=device)
        self.coef = torch.empty(0, m, device=device)
        self.text = torch.empty(0, m, dtype=torch.long, device=device)
        self.pos = torch.empty(0, m, dtype=torch.long, device=device)

    def update(self, act: Tensor, valid: Tensor, text_ids: Tensor) -> None:
        coef = act[..., self.index].float()  # [batch, pos, m]
        score = _score(coef, self.sign).masked_fill(~valid[..., None], -torch.inf)
        batch, n_pos, m = coef.shape
        rows = (
            torch.arange(batch, device=act.device).repeat_interleave(n_pos)[:, None].expand(-1, m)
        )
        cols = torch.arange(n_pos, device=act.device).repeat(batch)[:, None].expand(-1, m)
        score = torch.cat([self.score, score.reshape(-1, m)])
        coef = torch.cat([self.coef, coef.reshape(-1, m)])
        text = torch.cat([self.text, text_ids[rows]])
        pos = torch.cat([self.pos, cols])
        top = score.topk(min(self.n, score.shape[0]), dim=0)
        self.score = top.values
        self.coef, self.text, self.pos = (t.gather(0, top.indices) for t in (coef, text, pos))

    def finish(self, neurons: Sequence[int]) -> TopCoefficients:
        missing = ~torch.isfinite(self.score)
        pad = self.n - self.score.shape[0]  # fewer candidate positions than n in all the text
        text = self.text.masked_fill(missing, -1)
        coef, pos = self.coef.masked_fill(missing, torch.nan), self.pos.masked_fill(missing, -1)
        if pad > 0:
            m = len(neurons)
            coef = torch.cat([coef, torch.full((pad, m), torch.nan, device=coef.device)])
            text = torch.cat([text, torch.full((pad, m), -1, dtype=torch.long, device=text.device)])
            pos = torch.cat([pos, torch.full((pad, m), -1, dtype=torch.long, device=pos.device)])
        return TopCoefficients(tuple(neurons), coef.T.cpu(), text.T.cpu(), pos.T.cpu())


@torch.no_grad()
def top_coefficients(
    lm: LensModel,
    sequences: Sequence[Sequence[int]],
    neurons: Mapping[int, Sequence[int]],
    cfg: TriggerConfig,
) -> dict[int, TopCoefficients]:
    """The ``cfg.n_examples`` largest coefficients of each chosen neuron, per layer, in one pass.

    Args:
        lm: the model.
        sequences: token id lists, sink first (the sink is never a candidate: it carries the
            massive activations of the attention sink, not content; nor is any other position
            ``cfg.exclude`` names).
        neurons: per layer, the neurons to follow.
        cfg: how many, ranked how, batching, exclusions.

    Returns:
        Per layer, a :class:`TopCoefficients` (best first).
    """
    # None keeps what the search always did: a sink-free model's first token is a word, a candidate.
    exclude = resolve_exclude(cfg.exclude, sink_token=lm.sink_token_id is not None)
    running = {
        layer: _Running(ns, cfg.n_examples, cfg.sign, lm.device) for layer, ns in neurons.items()
    }
    state: dict[str, Tensor] = {}

    def record(activation: Tensor, hook: HookPoint) -> None:
        layer = int((hook.name or "").split(".")[1])
        running[layer].update(activation, state["valid"], state["text"])

    names = [hook_name("mlp_post", layer) for layer in running]
    stop = max(running) + 1
    batches = _batches(sequences, cfg.token_budget)
    with lm.hooks.hooks(fwd=[(names, record)], label="trigger examples"):
        for batch in tqdm(batches, desc="triggers", unit="batch", disable=not cfg.progress):
            padded = lm.pad_batch([sequences[i] for i in batch])
            ends = padded.lengths - int(cfg.skip_last)
            tokens = padded.tokens.to(lm.device)
            state["valid"] = exclude.keep(tokens, lengths=ends.to(lm.device))
            state["text"] = torch.tensor(batch, dtype=torch.long, device=lm.device)
            # Right padding: causal attention keeps real positions exact; padding is masked out.
            lm.model(padded.tokens, stop_at_layer=stop)
    return {layer: run.finish(neurons[layer]) for layer, run in running.items()}


@result_type
class TriggerExamples(Result):
    """The contexts where each neuron's coefficient is largest (Geva 2021's trigger examples).

    ``values[n, r]`` is the coefficient (``mlp_post``) of neuron ``n`` at its ``r``-th trigger;
    NaN where the text had fewer candidate positions.

    Attributes:
        layer, neurons: which neurons.
        text_index, position: ``[neuron, rank]``: where each trigger is (-1: none).
        next_token_id: ``[neuron, rank]`` the token after the trigger (-1 at a text's end).
        contexts: the ``window`` tokens up to the trigger, the trigger in brackets; flattened.
        next_tokens: the next token's text ("" at a text's end); flattened.
        sign: how coefficients were ranked (:data:`SIGNS`). A negative coefficient promotes the
            value's bottom tokens.
    """

    layer: int
    neurons: tuple[int, ...]
    text_index: Tensor
    position: Tensor
    next_token_id: Tensor
    contexts: tuple[str, ...]
    next_tokens: tuple[str, ...]
    sign: str

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (neuron, rank): coefficient, context, next token, text and position."""
        frame = super().to_dataframe().rename(columns={"value": "coefficient"})
        frame["context"] = list(self.contexts)
        frame["next_token"] = list(self.next_tokens)
        frame["text_index"] = self.text_index.reshape(-1).tolist()
        frame["position"] = self.position.reshape(-1).tolist()
        return frame

    def summary(self, rows: int = 10) -> str:
        """Per neuron, its trigger contexts with coefficient and next token."""
        k = self.values.shape[1]
        lines = [
            f"Trigger examples of layer {self.layer} on {self.meta.model} "
            f"(ranked by {self.sign} coefficient; source {self.meta.data_source})"
        ]
        for n, neuron in enumerate(self.neurons):
            lines.append(neuron_label(self.layer, neuron))
            for r in range(min(rows, k)):
                if int(self.text_index[n, r]) < 0:
                    break
                i = n * k + r
                lines.append(
                    f"  {float(self.values[n, r]):+8.3f}  {self.contexts[i]!r} -> "
                    f"{self.next_tokens[i]!r}"
                )
        lines.append("A negative coefficient promotes the value's bottom tokens.")
        return "\n".join(lines)


def trigger_examples(
    lm: LensModel,
    layer: int,
    neurons: int | Sequence[int],
    texts: Sequence[str] | None = None,
    config: TriggerConfig | None = None,
) -> TriggerExamples:
    """The trigger examples of the keys of ``neurons`` in ``layer``. Reads the model only.

    Args:
        lm: the model.
        layer: the block.
        neurons: one neuron index or several.
        texts: the text set; None reads ``config.n_tokens`` of the bundled stdlib text.
        config: examples per neuron, sign, context window, batching (:class:`TriggerConfig`).

    Returns:
        :class:`TriggerExamples`, best first.

    Raises:
        ValueError: an unknown layer or neuron, no texts, or a blank text.

    >>> from lmsci_mi import load_model
    >>> ex = trigger_examples(load_model("toy-2l"), 0, [1, 2], ["The cat sat on the mat", "A dog"],
    ...                       TriggerConfig(n_examples=3))
    >>> tuple(ex.values.shape)
    (2, 3)
    """
    cfg = config or TriggerConfig()
    chosen = checked_neurons(lm, layer, neurons)
    sequences, source = text_sequences(lm, texts, cfg)
    top = top_coefficients(lm, sequences, {layer: chosen}, cfg)[layer]
    contexts, nexts, next_ids = [], [], []
    for t, p in zip(top.text.reshape(-1).tolist(), top.position.reshape(-1).tolist(), strict=True):
        seq = sequences[t] if t >= 0 else []
        contexts.append(_context(lm, seq, p, cfg.window) if t >= 0 else "")
        nxt = seq[p + 1] if t >= 0 and p + 1 < len(seq) else -1
        next_ids.append(nxt)
        nexts.append(decode_tokens(lm, [nxt])[0] if nxt >= 0 else "")
    return TriggerExamples(
        values=top.coefficient,
        axes=("neuron", "rank"),
        labels=(tuple(neuron_label(layer, n) for n in chosen), ()),
        meta=lm.meta(
            tuple(texts or ()),
            data_source=source,
            params={
                **cfg.params(),
                "layer": int(layer),
                "neurons": chosen,
                "method": "Geva et al. 2021 trigger examples (largest mlp_post coefficients)",
            },
        ),
        layer=int(layer),
        neurons=chosen,
        text_index=top.text,
        position=top.position,
        next_token_id=torch.tensor(next_ids, dtype=torch.long).reshape(top.text.shape),
        contexts=tuple(contexts),
        next_tokens=tuple(nexts),
        sign=cfg.sign,
    )


def _context(lm: LensModel, seq: Sequence[int], pos: int, window: int) -> str:
    skip = 1 if lm.sink_token_id is not None else 0
    start = max(skip, pos - window + 1)
    before = "".join(decode_tokens(lm, seq[start:pos]))
    return f"{'…' if start > skip else ''}{before}[{decode_tokens(lm, [seq[pos]])[0]}]"
