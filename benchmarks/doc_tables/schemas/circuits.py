"""Schemas of the circuits benchmarks' data files (docs/circuits.md, docs/edges.md, docs/ioi.md,
docs/aie.md and the README): each writer in benchmarks/ builds these, each renderer in
doc_tables/circuits.py (and readme.py's ``sink``) reads them."""

from __future__ import annotations

from typing import TypedDict

from . import MeanSD

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


class Induction(TypedDict):
    model: str
    threshold: float
    sequences: InductionSequences
    random_draws: int
    runs: list[InductionRun]
    summary: InductionSummary
