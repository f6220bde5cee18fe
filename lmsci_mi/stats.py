"""Intervals and standard errors: the one home for the uncertainty every headline figure carries.

Percentile bootstrap intervals of any statistic (Efron & Tibshirani 1993, ch. 13), paired
bootstrap intervals of a difference (the same resampled items on both sides), standard errors of
the mean, normal (mean ± z·s.e.) intervals, binomial standard errors and Wilson score intervals
for a proportion (Wilson 1927), and the sign-flip test of one paired effect (Fisher 1935) or of
the largest of several at once (Nichols & Holmes 2002). Every random draw comes from an explicit ``seed`` or generator.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeAlias, overload

import numpy as np
import torch
from torch import Tensor

from lmsci_mi.errors import UserInputError

__all__ = [
    "Interval",
    "MaxSignFlipTest",
    "MeanSE",
    "binomial_standard_error",
    "bootstrap_each",
    "bootstrap_interval",
    "bootstrap_replicates",
    "bootstrap_standard_error",
    "mean_se",
    "normal_half_width",
    "normal_interval",
    "paired_bootstrap_interval",
    "percentile_bounds",
    "ratio_standard_error",
    "resample_counts",
    "resample_indices",
    "sign_flip_max_test",
    "sign_flip_test",
    "standard_error",
    "wilson_interval",
    "z_score",
]

ArrayLike: TypeAlias = Tensor | np.ndarray | Sequence[float]
Generator: TypeAlias = torch.Generator | np.random.Generator
NanPolicy: TypeAlias = Literal["propagate", "omit"]


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval: ``low <= estimate <= high`` for the usual statistics.

    Attributes:
        estimate: the statistic on the full sample.
        low: lower bound.
        high: upper bound.
        level: coverage, e.g. 0.95.
        n: sample size (items resampled, or trials).
        method: how the bounds were made (``"percentile bootstrap"``, ``"paired percentile
            bootstrap"``, ``"normal"``, ``"wilson"``).

    >>> Interval(0.5, 0.25, 0.75, 0.95, 12, "wilson").as_list()
    [0.25, 0.75]
    """

    estimate: float
    low: float
    high: float
    level: float
    n: int
    method: str

    @property
    def half_width(self) -> float:
        """Half the interval's width."""
        return (self.high - self.low) / 2

    def as_list(self) -> list[float]:
        """``[low, high]``, the shape data files store an interval in."""
        return [self.low, self.high]

    def as_dict(self) -> dict[str, Any]:
        """Every field, for a JSON record."""
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "level": self.level,
            "n": self.n,
            "method": self.method,
        }

    def __str__(self) -> str:
        return f"{self.estimate:.4g} [{self.low:.4g}, {self.high:.4g}]"


@dataclass(frozen=True)
class MeanSE:
    """A mean with its standard error over ``n`` values (``se`` NaN below two values).

    >>> mean_se([1.0, 2.0, 3.0, 4.0]).as_dict()
    {'mean': 2.5, 'se': 0.6454972243679028, 'n': 4}
    """

    mean: float
    se: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        """``{"mean", "se", "n"}`` for a JSON record."""
        return {"mean": self.mean, "se": self.se, "n": self.n}

    def __str__(self) -> str:
        return f"{self.mean:.4g} ± {self.se:.4g}"


# --- resampling ---------------------------------------------------------------------------------


def _generator(seed: int | None, generator: Generator | None) -> Generator:
    if generator is not None:
        return generator
    if seed is None:
        raise UserInputError("give a seed or a generator: bootstrap draws never use the global RNG")
    return torch.Generator().manual_seed(seed)


def resample_indices(
    n: int,
    n_resamples: int,
    *,
    seed: int | None = 0,
    generator: Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor | np.ndarray:
    """``[n_resamples, n]`` item indices drawn with replacement: one bootstrap resample per row.

    With a seed (or a ``torch.Generator``) the draws are ``torch.randint(n, (n_resamples, n))``
    on the CPU generator, moved to ``device``. A ``numpy.random.Generator`` draws one row per call
    (``rng.integers(0, n, n)``) and the rows come back as a NumPy array, so a caller sharing one
    ``rng`` across several intervals keeps its stream.

    Args:
        n: items in the sample.
        n_resamples: resamples (rows).
        seed: seed of a fresh ``torch.Generator`` (ignored when ``generator`` is given).
        generator: a ``torch.Generator`` or ``numpy.random.Generator`` to draw from.
        device: where the torch indices go.

    >>> resample_indices(4, 2, seed=0)
    tensor([[0, 3, 1, 0],
            [3, 3, 3, 3]])
    """
    rng = _generator(seed, generator)
    if isinstance(rng, np.random.Generator):
        if n_resamples == 0:
            return np.zeros((0, n), dtype=np.int64)
        return np.stack([rng.integers(0, n, n) for _ in range(n_resamples)])
    return torch.randint(n, (n_resamples, n), generator=rng).to(device)


def resample_counts(
    n: int, n_resamples: int, *, seed: int | None = 0, generator: torch.Generator | None = None
) -> Tensor:
    """``[n_resamples, n]`` float64 counts of each item in each resample: the weights of a
    bootstrap of a weighted statistic (a ratio of sums over texts, say), from the same draws as
    :func:`resample_indices`.

    >>> resample_counts(4, 2, seed=0)
    tensor([[2., 1., 0., 1.],
            [0., 0., 0., 4.]], dtype=torch.float64)
    """
    draws = resample_indices(n, n_resamples, seed=seed, generator=generator)
    assert isinstance(draws, Tensor)
    counts = torch.zeros(n_resamples, n, dtype=torch.float64)
    return counts.scatter_add_(1, draws, torch.ones(n_resamples, n, dtype=torch.float64))


def _mean(x: Any, axis: int = -1) -> Any:
    return x.mean(axis)


def _as_data(values: Any) -> Tensor | np.ndarray:
    if isinstance(values, Tensor | np.ndarray):
        return values
    return torch.as_tensor(values, dtype=torch.float64)


def _arrays(data: ArrayLike | tuple[ArrayLike, ...]) -> tuple[Tensor | np.ndarray, ...]:
    """One array, or several resampled together: a tuple of numbers is one sample."""
    if isinstance(data, tuple) and data and not isinstance(data[0], int | float):
        return tuple(_as_data(d) for d in data)
    return (_as_data(data),)


def bootstrap_replicates(
    data: ArrayLike | tuple[ArrayLike, ...],
    statistic: Callable[..., Any] | None = None,
    *,
    n_resamples: int = 1000,
    seed: int | None = 0,
    generator: Generator | None = None,
) -> Tensor | np.ndarray:
    """The statistic on each bootstrap resample of the items on the last axis, vectorised.

    ``data`` is one array ``[..., n]`` or a tuple of arrays sharing the item axis (resampled
    together, as in a paired design). Each array is indexed with the ``[n_resamples, n]`` draws of
    :func:`resample_indices` on its last axis and ``statistic(*resampled, axis=-1)`` is called
    once; it must reduce that last axis (the default is the mean).

    Returns:
        ``[..., n_resamples]``: whatever the statistic returns for ``[..., n_resamples, n]`` input.

    >>> x = torch.tensor([[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0]])
    >>> bootstrap_replicates(x, n_resamples=3, seed=0)
    tensor([[1.0000, 3.0000, 1.7500],
            [1.0000, 1.0000, 1.0000]])
    """
    arrays = _arrays(data)
    n = arrays[0].shape[-1]
    statistic = statistic or _mean
    device = arrays[0].device if isinstance(arrays[0], Tensor) else None
    index = resample_indices(n, n_resamples, seed=seed, generator=generator, device=device)
    resampled = []
    for array in arrays:
        if isinstance(array, Tensor) and isinstance(index, np.ndarray):
            resampled.append(array[..., torch.as_tensor(index, device=array.device)])
        elif isinstance(array, np.ndarray) and isinstance(index, Tensor):
            resampled.append(array[..., index.cpu().numpy()])
        else:
            resampled.append(array[..., index])
    return statistic(*resampled, axis=-1)


def bootstrap_each(
    statistic: Callable[[Any], Any],
    n: int,
    *,
    n_resamples: int = 1000,
    seed: int | None = 0,
    generator: Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """The statistic on each bootstrap resample, one call per resample, stacked on axis 0.

    For statistics that are not vectorised over resamples, or whose resampled inputs would not
    fit in memory at once: ``statistic(index)`` gets one resample's ``[n]`` item indices (the rows
    of :func:`resample_indices`, on ``device``) and returns a number or a tensor.

    Returns:
        ``[n_resamples, ...]``.

    >>> x = torch.tensor([0.0, 1.0, 2.0, 3.0])
    >>> bootstrap_each(lambda i: x[i].median(), 4, n_resamples=3, seed=0)
    tensor([0., 3., 1.])
    """
    draws = resample_indices(n, n_resamples, seed=seed, generator=generator, device=device)
    values = [statistic(index) for index in draws]
    if not values:
        return torch.zeros(0)
    return torch.stack([torch.as_tensor(v) for v in values])


def percentile_bounds(
    replicates: ArrayLike,
    level: float = 0.95,
    *,
    axis: int = -1,
    nan_policy: NanPolicy = "propagate",
) -> Tensor:
    """Percentile interval bounds of bootstrap replicates: their ``(1 - level) / 2`` and
    ``(1 + level) / 2`` quantiles (linear interpolation, as NumPy's default), in float64.

    Args:
        replicates: the statistic per resample, resamples on ``axis``.
        level: coverage.
        axis: the resample axis.
        nan_policy: ``"propagate"`` (a NaN replicate makes the bounds NaN) or ``"omit"`` (NaN
            replicates are left out; bounds are NaN only when every replicate is).

    Returns:
        ``[..., 2]``: the other axes, then (low, high).

    >>> percentile_bounds(torch.arange(101.0))
    tensor([ 2.5000, 97.5000], dtype=torch.float64)
    """
    if not 0 < level < 1:
        raise UserInputError(f"level must lie in (0, 1), not {level}")
    values = torch.as_tensor(
        np.asarray(replicates) if not isinstance(replicates, Tensor) else replicates
    )
    values = values.detach().double().movedim(axis, -1)
    # Rounded so that level 0.95 gives exactly the quantiles 0.025 and 0.975 (1 - 0.95 is not).
    tail = round((1 - level) / 2, 12)
    q = torch.tensor([tail, 1 - tail], dtype=torch.float64, device=values.device)
    if values.shape[-1] == 0:
        return torch.full((*values.shape[:-1], 2), math.nan, dtype=torch.float64)
    quantile = torch.nanquantile if nan_policy == "omit" else torch.quantile
    return quantile(values, q, dim=-1).movedim(0, -1)


def bootstrap_interval(
    values: ArrayLike | tuple[ArrayLike, ...],
    statistic: Callable[..., Any] | None = None,
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int | None = 0,
    generator: Generator | None = None,
    nan_policy: NanPolicy = "propagate",
) -> Interval:
    """The percentile bootstrap interval of a statistic over the items of a sample.

    Args:
        values: ``[n]`` per-item values (or a tuple of ``[n]`` arrays resampled together).
        statistic: ``statistic(*arrays, axis=-1)`` reducing the item axis; the mean by default
            (``np.median``, ``np.std`` and torch reductions all fit).
        n_resamples: bootstrap resamples.
        level: coverage.
        seed: seed of a fresh ``torch.Generator``.
        generator: a ``torch.Generator`` or ``numpy.random.Generator`` instead.
        nan_policy: see :func:`percentile_bounds`.

    Returns:
        :class:`Interval` (the estimate is the statistic on the whole sample).

    >>> str(bootstrap_interval([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0], seed=0))
    '0.625 [0.25, 0.875]'
    """
    statistic = statistic or _mean
    arrays = _arrays(values)
    replicates = bootstrap_replicates(
        arrays, statistic, n_resamples=n_resamples, seed=seed, generator=generator
    )
    low, high = percentile_bounds(replicates, level, nan_policy=nan_policy).tolist()
    estimate = float(statistic(*arrays, axis=-1))
    return Interval(estimate, low, high, level, int(arrays[0].shape[-1]), "percentile bootstrap")


def paired_bootstrap_interval(
    a: ArrayLike,
    b: ArrayLike,
    statistic: Callable[..., Any] | None = None,
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int | None = 0,
    generator: Generator | None = None,
    nan_policy: NanPolicy = "propagate",
) -> Interval:
    """The percentile bootstrap interval of ``statistic(a) - statistic(b)`` for paired samples:
    each resample draws the same items from both, so what the pairs share cancels.

    Args:
        a, b: ``[n]`` values of the same ``n`` items (prompts, facts) under two conditions.
        statistic: as in :func:`bootstrap_interval` (the mean by default, so the difference of
            means: the mean paired difference).

    >>> base = torch.linspace(0, 10, 40)
    >>> str(paired_bootstrap_interval(base + 1.0, base, seed=0))
    '1 [1, 1]'
    """
    statistic = statistic or _mean
    a, b = _as_data(a), _as_data(b)
    if a.shape[-1] != b.shape[-1]:
        raise UserInputError(f"paired samples need the same items: {a.shape[-1]} and {b.shape[-1]}")

    def difference(x: Any, y: Any, axis: int = -1) -> Any:
        return statistic(x, axis=axis) - statistic(y, axis=axis)

    replicates = bootstrap_replicates(
        (a, b), difference, n_resamples=n_resamples, seed=seed, generator=generator
    )
    low, high = percentile_bounds(replicates, level, nan_policy=nan_policy).tolist()
    estimate = float(difference(a, b))
    return Interval(estimate, low, high, level, int(a.shape[-1]), "paired percentile bootstrap")


# --- standard errors and normal intervals ---------------------------------------------------------


@overload
def standard_error(values: np.ndarray, *, axis: int = -1) -> np.ndarray: ...
@overload
def standard_error(values: Tensor | Sequence[float], *, axis: int = -1) -> Tensor: ...
def standard_error(values: ArrayLike, *, axis: int = -1) -> Tensor | np.ndarray:
    """The standard error of the mean along ``axis``: sample s.d. (n − 1) over √n; NaN where
    fewer than two values.

    Tensors keep their floating dtype (integers become float64), NumPy arrays stay NumPy, and
    sequences become float64 tensors.

    >>> standard_error(torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0]]))
    tensor([0.6455, 0.0000])
    """
    if isinstance(values, np.ndarray):
        n = values.shape[axis]
        if n < 2:
            return np.full(np.delete(values.shape, axis), np.nan)
        return values.std(axis=axis, ddof=1) / n**0.5
    x = _as_data(values)
    assert isinstance(x, Tensor)
    if not x.is_floating_point():
        x = x.double()
    n = x.shape[axis]
    if n < 2:
        shape = [s for i, s in enumerate(x.shape) if i != axis % x.dim()]
        return torch.full(shape, math.nan, dtype=x.dtype, device=x.device)
    return x.std(axis) / n**0.5


def mean_se(values: ArrayLike) -> MeanSE:
    """The mean of ``[n]`` values with its standard error (float64)."""
    x = torch.as_tensor(np.asarray(values) if isinstance(values, np.ndarray) else values)
    x = x.detach().double().flatten()
    return MeanSE(float(x.mean()), float(standard_error(x)), len(x))


def z_score(level: float = 0.95) -> float:
    """The two-sided standard normal quantile for a coverage: 1.95996… at 0.95.

    >>> round(z_score(0.95), 6)
    1.959964
    """
    if not 0 < level < 1:
        raise UserInputError(f"level must lie in (0, 1), not {level}")
    return statistics.NormalDist().inv_cdf((1 + level) / 2)


@overload
def normal_half_width(values: np.ndarray, level: float = ..., *, axis: int = ...) -> np.ndarray: ...
@overload
def normal_half_width(
    values: Tensor | Sequence[float], level: float = ..., *, axis: int = ...
) -> Tensor: ...
def normal_half_width(
    values: ArrayLike, level: float = 0.95, *, axis: int = -1
) -> Tensor | np.ndarray:
    """``z · s.e.`` along ``axis``: the half-width of the normal interval of the mean."""
    return z_score(level) * standard_error(values, axis=axis)


def normal_interval(values: ArrayLike, level: float = 0.95) -> Interval:
    """Mean ± z·s.e. of ``[n]`` values (a normal approximation; prefer the bootstrap for small or
    skewed samples).

    >>> str(normal_interval([1.0, 2.0, 3.0, 4.0]))
    '2.5 [1.235, 3.765]'
    """
    summary = mean_se(values)
    half = z_score(level) * summary.se
    return Interval(
        summary.mean, summary.mean - half, summary.mean + half, level, summary.n, "normal"
    )


def bootstrap_standard_error(replicates: ArrayLike, *, axis: int = 0) -> Tensor | np.ndarray:
    """The bootstrap standard error of an estimate: the standard deviation of its bootstrap
    replicates (``ddof=1``) along ``axis`` (the resamples' axis).

    >>> float(bootstrap_standard_error(torch.tensor([1.0, 2.0, 3.0])))
    1.0
    """
    data = _as_data(replicates)
    if isinstance(data, np.ndarray):
        return data.std(axis=axis, ddof=1)
    return data.std(dim=axis, unbiased=True)


def ratio_standard_error(
    numerator: float, numerator_se: float, denominator: float, denominator_se: float
) -> float:
    """The delta-method standard error of ``numerator / denominator`` for two independent
    estimates: ``|r| · sqrt((se_a / a)² + (se_b / b)²)``; NaN when the numerator is 0.

    >>> round(ratio_standard_error(2.0, 0.2, 4.0, 0.2), 4)
    0.0559
    """
    if not numerator or not denominator:
        return math.nan
    ratio = numerator / denominator
    return (
        abs(ratio) * ((numerator_se / numerator) ** 2 + (denominator_se / denominator) ** 2) ** 0.5
    )


# --- proportions ------------------------------------------------------------------------------------


@overload
def binomial_standard_error(
    p: Tensor, n: int | float | Tensor, *, scale: float = ...
) -> Tensor: ...
@overload
def binomial_standard_error(p: float, n: int | float, *, scale: float = ...) -> float: ...
def binomial_standard_error(
    p: float | Tensor, n: int | float | Tensor, *, scale: float = 1.0
) -> float | Tensor:
    """The standard error ``sqrt(p (scale − p) / n)`` of a proportion ``p`` out of ``n`` trials,
    with ``p`` on ``[0, scale]`` (``scale=100`` for percentages). NaN where ``n`` is 0.

    >>> binomial_standard_error(0.5, 100), binomial_standard_error(50.0, 100, scale=100)
    (0.05, 5.0)
    """
    if isinstance(p, Tensor):
        return (p * (scale - p) / n).clamp(min=0).sqrt()
    if not n:
        return math.nan
    return max(p * (scale - p) / float(n), 0.0) ** 0.5


def wilson_interval(successes: int, n: int, level: float = 0.95) -> Interval:
    """The Wilson score interval of a proportion (Wilson 1927): better than p ± z·s.e. near 0
    and 1 and at small ``n``; NaN bounds with no trials.

    >>> w = wilson_interval(8, 10)
    >>> round(w.low, 4), round(w.high, 4)
    (0.4902, 0.9433)
    """
    if not 0 <= successes <= n:
        raise UserInputError(f"successes must lie in [0, n], not {successes} of {n}")
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, level, 0, "wilson")
    z, p = z_score(level), successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(p, max(centre - half, 0.0), min(centre + half, 1.0), level, n, "wilson")


# --- a max-statistic sign-flip test ---------------------------------------------------------------


@dataclass(frozen=True)
class MaxSignFlipTest:
    """The result of :func:`sign_flip_max_test`.

    Attributes:
        statistic: the largest of the tests' observed statistics (their mean difference, or its
            t-statistic with ``studentize``).
        argmax: the test (column) where it is reached.
        p_value: the share of sign flips whose largest statistic reaches ``statistic``.
        n_samples: paired samples (rows).
        n_tests: tests the maximum is over (columns).
        n_flips: sign vectors used, the observed one included.
        exact: every one of the ``2**n_samples`` sign vectors was used (no draw, no seed).
    """

    statistic: float
    argmax: int
    p_value: float
    n_samples: int
    n_tests: int
    n_flips: int
    exact: bool

    def rejects(self, alpha: float = 0.05) -> bool:
        """Whether the largest effect is significant at ``alpha`` (``p_value <= alpha``)."""
        return self.p_value <= alpha

    def as_dict(self) -> dict[str, Any]:
        """Every field, for a JSON record."""
        return asdict(self)


def _sign_vectors(n: int, n_flips: int, seed: int) -> tuple[Tensor, bool]:
    """``[flips, n]`` signs, the all-ones (observed) vector first: every vector when ``2**n`` fits
    in ``n_flips``, else ``n_flips - 1`` seeded draws after it."""
    if 2**n <= n_flips:
        bits = (torch.arange(2**n)[:, None] >> torch.arange(n)) & 1
        return (1 - 2 * bits).double(), True  # row 0 has no bit set: the observed signs
    rng = torch.Generator().manual_seed(seed)
    drawn = 1 - 2 * torch.randint(2, (n_flips - 1, n), generator=rng)
    return torch.cat([torch.ones(1, n), drawn.double()]).double(), False


def sign_flip_max_test(
    differences: ArrayLike,
    *,
    studentize: bool = False,
    n_flips: int = 10_000,
    seed: int = 0,
) -> MaxSignFlipTest:
    """One-sided test of the largest of several mean paired differences against the largest
    under the null, by flipping the signs of whole samples (Nichols & Holmes 2002, the max-T
    permutation test; Westfall & Young 1993).

    Under the null that no column has an effect, each row (sample) of differences is as likely
    negated as not; flipping a row flips it in every column, so the correlation between columns
    is kept. The p-value is the share of sign vectors whose largest column statistic reaches the
    observed largest: it controls the chance that *any* column passes, where testing the argmax
    column alone against its own standard error does not. With ``2**n_samples <= n_flips`` every
    sign vector is used (exact, deterministic); otherwise ``n_flips - 1`` seeded draws plus the
    observed signs, which keeps the p-value valid (Phipson & Smyth 2010). The smallest p-value
    is ``1 / n_flips`` (``2**-n_samples`` when exact): five samples are the fewest that can reach
    0.05.

    Args:
        differences: ``[sample, test]`` paired differences (restored minus corrupted, say).
        studentize: test the t-statistic (mean over its standard error) instead of the mean;
            columns with a larger spread then weigh no more in the maximum than others.
        n_flips: sign vectors at most (exact enumeration below it).
        seed: the draws' seed when not exact.

    Returns:
        A :class:`MaxSignFlipTest`.

    >>> d = torch.tensor([[1.0, 0.1], [1.2, -0.2], [0.9, 0.3], [1.1, -0.1], [1.0, 0.0]])
    >>> t = sign_flip_max_test(d)
    >>> t.argmax, t.p_value, t.n_flips, t.exact
    (0, 0.03125, 32, True)
    """
    x = torch.as_tensor(np.asarray(differences) if isinstance(differences, np.ndarray) else differences)
    x = x.detach().double().cpu()
    if x.dim() != 2 or x.shape[0] < 2 or x.shape[1] < 1:
        raise UserInputError(f"differences must be [sample, test] with >= 2 samples, got {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise UserInputError("differences hold NaN or infinite values")
    n = x.shape[0]
    signs, exact = _sign_vectors(n, n_flips, seed)
    means = signs @ x / n  # [flip, test]; row 0 is the observed means
    if studentize:
        # Σ(εx)² = Σx² under any flip, so the variance of each flipped column follows from its mean.
        variance = ((x * x).sum(0) - n * means**2).clamp(min=0) / (n - 1)
        stats = torch.where(variance > 0, means / (variance / n).sqrt(), means.sign() * math.inf)
        stats = stats.nan_to_num(nan=0.0)
    else:
        stats = means
    maxima = stats.max(-1).values
    observed = float(maxima[0])
    # Ties count as reaching it; the relative slack absorbs summation-order rounding only.
    slack = 1e-12 * abs(observed) if math.isfinite(observed) else 0.0
    reached = maxima >= observed - slack
    return MaxSignFlipTest(
        statistic=observed,
        argmax=int(stats[0].argmax()),
        p_value=float(reached.double().mean()),
        n_samples=n,
        n_tests=x.shape[1],
        n_flips=signs.shape[0],
        exact=exact,
    )


def sign_flip_test(differences: ArrayLike, *, n_flips: int = 10_000, seed: int = 0) -> MaxSignFlipTest:
    """One-sided sign-flip test that the mean of paired differences is above zero (Fisher's
    randomisation test, 1935): :func:`sign_flip_max_test` with one column, so the maximum is that
    column's mean and nothing is selected.

    Under the null each difference is as likely negated as not (symmetric about zero); the
    p-value is the share of sign vectors whose mean reaches the observed one, ties included.
    Exact (every ``2**n`` vector, no seed) when ``2**n <= n_flips``, as at ROME's 10 noise
    samples, where it is at least ``1 / 1024``, reached when every difference is positive.

    Args:
        differences: ``[sample]`` paired differences (the clean metric minus each corrupted
            sample's, say).
        n_flips: sign vectors at most (exact enumeration below it).
        seed: the draws' seed when not exact.

    Returns:
        A :class:`MaxSignFlipTest` with ``n_tests == 1`` (``statistic`` is the mean difference).

    >>> sign_flip_test(torch.tensor([0.3, 0.2, 0.4, 0.1, 0.2])).p_value  # all five above zero
    0.03125
    >>> sign_flip_test(torch.tensor([0.3, -0.2, 0.4, -0.1, -0.2])).p_value > 0.05
    True
    """
    x = torch.as_tensor(np.asarray(differences) if isinstance(differences, np.ndarray) else differences)
    if x.dim() != 1:
        raise UserInputError(f"differences must be one [sample] vector, got shape {tuple(x.shape)}")
    return sign_flip_max_test(x[:, None], n_flips=n_flips, seed=seed)
