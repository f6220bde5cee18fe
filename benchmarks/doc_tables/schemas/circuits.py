"""Schemas of the circuits benchmarks' data files (docs/circuits.md, docs/edges.md, docs/ioi.md,
docs/aie.md and the README): each writer in benchmarks/ builds these, each renderer in
doc_tables/circuits.py (and readme.py's ``sink``) reads them."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from . import MeanSD, Provenance
from .timing import PairKind, PeerComparison, RatioRecord, TimingRecord

# --- benchmarks/induction.py -> docs/data/induction.json ---------------------------------------


class InductionRun(TypedDict):
    """One draw of repeated random tokens (``HeadScoreConfig(seed=seed)``)."""

    seed: int
    scores: dict[str, float]
    """Every head's induction score, highest first ("L3.H0": 0.87)."""
    heads_above: list[str]
    loss_clean: float
    loss_ablated: float
    loss_random: float
    """Second-half loss with as many random other heads mean-ablated (mean of the draws)."""
    seconds: float


class InductionSummary(TypedDict):
    top_heads_of_seed_0: dict[str, MeanSD]
    n_heads_above: MeanSD
    loss_clean: MeanSD
    loss_ablated: MeanSD
    loss_random: MeanSD


class InductionSequences(TypedDict):
    n: int
    half_length: int


class InductionData(TypedDict):
    model: str
    threshold: float
    sequences: InductionSequences
    random_draws: int
    runs: list[InductionRun]
    summary: InductionSummary


# --- benchmarks/sink.py -> docs/data/sink.json ---------------------------------------------------


class SinkPair(TypedDict):
    """One hand-picked IOI prompt: logit(IO) − logit(S) at the last token, and the top token."""

    prompt: str
    io: str
    s: str
    logit_diff: float
    top_token: str


class SinkPrompts(TypedDict):
    """The logit difference over the IOI prompts: mean, standard error, prompts above zero."""

    n: int
    mean: float
    se: float
    n_positive: int


class SinkRun(TypedDict):
    sink: str | None
    hand_written: SinkPair
    tour: SinkPair
    p_paris: float
    ioi_prompts: SinkPrompts


class SinkDraw(TypedDict):
    n: int
    templates: int
    seed: int


class SinkData(TypedDict):
    model: str
    ioi_prompts: SinkDraw
    runs: dict[str, SinkRun]
    """By sink label: "default", "none", "<|im_start|>"."""


# --- benchmarks/causal_trace.py -> docs/data/causal_trace_eiffel.json ----------------------------


class TracePeak(TypedDict):
    """The largest restoration of one per-layer curve: its layer, value and standard error."""

    token: str
    layer: int
    value: float
    se: float


class TraceSummary(TypedDict):
    resid_middle_subject: TracePeak
    resid_last_subject: TracePeak
    resid_first_subject: TracePeak
    resid_last_token_half_from: int | None
    """The first layer whose restored last-token residual gives back half the clean p."""
    resid_last_token_top: TracePeak
    attn_last_token: TracePeak
    mlp_last_subject: TracePeak
    mlp_middle_subject: TracePeak


class MLPOnlyTrace(TypedDict):
    """The MLP-only trace ``traced_layer`` runs, for one noise seed: its peak at the last subject
    token, the effect over the corrupted run ± the paired standard error, and the clean − corrupted
    gap."""

    seed: int
    layer: int
    effect: float
    se: float
    gap: float


class CausalTraceData(TypedDict):
    model: str
    prompt: str
    subject: str
    target: str
    tokens: list[str]
    subject_positions: list[int]
    noise_scale: float
    noise_samples: int
    window: int
    kinds: list[str]
    clean_prob: float
    corrupted_prob: float
    corrupted_se: float
    values: list[list[list[float]]]
    """Restored p(target) by [kind, layer, position]."""
    se: list[list[list[float]]]
    """Its standard error over the noise samples, by [kind, layer, position]."""
    summary: TraceSummary
    seconds: float
    mlp_only_subject: str
    mlp_only: list[MLPOnlyTrace]


# --- benchmarks/ioi.py -> docs/data/ioi.json -----------------------------------------------------


class IOIHead(TypedDict):
    """One circuit head and its evidence (``CircuitHead``); ``path_patching`` null when not measured."""

    head: str
    role: str
    dla: float
    attn_end_io: float
    attn_end_s: float
    path_patching: float | None
    score: float


class IOIDraw(TypedDict):
    """The circuit found on one prompt draw, with every figure and head the docs quote."""

    n_prompts: int
    logit_diff: float
    logit_diff_se: float
    fraction_positive: float
    logit_diff_circuit: float
    faithfulness: float
    logit_diff_without_name_movers: float
    name_mover_removed: float
    n_heads: int
    classes: dict[str, list[str]]
    heads: list[IOIHead]
    top_dla_outside_circuit: list[tuple[str, float]]
    """Heads outside the circuit with the largest DLA, as [head, DLA] (the next backup candidates)."""
    seconds: float


class IOIRun(IOIDraw):
    seed: int


class IOITour(IOIDraw):
    """The draw `lmsci-mi tour` makes (8 prompts of the first template)."""

    config: str
    templates: int


class IOISpread(TypedDict):
    """A figure over seeds: mean, sample standard deviation (null below two), min and max."""

    mean: float
    sd: float | None
    min: float
    max: float


class IOISummary(TypedDict):
    n_seeds: int
    logit_diff: IOISpread
    fraction_positive: IOISpread
    faithfulness: IOISpread
    name_mover_removed: IOISpread
    n_heads: IOISpread
    heads_by_class: dict[str, dict[str, int]]
    """For each class, each head and in how many seeds it was put there."""


class _IOIData(TypedDict):
    model: str
    n_layers: int
    n_prompts: int
    templates: int
    config: str
    runs: list[IOIRun]
    summary: IOISummary


class IOIData(_IOIData, total=False):
    tour: IOITour


# --- benchmarks/heads.py -> docs/data/heads.json (no page renders it yet) ------------------------


class HeadsRow(TypedDict):
    """One way to score every head: its best time, forward passes, and largest difference from
    the batched scores."""

    method: str
    seconds: float
    ratio_to_batched: float
    passes: int
    max_abs_diff: float


class HeadsData(TypedDict):
    model: str
    n_sequences: int
    tokens: int
    repeats: int
    rows: list[HeadsRow]


# --- benchmarks/aie.py -> docs/data/aie.json -----------------------------------------------------


class AIEPeak(TypedDict):
    """The peak of one kind's curve for one token category: layer, AIE, 95 % half-band, facts."""

    layer: int
    aie: float
    band95: float
    n: int


class AIEMLPCheck(TypedDict, total=False):
    """Where the MLP's last-subject-token curve peaks (empty when the run restores no MLP)."""

    mlp_last_subject_peak_layer: int
    n_layers: int
    window_holds_layer_0: bool
    mid_layer: bool
    peak_over_last_token_mlp_at_that_layer: float


class AIEPoint(TypedDict):
    """One window's value on a curve: its centre layer, the layers it restores, AIE and band."""

    layer: int
    layers: list[int]
    """The window's first and last layer restored."""
    aie: float
    band95: float
    of_gap: float
    """aie / (clean_mean − corrupted_mean): the share of the clean-to-corrupted gap restored."""


class AIELocalisation(TypedDict):
    """Where the MLP (last subject token) and attention (last token) effects sit, from the run's
    curves: the numbers docs/aie.md's conclusions quote, computed alike for every window."""

    gap: float
    mlp_peak: AIEPoint
    mlp_peak_without_layer_0: AIEPoint
    """The largest MLP window that leaves layer 0 out."""
    mlp_middle_max: AIEPoint
    """The largest MLP value among the middle layers (``middle`` below)."""
    mlp_before_middle: AIEPoint
    """The largest MLP value before the middle layers."""
    mlp_middle_bump: bool
    """A mid-layer peak: ``mlp_middle_max`` exceeds ``mlp_before_middle`` by more than the two
    95 % half-bands added (``rule``)."""
    middle: list[int]
    """The middle third of the layers: n_layers // 3 to (2 · n_layers) // 3, as ``mlp_check``."""
    attn_peak: AIEPoint
    attn_half: AIEPoint
    """The first window whose attention effect at the last token reaches half of the peak."""
    rule: str


class AIERun(TypedDict):
    """One piece (a model and a corruption) over the shipped fact set."""

    model: str
    corruption: str
    metric: str
    n_facts: int
    n_known: int
    n_candidates: int
    n_unpaired: int
    n_per_category: dict[str, int]
    clean_mean: float
    corrupted_mean: float
    noise_scale: float
    window: int
    kinds: list[str]
    peaks: dict[str, AIEPeak]
    """By "kind/category"."""
    mlp_check: AIEMLPCheck
    curves: dict[str, dict[str, list[float]]]
    """AIE per layer, by kind then category."""
    band95: dict[str, dict[str, list[float]]]
    seconds_per_fact: float | None
    n_samples: int
    complete: bool
    n_planned: int
    localisation: NotRequired[AIELocalisation]
    """Written for every run with mlp and attn kinds (those kept from an earlier file too)."""
    window_rule: NotRequired[str]
    """How a window given as a fraction of depth became layers."""
    n_cap: NotRequired[int]
    """Only the first this many of the ``n_planned`` facts were traced (the compute budget)."""
    threads: NotRequired[int | None]
    """Torch threads of the tracing runs (absent: written before it was recorded, 2 threads)."""


AIEData = TypedDict("AIEData", {
    "categories": list[str],
    "smollm2-str": AIERun,
    "gemma3-str": AIERun,
    "smollm2-gaussian": AIERun,
    "smollm2-sever": AIERun,
    "smollm2-str-w1": AIERun,
    "gemma3-str-w1": AIERun,
    "smollm2-str-w0.2": AIERun,
    "gemma3-str-w0.2": AIERun,
    "smollm2-gaussian-w0.2": AIERun,
    "smollm2-gaussian-w1": AIERun,
    "run_provenance": dict[str, Provenance],
}, total=False)
"""The token categories, each piece written so far by its name (``PIECES`` of the script), and
each piece's provenance (a piece kept from an earlier file keeps the run that wrote it)."""


# --- benchmarks/edges.py -> docs/data/edges.json; peers_auto_circuit.py -> edges_peers.json -------


class EdgeCurve(TypedDict):
    """One scoring method's faithfulness curve under one pruning, at the data's ``fractions``."""

    faithfulness: list[float]
    kept: list[int]
    ci95: list[list[float]] | None
    """The 95 % bootstrap interval over prompts at each budget, as [low, high]."""
    cpr: float
    cmd: float
    seconds: float
    clean: float
    corrupted: float


class EdgeCircuit(TypedDict, total=False):
    """The EAP-IG greedy circuit at 5 % of edges (``has_name_movers`` once the movers are found)."""

    faithfulness: float
    edges: int
    nodes: int
    heads: list[str]
    has_name_movers: bool


class EdgeView(TypedDict):
    fraction: float
    edges: int
    nodes: int


class EdgeExact(TypedDict):
    """Single-edge circuits scored exactly: the batched evaluator against one pass per edge."""

    edges: int
    batched_s: float
    per_edge_pass_s: float
    """Timed on ``per_edge_measured_edges`` edges and scaled to ``edges``."""
    per_edge_measured_edges: int
    speedup: float
    max_abs_diff: float


class EdgeSteps(TypedDict):
    """EAP-IG with more integration steps: the greedy circuits at a few budgets."""

    seconds: float
    fractions: list[float]
    faithfulness: list[float]
    ci95: list[list[float]] | None
    has_name_movers_5pct: bool


class PeerScores(TypedDict):
    edges: int
    max_abs_diff: float
    max_abs_score: float


class AutoCircuitPair(PairKind):
    """One kind of prompt pair (one token swapped half-way, or at position 0), both measurements
    timed under benchmarks/timing.py's protocol."""

    peer_options: str
    """auto-circuit's own speed options as run (its prefix option: ``diverge_idx`` and KV cache)."""
    eap: PeerComparison
    patch_10_circuits: PeerComparison
    agree_eap: float
    """max |ours + auto-circuit's| over edges (its score is minus ours), same inputs."""


class PeerTiming(TypedDict):
    model: str
    edges: int
    prompts: int
    tokens: int
    auto_circuit_version: str
    pairs: list[AutoCircuitPair]


class _EdgesPeersData(TypedDict):
    scores: PeerScores
    """Our EAP against auto-circuit's on toy-gpt2-2l (tests/data/auto_circuit_eap.json)."""


class EdgesPeersData(_EdgesPeersData, total=False):
    timing: PeerTiming
    """On a GPT-2-small-sized random model (absent with --skip-timing)."""


EdgesData = TypedDict("EdgesData", {
    "model": str,
    "prompts": int,
    "corruption": str,
    "graph": str,
    "edges": int,
    "fractions": list[float],
    "metric": str,
    "cpr_cmd_axis": str,
    "seconds_EAP-IG": float,
    "seconds_EAP": float,
    "curve_EAP-IG_greedy": EdgeCurve,
    "curve_EAP-IG_topn": EdgeCurve,
    "curve_EAP_greedy": EdgeCurve,
    "curve_EAP_topn": EdgeCurve,
    "eap_ig_5pct": EdgeCircuit,
    "circuit_view": EdgeView,
    "name_movers_dla": list[tuple[str, float]],
    "exact_200": EdgeExact,
    "eap_ig_steps": dict[str, EdgeSteps],
    "peers": EdgesPeersData,
}, total=False)
"""Each stage of benchmarks/edges.py adds its keys ("seconds_METHOD", "curve_METHOD_PRUNE", ...)."""


# --- benchmarks/patching.py -> docs/data/patching.json -------------------------------------------


class SectionMeta(TypedDict):
    """Each section's own run (sections are measured by separate runs, nnsight's in another venv)."""

    date: str
    threads: int
    matmul_gflops: float
    n_tokens: int
    command: str


class TLRow(PeerComparison, PairKind):
    """One sweep on one kind of pair (the IOI pair, sharing its first 10 of 15 tokens, or one that
    differs from the first token) against TransformerLens's patcher, both sides timed under
    benchmarks/timing.py's protocol, with its compute floors."""

    sweep: str
    max_abs_diff: float
    floor_s: float
    """FLOPs of resuming each row at its layer over the measured matmul rate."""
    prefix_floor_s: float
    """FLOPs of the positions from each row's first change on (what prefix reuse allows)."""
    passes: int


class TLSection(SectionMeta):
    rows: list[TLRow]
    forward_s: float
    transformer_lens_version: str | None


class TraceSection(SectionMeta):
    sweep: str
    lmsci_mi_s: float
    naive_s: float
    naive_timed_layers: int
    speedup: float
    max_abs_diff: float
    prefix_floor_s: float


class AttributionSection(SectionMeta):
    heads: int
    seconds: float
    forward_s: float
    forward_pass_equivalents: float
    spearman_vs_exact: float


class NNsightPair(PairKind):
    """The head sweep on one kind of pair: lmsci-mi and each nnsight form timed together."""

    timing: TimingRecord
    """Sides: ``lmsci_mi`` and the keys of the section's ``forms``."""
    ratios: dict[str, RatioRecord]
    """By form: its median over lmsci-mi's."""
    max_abs_diff: dict[str, float]


class NNsightSection(SectionMeta):
    sweep: str
    nnsight_version: str
    forms: dict[str, str]
    """Side key -> what the form runs ("nnsight batched, 27 invokes per trace (2 traces)")."""
    pairs: list[NNsightPair]
    model: str


class PatchingSections(TypedDict, total=False):
    transformer_lens: TLSection
    trace: TraceSection
    attribution: AttributionSection
    nnsight: NNsightSection


class PatchingData(TypedDict):
    sections: PatchingSections
    """A run writes the sections it measured; the others keep their numbers."""


# --- benchmarks/guard_null.py -> docs/data/guard_null.json -------------------------------------


class GuardTrace(TypedDict):
    """One MLP-only trace at the last subject token, and every traced-layer guard's verdict."""

    prompt: str
    subject: str
    target: str
    seed: int
    """The noise seed."""
    clean_prob: float
    corrupted_prob: float
    layer: int
    """The peak layer (``peak_effect``)."""
    effect: float
    se: float
    old_accepted: bool
    """effect > 2 se: the guard before issue 37."""
    p_value: float
    """``peak_test``: the max-over-layers sign-flip p-value."""
    test_layer: int
    peak_accepted: bool
    """p_value <= alpha: the peak test alone (the guard of issue 37's first pass)."""
    corrupted_samples: list[float]
    """p(target) on each noise sample's corrupted run."""
    gap: float
    """``gap_test``'s statistic: clean_prob minus the mean of corrupted_samples."""
    gap_p_value: float
    """``gap_test``: the one-sided sign-flip p-value of clean minus each corrupted sample."""
    gap_accepted: bool
    """gap_p_value <= alpha."""
    gap_peak_accepted: bool
    """gap_accepted and peak_accepted: ``traced_layer``'s guard before the material gap."""
    material_accepted: bool
    """``traced_gap_is_material(clean_prob, corrupted_prob)``: the gap at least min_gap and at
    least min_gap_share of clean_prob."""
    accepted: bool
    """gap_accepted, material_accepted and peak_accepted: what ``traced_layer`` accepts."""
    confident_accepted: bool
    """accepted and clean_prob >= confident_p (measured, not in ``traced_layer``)."""


class GuardRate(TypedDict):
    n: int
    accepted: int
    rate: float
    interval: list[float]
    """Wilson 95 %."""


class GuardSet(TypedDict):
    definition: str
    old: GuardRate
    """The peak above 2 s.e. of its layer (the guard before issue 37)."""
    peak: GuardRate
    """The peak test alone."""
    gap: GuardRate
    """The gap test alone."""
    gap_and_peak: GuardRate
    """The gap and peak tests: ``traced_layer``'s guard before the material gap."""
    material: GuardRate
    """The material-gap condition alone."""
    guard: GuardRate
    """Gap, material gap and peak: ``traced_layer``'s guard."""
    confident: GuardRate
    """The guard and a confident answer (clean p >= confident_p): measured, not in ``traced_layer``."""
    positive_peaks: int
    """Traces whose peak effect is above zero."""
    clean_above_corrupted: int
    """Traces whose target is more probable on the clean run than on the corrupted one."""
    traces: list[GuardTrace]


class GuardNullData(TypedDict):
    model: str
    alpha: float
    noise_samples: int
    window: int
    noise: float
    max_clean_p: float
    min_gap: float
    """``MIN_TRACED_GAP``: the least clean − corrupted p(answer) of a material gap."""
    min_gap_share: float
    """``MIN_TRACED_GAP_SHARE``: the least share of the clean p(answer) the gap must be."""
    confident_p: float
    """The least clean p(answer) of the confident-answer condition (benchmarks/guard_null.py)."""
    null: GuardSet
    """Traces with no fact, a random target (draw 0, seen before the material-gap rule was
    stated): the share accepted is the false-positive rate."""
    null_fresh: GuardSet
    """The same prompts, fresh random targets (draws 1 on, run after the rule was fixed)."""
    made_up: GuardSet
    """The facts' templates about made-up subjects, traced for the clean top-1 (run after the
    material-gap rule was fixed)."""
    made_up_fresh: GuardSet
    """Fresh made-up subjects (run after the confident-answer condition was stated)."""
    known: GuardSet
    """Known facts for their true answer: the share accepted is the power."""
    eiffel: GuardSet
    """The editing fact of docs/editing.md at noise seeds 0-3."""
