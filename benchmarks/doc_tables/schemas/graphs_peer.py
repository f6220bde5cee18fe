"""docs/data/graphs_vs_circuit_tracer.json (benchmarks/graphs_vs_circuit_tracer.py): our attribution
graphs against circuit-tracer's on the same model, transcoder files and tokens, per model."""

from __future__ import annotations

from typing import TypedDict

from .timing import RatioRecord, TimingRecord


class PeerAgreement(TypedDict):
    """Both adjacency matrices compared entry by entry on the nodes both graphs have (aligned by
    key: features by layer, position and index; errors by layer and position; tokens by position;
    logits by token id)."""

    nodes_ours: int
    nodes_peer: int
    nodes_compared: int
    features_ours: int
    features_peer: int
    active_ours: int
    active_peer: int
    logit_tokens_ours: list[int]
    logit_tokens_peer: list[int]
    entries: int
    nonzero_entries: int
    """Entries of circuit-tracer's matrix that are not zero (on the compared nodes)."""
    max_abs_value: float
    max_abs_diff: float
    max_rel_diff: float
    max_rel_diff_over: str
    within_tolerance: bool
    """``torch.allclose(ours, theirs, atol, rtol)`` and the same node sets on both sides."""
    atol: float
    rtol: float
    logit_probs_max_abs_diff: float | None
    """Over the logit targets' probabilities (null when the targets differ)."""
    clean_logits_max_abs_diff: float
    """The clean run's last-position logits: both sides run the same model."""


class SideMemory(TypedDict):
    peak_mb: list[float]
    """Per timed round."""
    median_peak_mb: float | None
    median_extra_mb: float | None
    first_peak_mb: float | None
    """The warm-up call: the first attribution in the worker process."""
    first_extra_mb: float | None
    what: str


class GraphsPeerModel(TypedDict):
    model: str
    layers: int
    d_model: int
    d_transcoder: int
    activation: str
    k: int | None
    skip: bool
    transcoder_sites: str
    tokens: list[int]
    options: dict[str, object]
    """The attribution options both sides ran (circuit-tracer's ``attribute`` keywords)."""
    agreement: PeerAgreement
    timing: TimingRecord
    ratio: RatioRecord
    """circuit-tracer's median seconds over ours (above 1: ours is faster)."""
    memory: dict[str, SideMemory]
    load_seconds: dict[str, float]
    versions: dict[str, dict[str, str]]
    config_fields_not_in_peer: list[str]
    """HookedTransformerConfig fields of our TransformerLens that the peer's does not have (left out
    there; the clean-logit check shows whether one mattered)."""


class GraphsPeerData(TypedDict):
    models: dict[str, GraphsPeerModel]
    tolerance: dict[str, float]
    peer: str
