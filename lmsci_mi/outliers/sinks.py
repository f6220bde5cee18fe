"""Attention sinks (Xiao et al. 2024, "Efficient Streaming Language Models with Attention Sinks"):
per head, the attention mass parked on the first tokens, with and without lmsci-mi's prepended sink
token; and masking attention to the first tokens, per head or for the whole model, with its cost in
held-out NLL against as many random heads.

The sink score registers in the head-score registry (:data:`lmsci_mi.circuits.heads.HEAD_SCORES`,
kind ``"sink"``): this package uses the circuits package's public head-score API in that one
direction, as a new head score is one file plus one registration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.circuits.ablation import all_heads
from lmsci_mi.circuits.heads import (
    HEAD_SCORES,
    HeadScoreConfig,
    HeadScores,
    head_axis_labels,
    top_heads,
)
from lmsci_mi.config import Config, config, paper
from lmsci_mi.data.text_corpus import STDLIB_TEXT_SOURCE, text_chunks
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import Head, hook_name, layer_of
from lmsci_mi.stats import Interval, bootstrap_interval, paired_bootstrap_interval, standard_error

if TYPE_CHECKING:
    from transformer_lens.hook_points import HookPoint

__all__ = [
    "FirstTokenMaskConfig",
    "FirstTokenMaskEffect",
    "SinkHeads",
    "SinkScoreConfig",
    "first_token_mask_effect",
    "mask_first_tokens",
    "sink_heads",
    "sink_scores",
]

_PAPER = "Xiao et al. 2024 (ICLR, arXiv:2309.17453): StreamingLLM keeps 4 initial tokens as attention sinks"
_WHY_K = ("lmsci-mi puts one sink token in front of every prompt (lmsci_mi/model.py), so k = 1 scores "
          "exactly that token; k = 4 reads the paper's four")


def _k_field(help_text: str) -> dataclasses.Field:
    return dataclasses.field(default=1, metadata={"help": help_text, "ge": 1, **paper(4, _PAPER, why=_WHY_K)})


@config
class SinkScoreConfig(Config):
    """Settings of the sink score: the first ``k`` tokens, and the offline text it is read on.

    The text is the first ``n_texts`` rows of ``seq_len`` tokens of the standard library's prose
    (:func:`~lmsci_mi.data.text_corpus.text_chunks`, the sink token first where the model has one).
    """

    k: int = _k_field("first tokens whose attention mass is scored")
    n_texts: int = dataclasses.field(default=16, metadata={"help": "rows of offline text", "ge": 1})
    seq_len: int = dataclasses.field(
        default=64, metadata={"help": "tokens per row, the sink included", "ge": 2}
    )
    batch_size: int = dataclasses.field(default=8, metadata={"help": "rows per forward pass", "ge": 1})

    @classmethod
    def from_head_config(cls, head_config: HeadScoreConfig) -> SinkScoreConfig:
        """The sink score's settings for a :class:`HeadScoreConfig` (what ``lmsci-mi heads``
        builds): its ``n_sequences`` rows of text and its batch size; the rest are defaults."""
        return cls(n_texts=head_config.n_sequences, batch_size=head_config.batch_size)


_DEFAULT_SCORES = SinkScoreConfig()


def _check_length(tokens: Tensor, k: int) -> None:
    if tokens.ndim != 2:
        raise UserInputError(f"tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    if tokens.shape[1] <= k:
        raise UserInputError(
            f"rows of {tokens.shape[1]} tokens leave no query after the first k = {k}: give rows "
            f"longer than {k} tokens (seq_len) or a smaller k"
        )


@torch.no_grad()
def _first_token_mass(
    lm: LensModel, tokens: Int[Tensor, "text pos"], k: int, batch_size: int
) -> Float[Tensor, "text layer head"]:
    """Each text's mean attention mass on keys ``< k``, per head, over the queries ``>= k``.

    Queries before ``k`` see only the first ``k`` keys (causal attention), so their mass is 1 by
    construction and says nothing about the head: they are left out.
    """
    _check_length(tokens, k)
    lm.check_tokens(tokens)
    n_layers = lm.cfg.n_layers
    out = torch.zeros(tokens.shape[0], n_layers, lm.cfg.n_heads, dtype=torch.float64)
    rows: dict[str, slice] = {}

    def score(pattern: Tensor, hook: HookPoint) -> None:
        # Scored where it fires, so the patterns of every layer are never all held at once.
        mass = pattern[:, :, k:, :k].float().sum(-1).mean(-1)  # [batch, head]
        out[rows["now"], layer_of(hook.name or "")] = mass.double().cpu()

    names = [hook_name("pattern", layer) for layer in range(n_layers)]
    with lm.hooks.hooks(fwd=[(names, score)], label="sink scores"):
        for start in range(0, tokens.shape[0], batch_size):
            rows["now"] = slice(start, start + batch_size)
            # Stopping after the last block skips the unembedding, which reads no pattern.
            lm.model(tokens[start : start + batch_size].to(lm.device), stop_at_layer=n_layers)
    return out


def _text_rows(lm: LensModel, n_texts: int, seq_len: int, skip: int = 0) -> Tensor:
    """Rows ``skip .. skip + n_texts`` of the offline prose under the model's sink policy."""
    per_row = seq_len - 1 if lm.sink_token_id is not None else seq_len
    return text_chunks(lm, (skip + n_texts) * per_row, seq_len)[skip : skip + n_texts]


def _scores_result(lm: LensModel, values: Tensor, params: dict, source: str) -> HeadScores:
    return HeadScores(
        values=values.float(),
        axes=("layer", "head"),
        labels=head_axis_labels(lm.cfg.n_layers, lm.cfg.n_heads),
        meta=lm.meta(data_source=source, params=params),
        head_kind="sink",
    )


@HEAD_SCORES.register("sink", SinkScoreConfig, "attention-sink score: mean attention on the first k tokens")
def sink_scores(
    lm: LensModel,
    tokens: Int[Tensor, "batch pos"] | None = None,
    config: SinkScoreConfig | HeadScoreConfig = _DEFAULT_SCORES,
) -> HeadScores:
    """Sink score of every head: its mean attention mass on the first ``config.k`` tokens.

    Averaged over the queries at positions ``>= k`` (earlier queries can see only the first
    tokens) and over the rows. Without ``tokens``, scores ``config.n_texts`` rows of the offline
    prose under the model's own sink policy: position 0 is the sink token, or the first word of
    a model loaded with ``sink=None`` (``meta.sink`` says which). A :class:`HeadScoreConfig`
    (what the registry's other kinds take) is read with
    :meth:`SinkScoreConfig.from_head_config`. On Gemma 3's sliding-window layers a query further
    than the window from the first tokens cannot attend them: keep rows within the window (the
    default 64 tokens is). Reads the model only.

    >>> from lmsci_mi import load_model
    >>> scores = sink_scores(load_model("toy-2l"), config=SinkScoreConfig(n_texts=2, seq_len=16))
    >>> scores.head_kind, scores.values.shape
    ('sink', torch.Size([2, 4]))
    """
    if isinstance(config, HeadScoreConfig):
        config = SinkScoreConfig.from_head_config(config)
    source = "user tokens"
    if tokens is None:
        tokens = _text_rows(lm, config.n_texts, config.seq_len)
        source = f"{STDLIB_TEXT_SOURCE}, rows 0..{config.n_texts - 1} of {config.seq_len} tokens"
    mass = _first_token_mass(lm, tokens, config.k, config.batch_size)
    params = {**config.params(), "n_texts_scored": int(tokens.shape[0]), "seq_len": int(tokens.shape[1])}
    return _scores_result(lm, mass.mean(0), params, source)


# --------------------------------------------------------------------------- with and without the sink


@result_type
class SinkHeads(Result):
    """Sink scores with and without the prepended sink token, on the same text and weights.

    ``values`` is ``[sink, layer, head]`` with ``sink`` = (``"with sink"``, ``"without sink"``):
    the mean attention mass on the first ``k`` positions. With the sink those are the sink token
    and the text's first ``k - 1`` tokens; without it, the text's first ``k`` tokens.

    Attributes:
        difference: ``[layer, head]``, with minus without.
        standard_error: ``[sink, layer, head]``, over texts.
        difference_standard_error: ``[layer, head]``, of the paired per-text differences.
        k: the first tokens scored.
        n_texts: rows of text.
    """

    difference: Tensor
    standard_error: Tensor
    difference_standard_error: Tensor
    k: int
    n_texts: int

    def top(self, n: int = 5, *, sink: bool = True) -> tuple[tuple[Head, float], ...]:
        """The ``n`` heads with the highest score, with (default) or without the sink token."""
        return top_heads(self.values[0 if sink else 1], n)

    def heads_above(self, threshold: float, *, sink: bool = True) -> tuple[Head, ...]:
        """Every head whose score exceeds ``threshold``, best first."""
        return tuple(h for h, s in self.top(self.values[0].numel(), sink=sink) if s > threshold)

    def summary(self, rows: int = 10) -> str:
        """The top heads with the sink, each beside its score without it."""
        lines = [f"mass on the first {self.k} token(s), {self.n_texts} texts, {self.meta.model} "
                 f"(sink {self.meta.sink!r}): head, with sink, without sink, difference ± s.e."]
        for head, score in self.top(rows):
            diff = float(self.difference[head.layer, head.head])
            se = float(self.difference_standard_error[head.layer, head.head])
            lines.append(f"{head.label:>8}  {score:.3f}  {float(self.values[1, head.layer, head.head]):.3f}"
                         f"  {diff:+.3f} ± {se:.3f}")
        return "\n".join(lines)


@torch.no_grad()
def sink_heads(lm: LensModel, config: SinkScoreConfig = _DEFAULT_SCORES) -> SinkHeads:
    """Sink scores of every head with and without the prepended sink token, one model.

    The rows with the sink are the offline prose under the sink policy; the rows without it are
    the same rows with the sink column removed, so the text and the weights are the same and no
    second load is needed (a model's sink policy only decides how text is tokenised). Queries at
    positions ``< k`` are left out in both (they see only the first tokens).

    Raises:
        UserInputError: the model puts no sink token in front (loaded with ``sink=None``): load
            it with its default sink; the scores without it come from the same rows.

    >>> from lmsci_mi import load_model
    >>> heads = sink_heads(load_model("toy-2l"), SinkScoreConfig(n_texts=2, seq_len=16))
    >>> heads.values.shape, heads.labels[0]
    (torch.Size([2, 2, 4]), ('with sink', 'without sink'))
    """
    if lm.sink_token_id is None:
        raise UserInputError(
            f"{lm.name} was loaded without a sink token (sink=None), so there is no 'with sink' "
            "condition: load it with its default sink (load_model(name)); the scores without the "
            "sink are computed from the same rows with the sink removed"
        )
    rows = _text_rows(lm, config.n_texts, config.seq_len)
    with_sink = _first_token_mass(lm, rows, config.k, config.batch_size)
    without = _first_token_mass(lm, rows[:, 1:], config.k, config.batch_size)
    per_text = torch.stack([with_sink, without])  # [sink, text, layer, head]
    source = f"{STDLIB_TEXT_SOURCE}, rows 0..{config.n_texts - 1} of {config.seq_len} tokens"
    n_layers, n_heads = lm.cfg.n_layers, lm.cfg.n_heads
    return SinkHeads(
        values=per_text.mean(1).float(),
        axes=("sink", "layer", "head"),
        labels=(("with sink", "without sink"), *head_axis_labels(n_layers, n_heads)),
        meta=lm.meta(data_source=source, params={
            **config.params(), "without_sink": "the same rows with the sink column removed"}),
        difference=(with_sink - without).mean(0).float(),
        standard_error=standard_error(per_text, axis=1).float(),
        difference_standard_error=standard_error(with_sink - without, axis=0).float(),
        k=config.k,
        n_texts=int(rows.shape[0]),
    )


# --------------------------------------------------------------------------- masking the first tokens


def _heads_by_layer(lm: LensModel, heads: Sequence[Head | str | tuple[int, int]] | None) -> dict[int, list[int]]:
    """``{layer: [head, ...]}`` of ``heads`` (every head when None), checked against the model."""
    if heads is None:
        return {layer: list(range(lm.cfg.n_heads)) for layer in range(lm.cfg.n_layers)}
    chosen = [Head.parse(h) for h in heads]
    if not chosen:
        raise UserInputError("no heads given: pass heads such as ['L0.H1'], or None for every head")
    by_layer: dict[int, list[int]] = {}
    for head in chosen:
        if not (0 <= head.layer < lm.cfg.n_layers and 0 <= head.head < lm.cfg.n_heads):
            raise UserInputError(
                f"head {head} does not exist: {lm.name} has layers 0..{lm.cfg.n_layers - 1} and "
                f"heads 0..{lm.cfg.n_heads - 1} per layer"
            )
        by_layer.setdefault(head.layer, []).append(head.head)
    return by_layer


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UserInputError(f"k (the first tokens masked) must be an integer >= 1, not {k!r}")
    return k


@contextmanager
def mask_first_tokens(
    lm: LensModel, heads: Sequence[Head | str | tuple[int, int]] | None = None, *, k: int = 1
) -> Iterator[None]:
    """Inside the block, ``heads`` (None: every head) cannot attend to the first ``k`` positions.

    Their attention scores (``hook_attn_scores``, after the causal mask and any soft cap) are set
    to −inf at keys ``< k`` for queries at positions ``>= k``, before the softmax, so the
    attention is redistributed over the other keys. Queries before ``k`` see nothing but the
    first tokens, so masking them would leave no key at all (a NaN row): they keep their
    attention. Positions are absolute, also during cached generation (the query axis then holds
    the newest positions only). Hooks go through the registry and are removed on exit, also on
    error; the weights are never touched.

    Raises:
        UserInputError: an unknown head, no heads, or ``k < 1``.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> with mask_first_tokens(lm, ["L1.H0"]), lm.hooks.capture("blocks.1.attn.hook_pattern") as cap:
    ...     _ = lm(lm.to_tokens("The cat sat"))
    >>> cap["blocks.1.attn.hook_pattern"][0, 0, 1:, 0].tolist(), len(lm.hooks.active())
    ([0.0, 0.0, 0.0], 0)
    """
    _check_k(k)
    by_layer = _heads_by_layer(lm, heads)

    def mask(scores: Tensor, hook: HookPoint) -> Tensor:
        n_query, n_key = scores.shape[-2:]
        # Under a KV cache the queries are the last n_query of the n_key positions.
        query = torch.arange(n_key - n_query, n_key, device=scores.device)
        block = (query[:, None] >= k) & (torch.arange(n_key, device=scores.device)[None] < k)
        chosen = torch.zeros(scores.shape[1], dtype=torch.bool, device=scores.device)
        layer = layer_of(hook.name or "")
        assert layer is not None  # the hooks are attn_scores hooks of blocks
        chosen[by_layer[layer]] = True
        return scores.masked_fill(chosen[:, None, None] & block[None], float("-inf"))

    names = [hook_name("attn_scores", layer) for layer in sorted(by_layer)]
    with lm.hooks.hooks(fwd=[(names, mask)], label=f"mask attention to the first {k} token(s)"):
        yield


# --------------------------------------------------------------------------- the cost of masking


@config
class FirstTokenMaskConfig(Config):
    """Settings of :func:`first_token_mask_effect`: the mask, the held-out text, the controls.

    The NLL is measured on rows ``skip_texts .. skip_texts + n_texts`` of the offline prose, after
    the rows :func:`sink_heads` scores with its defaults, so heads picked by their score are
    measured on text they were not picked on.
    """

    k: int = _k_field("first tokens masked")
    n_texts: int = dataclasses.field(default=16, metadata={"help": "held-out rows of text", "ge": 2})
    seq_len: int = dataclasses.field(
        default=64, metadata={"help": "tokens per row, the sink included", "ge": 3}
    )
    skip_texts: int = dataclasses.field(
        default=16, metadata={"help": "rows skipped first (the rows the sink scores read)", "ge": 0}
    )
    n_random_draws: int = dataclasses.field(
        default=5, metadata={"help": "random sets of as many other heads (the control)", "ge": 1}
    )
    every_head: bool = dataclasses.field(
        default=True, metadata={"help": "also mask every head of the model at once"}
    )
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of the draws and the bootstrap"})
    n_resamples: int = dataclasses.field(
        default=1000, metadata={"help": "bootstrap resamples of the texts", "ge": 1}
    )
    batch_size: int = dataclasses.field(default=8, metadata={"help": "rows per forward pass", "ge": 1})


_DEFAULT_MASK = FirstTokenMaskConfig()


@result_type
class FirstTokenMaskEffect(Result):
    """The held-out NLL cost of masking attention to the first ``k`` tokens.

    ``values`` is ``[head]``: the mean NLL change (nats per token) with each head masked alone.
    Every interval is a percentile bootstrap over texts; changes are paired with the clean run.

    Attributes:
        heads: the heads masked (alone, then together).
        k: the first tokens masked.
        clean: the clean NLL.
        each_head: per head, its NLL change.
        together: the change with every head of ``heads`` masked at once.
        random: the change with as many random other heads masked (per text, the mean over the
            draws).
        together_minus_random: ``together`` minus ``random``, paired by text.
        every_head: the change with every head of the model masked (None when not measured).
        random_heads: the heads of each random draw.
        nll: ``[condition, text]`` per-text NLL; ``conditions`` names the rows.
        conditions: ``"clean"``, each head's label, ``"together"``, ``"random 0"``…, ``"every head"``.
    """

    heads: tuple[Head, ...]
    k: int
    clean: Interval
    each_head: tuple[Interval, ...]
    together: Interval
    random: Interval
    together_minus_random: Interval
    every_head: Interval | None
    random_heads: tuple[tuple[Head, ...], ...]
    nll: Tensor
    conditions: tuple[str, ...]

    def summary(self, rows: int = 10) -> str:
        """The clean NLL, the change per head (largest first), together, random and every head."""
        n = self.clean.n
        lines = [f"masking attention to the first {self.k} token(s) on {self.meta.model} "
                 f"(sink {self.meta.sink!r}), {n} held-out texts; NLL change in nats per token [95% CI]",
                 f"{'clean NLL':>24}  {self.clean}"]
        order = sorted(range(len(self.heads)), key=lambda i: -self.each_head[i].estimate)
        lines += [f"{self.heads[i].label:>24}  {self.each_head[i]}" for i in order[:rows]]
        lines.append(f"{f'{len(self.heads)} heads together':>24}  {self.together}")
        lines.append(f"{f'{len(self.heads)} random heads':>24}  {self.random}")
        lines.append(f"{'together - random':>24}  {self.together_minus_random}")
        if self.every_head is not None:
            lines.append(f"{'every head':>24}  {self.every_head}")
        return "\n".join(lines)


@torch.no_grad()
def _nll_per_text(lm: LensModel, rows: Tensor, first: int, batch_size: int) -> Float[Tensor, " text"]:
    """Each row's mean NLL of the tokens predicted from positions ``>= first`` (the positions
    a mask of the first ``first`` tokens changes), logits through :func:`lmsci_mi.readout.logits`."""
    out = []
    for chunk in rows.split(batch_size):
        chunk = chunk.to(lm.device)
        resid = lm.model(chunk, stop_at_layer=lm.cfg.n_layers)
        logits = readout.logits(lm, resid[:, first:-1], space="resid", norm="live")
        nll = -logits.float().log_softmax(-1).gather(-1, chunk[:, first + 1 :, None])[..., 0]
        out.append(nll.mean(-1).double().cpu())
    return torch.cat(out)


def _random_heads(lm: LensModel, n: int, banned: set[Head], config: FirstTokenMaskConfig) -> list[tuple[Head, ...]]:
    """``config.n_random_draws`` seeded sets of ``n`` heads outside ``banned``."""
    pool = [head for head in all_heads(lm) if head not in banned]
    if len(pool) < n:
        raise UserInputError(
            f"{n} heads chosen leave {len(pool)} other heads, too few for a random control of "
            f"{n}: choose at most {len(all_heads(lm)) // 2} heads"
        )
    generator = torch.Generator().manual_seed(config.seed)
    return [tuple(sorted(pool[int(i)] for i in torch.randperm(len(pool), generator=generator)[:n]))
            for _ in range(config.n_random_draws)]


def first_token_mask_effect(
    lm: LensModel,
    heads: Sequence[Head | str | tuple[int, int]],
    config: FirstTokenMaskConfig = _DEFAULT_MASK,
) -> FirstTokenMaskEffect:
    """Held-out NLL when ``heads`` cannot attend to the first ``k`` tokens: each head alone, all
    of them together against as many random other heads, and every head of the model.

    The mask is :func:`mask_first_tokens`; the NLL counts the tokens predicted from positions
    ``>= k`` (the positions the mask changes) on held-out rows of the offline prose
    (``config.skip_texts`` onwards). Changes are paired with the clean run text by text, with
    percentile bootstrap intervals over texts. Reads the model only (every hook is removed).

    Raises:
        UserInputError: no or unknown heads, or too many for a random control of the same count.

    >>> from lmsci_mi import load_model
    >>> cfg = FirstTokenMaskConfig(n_texts=2, seq_len=12, skip_texts=0, n_random_draws=1,
    ...                            every_head=False, n_resamples=10)
    >>> effect = first_token_mask_effect(load_model("toy-2l"), ["L0.H1"], cfg)
    >>> effect.values.shape, effect.conditions
    (torch.Size([1]), ('clean', 'L0.H1', 'together', 'random 0'))
    """
    _heads_by_layer(lm, heads)  # checks them before any forward pass
    chosen = tuple(dict.fromkeys(Head.parse(h) for h in heads))
    draws = _random_heads(lm, len(chosen), set(chosen), config)
    if config.seq_len <= config.k + 1:
        raise UserInputError(
            f"rows of {config.seq_len} tokens predict no token from a position >= k = {config.k}: "
            f"give seq_len > k + 1"
        )
    rows = _text_rows(lm, config.n_texts, config.seq_len, config.skip_texts)

    def nll(masked: Sequence[Head] | None) -> Tensor:
        with mask_first_tokens(lm, masked, k=config.k):
            return _nll_per_text(lm, rows, config.k, config.batch_size)

    conditions: dict[str, Tensor] = {"clean": _nll_per_text(lm, rows, config.k, config.batch_size)}
    conditions.update({head.label: nll([head]) for head in chosen})
    conditions["together"] = nll(chosen)
    conditions.update({f"random {i}": nll(draw) for i, draw in enumerate(draws)})
    if config.every_head:
        conditions["every head"] = nll(None)
    return _mask_result(lm, chosen, draws, conditions, config)


def _mask_result(
    lm: LensModel,
    heads: tuple[Head, ...],
    draws: list[tuple[Head, ...]],
    conditions: dict[str, Tensor],
    config: FirstTokenMaskConfig,
) -> FirstTokenMaskEffect:
    clean = conditions["clean"]
    boot = {"seed": config.seed, "n_resamples": config.n_resamples}

    def change(values: Tensor, reference: Tensor = clean) -> Interval:
        return paired_bootstrap_interval(values, reference, **boot)

    random = torch.stack([conditions[f"random {i}"] for i in range(len(draws))]).mean(0)
    each = tuple(change(conditions[head.label]) for head in heads)
    last, n_rows = config.skip_texts + config.n_texts - 1, config.n_texts
    source = f"{STDLIB_TEXT_SOURCE}, held-out rows {config.skip_texts}..{last} of {config.seq_len} tokens"
    return FirstTokenMaskEffect(
        values=torch.tensor([i.estimate for i in each]),
        axes=("head",),
        labels=(tuple(head.label for head in heads),),
        meta=lm.meta(seed=config.seed, data_source=source, params={
            **config.params(), "nll": f"mean over the tokens predicted from positions >= k, per text ({n_rows})"}),
        heads=heads,
        k=config.k,
        clean=bootstrap_interval(clean, **boot),
        each_head=each,
        together=change(conditions["together"]),
        random=change(random),
        together_minus_random=change(conditions["together"], random),
        every_head=change(conditions["every head"]) if "every head" in conditions else None,
        random_heads=tuple(draws),
        nll=torch.stack(list(conditions.values())).float(),
        conditions=tuple(conditions),
    )
