"""Schemas of the editing benchmarks' data files (docs/editing.md and the README): each writer in
benchmarks/ builds these, each renderer in doc_tables/editing.py (and readme.py's editing rows)
reads them."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

# --- benchmarks/editing.py --speed and --floor -> docs/data/editing_speed.json ----------------


class _CostRowOptional(TypedDict, total=False):
    wall_s_each: list[float]
    """Each timed edit's wall seconds (the row of several ROME edits)."""


class CostRow(_CostRowOptional):
    """One timed operation: wall and CPU seconds (CPU null where not measured), its target."""

    what: str
    wall_s: float
    cpu_s: float | None
    target_s: float | None
    date: str


class CostBefore(TypedDict):
    """Issue 21's figures from before the speed work (quoted, not measured by the script)."""

    source: str
    rome_edit_s: str
    memit_50_facts_s: float
    evaluation_one_fact_s: float


class RomeFloor(TypedDict):
    """ROME's counted arithmetic with one fit and layout (issue 38: the paper's settings with only
    the positions they need, and the edit-aware fit padded as before)."""

    label: str
    config: dict[str, Any]
    gflop_per_edit: list[float]
    gflop_mean: float
    real_tokens_each: list[int]
    padded_tokens_each: list[int]
    padding_share: float
    """Padded positions over all positions run through the blocks above the layer (the fit's
    passes; the unedited run and the unembedding are not positions of the blocks)."""


class MemitFloor(TypedDict, total=False):
    """MEMIT's counted arithmetic with one fit (issue 38: the paper's fit, and the defaults of
    before), per fact over a whole edit with every δ fitted."""

    label: str
    config: dict[str, Any]
    n_facts: int
    gflop_per_fact: float
    fit_steps_each: list[int]
    real_tokens: int
    padded_tokens: int
    padding_share: float
    compute_z_gflop_per_fact: float
    """The paper's fit only: MEMIT's own code (every row padded through the whole model, logits
    at every position) for the same steps: the method's arithmetic as its code runs it."""


class MemitFitRun(TypedDict):
    """One timed MEMIT edit (--speed): its fit's steps and the positions it ran."""

    label: str
    config: dict[str, Any]
    n_facts: int
    wall_s: float
    cpu_s: float
    fit_steps_each: list[int]
    real_tokens: int
    padded_tokens: int
    padding_share: float
    date: str


class MemitFits(TypedDict):
    threads: int
    quiet: bool
    runs: list[MemitFitRun]


class _ArithmeticFloorOptional(TypedDict, total=False):
    memit: list[MemitFloor]
    """Written by --floor with --floor-memit N (issue 38)."""


class ArithmeticFloor(_ArithmeticFloorOptional):
    """FLOPs per edit over the CPU's float32 matmul rate: the least time an edit can take here,
    with these settings, at that rate."""

    date: str
    matmul_gflops: dict[str, float]
    """GFLOP/s by thread count ("1", "2")."""
    rome: list[RomeFloor]
    rome_layer: int
    memit_gflop_per_fact: float
    memit_facts_counted: int
    rome_target_s: float
    memit_50_floor_s: float
    memit_target_s: float
    how: str


class RomeFitRun(TypedDict):
    """One ROME fit timed on each speed fact (issue 38: the edit-aware fit padded, before, and
    the paper's fit grouped, after), alternated fact by fact in one run."""

    label: str
    config: dict[str, Any]
    """``ROMEConfig.params()``."""
    wall_s_each: list[float]
    cpu_s_each: list[float]
    median_s: float
    min_s: float
    max_s: float
    steps_each: list[int]
    real_tokens_each: list[int]
    padded_tokens_each: list[int]
    padding_share: float
    """Padded over all positions run, summed over the facts."""
    p_new_each: list[float]
    """p(target_new) after the rewrite prompt on the edited model (``target_probabilities``)."""
    p_true_each: list[float]
    installed: int
    """Facts with p(new) > p(true) after the edit."""


class RomeFits(TypedDict):
    date: str
    threads: int
    quiet: bool
    """False: other jobs shared the CPU, so the times are an upper reading, not the acceptance run."""
    facts: list[str]
    """The speed facts' subjects (the first of ``load_facts()``)."""
    runs: list[RomeFitRun]


class _EditingSpeedOptional(TypedDict, total=False):
    arithmetic_floor: ArithmeticFloor
    """Written by --floor, kept by --speed."""
    rome_fits: RomeFits
    """Written by --speed (ROME's rows), kept by a run that does not time ROME."""
    memit_fits: MemitFits
    """Written by --speed (MEMIT's rows), kept by a run that does not time MEMIT."""
    alphaedit_fits: MemitFits
    """Written by --speed (AlphaEdit's rows, its δ fits included), kept by a run that does not
    time AlphaEdit."""


class EditingSpeedData(_EditingSpeedOptional):
    model: str
    stats_tokens: int
    rome_layer: int
    memit_layers: list[int]
    rows: list[CostRow]
    """A partial --speed run keeps the rows it did not measure."""
    before_issue_21: CostBefore


# --- benchmarks/editing.py --table -> docs/data/editing_table.json ----------------------------


class EditRow(TypedDict):
    """One model or method over the first ``n_facts`` facts of the seeded order."""

    model: str
    """"unedited", or the method's name ("rome", "memit", "alphaedit")."""
    n_facts: int
    probe_facts: dict[str, int]
    """The facts that carry each messy-knowledge probe (NEG, REV, 2HOP, ORL): its sample size."""
    other_relation_prompts: int
    n_edits: int
    seconds_per_edit: float | None
    metrics: dict[str, float]
    """Every metric of ``lmsci_mi.editing.METRICS`` (percent; GE in its own unit)."""
    ci95: dict[str, list[float]]
    """Each metric's 95 % percentile-bootstrap interval over facts, ``[low, high]``."""


class EditingTableData(TypedDict):
    model: str
    facts: str
    n_facts: int
    stats_tokens: int
    stats_source: str
    generation_tokens: int
    interval: str
    configs: dict[str, dict[str, Any]]
    """Each method's hyperparameters (``Config.params()``)."""
    rows: list[EditRow]
    before_38: NotRequired[dict[str, dict[str, dict[str, Any]]]]
    """--before: per method, new - before issue 38 of S, ES, PS and NS on the same facts
    (``Interval.as_dict()``: estimate, paired percentile bootstrap bounds, n)."""


# --- benchmarks/rome_layers.py -> docs/data/rome_layers.json ----------------------------------


class RomeLayer(TypedDict):
    """ROME at one layer over the chosen facts: each metric, its 95 % interval, the unedited row."""

    n_facts: int
    seconds_per_edit: float
    S: float
    ES: float
    PS: float
    NS: float
    GE: float
    S_ci: list[float]
    ES_ci: list[float]
    PS_ci: list[float]
    NS_ci: list[float]
    GE_ci: list[float]
    unedited: dict[str, float]


class RomeLayersData(TypedDict):
    model: str
    facts: list[str]
    """The edited facts' subjects."""
    stats_tokens: int
    generation_tokens: int
    interval: str
    best_layer_by_S: int
    layers: dict[str, RomeLayer]
    """By layer ("0", "2", ...)."""


# --- benchmarks/alphaedit.py -> docs/data/alphaedit.json, alphaedit_tokens.json ---------------


class Spectrum(TypedDict):
    """The largest, median and smallest eigenvalue of a layer's key covariance C."""

    max: float
    median: float
    min: float


class AlphaEditData(TypedDict):
    model: str
    layers: list[int]
    config: dict[str, Any]
    stats_tokens: int
    stats_source: str
    d_mlp: int
    eigenvalues: dict[str, Spectrum]
    null_space_dims: dict[str, int]
    key_share_kept: dict[str, float]
    """By layer: the share of the edit's keys the null-space projector keeps."""
    facts: list[str]
    p_new_before: list[float]
    p_new_after: list[float]
    seconds: float


class AlphaEditTokensData(TypedDict):
    model: str
    threshold: float
    d_mlp: int
    source: str
    null_space_dims_by_tokens: dict[str, dict[str, int]]
    """By the statistics' token count, then by layer; the largest count is the default budget."""


# --- benchmarks/sequential_editing.py -> docs/data/sequential_editing.json --------------------


class _CurveOptional(TypedDict, total=False):
    complete: bool
    """False on a --partial write of a method whose session has not reached the last edit."""
    wild: dict[str, list[float | None]]
    """Issue 38: WILD-EM per step (percent): rewrite, paraphrase, locality; null where a --partial
    write found the step not judged yet. Absent in a file written before (or with --no-wild)."""
    wild_n: dict[str, list[int | None]]
    """Prompts each WILD-EM rate counts, per step."""
    wild_ci95: dict[str, list[list[float] | None]]
    """Each WILD-EM rate's 95 % Wilson interval ``[low, high]`` in percent, per step."""
    wild_seconds: list[float | None]
    """Seconds of WILD-EM generation at each step (not part of the edits' seconds)."""


class SequentialCurve(_CurveOptional):
    """One method's evaluated steps (step 0: the unedited model)."""

    batch_size: int
    n_edited: list[int]
    seconds: list[float]
    """Seconds of edits so far at each step."""
    metrics: dict[str, list[float]]
    """ES, PS, NS, specificity (percent) and GE per step."""
    config: dict[str, Any]
    n: dict[str, list[int]]
    """Prompts each percentage counts, per step."""
    se: dict[str, list[float]]
    """One binomial standard error in points, per step."""


class SequentialEditingData(TypedDict):
    model: str
    n_facts: int
    order_seed: int
    every: int
    stats_tokens: int | None
    metrics: str
    methods: dict[str, SequentialCurve]
    wild: NotRequired[dict[str, Any]]
    """``WildConfig.params()`` of the WILD-EM columns (issue 38); absent when not measured."""
    wild_metrics: NotRequired[str]
    """What the WILD-EM fields of each curve count."""


# --- benchmarks/fact_sets.py -> docs/data/fact_sets.json --------------------------------------


class KnownFacts(TypedDict):
    """lmsci_mi/data/facts.json: the causal-tracing and ROME/MEMIT fact set."""

    file: str
    model: str
    rule: str
    n_candidates: int
    n_facts: int
    relations: dict[str, int]


class RelationCount(TypedDict):
    relation: str
    words: str
    """What the relation asks, in the table's words."""
    facts: int


class MessyCounts(TypedDict):
    """Facts that carry each messy-knowledge probe."""

    negated: int
    reverse: int
    two_hop: int
    other_relation: int
    other_relation_prompts: int


class ProbeExamples(TypedDict):
    """The file's first fact with each probe, with what the probe reads."""

    negated: dict[str, str]
    reverse: dict[str, str]
    two_hop: dict[str, str]
    other_relation: dict[str, str]


class EditFacts(TypedDict):
    """lmsci_mi/data/edit_facts.json: the editing fact set of issue 21."""

    file: str
    model: str
    rule: str
    n_candidates: int
    n_facts: int
    relations: list[RelationCount]
    messy: MessyCounts
    examples: ProbeExamples


class RebuiltSet(TypedDict):
    """One set selected again: its time, the prompts run, and how it compares with the shipped."""

    seconds: float
    cpu_seconds: float
    prompts: int
    n_facts: int
    equal_to_shipped: bool
    only_shipped: list[str]
    only_rebuilt: list[str]
    fields_differing: dict[str, int]
    max_p_true_difference: float


class Rebuild(TypedDict):
    threads: int
    date: str
    facts: RebuiltSet
    edit_facts: RebuiltSet


class FactSetsData(TypedDict):
    known_facts: KnownFacts
    edit_facts: EditFacts
    rebuild: Rebuild | None
    """The last --rebuild's record (a run without --rebuild keeps it)."""
