"""The causal inner product (Park, Choe, Veitch, "The Linear Representation Hypothesis and the
Geometry of Large Language Models", ICML 2024, §3.2): Cov(γ) of the unembedding vectors over the
vocabulary and its whitening A = Cov(γ)^(-1/2), so that ⟨x, y⟩_C = xᵀ Cov(γ)⁻¹ y is the Euclidean
inner product of whitened vectors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor

from lmsci_mi import readout
from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.sites import hook_name

__all__ = [
    "CausalInnerProduct",
    "CausalInnerProductConfig",
    "causal_inner_product",
    "unembedding_site",
    "unembedding_vectors",
]

_CHUNK = 8192  # vocabulary rows per float64 block: Gemma 3's 262k x 640 unembedding is 1.3 GB whole


# ---------------------------------------------------------------------- the causal inner product


@config
class CausalInnerProductConfig(Config):
    """Settings of :func:`causal_inner_product`."""

    ridge: float = dataclasses.field(
        default=0.0,
        metadata={
            "help": "added to Cov(γ)'s eigenvalues, as a fraction of their mean, before the "
            "inverse square root (0: the paper's exact whitening)",
            "ge": 0.0,
            **paper(NOT_IN_NOTES, "Park, Choe & Veitch 2024, ICML 2024, arXiv:2311.03658"),
        },
    )
    vocabulary: Literal["all", "no_special"] = dataclasses.field(
        default="no_special",
        metadata={
            "help": "the tokens whose unembeddings define Cov(γ): every row of W_U, or the "
            "tokenizer's tokens without its special tokens and without padding rows",
            **paper(NOT_IN_NOTES, "Park, Choe & Veitch 2024, ICML 2024, arXiv:2311.03658"),
        },
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
