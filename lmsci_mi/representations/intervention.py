"""Check c of Park et al. (ICML 2024, Fig. 4): add each concept's embedding direction λ̄ at the
prompts' last token and measure the change in ``logit(y₁) − logit(y₀)`` on every concept's
held-out pairs; the diagonal should stand out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from lmsci_mi.config import NOT_IN_NOTES, Config, config, paper
from lmsci_mi.errors import UserInputError
from lmsci_mi.model import LensModel
from lmsci_mi.representations.concepts import (
    ConceptConfig,
    Pairs,
    _data_source,
    _dropped,
    _fit_concepts,
)
from lmsci_mi.representations.inner_product import (
    CausalInnerProduct,
    causal_inner_product,
    unembedding_site,
)
from lmsci_mi.results import Result, result_type
from lmsci_mi.sites import hook_name
from lmsci_mi.stats import standard_error

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DEFAULT_INTERVENTION_PROMPTS",
    "ConceptIntervention",
    "ConceptInterventionConfig",
    "concept_intervention",
]


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
        metadata={
            "help": "norm of the added vector, as a fraction of the site's mean norm at the "
            "prompts' last token",
            "gt": 0.0,
            **paper(NOT_IN_NOTES, "Park, Choe & Veitch 2024, ICML 2024, arXiv:2311.03658, Fig. 4"),
        },
    )
    layer: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "None: add λ̄ at the final norm's output (the paper's setting); a layer: add "
            "it at that block's resid_post instead",
            "ge": 0,
            **paper(NOT_IN_NOTES, "Park, Choe & Veitch 2024, ICML 2024, arXiv:2311.03658, Fig. 4"),
        },
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

    def default_title(self, **options: object) -> str:
        return f"Δ logit(y₁) − logit(y₀) — {self.meta.model}"

    def _draw(self, title: str) -> Figure:
        """Heatmap of steered × measured concept."""
        from matplotlib.figure import Figure

        from lmsci_mi.viz.plots import heatmap

        names = self.axis_labels(0)
        size = max(5.0, 0.35 * len(names) + 3)
        fig = Figure(figsize=(size, size))
        heatmap(fig.subplots(), self.values, row_labels=names, col_labels=names,
                row_name="steered concept (λ̄ added)", col_name="measured concept's pairs",
                title=title)
        fig.tight_layout()
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
