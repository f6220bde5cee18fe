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
    """The NLL over the target positions ``first`` ``[start, end)`` minus that over ``second``,
    paired over the same rows: the estimate and its 95 % percentile-bootstrap interval."""

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
    """Positions 1 to 1/32 of the training length (1-7 at 256) minus the second half of the
    training length (128-255): positive when the held-out NLL falls with position."""
    long_context_gain: Difference
    """Positions 1/16 to 1/8 of the training length (16-31) minus 128-255: positive when the
    model gains from context further back than a few dozen bytes."""
    beyond_training: Difference
    """The last bin (1,536-2,047 at 2,048) minus 128-255: positive when the model does worse
    beyond its training length."""
