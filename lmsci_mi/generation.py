"""The one sampler: batched, ragged, KV-cached, seeded generation under a ``GenerationConfig``.

Steered and edited generation is "apply the intervention, then sample": interventions active in
the hook registry apply at every decoding step. Each row draws from its own seeded stream, so a
prompt samples the same tokens alone or in a batch. Every forward pass publishes where it is
(:func:`decoding_step`), so a position-scoped intervention knows prompt from generated positions.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from jaxtyping import Int
from torch import Tensor
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError

__all__ = [
    "DecodingStep",
    "GenerationConfig",
    "Generations",
    "decoding_step",
    "generate",
    "prompt_lengths",
]

Prompt = str | Sequence[int]
"""A prompt: text (tokenised under the model's sink policy) or token ids used as they are."""

_STREAM_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant: distinct (seed, row) pairs, distinct seeds


@config
class GenerationConfig(Config):
    """How to continue prompts: length, temperature, top-k / top-p and the seed.

    ``temperature == 0`` is greedy decoding (top-k and top-p are then ignored).
    """

    max_new_tokens: int = field(
        default=20, metadata={"help": "tokens generated per prompt", "ge": 1}
    )
    temperature: float = field(
        default=1.0, metadata={"help": "sampling temperature; 0 is greedy", "ge": 0}
    )
    top_k: int | None = field(
        default=None, metadata={"help": "sample among the k likeliest tokens", "ge": 1}
    )
    top_p: float | None = field(
        default=None,
        metadata={"help": "sample from the smallest set of tokens of this mass", "gt": 0, "le": 1},
    )
    seed: int | None = field(default=0, metadata={"help": "seed of each row's random stream"})
    batch_size: int = field(default=32, metadata={"help": "prompts decoded together", "ge": 1})



@dataclass(frozen=True)
class Generations:
    """What :func:`generate` returns: each prompt's new token ids and their text.

    Attributes:
        prompts: the prompts as given (text, or a tuple of token ids).
        tokens: per prompt, the new token ids; a row that met the stop token ends with it.
        texts: per prompt, the new tokens decoded (special tokens left out); token ids joined
            by spaces for a model without a tokenizer.
        logits: per prompt, ``[new token, vocab]`` logits that chose each new token (only with
            ``keep_logits=True``; before temperature, top-k and top-p).
    """

    prompts: tuple[str | tuple[int, ...], ...]
    tokens: tuple[tuple[int, ...], ...]
    texts: tuple[str, ...]
    logits: tuple[Tensor, ...] | None = None


@dataclass(frozen=True)
class DecodingStep:
    """Where the running forward pass is in its sequences.

    Attributes:
        offset: the absolute position of the pass's first column. A cached decoding step feeds
            one column (offset = the step's position); an uncached one, or a plain forward,
            feeds the whole sequence (offset 0).
        prompt_lengths: each row's prompt length in tokens; positions at or past it hold
            generated tokens. None: every position of the pass is a prompt position.
    """

    offset: int
    prompt_lengths: Int[Tensor, " row"] | None


_STEP: ContextVar[DecodingStep | None] = ContextVar("lmsci_mi_decoding_step", default=None)


def decoding_step() -> DecodingStep | None:
    """The :class:`DecodingStep` of the forward pass now running, or None outside the sampler
    and outside :func:`prompt_lengths` (a plain forward: every position is a prompt position).

    >>> decoding_step() is None
    True
    """
    return _STEP.get()


@contextmanager
def prompt_lengths(lengths: Int[Tensor, " row"] | Sequence[int]) -> Iterator[None]:
    """Declare each row's prompt length for plain forward passes of a right-padded batch, so a
    scope such as "the last prompt token" finds each row's own last token, not its padding.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> batch = lm.encode_batch(["The cat sat", "A dog"])
    >>> with prompt_lengths(batch.lengths):
    ...     decoding_step().prompt_lengths.tolist()
    [4, 3]
    """
    step = DecodingStep(0, torch.as_tensor(lengths, dtype=torch.long))
    token = _STEP.set(step)
    try:
        yield
    finally:
        _STEP.reset(token)


class _Model(Protocol):
    """What the sampler uses of a ``LensModel`` (``model`` imports this module, not the reverse)."""

    model: Any
    tokenizer: Any

    @property
    def device(self) -> torch.device: ...

    def encode(self, text: str) -> list[int]: ...


def generate(
    lm: _Model,
    prompts: Sequence[Prompt],
    config: GenerationConfig | None = None,
    *,
    stop_at: int | Collection[int] | None = None,
    use_kv_cache: bool = True,
    keep_logits: bool = False,
    streams: Sequence[int] | None = None,
) -> Generations:
    """Continue each prompt under ``config``; interventions active in ``lm.hooks`` apply.

    Prompts of different lengths share a batch without padding: every row advances one position
    per step, fed its own prompt token while it has one and its sampled token after that, so
    positions are exact. Row ``i`` draws from its own generator seeded from ``(config.seed, i)``
    (the global random state is never touched), so a prompt samples the same tokens whatever
    else shares its batch and whatever the batch size. Every forward pass goes through the
    model's hook points. Reads the model only.

    Args:
        lm: a ``LensModel``.
        prompts: texts, or token-id sequences used as they are (no sink added).
        config: length, temperature, top-k / top-p, seed and batch size.
        stop_at: a token id that ends a row (kept as its last token), e.g. a grammar's EOS, or
            several (any of them ends the row: EOS and every token holding a stop string).
        use_kv_cache: False recomputes the whole sequence at each step (same tokens; slower).
        keep_logits: also return the logits of each new token.
        streams: the random stream of each prompt (default: its index). A caller that samples
            the same prompt in different calls (one fact now, all facts later) passes a stable
            id, so the prompt draws the same tokens in every call.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> out = generate(lm, ["Hi", "Hello there"], GenerationConfig(max_new_tokens=3))
    >>> [len(t) for t in out.tokens]
    [3, 3]
    >>> generate(lm, ["Hi"], GenerationConfig(max_new_tokens=3)).tokens[0] == out.tokens[0]
    True
    """
    config = config or GenerationConfig()
    sequences = [_prompt_ids(lm, p) for p in prompts]
    streams = range(len(sequences)) if streams is None else [int(s) for s in streams]
    if len(streams) != len(sequences):
        raise UserInputError(f"{len(streams)} streams for {len(sequences)} prompts: give one per prompt")
    generators = [_row_generator(config.seed, s, lm.device) for s in streams]
    stops = _stop_ids(stop_at)
    tokens: list[tuple[int, ...]] = [() for _ in sequences]
    logits: list[Tensor] = [torch.empty(0) for _ in sequences]
    # Rows of similar length share a batch, so few steps are spent feeding prompt tokens.
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    with torch.no_grad():
        for start in range(0, len(order), config.batch_size):
            rows = order[start : start + config.batch_size]
            batch = _Batch.start(lm, [sequences[i] for i in rows], config.max_new_tokens)
            _decode(
                lm, batch, config, [generators[i] for i in rows], stops, use_kv_cache, keep_logits
            )
            for r, i in enumerate(rows):
                tokens[i], logits[i] = batch.row(r, stops)
    return Generations(
        prompts=tuple(p if isinstance(p, str) else tuple(int(t) for t in p) for p in prompts),
        tokens=tuple(tokens),
        texts=tuple(_decode_text(lm, t) for t in tokens),
        logits=tuple(logits) if keep_logits else None,
    )


def _prompt_ids(lm: _Model, prompt: Prompt) -> list[int]:
    ids = lm.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
    if not ids:
        raise UserInputError(f"prompt {prompt!r} has no tokens to continue (give at least one)")
    return ids


def _stop_ids(stop_at: int | Collection[int] | None) -> frozenset[int]:
    """The ids that end a row (none: rows run to ``max_new_tokens``)."""
    if stop_at is None:
        return frozenset()
    return frozenset([int(stop_at)] if isinstance(stop_at, int) else (int(t) for t in stop_at))


def _row_generator(seed: int | None, row: int, device: torch.device) -> torch.Generator:
    """Row ``row``'s own random stream: seeded from ``(seed, row)``, or unseeded for None."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed((seed * _STREAM_MIX + row) % 2**63)
    return generator


def _decode_text(lm: _Model, tokens: Sequence[int]) -> str:
    if lm.tokenizer is None:
        return " ".join(str(t) for t in tokens)
    return str(lm.tokenizer.decode(list(tokens), skip_special_tokens=True))


@dataclass
class _Batch:
    """One batch's token grid ``[row, longest prompt + new tokens]``, filled as decoding goes."""

    tokens: Tensor
    lengths: Tensor
    max_new_tokens: int
    step_logits: list[Tensor] = field(default_factory=list)
    first_step: int = 0

    @classmethod
    def start(cls, lm: _Model, sequences: Sequence[list[int]], max_new_tokens: int) -> _Batch:
        longest = max(len(s) for s in sequences)
        tokens = torch.zeros(len(sequences), longest + max_new_tokens, dtype=torch.long)
        for r, ids in enumerate(sequences):
            tokens[r, : len(ids)] = torch.tensor(ids)
        lengths = torch.tensor([len(s) for s in sequences])
        return cls(tokens.to(lm.device), lengths.to(lm.device), max_new_tokens)

    def row(self, r: int, stops: frozenset[int]) -> tuple[tuple[int, ...], Tensor]:
        """Row ``r``'s new tokens (cut after the first of ``stops``) and, if kept, their logits."""
        n = int(self.lengths[r])
        new = self.tokens[r, n : n + self.max_new_tokens].tolist()
        ends = [k for k, t in enumerate(new) if t in stops]
        if ends:
            new = new[: ends[0] + 1]
        if not self.step_logits:
            return tuple(new), torch.empty(0)
        # step_logits[s] chose the token at position first_step + s.
        steps = range(n - self.first_step, n - self.first_step + len(new))
        return tuple(new), torch.stack([self.step_logits[s][r] for s in steps]).cpu()


def _decode(
    lm: _Model,
    batch: _Batch,
    config: GenerationConfig,
    generators: Sequence[torch.Generator],
    stops: frozenset[int],
    use_kv_cache: bool,
    keep_logits: bool,
) -> None:
    """Fill ``batch.tokens`` step by step; at step ``t`` a row still in its prompt keeps its
    prompt token, the others take a token drawn from the logits at ``t - 1``."""
    if config.max_new_tokens == 0:
        return
    model, tokens, lengths = lm.model, batch.tokens, batch.lengths
    shortest, width = int(lengths.min()), tokens.shape[1]
    batch.first_step = shortest
    cache = (
        TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, tokens.shape[0])
        if use_kv_cache
        else None
    )
    logits = _forward(model, tokens[:, :shortest], cache, 0, lengths)
    ended = torch.zeros_like(lengths, dtype=torch.bool)
    stop_ids = torch.tensor(sorted(stops), dtype=torch.long, device=tokens.device)
    for t in range(shortest, width):
        if keep_logits:
            batch.step_logits.append(logits.clone())  # a view would keep the whole pass alive
        in_prompt = t < lengths
        drawn = _choose(logits, config, generators, ~in_prompt)
        tokens[:, t] = torch.where(in_prompt, tokens[:, t], drawn)
        if stops:
            ended |= ~in_prompt & torch.isin(drawn, stop_ids)
        # A row is finished once it met the stop token or has all its new tokens.
        if bool((ended | (t + 1 >= lengths + config.max_new_tokens)).all()):
            break
        if cache is not None:
            logits = _forward(model, tokens[:, t : t + 1], cache, t, lengths)
        else:
            logits = _forward(model, tokens[:, : t + 1], None, 0, lengths)


def _forward(
    model: Any, tokens: Tensor, cache: TransformerLensKeyValueCache | None, offset: int, lengths: Tensor
) -> Tensor:
    """Last-position logits ``[row, vocab]`` through every hook point of the model, with the
    pass's :class:`DecodingStep` published to the hooks (positions from ``offset`` on)."""
    # An explicit all-ones mask: no row is padded. Left to itself, TransformerLens would infer
    # a mask from the tokenizer's pad token, which for some models is also the sink token.
    mask = torch.ones_like(tokens)
    token = _STEP.set(DecodingStep(offset, lengths))
    try:
        logits = model(tokens, past_kv_cache=cache, attention_mask=mask)
    finally:
        _STEP.reset(token)
    return logits[:, -1].float()


def _choose(
    logits: Tensor, config: GenerationConfig, generators: Sequence[torch.Generator], draw: Tensor
) -> Tensor:
    """One token per row: the argmax when greedy, else a draw from the row's own stream (only
    rows in ``draw`` consume a number, so a row's stream does not depend on its batch)."""
    if config.temperature == 0:
        return logits.argmax(-1)
    scaled = logits / config.temperature
    if config.top_k is not None and config.top_k < scaled.shape[-1]:
        kth = scaled.topk(config.top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if config.top_p is not None and config.top_p < 1:
        scaled = _nucleus(scaled, config.top_p)
    probs = scaled.softmax(-1)
    uniform = torch.zeros(len(generators), device=logits.device)
    for r in draw.nonzero().flatten().tolist():
        uniform[r] = torch.rand((), generator=generators[r], device=logits.device)
    # Inverse-CDF draw: the first token whose cumulative probability exceeds the uniform.
    cdf = probs.cumsum(-1)
    chosen = torch.searchsorted(cdf, (uniform * cdf[:, -1]).unsqueeze(-1), right=True)
    return chosen.squeeze(-1).clamp_(max=logits.shape[-1] - 1)


def _nucleus(scaled: Tensor, top_p: float) -> Tensor:
    """Keep the smallest set of likeliest tokens whose mass reaches ``top_p`` (at least one)."""
    ordered, index = scaled.sort(-1, descending=True)
    probs = ordered.softmax(-1)
    drop_sorted = probs.cumsum(-1) - probs >= top_p  # the mass before a token already suffices
    drop = torch.zeros_like(drop_sorted).scatter(-1, index, drop_sorted)
    return scaled.masked_fill(drop, float("-inf"))
