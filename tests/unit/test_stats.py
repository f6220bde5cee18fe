"""lmsci_mi.stats against references: scipy's bootstrap and normal quantiles, NumPy's standard
deviation and percentiles, and Wilson intervals computed by hand."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch

from lmsci_mi.stats import (
    Interval,
    binomial_standard_error,
    bootstrap_each,
    bootstrap_interval,
    bootstrap_replicates,
    mean_se,
    normal_half_width,
    normal_interval,
    paired_bootstrap_interval,
    percentile_bounds,
    ratio_standard_error,
    resample_counts,
    resample_indices,
    standard_error,
    wilson_interval,
    z_score,
)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("statistic", [None, np.median])
def test_bootstrap_interval_matches_scipy_percentile(seed: int, statistic) -> None:
    # Different generators, so equal only up to Monte Carlo error: with 20,000 resamples each the
    # bounds of a skewed sample of 60 differ by at most 2 % of the width over ten seeds; 6 % here.
    x = np.random.default_rng(seed).exponential(size=60)
    reference = scipy.stats.bootstrap(
        (x,),
        statistic or np.mean,
        n_resamples=20_000,
        method="percentile",
        rng=np.random.default_rng(100 + seed),
    ).confidence_interval
    ours = bootstrap_interval(x, statistic, n_resamples=20_000, seed=seed)
    width = reference.high - reference.low
    assert abs(ours.low - reference.low) < 0.06 * width
    assert abs(ours.high - reference.high) < 0.06 * width
    assert ours.estimate == pytest.approx(float((statistic or np.mean)(x)))
    assert (ours.n, ours.level, ours.method) == (60, 0.95, "percentile bootstrap")


def test_bootstrap_replicates_are_the_statistic_of_the_resamples() -> None:
    x = torch.randn(3, 25, generator=torch.Generator().manual_seed(0))
    index = resample_indices(25, 200, seed=7)
    expected = torch.stack([x[:, i].mean(-1) for i in index], -1)
    replicates = bootstrap_replicates(x, n_resamples=200, seed=7)
    torch.testing.assert_close(replicates, expected)
    # The same resamples give NumPy's percentiles exactly (linear interpolation).
    bounds = percentile_bounds(replicates, 0.9)
    reference = np.percentile(expected.double().numpy(), [5, 95], axis=-1).T
    np.testing.assert_allclose(bounds.numpy(), reference, rtol=1e-12)
    assert bounds.shape == (3, 2)


def test_draws_are_seeded_and_never_global() -> None:
    torch.manual_seed(123)
    first = resample_indices(10, 5, seed=3)
    torch.manual_seed(456)
    assert torch.equal(first, resample_indices(10, 5, seed=3))
    assert torch.equal(
        first, torch.randint(10, (5, 10), generator=torch.Generator().manual_seed(3))
    )
    assert not torch.equal(first, resample_indices(10, 5, seed=4))
    with pytest.raises(ValueError, match="seed or a generator"):
        resample_indices(10, 5, seed=None)


def test_numpy_generator_draws_one_resample_per_call() -> None:
    # A benchmark that shares one rng across intervals keeps its stream: row i is the i-th call.
    values = np.random.default_rng(0).normal(size=11)
    rng, reference_rng = np.random.default_rng(5), np.random.default_rng(5)
    ours = bootstrap_interval(values, np.mean, n_resamples=300, generator=rng)
    draws = [np.mean(values[reference_rng.integers(0, 11, 11)]) for _ in range(300)]
    low, high = np.quantile(draws, [0.025, 0.975])
    assert ours.as_list() == pytest.approx([low, high], rel=1e-12)
    assert rng.integers(0, 100) == reference_rng.integers(0, 100)


def test_resample_counts_and_bootstrap_each_use_the_same_draws() -> None:
    index = resample_indices(6, 50, seed=2)
    counts = resample_counts(6, 50, seed=2)
    assert torch.equal(
        counts, torch.stack([torch.bincount(i, minlength=6) for i in index]).double()
    )
    x = torch.arange(6.0) ** 2
    weighted = (counts @ x.double()) / 6
    looped = bootstrap_each(lambda i: x[i].mean(), 6, n_resamples=50, seed=2)
    torch.testing.assert_close(weighted.float(), looped)


def test_paired_bootstrap_cancels_what_the_pairs_share() -> None:
    # Items vary a lot (uniform on 0..100), the condition adds 2 plus noise of s.d. 0.1: the
    # paired interval has about the half-width of the differences' normal interval (1.96 · s.e.,
    # 0.03), while the mean of either condition alone has one of about 8.
    generator = torch.Generator().manual_seed(0)
    base = torch.rand(50, generator=generator, dtype=torch.float64) * 100
    treated = base + 2 + 0.1 * torch.randn(50, generator=generator, dtype=torch.float64)
    paired = paired_bootstrap_interval(treated, base, n_resamples=2000, seed=1)
    assert paired.method == "paired percentile bootstrap"
    assert paired.estimate == pytest.approx(float((treated - base).mean()))
    assert paired.low < paired.estimate < paired.high
    assert paired.half_width == pytest.approx(normal_interval(treated - base).half_width, rel=0.2)
    assert bootstrap_interval(base, n_resamples=2000, seed=1).half_width > 5
    # With the mean, the paired difference of means is the bootstrap of the differences.
    differences = bootstrap_interval(treated - base, n_resamples=2000, seed=1)
    assert paired.as_list() == pytest.approx(differences.as_list(), rel=1e-9)
    with pytest.raises(ValueError, match="same items"):
        paired_bootstrap_interval(treated, base[:-1])


def test_percentile_bounds_nan_policy() -> None:
    replicates = torch.tensor([1.0, 2.0, math.nan, 3.0, 4.0])
    assert torch.isnan(percentile_bounds(replicates)).all()
    torch.testing.assert_close(
        percentile_bounds(replicates, nan_policy="omit"),
        torch.tensor(np.nanpercentile(replicates.numpy(), [2.5, 97.5]), dtype=torch.float64),
    )
    assert torch.isnan(percentile_bounds(torch.full((4,), math.nan), nan_policy="omit")).all()
    with pytest.raises(ValueError, match="level"):
        percentile_bounds(replicates, 95)


def test_standard_error_matches_numpy_and_scipy() -> None:
    x = np.random.default_rng(3).normal(size=(4, 17))
    reference = x.std(axis=1, ddof=1) / math.sqrt(17)
    np.testing.assert_allclose(standard_error(x, axis=1), reference, rtol=1e-12)
    np.testing.assert_allclose(standard_error(torch.tensor(x)).numpy(), scipy.stats.sem(x, axis=1))
    np.testing.assert_allclose(standard_error(torch.tensor(x.T), axis=0).numpy(), reference)
    assert standard_error(torch.tensor(x, dtype=torch.float32)).dtype == torch.float32
    assert float(standard_error([1, 2, 3, 4])) == pytest.approx(0.6454972243679028)
    assert torch.isnan(standard_error(torch.ones(3, 1))).all()
    assert standard_error(torch.ones(3, 1)).shape == (3,)
    assert math.isnan(mean_se([2.0]).se)


def test_normal_interval_and_z() -> None:
    assert z_score(0.95) == pytest.approx(scipy.stats.norm.ppf(0.975), rel=1e-12)
    assert z_score(0.9) == pytest.approx(scipy.stats.norm.ppf(0.95), rel=1e-12)
    x = np.random.default_rng(4).normal(size=30)
    ours = normal_interval(x, 0.9)
    low, high = scipy.stats.norm.interval(0.9, loc=x.mean(), scale=scipy.stats.sem(x))
    assert ours.as_list() == pytest.approx([low, high], rel=1e-10)
    assert float(normal_half_width(torch.tensor(x))) == pytest.approx(
        z_score() * scipy.stats.sem(x), rel=1e-10
    )


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        # By hand: centre (p + z²/2n) / (1 + z²/n), half z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n).
        (8, 10, 0.49016, 0.94331),
        (0, 10, 0.0, 0.27753),  # upper bound z² / (n + z²)
        (10, 10, 0.72247, 1.0),
        (50, 100, 0.40383, 0.59617),
    ],
)
def test_wilson_interval_by_hand(successes: int, n: int, low: float, high: float) -> None:
    interval = wilson_interval(successes, n)
    assert interval.as_list() == pytest.approx([low, high], abs=1e-5)
    assert interval.estimate == successes / n
    assert (interval.n, interval.method) == (n, "wilson")


def test_wilson_edges() -> None:
    assert math.isnan(wilson_interval(0, 0).low)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)
    # The Wilson interval is narrower than the 99 % one.
    assert wilson_interval(3, 20, 0.99).half_width > wilson_interval(3, 20).half_width


def test_binomial_standard_error() -> None:
    assert binomial_standard_error(0.2, 25) == pytest.approx(0.08)
    assert binomial_standard_error(20.0, 25, scale=100) == pytest.approx(8.0)
    assert math.isnan(binomial_standard_error(0.5, 0))
    rates = torch.tensor([0.0, 0.5, 1.0])
    torch.testing.assert_close(binomial_standard_error(rates, 4), torch.tensor([0.0, 0.25, 0.0]))


def test_interval_record() -> None:
    interval = Interval(1.0, 0.5, 2.0, 0.95, 10, "normal")
    assert interval.as_dict() == {
        "estimate": 1.0,
        "low": 0.5,
        "high": 2.0,
        "level": 0.95,
        "n": 10,
        "method": "normal",
    }
    assert interval.half_width == 0.75
    with pytest.raises(AttributeError):
        interval.low = 0.0  # type: ignore[misc]


def test_ratio_standard_error_by_the_delta_method() -> None:
    # Var(a/b) ≈ (a/b)² (Var a / a² + Var b / b²) for independent a, b: checked by simulation.
    generator = torch.Generator().manual_seed(0)
    a = 2.0 + 0.2 * torch.randn(200_000, generator=generator, dtype=torch.float64)
    b = 4.0 + 0.2 * torch.randn(200_000, generator=generator, dtype=torch.float64)
    assert ratio_standard_error(2.0, 0.2, 4.0, 0.2) == pytest.approx(float((a / b).std()), rel=0.02)
    assert math.isnan(ratio_standard_error(0.0, 0.1, 4.0, 0.2))


# --- interval code lives in lmsci_mi/stats.py only ------------------------------------------------

_INTERVAL_CODE = {
    # torch.randint(n, (B, n)) / torch.randint(0, n, (B, n)): B resamples of n items.
    "bootstrap resample draw": (
        r"randint\(\s*(?:0\s*,\s*)?(?P<n>[^,()\s]+(?:\([^()]*\))?)\s*,"
        r"\s*\(\s*[^,()]+\s*,\s*(?P=n)\s*\)"
    ),
    # rng.integers(0, n, n), rng.choice(..., replace=True): one NumPy resample.
    "numpy resample draw": (
        r"\.integers\(\s*0\s*,\s*(?P<m>[\w.]+)\s*,\s*(?P=m)\s*\)|\.choice\([^()]*replace\s*=\s*True"
    ),
    # Percentile bounds of replicates; descriptive percentiles are allow-listed below.
    "quantile": r"\b(?:nan)?(?:quantile|percentile)\(",
    "wilson": r"1\s*\+\s*z\s*(?:\*\*\s*2|\*\s*z)\s*/|def\s+\w*wilson",
    # std / sqrt(n) in its spellings: .std(...) / anything, / sqrt(n), / n ** 0.5.
    "standard error": (
        r"\.std\([^()]*\)\s*/|/\s*(?:math\.|np\.|torch\.)?sqrt\(\s*(?:n\w*|len\()"
        r"|/\s*\(?(?:len\([^()]*\)|n\w*|\w+\.numel\(\))\)?\s*\*\*\s*0?\.5"
    ),
    "binomial standard error": r"\*\s*\(\s*(?:1|100)\s*-\s*\w+\s*\)\s*/",
    "normal quantile constant": r"\b1\.96\b|\b1\.959",
}

# (file, the matched line's code, why it is not interval code)
_NOT_INTERVALS = {
    (
        "lmsci_mi/representations/projections.py",
        "low, high = self.random.quantile(0.05, dim=1), self.random.quantile(0.95, dim=1)",
    ): "the plot's 5-95% range of the random-pair null distribution, not an estimate's interval",
    (
        "lmsci_mi/representations/projections.py",
        "p95 = torch.quantile(baseline, 0.95)",
    ): "the random baseline's 95th percentile, a threshold (the share of held-out pairs above it)",
}


def _interval_code(path: Path, text: str) -> list[tuple[str, str]]:
    """(pattern name, line) for each match of interval code in a file's text."""
    lines = text.splitlines()
    found = []
    for name, pattern in _INTERVAL_CODE.items():
        for match in re.finditer(pattern, text):
            found.append((name, lines[text.count("\n", 0, match.start())].strip()))
    return found


@pytest.mark.parametrize(
    "snippet",
    [
        "draws = torch.randint(n, (config.bootstrap, n), generator=generator).to(x.device)",
        "draws = torch.randint(len(rows), (samples, len(rows)), generator=generator)",
        "draws = torch.randint(0, k, (BOOTSTRAP, k), generator=generator)",
        "draws = [np.mean(values[rng.integers(0, n, n)]) for _ in range(n_boot)]",
        "low, high = np.nanpercentile(scores.cpu().numpy(), [2.5, 97.5], axis=0)",
        "return [float(means.quantile(0.025)), float(means.quantile(0.975))]",
        "centre = (p + z * z / (2 * n)) / (1 + z * z / n)",
        "se = float(row.std() / n**0.5) if n > 1 else 0.0",
        "errors = (self.values.float().std(1) / max(n, 1) ** 0.5).tolist()",
        '"se": float(d.std(unbiased=True) / d.numel() ** 0.5)',
        "return (values.std(1) / math.sqrt(n)).tolist()",
        "errors = (rates * (1 - rates) / n).clamp(min=0).sqrt()",
        "[(p * (100 - p) / k) ** 0.5 for p, k in pairs]",
        "band = 1.96 * stack.std(0) / len(stack) ** 0.5",
    ],
)
def test_the_interval_code_patterns_catch_each_spelling(snippet: str) -> None:
    assert _interval_code(Path("x.py"), snippet)


@pytest.mark.parametrize(
    "snippet",
    [
        "x = x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()",
        "return differ / len(acts), (gap / max(norm, 1e-12)) ** 0.5",
        "scale = 1 / (d_model**0.5 * config.heads)",
        "pick = torch.randint(len(kept), (config.batch_tokens,), generator=generator)",
        "tokens = torch.randint(1, config.d_vocab, (config.batch_size, n), generator=generator)",
        "z = (x - mean) / std",
    ],
)
def test_the_interval_code_patterns_pass_other_code(snippet: str) -> None:
    assert not _interval_code(Path("x.py"), snippet)


def test_interval_code_lives_only_in_stats() -> None:
    root = Path(__file__).resolve().parents[2]
    found, allowed = [], set()
    # The library and the benchmarks: every interval a page shows comes from lmsci_mi.stats.
    for path in sorted([*(root / "lmsci_mi").rglob("*.py"), *(root / "benchmarks").rglob("*.py")]):
        relative = path.relative_to(root).as_posix()
        if relative == "lmsci_mi/stats.py":
            continue
        for name, line in _interval_code(path, path.read_text(encoding="utf-8")):
            if (relative, line) in _NOT_INTERVALS:
                allowed.add((relative, line))
            else:
                found.append(f"{relative}: {name}: {line}")
    assert not found, (
        "interval code outside lmsci_mi/stats.py (call lmsci_mi.stats):\n" + "\n".join(found)
    )
    assert allowed == set(_NOT_INTERVALS), "stale allow-list entries: " + str(
        set(_NOT_INTERVALS) - allowed
    )


# --- the max-statistic sign-flip test ---------------------------------------------------------------


def _null_differences(seed: int, n: int = 10, layers: int = 30) -> torch.Tensor:
    """Paired differences with no effect in any column, correlated across columns like a
    windowed trace's layers (each column a moving sum of shared noise)."""
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(n, layers + 9, generator=g, dtype=torch.float64)
    return shared.unfold(1, 10, 1).sum(-1)[:, :layers]


def test_sign_flip_max_test_holds_its_level_with_no_effect_where_the_argmax_s_e_rule_does_not() -> None:
    """Over 400 effect-free data sets the max test passes about alpha of them; the old rule
    (the argmax column's mean > 2 of its standard errors) passes several times more."""
    from lmsci_mi.stats import sign_flip_max_test

    trials = [_null_differences(seed) for seed in range(400)]
    new = sum(sign_flip_max_test(d).rejects(0.05) for d in trials)
    old = 0
    for d in trials:
        column = int(d.mean(0).argmax())
        old += bool(d[:, column].mean() > 2 * standard_error(d[:, column]))
    assert wilson_interval(new, 400).low <= 0.05 <= wilson_interval(new, 400).high, new
    assert old > 2 * new and old / 400 > 0.1, (old, new)


def test_sign_flip_max_test_finds_a_clear_effect_at_one_column() -> None:
    from lmsci_mi.stats import sign_flip_max_test

    d = _null_differences(0)
    d[:, 17] += 3 * d.std()  # a clear effect at one column, every sample
    test = sign_flip_max_test(d)
    assert test.argmax == 17 and test.exact and test.n_flips == 1024
    assert test.p_value == 1 / 1024 and test.rejects(0.05)
    studentized = sign_flip_max_test(d, studentize=True)
    assert studentized.argmax == 17 and studentized.rejects(0.05)


def test_sign_flip_max_test_draws_seeded_flips_beyond_its_budget_and_checks_its_input() -> None:
    from lmsci_mi.stats import sign_flip_max_test

    d = torch.randn(16, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a, b = sign_flip_max_test(d, n_flips=500, seed=3), sign_flip_max_test(d, n_flips=500, seed=3)
    assert a == b and not a.exact and a.n_flips == 500 and 1 / 500 <= a.p_value <= 1
    exact = sign_flip_max_test(d, n_flips=2**16)
    assert exact.exact and abs(exact.p_value - a.p_value) < 0.1  # draws estimate the exact p
    assert sign_flip_max_test(torch.zeros(5, 4)).p_value == 1.0  # nothing to find: never passes
    with pytest.raises(ValueError, match="sample, test"):
        sign_flip_max_test(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="NaN"):
        sign_flip_max_test(torch.tensor([[1.0], [math.nan]]))


def test_sign_flip_test_holds_its_level_with_no_gap_and_finds_a_gap() -> None:
    """Differences symmetric about zero (no gap): about alpha of 400 data sets pass, the exact
    test's 51/1024 at 10 samples. A gap of one standard deviation passes in most: a one-sided
    t-test's power there is 0.90, which the sign-flip test nearly matches."""
    from lmsci_mi.stats import sign_flip_max_test, sign_flip_test

    g = torch.Generator().manual_seed(0)
    trials = torch.randn(400, 10, generator=g, dtype=torch.float64)
    null = sum(sign_flip_test(d).rejects(0.05) for d in trials)
    assert wilson_interval(null, 400).low <= 51 / 1024 <= wilson_interval(null, 400).high, null
    gap = sum(sign_flip_test(d + 1.0).rejects(0.05) for d in trials)
    assert gap / 400 > 0.8, gap
    d = trials[0] + 1.0
    assert sign_flip_test(d) == sign_flip_max_test(d[:, None])  # one column: nothing selected
    assert sign_flip_test(d.abs()).p_value == 1 / 1024  # every difference above zero
    assert sign_flip_test(-d.abs()).p_value == 1.0
    with pytest.raises(ValueError, match=r"one \[sample\] vector"):
        sign_flip_test(torch.zeros(5, 2))
