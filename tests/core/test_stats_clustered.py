"""perfguard.core.stats.clustered_percentile_ratio_bound: bounds on a percentile ratio of
samples that come in clusters (a generative request's inter-token gaps)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.core import stats


def clusters(
    rows: int, width: int, seed: int, *, row_sigma: float, sigma: float = 0.05
) -> np.ndarray:
    """Rows sharing a slowness of their own (``row_sigma``) around 1 ms gaps."""
    rng = np.random.default_rng(seed)
    row = rng.lognormal(0.0, row_sigma, (rows, 1))
    return 1e6 * row * rng.lognormal(0.0, sigma, (rows, width))


def test_the_point_is_the_pooled_percentile_ratio() -> None:
    base, cur = clusters(30, 20, 0, row_sigma=0.1), clusters(30, 20, 1, row_sigma=0.1)
    bound = stats.clustered_percentile_ratio_bound(base, cur, 95.0, 0.98, n_boot=300)
    expected = stats.percentile(cur.ravel(), 95.0) / stats.percentile(base.ravel(), 95.0)
    assert bound.point == pytest.approx(expected)
    assert bound.lower <= bound.point <= bound.upper
    assert bound.method.startswith("cluster-bootstrap")


def test_wider_than_resampling_gaps_one_by_one_when_rows_move_together() -> None:
    # Rows that differ (a slow spell) make gaps of one row alike: resampling gaps one by
    # one forgets that and gives an interval far too narrow.
    base, cur = clusters(40, 30, 2, row_sigma=0.3), clusters(40, 30, 3, row_sigma=0.3)
    clustered = stats.clustered_percentile_ratio_bound(base, cur, 95.0, 0.98, n_boot=400)
    naive = stats.percentile_ratio_bound(base.ravel(), cur.ravel(), 95.0, 0.98, n_boot=400)
    assert clustered.upper - clustered.lower > 2 * (naive.upper - naive.lower)


def test_few_false_alarms_on_identical_correlated_runs() -> None:
    # 60 A/A comparisons of correlated requests: a 99% one-sided lower bound above 1
    # must be rare (expected ~1%); the naive bound raises it far more often.
    alarms = naive_alarms = 0
    for trial in range(60):
        a = clusters(25, 12, 2 * trial, row_sigma=0.25)
        b = clusters(25, 12, 2 * trial + 1, row_sigma=0.25)
        c = stats.clustered_percentile_ratio_bound(a, b, 95.0, 0.98, n_boot=200, seed=trial)
        n = stats.percentile_ratio_bound(a.ravel(), b.ravel(), 95.0, 0.98, n_boot=200, seed=trial)
        alarms += c.lower > 1.0
        naive_alarms += n.lower > 1.0
    assert alarms <= 4
    assert naive_alarms > alarms


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(2, 12),
    width=st.integers(1, 8),
    factor=st.floats(0.25, 4.0),
    seed=st.integers(0, 2**16),
)
def test_scaling_one_side_scales_the_ratio_and_its_bounds(
    rows: int, width: int, factor: float, seed: int
) -> None:
    base = clusters(rows, width, seed, row_sigma=0.2)
    cur = clusters(rows, width, seed + 1, row_sigma=0.2)
    one = stats.clustered_percentile_ratio_bound(base, cur, 90.0, 0.9, n_boot=100, seed=5)
    scaled = stats.clustered_percentile_ratio_bound(
        base, cur * factor, 90.0, 0.9, n_boot=100, seed=5
    )
    assert scaled.point == pytest.approx(one.point * factor, rel=1e-9)
    assert scaled.lower == pytest.approx(one.lower * factor, rel=1e-9)
    assert scaled.upper == pytest.approx(one.upper * factor, rel=1e-9)


def test_rows_of_other_lengths_on_the_two_sides() -> None:
    bound = stats.clustered_percentile_ratio_bound(
        clusters(10, 5, 0, row_sigma=0.1), clusters(12, 9, 1, row_sigma=0.1), 50.0, 0.9, n_boot=50
    )
    assert 0.5 < bound.point < 2.0


@pytest.mark.parametrize(
    ("base", "current", "match"),
    [
        (np.ones(5), np.ones((2, 2)), "expected clusters x values"),
        (np.ones((2, 2)), np.empty((0, 3)), "expected clusters x values"),
        (np.zeros((2, 2)), np.ones((2, 2)), "positive base samples"),
        (np.ones((2, 2)), np.full((2, 2), np.nan), "NaN|finite"),
    ],
)
def test_bad_input_is_refused(base: np.ndarray, current: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        stats.clustered_percentile_ratio_bound(base, current, 95.0, 0.9, n_boot=10)
