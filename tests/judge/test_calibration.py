"""A calibration sheet (perfguard.judge.calibration): tallies with exact binomial
intervals, what is caught 19 times in 20, and the sheet's lines."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binom

from perfguard.judge.calibration import (
    CAUGHT_RUNS,
    CalibrationRun,
    sheet_lines,
    sheet_of,
    tally,
)


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_property_a_tally_interval_holds_its_rate_and_is_exact(kn: tuple[int, int]) -> None:
    k, n = kn
    t = tally(k, n)
    assert 0.0 <= t.low <= k / n <= t.high <= 1.0
    # Clopper-Pearson: at the upper end, seeing k or fewer has probability 2.5%.
    if k < n:
        assert binom.cdf(k, n, t.high) == pytest.approx(0.025, abs=1e-6)
    if k > 0:
        assert binom.sf(k - 1, n, t.low) == pytest.approx(0.025, abs=1e-6)


def test_no_false_alarm_in_twenty_runs_is_still_up_to_seventeen_percent() -> None:
    assert tally(0, 20).high == pytest.approx(0.1684, abs=1e-4)
    assert tally(0, 0).text() == "no runs"
    with pytest.raises(ValueError, match="0 <= k <= n"):
        tally(3, 2)


def _runs(planted: float, caught: int, n: int) -> list[CalibrationRun]:
    verdicts = ["regression"] * caught + ["unchanged"] * (n - caught)
    return [CalibrationRun(planted, v, 1.0 + planted, 200, 3.0) for v in verdicts]


def test_the_smallest_size_caught_19_times_in_20_over_enough_runs() -> None:
    runs = [*_runs(0.0, 1, 40), *_runs(0.02, 12, 20), *_runs(0.05, 19, 20), *_runs(0.1, 20, 20)]
    sheet = sheet_of("s.yaml::cnn", "ab", "p95", 0.05, runs)
    assert (sheet.false_alarms.k, sheet.false_alarms.n) == (1, 40)
    assert [(size, t.k, t.n) for size, t in sheet.caught] == [
        (0.02, 12, 20), (0.05, 19, 20), (0.1, 20, 20)
    ]  # fmt: skip
    assert sheet.smallest_caught == 0.05
    lines = sheet_lines(sheet)
    assert "  this runner sees >= +5% on P95 (caught in >= 95% of runs)" in lines
    assert lines[1].startswith("  false alarms (A/A): 1/40 (")
    assert sheet.to_dict()["caught"][1] == {
        "planted": 0.05, "k": 19, "n": 20, "low": sheet.caught[1][1].low,
        "high": sheet.caught[1][1].high,
    }  # fmt: skip


def test_too_few_runs_of_a_size_claim_nothing() -> None:
    sheet = sheet_of("c", "ab", "p95", 0.05, [*_runs(0.0, 0, 3), *_runs(0.5, 2, 2)])
    assert sheet.smallest_caught is None
    assert any(f"{CAUGHT_RUNS} are needed" in line for line in sheet_lines(sheet))


def test_a_run_survives_its_json() -> None:
    run = CalibrationRun(0.1, "regression", None, 300, 2.5)
    assert CalibrationRun.from_dict(run.to_dict()) == run and run.alarm
