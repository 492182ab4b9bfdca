"""perfguard.core.stats: the nearest-rank percentile, summaries and regression bounds."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from perfguard.core import stats
from perfguard.records.figures import summarize
from perfguard.records.results import LatencySummary

# No wall-clock deadline: the CI hosts are shared and noisy.
SETTINGS = settings(deadline=None, max_examples=150)

sample_lists = st.lists(
    st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=60,
)
# Small integers make ties (the hard case for rank definitions) common.
tied_lists = st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=60)
any_samples = st.one_of(sample_lists, tied_lists)
# Percentiles as people write them: whole numbers and one decimal (P99.9).
qs = st.one_of(
    st.integers(min_value=0, max_value=100).map(float),
    st.integers(min_value=0, max_value=1000).map(lambda k: k / 10),
)


def _exact(q: float) -> Fraction:
    """q as the decimal the user wrote (99.9, not its binary approximation)."""
    return Fraction(repr(q))


# ------------------------------------------------------------------ known answers


@pytest.mark.parametrize(
    ("samples", "q", "expected"),
    [
        (list(range(1, 101)), 95, 95),
        (list(range(1, 101)), 99, 99),
        (list(range(1, 101)), 50, 50),
        (list(range(1, 101)), 99.9, 100),
        (list(range(1, 11)), 50, 5),
        (list(range(1, 11)), 90, 9),
        (list(range(1, 11)), 91, 10),
        (list(range(1, 11)), 0, 1),
        (list(range(1, 11)), 100, 10),
        (list(range(1, 26)), 28, 7),  # 7/25 is exactly 28%; numpy says 8 here
        (list(range(1, 1001)), 99.9, 999),
        ([42.0], 0, 42.0),
        ([42.0], 50, 42.0),
        ([42.0], 100, 42.0),
        ([5, 1, 4, 2, 3], 50, 3),  # order of input does not matter
        ([1, 1, 1, 2], 75, 1),
        ([1, 1, 1, 2], 76, 2),
    ],
)
def test_percentile_known_answers(samples: list[float], q: float, expected: float) -> None:
    assert stats.percentile(samples, q) == expected


def test_percentile_zero_and_hundred_are_min_and_max() -> None:
    x = np.random.default_rng(3).lognormal(size=999)
    assert stats.percentile(x, 0) == x.min()
    assert stats.percentile(x, 100) == x.max()


def test_percentile_matches_numpy_inverted_cdf_away_from_float_noise() -> None:
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 7, 64, 1000, 1001):
        x = rng.normal(size=n)
        for q in (0.5, 1.3, 33.3, 50.1, 90.7, 99.95):
            if abs(q * n / 100 - round(q * n / 100)) < 1e-6:
                continue  # where numpy's float noise can cost it a rank
            expected = np.percentile(x, q, method="inverted_cdf")
            assert stats.percentile(x, q) == expected


@pytest.mark.parametrize("bad", [[], np.array([])])
def test_percentile_empty_raises(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="empty"):
        stats.percentile(bad, 50)


@pytest.mark.parametrize("q", [-0.1, 100.1, math.nan, math.inf])
def test_percentile_q_out_of_range_raises(q: float) -> None:
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        stats.percentile([1.0, 2.0], q)


def test_percentile_non_finite_samples_raise() -> None:
    with pytest.raises(ValueError, match="NaN"):
        stats.percentile([1.0, math.nan], 50)


def test_percentiles_agree_with_percentile() -> None:
    x = np.random.default_rng(1).lognormal(size=501)
    got = stats.percentiles(x, [0, 50, 95, 99.9, 100])
    assert got == {q: stats.percentile(x, q) for q in (0, 50, 95, 99.9, 100)}
    with pytest.raises(ValueError):
        stats.percentiles(x, [50, 101])


# ------------------------------------------------------------------ properties


@SETTINGS
@given(samples=any_samples, q=qs)
def test_percentile_is_the_smallest_sample_with_q_percent_at_or_below(
    samples: list[float], q: float
) -> None:
    result = stats.percentile(samples, q)
    n = len(samples)
    assert result in samples
    at_or_below = sum(1 for s in samples if s <= result)
    strictly_below = sum(1 for s in samples if s < result)
    # Exact arithmetic: at least q% of the samples are <= result ...
    assert at_or_below * 100 >= _exact(q) * n
    # ... and no smaller sample qualifies: fewer than q% lie strictly below it
    # (for q=0 the minimum has nothing below it).
    if q > 0:
        assert strictly_below * 100 < _exact(q) * n
    else:
        assert strictly_below == 0


@SETTINGS
@given(samples=any_samples, q1=qs, q2=qs)
def test_percentile_is_monotone_in_q(samples: list[float], q1: float, q2: float) -> None:
    lo, hi = sorted((q1, q2))
    assert stats.percentile(samples, lo) <= stats.percentile(samples, hi)


@SETTINGS
@given(samples=any_samples, q=qs, data=st.data())
def test_percentile_ignores_order(samples: list[float], q: float, data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(samples))
    assert stats.percentile(shuffled, q) == stats.percentile(samples, q)


@SETTINGS
@given(
    samples=st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=60),
    q=qs,
    c=st.floats(min_value=1e-3, max_value=1e3),
)
def test_percentile_scales_with_samples(samples: list[float], q: float, c: float) -> None:
    scaled = [c * s for s in samples]
    # Scaling by c > 0 keeps the order, so the same rank is picked: exact equality.
    assert stats.percentile(scaled, q) == c * stats.percentile(samples, q)


# ------------------------------------------------------------------ summaries


@SETTINGS
@given(samples=st.lists(st.integers(min_value=1, max_value=10**9), min_size=1, max_size=200))
def test_summarize_is_consistent(samples: list[int]) -> None:
    s = summarize(np.asarray(samples, dtype=np.int64))
    assert isinstance(s, LatencySummary)
    assert s.n == len(samples)
    assert s.min <= s.p50 <= s.p90 <= s.p95 <= s.p99 <= s.p999 <= s.max
    assert s.min == min(samples) and s.max == max(samples)
    assert s.min <= s.mean <= s.max
    assert s.std >= 0
    assert s.p95 == stats.percentile(samples, 95)
    assert s.p999 == stats.percentile(samples, 99.9)


def test_summarize_values() -> None:
    s = summarize(list(range(1, 101)))
    assert (s.n, s.min, s.max, s.mean) == (100, 1.0, 100.0, 50.5)
    assert s.std == pytest.approx(np.std(np.arange(1, 101), ddof=1))
    assert (s.p50, s.p90, s.p95, s.p99, s.p999) == (50, 90, 95, 99, 100)
    # Plain Python numbers, ready for JSON.
    assert all(type(v) is float for k, v in s.to_dict().items() if k != "n")
    assert type(s.n) is int


def test_summarize_single_sample_has_zero_std() -> None:
    s = summarize([1234])
    assert s.std == 0.0
    assert s.min == s.max == s.p50 == s.p999 == 1234


def test_summarize_empty_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        summarize([])


def test_throughput_counts_the_batch() -> None:
    # 4 requests of 2 ms each, batch 8: 32 samples in 8 ms = 4000 samples/s.
    assert stats.throughput([2_000_000] * 4, 8) == pytest.approx(4000.0)
    assert stats.throughput([1_000_000, 3_000_000], 1) == pytest.approx(500.0)


@pytest.mark.parametrize(("samples", "batch"), [([1, 2], 0), ([], 1), ([0, 0], 1)])
def test_throughput_rejects_bad_input(samples: list[int], batch: int) -> None:
    with pytest.raises(ValueError):
        stats.throughput(samples, batch)


# ------------------------------------------------------------------ stability


def test_stability_without_drift() -> None:
    x = np.random.default_rng(0).lognormal(mean=13.8, sigma=0.1, size=300)
    assert stats.stability_ratio(x) == pytest.approx(1.0, abs=0.05)
    assert stats.is_stable(x, 0.10)


def test_stability_detects_drift() -> None:
    rng = np.random.default_rng(0)
    drift = np.linspace(1.0, 1.5, 300)  # the run slows down by half
    x = rng.lognormal(mean=13.8, sigma=0.05, size=300) * drift
    ratio = stats.stability_ratio(x)
    assert ratio > 1.2
    assert not stats.is_stable(x, 0.10)
    assert stats.is_stable(x, 0.50)
    # Speeding up (still warming) is drift too.
    assert not stats.is_stable(x[::-1], 0.10)


def test_stability_ratio_is_median_of_thirds() -> None:
    x = [10, 10, 10, 99, 99, 99, 20, 20, 20]
    assert stats.stability_ratio(x) == 2.0


def test_short_runs_count_as_stable() -> None:
    assert stats.is_stable([1, 1, 100, 100, 100], 0.01)
    assert not stats.is_stable([1, 1, 100, 100, 100, 100], 0.01)
    assert stats.stability_ratio([1, 2]) == 1.0


def test_negative_tolerance_raises() -> None:
    with pytest.raises(ValueError, match="tolerance"):
        stats.is_stable([1, 2, 3, 4, 5, 6], -0.1)


# ------------------------------------------------------------------ ratio bound


def _latencies(seed: int, n: int, scale: float = 1.0) -> np.ndarray:
    """Seeded synthetic latencies in ns: lognormal around 1 ms."""
    return np.random.default_rng(seed).lognormal(mean=math.log(1e6), sigma=0.3, size=n) * scale


def test_ratio_bound_point_and_order() -> None:
    base, cur = _latencies(1, 500), _latencies(2, 400, 1.1)
    b = stats.percentile_ratio_bound(base, cur, q=95.0, confidence=0.99)
    assert b.point == stats.percentile(cur, 95) / stats.percentile(base, 95)
    assert b.lower <= b.point <= b.upper
    assert b.confidence == 0.99
    assert b.method.startswith("bootstrap")


def test_ratio_bound_is_reproducible_and_seeded() -> None:
    base, cur = _latencies(1, 300), _latencies(2, 300)
    assert stats.percentile_ratio_bound(base, cur, seed=5) == stats.percentile_ratio_bound(
        base, cur, seed=5
    )
    assert stats.percentile_ratio_bound(base, cur, seed=5) != stats.percentile_ratio_bound(
        base, cur, seed=6
    )


def test_ratio_bound_identical_distributions_contain_one() -> None:
    hits = 0
    for i in range(20):
        base, cur = _latencies(100 + i, 1000), _latencies(200 + i, 1000)
        b = stats.percentile_ratio_bound(base, cur, q=95.0, confidence=0.99, seed=i)
        hits += b.lower <= 1.0 <= b.upper
    assert hits >= 17


def test_ratio_bound_detects_a_20_percent_shift() -> None:
    for i in range(5):
        base, cur = _latencies(300 + i, 1000), _latencies(400 + i, 1000, 1.2)
        b = stats.percentile_ratio_bound(base, cur, q=95.0, confidence=0.99, seed=i)
        assert b.lower > 1.0, b


def test_ratio_bound_wider_at_higher_confidence() -> None:
    base, cur = _latencies(1, 500), _latencies(2, 500)
    narrow = stats.percentile_ratio_bound(base, cur, confidence=0.8)
    wide = stats.percentile_ratio_bound(base, cur, confidence=0.99)
    assert wide.lower <= narrow.lower and narrow.upper <= wide.upper


def test_ratio_bound_matches_an_explicit_index_matrix_bootstrap() -> None:
    # The Beta-order-statistic shortcut must give the same bootstrap distribution
    # as resampling index matrices and taking the nearest-rank percentile per row.
    rng = np.random.default_rng(11)
    x = np.sort(np.round(_latencies(5, 300), -4))  # rounding adds ties
    n, k, n_boot = x.size, 285 - 1, 4000  # nearest-rank P95 of 300 is rank 285
    idx = rng.integers(0, n, size=(n_boot, n))
    brute = np.partition(x[idx], k, axis=1)[:, k]
    fast = stats._bootstrap_order_statistic(x, k, n_boot, np.random.default_rng(12))
    assert sps.ks_2samp(brute, fast).pvalue > 0.001
    assert abs(np.median(brute) - np.median(fast)) <= 0.01 * np.median(brute)


def test_ratio_bound_tiny_samples_still_bracket_the_point() -> None:
    b = stats.percentile_ratio_bound([1.0], [2.0])
    assert b.lower == b.point == b.upper == 2.0


@pytest.mark.parametrize(
    ("base", "cur", "kwargs"),
    [
        ([], [1.0], {}),
        ([1.0], [], {}),
        ([0.0, 1.0], [1.0], {}),
        ([1.0], [1.0], {"q": 101.0}),
        ([1.0], [1.0], {"confidence": 1.0}),
        ([1.0], [1.0], {"n_boot": 0}),
    ],
)
def test_ratio_bound_rejects_bad_input(
    base: list[float], cur: list[float], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ValueError):
        stats.percentile_ratio_bound(base, cur, **kwargs)


# ------------------------------------------------------------------ order statistics


def test_order_statistic_ci_coverage() -> None:
    rng = np.random.default_rng(21)
    sigma, q, conf = 0.3, 95.0, 0.90
    true_p95 = math.exp(sigma * sps.norm.ppf(q / 100))
    trials, covered = 400, 0
    for _ in range(trials):
        x = rng.lognormal(sigma=sigma, size=200)
        lo, hi = stats.order_statistic_ci(x, q, conf)
        assert x.min() <= lo <= hi <= x.max()
        covered += lo <= true_p95 <= hi
    # The interval is conservative (>= 90%); allow sampling error over 400 trials.
    assert covered / trials >= 0.86


def test_order_statistic_ci_brackets_the_point_estimate() -> None:
    x = _latencies(9, 1000)
    lo, hi = stats.order_statistic_ci(x, 95.0, 0.99)
    assert lo < stats.percentile(x, 95) < hi


def test_order_statistic_ci_clamps_small_samples_to_the_range() -> None:
    x = [3.0, 1.0, 2.0]
    assert stats.order_statistic_ci(x, 99.0, 0.99) == (2.0, 3.0)
    assert stats.order_statistic_ci(x, 50.0, 0.99) == (1.0, 3.0)
    assert stats.order_statistic_ci([7.0], 50.0, 0.5) == (7.0, 7.0)


# ------------------------------------------------------------------ noise floor


def test_noise_floor() -> None:
    assert stats.noise_floor([]) == 0.0
    assert stats.noise_floor([5.0]) == 0.0
    assert stats.noise_floor([10.0, 10.0, 10.0]) == 0.0
    values = [9.0, 10.0, 11.0]
    assert stats.noise_floor(values) == pytest.approx(1.0 / 10.0)
    with pytest.raises(ValueError):
        stats.noise_floor([1.0, math.nan])
