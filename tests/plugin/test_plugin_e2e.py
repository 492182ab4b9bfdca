"""End-to-end: the plugin run through pytester on real suites with real (tiny) models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfguard.records.resultsfile import validate
from tests.helpers.git_repos import run_git
from tests.helpers.suites import FAST_DEFAULTS, write_suite

MATRIX_SUITE = (
    FAST_DEFAULTS
    + """\
models:
  mlp:
    factory: tinymodels:mlp
    inputs:
      x: {shape: [2, 8], dtype: float32, seed: 1}
scenarios:
  - name: mlp
    model: mlp
    tags: [smoke]
    matrix:
      backend: [torch, onnxruntime]
      precision: [fp32, int8]
"""
)


def _results(pytester: pytest.Pytester) -> dict:
    files = list((pytester.path / "reports").glob("*/results.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_plain_pytest_never_collects_scenarios(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "s", MATRIX_SUITE)
    result = suite_writer.runpytest("--collect-only", "-q")
    assert "mlp[" not in result.stdout.str()
    result = suite_writer.runpytest()
    result.assert_outcomes()
    assert not (suite_writer.path / "reports").exists()


def test_matrix_runs_and_writes_results(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "s", MATRIX_SUITE)
    result = suite_writer.runpytest("--perfguard", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*suites/s.yaml::mlp?torch-fp32? PASSED*",
            "*suites/s.yaml::mlp?onnxruntime-int8? PASSED*",
            "*perfguard*",
            "*scenario*P50 ms*P95 ms*P99 ms*thrpt/s*",
            "*results: *results.json",
        ]
    )
    data = _results(suite_writer)
    validate(data)
    assert data["commit"]["sha"] is None
    assert Path(result.stdout.str().split("results: ")[-1].split()[0]).parent.name == (
        "uncommitted"
    )
    by_id = {s["id"]: s for s in data["scenarios"]}
    assert set(by_id) == {
        "suites/s.yaml::mlp[torch-fp32]",
        "suites/s.yaml::mlp[torch-int8]",
        "suites/s.yaml::mlp[onnxruntime-fp32]",
        "suites/s.yaml::mlp[onnxruntime-int8]",
    }
    for scenario in by_id.values():
        assert scenario["status"] == "passed"
        assert len(scenario["samples_ns"]) >= 30
        lat = scenario["latency_ns"]
        assert lat["n"] == len(scenario["samples_ns"])
        assert lat["min"] <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]
        assert scenario["batch_size"] == 2
        assert scenario["throughput"] > 0
        assert scenario["cold_start_ns"] > 0
    providers = by_id["suites/s.yaml::mlp[onnxruntime-fp32]"]["runtime"]["providers"]
    assert providers[0] == "CPUExecutionProvider"


def test_k_and_m_select_cells(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "s", MATRIX_SUITE)
    result = suite_writer.runpytest("--perfguard", "--collect-only", "-q", "-k", "onnxruntime")
    result.stdout.fnmatch_lines(
        ["suites/s.yaml::mlp[[]onnxruntime-fp32[]]", "suites/s.yaml::mlp[[]onnxruntime-int8[]]"]
    )
    assert "torch-fp32" not in result.stdout.str()
    result = suite_writer.runpytest("--perfguard", "-m", "not smoke")
    result.assert_outcomes(deselected=4)
    result = suite_writer.runpytest(
        "--perfguard", "--strict-markers", "-m", "smoke", "-k", "torch and fp32"
    )
    result.assert_outcomes(passed=1, deselected=3)


def test_report_dir_option_beats_ini(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "s", MATRIX_SUITE)
    suite_writer.makeini("[pytest]\nperfguard_report_dir = from-ini\n")
    suite_writer.runpytest("--perfguard", "-k", "torch and fp32").assert_outcomes(passed=1)
    assert list((suite_writer.path / "from-ini").glob("*/results.json"))
    suite_writer.runpytest(
        "--perfguard", "-k", "torch and fp32", "--perfguard-report-dir", "from-cli"
    ).assert_outcomes(passed=1)
    assert list((suite_writer.path / "from-cli").glob("*/results.json"))


def test_results_directory_is_named_after_the_commit(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "s", MATRIX_SUITE)

    def git(*args: str) -> str:
        return run_git(suite_writer.path, *args)

    git("init", "-q", "-b", "main")
    git("add", "suites")
    git("commit", "-qm", "suite")
    sha = git("rev-parse", "HEAD")
    suite_writer.runpytest("--perfguard", "-k", "torch and fp32").assert_outcomes(passed=1)
    data = json.loads((suite_writer.path / "reports" / sha[:12] / "results.json").read_text())
    assert data["commit"]["sha"] == sha
    assert data["commit"]["branch"] == "main"
    assert data["commit"]["dirty"] is False


def test_named_file_outside_suites_dir_is_collected(suite_writer: pytest.Pytester) -> None:
    path = write_suite(suite_writer, "s", MATRIX_SUITE)
    moved = suite_writer.path / "elsewhere.yaml"
    moved.write_text(path.read_text().replace("tinymodels:mlp", "suites.tinymodels:mlp"))
    path.unlink()
    (suite_writer.path / "suites" / "__init__.py").write_text("")
    result = suite_writer.runpytest("--perfguard", "elsewhere.yaml", "-k", "torch and fp32")
    result.assert_outcomes(passed=1, deselected=3)


def test_junit_xml_carries_the_figures(suite_writer: pytest.Pytester) -> None:
    import xml.etree.ElementTree as ET

    write_suite(suite_writer, "s", MATRIX_SUITE)
    suite_writer.runpytest(
        "--perfguard", "-k", "torch and fp32", "--junitxml=junit.xml"
    ).assert_outcomes(passed=1, deselected=3)
    tree = ET.parse(suite_writer.path / "junit.xml")
    props = {p.get("name"): p.get("value") for p in tree.iter("property")}
    assert props["perfguard_status"] == "passed"
    assert float(props["perfguard_p95_ms"]) > 0
    assert int(props["perfguard_n"]) >= 30
    assert props["perfguard_verdict"] == "new"
