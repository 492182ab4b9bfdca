"""A runner's calibration sheets in a gated run (perfguard.plugin.sheets): the warning at
collection for a limit tighter than the sheet allows, and the sheet's headline on each
verdict, in comparison.json, the report and the pull-request summary."""

from __future__ import annotations

import json
import warnings

import pytest

from perfguard.cli import main
from perfguard.judge.calibration import CalibrationFile, CalibrationRun, sheet_of
from perfguard.plugin.sheets import CalibrationWarning, RunnerSheets
from perfguard.suite.loader import load_suite
from tests.helpers.suites import FAST_DEFAULTS, MLP_MODEL, write_suite

SUITE = (
    FAST_DEFAULTS
    + MLP_MODEL
    + """\
scenarios:
  - {name: tight, model: mlp, gate: {p95: "+0.01%"}}
  - {name: loose, model: mlp, gate: {p95: "+20%"}}
  - {name: never, model: mlp}
"""
)


def _aa(spread: float, n: int = 10) -> list[CalibrationRun]:
    return [CalibrationRun(0.0, "unchanged", 1 + spread * (-1) ** i, 400, 3.0) for i in range(n)]


def test_a_sheet_warns_a_tight_limit_and_gives_each_calibrated_verdict_its_note(
    pytester: pytest.Pytester,
) -> None:
    suite = load_suite(write_suite(pytester, "s", SUITE))
    cells = {sc.name: sc for sc in suite.scenarios}
    store = CalibrationFile(pytester.path / "baselines", "fp")
    key = {"mode": "ab", "metric": "p95", "limit": 0.2, "sizes": [], "seed": 0}
    for name in ("tight", "loose"):
        sid = f"suites/s.yaml::{name}"
        runs = _aa(0.01)
        store.keep(sid, key, runs, sheet_of(sid, "ab", "p95", 0.2, runs, 3000))
    sheets = RunnerSheets(pytester.path / "baselines", lambda: "fp")
    with pytest.warns(CalibrationWarning) as caught:
        sheets.warn_tight(((f"suites/s.yaml::{n}", sc) for n, sc in cells.items()), "ab")
    (only,) = caught
    assert str(only.message).startswith("suites/s.yaml::tight: its P95 limit +0.01% is tighter")
    tight = sheets.note("suites/s.yaml::tight", cells["tight"], "ab")
    loose = sheets.note("suites/s.yaml::loose", cells["loose"], "ab")
    assert tight is not None and tight.warning is not None and "+0.01%" in tight.warning
    assert loose is not None and loose.warning is None and loose.aa_runs == 10
    assert sheets.note("suites/s.yaml::never", cells["never"], "ab") is None
    # Another machine's fingerprint: no sheet, no word.
    other = RunnerSheets(pytester.path / "baselines", lambda: "elsewhere")
    assert other.note("suites/s.yaml::tight", cells["tight"], "ab") is None


def test_an_unreadable_calibration_file_is_one_warning_not_a_failed_run(
    pytester: pytest.Pytester,
) -> None:
    suite = load_suite(write_suite(pytester, "s", SUITE))
    path = pytester.path / "baselines" / "fp" / "calibration.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    sheets = RunnerSheets(pytester.path / "baselines", lambda: "fp")
    with pytest.warns(CalibrationWarning, match=r"calibration file .*calibration.json cannot"):
        assert sheets.note("suites/s.yaml::tight", suite.scenarios[0], "ab") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: read once
        assert sheets.warning("suites/s.yaml::tight", suite.scenarios[0], "ab") is None
    assert path.read_text() == "{not json"


def test_a_calibrated_runner_warns_at_collection_and_reports_what_it_sees(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end: `perfguard calibrate` on the project, then `pytest --perfguard` finds the
    sheets under the same fingerprint, warns the limit no runner holds, and carries the
    sheets' headlines into comparison.json and summary.md."""
    write_suite(pytester, "s", SUITE)
    monkeypatch.chdir(pytester.path)
    status = main(["calibrate", "suites", "-k", "tight or loose", "--aa", "5", "--planted", "0"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "noise: A/A P95 ratios spread" in out
    result = pytester.runpytest("--perfguard", "--perfguard-contention-limit=1", "-W", "default")
    text = result.stdout.str()
    # At the cell's line of its suite file, with the fix.
    assert (
        "suites/s.yaml:11: CalibrationWarning: suites/s.yaml::tight: its P95 limit +0.01%" in text
    )
    assert "Fix: raise the limit to 0.0" in text
    assert "suites/s.yaml::loose: its P95" not in text
    (comparison,) = (pytester.path / "reports").glob("*/comparison.json")
    verdicts = {v["scenario_id"]: v for v in json.loads(comparison.read_text())["verdicts"]}
    tight = verdicts["suites/s.yaml::tight"]["calibration"]
    assert tight["aa_runs"] == 5 and tight["limit"] == 0.0001 and "Fix:" in tight["warning"]
    assert "warning" not in verdicts["suites/s.yaml::loose"]["calibration"]
    assert "calibration" not in verdicts["suites/s.yaml::never"]
    summary = (comparison.parent / "summary.md").read_text()
    assert "**What this runner sees** (its calibration sheet)" in summary
    assert "**limit too tight**" in summary
    report = (comparison.parent / "report.html").read_text()
    assert "runner calibration" in report and "calibration warning" in report
    # Made an error, the warning stops the run before anything is measured, saying why.
    error = "error::perfguard.plugin.sheets.CalibrationWarning"
    stopped = pytester.runpytest("--perfguard", "--collect-only", "-W", error)
    assert stopped.ret == pytest.ExitCode.USAGE_ERROR
    assert "made an error by -W or filterwarnings" in stopped.stderr.str()
