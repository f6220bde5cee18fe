"""Schemas of the knowledge and lens benchmarks' data files (docs/knowledge.md,
docs/knowledge_neurons.md, docs/lenses.md and the README): each writer in benchmarks/ builds these,
each renderer in doc_tables/knowledge.py (and readme.py's knowledge-neuron row) reads them."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

# --- benchmarks/knowledge_neurons.py -> docs/data/knowledge_neurons.json ----------------------


class NeuronsSpeed(TypedDict):
    """--speed: ``integrated_gradients`` against the knowledge-neurons package's scheme."""

    prompt: str
    target: str
    layers: int
    neurons: int
    steps: int
    ours_s: list[float]
    package_scheme_s: float
    speedup: float
    max_relative_score_difference: float
    torch_threads: int
    top_neurons: list[str]


class Scaling(TypedDict):
    """Mean relative change of p(answer) under suppression (x0) and enhancement (x2)
    (``lmsci_mi.knowledge.ScalingEffect.as_dict()``)."""

    suppress: float
    enhance: float


class Probabilities(TypedDict):
    """p(answer) per prompt before and with the neurons x0 / x2
    (``lmsci_mi.knowledge.ScaledProbabilities.as_dict()``)."""

    before: list[float]
    suppress: list[float]
    enhance: list[float]


class NeuronsProbabilities(TypedDict):
    """Per neuron set, p(answer) per prompt: the measurements both measures are computed from."""

    knowledge: Probabilities
    random: Probabilities
    activation: Probabilities
    activation_top: Probabilities
    other_facts: Probabilities


class _NeuronsFactOptional(TypedDict, total=False):
    # Written since issue 37 (Dai et al.'s protocol); absent from rows of earlier runs.
    activation_neurons: list[list[int]]
    """Dai et al.'s baseline: their refinement on the activations (``activation_neurons``)."""
    activation_top: list[list[int]]
    """As many neurons as ``neurons``, the largest mean activations (``top_activation_neurons``)."""
    probabilities: NeuronsProbabilities


class NeuronsFact(_NeuronsFactOptional):
    """One fact's knowledge neurons and the suppress/enhance test with its controls."""

    index: int
    subject: str
    relation: str
    target: str
    neurons: list[list[int]]
    """``[layer, neuron]`` pairs."""
    ig_seconds: float
    knowledge: Scaling
    random: Scaling
    other_facts: Scaling


class MeanCI(TypedDict):
    """A mean over facts with its 95 % percentile-bootstrap interval ``[low, high]``."""

    mean: float
    ci95: list[float]


class ScalingCell(TypedDict):
    suppress: MeanCI
    enhance: MeanCI


class NeuronsCells(TypedDict):
    knowledge: ScalingCell
    random: ScalingCell
    other_facts: ScalingCell


class NeuronsTable(TypedDict):
    """--table: the suppress/enhance table over facts with knowledge neurons."""

    model: str
    complete: bool
    n_facts: int
    n_facts_with_neurons: int
    prompts_per_fact: int
    other_facts_per_fact: int
    config: dict[str, Any]
    neurons_per_fact: list[int]
    layer_histogram: dict[str, int]
    cells: NeuronsCells
    ig_seconds_per_fact: float
    facts: list[NeuronsFact]


class EstimateCI(TypedDict):
    """A statistic over facts with its 95 % percentile-bootstrap interval (``n`` facts)."""

    estimate: float
    ci95: list[float]
    n: int


class ChangeCell(TypedDict):
    """``lmsci_mi.knowledge.ChangeSummary.as_dict()``: one neuron set, one operation."""

    mean: EstimateCI
    median: EstimateCI
    n_negative: int
    dai: EstimateCI
    dai_by_relation: dict[str, float]


class ProtocolRow(TypedDict):
    """One neuron set on one set of prompts, under both measures."""

    neurons: str
    """``knowledge``, ``random``, ``activation``, ``activation_top`` or ``other_facts``."""
    neurons_per_fact: list[int]
    suppress: ChangeCell
    enhance: ChangeCell


class NeuronsProtocol(TypedDict):
    """--table: our measure (mean and median over facts of the mean per-prompt ratio) beside Dai
    et al.'s (ratio of means per relation, averaged over relations), per neuron set."""

    model: str
    complete: bool
    n_facts: int
    relations: dict[str, int]
    """Facts per relation."""
    n_resamples: int
    rows: list[ProtocolRow]


class ParaphraseSize(TypedDict):
    """The knowledge neurons refined on the first ``k`` prompts, over the facts."""

    k: int
    neurons_per_fact: list[int]
    jaccard_to_largest: list[float]
    """Per fact, the overlap with the set refined on the most prompts."""
    suppress: ChangeCell
    enhance: ChangeCell


class ParaphraseFact(TypedDict):
    subject: str
    relation: str
    target: str
    prompts: int
    ig_seconds: float
    neurons: dict[str, list[list[int]]]
    """``{str(k): [[layer, neuron], ...]}``."""
    jaccard_to_largest: dict[str, float]
    probabilities: dict[str, Probabilities]
    """``{str(k): p(answer) on all the fact's prompts with the k-prompt set scaled}``."""


class NeuronsParaphrases(TypedDict):
    """--paraphrases: the refinement's sensitivity to the number of prompts per fact."""

    model: str
    complete: bool
    source: str
    n_facts: int
    sizes: list[int]
    evaluated_on: str
    sizes_summary: list[ParaphraseSize]
    facts: list[ParaphraseFact]


class KnowledgeNeuronsData(TypedDict, total=False):
    """Each part writes its own section and keeps the others'."""

    speed: NeuronsSpeed
    table: NeuronsTable
    protocol: NeuronsProtocol
    paraphrases: NeuronsParaphrases


# --- benchmarks/kv_memories.py -> docs/data/kv_memories.json ----------------------------------


class AgreementLayer(TypedDict):
    """Key-value agreement at one layer, and with the pairs shuffled, ± binomial s.e."""

    layer: int
    agreement: float
    agreement_se: float
    shuffled: float
    shuffled_se: float
    n_pairs: int
    seconds: float
    source: str


class Trigger(TypedDict):
    coefficient: float
    context: str
    """The text before the key token, the key token in brackets."""
    next: str


class ValueVectorRow(TypedDict):
    """One of the most coherent value vectors: both projections' top tokens and its triggers."""

    neuron: str
    layer: int
    index: int
    side: str
    coherence: float
    normed_top: list[str]
    normed_bottom: list[str]
    raw_top: list[str]
    raw_bottom: list[str]
    triggers: list[Trigger]


EiffelSubUpdates = TypedDict(
    "EiffelSubUpdates",
    {
        "prompt": str,
        "target": str,
        "logit": float,
        "mlp_total": float,
        "top_k": int,
        "top_share": float,
        "mass_share": float,
        "mlp_total_by_layer": list[float],
        # The neurons that raise (lower) the target's logit most: [name, effect, coefficient].
        "raise": list[list[Any]],
        "lower": list[list[Any]],
        "seconds": float,
    },
)
"""The Eiffel fact's sub-updates (functional form: ``raise`` is a keyword)."""


class _KVModelOptional(TypedDict, total=False):
    value_table: list[ValueVectorRow]
    eiffel_subupdates: EiffelSubUpdates


class KVModel(_KVModelOptional):
    agreement: list[AgreementLayer]
    agreement_config: dict[str, Any]


class KVMemoriesData(TypedDict):
    models: dict[str, KVModel]


# --- benchmarks/tuned_lens.py -> docs/data/tuned_lens.json ------------------------------------


class LensCurve(TypedDict):
    """Per layer: the mean over texts of each text's mean over its tokens, and a 95 % percentile
    bootstrap interval over texts (or, under ``tuned_minus``, the paired difference)."""

    kl: list[float]
    kl_ci: list[list[float]]
    calibration: list[float]
    calibration_ci: list[list[float]]


class LensSet(TypedDict):
    """One held-out set of a kind the lenses never trained on."""

    set: str
    source: str
    n_texts: int
    n_tokens: int
    lenses: dict[str, LensCurve]
    """``logit``, ``least_squares``, ``tuned``."""
    tuned_minus: dict[str, LensCurve]
    """Paired differences, tuned minus ``least_squares`` and minus ``logit``."""
    seconds: float


class LensEiffel(TypedDict):
    """p(answer), its rank and the top token at the last position, per layer, under each lens."""

    prompt: str
    answer: str
    model_prob: float
    prob: dict[str, list[float]]
    rank: dict[str, list[int]]
    top: dict[str, list[str]]


class LensTraining(TypedDict):
    """How one lens of the comparison was trained, and what it cost here."""

    method: str
    config: dict[str, Any]
    train_seconds: float
    train_tokens: int
    losses: list[float]
    """The KL training curve (mean KL over layers per step; empty for least squares)."""
    layer_losses: NotRequired[list[list[float]]]
    """Per step, each layer's KL (empty where the lens file predates the record)."""
    grad_norms: NotRequired[list[list[float]]]
    """Per step, each layer's gradient norm before clipping."""


class ClipRun(TypedDict):
    """Diagnostic: one KL-trained lens (the paper's global clip, or per-layer clipping; rows in
    document order or shuffled; its tokens per step; started at the identity or at the
    least-squares map)."""

    clip: str
    init: NotRequired[str]
    """Where the loop started: ``identity`` (the paper's; absent: the runs before the field) or
    ``least_squares`` (Din et al.'s map)."""
    steps: int
    train_tokens: int
    tokens_per_step: NotRequired[int]
    shuffle: NotRequired[bool]
    """Rows drawn at random from many documents (absent: in document order, the first runs)."""
    train_seconds: float
    lens_file: str
    loss_windows: list[float]
    """Training KL (mean over layers), averaged over windows of 25 steps; each step's KL is on
    rows the lens had not yet trained on."""
    translator_norm: list[float]
    """Per layer, ‖A_l‖_F: how far training moved the translator from the identity."""
    bias_norm: list[float]
    first_grad_norms: list[float]
    """Per layer, the gradient norm at the first step (before clipping; empty if not recorded)."""
    in_domain: LensSet
    """Held-out docstrings: logit, least squares and this lens."""
    held_out: list[LensSet]
    """The acceptance sets (other kinds of text) measured for this lens so far."""


class LrProbe(TypedDict):
    """The default loop for a few steps on a few layers at one learning rate (the clip scaled to
    a layer's share among all layers), held-out KL on held-out docstrings."""

    lr: float
    layers: list[int]
    steps: int
    train_tokens: int
    losses: list[float]
    heldout_kl: list[float]
    heldout_kl_identity: list[float]
    heldout_tokens: int
    translator_norm: list[float]
    seconds: float


class TunedLensData(TypedDict):
    model: str
    site: str
    train_text: str
    training: dict[str, LensTraining]
    """``least_squares`` and ``tuned``."""
    metric: str
    calibration: str
    sets: list[LensSet]
    eiffel: LensEiffel
    tuned_below_least_squares: dict[str, list[int]]
    """Per set, the layers whose paired KL interval (tuned minus least squares) lies below 0."""
    calibration_below_least_squares: dict[str, list[int]]
    """Per set, the layers whose paired calibration interval lies below 0."""
    in_domain: NotRequired[list[LensSet]]
    """Diagnostic: held-out text of the training kind (odd-numbered stdlib docstrings)."""
    clip_runs: NotRequired[list[ClipRun]]
    lr_probes: NotRequired[list[LrProbe]]
    """The learning-rate probe (``--piece probes``), one entry per rate."""
