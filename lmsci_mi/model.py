"""`LensModel`: a HookedTransformer together with lmsci-mi's tokenisation policy and hook registry.

Tokenisation policy (every analysis tokenises through here):
    Every prompt starts with exactly one attention-sink token, and the prompt's own tokens start
    at position 1. The sink is the tokenizer's BOS (Gemma's ``<bos>``, GPT-2's
    ``<|endoftext|>``), or the model's document separator where the declared BOS is a chat token
    (``<|endoftext|>`` for SmolLM2). Models attend to the first position as a resting place;
    without a sink the first *word* becomes that resting place, and corrupting it (as causal
    tracing does to a subject) breaks every head. With the sink, a subject can never sit at
    position 0. The sink changes results, so it is a choice (``load_model(..., sink=...)``) and
    every result records it in ``meta.sink``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor
from transformer_lens import HookedTransformer

from lmsci_mi import readout
from lmsci_mi.errors import UserInputError
from lmsci_mi.generation import GenerationConfig, generate
from lmsci_mi.hooks import HookRegistry, RunningExclusion, registry_for
from lmsci_mi.positions import Exclude, resolve_exclude
from lmsci_mi.results import Meta, Result, result_type
from lmsci_mi.typecheck import shape_checked

if TYPE_CHECKING:

    from matplotlib.figure import Figure
    from transformer_lens import HookedTransformerConfig

__all__ = [
    "DEFAULT_SINK",
    "LensModel",
    "PaddedBatch",
    "SinkChoice",
    "TokenPredictions",
    "default_sink_token",
    "resolve_sink",
]


class _DefaultSink(enum.Enum):
    DEFAULT = "default"

    def __repr__(self) -> str:
        return "DEFAULT_SINK"


DEFAULT_SINK = _DefaultSink.DEFAULT
"""``sink=DEFAULT_SINK``: the policy's sink for the model (see the module docstring)."""

SinkChoice = str | int | None | _DefaultSink
"""A sink choice: ``DEFAULT_SINK``, a token's text (``"<|endoftext|>"``, ``" the"``), a token id,
or None for no sink at all."""


@dataclass(frozen=True)
class PaddedBatch:
    """Right-padded token ids with each row's true length and a ``[batch, pos]`` mask of real
    tokens."""

    tokens: Int[Tensor, "batch pos"]
    lengths: Int[Tensor, " batch"]
    mask: Bool[Tensor, "batch pos"]


def default_sink_token(tokenizer: Any) -> int | None:
    """The policy's sink for a tokenizer: its BOS id (None when it has none)."""
    if tokenizer is None or tokenizer.bos_token_id is None:
        return None
    return int(tokenizer.bos_token_id)


def resolve_sink(tokenizer: Any, sink: SinkChoice, default: int | None, d_vocab: int) -> int | None:
    """The token id of a sink choice (None: no sink).

    Args:
        tokenizer: the model's tokenizer (None for token-only models: ids only).
        sink: ``DEFAULT_SINK`` (gives ``default``), None, a token id, or a token's text: a
            vocabulary entry (``"<|endoftext|>"``) or text that is exactly one token (``" the"``).
        default: the policy's sink id for this model.
        d_vocab: the vocabulary size, to check ids.

    Raises:
        ValueError: an id outside the vocabulary, or text that is not exactly one token.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> resolve_sink(lm.tokenizer, "<|im_start|>", 0, lm.cfg.d_vocab)
    1
    """
    if sink is DEFAULT_SINK:
        return default
    if sink is None:
        return None
    if isinstance(sink, bool) or not isinstance(sink, int | str):
        raise UserInputError(f"a sink is a token's text, a token id or None, not {sink!r}")
    if isinstance(sink, int):
        if not 0 <= sink < d_vocab:
            raise UserInputError(f"sink token id {sink} is outside the vocabulary (0..{d_vocab - 1})")
        return sink
    if tokenizer is None:
        raise UserInputError(f"this model has no tokenizer: give the sink {sink!r} as a token id")
    vocab_id = tokenizer.convert_tokens_to_ids(sink)
    if vocab_id is not None and tokenizer.convert_ids_to_tokens(vocab_id) == sink:
        return int(vocab_id)
    ids = tokenizer(sink, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise UserInputError(f"sink {sink!r} is {len(ids)} tokens {pieces}, but the sink is one token")
    return int(ids[0])


@result_type
class TokenPredictions(Result):
    """The top-k next tokens after a prompt: ``values`` are probabilities, axis ``("rank",)``."""

    token_ids: Tensor
    log_probs: Tensor

    def summary(self, rows: int = 10) -> str:
        """The prompt, then one line per predicted token: rank, token and probability."""
        prompt = self.meta.prompts[0] if self.meta.prompts else ""
        lines = [f"next token after {prompt!r} ({self.meta.model}):"]
        for rank, (token, p) in enumerate(zip(self.axis_labels(0), self.values.tolist(), strict=True)):
            if rank < rows:
                lines.append(f"{rank:>3}  {token!r:<20} {p:.4f}")
        return "\n".join(lines)

    def default_title(self, **options: object) -> str:
        prompt = self.meta.prompts[0] if self.meta.prompts else ""
        return f"Next token after {prompt[-40:]!r} — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Bars of the probabilities, best first, labelled with the tokens (quoted, so a leading
        space shows)."""
        from lmsci_mi.viz.plots import plot_bars

        fig = plot_bars(
            [repr(t) for t in self.axis_labels(0)],
            self.values.tolist(),
            value_label="probability",
            title=title,
        )
        return fig


class LensModel:
    """A HookedTransformer with one tokenisation policy and one hook registry.

    Attributes:
        model: the underlying ``HookedTransformer`` (use it directly for anything not wrapped).
        name: catalogue name (``"smollm2-135m"``) or path.
        source: where the weights came from.
        tokenizer: the Hugging Face tokenizer, or None for token-only toys.
        sink_token_id: the token put in front of every prompt (position 0), or None for no sink.
        hooks: the model's :class:`~lmsci_mi.hooks.HookRegistry`; every intervention goes
            through it, e.g. ``with lm.hooks.patch(site, clean_act): ...``.
    """

    def __init__(
        self,
        model: HookedTransformer,
        *,
        name: str,
        source: str,
        tokenizer: Any,
        sink_token_id: int | None,
    ) -> None:
        self.model = model
        self.name = name
        self.source = source
        self.tokenizer = tokenizer
        self.sink_token_id = sink_token_id
        # lmsci-mi pads on the right itself (pad_batch). A TransformerLens tokenizer set to pad
        # on the left makes every forward pass given no mask infer one from the pad id, which
        # masks a sink that shares that id, while generation (its own mask) attends it.
        if getattr(model.tokenizer, "padding_side", None) == "left":
            model.tokenizer.padding_side = "right"
        self.hooks: HookRegistry = registry_for(model)
        _store_linear_weights_transposed(model)

    def __repr__(self) -> str:
        cfg = self.cfg
        return (
            f"LensModel({self.name!r}: {cfg.n_layers} layers, d_model {cfg.d_model}, "
            f"{cfg.n_heads} heads, on {self.device})"
        )

    @classmethod
    def wrap(
        cls, model: HookedTransformer, name: str = "custom", *, sink: SinkChoice = DEFAULT_SINK
    ) -> LensModel:
        """Wrap a HookedTransformer you loaded yourself.

        Args:
            model: the model.
            name: recorded in every result's ``meta``.
            sink: the attention sink: by default the tokenizer's BOS; a token's text, a token id,
                or None for none (see :func:`resolve_sink`).
        """
        tokenizer = model.tokenizer
        sink_id = resolve_sink(tokenizer, sink, default_sink_token(tokenizer), model.cfg.d_vocab)
        return cls(model, name=name, source="user model", tokenizer=tokenizer, sink_token_id=sink_id)

    # ------------------------------------------------------------------ basics

    @property
    def cfg(self) -> HookedTransformerConfig:
        return self.model.cfg

    @property
    def device(self) -> torch.device:
        return self.model.W_E.device

    @shape_checked
    def __call__(self, tokens: Int[Tensor, "batch pos"], **kwargs: Any) -> Tensor:
        """Run the model (logits by default); hooks from active interventions apply.

        Raises:
            ValueError: a token id outside the vocabulary (see :meth:`check_tokens`).
        """
        tokens = tokens.to(self.device)
        self.check_tokens(tokens)
        return self.model(tokens, **kwargs)

    def check_tokens(self, tokens: Int[Tensor, "..."]) -> None:
        """Refuse token ids outside ``0..d_vocab-1`` before they reach the embedding.

        On the CPU the embedding's lookup would raise an IndexError; on CUDA it is a device-side
        assert, which leaves the process's CUDA context unusable (every later call fails), so the
        ids are checked here, in Python, first.

        >>> from lmsci_mi import load_model
        >>> load_model("toy-2l").check_tokens(torch.tensor([[0, 10**6]]))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        lmsci_mi.errors.UserInputError: token ids must lie in 0..49151 (this model's vocabulary), got 0..1000000; ...
        """
        if tokens.numel() == 0:
            return
        low, high = (int(v) for v in torch.aminmax(tokens))
        if low < 0 or high >= self.cfg.d_vocab:
            raise UserInputError(
                f"token ids must lie in 0..{self.cfg.d_vocab - 1} (this model's vocabulary), got "
                f"{low}..{high}; tokenise with this model's tokenizer (lm.to_tokens, lm.encode)"
            )

    @property
    def sink(self) -> str | None:
        """The sink token's text (``"<|endoftext|>"``), or None when prompts get no sink."""
        if self.sink_token_id is None:
            return None
        if self.tokenizer is None:
            return f"<token {self.sink_token_id}>"
        return str(self.tokenizer.decode([self.sink_token_id]))

    def meta(self, prompts: Sequence[str] = (), **fields: Any) -> Meta:
        """A :class:`Meta` record naming this model and its sink, for results built on it."""
        return Meta(model=self.name, prompts=tuple(prompts), sink=self.sink, **fields)

    # ------------------------------------------------------------------ tokenisation policy

    def _require_tokenizer(self) -> Any:
        if self.tokenizer is None:
            raise UserInputError(f"{self.name} has no tokenizer: pass token ids instead of text")
        return self.tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of one prompt under the policy: one sink token, then the text's tokens.

        The tokenizer's own special tokens are left out (a tokenizer that adds BOS has it as its
        sink), so the sink is always this model's choice and appears once.
        """
        tokenizer = self._require_tokenizer()
        ids: list[int] = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if self.sink_token_id is not None and (not ids or ids[0] != self.sink_token_id):
            ids = [self.sink_token_id, *ids]
        return ids

    @shape_checked
    def to_tokens(self, prompts: str | Sequence[str]) -> Int[Tensor, "batch pos"]:
        """Tokenise one prompt or a batch of prompts that have the same token length.

        Raises:
            ValueError: prompts of unequal token length. Patching compares positions across
                prompts, so silent padding would shift them; the message lists each length.

        >>> from lmsci_mi import load_model
        >>> lm = load_model("toy-2l")
        >>> lm.to_tokens(["The cat sat", "The dog sat"]).shape
        torch.Size([2, 4])
        """
        batch = [prompts] if isinstance(prompts, str) else list(prompts)
        if not batch:
            raise UserInputError("no prompts given")
        ids = [self.encode(p) for p in batch]
        lengths = {len(i) for i in ids}
        if len(lengths) > 1:
            listing = "; ".join(f"{len(i)} tokens: {p!r}" for p, i in zip(batch, ids, strict=True))
            raise UserInputError(
                "prompts tokenise to different lengths, so their positions do not line up "
                f"({listing}). Use prompts of equal token length (e.g. single-token names), "
                "or align them by named positions."
            )
        return torch.tensor(ids, dtype=torch.long, device=self.device)

    def to_str_tokens(self, prompt: str | Sequence[int] | Tensor) -> list[str]:
        """The tokens of a prompt (policy applied) as strings, sink included."""
        tokenizer = self._require_tokenizer()
        ids = self.encode(prompt) if isinstance(prompt, str) else [int(i) for i in prompt]
        return [tokenizer.decode([i]) for i in ids]

    def token_id(self, text: str) -> int:
        """The id of ``text`` when it is exactly one token (answers like ``" Paris"``).

        Raises:
            ValueError: ``text`` is empty or more than one token; the message shows its split.
        """
        tokenizer = self._require_tokenizer()
        if not text:
            raise UserInputError("empty answer: give the token's text, e.g. ' Paris'")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            pieces = [tokenizer.decode([i]) for i in ids]
            hint = "" if text.startswith(" ") else " (answers after a word usually start with a space)"
            raise UserInputError(
                f"{text!r} is {len(ids)} tokens {pieces} for {self.name}, but one token is "
                f"needed{hint}"
            )
        return int(ids[0])

    def find_subject(self, prompt: str, subject: str) -> range:
        """Token positions (policy applied, so sink = position 0) covering ``subject``.

        Character offsets decide the overlap, so a BPE/SentencePiece token that carries the
        subject's leading space (" Eiffel") counts as part of it.

        Raises:
            ValueError: the subject is not in the prompt (case-sensitive; the message says if it
                would match ignoring case), or is empty.

        >>> from lmsci_mi import load_model
        >>> lm = load_model("toy-2l")
        >>> lm.find_subject("The Eiffel Tower is in", "Eiffel Tower")
        range(2, 5)
        """
        self._require_tokenizer()
        if not subject.strip():
            raise UserInputError("empty subject")
        start = prompt.find(subject)
        if start < 0:
            hint = ""
            if prompt.lower().find(subject.lower()) >= 0:
                hint = " (it matches ignoring case: the match is case-sensitive)"
            raise UserInputError(f"subject {subject!r} is not in the prompt {prompt!r}{hint}")
        span = self.token_span(prompt, start, start + len(subject))
        if span is None:
            raise UserInputError(f"subject {subject!r} covers no token of {prompt!r}")
        return span

    def token_span(self, text: str, start: int, end: int) -> range | None:
        """Token positions of ``encode(text)`` that overlap characters ``start:end`` (or None).

        Character offsets decide, so a token carrying a leading space (" Eiffel") counts.
        """
        tokenizer = self._require_tokenizer()
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        shift = len(self.encode(text)) - len(encoded["input_ids"])  # 1 when the sink was added
        hits = [i + shift for i, (s, e) in enumerate(encoded["offset_mapping"])
                if e > s and s < end and e > start]
        return range(hits[0], hits[-1] + 1) if hits else None

    def continuation_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` as a continuation: no sink, no special tokens (answers, targets).

        Raises:
            ValueError: ``text`` is empty or blank.
        """
        if not text.strip():
            raise UserInputError("empty continuation: give the text, e.g. ' Paris'")
        return list(self._require_tokenizer()(text, add_special_tokens=False)["input_ids"])

    def pad_batch(self, sequences: Sequence[Sequence[int]]) -> PaddedBatch:
        """Right-pad token id lists into one batch, with their lengths and a mask.

        Right padding keeps each row exact: causal attention never lets a real token see the
        padding after it, and rotary positions stay those of the unpadded row (left padding would
        shift them). Padding repeats each row's last token.

        >>> from lmsci_mi import load_model
        >>> batch = load_model("toy-2l").pad_batch([[1, 2, 3], [4]])
        >>> batch.tokens.tolist(), batch.lengths.tolist()
        ([[1, 2, 3], [4, 4, 4]], [3, 1])
        """
        if not sequences or any(len(seq) == 0 for seq in sequences):
            raise UserInputError("pad_batch needs at least one sequence, and no empty sequence")
        width = max(len(seq) for seq in sequences)
        rows = [list(seq) + [seq[-1]] * (width - len(seq)) for seq in sequences]
        lengths = torch.tensor([len(seq) for seq in sequences], device=self.device)
        mask = torch.arange(width, device=self.device)[None] < lengths[:, None]
        return PaddedBatch(torch.tensor(rows, dtype=torch.long, device=self.device), lengths, mask)

    def encode_batch(self, texts: Sequence[str]) -> PaddedBatch:
        """Tokenise prompts of any lengths under the sink policy, right-padded (see pad_batch).

        >>> from lmsci_mi import load_model
        >>> batch = load_model("toy-2l").encode_batch(["The cat sat", "A dog"])
        >>> batch.lengths.tolist(), batch.mask.sum(1).tolist()
        ([4, 3], [4, 3])
        """
        return self.pad_batch([self.encode(text) for text in texts])

    @shape_checked
    def unembed(self, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... vocab"]:
        """Logits from final residual-stream vectors: final norm, unembedding, logit soft cap.

        The model's own modules run (:func:`lmsci_mi.readout.logits` with ``space="resid",
        norm="live"``), so hooks on the final norm fire. Callers pass only the positions they
        read: unembedding every position costs a quarter of SmolLM2's forward FLOPs.
        """
        return readout.logits(self, resid, space="resid", norm="live")

    # ------------------------------------------------------------------ predictions

    @torch.no_grad()
    @torch.no_grad()
    def running_exclusion(self, exclude: Exclude | None = None) -> RunningExclusion:
        """A :class:`~lmsci_mi.hooks.RunningExclusion` for this model: the sink token's
        first-block input and the excluded tokens' embeddings, computed once here."""
        exclude = resolve_exclude(exclude)
        sink = tokens = None
        if exclude.sink and self.sink_token_id is not None:
            site = RunningExclusion.sink_site
            with self.hooks.capture([site]) as captured:
                self.model(torch.tensor([[self.sink_token_id]], device=self.device), stop_at_layer=1)
            sink = captured[site][0, 0]
        if exclude.token_ids:
            # What hook_embed sees, exactly.
            tokens = self.model.embed(torch.tensor([exclude.token_ids], device=self.device))[0]
        return RunningExclusion(exclude, sink_reference=sink, token_references=tokens)

    def top_tokens(self, prompt: str, k: int = 10) -> TokenPredictions:
        """The ``k`` most likely next tokens after ``prompt``. Reads the model only.

        >>> from lmsci_mi import load_model
        >>> load_model("toy-2l").top_tokens("Hello", k=3).values.shape
        torch.Size([3])
        """
        logits: Float[Tensor, "1 pos vocab"] = self(self.to_tokens(prompt))
        log_probs = logits[0, -1].float().log_softmax(-1)
        top = log_probs.topk(k)
        labels = tuple(self.tokenizer.decode([int(i)]) for i in top.indices)
        return TokenPredictions(
            values=top.values.exp().cpu(),
            axes=("rank",),
            labels=(labels,),
            meta=self.meta([prompt]),
            token_ids=top.indices.cpu(),
            log_probs=top.values.cpu(),
        )

    def generate(
        self,
        prompt: str,
        max_new_tokens: int = 20,
        *,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> str:
        """Continue ``prompt``; greedy when ``temperature == 0``. Returns only the new text.

        Interventions active in the registry apply at every step (steer with ``positions=None``
        or a :class:`~lmsci_mi.hooks.PositionScope`: cached generation feeds one new position
        per step, so fixed indices mean nothing there). A shorthand for
        :func:`lmsci_mi.generation.generate`.
        """
        return self.sample([prompt], max_new_tokens, temperature=temperature, seed=seed)[0]

    def sample(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 20,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = 0,
    ) -> list[str]:
        """Continue each prompt (batched, cached generation); returns only the new text of each.

        A shorthand for :func:`lmsci_mi.generation.generate`: each prompt draws from its own
        stream seeded from ``(seed, its index)``, never the global random state;
        ``temperature == 0`` is greedy. Interventions active in the registry apply at every step.
        ROME's fluency samples use ``top_k=5``.
        """
        self._require_tokenizer()
        config = GenerationConfig(
            max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, seed=seed
        )
        return list(generate(self, prompts, config).texts)


_LINEAR_WEIGHTS = ("W_gate", "W_in", "W_out")
_HEAD_INPUT_WEIGHTS = ("W_Q", "W_K", "W_V", "_W_K", "_W_V")


@torch.no_grad()
def _store_linear_weights_transposed(model: HookedTransformer) -> None:
    """Keep weights in the memory order TransformerLens's forward pass reads them in.

    TransformerLens computes ``F.linear(x, W.T.contiguous())`` in the gated MLP and the
    unembedding, and flattens each attention weight (``W_Q`` ``[head, d_model, d_head]`` to
    ``[(head d_head), d_model]``, ``W_O`` to ``[d_model, (head d_head)]``) with a copy, so every
    forward call copied every such weight: on SmolLM2 the MLP and unembedding copies were three
    quarters of a one-token forward pass on this project's 2-core CPU (0.69 s -> 0.17 s), the
    attention copies about a third of what was left. Stored in the order those reshapes
    produce, the reshapes are views and the copies disappear. Values, shapes and results are
    unchanged (the same kernels run on the same numbers); in-place weight edits keep the layout.
    """
    for name, param in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if not param.is_contiguous():
            continue
        if param.ndim == 2 and (leaf == "W_U" or (leaf in _LINEAR_WEIGHTS and model.cfg.gated_mlp)):
            param.data = param.data.T.contiguous().T
        elif param.ndim == 3 and leaf in _HEAD_INPUT_WEIGHTS:
            param.data = param.data.transpose(1, 2).contiguous().transpose(1, 2)
        elif param.ndim == 3 and leaf == "W_O":
            param.data = param.data.permute(2, 0, 1).contiguous().permute(1, 2, 0)
