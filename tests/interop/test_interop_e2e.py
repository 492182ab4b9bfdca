"""End-to-end: pytest-benchmark tests in the same gate, and GitHub annotations."""

from __future__ import annotations

import json

import pytest

from perfguard.cli import main as cli_main
from tests.helpers.gate_repo import Repo

pytest.importorskip("pytest_benchmark")

BENCH_TEST = """
import time


def spin(us):
    end = time.perf_counter_ns() + us * 1000
    while time.perf_counter_ns() < end:
        pass


def test_preprocess(benchmark):
    benchmark.pedantic(spin, args=({us},), rounds=400, iterations=1, warmup_rounds=5)
"""


def test_benchmark_tests_join_the_gate_and_export(
    pytester: pytest.Pytester, tmp_path: pytest.TempPathFactory
) -> None:
    repo = Repo(pytester)
    (repo.path / "test_pre.py").write_text(BENCH_TEST.replace("{us}", "200"))
    repo.commit(200, "base")
    saved = repo.run("--perfguard-save")
    saved.assert_outcomes(passed=2)
    results = next((repo.path / "reports").glob("*/results.json"))
    data = json.loads(results.read_text())
    bench = {s["id"]: s for s in data["scenarios"]}["test_pre.py::test_preprocess"]
    assert bench["runtime"]["source"] == "pytest-benchmark"
    assert len(bench["samples_ns"]) == 400

    exported = tmp_path / "bench.json"  # type: ignore[operator]
    assert (
        cli_main(["export", str(results), "--format", "pytest-benchmark", "-o", str(exported)]) == 0
    )
    names = [b["fullname"] for b in json.loads(exported.read_text())["benchmarks"]]
    assert "test_pre.py::test_preprocess" in names

    (repo.path / "test_pre.py").write_text(BENCH_TEST.replace("{us}", "600"))
    repo.commit(200, "slow preprocessing")
    result = repo.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["regression: test_pre.py::test_preprocess: P95 latency regressed*"]
    )


def test_github_annotation_points_at_the_suite_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = Repo(pytester)
    repo.commit(200, "base")
    repo.run("--perfguard-save").assert_outcomes(passed=1)
    repo.commit(600, "slower")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(repo.path))
    summary = repo.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = repo.run()
    result.assert_outcomes(failed=1)
    # The scenario `- name: spin` sits on line 15 of the suite written by Repo.
    result.stdout.fnmatch_lines(
        [
            "::error file=suites/s.yaml,line=15,"
            "title=perfguard regression%3A spin::P95 latency regressed*"
        ]
    )
    assert "<!-- perfguard-summary -->" in summary.read_text()
