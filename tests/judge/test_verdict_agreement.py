"""One pair of runs, three judges, one set of verdicts.

The plugin judges a live run through ``perfguard.judge.gatekeeper`` (and re-measures a
suspected regression); ``perfguard compare`` and ``perfguard report --baseline`` judge
the stored files through ``perfguard.judge.stored``. On the same pair of runs they must
agree, scenario by scenario and metric by metric: what the plugin wrote into
``comparison.json`` is what either command says of its ``results.json``.

The model busy-waits a set number of microseconds per call, so the planted slowdown
(4x, against a +50% limit on the median) is a regression on any host, and the untouched scenario
is not; the contention check is off so a busy CI host cannot make a cell invalid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfguard import cli
from perfguard.judge.verdict import ScenarioVerdict, VerdictKind
from perfguard.report import cli_report
from perfguard.report.comparison import comparison_path, read_comparison
from perfguard.report.model import ReportInput
from tests.helpers.models import SPIN_MODEL

pytest.importorskip("torch")


CONTENTION = "1.01"
INI = f"[pytest]\nperfguard_contention_limit = {CONTENTION}\n"


def suite_text(slowed_us: int) -> str:
    return f"""\
defaults:
  warmup: {{iterations: 5, seconds: 0}}
  measure: {{iterations: 300, seconds: 0}}
  threads: 1
  stability_tolerance: 0.99
  # The median: a busy host's stalls move a tail percentile more than the slowdown,
  # so the default P95 gate is opened wide.
  gate: {{p50: "+50%", p95: "+100000%"}}
models:
  steady:
    factory: spinmodel:spin
    kwargs: {{us: 200}}
    inputs:
      x: {{shape: [1, 4]}}
  slowed:
    factory: spinmodel:spin
    kwargs: {{us: {slowed_us}}}
    inputs:
      x: {{shape: [1, 4]}}
scenarios:
  - name: steady
    model: steady
  - name: slowed
    model: slowed
"""


Judged = dict[str, tuple[str, tuple[tuple[str, str, Any, Any], ...]]]


def judged(verdicts: Any) -> Judged:
    """scenario id -> (verdict, per metric: (metric, verdict, ratio, limit))."""
    out: Judged = {}
    for v in verdicts:
        verdict = v if isinstance(v, ScenarioVerdict) else ScenarioVerdict.from_dict(v)
        out[verdict.scenario_id] = (
            verdict.verdict,
            tuple((m.metric, m.verdict, m.ratio, m.effective_limit) for m in verdict.metrics),
        )
    return out


def run_once(pytester: pytest.Pytester, name: str, *args: str) -> Path:
    result = pytester.runpytest("--perfguard", f"--perfguard-report-dir={name}", *args)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    (results,) = (pytester.path / name).glob("*/results.json")
    return results


def test_plugin_compare_and_report_agree(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "spinmodel.py").write_text(SPIN_MODEL)
    pytester.makeini(INI)
    suite = pytester.path / "suites" / "s.yaml"
    suite.write_text(suite_text(200))
    base = run_once(pytester, "first", "--perfguard-baseline=none")
    suite.write_text(suite_text(800))  # the planted slowdown (4x), in one scenario
    current = run_once(pytester, "second", f"--perfguard-baseline={base}")

    plugin = judged(read_comparison(comparison_path(current)).verdicts)
    steady, slowed = "suites/s.yaml::steady", "suites/s.yaml::slowed"
    assert plugin[slowed][0] == VerdictKind.REGRESSION
    assert plugin[steady][0] != VerdictKind.REGRESSION
    assert set(plugin) == {steady, slowed}

    judging = ["--rootdir", str(pytester.path), "--contention-limit", CONTENTION]
    capsys.readouterr()
    status = cli.main(["compare", str(base), str(current), "--json", *judging])
    out = capsys.readouterr().out
    assert status == 1, out  # 1: a regression
    compared = judged(json.loads(out))

    rendered: list[ReportInput] = []
    write = cli_report.write_report_files

    def capture(inp: ReportInput, directory: Path) -> Path:
        rendered.append(inp)
        return write(inp, directory)

    monkeypatch.setattr(cli_report, "write_report_files", capture)
    out_dir = pytester.path / "rendered"
    args = ["report", str(current), "--baseline", str(base), "--out", str(out_dir), *judging]
    assert cli.main(args) == 0
    (report,) = rendered
    reported = judged(report.verdicts)
    html = (out_dir / "report.html").read_text()
    assert 'data-verdict="regression"' in html

    assert compared == plugin
    assert reported == plugin
