"""End-to-end: every output of a run tells the same truth as pytest's exit status.

A run with a failed accuracy gate and an errored cell, and a run whose only cell
fails, through pytester: the terminal summary, report.html, summary.md, the index and
the GitHub annotations all say it failed, worst first, and nothing a model or a file
name carried (escape sequences, workflow commands, links, mentions, HTML) is live in
any of them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.git_repos import run_git
from tests.helpers.suites import write_suite

EVIL_MESSAGE = (
    "\\x1b[31mred\\x1b[0m\\n::add-mask::x\\nsee [here](http://evil.example) "
    "@octocat #1 <img src=x> ##[error]v1"
)
EVIL_MODELS = f'''
def boom():
    raise RuntimeError("{EVIL_MESSAGE}")
'''

SUITE = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 30, seconds: 0}
  threads: 1
models:
  mlp:
    factory: tinymodels:mlp
    kwargs: {width: 64}
    inputs:
      x: {shape: [4, 8], dtype: float32, seed: 1}
  boom:
    factory: evilmodels:boom
    inputs:
      x: {shape: [4, 8], dtype: float32}
scenarios:
  - name: mlp
    model: mlp
    matrix:
      backend: [torch, onnxruntime]
      precision: [fp32, int8]
    exclude:
      - {backend: torch, precision: int8}
    accuracy:
      inputs: {count: 16, seed: 5}
      reference: {backend: torch, precision: fp32}
      gate: {cosine_min: 0.999999, max_abs_err: 0.001}
  - name: boom
    model: boom
"""
# A suite file name carrying Markdown, HTML, a mention and a reference (scenario
# names themselves are restricted to [A-Za-z0-9_.+-]).
EVIL_FILE = "e \x1b[31m [l](https:x.example) <b onclick=x>b @octocat #12 *em*"

ONLY_FAILING = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 30, seconds: 0}
models:
  boom:
    factory: evilmodels:boom
    inputs:
      x: {shape: [4, 8], dtype: float32}
scenarios:
  - name: boom
    model: boom
"""


def _git_repo(pytester: pytest.Pytester) -> None:
    (pytester.path / ".gitignore").write_text("reports/\n.perfguard/\n__pycache__/\n")
    run_git(pytester.path, "init", "-q", "-b", "main")
    run_git(pytester.path, "add", "-A")
    run_git(pytester.path, "commit", "-qm", "base")


def _reports(pytester: pytest.Pytester) -> Path:
    return next((pytester.path / "reports").glob("*/results.json")).parent


def _assert_inert_text(text: str, where: str) -> None:
    assert "\x1b" not in text, where
    for line in text.splitlines():
        assert not line.lstrip().startswith("::add-mask::"), (where, line)
        assert not line.lstrip().startswith("##[error]"), (where, line)


@pytest.fixture
def evil_suite(suite_writer: pytest.Pytester) -> pytest.Pytester:
    write_suite(suite_writer, EVIL_FILE, SUITE)
    (suite_writer.path / "suites" / "evilmodels.py").write_text(EVIL_MODELS)
    _git_repo(suite_writer)
    return suite_writer


def test_failed_accuracy_and_errored_cell_every_output_agrees(
    evil_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(evil_suite.path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(evil_suite.path / "step-summary.md"))
    result = evil_suite.runpytest("--perfguard", "-rfE")
    result.assert_outcomes(passed=2, failed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()

    # Terminal: the run's outcome line, the failing cells first in the table, one
    # line per outcome, and the export/quantize progress of the ONNX cells.
    result.stdout.fnmatch_lines(
        [
            "*outcome",
            "*mlp?onnxruntime-int8?*ACCURACY FAILURE*",
            "*boom*FAILED*",
            "*mlp?*new*",
            "*mlp?*new*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "accuracy failure: *mlp?onnxruntime-int8?: cosine similarity min*",
            "failed: *boom: *factory evilmodels:boom raised RuntimeError: red*",
        ]
    )
    assert (
        out.count("perfguard: ❌ accuracy failure: 1 accuracy failure, 1 failed, 2 new (4 cells)")
        == 1
    )
    result.stdout.fnmatch_lines(
        ["perfguard: export mlp: to ONNX, opset *", "perfguard: export mlp: done in *s"]
    )
    result.stdout.fnmatch_lines(["perfguard: quantize *: done in *s"])
    # What perfguard writes: the failure texts and its summary section (pytest's own
    # progress and "FAILED <nodeid>" lines print the file name as it is).
    ours = out.split("= FAILURES =", 1)[1].split("short test summary info", 1)[0]
    assert "raised RuntimeError: red" in ours and "perfguard: ❌" in ours
    _assert_inert_text(ours, "terminal")
    # Annotations: one ::error per failed cell, each on one line, none of the
    # message's lines a command of its own.
    annotations = [line for line in out.splitlines() if line.startswith("::")]
    assert [a.split(" ", 1)[0] for a in annotations] == ["::error", "::error"]
    assert any("add-mask" in a for a in annotations)
    assert not any("::add-mask" in a or "\x1b" in a for a in annotations)

    folder = _reports(evil_suite)
    html = (folder / "report.html").read_text()
    assert 'id="outcome" data-state="failed"' in html and "❌ accuracy failure" in html
    rows = re.findall(r'<tr class="o-(\w+)" data-outcome="\w+"', html)
    assert rows == ["accuracy", "failed", "new", "new"]
    _assert_inert_text(html, "report.html")
    assert "<img" not in html and "<b onclick" not in html

    md = (folder / "summary.md").read_text()
    assert md.splitlines()[1].startswith("### perfguard ❌ accuracy failure: ")
    assert md.count("1 accuracy failure, 1 failed, 2 new (4 cells)") == 1
    assert "**Accuracy failures (1)**" in md and "**Failed cells (not measured) (1)**" in md
    assert "- new (2): " in md
    _assert_inert_text(md, "summary.md")
    outside_code = re.sub(r"`[^`]*`", "", md)
    assert "<img" not in outside_code and "<b onclick" not in outside_code
    assert "](http" not in outside_code and "@octocat" not in outside_code
    assert "#1 " not in outside_code and "http://" not in outside_code
    assert (evil_suite.path / "step-summary.md").read_text() == md

    index = (evil_suite.path / "reports" / "index.html").read_text()
    assert 'data-state="failed"' in index
    stored = json.loads((folder / "comparison.json").read_text())
    assert stored["exit_status"] == 1


def test_a_run_of_only_failing_cells_is_not_passed(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "only", ONLY_FAILING)
    (suite_writer.path / "suites" / "evilmodels.py").write_text(EVIL_MODELS)
    _git_repo(suite_writer)
    result = suite_writer.runpytest("--perfguard")
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["perfguard: ❌ failed: 1 failed (1 cell)"])
    folder = _reports(suite_writer)
    md = (folder / "summary.md").read_text()
    assert "✅" not in md and md.splitlines()[1].startswith("### perfguard ❌ failed")
    assert 'data-state="failed"' in (folder / "report.html").read_text()
    index = (suite_writer.path / "reports" / "index.html").read_text()
    assert 'data-state="failed"' in index and "FAILED" in index
