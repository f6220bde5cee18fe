"""Schemas of the project benchmarks' data files (README.md and docs/report.md: parity with Hugging
Face, load times, the tour's and the test suite's times, decoding speed): each writer in
benchmarks/ builds these, each renderer in doc_tables/project.py reads them."""

from __future__ import annotations

from typing import NotRequired, TypedDict

# --- benchmarks/parity.py -> docs/data/parity_<model>.json ------------------------------------


class ParityComparison(TypedDict):
    """Two models' log-probabilities over every position and vocabulary entry of the prompts."""

    max_abs_logprob_diff: float
    mean_abs_logprob_diff: float
    top1_agreement: float
    mean_kl: float
    positions: int


class ParityData(TypedDict):
    model: str
    n_prompts: int
    prompts: list[str]
    same_token_ids_as_hugging_face: bool
    note: str
    comparisons: dict[str, ParityComparison]
    """By comparison ("float32: lmsci-mi vs Hugging Face", ...)."""
    seconds: float


# --- benchmarks/loading.py --write -> docs/data/loading.json ----------------------------------


class LoadTimes(TypedDict):
    """One model's loads, each in a fresh process: into an empty cache, then cached."""

    cold_s: list[float]
    cached_s: list[float]
    import_s: list[float]
    top1: str
    """The top token after the Eiffel prompt (a check that the load works)."""


class LoadingData(TypedDict):
    cpus: int
    repeats: int
    models: dict[str, LoadTimes]


# --- benchmarks/tour.py -> docs/data/tour.json ------------------------------------------------


class TourRun(TypedDict):
    """One timed run of scripts/tour.sh (warm, quick or fresh)."""

    run: str
    wall_s: float
    tour_s: float | None
    steps_s: float
    before_steps_s: float | None
    """Everything before the first step: the install where there is one, imports, the load."""
    n_steps: int
    failed_steps: list[str]
    step_seconds: dict[str, float]
    """By step title."""
    report_bytes: int | None
    date: str
    commit: str | None
    machine: str


class TourStep(TypedDict):
    """A step as `lmsci-mi tour --list-steps` declares it."""

    name: str
    title: str
    quick: bool
    estimate_s: float


class TourData(TypedDict):
    runs: dict[str, TourRun]
    """By run ("fresh", "warm", "quick"), in the table's order."""
    steps: list[TourStep]


# --- benchmarks/suite_time.py -> docs/data/test_suite.json ------------------------------------


class SuiteRun(TypedDict):
    """One timed run of scripts/test.sh: pytest's outcome counts and time, the wall time."""

    run: str
    counts: dict[str, int]
    pytest_s: float
    wall_s: float
    exit: int
    failures: list[str]
    date: str
    commit: str | None
    workers: str
    per_file_s: NotRequired[dict[str, float]]
    """Seconds per test file (setup, call and teardown summed over its tests, pytest's
    ``--durations=0``; each file runs on one worker), largest first: what each issue's tests cost."""


class SuiteTimeData(TypedDict):
    runs: dict[str, SuiteRun]
    """By run ("fast", "whole")."""


# --- benchmarks/generation.py -> docs/data/generation.json (quoted by README.md, no table) ----


class GenerationData(TypedDict):
    model: str
    new_tokens: int
    repeats: int
    statistic: str
    seconds_per_step: dict[str, dict[str, float]]
    """By decoding path, then by batch size ("1", "4", "16")."""
    tokens_per_second: dict[str, dict[str, float]]


# --- benchmarks/model_cards.py -> docs/data/model_cards.json -----------------------------------


class ModelCardData(TypedDict):
    """``lmsci_mi.loading.ModelCard`` as the GGUF file's metadata gives it, and its file's name."""

    file: str
    quantisation: str
    bits: int
    variant: str
    name: str
    finetune: str | None
    n_layers: int
    n_heads: int
    framing: str
    """"4-bit quantised model (Q4_1 GGUF, dequantised to float32), instruct"."""


class ModelCardsData(TypedDict):
    source: str
    models: dict[str, ModelCardData]
    """By bundled model name (``smollm2-135m``, ``gemma3-270m``)."""


# --- benchmarks/published_eap_ig.py -> docs/data/published_eap_ig.json ---------------------------


class PublishedCurveRow(TypedDict):
    """One row of the released CSV: the edge budget asked for, and per method the edges the
    circuit kept (after pruning dead nodes) and its normalised faithfulness."""

    target_edges: int
    edges: dict[str, int]
    faithfulness: dict[str, float]
    """(loss − corrupted_baseline) / (baseline − corrupted_baseline), as the paper's plots do."""


class PublishedEAPData(TypedDict):
    repository: str
    commit: str
    path: str
    read_by: str
    """The plotting script of the paper that reads this file, and the figure it draws."""
    why_this_file: str
    model: str
    task: str
    prompts: int
    total_edges: int
    integration_steps: int
    baseline: float
    corrupted_baseline: float
    rows: list[PublishedCurveRow]


# --- benchmarks/paper_defaults.py -> docs/data/paper_defaults.json -------------------------------


class PaperDefaultRow(TypedDict):
    """``lmsci_mi.config.PaperDefault.to_dict()``."""

    config: str
    field: str
    ours: object
    paper: object
    paper_source: str
    why: str | None
    differs: bool


class PaperDefaultsMethod(TypedDict):
    method: str
    page: str
    rows: list[PaperDefaultRow]


class PaperDefaultsData(TypedDict):
    methods: dict[str, PaperDefaultsMethod]
