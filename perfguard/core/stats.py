"""Statistics on latency samples: percentiles, summaries and regression bounds.

Percentile definition
---------------------
perfguard uses ONE percentile definition everywhere (summaries, gates, bootstrap
bounds, stability): the **nearest rank**. The q-th percentile of n samples is the
smallest sample x such that at least q% of the samples are <= x. With the
samples sorted ascending as x(1) <= ... <= x(n), it is x(k) with
k = max(1, ceil(q/100 * n)). So P0 is the minimum, P100 the maximum, P50 of
1..10 is 5 and P95 of 1..100 is 95. The result is always one of the measured
samples, never an interpolation between two. It is numpy's
``method="inverted_cdf"``, with one difference: perfguard takes q/100*n as the
whole number it stands for when float arithmetic misses it by a hair, where
numpy goes one rank too far (numpy gives P28 of 1..25 as 8; 7 is right, as
7 of 25 samples are 28%).

Why nearest rank: a reported P95 of 12.3 ms is a latency some request really
had, and the definition needs no interpolation rule that would differ between
tools.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats

__all__ = [
    "RatioBound",
    "as_samples",
    "check_q",
    "clustered_percentile_ratio_bound",
    "is_stable",
    "noise_floor",
    "order_statistic_ci",
    "percentile",
    "percentile_ratio_bound",
    "percentiles",
    "rank_index",
    "stability_ratio",
    "throughput",
]

FloatArray = npt.NDArray[np.float64]

# Relative slack when deciding whether q/100*n is a whole number: 95/100*20 must be
# rank 19 even if float arithmetic gives 19.000000000000004 (ceil would say 20).
_RANK_EPS = 1e-9


def as_samples(samples: npt.ArrayLike, what: str = "samples") -> FloatArray:
    """``samples`` as a 1-D float64 array; ValueError when empty or not finite."""
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{what} is empty; a percentile needs at least one sample")
    if not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{what} contains NaN or infinite values; only finite samples can be ranked"
        )
    return arr


def check_q(q: float) -> float:
    qf = float(q)
    if not (math.isfinite(qf) and 0.0 <= qf <= 100.0):
        raise ValueError(f"percentile q={q!r} is out of range; expected a number in [0, 100]")
    return qf


def rank_index(n: int, q: float) -> int:
    """0-based index in the sorted samples of the nearest-rank q-th percentile."""
    exact = q * n / 100.0
    nearest = round(exact)
    # Snap float noise onto the whole number it stands for (see _RANK_EPS).
    if abs(exact - nearest) <= _RANK_EPS * max(1.0, exact):
        exact = float(nearest)
    rank = max(1, math.ceil(exact))
    return min(rank, n) - 1


def percentile(samples: npt.ArrayLike, q: float) -> float:
    """The nearest-rank q-th percentile (q in [0, 100]) of ``samples``.

    See the module docstring for the definition. Raises ValueError on empty
    input, non-finite samples or q outside [0, 100].
    """
    qf = check_q(q)
    arr = as_samples(samples)
    k = rank_index(arr.size, qf)
    # partition is O(n): only the k-th element needs to be in place.
    return float(np.partition(arr, k)[k])


def percentiles(samples: npt.ArrayLike, qs: Iterable[float]) -> dict[float, float]:
    """Several nearest-rank percentiles at once (one sort), keyed by q as given."""
    checked = [check_q(q) for q in qs]
    arr = np.sort(as_samples(samples))
    return {q: float(arr[rank_index(arr.size, q)]) for q in checked}


def throughput(samples_ns: npt.ArrayLike, batch_size: int) -> float:
    """Samples per second, counting the batch: ``batch_size * n / sum(latencies in s)``.

    It is the rate of back-to-back serving, so harness time between requests does
    not count.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} is invalid; expected an integer >= 1")
    arr = as_samples(samples_ns, "samples_ns")
    total_s = float(np.sum(arr)) / 1e9
    if total_s <= 0.0:
        raise ValueError(
            f"the latencies sum to {total_s} s; throughput needs a positive total time"
        )
    return batch_size * arr.size / total_s


def stability_ratio(samples: npt.ArrayLike) -> float:
    """Median of the last third of ``samples`` over the median of the first third.

    Near 1 when the latency did not drift during the run; > 1 when the run got
    slower (thermal throttling, a competing process), < 1 when it was still
    warming up. Medians are nearest-rank P50. Fewer than 3 samples give 1.0.
    """
    arr = as_samples(samples)
    third = arr.size // 3
    if third == 0:
        return 1.0
    first = percentile(arr[:third], 50.0)
    last = percentile(arr[-third:], 50.0)
    if first == 0.0:
        # Only reachable with degenerate (zero) latencies: equal means no drift.
        return 1.0 if last == 0.0 else math.inf
    return last / first


def is_stable(samples: npt.ArrayLike, tolerance: float) -> bool:
    """True when ``|stability_ratio - 1| <= tolerance``; runs under 6 samples count as stable.

    Six is the least that gives two samples per third; with fewer the medians
    are single requests and a verdict would be noise.
    """
    if not (math.isfinite(tolerance) and tolerance >= 0.0):
        raise ValueError(f"stability tolerance={tolerance!r} is invalid; expected a number >= 0")
    arr = as_samples(samples)
    if arr.size < 6:
        return True
    return abs(stability_ratio(arr) - 1.0) <= tolerance


# --------------------------------------------------------------------------- gate


@dataclass(frozen=True)
class RatioBound:
    """A ratio current/base with a two-sided confidence interval.

    ``point`` is the plain ratio of the two figures; ``lower <= point <= upper``
    always holds. ``method`` names how the interval was made.
    """

    point: float
    lower: float
    upper: float
    confidence: float
    method: str


def _check_confidence(confidence: float) -> float:
    c = float(confidence)
    if not (0.0 < c < 1.0):
        raise ValueError(f"confidence={confidence!r} is invalid; expected a number in (0, 1)")
    return c


def _bootstrap_order_statistic(
    sorted_x: FloatArray, k: int, n_boot: int, rng: np.random.Generator
) -> FloatArray:
    """``n_boot`` bootstrap replicates of the (0-based) k-th order statistic of ``sorted_x``.

    A bootstrap resample is n indices drawn uniformly from 0..n-1, and its k-th
    smallest value is ``sorted_x`` at the k-th smallest index (``sorted_x`` is
    sorted). Those indices are ``floor(n * U_i)`` for n uniform U_i, and floor
    is monotone, so the k-th smallest index is ``floor(n * U_(k))``, where the
    (k+1)-th smallest of n uniforms is Beta(k+1, n-k) distributed. Drawing that
    Beta directly is the exact same bootstrap distribution as resampling an
    (n_boot x n) index matrix and partitioning each row, in O(n_boot) time and
    memory instead of O(n_boot * n) (2000 x 100k samples would be 1.6 GB).
    """
    n = sorted_x.size
    u = rng.beta(k + 1, n - k, size=n_boot)
    # min(): a Beta draw may round to 1.0 in float64, which would index past the end.
    idx = np.minimum((u * n).astype(np.int64), n - 1)
    return sorted_x[idx]


def percentile_ratio_bound(
    base: npt.ArrayLike,
    current: npt.ArrayLike,
    q: float = 95.0,
    confidence: float = 0.99,
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> RatioBound:
    """Ratio current/base of the q-th percentile, with a bootstrap percentile interval.

    Each side is resampled independently (the two runs share no pairing); the
    interval bounds are the nearest-rank (1-confidence)/2 and (1+confidence)/2
    percentiles of the ``n_boot`` replicate ratios. Seeded, hence reproducible.
    The interval is widened to contain ``point`` if the bootstrap distribution
    happens to sit entirely on one side of it (tiny or very skewed samples).
    Raises ValueError on empty or non-finite input, or a base that is not > 0.
    """
    qf = check_q(q)
    conf = _check_confidence(confidence)
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot} is invalid; expected an integer >= 1")
    b = np.sort(as_samples(base, "base"))
    c = np.sort(as_samples(current, "current"))
    if b[0] <= 0.0:
        raise ValueError(
            f"base has a sample <= 0 ({b[0]}); a ratio of latencies needs positive base samples"
        )
    kb = rank_index(b.size, qf)
    kc = rank_index(c.size, qf)
    point = float(c[kc] / b[kb])

    rng = np.random.default_rng(seed)
    ratios = _bootstrap_order_statistic(c, kc, n_boot, rng) / _bootstrap_order_statistic(
        b, kb, n_boot, rng
    )
    return _interval(ratios, point, conf, f"bootstrap-percentile(n_boot={n_boot}, seed={seed})")


def _interval(ratios: FloatArray, point: float, conf: float, method: str) -> RatioBound:
    """The percentile interval of bootstrap ``ratios`` at ``conf``, widened to hold
    ``point``."""
    alpha = 1.0 - conf
    ratios.sort()
    n_boot = ratios.size
    lower = float(ratios[rank_index(n_boot, 100.0 * alpha / 2.0)])
    upper = float(ratios[rank_index(n_boot, 100.0 * (1.0 - alpha / 2.0))])
    return RatioBound(
        point=point, lower=min(lower, point), upper=max(upper, point), confidence=conf,
        method=method,
    )  # fmt: skip


def _clustered_replicates(
    groups: FloatArray, q: float, n_boot: int, rng: np.random.Generator, chunk: int
) -> FloatArray:
    """``n_boot`` replicates of the q-th percentile of ``groups`` (one row per cluster)
    resampled by whole rows; in chunks, so memory stays ``chunk x groups.size``."""
    rows, width = groups.shape
    k = rank_index(rows * width, q)
    out = np.empty(n_boot, dtype=np.float64)
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        picked = groups[rng.integers(0, rows, size=(stop - start, rows))].reshape(stop - start, -1)
        out[start:stop] = np.partition(picked, k, axis=1)[:, k]
    return out


def clustered_percentile_ratio_bound(
    base: npt.ArrayLike,
    current: npt.ArrayLike,
    q: float = 95.0,
    confidence: float = 0.99,
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> RatioBound:
    """Like :func:`percentile_ratio_bound` for samples that come in clusters: each side
    is a 2-D array, one row per cluster (a generative request's inter-token gaps), and
    the percentile is over all its values. The bootstrap resamples whole rows: values of
    one row are not independent (a request that ran during a slow spell is slow at every
    token), and resampling them one by one would give bounds too narrow by about the
    square root of the row length. Rows of one side have one length; the two sides'
    lengths may differ."""
    qf = check_q(q)
    conf = _check_confidence(confidence)
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot} is invalid; expected an integer >= 1")
    sides = []
    for name, value in (("base", base), ("current", current)):
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim != 2 or arr.size == 0:
            raise ValueError(f"{name} has shape {arr.shape}; expected clusters x values, both >= 1")
        as_samples(arr.ravel(), name)  # finite, non-empty
        sides.append(arr)
    b, c = sides
    if float(b.min()) <= 0.0:
        raise ValueError(
            f"base has a sample <= 0 ({b.min()}); a ratio of latencies needs positive base samples"
        )
    point = percentile(c.ravel(), qf) / percentile(b.ravel(), qf)
    rng = np.random.default_rng(seed)
    chunk = max(1, 4_000_000 // max(b.size, c.size))
    ratios = _clustered_replicates(c, qf, n_boot, rng, chunk) / _clustered_replicates(
        b, qf, n_boot, rng, chunk
    )
    method = f"cluster-bootstrap-percentile(n_boot={n_boot}, seed={seed})"
    return _interval(ratios, point, conf, method)


def order_statistic_ci(samples: npt.ArrayLike, q: float, confidence: float) -> tuple[float, float]:
    """Distribution-free confidence interval for the population q-th percentile.

    With p = q/100 and K ~ Binomial(n, p) the number of samples below the true
    percentile, ``[x(l), x(u)]`` covers it with probability
    ``P(l <= K <= u-1) = F(u-1) - F(l-1)``. l is the largest rank with
    ``F(l-1) <= alpha/2`` and u the smallest with ``F(u-1) >= 1 - alpha/2``, so
    coverage is at least ``confidence`` for continuous data whenever those ranks
    exist. When n is too small for that, the ranks are clamped to 1..n (the
    sample range) and the interval covers less than asked.
    """
    qf = check_q(q)
    conf = _check_confidence(confidence)
    x = np.sort(as_samples(samples))
    n = x.size
    p = qf / 100.0
    alpha = 1.0 - conf
    # cdf[j] = P(K <= j), j = 0..n; non-decreasing, so searchsorted finds the ranks.
    cdf = np.asarray(_scipy_stats.binom.cdf(np.arange(n + 1), n, p), dtype=np.float64)
    lower_rank = int(np.searchsorted(cdf, alpha / 2.0, side="right"))  # = largest j+1
    upper_rank = int(np.searchsorted(cdf, 1.0 - alpha / 2.0, side="left")) + 1
    lower_rank = min(max(lower_rank, 1), n)
    upper_rank = min(max(upper_rank, 1), n)
    return float(x[lower_rank - 1]), float(x[upper_rank - 1])


def noise_floor(values: Sequence[float]) -> float:
    """Relative spread of repeated measurements of one figure: sample std / mean.

    E.g. the P95 of one scenario over several stored baselines; a gate limit
    below this cannot be told apart from noise. 0.0 for fewer than 2 values (or
    a zero mean, where a relative spread means nothing).
    """
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size < 2:
        return 0.0
    if not np.all(np.isfinite(arr)):
        raise ValueError("noise_floor values contain NaN or infinite values")
    mean = float(np.mean(arr))
    if mean == 0.0:
        return 0.0
    return float(np.std(arr, ddof=1)) / abs(mean)
