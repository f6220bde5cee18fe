"""How a causal trace corrupts its prompt: Gaussian noise on the subject (Meng et al. 2022, ROME),
symmetric token replacement (STR: the subject swapped for another, Zhang & Nanda 2024), or a
corrupted prompt the user gives. Each kind registers by name in :data:`CORRUPTIONS`; a new kind is
one function plus one ``@CORRUPTIONS.register(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.config import Config
from lmsci_mi.errors import UserInputError
from lmsci_mi.registry import MethodRegistry
from lmsci_mi.sites import hook_name
from lmsci_mi.sweep import Intervention

if TYPE_CHECKING:
    from lmsci_mi.model import LensModel

__all__ = ["CORRUPTIONS", "CleanRun", "Corrupted", "CorruptionFn"]

METRIC_PROB = "prob"
METRIC_LOGIT_DIFF = "logit_diff"


@dataclass(frozen=True)
class CleanRun:
    """What a corruption needs of the clean prompt: its text, tokens, subject and embeddings."""

    prompt: str
    subject: str
    tokens: Int[Tensor, "1 pos"]
    subject_positions: tuple[int, ...]
    embed: Float[Tensor, "1 pos d_model"]


@dataclass(frozen=True)
class Corrupted:
    """A corruption, ready for :meth:`BaseRun.record`: the corrupted batch and its metric.

    Attributes:
        tokens: ``[batch, pos]``, aligned position by position with the clean prompt (Gaussian
            noise: the clean tokens once per noise sample).
        interventions: applied to every sequence of the base run (the noised embeddings).
        metric: ``"prob"`` (p(target), ROME) or ``"logit_diff"`` (target − ``wrong``, STR).
        wrong: for ``"logit_diff"``, the competing answer's text, or None for the corrupted
            run's top-1 token.
        corrupted_prompt: the corrupted text ("" for noise).
        noise: ``[sample, subject_token, d_model]`` (empty without noise), and its std.
    """

    tokens: Int[Tensor, "batch pos"]
    interventions: tuple[Intervention, ...]
    metric: str
    wrong: str | None
    corrupted_prompt: str
    noise: Tensor
    noise_scale: float


class TraceSettings(Protocol):
    """What a corruption reads of the trace's config (:class:`~lmsci_mi.circuits.tracing.TraceConfig`);
    a protocol, so this module need not import the tracing module that imports it."""

    n_samples: int
    seed: int
    replacement: str | None
    corrupted_prompt: str | None
    wrong: str | None


class CorruptionFn(Protocol):
    def __call__(
        self, lm: LensModel, clean: CleanRun, config: TraceSettings, scale: float
    ) -> Corrupted: ...


CORRUPTIONS: MethodRegistry[Any] = MethodRegistry("corruption")
"""Corruption kinds by name: ``gaussian``, ``str``, ``prompt``. Each takes ``(lm, clean, config,
scale)``, where ``scale`` is the noise std (used by ``gaussian`` only), and returns a
:class:`Corrupted`."""


@CORRUPTIONS.register(
    "gaussian", Config, "Gaussian noise on the subject's embeddings (ROME); metric p(target)"
)
def gaussian_noise(lm: LensModel, clean: CleanRun, config: TraceSettings, scale: float) -> Corrupted:
    """``n_samples`` noised copies: N(0, scale²) added to each subject embedding coordinate."""
    # Drawn on the CPU so that a seed gives the same noise on every device.
    eps = (
        torch.randn(
            config.n_samples,
            len(clean.subject_positions),
            lm.cfg.d_model,
            generator=torch.Generator().manual_seed(config.seed),
        )
        * scale
    )
    source = clean.embed.expand(config.n_samples, -1, -1).clone()
    subject = list(clean.subject_positions)
    source[:, subject] += eps.to(source)
    mask = torch.zeros(1, source.shape[1], 1, dtype=torch.bool, device=source.device)
    mask[:, subject] = True
    return Corrupted(
        tokens=clean.tokens.expand(config.n_samples, -1),
        interventions=(Intervention(hook_name("embed"), source, mask),),
        metric=METRIC_PROB,
        wrong=None,
        corrupted_prompt="",
        noise=eps,
        noise_scale=scale,
    )


@CORRUPTIONS.register(
    "str", Config, "symmetric token replacement: another subject of the same length"
)
def symmetric_token_replacement(
    lm: LensModel, clean: CleanRun, config: TraceSettings, scale: float
) -> Corrupted:
    """The prompt with its subject replaced by ``config.replacement`` (same number of tokens)."""
    if not config.replacement:
        raise UserInputError(
            "STR corruption needs a replacement subject with as many tokens as the subject "
            "(--replacement, e.g. 'Berlin' for 'Paris'); trace a fact set to have one chosen"
        )
    corrupted = clean.prompt.replace(clean.subject, config.replacement, 1)
    tokens = _aligned(lm, clean, corrupted, "replacement subject")
    if tuple(lm.find_subject(corrupted, config.replacement)) != clean.subject_positions:
        raise UserInputError(
            f"replacement {config.replacement!r} covers tokens "
            f"{list(lm.find_subject(corrupted, config.replacement))}, the subject "
            f"{list(clean.subject_positions)}: choose a subject with the same number of tokens"
        )
    return _replaced(clean, tokens, corrupted, config.wrong)


@CORRUPTIONS.register("prompt", Config, "a corrupted prompt the user gives (same token length)")
def corrupted_prompt(
    lm: LensModel, clean: CleanRun, config: TraceSettings, scale: float
) -> Corrupted:
    """The user's ``config.corrupted_prompt``, which must align token by token with the prompt."""
    if not config.corrupted_prompt:
        raise UserInputError(
            "prompt corruption needs --corrupted-prompt (same token length as --prompt)"
        )
    tokens = _aligned(lm, clean, config.corrupted_prompt, "corrupted prompt")
    return _replaced(clean, tokens, config.corrupted_prompt, config.wrong)


def _aligned(lm: LensModel, clean: CleanRun, corrupted: str, what: str) -> Tensor:
    """The corrupted prompt's tokens; restoring position p copies state p, so lengths must agree."""
    tokens = lm.to_tokens(corrupted).to(clean.tokens.device)
    if tokens.shape != clean.tokens.shape:
        raise UserInputError(
            f"the {what} gives {tokens.shape[1]} tokens ({corrupted!r}) and the prompt "
            f"{clean.tokens.shape[1]}: restored positions must align, so give one of equal token length"
        )
    return tokens


def _replaced(clean: CleanRun, tokens: Tensor, text: str, wrong: str | None) -> Corrupted:
    empty = torch.zeros(0, len(clean.subject_positions), clean.embed.shape[-1])
    return Corrupted(
        tokens=tokens,
        interventions=(),
        metric=METRIC_LOGIT_DIFF,
        wrong=wrong,
        corrupted_prompt=text,
        noise=empty,
        noise_scale=0.0,
    )
