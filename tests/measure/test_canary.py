"""The calibration canary: API shape and bookkeeping only (no timing assertions)."""

from __future__ import annotations

import numpy as np
import pytest

from perfguard.measure.canary import CanaryProbe, CanaryResult, measure_with_canary, run_canary


def test_run_canary_returns_positive_times() -> None:
    res = run_canary(5)
    assert isinstance(res, CanaryResult)
    assert len(res.samples_ns) == 5
    assert all(isinstance(s, int) and s > 0 for s in res.samples_ns)
    assert res.median_ns > 0
    assert res.median_ns == pytest.approx(float(np.median(res.samples_ns)))
    assert res.to_dict()["samples_ns"] == list(res.samples_ns)
    # Passive CPU shares: fractions where /proc/stat exists, else None.
    for share in (res.foreign_cpu, res.steal):
        assert share is None or 0.0 <= share <= 1.0


def test_probe_accumulates_blocks() -> None:
    probe = CanaryProbe(iterations=3)
    with pytest.raises(ValueError, match="before any sample"):
        probe.result()
    first = probe.sample()
    second = probe.sample(iterations=2)
    assert len(first) == 3 and len(second) == 2
    assert probe.samples_ns == first + second
    assert probe.result().samples_ns == first + second


def test_measure_with_canary_interleaves_blocks() -> None:
    calls: list[int] = []

    def block(n: int) -> np.ndarray:
        calls.append(n)
        return np.full(n, 1_000, dtype=np.int64)

    samples, canary = measure_with_canary(block, total=25, block=10, canary_iterations=2)
    assert calls == [10, 10, 5]
    assert samples.dtype == np.int64 and samples.size == 25
    # one canary block before, and one after each of the 3 request blocks
    assert len(canary.samples_ns) == 2 * 4
    assert canary.median_ns > 0


@pytest.mark.parametrize("kwargs", [{"total": 0, "block": 1}, {"total": 5, "block": 0}])
def test_measure_with_canary_rejects_empty_loops(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        measure_with_canary(lambda n: np.zeros(n, dtype=np.int64), **kwargs)


def test_probe_rejects_zero_iterations() -> None:
    with pytest.raises(ValueError):
        CanaryProbe(iterations=0)
