"""Check a of Park et al. (ICML 2024, Fig. 2): held-out pairs' whitened differences projected on
each concept's direction (fitted on the other pairs), against random vocabulary pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.model import LensModel
from lmsci_mi.representations.concepts import (
    _DEFAULT_CONFIG,
    ConceptConfig,
    Pairs,
    TokenPairs,
    _data_source,
    _dropped,
    _fit_concepts,
    _whitened_differences,
)
from lmsci_mi.representations.inner_product import (
    CausalInnerProduct,
    _vocabulary_ids,
    causal_inner_product,
)
from lmsci_mi.results import Result, result_type
from lmsci_mi.stats import standard_error

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PROJECTION_STATISTICS", "ConceptProjections", "concept_projections"]


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
