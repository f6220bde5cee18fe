"""Schema of benchmarks/transcoders.py's data files (docs/data/transcoders_<model>.json): the
per-layer transcoder quality table with its training cost (docs/graphs.md, benchmarks/doc_tables/graphs.py)."""

from __future__ import annotations

from typing import TypedDict

from .icl_vectors import IntervalRecord


class LayerRow(TypedDict):
    layer: int
    explained_variance: IntervalRecord
    l0: IntervalRecord
    dead_fraction: IntervalRecord
    loss_recovered: IntervalRecord
    loss_clean: float
    loss_spliced: float
    loss_zero: float
    negative_kept_fraction: float
    n_tokens: int
    train_seconds: float
    train_cpu_seconds: float
    harvest_seconds: float
    steps: int
    final_loss: float
    n_train_tokens: int
    threads: int
    lr: float


class TranscoderSetInfo(TypedDict):
    model: str
    folder: str
    input_site: str
    output_site: str
    d_model: int
    d_transcoder: int
    layers_built: list[int]
    layers_missing: list[int]
    """Layers the budget left for the next run (empty when the set is whole)."""
    compact_bytes: int | None
    """Size of the compact float16 form (live latents only), when it was written."""


class TranscodersData(TypedDict):
    transcoders: TranscoderSetInfo
    data: dict[str, object]
    """The TranscoderDataConfig's params (source, tokens, seq_len, seed)."""
    train: dict[str, object]
    """The TranscoderTrainConfig's params (the preset's values where they differ from the paper's)."""
    preset_reason: str
    held_out_texts: int
    data_source: str
    bootstrap: dict[str, object]
    target: str
    """The issue's target (loss recovered >= 0.8 at L0 <= 64) and which layers reach it."""
    layers_meeting_target: list[int]
    rows: list[LayerRow]
