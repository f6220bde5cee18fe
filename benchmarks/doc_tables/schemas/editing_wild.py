"""Schemas of benchmarks/editing_wild.py's data file (docs/editing.md, "Judged without teacher
forcing"): the writer builds these, doc_tables/editing_wild.py reads them."""

from __future__ import annotations

from typing import Any, TypedDict

# --- benchmarks/editing_wild.py -> docs/data/editing_wild.json ----------------------------------


class Gap(TypedDict):
    """A teacher-forced rate minus a WILD-EM rate over the same ``n`` facts, in points, with its
    95 % paired percentile-bootstrap interval ``[low, high]`` (2,000 resamples)."""

    estimate: float
    low: float
    high: float
    n: int


class WildRow(TypedDict):
    """The unedited model, or one method, on the first ``n_facts`` facts."""

    model: str
    """"unedited", or the method's name ("rome", "memit", "alphaedit")."""
    n_facts: int
    n_edits: int
    seconds_per_edit: float | None
    """Mean seconds of one edit (one thread, shared machine: not a speed figure)."""
    metrics: dict[str, float]
    """Percent: ES, PS, NS (teacher-forced, ``lmsci_mi.editing.evaluate_edits``'s) and rewrite,
    paraphrase, locality, true_answer (WILD-EM, ``lmsci_mi.editing.WILD_METRICS``)."""
    ci95: dict[str, list[float]]
    """Each metric's 95 % percentile-bootstrap interval over facts, ``[low, high]``."""
    gaps: dict[str, Gap]
    """"ES - rewrite" and "PS - paraphrase": paired over facts."""
    prompts: dict[str, int]
    """Paraphrase and neighbour prompts counted."""


class WildExample(TypedDict):
    """A fact's rewrite prompt and its greedy generations (cut at the stop) before and after."""

    subject: str
    prompt: str
    target_new: str
    target_true: str
    unedited: str
    edited: str


class EditingWildData(TypedDict):
    model: str
    facts: str
    order: str
    n_facts: int
    stats_tokens: int
    stats_source: str
    wild: dict[str, Any]
    """``WildConfig.params()``: new tokens, stop strings, batch size."""
    judge: str
    interval: str
    shared_machine: bool
    configs: dict[str, dict[str, Any]]
    rows: list[WildRow]
    generations: dict[str, list[WildExample]]
    """Per method, every fact's rewrite generation before and after its edit."""
