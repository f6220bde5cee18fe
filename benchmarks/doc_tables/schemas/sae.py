"""Schemas of the SAE benchmarks' data files (docs/sae.md and the README): each writer in
benchmarks/ builds these, the renderers in doc_tables/probes.py (and readme.py's SAE rows) read
them."""

from __future__ import annotations

from typing import TypedDict

from . import MeanSE, Provenance

# --- benchmarks/sae.py -> docs/data/sae_steering.json --------------------------------------------


class SAEInfo(TypedDict):
    folder: str
    hook: str
    d_sae: int
    shipped: bool
    live_features: int | None


class CardsInfo(TypedDict):
    rows: int
    n_tokens: int
    features_firing: int
    features: int


class SteeredFeature(TypedDict):
    index: int
    rule: str
    matched_words: list[str]
    density: float
    typical_max: float
    token_set: list[str]


class WordListFeature(TypedDict):
    index: int
    words: list[str] | str
    density: float
    typical_max: float
    promoted: list[str]
    contexts: list[str]


class ControlFeature(TypedDict):
    index: int
    drawn_among: int
    rule: str


class PromptsInfo(TypedDict):
    n: int
    source: str


class FrequencySampling(TypedDict):
    new_tokens: int
    temperature: float
    top_p: float
    seed: int
    samples_per_prompt: int
    sampler: str


class FrequencyCondition(TypedDict):
    """One condition's share of promoted tokens: mean over prompts ± s.e., the share of prompts
    with a hit, and the paired difference from the unsteered samples ± its s.e."""

    label: str
    share: float
    se: float
    prompts_hit: float
    minus_unsteered: float
    minus_unsteered_se: float
    sample: str


class FrequencyTable(TypedDict):
    coefficient: float
    conditions: dict[str, FrequencyCondition]
    """By condition: "unsteered", "feature", "control"."""


class SAESteeringData(TypedDict):
    model: str
    sae: SAEInfo
    cards: CardsInfo
    feature: SteeredFeature
    features_by_word_list: dict[str, WordListFeature]
    control: ControlFeature
    prompts: PromptsInfo
    sampling: FrequencySampling
    statistic: str
    coefficients: list[FrequencyTable]


# --- benchmarks/sae_massive_activations.py -> docs/data/sae_heldout.json -------------------------


class Massive(TypedDict):
    rule: str
    n_tokens: int
    variance_share: float
    median_norm: float
    max_norm: float


class Bootstrap(TypedDict):
    resamples: int
    over: str
    seed: int


class HeldoutEV(TypedDict):
    """Explained variance over a set of held-out tokens, its 95% interval over texts, and L0."""

    explained_variance: float
    ci95: list[float]
    l0: float
    n_tokens: int
    n_texts: int


class HeldoutSAE(TypedDict):
    folder: str
    shipped: str | None
    live_features: int | None
    d_sae: int


class ValueCI(TypedDict):
    value: float
    ci95: list[float]


class _HeldoutLossRequired(TypedDict):
    clean: float
    sae: float
    zero: float
    increase: float
    increase_ci95: list[float]
    fraction_recovered: float
    fraction_recovered_ci95: list[float]
    n_targets: int


class HeldoutLoss(_HeldoutLossRequired, total=False):
    seconds: float


class _HeldoutOtherRequired(TypedDict):
    explained_variance_bfloat16: ValueCI
    l0: float
    dead_fraction: float
    dead_features: int
    n_tokens: int
    n_texts: int


class HeldoutOther(_HeldoutOtherRequired, total=False):
    loss: HeldoutLoss
    """Absent when written with --no-losses."""


class RecordLoss(TypedDict):
    clean: float
    sae: float
    zero: float
    increase: float
    fraction_recovered: float


class TrainingCosts(TypedDict):
    text_seconds: float
    harvest_seconds: float
    train_seconds: float
    n_train_tokens: float
    train_dead_features: float


class TrainingRecord(TypedDict):
    """The training run's own record (the SAE folder's stats.json), copied for comparison."""

    source: str
    explained_variance: float
    explained_variance_bfloat16: float | None
    l0: float
    dead_fraction: float
    loss: RecordLoss
    n_tokens: int
    costs: TrainingCosts


class _SAEHeldoutRequired(TypedDict):
    model: str
    hook: str
    massive: Massive
    bootstrap: Bootstrap
    all: HeldoutEV
    without_massive: HeldoutEV
    sae: HeldoutSAE
    other: HeldoutOther
    training_record: TrainingRecord
    seconds: float


class SAEHeldoutData(_SAEHeldoutRequired, total=False):
    provenance: Provenance
    """The renderer shows the run's date from it."""


# --- benchmarks/sae_shipped.py -> docs/data/sae_shipped.json --------------------------------------


class ShippedRow(TypedDict):
    """One token set and SAE: explained variance, L0, the share of tokens whose active features
    differ from the original's and the reconstruction gap ‖x̂ − x̂₀‖ / ‖x̂₀ − x‖."""

    tokens: str
    n_tokens: int
    sae: str
    explained_variance: float
    l0: float
    active_set_differs: float
    reconstruction_gap: float


class SAEShippedData(TypedDict):
    model: str
    hook: str
    d_sae: int
    live_features: int
    live_train_rows: int
    shipped_mb: float
    original_weights_mb: float
    training_harvest: str
    training_record: dict[str, object]
    """The training run's stats.json fields (costs, explained variance, L0, losses)."""
    comparison_harvest: str
    build_seconds: float
    seconds: float
    rows: list[ShippedRow]


# --- benchmarks/sae_tour.py -> docs/data/sae_tour.json --------------------------------------------


class TourCard(TypedDict):
    tokens_asked: int
    n_tokens: int
    density: float
    contexts: list[str]


class TourSteering(TypedDict):
    prompts: int
    new_tokens: int
    coefficient: float
    conditions: list[str]
    share: list[MeanSE]
    """Per condition (unsteered, feature, control): the share of promoted tokens over prompts."""
    minus_unsteered: list[MeanSE]
    """Feature and control minus unsteered, paired prompt by prompt."""
    control: int
    control_pool: int | None
    token_set: list[str]


class _SAETourRequired(TypedDict):
    model: str
    feature: int
    card: TourCard
    steering: TourSteering
    load_seconds: float
    step_seconds: float


class SAETourData(_SAETourRequired, total=False):
    provenance: Provenance
    """The renderer shows the run's thread count from it."""
