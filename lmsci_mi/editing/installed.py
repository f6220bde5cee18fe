"""Did an edit install? Each request's p(target_new) and p(target_true) before and after, and the
likely cause when the new answer did not overtake the old one.

The probabilities are CounterFact's (Meng et al. 2022, §4.2): exp(−mean token NLL) of the target
after the rewrite prompt, so a multi-token target is scored per token, and "installed" is the
efficacy test ES applies to one prompt: p(new) > p(true) after the edit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from lmsci_mi.editing.metrics import target_nll
from lmsci_mi.editing.requests import EditRequest
from lmsci_mi.model import LensModel

__all__ = [
    "InstallCheck",
    "TargetProbabilities",
    "install_checks",
    "target_probabilities",
    "with_true_targets",
]

_MOVED = 1.05
"""p(new) must grow by more than this factor for the edit to count as having reached the prompt."""


@dataclass(frozen=True)
class TargetProbabilities:
    """p(target_new) and p(target_true) after one request's rewrite prompt, at one moment."""

    new: float
    true: float


@dataclass(frozen=True)
class InstallCheck:
    """One request before and after an edit.

    Attributes:
        request: the request (its ``target_true`` as scored: the model's top-1 answer where the
            request gave none).
        before, after: the probabilities on the unedited and on the edited model.
    """

    request: EditRequest
    before: TargetProbabilities
    after: TargetProbabilities

    @property
    def installed(self) -> bool:
        """Whether the new answer overtook the old one (CounterFact's efficacy on this prompt)."""
        return self.after.new > self.after.true

    def likely_cause(self) -> str | None:
        """Why the edit did not install, as far as the probabilities tell; None when it did."""
        if self.installed:
            return None
        if self.after.new <= self.before.new * _MOVED:
            return (
                "the edit barely changed p(new) at this prompt: check that the subject appears in "
                "the prompt as the model tokenises it, and edit at or below the layers where the "
                "fact is recalled (`lmsci-mi trace` shows them; --layer / --layers)"
            )
        return (
            f"p(new) rose {self.after.new / max(self.before.new, 1e-12):.0f}× but stayed below "
            "p(true): the fit stopped before it won (raise --steps or the learning rate), or the "
            "edited layer holds little of this fact (try another --layer / --layers)"
        )

    def line(self) -> str:
        """One line for the command line: both probabilities before → after, and the verdict."""
        verdict = "installed" if self.installed else "NOT installed"
        return (
            f"p({self.request.target_new!r}) {self.before.new:.3g} -> {self.after.new:.3g}, "
            f"p({self.request.target_true!r}) {self.before.true:.3g} -> {self.after.true:.3g}: "
            f"{verdict}"
        )


def with_true_targets(lm: LensModel, requests: Sequence[EditRequest]) -> list[EditRequest]:
    """``requests``, each without a ``target_true`` given the unedited model's current answer: its
    likeliest next token after the rewrite prompt (the first of the top 5 that is not blank), the
    answer an edit has to overtake."""
    return [r if r.target_true else replace(r, target_true=_top_answer(lm, r.rewrite_prompt)) for r in requests]


def _top_answer(lm: LensModel, prompt: str) -> str:
    tokens = lm.top_tokens(prompt, 5).axis_labels(0)
    return next((t for t in tokens if t.strip()), tokens[0])


def target_probabilities(lm: LensModel, requests: Sequence[EditRequest]) -> list[TargetProbabilities]:
    """Each request's p(target_new) and p(target_true) after its rewrite prompt, on the model as it
    is now (an edit entered around the call applies). Reads the model only.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> request = EditRequest("{} is in", "Paris", target_new=" Rome", target_true=" France")
    >>> [0 < p.new < 1 and 0 < p.true < 1 for p in target_probabilities(lm, [request])]
    [True]
    """
    prompts = [r.rewrite_prompt for r in requests for _ in range(2)]
    targets = [t for r in requests for t in (r.target_new, r.target_true)]
    p = (-target_nll(lm, prompts, targets)).exp().view(-1, 2)
    return [TargetProbabilities(float(new), float(true)) for new, true in p.tolist()]


def install_checks(
    requests: Sequence[EditRequest],
    before: Sequence[TargetProbabilities],
    after: Sequence[TargetProbabilities],
) -> list[InstallCheck]:
    """One :class:`InstallCheck` per request from the probabilities before and after an edit."""
    return [InstallCheck(r, b, a) for r, b, a in zip(requests, before, after, strict=True)]
