"""Schemas of issue 40's data files: benchmarks/outliers_anatomy.py writes
docs/data/outliers_anatomy_<model>.json (massive activations, super weights, their ablations, sink
heads, the consequences for the SAE and the lens), benchmarks/outliers_length.py writes
docs/data/outliers_length_<model>.json (trained context, attention curves, the first tokens'
separation, NLL by position with and without the Λ-mask); doc_tables/outliers.py (docs/outliers.md)
reads both."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from .icl_vectors import IntervalRecord

Estimate = IntervalRecord
"""An interval as ``lmsci_mi.stats.Interval.as_dict()`` writes it."""


class Spread(TypedDict):
    """A figure over a random control's draws (``ControlSpread.as_dict()``; ``sd`` null for one:
    the benchmarks write every NaN as null)."""

    draws: list[float]
    mean: float
    sd: float | None
    low: float
    high: float


# --------------------------------------------------------------------------- anatomy


class MassiveLayer(TypedDict):
    """One layer of Sun et al.'s layer-wise statistic, the mean over texts."""

    layer: int
    top: list[float]
    """top-1, top-2, top-3 |activation|."""
    median: float
    n_paper: int
    n_ratio_only: int


class MassiveRow(TypedDict):
    """One dimension at one kind of position, over the layers where it meets the rule."""

    dim: int
    role: str
    """``sink``, ``first token``, ``first newline``, ``first '.'`` or ``other``."""
    token: str
    """The most common token there."""
    n_tokens: int
    """Distinct tokens that carry it."""
    layers: list[int]
    peak_layer: int
    value: float
    """The mean signed value at the peak layer over the texts with an entry there."""
    ratio: float
    """The largest |value| / median |activation| of its hidden state at the peak layer."""
    n_texts: int
    """Texts with an entry at the peak layer."""
    n_role_texts: int


class MassiveSection(TypedDict):
    config: dict
    text_source: str
    n_texts: int
    seq_len: int
    sink: str | None
    sink_at_zero: int
    """Texts whose position 0 is the prepended sink token."""
    n_paper: int
    n_ratio_only: int
    n_absolute_only: int
    rule_used: str
    """``paper``, ``ratio`` (no entry met the paper's rule) or ``none``."""
    roles: dict[str, list[int]]
    """role -> [texts with an entry of the rule used there, texts that have the role]."""
    layers: list[MassiveLayer]
    rows: list[MassiveRow]
    largest: dict
    """The entry of largest ratio by either rule (layer, dim, token, role, value, ratio)."""
    ablated: list[list[int]]
    """[layer, dim] of the activations the ablations zero."""
    positions: str
    """Where they are zeroed, in words."""
    exclude: str
    """The positions the consequences leave out, in words."""


class SuperWeightRow(TypedDict):
    layer: int
    row: int
    col: int
    weight: float
    input_spike: float
    output_spike: float
    position: int
    token: str
    input_ratio: float
    output_ratio: float
    above_threshold: bool
    above_ratio: bool
    iteration: int


class SuperWeightSection(TypedDict):
    prompt: str
    rule_used: str
    """``threshold`` (Yu et al.'s), ``ratio`` (the threshold found none) or ``none``."""
    threshold: float
    ratio: float
    stop_reason: str
    candidates: list[SuperWeightRow]
    layers: list[dict]
    """Per layer ``{layer, input, output}``: the signed largest-|value| entries of the first pass."""


class AblationRow(TypedDict):
    """One intervention beside its random control (``AblationEffect.to_dict()`` and its group)."""

    group: str
    """``massive``, ``super weights`` or ``scale sweep``."""
    intervention: str
    description: str
    perplexity_ratio: Estimate
    control_ratio: Spread
    fact_accuracy: Estimate
    control_fact_accuracy: Spread
    ioi_accuracy: Estimate
    control_ioi_accuracy: Spread


class AblationSection(TypedDict):
    config: dict
    text_source: str
    clean: dict[str, Estimate]
    """``perplexity``, ``fact_accuracy``, ``ioi_accuracy``."""
    rows: list[AblationRow]
    n_texts: int
    seq_len: int
    n_facts: int
    n_ioi: int


class SinkHeadRow(TypedDict):
    head: str
    with_sink: float
    without_sink: float
    difference: float
    se: float


class SinkSection(TypedDict):
    k: int
    n_texts: int
    seq_len: int
    sink: str | None
    top: list[SinkHeadRow]
    mask: dict
    """``heads``, ``clean``, ``each_head`` {head: Estimate}, ``together``, ``random``,
    ``together_minus_random``, ``every_head`` (Estimate or null), ``random_heads``, ``n_texts``."""


class ExclusionRow(TypedDict):
    item: str
    all: Estimate
    kept: Estimate
    difference: Estimate


class ExclusionSection(TypedDict, total=False):
    metric: str
    excluded: str
    n_positions: list[int]
    n_texts: int
    rows: list[ExclusionRow]
    not_run: str
    """Why it was not measured (then nothing else is there)."""


class OutliersAnatomyData(TypedDict, total=False):
    model: str
    sink: str | None
    sizes: dict
    massive: MassiveSection
    super_weights: SuperWeightSection
    ablations: AblationSection
    sinks: SinkSection
    consequences: dict[str, ExclusionSection]
    """``lens`` and ``sae``."""
    figures: dict[str, str]
    seconds: dict[str, float]


# --------------------------------------------------------------------------- length


class TrainedContextRecord(TypedDict):
    trained_length: int
    max_position_embeddings: int | None
    n_ctx: int
    rotary_base: float | None
    rotary_base_local: float | None
    sliding_window: int | None
    pretraining_length: int | None
    source: str


class CurveSet(TypedDict):
    """A per-layer curve on a grid of lengths: ``mean[layer][i]`` at ``x[i]``, ± ``std`` over texts."""

    statistic: str
    x: list[int]
    layers: list[str]
    mean: list[list[float]]
    std: list[list[float]]
    n_texts: int


class RiseRecord(TypedDict):
    """``lmsci_mi.outliers.NLLRise`` and the windows' mean NLL (mean over texts). ``applied``
    False: one text, so the rule (a standard error over texts) was not tested; ``length`` is None
    and ``se`` empty (data written before it carry no ``applied``: the rule was applied)."""

    length: int | None
    in_context: list[int]
    in_context_mean: float
    window: int
    stride: int
    n_se: float
    window_ends: list[int]
    window_mean: list[float]
    excess: list[float]
    se: list[float]
    applied: NotRequired[bool]


class NLLSection(TypedDict):
    config: dict
    n_texts: int
    max_length: int
    without: RiseRecord
    with_mask: RiseRecord
    mask: dict
    """The resolved Λ-mask: ``layers``, ``local_window``, ``n_global``, ``distance_cap``."""


class SeparationSection(TypedDict):
    first_k: int
    length: int
    n_texts: int
    layers: list[str]
    mean: list[float]
    std: list[float]


class OutliersLengthData(TypedDict, total=False):
    model: str
    sink: str | None
    text_source: str
    trained_context: TrainedContextRecord
    max_length: int
    curves: dict[str, CurveSet]
    """``max_logit`` (by distance) and ``entropy`` (by position, window means)."""
    separation: SeparationSection
    nll: NLLSection
    figures: dict[str, str]
    seconds_per_pass: dict[str, float]
