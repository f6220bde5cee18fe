"""Patching metrics: logit difference, target probability, KL to the clean run, and normalised forms.

A metric maps the logits at the answer position, ``[*config, pair, vocab]``, to one score per
row, ``[*config, pair]``; the trailing ``pair`` axis lines up with the prompt pairs, so each pair
can have its own answer tokens. Normalised metrics put the corrupted run at 0 and the clean run at 1
(Wang et al. 2022, IOI; Heimersheim & Nanda 2024, "How to use and interpret activation patching").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.errors import UserInputError

if TYPE_CHECKING:
    from lmsci_mi.data.pairs import PairsArg

__all__ = [
    "KLToClean",
    "LogitDiff",
    "Metric",
    "Normalised",
    "TargetProb",
    "as_ids",
    "normalised",
    "pair_metric",
]


class Metric(Protocol):
    """Scores next-token logits: ``[*config, pair, vocab] -> [*config, pair]``.

    The logits are those at the answer position (the last token unless said otherwise). A
    metric returns one score per row; patching averages over the pair axis itself.
    """

    def __call__(
        self, logits: Float[Tensor, "*config pair vocab"]
    ) -> Float[Tensor, "*config pair"]: ...


def as_ids(ids: int | Sequence[int] | Tensor) -> Int[Tensor, " pair"]:
    """Token ids as a 1-D long tensor (one per prompt pair; a single id broadcasts)."""
    tensor = torch.as_tensor(ids, dtype=torch.long)
    return tensor.reshape(-1)


def _pick(logits: Tensor, ids: Tensor) -> Tensor:
    ids = ids.to(logits.device)
    if ids.numel() not in (1, logits.shape[-2]):
        raise UserInputError(
            f"{ids.numel()} answer ids for {logits.shape[-2]} prompt pairs: give one id, or one "
            "per pair"
        )
    index = ids.expand(logits.shape[-2]).expand(logits.shape[:-1]).unsqueeze(-1)
    return logits.gather(-1, index).squeeze(-1)


class LogitDiff:
    """``logit(answer) - logit(wrong)`` at the answer position (the IOI metric).

    Args:
        answer: the correct token id(s), one per pair or one for all.
        wrong: the competing token id(s) (e.g. the subject's name in IOI).

    >>> import torch
    >>> LogitDiff(2, 0)(torch.tensor([[0.0, 1.0, 3.0]]))
    tensor([3.])
    """

    def __init__(self, answer: int | Sequence[int] | Tensor, wrong: int | Sequence[int] | Tensor):
        self.answer = as_ids(answer)
        self.wrong = as_ids(wrong)

    @classmethod
    def of_pairs(cls, pairs: PairsArg) -> LogitDiff:
        """Each pair's answer over its own wrong token, for prompt pairs that carry both
        (:class:`~lmsci_mi.data.pairs.PromptPairs`, or their tokenised view: IOI with STR
        corruption, the CLI's prompt files).

        Raises:
            UserInputError: the pairs carry no answer or no wrong token ids.

        >>> from lmsci_mi.data.pairs import PromptPairs
        >>> LogitDiff.of_pairs(PromptPairs(("a", "b"), ("c", "d"), (5, 7), (6, 8), "demo"))
        LogitDiff(answer=[5, 7], wrong=[6, 8])
        """
        if pairs.answers is None or pairs.wrongs is None:
            raise UserInputError(
                "these prompt pairs carry no answer and wrong token ids, so there is no logit "
                "difference to read: build them with PromptPairs(clean, corrupted, answers=..., "
                "wrongs=...), or pass a metric"
            )
        return cls(list(pairs.answers), list(pairs.wrongs))

    def __call__(
        self, logits: Float[Tensor, "*config pair vocab"]
    ) -> Float[Tensor, "*config pair"]:
        return _pick(logits, self.answer) - _pick(logits, self.wrong)

    def __repr__(self) -> str:
        return f"LogitDiff(answer={self.answer.tolist()}, wrong={self.wrong.tolist()})"


class TargetProb:
    """Probability of the target token at the answer position (causal tracing's score).

    >>> import torch
    >>> round(float(TargetProb(1)(torch.zeros(1, 4))[0]), 2)
    0.25
    """

    def __init__(self, target: int | Sequence[int] | Tensor):
        self.target = as_ids(target)

    def __call__(
        self, logits: Float[Tensor, "*config pair vocab"]
    ) -> Float[Tensor, "*config pair"]:
        return _pick(logits.float().softmax(-1), self.target)

    def __repr__(self) -> str:
        return f"TargetProb(target={self.target.tolist()})"


class KLToClean:
    """KL(clean ‖ patched) of the next-token distributions; 0 means the clean prediction is back.

    Lower is better, unlike the other metrics; its normalised form still maps the corrupted run
    to 0 and the clean run (KL 0) to 1.

    Args:
        clean_logits: logits of the clean run at the answer position, ``[pair, vocab]``.
    """

    def __init__(self, clean_logits: Float[Tensor, "pair vocab"]):
        self.clean_log_probs = clean_logits.detach().float().log_softmax(-1)

    def __call__(
        self, logits: Float[Tensor, "*config pair vocab"]
    ) -> Float[Tensor, "*config pair"]:
        clean = self.clean_log_probs.to(logits.device)
        log_probs = logits.float().log_softmax(-1)
        return (clean.exp() * (clean - log_probs)).sum(-1)

    def __repr__(self) -> str:
        return f"KLToClean(pairs={self.clean_log_probs.shape[0]})"


class Normalised:
    """``(m - m_corrupted) / (m_clean - m_corrupted)``: 0 = corrupted run, 1 = clean run.

    The baselines are the metric averaged over the prompt pairs, so the pair-average of the
    normalised score is the normalised pair-average (the map is affine).

    Args:
        metric: the raw metric.
        clean_logits / corrupted_logits: logits at the answer position of the unpatched runs,
            ``[pair, vocab]``.
    """

    def __init__(
        self,
        metric: Metric,
        clean_logits: Float[Tensor, "pair vocab"],
        corrupted_logits: Float[Tensor, "pair vocab"],
    ):
        self.metric = metric
        self.clean_value = float(metric(clean_logits).float().mean())
        self.corrupted_value = float(metric(corrupted_logits).float().mean())
        if abs(self.clean_value - self.corrupted_value) < 1e-6:
            raise UserInputError(
                f"{metric!r} is the same on the clean and corrupted runs "
                f"({self.clean_value:.4g}), so it cannot be normalised: the corruption does not "
                "change the behaviour being measured"
            )

    def __call__(
        self, logits: Float[Tensor, "*config pair vocab"]
    ) -> Float[Tensor, "*config pair"]:
        raw = self.metric(logits).float()
        return (raw - self.corrupted_value) / (self.clean_value - self.corrupted_value)

    def __repr__(self) -> str:
        return f"Normalised({self.metric!r})"


def normalised(
    metric: Metric,
    clean_logits: Float[Tensor, "pair vocab"],
    corrupted_logits: Float[Tensor, "pair vocab"],
) -> Normalised:
    """Wrap ``metric`` so that the corrupted run scores 0 and the clean run 1 (see `Normalised`)."""
    return Normalised(metric, clean_logits, corrupted_logits)


def pair_metric(metric: Metric | Literal["kl"] | None, pairs: PairsArg) -> Metric | Literal["kl"]:
    """The metric an analysis of prompt pairs scores: ``metric`` when given, else each pair's
    logit difference of its answer over its wrong token (:meth:`LogitDiff.of_pairs`).

    Raises:
        UserInputError: no metric, and pairs without answer and wrong token ids.
    """
    return LogitDiff.of_pairs(pairs) if metric is None else metric
