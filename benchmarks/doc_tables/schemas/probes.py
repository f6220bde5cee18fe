"""Schemas of the probing benchmarks' data files (docs/probes.md, docs/probes_cfg.md and the
README): benchmarks/probes.py and benchmarks/cfg_probes.py build these, the renderers in
doc_tables/probes.py and doc_tables/probes_cfg.py (and readme.py's rows) read them."""

from __future__ import annotations

from typing import TypedDict

from . import Provenance

# --- benchmarks/probes.py -> docs/data/probes.json ------------------------------------------------


class ProbeTask(TypedDict):
    """One task's sweep: the peak layer's test accuracy with its 95% bootstrap interval, the
    control task's accuracy there, selectivity, the majority class, and the curves."""

    peak_layer: int
    accuracy: float
    ci95: list[float]
    control: float
    selectivity: float
    majority: float
    n_train: int
    n_val: int
    n_test: int
    seconds: float
    per_layer: list[float]
    control_per_layer: list[float]


class SpeedRun(TypedDict):
    collect_s: float
    fit_s: float
    total_s: float
    peak_layer: int
    peak_accuracy: float


class SklearnSpeed(TypedDict):
    layers: list[int]
    seconds: float
    seconds_all_layers_estimate: float
    max_gap_points: float


class _ProbeSpeedRequired(TypedDict):
    task: str
    n_examples: int
    n_tokens: int
    layers: int
    strengths: int
    bootstrap: int
    runs: dict[str, SpeedRun]
    """By collection dtype: "float32", "bfloat16"."""
    bfloat16_max_layer_difference_points: float
    sklearn: SklearnSpeed | None


class ProbeSpeed(_ProbeSpeedRequired, total=False):
    date: str
    threads: int
    """The speed part's own run (the file's provenance is the last part written)."""


class ProbesData(TypedDict, total=False):
    """Two sections, each written by its own part of the script (--skip-speed, --skip-tasks);
    ``provenance`` is the last part's run, so each section keeps its own date and threads."""

    provenance: Provenance
    model: str
    site: str
    split: str
    date: str
    threads: int
    """The tasks' run's torch threads (heads the tasks table's seconds column)."""
    tasks: dict[str, ProbeTask]
    speed: ProbeSpeed


# --- benchmarks/cfg_probes.py -> docs/data/cfg_probes*.json ----------------------------------------


class CFGGrammarInfo(TypedDict):
    nts_per_level: list[int]
    length_range: list[int]
    mean_length: float
    rules: str
    loss_floor: float
    """The grammar's own entropy per predicted token: the held-out loss floor."""
    nodes_per_string: float
    predicted_per_string: float


class CFGTrainingInfo(TypedDict):
    seconds: float
    cpu_seconds: float
    tokens: int
    final_loss: float
    threads: int
    device: str


class CFGSeconds(TypedDict):
    probe_evaluate_attention: float
    probe_evaluate_attention_cpu: float
    sample_10000: float
    parse_1000: float


class CFGEvaluationInfo(TypedDict):
    next_token_accuracy: float
    loss: float
    validity: float
    validity_ci95: list[float]
    """The Wilson interval of the valid share of the samples."""
    n_samples: int
    distinct: float


class LinearProbeCell(TypedDict):
    """The linear probes of one model on one (level, target): accuracy per layer with its
    bootstrap s.e., and at the best layers (accuracy and balanced accuracy each its own) with
    95% intervals over the held-out strings."""

    per_layer: list[float]
    per_layer_se: list[float]
    balanced_per_layer: list[float]
    best_layer: int
    best: float
    ci95: list[float]
    balanced_best_layer: int
    balanced: float
    balanced_ci95: list[float]


class MultiheadCell(TypedDict):
    per_layer: list[float]
    balanced_per_layer: list[float]


class Gap(TypedDict):
    """Trained minus random at their best layers, paired over the resampled strings."""

    accuracy: float
    ci95: list[float]
    balanced: float
    balanced_ci95: list[float]


class BelowBayes(TypedDict):
    """The Bayes ceiling minus the trained probe, paired over the resampled strings."""

    accuracy: float
    ci95: list[float]


class _CFGCellRequired(TypedDict):
    level: int
    target: str
    n_test_tokens: int
    n_test_strings: int
    n_train_tokens: int
    n_val_tokens: int
    majority: float
    bayes: float


class CFGCell(_CFGCellRequired, total=False):
    """One (level, target). A --random-only file holds ``linear_random`` alone."""

    linear_trained: LinearProbeCell
    linear_random: LinearProbeCell
    multihead_trained: MultiheadCell
    multihead_random: MultiheadCell
    gap: Gap
    below_bayes: BelowBayes


class CFGProbeFigures(TypedDict):
    n_strings: int
    split: str
    seed: int
    n_test_strings: int
    bootstrap: int
    layers: list[str]
    cells: list[CFGCell]


class AttentionOfModel(TypedDict):
    mean: list[list[float]]
    best_head: list[list[float]]
    per_head: list[list[list[list[float]]]]


class CFGAttention(TypedDict):
    levels: list[str]
    pairs: list[list[float]]
    trained: AttentionOfModel
    random: AttentionOfModel


class _CFGProbesRequired(TypedDict):
    grammar: CFGGrammarInfo
    model: dict[str, object]
    """The CFGModelConfig's parameters (n_layers, d_model, steps, ...)."""
    training: CFGTrainingInfo | None
    models: list[str]
    seconds: CFGSeconds
    probes: CFGProbeFigures


class CFGProbesData(_CFGProbesRequired, total=False):
    provenance: Provenance
    """Its ``threads`` is the probing's thread count in the costs table."""
    evaluation: CFGEvaluationInfo
    attention: CFGAttention
