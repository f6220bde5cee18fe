"""Schema of benchmarks/editing_sweeps.py's data file, docs/data/editing_sweeps.json: AlphaEdit's
null-space threshold and MEMIT's λ, one batch of facts solved under each setting."""

from __future__ import annotations

from typing import Any, TypedDict


class LayerNullSpace(TypedDict):
    """AlphaEdit's projector P at one layer (``lmsci_mi.editing.alphaedit.NullSpace``)."""

    dims: int
    d_mlp: int
    direction_share: float
    """dims / d_mlp."""
    trace_share: float
    """The share of trace(C) the null space holds."""
    key_norm_kept_mean: float
    """‖Pk‖/‖k‖ over the batch's keys at this layer: mean, least and most."""
    key_norm_kept_min: float
    key_norm_kept_max: float


class SweepRow(TypedDict):
    name: str
    method: str
    changes: dict[str, float]
    """The setting's fields that differ from its method's default config."""
    metrics: dict[str, float]
    """S (the harmonic mean of ES, PS, NS), ES, PS, NS in percent."""
    ci95: dict[str, list[float]]
    vs_reference: dict[str, list[float]]
    """Per metric, [difference, low, high] against the method's reference row (paired over
    facts); empty on the reference row itself."""
    seconds: float
    """The solve and install from the given targets (no fit); a shared CPU, 1 thread."""
    null_space: dict[str, LayerNullSpace]
    """By layer; empty for MEMIT."""


class EditingSweepsData(TypedDict):
    model: str
    facts: str
    n_facts: int
    layers: list[int]
    stats_tokens: int
    stats_source: str
    fit: dict[str, Any]
    """The fit settings of the shared targets (MEMITConfig)."""
    interval: str
    reference: dict[str, str]
    """Per method, the row the others are compared with (the code default)."""
    unedited: dict[str, float]
    """S, ES, PS, NS of the unedited model on the same facts."""
    rows: list[SweepRow]
