"""Schemas of the representation benchmarks' data files (docs/representations.md and the README):
benchmarks/concepts.py and benchmarks/reading.py build these, the renderers in
doc_tables/representations.py (and readme.py's rows) read them."""

from __future__ import annotations

from typing import TypedDict

# --- benchmarks/concepts.py -> docs/data/concepts_<model>.json -----------------------------------


class ConceptRow(TypedDict):
    """One concept: its pairs, the held-out projection against random pairs (Park et al.'s
    Fig. 2) and the intervention's change of its own logit gap and of the others'."""

    concept: str
    label: str
    n_pairs_listed: int
    n_pairs_single_token: int
    n_fit: int
    n_heldout: int
    heldout_projection_mean: float
    heldout_projection_ci95: list[float]
    random_projection_mean: float
    random_projection_sd: float
    effect_size: float
    heldout_above_random_p95: float
    intervention_own_change: float
    intervention_own_ci95: list[float]
    intervention_mean_abs_change_on_others: float


class MeanAbsCosine(TypedDict):
    """The mean |cosine| between distinct concepts, with 95% intervals over concepts, beside
    what random directions and shared words alone give."""

    causal: float
    causal_ci95: list[float]
    euclidean: float
    euclidean_ci95: list[float]
    random_directions: float
    shared_word_floor_mean_abs: float


class SharedWordFloor(TypedDict):
    note: str
    matrix: list[list[float]]


class InnerProducts(TypedDict):
    concepts: list[str]
    n_pairs: list[int]
    causal: list[list[float]]
    euclidean: list[list[float]]
    mean_abs_cosine_between_concepts: MeanAbsCosine
    shared_word_floor: SharedWordFloor


class Intervention(TypedDict):
    site: str
    scale: float
    site_norm: float
    prompts: list[str]
    note: str
    steered_by_measured: list[list[float]]
    se: list[list[float]]


class ConceptsData(TypedDict):
    paper: str
    model: str
    data_source: str
    config: dict[str, object]
    intervention_config: dict[str, object]
    n_vocabulary_tokens: int
    bootstrap_resamples: int
    concepts_left_out: dict[str, int]
    concepts: list[ConceptRow]
    inner_products: InnerProducts
    intervention: Intervention
    figures: dict[str, str]
    seconds: float


# --- benchmarks/reading.py -> docs/data/reading_<model>.json -------------------------------------


class ReadingMethod(TypedDict):
    """One reading method at its dev-chosen layer (``chosen_*``), and per layer every split's
    pairwise and unpaired accuracy with the test split's 95% intervals (``per_layer``)."""

    chosen_layer: str
    chosen_dev_pairwise: float
    chosen_dev_unpaired: float
    chosen_test_pairwise: float
    chosen_test_unpaired: float
    chosen_test_pairwise_ci95: list[float]
    chosen_test_unpaired_ci95: list[float]
    per_layer: dict[str, list[float] | list[list[float]]]


class ReadingContrast(TypedDict):
    n_pairs: int
    n_fit: int
    n_dev: int
    n_test: int
    n_random: int
    source: str
    layers: list[str]
    explained_by_pc1: list[float]
    methods: dict[str, ReadingMethod]
    """By method: "pca", "diff_of_means", "probe", "random"."""
    forward_tokens: int
    seconds: float


class ReadingData(TypedDict):
    model: str
    method: str
    metrics: str
    config: dict[str, object]
    contrasts: dict[str, ReadingContrast]
    """By contrast: "sentiment", "truth"."""
