"""A calibration sheet (perfguard.judge.calibration): tallies with exact binomial
intervals, what is caught 19 times in 20, and the sheet's lines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binom

from perfguard.core.errors import StoreError
from perfguard.judge.calibration import (
    CAUGHT_RUNS,
    CalibrationFile,
    CalibrationNote,
    CalibrationRun,
    CellSheet,
    drift_of,
    limit_warning,
    noise_per_pair,
    note_of,
    pairs_for,
    sheet_lines,
    sheet_of,
    tally,
    tightest_limit,
)
from perfguard.records.declare import decode, encode


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


# --- the noise model: pairs a limit needs, the tightest limit that holds -------------


@given(
    noise=st.floats(0.01, 2.0),
    limit=st.floats(0.001, 0.5),
)
def test_property_the_tightest_limit_of_the_pairs_a_limit_needs_is_that_limit(
    noise: float, limit: float
) -> None:
    pairs = pairs_for(noise, limit)
    tight = tightest_limit(noise, pairs)
    assert tight is not None and tight <= limit * (1 + 1e-9)
    if pairs > 1:  # one pair fewer would not hold the limit
        fewer = tightest_limit(noise, pairs - 1)
        assert fewer is None or fewer > limit * (1 - 1e-9)
    # More noise needs more pairs; a looser limit fewer.
    assert pairs_for(noise * 2, limit) >= pairs >= pairs_for(noise, limit * 2)


def test_the_noise_per_pair_is_read_back_from_aa_runs_of_known_spread() -> None:
    # A/A runs of varying length whose log-ratio spreads as 0.3 / sqrt(pairs).
    rng = np.random.default_rng(7)
    pairs = rng.choice([200, 300, 1000, 3000], size=400)
    ratios = np.exp(rng.normal(0.0, 0.3 / np.sqrt(pairs)))
    runs = [
        CalibrationRun(0.0, "unchanged", float(r), int(n), 5.0)
        for r, n in zip(ratios, pairs, strict=True)
    ]
    assert noise_per_pair(runs) == pytest.approx(0.3, rel=0.08)
    # Planted runs and runs without a ratio say nothing of the noise.
    assert noise_per_pair([*runs[:4], *_runs(0.1, 20, 20)]) is None


def test_a_gate_at_the_modelled_pairs_catches_twice_its_limit_19_times_in_20() -> None:
    # The model against a simulation of the final rule's point test (ratio > 1 + limit)
    # on percentiles of real samples: lognormal requests with a per-pair shared spell.
    rng = np.random.default_rng(3)
    limit = 0.05

    def ratio(pairs: int, change: float) -> float:
        shared = rng.lognormal(0.0, 0.2, pairs)
        a = shared * rng.lognormal(0.0, 0.1, pairs)
        b = shared * rng.lognormal(0.0, 0.1, pairs) * (1 + change)
        return float(np.percentile(b, 95) / np.percentile(a, 95))

    aa = [CalibrationRun(0.0, "unchanged", ratio(200, 0.0), 200, 1.0) for _ in range(200)]
    noise = noise_per_pair(aa)
    assert noise is not None
    pairs = pairs_for(noise, limit)
    caught = [ratio(pairs, 2 * limit) > 1 + limit for _ in range(300)]
    assert 0.9 <= sum(caught) / len(caught) <= 1.0


def _aa(spread: float, n: int) -> list[CalibrationRun]:
    return [CalibrationRun(0.0, "unchanged", 1.0 + spread * (-1) ** i, 400, 5.0) for i in range(n)]


def _sheet(limit: float = 0.05, aa_alarms: int = 0, caught: int = 20) -> CellSheet:
    aa = _aa(0.01, 20)
    aa = [replace(r, verdict="regression") if i < aa_alarms else r for i, r in enumerate(aa)]
    return sheet_of(
        "s.yaml::cnn",
        "ab",
        "p95",
        limit,
        [*aa, *_runs(limit, caught, 20), *_runs(2 * limit, caught, 20)],
        max_pairs=3000,
    )


def test_the_sheet_states_the_noise_the_tightest_limit_and_the_pairs_limits_need() -> None:
    sheet = _sheet()
    # 20 runs at 400 pairs whose ratio is 1.01 or 0.99: their log's RMS times sqrt(400).
    rms = np.sqrt(np.mean([np.log(1.01) ** 2, np.log(0.99) ** 2]))
    assert sheet.noise_per_pair == pytest.approx(rms * 20, rel=1e-9)
    assert sheet.tightest_limit == tightest_limit(sheet.noise_per_pair, 3000)
    assert [lim for lim, _ in sheet.pairs_needed] == [0.02, 0.05]
    lines = sheet_lines(sheet)
    assert "  noise: A/A P95 ratios spread +-1.4% (1 sd) at 200 pairs" in lines
    assert any(line.startswith("  tightest limit that holds here: +0.") for line in lines)
    assert sheet.to_dict()["pairs_needed"][0] == {"limit": 0.02, "pairs": sheet.pairs_needed[0][1]}
    few = sheet_of("c", "ab", "p95", 0.05, _runs(0.0, 0, 3), max_pairs=3000)
    assert few.tightest_limit is None and few.pairs_needed == ()
    assert any("5 are needed to model the noise" in line for line in sheet_lines(few))


def test_a_limit_tighter_than_the_sheet_allows_is_warned_with_the_fix() -> None:
    sheet = _sheet()
    tight = sheet.tightest_limit
    assert tight is not None
    assert limit_warning(sheet, "p95", 0.05) is None
    assert limit_warning(sheet, "p95", tight * 1.01) is None
    message = limit_warning(sheet, "p95", tight * 0.5)
    assert message is not None
    assert message.startswith(f"s.yaml::cnn: its P95 limit +{tight * 50:.3g}% is tighter than")
    assert f"the tightest limit that holds is +{tight * 100:.3g}%" in message
    assert "Fix: raise the limit to 0.00" in message


def test_a_sheet_that_cries_wolf_or_sees_nothing_or_gated_another_figure_warns() -> None:
    wolf = limit_warning(_sheet(aa_alarms=6), "p95", 0.05)
    assert wolf is not None and "6/20" in wolf and "cries wolf" in wolf
    assert limit_warning(_sheet(aa_alarms=1), "p95", 0.05) is None  # 1/20 is not beyond doubt
    blind = limit_warning(_sheet(caught=15), "p95", 0.05)
    assert blind is not None and "+10% in only 15/20" in blind and "does not hold" in blind
    # Judged at another limit, the planted counts say nothing (only the noise model does).
    assert limit_warning(_sheet(caught=15), "p95", 0.08) is None
    other = limit_warning(_sheet(), "p99", 0.05)
    assert other is not None and "another figure than its calibration (P95)" in other


def test_a_verdicts_calibration_note_says_what_the_runner_sees_and_survives_json() -> None:
    note = note_of(_sheet(), warning="too tight")
    assert note.text().startswith("this runner sees >= +5% on P95 (same-run A/B at +5%: ")
    assert "0/20 A/A false alarms, tightest limit that holds +" in note.text()
    assert decode(CalibrationNote, encode(note), source="comparison.json") == note
    blind = note_of(_sheet(caught=15))
    assert blind.sees is None and "saw no planted P95 slowdown 19 times in 20" in blind.text()


def test_a_calibration_file_gives_each_cells_sheet_and_names_a_broken_entry(
    tmp_path: Path,
) -> None:
    store = CalibrationFile(tmp_path, "fp")
    sheet = _sheet()
    runs = [CalibrationRun(0.0, "unchanged", 1.01, 400, 5.0)] * 6
    made = sheet_of(sheet.cell, "ab", "p95", 0.05, runs, max_pairs=3000)
    key = {"mode": "ab", "metric": "p95", "limit": 0.05, "sizes": [], "seed": 0}
    store.keep(sheet.cell, key, runs, made)
    again = CalibrationFile(tmp_path, "fp")
    assert again.sheet(sheet.cell) == made
    assert again.sheet("other") is None
    again.cells["broken"] = {"ab": {"plan": {"mode": "ab"}, "runs": []}}
    with pytest.raises(StoreError, match=r"the ab entry of broken cannot be read \(KeyError"):
        again.sheet("broken")


# --- a check of the runner against its sheet -------------------------------------------


def _noisy_aa(rng: np.random.Generator, noise: float, n: int, pairs: int = 300) -> list:
    ratios = np.exp(rng.normal(0.0, noise / np.sqrt(pairs), n))
    return [CalibrationRun(0.0, "unchanged", float(r), pairs, 4.0) for r in ratios]


def test_a_check_of_the_sheets_own_noise_holds_and_twice_or_half_of_it_is_flagged() -> None:
    rng = np.random.default_rng(11)
    sheet = sheet_of("c", "ab", "p95", 0.05, _noisy_aa(rng, 0.3, 40), max_pairs=3000)
    assert sheet.noise_per_pair is not None
    same = [drift_of(sheet, _noisy_aa(rng, sheet.noise_per_pair, 10)) for _ in range(300)]
    assert sum(d is not None and d.drifted for d in same) / 300 <= 0.04  # DRIFT_P is 1%
    noisier = [drift_of(sheet, _noisy_aa(rng, 3 * sheet.noise_per_pair, 10)) for _ in range(100)]
    assert sum(d is not None and d.drifted for d in noisier) >= 90
    quieter = [drift_of(sheet, _noisy_aa(rng, sheet.noise_per_pair / 3, 10)) for _ in range(100)]
    assert sum(d is not None and d.quieter and not d.drifted for d in quieter) >= 90
    drift = noisier[0]
    assert drift is not None and drift.text().startswith("c: DRIFTED: A/A noise +-")
    assert "perfguard calibrate --fresh" in drift.text()
    assert drift.to_dict()["drifted"] is True and drift.to_dict()["runs"] == 10


def test_a_check_that_cries_wolf_is_flagged_even_at_the_sheets_noise() -> None:
    sheet = _sheet()
    assert sheet.noise_per_pair is not None
    runs = _aa(0.01, 5)
    wolf = [replace(r, verdict="regression") if i < 3 else r for i, r in enumerate(runs)]
    calm = drift_of(sheet, runs)
    loud = drift_of(sheet, wolf)
    assert calm is not None and not calm.drifted and calm.text().startswith("s.yaml::cnn: holds")
    assert loud is not None and loud.drifted and loud.false_alarms == 3
    assert loud.p_alarms == pytest.approx(binom.sf(2, 5, 0.05))
    # Nothing to check against: a sheet without noise, or a check without a ratio.
    assert drift_of(sheet_of("c", "ab", "p95", 0.05, []), runs) is None
    assert drift_of(sheet, [replace(runs[0], ratio=None)]) is None


def test_planted_runs_that_refute_the_noise_model_overrule_it() -> None:
    # Quiet A/A runs (the model would allow a tight limit), but twice the limit caught
    # only 12 of 20 runs: beyond doubt under 19 in 20, so the +5% limit does not hold.
    refuted = _sheet(caught=12)
    assert refuted.limit_holds is False and refuted.tightest_limit is None
    assert any("above +5% (the noise model says less" in line for line in sheet_lines(refuted))
    message = limit_warning(refuted, "p95", 0.05)
    assert message is not None and "does not hold on this runner" in message
    assert "+10% in only 12/20" in message
    # 18 of 20 cannot rule out 19 in 20: the model stands, and so does the limit.
    doubt = _sheet(caught=18)
    assert doubt.limit_holds is None and doubt.tightest_limit is not None
    assert limit_warning(doubt, "p95", 0.05) is None
    assert _sheet().limit_holds is True


def test_two_calibrations_beside_each_other_keep_each_others_cells(tmp_path: Path) -> None:
    """Two processes calibrating different cells of one runner (two jobs): each write
    merges, under the archive's lock, with what the other wrote meanwhile."""
    first, second = CalibrationFile(tmp_path, "fp"), CalibrationFile(tmp_path, "fp")
    runs = _aa(0.01, 5)
    key = {"mode": "ab", "metric": "p95", "limit": 0.05, "sizes": [], "seed": 0}
    first.keep("a", key, runs, sheet_of("a", "ab", "p95", 0.05, runs))
    second.keep("b", key, runs, sheet_of("b", "ab", "p95", 0.05, runs))
    first.keep("a", key, runs[:3], sheet_of("a", "ab", "p95", 0.05, runs[:3]))
    again = CalibrationFile(tmp_path, "fp")
    assert set(again.cells) == {"a", "b"}
    assert len(again.cells["a"]["ab"]["runs"]) == 3 and len(again.cells["b"]["ab"]["runs"]) == 5
    assert (tmp_path / ".locks" / ".gitignore").read_text() == "*\n"  # out of the tree
