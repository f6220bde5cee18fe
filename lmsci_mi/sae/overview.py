"""A feature at a glance: its card on a sample of prose (top contexts, density, promoted tokens)
and its steering frequency table (the share of its promoted tokens in continuations steered with
it, unsteered and with a random feature). The SAE step of ``lmsci-mi tour`` and what
benchmarks/sae_tour.py measures; the browsing follows Bricken et al. 2023's feature pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lmsci_mi.config import Config, config
from lmsci_mi.model import LensModel
from lmsci_mi.sae.core import LensSAE
from lmsci_mi.sae.features import FeatureCards, FeatureConfig, feature_cards
from lmsci_mi.sae.frequency import FrequencyConfig, SteeringFrequency, steering_frequency
from lmsci_mi.sae.stats import SAEStats

__all__ = ["TOUR_FEATURE", "FeatureOverview", "FeatureOverviewConfig", "feature_overview"]

TOUR_FEATURE = 212
"""The shipped SmolLM2 SAE's feature that the tour and docs/sae.md show: the one of docs/sae.md's
steering table (it fires on the suffix after *instant-* and promotes ``ate``, ``ating``, `` your``)."""


@config
class FeatureOverviewConfig(Config):
    """How much text and how many prompts the overview reads (the tour's quick look)."""

    n_tokens: int = field(
        default=10_000,
        metadata={"help": "tokens of the standard library's prose scanned for contexts", "ge": 1},
    )
    n_prompts: int = field(
        default=6, metadata={"help": "neutral prompts continued in each condition", "ge": 1}
    )
    contexts: int = field(default=5, metadata={"help": "top contexts kept on the card", "ge": 1})


@dataclass(frozen=True)
class FeatureOverview:
    """A feature's card and steering frequency table.

    Attributes:
        feature: the feature.
        cards: its card over ``config.n_tokens`` prose tokens (one feature).
        frequency: its steering frequency table over ``config.n_prompts`` neutral prompts.
        control_pool: how many features the random control was drawn among (those alive in the
            SAE's ``stats.json``), or None when the SAE has no statistics (then all features).
    """

    feature: int
    cards: FeatureCards
    frequency: SteeringFrequency
    control_pool: int | None


def feature_overview(
    lm: LensModel,
    sae: LensSAE,
    feature: int,
    config: FeatureOverviewConfig | None = None,
    frequency: FrequencyConfig | None = None,
) -> FeatureOverview:
    """Look at one feature: its card on prose and whether steering with it makes its tokens
    more frequent. Reads the model only.

    The prose is the standard library's docstrings (:func:`~lmsci_mi.data.text_corpus.text_chunks`),
    the prompts the bundled neutral prompts; the random control is drawn among the features alive
    in the SAE's ``stats.json`` when it has one (a dead feature would be no push at all).

    Args:
        lm, sae: the model and its SAE.
        feature: the feature (e.g. :data:`TOUR_FEATURE` of the shipped SAE).
        config: text and prompt counts.
        frequency: the steering frequency table's settings (coefficient, length, sampling).

    Raises:
        ValueError: a feature out of range, or an SAE of another model.
    """
    from lmsci_mi.data.steering_texts import neutral_prompts
    from lmsci_mi.data.text_corpus import text_chunks

    config = config or FeatureOverviewConfig()
    feature = sae.feature(feature)
    stats_file = Path(sae.source) / "stats.json" if sae.source else None
    alive = SAEStats.load(stats_file).values > 0 if stats_file and stats_file.is_file() else None
    rows = text_chunks(lm, config.n_tokens).tolist()
    cards = feature_cards(
        lm, sae, rows, [feature], FeatureConfig(contexts=config.contexts, progress=False)
    )
    table = steering_frequency(
        lm, sae, feature, neutral_prompts()[: config.n_prompts], frequency or FrequencyConfig(),
        alive=alive,
    )
    pool = None if alive is None else int(alive.sum())
    return FeatureOverview(feature=feature, cards=cards, frequency=table, control_pool=pool)
