"""Schema of benchmarks/icl_regression.py's data file (docs/data/icl_regression.json): a transformer
trained on in-context linear regression against least squares, ridge, one GD step, k-nearest
neighbours and averaging, and probes of the algorithms' intermediate quantities by layer."""

from __future__ import annotations

from typing import TypedDict


class Curve(TypedDict):
    """One series over n = 0 … n_points − 1 in-context examples: the mean over the held-out
    prompts (squared error or squared prediction difference, divided by d) and its 95 %
    percentile-bootstrap interval over prompts, one ``[low, high]`` per n."""

    mean: list[float]
    ci95: list[list[float]]


class RegressionTraining(TypedDict):
    """The run's cost (``label`` says how it was timed) and its loss: the mean of the last 100
    steps, and the mean of every block of ``curve_every`` steps."""

    seconds: float
    cpu_seconds: float
    threads: int
    device: str
    steps: int
    resumed_from: int
    final_loss: float
    curve_every: int
    loss_curve: list[float]
    label: str


class RegressionEvaluationData(TypedDict):
    """The held-out comparison: ``errors`` by series ("model" and each algorithm),
    ``differences`` (model vs each algorithm), the algorithms' settings."""

    n_prompts: int
    n_dev: int
    ridge_lambda: float
    k: int
    step_sizes: list[float]
    """The one GD step's η per n, chosen on the dev prompts."""
    errors: dict[str, Curve]
    differences: dict[str, Curve]


class RatioData(TypedDict):
    estimate: float
    ci95: list[float]


class RegressionAcceptance(TypedDict):
    """The issue's check at n = 2d: the model's error over least squares' (paired interval), and
    ridge's for scale (the Bayes predictor when λ = σ²)."""

    n: int
    model_over_least_squares: RatioData
    ridge_over_least_squares: RatioData
    within_20_percent: bool
    """The ratio's estimate is at most 1.2: the model's error at most 20 % above least squares'
    (ridge, the Bayes predictor, is itself about 24 % below it, so the band is one-sided)."""
    interval_within_20_percent: bool
    """The ratio's 95 % interval lies below 1.2."""


class ProbeCurves(TypedDict):
    """Per target (xty, w_least_squares, w): the held-out R² per layer (mean over the d
    coordinates) and its 95 % interval over the test prompts."""

    r2: dict[str, list[float]]
    ci95: dict[str, list[list[float]]]


class RegressionProbesData(TypedDict):
    n_examples: int
    n_train: int
    n_test: int
    layers: list[str]
    trained: ProbeCurves
    random: ProbeCurves
    """The same probes on the seeded initial weights (the baseline)."""


class ICLRegressionData(TypedDict):
    config: dict[str, object]
    training: RegressionTraining
    evaluation: RegressionEvaluationData
    acceptance: RegressionAcceptance
    probes: RegressionProbesData
    timings: dict[str, float]
