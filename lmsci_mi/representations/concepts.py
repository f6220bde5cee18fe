"""Concept directions under the causal inner product (Park, Choe, Veitch, "The Linear Representation
Hypothesis and the Geometry of Large Language Models", ICML 2024).

The unembedding vectors are whitened by their covariance over the vocabulary, g(y) = A(γ(y) − E[γ])
with A = Cov(γ)^(-1/2), so that the Euclidean inner product of whitened vectors is the causal one,
⟨x, y⟩_C = xᵀ Cov(γ)⁻¹ y. A concept's unembedding direction comes from its counterfactual pairs'
whitened differences; its embedding direction, λ̄ = Cov(γ)⁻¹ γ̄, lives at the unembedding's input
(the final norm's output). The paper's three checks: held-out projections against random pairs,
inner products between concepts, and interventions on the logits.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import Config, config
from lmsci_mi.data.concepts import ConceptPairs, concept_pairs_source
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name
from lmsci_mi.stats import standard_error

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CausalInnerProduct",
    "CausalInnerProductConfig",
    "ConceptConfig",
    "ConceptDirection",
    "ConceptInnerProducts",
    "ConceptIntervention",
    "ConceptInterventionConfig",
    "ConceptProjections",
    "TokenPairs",
    "causal_inner_product",
    "concept_direction",
    "concept_inner_products",
    "concept_intervention",
    "concept_projections",
    "single_token_pairs",
    "unembedding_site",
    "unembedding_vectors",
]

Pairs = Sequence[tuple[str, str]] | ConceptPairs
"""A concept's counterfactual pairs: ``(base word, target word)``, or a shipped :class:`ConceptPairs`."""

_CHUNK = 8192  # vocabulary rows per float64 block: Gemma 3's 262k x 640 unembedding is 1.3 GB whole


# ---------------------------------------------------------------------- the causal inner product


@config
class CausalInnerProductConfig(Config):
    """Settings of :func:`causal_inner_product`."""

    ridge: float = dataclasses.field(
        default=0.0,
        metadata={"help": "added to Cov(γ)'s eigenvalues, as a fraction of their mean, before "
                  "the inverse square root (0: the paper's exact whitening)", "ge": 0.0},
    )
    vocabulary: Literal["all", "no_special"] = dataclasses.field(
        default="no_special",
        metadata={"help": "the tokens whose unembeddings define Cov(γ): every row of W_U, or the "
                  "tokenizer's tokens without its special tokens and without padding rows"},
    )


_DEFAULT_INNER_PRODUCT = CausalInnerProductConfig()


def unembedding_site(lm: LensModel) -> str:
    """The hook whose activation multiplies the unembedding: the final norm's output
    (``ln_final.hook_normalized``), or the last block's ``resid_post`` for a model without one."""
    if not readout.has_final_norm(lm):
        return hook_name("resid_post", lm.cfg.n_layers - 1)
    return hook_name("ln_final")


def unembedding_vectors(
    lm: LensModel, token_ids: Int[Tensor, " n"] | Sequence[int] | None = None
) -> Float[Tensor, "n d_model"]:
    """The unembedding vectors γ(y), one row per token, in float64 on the model's device.

    γ(y) is the vector whose inner product with the activation at :func:`unembedding_site` gives
    the logit of y: ``W_U[:, y]`` times the final norm's weight where the norm keeps one (a model
    loaded with ``fold_ln=True`` has it folded into ``W_U`` already), i.e.
    :func:`lmsci_mi.readout.unembedding_vectors` in the ``"normalized"`` space. The final norm's
    bias and ``b_U`` add a constant per token that no change of the activation moves, so they are
    left out.

    Args:
        lm: the model.
        token_ids: the tokens (default: every row of ``W_U``).

    Returns:
        ``[n, d_model]`` float64.

    >>> from lmsci_mi import load_model
    >>> unembedding_vectors(load_model("toy-2l"), [5, 7]).shape
    torch.Size([2, 64])
    """
    return readout.unembedding_vectors(lm, token_ids, space="normalized", dtype=torch.float64)


def _vocabulary_ids(lm: LensModel, choice: str) -> Int[Tensor, " vocab"]:
    """The token ids that count as the vocabulary for Cov(γ)."""
    d_vocab = lm.cfg.d_vocab
    if choice == "all" or lm.tokenizer is None:
        return torch.arange(d_vocab)
    tokenizer = lm.tokenizer
    # Rows past the tokenizer's length are padding (Gemma and others round W_U up); special
    # tokens (BOS, EOS, chat markers, Gemma's <unusedN>) are never a word a context predicts.
    special = set(tokenizer.all_special_ids)
    special |= {int(i) for i, token in getattr(tokenizer, "added_tokens_decoder", {}).items()
                if getattr(token, "special", False)}
    keep = [i for i in range(min(d_vocab, len(tokenizer))) if i not in special]
    return torch.tensor(keep, dtype=torch.long)


@dataclass(frozen=True)
class CausalInnerProduct:
    """Cov(γ) over the vocabulary and the whitening A = Cov(γ)^(-1/2) (float64, symmetric).

    Attributes:
        mean: ``[d_model]``: E[γ] over the vocabulary.
        covariance: ``[d_model, d_model]``: Cov(γ) (divided by the number of tokens, as in the
            paper), plus the ridge.
        whitening: A = Cov(γ)^(-1/2); ``unwhitening``: A⁻¹ = Cov(γ)^(1/2).
        n_tokens: how many tokens the covariance is over.
        config: the settings.
    """

    mean: Float[Tensor, " d_model"]
    covariance: Float[Tensor, "d_model d_model"]
    whitening: Float[Tensor, "d_model d_model"]
    unwhitening: Float[Tensor, "d_model d_model"]
    n_tokens: int
    config: CausalInnerProductConfig

    @property
    def d_model(self) -> int:
        return self.mean.shape[0]

    def _checked(self, vectors: Tensor, what: str) -> Tensor:
        if vectors.shape[-1] != self.d_model:
            raise UserInputError(
                f"{what} has width {vectors.shape[-1]} in its last axis, but the model's "
                f"unembedding vectors have d_model = {self.d_model}"
            )
        return vectors.to(device=self.whitening.device, dtype=torch.float64)

    def whiten(self, unembeddings: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        """g(y) = A(γ(y) − E[γ]) for unembedding vectors (rows). A difference of two whitened
        vectors is A times the difference, so directions need no centring."""
        gamma = self._checked(unembeddings, "the unembedding vectors")
        return (gamma - self.mean) @ self.whitening  # A is symmetric: rows times A = (A γ)ᵀ

    def inner(self, x: Float[Tensor, "... d_model"], y: Float[Tensor, "... d_model"]) -> Tensor:
        """⟨x, y⟩_C = xᵀ Cov(γ)⁻¹ y for unembedding-space directions (differences of γ's),
        broadcast over leading axes."""
        wx = self._checked(x, "x") @ self.whitening
        wy = self._checked(y, "y") @ self.whitening
        return (wx * wy).sum(-1)

    def cosine(self, x: Float[Tensor, "... d_model"], y: Float[Tensor, "... d_model"]) -> Tensor:
        """The cosine of x and y under the causal inner product."""
        return self.inner(x, y) / (self.inner(x, x) * self.inner(y, y)).sqrt()

    def embedding_direction(self, gamma_bar: Float[Tensor, "... d_model"]) -> Tensor:
        """λ̄ = Cov(γ)⁻¹ γ̄: the residual direction that the causal inner product pairs with an
        unembedding direction γ̄ (Park et al.'s unification of the two spaces), so that
        ``λ̄ · (γ(y₁) − γ(y₀)) = ⟨γ̄, γ(y₁) − γ(y₀)⟩_C``."""
        gamma = self._checked(gamma_bar, "the unembedding direction")
        return gamma @ self.whitening @ self.whitening


@torch.no_grad()
def causal_inner_product(
    lm: LensModel, config: CausalInnerProductConfig = _DEFAULT_INNER_PRODUCT
) -> CausalInnerProduct:
    """Estimate Cov(γ) over the vocabulary and its whitening, in float64. Reads the model only.

    Args:
        lm: the model.
        config: the ridge and which tokens count as the vocabulary.

    Returns:
        :class:`CausalInnerProduct`.

    Raises:
        ValueError: Cov(γ) is not positive definite (a tied or rank-deficient unembedding);
            the message suggests a ridge.

    >>> from lmsci_mi import load_model
    >>> lm = load_model("toy-2l")
    >>> ip = causal_inner_product(lm)
    >>> g = ip.whiten(unembedding_vectors(lm))
    >>> bool(torch.allclose(g.T @ g / len(g), torch.eye(64, dtype=g.dtype, device=g.device), atol=1e-3))
    True
    """
    ids = _vocabulary_ids(lm, config.vocabulary).to(lm.device)
    d_model = lm.cfg.d_model
    total = torch.zeros(d_model, dtype=torch.float64, device=lm.device)
    for start in range(0, len(ids), _CHUNK):
        total += unembedding_vectors(lm, ids[start : start + _CHUNK]).sum(0)
    mean = total / len(ids)
    # Centre before the Gram product: E[γγᵀ] − μμᵀ loses digits when |μ| dwarfs the spread.
    covariance = torch.zeros(d_model, d_model, dtype=torch.float64, device=lm.device)
    for start in range(0, len(ids), _CHUNK):
        centred = unembedding_vectors(lm, ids[start : start + _CHUNK]) - mean
        covariance += centred.T @ centred
    covariance /= len(ids)
    eigenvalues, eigenvectors = torch.linalg.eigh(covariance)
    eigenvalues = eigenvalues + config.ridge * eigenvalues.mean()
    smallest = float(eigenvalues.min())
    if smallest <= 1e-12 * float(eigenvalues.max()):
        raise UserInputError(
            f"Cov(γ) of {lm.name} is not positive definite (smallest eigenvalue {smallest:.3g}); "
            "give CausalInnerProductConfig(ridge=1e-6) or larger"
        )
    whitening = eigenvectors @ torch.diag(eigenvalues.rsqrt()) @ eigenvectors.T
    unwhitening = eigenvectors @ torch.diag(eigenvalues.sqrt()) @ eigenvectors.T
    ridged = eigenvectors @ torch.diag(eigenvalues) @ eigenvectors.T
    return CausalInnerProduct(mean, ridged, whitening, unwhitening, len(ids), config)


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
        metadata={"help": "the direction: the mean of the pairs' whitened differences, normalised "
                  "(Park et al.), or the mean of the unit differences, normalised (each pair "
                  "weighs the same)"},
    )
    first_token: bool = dataclasses.field(
        default=False,
        metadata={"help": "use each word's first token; otherwise pairs with a word of several "
                  "tokens are left out (the concept tables) or raise (concept_direction)"},
    )
    heldout_fraction: float = dataclasses.field(
        default=0.25,
        metadata={"help": "the share of each concept's pairs held out of the fit", "gt": 0.0, "lt": 1.0},
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

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """Bars of each pair's projection on the direction."""
        from lmsci_mi.viz.plots import plot_bars, save_figure

        labels = [f"{b.strip()}→{t.strip()}" for b, t in self.pairs]
        fig = plot_bars(labels, self.projections.tolist(), value_label="projection on ḡ",
                        title=title or f"{self.concept} — {self.meta.model}")
        if path is not None:
            save_figure(fig, path)
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


# ---------------------------------------------------------------------- check a: projections

PROJECTION_STATISTICS = (
    "heldout_mean", "heldout_se", "random_mean", "random_sd", "effect_size", "above_random_p95",
)


@result_type
class ConceptProjections(Result):
    """Held-out pairs' whitened differences projected on each concept's direction (fitted on the
    other pairs), against random vocabulary pairs (Park et al.'s Fig. 2, with a held-out split
    instead of leave-one-out).

    ``values`` is ``[concept, statistic]``: the held-out mean and its standard error, the random
    pairs' mean and s.d., the effect size (held-out mean − random mean) / random s.d., and the
    share of held-out pairs above the random pairs' 95th percentile.

    Attributes:
        heldout: ``[n]``: every held-out projection, concept by concept (``heldout_concept``
            gives each one's concept index); ``heldout_pairs``: their words.
        random: ``[concept, n_random]``: the random pairs' projections on each direction.
        n_fit, n_heldout: ``[concept]``: pairs fitted and held out.
        dropped: ``(concept, base, target, reason)`` of each pair left out.
    """

    heldout: Tensor
    heldout_concept: Tensor
    heldout_pairs: tuple[str, ...]
    random: Tensor
    n_fit: Tensor
    n_heldout: Tensor
    dropped: tuple[tuple[str, str, str, str], ...]

    def statistic(self, name: str) -> Float[Tensor, " concept"]:
        """One column of ``values`` by name (see :data:`PROJECTION_STATISTICS`)."""
        return self.values[:, PROJECTION_STATISTICS.index(name)]

    def summary(self, rows: int = 20) -> str:
        """One line per concept: pairs, held-out mean ± s.e., the random baseline, the share
        above its 95th percentile."""
        lines = [f"held-out projections on concept directions ({self.meta.model}); random "
                 f"pairs: {self.random.shape[1]}",
                 f"  {'concept':24s} {'fit':>4s} {'held':>4s} {'held-out mean':>16s} "
                 f"{'random':>13s} {'effect':>7s} {'>p95':>5s}"]
        for i, name in enumerate(self.axis_labels(0)[:rows]):
            v = self.values[i].tolist()
            lines.append(
                f"  {name:24s} {int(self.n_fit[i]):4d} {int(self.n_heldout[i]):4d} "
                f"{v[0]:8.2f} ± {v[1]:5.2f} {v[2]:5.2f} ± {v[3]:5.2f} {v[4]:7.2f} {v[5]:5.2f}"
            )
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """Per concept: the random pairs' 5–95% range (grey) and each held-out pair (dots)."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import save_figure

        names = self.axis_labels(0)
        fig = Figure(figsize=(max(6.0, 0.45 * len(names) + 2), 4.5))
        ax = fig.subplots()
        low, high = self.random.quantile(0.05, dim=1), self.random.quantile(0.95, dim=1)
        for i in range(len(names)):
            ax.plot([i, i], [float(low[i]), float(high[i])], color="0.7", linewidth=8,
                    solid_capstyle="butt", label="random pairs, 5–95%" if i == 0 else None)
            points = self.heldout[self.heldout_concept == i]
            ax.scatter([i] * len(points), points.tolist(), s=12, color="tab:red",
                       label="held-out pairs" if i == 0 else None, zorder=3)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right")
        ax.set_ylabel("projection on ḡ (whitened)")
        ax.set_title(title or f"Held-out projections — {self.meta.model}", fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        if path is not None:
            save_figure(fig, path)
        return fig


def _random_differences(
    lm: LensModel, ip: CausalInnerProduct, config: ConceptConfig
) -> Float[Tensor, "n d_model"]:
    """Whitened differences of random pairs of distinct vocabulary tokens (seeded)."""
    vocabulary = _vocabulary_ids(lm, config.inner_product.vocabulary)
    generator = torch.Generator().manual_seed(config.seed)
    n = len(vocabulary)
    first = torch.randint(n, (config.n_random_pairs,), generator=generator)
    # A nonzero offset modulo n makes the second token always differ from the first.
    second = (first + torch.randint(1, n, (config.n_random_pairs,), generator=generator)) % n
    tokens = TokenPairs(vocabulary[first], vocabulary[second], (), ())
    return _whitened_differences(lm, ip, tokens)


@torch.no_grad()
def concept_projections(
    lm: LensModel,
    concepts: Mapping[str, Pairs],
    config: ConceptConfig = _DEFAULT_CONFIG,
    *,
    inner_product: CausalInnerProduct | None = None,
) -> ConceptProjections:
    """Check a: do held-out pairs project onto the concept direction far more than random pairs?

    Each concept's usable pairs (single tokens, unless ``config.first_token``) are split (seeded)
    into fit and held-out pairs; the direction ḡ_W is fitted on the fit pairs, and the held-out
    pairs' whitened differences are projected on it, against ``config.n_random_pairs`` random
    pairs of distinct vocabulary tokens. Whitened vectors have identity covariance, so a random
    pair's projection has mean 0 and s.d. about √2. Reads the model only.

    Args:
        lm: the model.
        concepts: ``{name: pairs}`` (e.g. :func:`~lmsci_mi.data.concepts.load_concept_pairs`).
        config: split, estimator, random pairs, seed, inner product.
        inner_product: a :func:`causal_inner_product` computed before, to reuse it.

    Returns:
        :class:`ConceptProjections`.

    Raises:
        ValueError: a concept with fewer than ``config.min_pairs`` usable pairs.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.concepts import load_concept_pairs
    >>> lm = load_model("toy-2l")
    >>> result = concept_projections(lm, load_concept_pairs(["male_female", "verb_past"]))
    >>> result.values.shape, result.n_fit.tolist(), result.n_heldout.tolist()
    (torch.Size([2, 6]), [26, 39], [9, 13])
    """
    ip = inner_product or causal_inner_product(lm, config.inner_product)
    fitted = _fit_concepts(lm, concepts, config, ip, everything=False)
    random = _random_differences(lm, ip, config)
    rows, heldout, heldout_concept, heldout_pairs, random_proj = [], [], [], [], []
    for i, f in enumerate(fitted):
        projected = f.differences[f.heldout.to(f.differences.device)] @ f.g_bar
        baseline = random @ f.g_bar
        p95 = torch.quantile(baseline, 0.95)
        n = len(projected)
        se = standard_error(projected)
        rows.append(torch.stack([
            projected.mean(), se.to(projected), baseline.mean(), baseline.std(),
            (projected.mean() - baseline.mean()) / baseline.std(),
            (projected > p95).double().mean(),
        ]))
        heldout.append(projected)
        heldout_concept += [i] * n
        labels = f.tokens.labels()
        heldout_pairs += [labels[j] for j in f.heldout.tolist()]
        random_proj.append(baseline)
    return ConceptProjections(
        values=torch.stack(rows).cpu(),
        axes=("concept", "statistic"),
        labels=(tuple(f.name for f in fitted), PROJECTION_STATISTICS),
        meta=lm.meta(params=config.params(), seed=config.seed,
                     data_source=_data_source(list(concepts.values()))),
        heldout=torch.cat(heldout).cpu(),
        heldout_concept=torch.tensor(heldout_concept, dtype=torch.long),
        heldout_pairs=tuple(heldout_pairs),
        random=torch.stack(random_proj).cpu(),
        n_fit=torch.tensor([len(f.fit) for f in fitted]),
        n_heldout=torch.tensor([len(f.heldout) for f in fitted]),
        dropped=_dropped(fitted),
    )


# ---------------------------------------------------------------------- check b: inner products


@result_type
class ConceptInnerProducts(Result):
    """Cosines between concepts' unembedding directions (Park et al.'s Fig. 3 heatmaps).

    ``values`` is ``[inner_product, concept, concept_other]``: index 0 the causal inner product
    (cosines of the whitened directions ḡ_W), index 1 the Euclidean one (cosines of the same
    estimator applied to the raw ``W_U`` differences). Causally separable concepts (male → female,
    English → French) should be near 0 under the causal one. Concepts that share words (walk →
    walked, walk → walking) share the −γ(walk) term of their differences, so their cosine is near
    0.5 even for unembeddings with no structure at all: compare against that floor, not 0.

    Attributes:
        n_pairs: ``[concept]``: the pairs each direction was fitted on (every usable pair).
        dropped: ``(concept, base, target, reason)`` of each pair left out.
    """

    n_pairs: Tensor
    dropped: tuple[tuple[str, str, str, str], ...]

    def causal(self) -> Float[Tensor, "concept concept_other"]:
        return self.values[0]

    def euclidean(self) -> Float[Tensor, "concept concept_other"]:
        return self.values[1]

    def off_diagonal(self, index: int) -> Float[Tensor, " n"]:
        """The cosines between distinct concepts (upper triangle) of one inner product."""
        n = self.values.shape[1]
        rows, cols = torch.triu_indices(n, n, offset=1)
        return self.values[index][rows, cols]

    def summary(self, rows: int = 5) -> str:
        """Mean |cosine| between distinct concepts under each inner product, and the most
        aligned pairs of concepts under the causal one."""
        names = self.axis_labels(1)
        n = len(names)
        pairs = torch.triu_indices(n, n, offset=1)
        causal = self.off_diagonal(0)
        order = causal.abs().argsort(descending=True)[:rows]
        lines = [
            f"inner products between {n} concept directions ({self.meta.model})",
            f"  mean |cosine| between distinct concepts: causal {float(causal.abs().mean()):.3f}, "
            f"Euclidean {float(self.off_diagonal(1).abs().mean()):.3f}",
            "  most aligned (causal): " + ", ".join(
                f"{names[int(pairs[0, k])]}·{names[int(pairs[1, k])]} {float(causal[k]):+.2f}"
                for k in order
            ),
        ]
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """The causal and the Euclidean cosine matrices side by side."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap, save_figure

        names = self.axis_labels(1)
        size = max(4.5, 0.32 * len(names) + 2.5)
        fig = Figure(figsize=(2 * size, size))
        for ax, index, name in zip(fig.subplots(1, 2), (0, 1), ("causal ⟨·,·⟩_C", "Euclidean"),
                                   strict=True):
            heatmap(ax, self.values[index], row_labels=names, col_labels=names, row_name="concept",
                    col_name="concept", title=f"{name} cosine")
        fig.suptitle(title or f"Concept directions — {self.meta.model}", fontsize=11)
        fig.tight_layout()
        if path is not None:
            save_figure(fig, path)
        return fig


@torch.no_grad()
def concept_inner_products(
    lm: LensModel,
    concepts: Mapping[str, Pairs],
    config: ConceptConfig = _DEFAULT_CONFIG,
    *,
    inner_product: CausalInnerProduct | None = None,
) -> ConceptInnerProducts:
    """Check b: the cosines between concepts' directions, under the causal and the Euclidean
    inner product. Each direction is fitted on all of its concept's usable pairs. Reads the
    model only.

    Args:
        lm: the model.
        concepts: ``{name: pairs}``.
        config: estimator, inner product (the split is not used).
        inner_product: a :func:`causal_inner_product` computed before, to reuse it.

    Returns:
        :class:`ConceptInnerProducts`.

    Raises:
        ValueError: a concept with fewer than ``config.min_pairs`` usable pairs.

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.concepts import load_concept_pairs
    >>> lm = load_model("toy-2l")
    >>> result = concept_inner_products(lm, load_concept_pairs(["male_female", "verb_past"]))
    >>> result.values.shape, [round(float(v), 6) for v in result.causal().diagonal()]
    (torch.Size([2, 2, 2]), [1.0, 1.0])
    """
    ip = inner_product or causal_inner_product(lm, config.inner_product)
    fitted = _fit_concepts(lm, concepts, config, ip, everything=True)
    g = torch.stack([f.g_bar for f in fitted])  # unit rows: Euclidean in whitened = causal
    raw = torch.stack([f.gamma_bar_euclidean for f in fitted])
    names = tuple(f.name for f in fitted)
    return ConceptInnerProducts(
        values=torch.stack([g @ g.T, raw @ raw.T]).cpu(),
        axes=("inner_product", "concept", "concept_other"),
        labels=(("causal", "euclidean"), names, names),
        meta=lm.meta(params=config.params(), data_source=_data_source(list(concepts.values()))),
        n_pairs=torch.tensor([len(f.tokens) for f in fitted]),
        dropped=_dropped(fitted),
    )


# ---------------------------------------------------------------------- check c: intervention

DEFAULT_INTERVENTION_PROMPTS = (
    "The word is",
    "Here is the next word:",
    "She wrote down the word",
    "He said the word",
    "The last word on the list was",
    "Say a word:",
    "I looked up the word",
    "My favourite word is",
)
"""Neutral contexts whose next token is a word: the intervention is read at their last token."""


@config
class ConceptInterventionConfig(Config):
    """Settings of :func:`concept_intervention`."""

    strength: float = dataclasses.field(
        default=0.5,
        metadata={"help": "norm of the added vector, as a fraction of the site's mean norm at the "
                  "prompts' last token", "gt": 0.0},
    )
    layer: int | None = dataclasses.field(
        default=None,
        metadata={"help": "None: add λ̄ at the final norm's output (the paper's setting); a "
                  "layer: add it at that block's resid_post instead", "ge": 0},
    )
    prompts: tuple[str, ...] = dataclasses.field(
        default=DEFAULT_INTERVENTION_PROMPTS,
        metadata={"help": "contexts; the vector is added at each one's last token", "min_length": 1},
    )
    batch_size: int = dataclasses.field(default=16, metadata={"help": "prompts per forward pass", "ge": 1})
    concept: ConceptConfig = dataclasses.field(default_factory=ConceptConfig, metadata={"cli": False})


_DEFAULT_INTERVENTION = ConceptInterventionConfig()


@result_type
class ConceptIntervention(Result):
    """The change in ``logit(y₁) − logit(y₀)`` when each concept's λ̄ is added (Park et al.'s
    Fig. 4, over many concepts at once).

    ``values`` is ``[steered, measured]``: adding the steered concept's unit λ̄ (times
    :attr:`scale`) at :attr:`site` on the prompts' last token, the mean change in the measured
    concept's held-out pairs' logit difference (pairs are the unit; prompts are averaged first).
    The diagonal should stand out.

    Attributes:
        se: ``[steered, measured]``: the standard error over the measured concept's pairs.
        per_pair: ``[steered, n]``: every held-out pair's change, concept by concept
            (``pair_concept`` gives each one's measured-concept index); ``pair_labels`` the words.
        site: the hook the vector was added at; ``scale``: the added vector's norm;
            ``site_norm``: the site's mean norm at the last token, which ``scale`` is relative to.
        dropped: ``(concept, base, target, reason)`` of each pair left out.
    """

    se: Tensor
    per_pair: Tensor
    pair_concept: Tensor
    pair_labels: tuple[str, ...]
    site: str
    scale: float
    site_norm: float
    dropped: tuple[tuple[str, str, str, str], ...]

    def target_effect(self) -> Float[Tensor, " concept"]:
        """Per steered concept, the change on its own held-out pairs (the diagonal)."""
        return self.values.diagonal()

    def off_target_effect(self) -> Float[Tensor, " concept"]:
        """Per steered concept, the mean |change| on the other concepts' pairs."""
        n = self.values.shape[0]
        off = ~torch.eye(n, dtype=torch.bool)
        return (self.values.abs() * off).sum(1) / max(1, n - 1)

    def summary(self, rows: int = 20) -> str:
        """Per steered concept: the change on its own pairs ± s.e., and the mean |change| on
        the others'."""
        names = self.axis_labels(0)
        own, other = self.target_effect(), self.off_target_effect()
        lines = [f"intervention: unit λ̄ × {self.scale:.3g} at {self.site} (site norm "
                 f"{self.site_norm:.3g}) on {len(self.meta.prompts)} prompts ({self.meta.model})",
                 f"  {'steered concept':24s} {'own pairs':>16s} {'others (mean |Δ|)':>18s}"]
        for i, name in enumerate(names[:rows]):
            lines.append(f"  {name:24s} {float(own[i]):+8.3f} ± {float(self.se[i, i]):5.3f} "
                         f"{float(other[i]):18.3f}")
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None, *, title: str | None = None) -> Figure:
        """Heatmap of steered × measured concept."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap, save_figure

        names = self.axis_labels(0)
        size = max(5.0, 0.35 * len(names) + 3)
        fig = Figure(figsize=(size, size))
        heatmap(fig.subplots(), self.values, row_labels=names, col_labels=names,
                row_name="steered concept (λ̄ added)", col_name="measured concept's pairs",
                title=title or f"Δ logit(y₁) − logit(y₀) — {self.meta.model}")
        fig.tight_layout()
        if path is not None:
            save_figure(fig, path)
        return fig


def _intervention_site(lm: LensModel, layer: int | None) -> str:
    if layer is None:
        return unembedding_site(lm)
    if not 0 <= layer < lm.cfg.n_layers:
        raise UserInputError(f"layer {layer} is out of range: {lm.name} has layers 0..{lm.cfg.n_layers - 1}")
    return hook_name("resid_post", layer)


def _last_token_logits(lm: LensModel, prompts: Sequence[str], config: ConceptInterventionConfig,
                       site: str, vector: Tensor | None) -> tuple[Tensor, Tensor]:
    """Logits at each prompt's last token, and the site's activation there; with ``vector``,
    added there (through the hook registry, which removes it again whatever happens)."""
    logits, acts = [], []
    for start in range(0, len(prompts), config.batch_size):
        padded = lm.encode_batch(prompts[start : start + config.batch_size])
        last = padded.lengths - 1
        rows = torch.arange(len(last), device=lm.device)
        with lm.hooks.capture(site) as cap:
            if vector is None:
                out = lm(padded.tokens)
            else:
                with lm.hooks.add_vector(site, vector, positions=last):
                    out = lm(padded.tokens)
        logits.append(out[rows, last].double())
        acts.append(cap[site][rows, last].double())
    return torch.cat(logits), torch.cat(acts)


@torch.no_grad()
def concept_intervention(
    lm: LensModel,
    concepts: Mapping[str, Pairs],
    config: ConceptInterventionConfig = _DEFAULT_INTERVENTION,
    *,
    inner_product: CausalInnerProduct | None = None,
) -> ConceptIntervention:
    """Check c: add each concept's λ̄_W at the prompts' last token and measure the change in
    ``logit(y₁) − logit(y₀)`` on every concept's held-out pairs.

    Directions are fitted on each concept's fit pairs (the split of ``config.concept``), and
    λ̄_W = Cov(γ)⁻¹ γ̄_W is scaled to unit Euclidean norm, then to ``config.strength`` times the
    site's mean norm at the prompts' last token. At the final norm's output (the default site)
    the change is exactly ``scale · λ̄ᵀ(γ(y₁) − γ(y₀))`` before any logit soft cap: the check
    then shows that λ̄_W moves its own concept's pairs and leaves causally separable concepts'
    pairs alone. With ``config.layer`` it is added at that block's ``resid_post`` instead, and the
    later blocks decide what reaches the logits. The hooks are attached through ``lm.hooks`` and
    removed on exit, also on an error; the weights are not changed.

    Args:
        lm: the model.
        concepts: ``{name: pairs}``.
        config: strength, site, prompts; ``config.concept``: split and estimator.
        inner_product: a :func:`causal_inner_product` computed before, to reuse it.

    Returns:
        :class:`ConceptIntervention`.

    Raises:
        ValueError: a layer out of range, or a concept with too few usable pairs (before any hook
            is attached).

    >>> from lmsci_mi import load_model
    >>> from lmsci_mi.data.concepts import load_concept_pairs
    >>> lm = load_model("toy-2l")
    >>> result = concept_intervention(lm, load_concept_pairs(["male_female", "verb_past"]))
    >>> result.values.shape, result.site, lm.hooks.attached_count()
    (torch.Size([2, 2]), 'ln_final.hook_normalized', 0)
    """
    site = _intervention_site(lm, config.layer)
    ip = inner_product or causal_inner_product(lm, config.concept.inner_product)
    fitted = _fit_concepts(lm, concepts, config.concept, ip, everything=False)
    prompts = list(config.prompts)
    clean_logits, clean_acts = _last_token_logits(lm, prompts, config, site, None)
    site_norm = float(clean_acts.norm(dim=-1).mean())
    scale = config.strength * site_norm
    base = torch.cat([f.tokens.base_ids[f.heldout] for f in fitted]).to(lm.device)
    target = torch.cat([f.tokens.target_ids[f.heldout] for f in fitted]).to(lm.device)
    clean_gap = clean_logits[:, target] - clean_logits[:, base]  # [prompt, pair]
    per_pair = []
    for f in fitted:
        embedding = f.g_bar @ ip.whitening  # λ̄ = A ḡ = Cov(γ)⁻¹ γ̄
        vector = (scale * embedding / embedding.norm()).to(lm.cfg.dtype)
        steered, _ = _last_token_logits(lm, prompts, config, site, vector)
        gap = steered[:, target] - steered[:, base]
        per_pair.append((gap - clean_gap).mean(0))
    changes = torch.stack(per_pair).cpu()  # [steered, pair]
    pair_concept = torch.cat([torch.full((len(f.heldout),), i) for i, f in enumerate(fitted)])
    means = torch.stack([changes[:, pair_concept == i].mean(1) for i in range(len(fitted))], 1)
    ses = torch.stack(
        [standard_error(changes[:, pair_concept == i]) for i in range(len(fitted))], 1
    )
    names = tuple(f.name for f in fitted)
    return ConceptIntervention(
        values=means,
        axes=("steered", "measured"),
        labels=(names, names),
        meta=lm.meta(prompts, params=config.params(), seed=config.concept.seed,
                     data_source=_data_source(list(concepts.values()))),
        se=ses,
        per_pair=changes,
        pair_concept=pair_concept,
        pair_labels=tuple(f.tokens.labels()[j] for f in fitted for j in f.heldout.tolist()),
        site=site,
        scale=scale,
        site_norm=site_norm,
        dropped=_dropped(fitted),
    )
