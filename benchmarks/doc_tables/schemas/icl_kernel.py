"""Schema of the kernel-regression heads' data files: benchmarks/icl_kernel.py writes
docs/data/icl_kernel_<model>.json, the renderers in doc_tables/icl_kernel.py (docs/icl.md) read it."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class KRCell(TypedDict):
    """One task's held-out share of prompts with its 95% Wilson interval, and the head (if any)."""

    estimate: float
    low: float
    high: float
    n: int
    head: str


class KRRow(TypedDict):
    """One row of the table: ``key`` as ``KernelRegressionTable`` names it (``icl``, ``baseline``,
    ``task_best:span_max``, ``overall_best:label:agreement``...), ``against`` gold or the model."""

    key: str
    against: str
    cells: dict[str, KRCell]


class QuotedTable(TypedDict):
    """A published table quoted as it stands: its source, its task columns and its rows."""

    source: str
    setting: str
    tasks: list[str]
    rows: dict[str, list[float]]


class HeadMap(TypedDict):
    """A ``[layer, head]`` map, the mean over tasks of the held-out prompts, and its top heads."""

    what: str
    layers: list[str]
    values: list[list[float]]
    top: list[list]
    """``[head, value]``, the five largest."""


class MajorityAnswer(TypedDict):
    """The model's most frequent ICL answer on a task's held-out prompts."""

    label: str
    share: float
    n: int


class ICLKernelData(TypedDict):
    paper: str
    tutorial: str
    model: str
    tasks: list[str]
    prompt_config: dict
    kernel_config: dict
    n_prompts: dict[str, dict[str, int]]
    """task -> split -> prompts."""
    select_by: str
    similarity_note: str
    rows: list[KRRow]
    choice: dict
    label_attention: HeadMap
    pearson: HeadMap
    agreement_span_max: HeadMap
    quoted: dict[str, QuotedTable]
    figures: dict[str, str]
    seconds_per_task: dict[str, float]
    model_answers: NotRequired[dict[str, MajorityAnswer]]
    """task -> the model's most frequent held-out answer (files before it lack it)."""
