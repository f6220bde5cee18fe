"""Schema of benchmarks/short_context_lm.py's data file (docs/data/short_context_lm.json): a small
byte-level Llama-shaped model trained here on 256-token rows of the standard library's prose, and
its held-out NLL by position on rows of 8x that length."""

from __future__ import annotations

from typing import TypedDict


class ShortLMTraining(TypedDict):
    """The run's cost (``label`` says how it was timed) and its loss (nats per byte): the mean of
    the last 100 steps, and the mean of every block of ``curve_every`` steps."""

    seconds: float
    cpu_seconds: float
    threads: int
    device: str
    steps: int
    resumed_from: int
    tokens: int
    final_loss: float
    curve_every: int
    loss_curve: list[float]
    label: str


class PositionBins(TypedDict):
    """Held-out NLL (nats per byte) by position: per bin ``[start, end)`` of target positions
    (the sink is position 0), the mean over rows of each row's mean in the bin, and its 95 %
    percentile-bootstrap interval over rows."""

    starts: list[int]
    ends: list[int]
    mean: list[float]
    ci95: list[list[float]]


class Difference(TypedDict):
    """A paired difference of two bins' NLL over the same rows: estimate and 95 % interval."""

    first: list[int]
    second: list[int]
    estimate: float
    ci95: list[float]


class ShortLMData(TypedDict):
    config: dict[str, object]
    """ShortLMConfig's fields (the cache key of the weights)."""
    model: str
    data: str
    """The text source (the Python version's stdlib docstrings and pydoc topics)."""
    trained_context: int
    eval_length: int
    n_rows: int
    training: ShortLMTraining
    nll: PositionBins
    in_context_gain: Difference
    """NLL in an early bin minus NLL in the last bin inside the training length: positive when
    the held-out NLL falls with position beyond what a few bytes of context give."""
    beyond_training: Difference
    """NLL in the last bin (near 8x the training length) minus NLL in the last bin inside it:
    positive when the model does worse beyond its training length."""
