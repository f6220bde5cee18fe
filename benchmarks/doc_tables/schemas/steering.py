"""Schemas of the steering benchmarks' data files (docs/steering.md, docs/representations.md and
the README): benchmarks/steering.py and benchmarks/steering_compare.py build these, the renderers
in doc_tables/steering.py and doc_tables/representations.py (and readme.py's steering rows) read
them."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from . import ValueSE

# --- benchmarks/steering.py -> docs/data/steering.json -------------------------------------------


class CurveRow(TypedDict):
    """The metrics of one steer setting: means over prompts with their standard errors
    (distinct-n is a statistic of the whole set of continuations: no standard error)."""

    sentiment: float
    sentiment_se: float
    topic: float
    topic_se: float
    perplexity: float
    perplexity_se: float
    distinct_1: float
    distinct_2: float
    distinct_3: float


class SettingRow(CurveRow):
    setting: dict[str, float]
    """Each steer's value ({"sentiment": 0.5, "topic": 0.0})."""


class SteerInfo(TypedDict, total=False):
    attributes: list[str]
    config: str
    rank: int
    epsilon: float
    init_std: float
    dummy: bool
    file_bytes: int


class TrainingInfo(TypedDict):
    n_texts: int
    n_tokens: int
    steps: int
    batch_tokens: int
    lr: float
    seed: int
    unsteered_loss: float
    final_loss: float
    final_loss_over: str
    collect_seconds: float
    train_seconds: float
    seconds_per_step: float
    trained_this_run: bool
    cost_conditions: dict[str, object] | str
    """The machine while it trained, or a note that an earlier run trained the cached steer."""


class EvaluationInfo(TypedDict):
    prompts: int
    samples_per_prompt: int
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int
    prompts_source: str
    standard_errors: str


class CurveSummary(TypedDict):
    s: float
    rule: str
    values_at: list[float]
    sentiment_at: list[float]
    monotone_at_s: bool
    monotone_whole_grid: bool
    gap: ValueSE
    perplexity_ratio_minus: float
    perplexity_ratio_plus: float
    gap_at_1: ValueSE
    perplexity_ratio_minus_1: float
    perplexity_ratio_plus_1: float
    gap_at_2: ValueSE
    dummy_minus_unsteered: dict[str, list[float]]


class Curve(TypedDict):
    rows: list[SettingRow]
    unsteered: CurveRow
    summary: CurveSummary
    sample_prompts: list[str]
    samples: dict[str, list[str]]


class Composition(TypedDict):
    value: float
    rows: list[SettingRow]
    unsteered: CurveRow
    effects: dict[str, ValueSE]
    """Paired differences between settings ("sentiment_at_topic_plus", "both_topic", ...)."""


class SVDProbe(TypedDict):
    singular_values: list[float]
    raised: list[str]
    lowered: list[str]
    end_valence: float
    random_valence: float
    random_words: list[str]
    n_end_words: int


class HighlightRow(TypedDict):
    text: str
    value: float
    spans: list[str]


class Transfer(TypedDict):
    to: str
    n_shared: int
    r2: float
    value: float
    rows: list[SettingRow]
    unsteered: CurveRow
    gap: ValueSE
    source_gap: ValueSE
    fraction_kept: float
    fraction_kept_se: float


class SteeringData(TypedDict):
    model: str
    steer: SteerInfo
    training: TrainingInfo
    evaluation: EvaluationInfo
    curve: Curve
    composition: Composition
    svd: SVDProbe
    highlight: list[HighlightRow]
    transfer: Transfer


# --- benchmarks/steering_compare.py -> docs/data/steering_compare.json ----------------------------


class ComparePrompts(TypedDict):
    dev: int
    test: int
    source: str


class CompareSampling(TypedDict):
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int
    samples_per_prompt: int


class DevPoint(TypedDict):
    """A candidate on the dev prompts, at the selection strength."""

    sentiment: float
    perplexity: float


class MeanDifferenceInfo(TypedDict):
    """The mean-difference (ActAdd-style) vector of the comparison (once keyed "caa")."""

    layer: int
    site: str
    read: str
    scope: str
    vector_norm: float
    n_pairs: int
    dev: dict[str, DevPoint]
    """By layer."""


class SAEFeatureInfo(TypedDict):
    feature: int
    hook: str
    candidates: dict[str, float]
    """Candidate feature -> mean VADER valence of its promoted tokens."""
    dev: dict[str, DevPoint]
    """By candidate feature."""


class CompareCurve(TypedDict):
    """A method's control curve on the test prompts (``unsteered`` in ControlCurve's metric order:
    sentiment, topic, perplexity, distinct-1, -2, -3)."""

    strengths: list[float]
    sentiment: list[float]
    sentiment_se: list[float]
    perplexity: list[float]
    perplexity_se: list[float]
    distinct_2: list[float]
    unsteered: list[float]
    unsteered_se: list[float]
    examples: list[str]


class AtBudget(TypedDict):
    """A curve at its largest strength within the perplexity budget
    (``lmsci_mi.steering.at_fluency_budget``)."""

    strength: float
    sentiment: float
    sentiment_se: float
    perplexity: float
    perplexity_se: float
    distinct_2: float
    gain: float
    budget_perplexity: float


class SteeringCompareData(TypedDict):
    renamed: NotRequired[str]
    """A note on keys renamed after the run (no value changes)."""
    model: str
    prompts: ComparePrompts
    sampling: CompareSampling
    budget: str
    mean_difference: MeanDifferenceInfo
    sae: SAEFeatureInfo
    lm_steer: dict[str, str]
    curves: dict[str, CompareCurve]
    """By method: "mean_difference", "lm_steer", "sae"."""
    at_budget: dict[str, AtBudget]
    seconds: float


# --- benchmarks/caa.py -> docs/data/caa.json ---------------------------------------------------


class IntervalRow(TypedDict):
    """A statistic with its 95 % percentile-bootstrap interval."""

    mean: float
    low: float
    high: float


class CAAItemsInfo(TypedDict):
    n: int
    vector: int
    dev: int
    test: int
    source: str
    matching: str
    not_matching: str
    scored_by: str


class CAAABEffect(TypedDict):
    """p(behaviour letter) / (p(A) + p(B)) on the test items, per multiplier, and its paired change
    from multiplier 0."""

    multipliers: list[float]
    p: list[IntervalRow]
    change: list[IntervalRow]
    per_item: dict[str, list[float]]


class CAAOpenEffect(TypedDict):
    """The behaviour score of the continuations of the test questions, per multiplier (and its
    paired change from 0), with the steering evaluation's perplexity and distinct-n."""

    multipliers: list[float]
    score: list[IntervalRow]
    change: list[IntervalRow]
    perplexity: list[float]
    perplexity_se: list[float]
    distinct_1: list[float]
    distinct_2: list[float]
    distinct_3: list[float]
    examples: dict[str, list[str]]


class CAAMethod(TypedDict):
    layer: int
    hook: str
    norm: float
    """The raw vector's norm."""
    common_norm: float
    """The norm it is scaled to: the mean of both methods' raw norms at its layer."""
    ab: CAAABEffect
    open: CAAOpenEffect


class CAABehaviour(TypedDict):
    items: CAAItemsInfo
    sweep: dict[str, dict[str, dict[str, float]]]
    """By method, then layer: the dev A/B shift (p at +1 minus p at -1) and the vector's norm."""
    methods: dict[str, CAAMethod]
    """By method: "caa", "mean_difference"."""


class CAAData(TypedDict):
    model: str
    methods: dict[str, str]
    sampling: CompareSampling
    sweep_multiplier: float
    layer_step: int
    scale: str
    bootstrap: str
    behaviours: dict[str, CAABehaviour]
    seconds: float
