"""Concept directions under the causal inner product (Park, Choe, Veitch, "The Linear Representation
Hypothesis and the Geometry of Large Language Models", ICML 2024): the shared core of the concept
analyses. Counterfactual word pairs become token ids; a concept's unembedding direction comes from
its pairs' whitened differences, and its embedding direction λ̄ = Cov(γ)⁻¹ γ̄ lives at the
unembedding's input (the final norm's output).

The paper's three checks sit beside it, one module each: held-out projections against random
pairs (:mod:`~lmsci_mi.representations.projections`), inner products between concepts
(:mod:`~lmsci_mi.representations.orthogonality`) and interventions on the logits
(:mod:`~lmsci_mi.representations.intervention`); the inner product itself is
:mod:`~lmsci_mi.representations.inner_product`. Their names stay importable from here.
"""

from __future__ import annotations

import dataclasses
import importlib
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.data.concepts import ConceptPairs, concept_pairs_source
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.representations.inner_product import (
    CausalInnerProduct,
    CausalInnerProductConfig,
    causal_inner_product,
    unembedding_site,
    unembedding_vectors,
)
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CausalInnerProduct",
    "CausalInnerProductConfig",
    "ConceptConfig",
    "ConceptDirection",
    "TokenPairs",
    "causal_inner_product",
    "concept_direction",
    "single_token_pairs",
    "unembedding_site",
    "unembedding_vectors",
]

Pairs = Sequence[tuple[str, str]] | ConceptPairs
"""A concept's counterfactual pairs: ``(base word, target word)``, or a shipped :class:`ConceptPairs`."""

_CHECKS = {
    "PROJECTION_STATISTICS": "projections",
    "ConceptProjections": "projections",
    "concept_projections": "projections",
    "ConceptInnerProducts": "orthogonality",
    "concept_inner_products": "orthogonality",
    "DEFAULT_INTERVENTION_PROMPTS": "intervention",
    "ConceptIntervention": "intervention",
    "ConceptInterventionConfig": "intervention",
    "concept_intervention": "intervention",
}
"""The checks' names, importable from here as before the split: name -> its module. Resolved on
first use, because the checks' modules import this one."""


def __getattr__(name: str) -> Any:
    if name in _CHECKS:
        module = importlib.import_module(f"lmsci_mi.representations.{_CHECKS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------- pairs to token ids


@dataclass(frozen=True)
class TokenPairs:
    """A concept's pairs as token ids, and the pairs that were left out (and why).

    Attributes:
        base_ids, target_ids: ``[pair]``: the token of each kept pair's base and target word.
        pairs: the kept pairs' words.
        dropped: ``(base, target, reason)`` of each pair left out.
    """

    base_ids: Int[Tensor, " pair"]
    target_ids: Int[Tensor, " pair"]
    pairs: tuple[tuple[str, str], ...]
    dropped: tuple[tuple[str, str, str], ...]

    def __len__(self) -> int:
        return len(self.pairs)

    def labels(self) -> tuple[str, ...]:
        """``"king→queen"`` per kept pair."""
        return tuple(f"{b.strip()}→{t.strip()}" for b, t in self.pairs)


def single_token_pairs(
    lm: LensModel, pairs: Pairs, *, first_token: bool = False, drop: bool = False
) -> TokenPairs:
    """The token ids of counterfactual pairs whose members are each one token.

    Args:
        lm: the model (its tokenizer decides what is one token).
        pairs: ``(base, target)`` words, with the leading space the model sees mid-sentence.
        first_token: use each word's first token instead (Park et al. keep single tokens only).
        drop: leave out pairs with a member of several tokens, and say which, instead of raising.

    Returns:
        :class:`TokenPairs`. Pairs whose two members are the same token carry no difference and
        are always left out (reported in ``dropped``).

    Raises:
        ValueError: a member of several tokens (without ``drop`` or ``first_token``), or an empty
            word; the message names the word, its tokens and the fixes.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> kept = single_token_pairs(lm, [(" king", " queen"), (" house", " maison")], drop=True)
    >>> kept.labels(), kept.dropped
    (('king→queen',), ((' house', ' maison', "' maison' is 2 tokens [' ma', 'ison']"),))
    """
    tokenizer = lm._require_tokenizer()
    base_ids: list[int] = []
    target_ids: list[int] = []
    kept: list[tuple[str, str]] = []
    dropped: list[tuple[str, str, str]] = []
    for pair in pairs:
        base, target = pair
        ids: list[int] = []
        problem = ""
        for word in (base, target):
            if not word.strip():
                raise UserInputError(f"the pair {pair!r} has an empty word")
            split = list(tokenizer(word, add_special_tokens=False)["input_ids"])
            if len(split) != 1 and not first_token:
                pieces = [tokenizer.decode([i]) for i in split]
                problem = problem or f"{word!r} is {len(split)} tokens {pieces}"
            ids.append(split[0])
        if problem and not drop:
            raise UserInputError(
                f"{problem} for {lm.name}, but each member of a pair must be one token (pair "
                f"{pair!r}). Leave such pairs out with drop=True, or use each word's first token "
                "with first_token=True."
            )
        if not problem and ids[0] == ids[1]:
            problem = f"both words are the token {tokenizer.decode([ids[0]])!r}"
        if problem:
            dropped.append((base, target, problem))
            continue
        base_ids.append(ids[0])
        target_ids.append(ids[1])
        kept.append((base, target))
    return TokenPairs(
        torch.tensor(base_ids, dtype=torch.long),
        torch.tensor(target_ids, dtype=torch.long),
        tuple(kept),
        tuple(dropped),
    )


# ---------------------------------------------------------------------- concept directions


@config
class ConceptConfig(Config):
    """Settings of the concept directions and their checks."""

    estimator: Literal["mean_difference", "mean_unit_difference"] = dataclasses.field(
        default="mean_difference",
        metadata={
            "help": "the direction: the mean of the pairs' whitened differences, normalised "
            "(Park et al.), or the mean of the unit differences, normalised (each pair weighs "
            "the same)",
            **paper(NOT_IN_NOTES, "Park, Choe & Veitch 2024, ICML 2024, arXiv:2311.03658"),
        },
    )
    first_token: bool = dataclasses.field(
        default=False,
        metadata={"help": "use each word's first token; otherwise pairs with a word of several "
                  "tokens are left out (the concept tables) or raise (concept_direction)"},
    )
    heldout_fraction: float = dataclasses.field(
        default=0.25,
        metadata={
            "help": "the share of each concept's pairs held out of the fit",
            "gt": 0.0,
            "lt": 1.0,
            **paper(NOT_IN_NOTES, "Park, Choe & Veitch 2024, ICML 2024, arXiv:2311.03658"),
        },
    )
    min_pairs: int = dataclasses.field(
        default=4, metadata={"help": "fewest usable pairs a concept needs in the tables", "ge": 3}
    )
    n_random_pairs: int = dataclasses.field(
        default=1000, metadata={"help": "random vocabulary pairs of the projection baseline", "ge": 10}
    )
    seed: int = dataclasses.field(default=0, metadata={"help": "seed of the splits and random pairs"})
    inner_product: CausalInnerProductConfig = dataclasses.field(
        default_factory=CausalInnerProductConfig, metadata={"cli": False}
    )


_DEFAULT_CONFIG = ConceptConfig()


def _direction(differences: Float[Tensor, "pair d"], estimator: str) -> Float[Tensor, " d"]:
    """A unit direction from per-pair differences (mean, or mean of unit differences)."""
    if estimator == "mean_unit_difference":
        differences = differences / differences.norm(dim=-1, keepdim=True)
    mean = differences.mean(0)
    return mean / mean.norm()


@result_type
class ConceptDirection(Result):
    """One concept's direction: ``values`` is ḡ_W, the unit direction in the whitened space.

    Attributes:
        unembedding: γ̄_W = A⁻¹ ḡ_W in ``W_U``'s coordinates; its causal norm is 1.
        embedding: λ̄_W = Cov(γ)⁻¹ γ̄_W = A ḡ_W at :attr:`site`, so that adding ``α λ̄_W`` there
            moves ``logit(y₁) − logit(y₀)`` by ``α ḡ_Wᵀ(g(y₁) − g(y₀))``.
        site: the hook λ̄_W belongs to: the unembedding's input, i.e. the final norm's output.
        concept: the concept's name.
        pairs, dropped: the pairs used, and the pairs left out with the reason.
        projections: ``[pair]``: each pair's whitened difference projected on ḡ_W (in-sample).
    """

    unembedding: Tensor
    embedding: Tensor
    site: str
    concept: str
    pairs: tuple[tuple[str, str], ...]
    dropped: tuple[tuple[str, str, str], ...]
    projections: Tensor

    def summary(self, rows: int = 10) -> str:
        """The concept, how many pairs, the site and the projections' spread."""
        p = self.projections
        return (
            f"concept direction {self.concept!r} on {self.meta.model}: {len(self.pairs)} pairs "
            f"({len(self.dropped)} left out), λ̄ at {self.site}\n"
            f"  pair projections on ḡ: mean {float(p.mean()):.3f}, min {float(p.min()):.3f}, "
            f"max {float(p.max()):.3f}"
        )

    def default_title(self, **options: object) -> str:
        return f"{self.concept} — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Bars of each pair's projection on the direction."""
        from lmsci_mi.viz.plots import plot_bars

        labels = [f"{b.strip()}→{t.strip()}" for b, t in self.pairs]
        fig = plot_bars(labels, self.projections.tolist(), value_label="projection on ḡ",
                        title=title)
        return fig


def _data_source(concepts: Sequence[Pairs]) -> str:
    if concepts and all(isinstance(c, ConceptPairs) for c in concepts):
        return concept_pairs_source()
    return "counterfactual word pairs given by the caller"


@torch.no_grad()
def concept_direction(
    lm: LensModel,
    pairs: Pairs,
    config: ConceptConfig = _DEFAULT_CONFIG,
    *,
    name: str | None = None,
    drop: bool = False,
    inner_product: CausalInnerProduct | None = None,
) -> ConceptDirection:
    """A concept's unembedding direction ḡ_W (whitened), γ̄_W and its embedding direction λ̄_W,
    from all of its pairs. Reads the model only.

    The direction is the mean of the pairs' whitened differences g(y₁) − g(y₀), normalised to
    unit length (Park et al.'s estimator; ``estimator="mean_unit_difference"`` averages unit
    differences, so that no pair weighs more for being far apart). λ̄_W = Cov(γ)⁻¹ γ̄_W lives at
    the final norm's output (``ln_final.hook_normalized``), the activation ``W_U`` reads: there a
    shift moves the logits linearly, which is the setting of the paper's Theorem 2.2. At the last
    block's ``resid_post`` the final norm divides by each token's RMS first, so a shift there
    acts as that shift over the token's norm.

    Args:
        lm: the model.
        pairs: ``(base, target)`` words (each one token unless ``config.first_token``).
        config: the estimator; ``config.inner_product`` when ``inner_product`` is not given.
        name: the concept's name (default: a :class:`ConceptPairs`' own, else ``"concept"``).
        drop: leave out pairs with a word of several tokens (listed in ``dropped``) instead of
            raising.
        inner_product: a :func:`causal_inner_product` computed before, to reuse it.

    Returns:
        :class:`ConceptDirection`.

    Raises:
        ValueError: a word of several tokens (see :func:`single_token_pairs`; unless ``drop``), or
            fewer than 2 usable pairs.

    >>> from lmsci_mi import load_model
    >>> d = concept_direction(load_model("toy-2l"), [(" king", " queen"), (" man", " woman")])
    >>> d.values.shape, round(float(d.values.norm()), 6), d.site
    (torch.Size([64]), 1.0, 'ln_final.hook_normalized')
    """
    label = name or (pairs.name if isinstance(pairs, ConceptPairs) else "concept")
    tokens = single_token_pairs(lm, pairs, first_token=config.first_token, drop=drop)
    if len(tokens) < 2:
        raise UserInputError(
            f"concept {label!r} has {len(tokens)} usable pair(s) for {lm.name} (left out: "
            f"{list(tokens.dropped)}); a direction needs at least 2"
        )
    ip = inner_product or causal_inner_product(lm, config.inner_product)
    differences = _whitened_differences(lm, ip, tokens)
    g_bar = _direction(differences, config.estimator)
    return ConceptDirection(
        values=g_bar.cpu(),
        axes=("d_model",),
        labels=((),),
        meta=lm.meta(params=config.params(), data_source=_data_source([pairs])),
        unembedding=(g_bar @ ip.unwhitening).cpu(),
        embedding=(g_bar @ ip.whitening).cpu(),
        site=unembedding_site(lm),
        concept=label,
        pairs=tokens.pairs,
        dropped=tokens.dropped,
        projections=(differences @ g_bar).cpu(),
    )


def _whitened_differences(lm: LensModel, ip: CausalInnerProduct, tokens: TokenPairs) -> Tensor:
    """``[pair, d_model]``: g(y₁) − g(y₀) = A(γ(y₁) − γ(y₀))."""
    raw = unembedding_vectors(lm, tokens.target_ids) - unembedding_vectors(lm, tokens.base_ids)
    return raw @ ip.whitening


# ---------------------------------------------------------------------- many concepts: the fits


@dataclass(frozen=True)
class _Fitted:
    """One concept of a table: its pairs, its fit/held-out split and its fitted directions."""

    name: str
    tokens: TokenPairs
    fit: Tensor  # pair indices
    heldout: Tensor
    g_bar: Tensor  # whitened direction, fitted on `fit` (or every pair when `everything`)
    gamma_bar_euclidean: Tensor  # the same estimator on raw γ differences
    differences: Tensor  # every pair's whitened difference


def _split(name: str, n: int, config: ConceptConfig) -> tuple[Tensor, Tensor]:
    """A seeded fit/held-out split of ``n`` pairs; the seed mixes in the concept's name, so one
    concept's split does not depend on which other concepts are in the table."""
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + zlib.crc32(name.encode()))
    order = torch.randperm(n, generator=generator)
    n_heldout = max(1, round(config.heldout_fraction * n))
    return order[n_heldout:].sort().values, order[:n_heldout].sort().values


def _fit_concepts(
    lm: LensModel,
    concepts: Mapping[str, Pairs],
    config: ConceptConfig,
    ip: CausalInnerProduct,
    *,
    everything: bool,
) -> list[_Fitted]:
    """Every concept's usable pairs, split and direction; raises before any work on a bad one."""
    if len(concepts) < 1:
        raise UserInputError("no concepts given")
    tokens = {name: single_token_pairs(lm, pairs, first_token=config.first_token, drop=True)
              for name, pairs in concepts.items()}
    short = {name: len(t) for name, t in tokens.items() if len(t) < config.min_pairs}
    if short:
        raise UserInputError(
            f"concept(s) with fewer than min_pairs={config.min_pairs} usable pairs for {lm.name}: "
            f"{short}; leave them out, or lower min_pairs (at least 3: 2 to fit, 1 held out)"
        )
    fitted = []
    for name, kept in tokens.items():
        fit, heldout = _split(name, len(kept), config)
        chosen = torch.arange(len(kept)) if everything else fit
        differences = _whitened_differences(lm, ip, kept)
        raw = unembedding_vectors(lm, kept.target_ids) - unembedding_vectors(lm, kept.base_ids)
        fitted.append(_Fitted(
            name=name,
            tokens=kept,
            fit=fit,
            heldout=heldout,
            g_bar=_direction(differences[chosen.to(differences.device)], config.estimator),
            gamma_bar_euclidean=_direction(raw[chosen.to(raw.device)], config.estimator),
            differences=differences,
        ))
    return fitted


def _dropped(fitted: Sequence[_Fitted]) -> tuple[tuple[str, str, str, str], ...]:
    return tuple((f.name, *d) for f in fitted for d in f.tokens.dropped)
