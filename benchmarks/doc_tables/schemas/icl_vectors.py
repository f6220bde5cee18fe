"""Schema of docs/data/icl_vectors_<model>.json, written by benchmarks/icl_vectors.py and read by
the renderer in doc_tables/icl_vectors.py: task and function vectors (Hendel et al. 2023; Todd et
al. 2024) per task, the layer chosen on dev, the held-out figures with 95 % intervals."""

from __future__ import annotations

from typing import TypedDict


class IntervalRecord(TypedDict):
    """``lmsci_mi.stats.Interval.as_dict()``: a percentile-bootstrap interval over prompts."""

    estimate: float
    low: float
    high: float
    level: float
    n: int
    method: str


class ICLVectorReport(TypedDict):
    """``lmsci_mi.icl.RecoveryReport.to_dict()``: held-out figures at the layer chosen on dev.
    ``share`` is (acc_vector − acc_zero_shot) / (acc_ICL − acc_zero_shot), NaN (null) where ICL
    gains nothing."""

    method: str
    operation: str
    task: str
    best_layer: int
    dev_accuracy: float
    n: int
    zero_shot: IntervalRecord
    icl: IntervalRecord
    vector: IntervalRecord
    random: IntervalRecord
    share: IntervalRecord
    random_share: IntervalRecord


class ICLVectorCurve(TypedDict):
    """One split's curves by layer (accuracies, and shares of the ICL gain)."""

    n: int
    zero_shot: float
    icl: float
    vector: list[float]
    random: list[float]
    share: list[float | None]
    random_share: list[float | None]


class _ICLVectorEntryBase(TypedDict):
    report: ICLVectorReport
    layers: list[int]
    curves: dict[str, ICLVectorCurve]
    """By split: ``"dev"``, ``"held_out"``."""
    seconds: float


class ICLVectorEntry(_ICLVectorEntryBase, total=False):
    """A function vector also lists its heads, largest average indirect effect first."""

    heads: list[str]
    head_aie: list[float]


class ICLVectorMethod(TypedDict):
    paper: str
    operation: str
    config: dict[str, object]


class ICLVectorsData(TypedDict):
    model: str
    tasks: list[str]
    methods: dict[str, ICLVectorMethod]
    results: dict[str, dict[str, ICLVectorEntry]]
    """task -> method -> entry."""
