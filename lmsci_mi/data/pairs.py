"""Clean/corrupted prompt pairs: the one input of patching, attribution, path patching, edge scores,
edge patching, faithfulness curves and their cluster shards.

:class:`PromptPairs` holds the texts, each pair's answer and wrong token ids and the positions the
metric reads; :meth:`PromptPairs.tokenise` gives the :class:`TokenisedPairs` view (token ids,
lengths, padding side, answer positions in padded coordinates). The clean/corrupted design is
activation patching's (Vig et al. 2020; Wang et al. 2022; Heimersheim & Nanda 2024).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from lmsci_mi.errors import UserInputError
from lmsci_mi.model import PaddedBatch

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = [
    "PaddingSide",
    "PairsArg",
    "PromptPairs",
    "TokenisedPairs",
    "accepts_pairs",
    "as_pairs",
]

PaddingSide = Literal["right", "left"]
"""Where padding goes when a batch's prompts differ in token length. lmsci-mi's analyses run
right-padded batches (causal attention never lets a real token see the padding after it, and
rotary positions stay those of the unpadded row); left padding is for callers that pass a mask."""

TextsArg = str | Sequence[str]
TokensArg = TextsArg | PaddedBatch | Int[Tensor, "pair pos"]
PositionsArg = int | Sequence[int] | Tensor


def _texts(value: Any, what: str) -> tuple[str, ...]:
    texts = (value,) if isinstance(value, str) else value
    if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
        shown = type(texts).__name__ if not isinstance(texts, (list, tuple)) else "a mixed list"
        raise UserInputError(
            f"{what} prompts are a string or a list of strings, not {shown}; for token ids use "
            "TokenisedPairs.from_tokens(clean, corrupted)"
        )
    return tuple(texts)


def _per_pair(value: PositionsArg | None, n: int, what: str, fix: str) -> tuple[int, ...] | None:
    """``value`` as one int per pair (a single int is every pair's); None stays None."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        value = value.reshape(-1).tolist()
    values = (int(value),) * n if isinstance(value, int) else tuple(int(v) for v in value)
    if len(values) != n:
        raise UserInputError(f"{len(values)} {what} for {n} prompt pairs: {fix}")
    return values


@dataclass(frozen=True)
class PromptPairs:
    """Clean and corrupted prompt texts, one corrupted prompt per clean one.

    Frozen; the constructor takes one prompt (a string) or sequences, and a single answer, wrong
    token or answer position for every pair, and stores tuples.

    Attributes:
        clean, corrupted: the prompts, pair by pair.
        answers, wrongs: per pair, the token id the clean prompt should predict and the one it
            competes with (IOI: the indirect object and the subject), or None. The logit
            difference ``LogitDiff.of_pairs(pairs)`` reads them, and is the default metric of
            every analysis that takes pairs.
        source: where the pairs come from, recorded in each result's ``meta.data_source``.
        answer_positions: per pair, the token whose logits the metric reads, counted in the
            prompt's own tokens (negative from its end); None for each prompt's last token.

    Raises:
        UserInputError: no pairs, different numbers of clean and corrupted prompts, or answers,
            wrongs or answer positions that are not one per pair.

    >>> pairs = PromptPairs(["When Mary and John went, John gave it to"],
    ...                     ["When Mary and John went, Mary gave it to"], answers=5, wrongs=6)
    >>> len(pairs), pairs.answers
    (1, (5,))
    """

    clean: tuple[str, ...]
    corrupted: tuple[str, ...]
    answers: tuple[int, ...] | None = None
    wrongs: tuple[int, ...] | None = None
    source: str = "user prompts"
    answer_positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        clean, corrupted = _texts(self.clean, "clean"), _texts(self.corrupted, "corrupted")
        if not clean and not corrupted:
            raise UserInputError("the prompt set is empty: give at least one clean/corrupted pair")
        if len(clean) != len(corrupted):
            raise UserInputError(
                f"{len(clean)} clean prompts but {len(corrupted)} corrupted prompts: "
                "give one corrupted prompt per clean prompt"
            )
        n = len(clean)
        fix = "give one per pair (or one int for all)"
        answers = _per_pair(self.answers, n, "answer ids", fix)
        wrongs = _per_pair(self.wrongs, n, "wrong-token ids", fix)
        if wrongs is not None and answers is None:
            raise UserInputError("wrongs were given without answers: give answers=... too")
        positions = _per_pair(self.answer_positions, n, "answer positions", fix)
        for name, value in (("clean", clean), ("corrupted", corrupted), ("answers", answers),
                            ("wrongs", wrongs), ("answer_positions", positions)):  # fmt: skip
            object.__setattr__(self, name, value)

    def __len__(self) -> int:
        return len(self.clean)

    @property
    def prompts(self) -> tuple[str, ...]:
        """The clean prompts (what a result's ``meta.prompts`` records)."""
        return self.clean

    def __getitem__(self, index: int | slice | Sequence[int]) -> PromptPairs:
        """The pairs ``index`` (an int, a slice or a list of ints) as a new :class:`PromptPairs`
        with their own answers, wrongs and answer positions (a shard, a bootstrap resample)."""
        if isinstance(index, int):
            rows: list[int] = [range(len(self))[index]]
        elif isinstance(index, slice):
            rows = list(range(len(self)))[index]
        else:
            rows = [int(i) for i in index]

        def pick(values: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
            return None if values is None else tuple(values[i] for i in rows)

        return replace(self, clean=pick(self.clean), corrupted=pick(self.corrupted),  # type: ignore[arg-type]
                       answers=pick(self.answers), wrongs=pick(self.wrongs),
                       answer_positions=pick(self.answer_positions))  # fmt: skip

    @classmethod
    def concat(cls, parts: Sequence[PromptPairs]) -> PromptPairs:
        """The pairs of ``parts`` in order, as one set (the first part's source).

        Raises:
            UserInputError: no parts, or parts of which only some carry answers, wrongs or
                answer positions.
        """
        if not parts:
            raise UserInputError("nothing to concatenate: give at least one PromptPairs")

        def joined(name: str) -> tuple[Any, ...] | None:
            values = [getattr(p, name) for p in parts]
            if all(v is None for v in values):
                return None
            if any(v is None for v in values):
                raise UserInputError(f"only some of the pair sets carry {name}: give all or none")
            return tuple(x for v in values for x in v)

        return cls(joined("clean") or (), joined("corrupted") or (), joined("answers"),
                   joined("wrongs"), parts[0].source, joined("answer_positions"))  # fmt: skip

    def tokenise(self, lm: LensModel, padding_side: PaddingSide = "right") -> TokenisedPairs:
        """Token ids of both sides under ``lm``'s policy (sink first), each side padded to its
        own longest prompt on ``padding_side`` (right: each row's last token repeated; left: its
        first), with the answer positions in padded coordinates. Runs no model.

        >>> from lmsci_mi import load_model
        >>> lm = load_model("toy-2l")
        >>> tok = PromptPairs(["The cat sat", "A dog"], ["The dog sat", "A cat"]).tokenise(lm)
        >>> tok.clean_lengths.tolist(), tok.answer_positions.tolist(), tok.padding_side
        ([4, 3], [3, 2], 'right')
        """
        clean = _pad([lm.encode(t) for t in self.clean], padding_side, lm.device)
        corrupted = _pad([lm.encode(t) for t in self.corrupted], padding_side, lm.device)
        return TokenisedPairs.from_tokens(clean, corrupted, answer_positions=self.answer_positions,
                                          padding_side=padding_side, pairs=self)  # fmt: skip

    def metric(self) -> Any:
        """Removed: the metric is built where the metrics live, ``LogitDiff.of_pairs(pairs)``
        (:mod:`lmsci_mi.circuits.metrics`). Data importing the metrics made an import circle."""
        raise AttributeError(
            "TextPairs.metric() was removed: use lmsci_mi.circuits.metrics.LogitDiff.of_pairs(pairs)"
        )


def _pad(rows: list[list[int]], side: PaddingSide, device: torch.device | str) -> PaddedBatch:
    """Pad token id lists to the longest: right with each row's last token (as
    :meth:`LensModel.pad_batch`), left with its first."""
    if side not in ("right", "left"):
        raise UserInputError(f"padding_side must be 'right' or 'left', not {side!r}")
    width = max(len(r) for r in rows)
    if side == "right":
        padded = [r + r[-1:] * (width - len(r)) for r in rows]
    else:
        padded = [r[:1] * (width - len(r)) + r for r in rows]
    lengths = torch.tensor([len(r) for r in rows], device=device)
    tokens = torch.tensor(padded, dtype=torch.long, device=device)
    return PaddedBatch(tokens, lengths, _mask(lengths, width, side))


def _mask(lengths: Tensor, width: int, side: PaddingSide) -> Bool[Tensor, "pair pos"]:
    pos = torch.arange(width, device=lengths.device)[None]
    return pos < lengths[:, None] if side == "right" else pos >= (width - lengths)[:, None]


def _resolve(given: tuple[int, ...] | None, lengths: Tensor, width: int, side: PaddingSide) -> Tensor:
    """Answer positions counted in each prompt's own tokens, as padded positions (checked)."""
    if given is None:
        pos = torch.full_like(lengths, -1)
    else:
        pos = torch.tensor(given, dtype=torch.long, device=lengths.device)
    own = torch.where(pos < 0, lengths + pos, pos)
    outside = ((own < 0) | (own >= lengths)).nonzero().flatten().tolist()
    if outside:
        raise UserInputError(
            f"answer positions {pos[outside].tolist()} fall outside prompts "
            f"{outside} (lengths {lengths[outside].tolist()})"
        )
    return (own if side == "right" else own + (width - lengths)).long()


@dataclass(frozen=True)
class TokenisedPairs:
    """Prompt pairs as token ids: each side padded on ``padding_side`` to its longest prompt,
    with every prompt's length and the answer positions in padded coordinates.

    Build it with :meth:`PromptPairs.tokenise` (texts) or :meth:`from_tokens` (token ids).

    Attributes:
        clean, corrupted: token ids ``[pair, pos]`` (the two widths differ when the pairs'
            prompts do).
        clean_lengths, corrupted_lengths: each prompt's real tokens.
        answer_positions, corrupted_answer_positions: per pair, the padded position whose
            logits the metric reads in the clean and the corrupted prompt (the same for pairs of
            equal lengths).
        padding_side: ``"right"`` or ``"left"``.
        pairs: the texts they came from (None when built from token ids).
    """

    clean: Int[Tensor, "pair clean_pos"]
    corrupted: Int[Tensor, "pair corrupted_pos"]
    clean_lengths: Int[Tensor, " pair"]
    corrupted_lengths: Int[Tensor, " pair"]
    answer_positions: Int[Tensor, " pair"]
    corrupted_answer_positions: Int[Tensor, " pair"]
    padding_side: PaddingSide = "right"
    pairs: PromptPairs | None = None

    @classmethod
    def from_tokens(
        cls,
        clean: Int[Tensor, "pair pos"] | PaddedBatch,
        corrupted: Int[Tensor, "pair pos"] | PaddedBatch,
        *,
        answer_positions: PositionsArg | None = None,
        padding_side: PaddingSide = "right",
        pairs: PromptPairs | None = None,
    ) -> TokenisedPairs:
        """Token ids as pairs: ``[pair, pos]`` tensors (every row its full width) or
        :class:`~lmsci_mi.model.PaddedBatch` es (their lengths), padded on ``padding_side``.

        Raises:
            UserInputError: no pairs, different numbers of clean and corrupted rows, or answer
                positions that are not one per pair or fall outside a prompt.

        >>> tok = TokenisedPairs.from_tokens(torch.tensor([[0, 5, 6]]), torch.tensor([[0, 6, 6]]))
        >>> tok.answer_positions.tolist(), len(tok)
        ([2], 1)
        """
        (c_tok, c_len), (k_tok, k_len) = _ids(clean), _ids(corrupted)
        if c_tok.shape[0] == 0 or k_tok.shape[0] == 0:
            raise UserInputError("the prompt set is empty: give at least one clean/corrupted pair")
        if c_tok.shape[0] != k_tok.shape[0]:
            raise UserInputError(
                f"{c_tok.shape[0]} clean prompts but {k_tok.shape[0]} corrupted prompts: "
                "give one corrupted prompt per clean prompt"
            )
        given = _per_pair(answer_positions, c_tok.shape[0], "answer positions",
                          "give one, or one per pair")  # fmt: skip
        if padding_side not in ("right", "left"):
            raise UserInputError(f"padding_side must be 'right' or 'left', not {padding_side!r}")
        return cls(c_tok, k_tok, c_len, k_len, _resolve(given, c_len, c_tok.shape[1], padding_side),
                   _resolve(given, k_len, k_tok.shape[1], padding_side), padding_side, pairs)  # fmt: skip

    def __len__(self) -> int:
        return self.clean.shape[0]

    @property
    def prompts(self) -> tuple[str, ...]:
        """The clean prompts' texts (empty when built from token ids)."""
        return self.pairs.clean if self.pairs is not None else ()

    @property
    def answers(self) -> tuple[int, ...] | None:
        return self.pairs.answers if self.pairs is not None else None

    @property
    def wrongs(self) -> tuple[int, ...] | None:
        return self.pairs.wrongs if self.pairs is not None else None

    @property
    def source(self) -> str:
        return self.pairs.source if self.pairs is not None else "user token ids"

    @property
    def padded(self) -> bool:
        """Whether any prompt is shorter than its side's width (so some positions are padding)."""
        return bool((self.clean_lengths < self.clean.shape[1]).any()
                    or (self.corrupted_lengths < self.corrupted.shape[1]).any())  # fmt: skip

    @property
    def clean_mask(self) -> Bool[Tensor, "pair pos"]:
        """True at the clean prompts' real tokens."""
        return _mask(self.clean_lengths, self.clean.shape[1], self.padding_side)

    @property
    def corrupted_mask(self) -> Bool[Tensor, "pair pos"]:
        """True at the corrupted prompts' real tokens."""
        return _mask(self.corrupted_lengths, self.corrupted.shape[1], self.padding_side)

    def tokenise(self, lm: LensModel, padding_side: PaddingSide = "right") -> TokenisedPairs:
        """These token ids on ``lm``'s device (as :meth:`PromptPairs.tokenise` for texts).

        Raises:
            UserInputError: padded on the other side than ``padding_side``.
        """
        if self.padding_side != padding_side and self.padded:
            raise UserInputError(
                f"these pairs are padded on the {self.padding_side}, not the {padding_side}: "
                f"tokenise them with padding_side={padding_side!r}"
            )
        fields = ("clean", "corrupted", "clean_lengths", "corrupted_lengths", "answer_positions",
                  "corrupted_answer_positions")  # fmt: skip
        return replace(self, padding_side=padding_side,
                       **{f: getattr(self, f).to(lm.device) for f in fields})  # fmt: skip

    def with_answer_positions(self, given: PositionsArg | None) -> TokenisedPairs:
        """The same pairs reading the metric at ``given`` (one or one per pair, counted in each
        prompt's own tokens, negative from its end); None keeps the current positions."""
        if given is None:
            return self
        positions = _per_pair(given, len(self), "answer positions", "give one, or one per pair")
        side = self.padding_side
        return replace(self, answer_positions=_resolve(positions, self.clean_lengths, self.clean.shape[1], side),
                       corrupted_answer_positions=_resolve(positions, self.corrupted_lengths,
                                                           self.corrupted.shape[1], side))  # fmt: skip

    def batches(self, size: int) -> Iterator[tuple[Tensor, Tensor, Tensor, Tensor]]:
        """``(index, clean, corrupted, answer_positions)`` per batch of ``size`` pairs of equal
        widths, cut after the batch's last answer position (later tokens cannot reach the
        metric)."""
        for start in range(0, len(self), size):
            index = torch.arange(start, min(start + size, len(self)))
            answers = self.answer_positions[index.to(self.answer_positions.device)]
            width = int(answers.max()) + 1
            yield index, self.clean[index, :width], self.corrupted[index, :width], answers


def _ids(tokens: Any) -> tuple[Tensor, Tensor]:
    """Token ids and lengths of one side given as a tensor or a PaddedBatch."""
    if isinstance(tokens, PaddedBatch):
        return tokens.tokens, tokens.lengths.to(tokens.tokens.device)
    if not isinstance(tokens, Tensor):
        raise UserInputError(f"token ids are a [pair, pos] tensor, not {type(tokens).__name__}")
    ids = tokens if tokens.ndim == 2 else tokens[None]
    return ids, torch.full((ids.shape[0],), ids.shape[1], device=ids.device)


PairsArg = PromptPairs | TokenisedPairs
"""What the analyses take: texts (tokenised by the analysis) or token ids."""


def as_pairs(clean: TokensArg, corrupted: TokensArg) -> PairsArg:
    """Loose clean and corrupted prompts (the form before :class:`PromptPairs`) as pairs: texts
    become :class:`PromptPairs`, token tensors and padded batches :class:`TokenisedPairs`.

    >>> as_pairs("The cat", "The dog")
    PromptPairs(clean=('The cat',), corrupted=('The dog',), answers=None, wrongs=None, source='user prompts', answer_positions=None)
    """
    tokens = [isinstance(side, (Tensor, PaddedBatch)) for side in (clean, corrupted)]
    if all(tokens):
        return TokenisedPairs.from_tokens(clean, corrupted)  # type: ignore[arg-type]
    if any(tokens):
        raise UserInputError("give both sides as texts or both as token ids, not one of each")
    return PromptPairs(clean, corrupted)  # type: ignore[arg-type]


F = TypeVar("F", bound=Callable[..., Any])


def accepts_pairs(position: int) -> Callable[[F], F]:
    """Let ``fn(..., pairs, metric, ...)``, whose pairs sit at argument ``position``, also be
    called the deprecated way, ``fn(..., clean, corrupted, metric, ...)`` (positional, or the
    keywords ``clean=`` and ``corrupted=``). The old form warns and is gone in the next release."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = legacy_arguments(fn.__name__, position, args, kwargs)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def legacy_arguments(
    name: str, position: int, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` of a call with the pairs at ``position``, with a deprecated
    ``clean, corrupted`` (positional or keywords) replaced by one pairs object."""
    if "clean" in kwargs or "corrupted" in kwargs:
        if "clean" not in kwargs or "corrupted" not in kwargs:
            raise UserInputError(f"{name}: give pairs=PromptPairs(clean, corrupted)")
        clean, corrupted = kwargs.pop("clean"), kwargs.pop("corrupted")
        args = (*args[:position], clean, corrupted, *args[position:])
    elif len(args) <= position or isinstance(args[position], (PromptPairs, TokenisedPairs)):
        return args, kwargs
    if len(args) < position + 2:
        raise UserInputError(
            f"{name} takes prompt pairs, not {type(args[position]).__name__}: give "
            "PromptPairs(clean, corrupted, answers=..., wrongs=...) (lmsci_mi.data.pairs)"
        )
    warnings.warn(
        f"{name}(..., clean, corrupted, metric, ...) is deprecated: pass "
        f"{name}(..., PromptPairs(clean, corrupted), metric, ...) (lmsci_mi.data.pairs)",
        DeprecationWarning,
        stacklevel=3,
    )
    pairs = as_pairs(args[position], args[position + 1])
    return (*args[:position], pairs, *args[position + 2 :]), kwargs
