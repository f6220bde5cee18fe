"""Check b of Park et al. (ICML 2024, Fig. 3): cosines between concepts' directions under the causal
and the Euclidean inner product; causally separable concepts should be near orthogonal under the
causal one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.model import LensModel
from lmsci_mi.representations.concepts import (
    _DEFAULT_CONFIG,
    ConceptConfig,
    Pairs,
    _data_source,
    _dropped,
    _fit_concepts,
)
from lmsci_mi.representations.inner_product import CausalInnerProduct, causal_inner_product
from lmsci_mi.results import Result, result_type

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["ConceptInnerProducts", "concept_inner_products"]


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

    def default_title(self, **options: object) -> str:
        return f"Concept directions — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """The causal and the Euclidean cosine matrices side by side."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap

        names = self.axis_labels(1)
        size = max(4.5, 0.32 * len(names) + 2.5)
        fig = Figure(figsize=(2 * size, size))
        for ax, index, name in zip(fig.subplots(1, 2), (0, 1), ("causal ⟨·,·⟩_C", "Euclidean"),
                                   strict=True):
            heatmap(ax, self.values[index], row_labels=names, col_labels=names, row_name="concept",
                    col_name="concept", title=f"{name} cosine")
        fig.suptitle(title, fontsize=11)
        fig.tight_layout()
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
