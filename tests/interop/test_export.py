"""`perfguard export --format pytest-benchmark`: pytest-benchmark's saved-JSON format."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from perfguard.core.atomicio import write_json_atomic
from perfguard.core.errors import ResultsError
from perfguard.interop.benchmark_json import benchmark_stats, export_command, to_pytest_benchmark
from perfguard.records.figures import RuntimeInfo, summarize
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult, Status

SHA = "0123456789abcdef0123456789abcdef01234567"


def _scenario(sid: str, samples: tuple[int, ...], **kw: object) -> ScenarioResult:
    fields: dict[str, object] = {
        "id": sid,
        "suite": "suites/vision.yaml",
        "name": sid.rsplit("::", 1)[-1],
        "backend": "torch",
        "device": "cpu",
        "precision": "fp32",
        "latency_ns": summarize(samples) if samples else None,
        "samples_ns": samples,
    }
    fields.update(kw)
    return ScenarioResult(**fields)  # type: ignore[arg-type]


def _run(*scenarios: ScenarioResult) -> RunResult:
    return RunResult(
        commit=CommitInfo(sha=SHA, branch="main", dirty=True),
        environment=Environment.of(
            {"cpu_model": "Test CPU", "machine": "x86_64", "os": "Linux"},
            {"hostname": "box", "python_full": "3.11.9"},
        ),
        scenarios=scenarios,
        created_at="2024-05-01T12:00:00+00:00",
        perfguard_version="0.1.0",
    )


def _sample_run() -> RunResult:
    return _run(
        _scenario("suites/vision.yaml::resnet", (1000, 2000, 3000, 4000, 10000), batch_size=4),
        _scenario("suites/vision.yaml::broken", (), status=Status.ERROR, message="boom"),
        _scenario(
            "tests/test_pre.py::test_tokenize[short]",
            (500, 700, 600, 650),
            suite="tests/test_pre.py",
            name="test_tokenize[short]",
            backend="python",
            precision="-",
            runtime=RuntimeInfo.from_dict(
                {
                    "source": "pytest-benchmark",
                    "rounds": 4,
                    "iterations": 10,
                    "group": "text",
                    "params": {"length": "short"},
                    "extra_info": {"corpus": "wiki"},
                }
            ),
        ),
    )


def test_known_answer_odd_rounds() -> None:
    stats = benchmark_stats([1e-6, 2e-6, 3e-6, 4e-6, 10e-6])
    assert stats["rounds"] == 5
    assert stats["min"] == pytest.approx(1e-6) and stats["max"] == pytest.approx(10e-6)
    assert stats["mean"] == pytest.approx(4e-6)
    assert stats["median"] == pytest.approx(3e-6)
    assert stats["stddev"] == pytest.approx((50 / 4) ** 0.5 * 1e-6)  # sample stddev
    assert stats["total"] == pytest.approx(20e-6)
    assert stats["ops"] == pytest.approx(250_000.0)  # rounds / total
    # Method 3 (n = 4k + 1): q1 = .25 x1 + .75 x2, q3 = .75 x4 + .25 x5.
    assert stats["q1"] == pytest.approx(1.75e-6) and stats["q3"] == pytest.approx(5.5e-6)
    assert stats["iqr"] == pytest.approx(3.75e-6)
    assert stats["ld15iqr"] == pytest.approx(1e-6) and stats["hd15iqr"] == pytest.approx(10e-6)
    assert (stats["stddev_outliers"], stats["iqr_outliers"], stats["outliers"]) == (1, 0, "1;0")
    assert stats["iterations"] == 1


def test_known_answer_even_rounds_and_single() -> None:
    stats = benchmark_stats([4.0, 1.0, 3.0, 2.0])
    assert (stats["q1"], stats["q3"], stats["median"]) == (1.5, 3.5, 2.5)  # method 2
    one = benchmark_stats([2.0])
    assert (one["stddev"], one["q1"], one["q3"], one["ld15iqr"], one["hd15iqr"]) == (
        0.0,
        2.0,
        2.0,
        2.0,
        2.0,
    )
    with pytest.raises(ValueError, match="no samples"):
        benchmark_stats([])


def test_stats_equal_pytest_benchmarks_own() -> None:
    pb_stats = pytest.importorskip("pytest_benchmark.stats")
    rng = random.Random(7)
    for n in range(1, 40):
        data = [rng.lognormvariate(-13, 0.5) for _ in range(n)]
        ref = pb_stats.Stats()
        for value in data:
            ref.update(value)
        ours = benchmark_stats(data)
        expected = ref.as_dict()
        for field in pb_stats.Stats.fields:
            if isinstance(expected[field], str):
                assert ours[field] == expected[field], (n, field)
            else:
                assert ours[field] == pytest.approx(expected[field], rel=1e-12), (n, field)


def test_structure_matches_pytest_benchmark_metadata() -> None:
    pb_stats = pytest.importorskip("pytest_benchmark.stats")

    class FakeFixture:
        name, fullname, group, param, params = "t", "f.py::t", None, None, None
        extra_info: dict[str, object] = {}  # noqa: RUF012
        cprofile_stats = None

    meta = pb_stats.Metadata(FakeFixture(), iterations=1, options={"timer": "x"})
    meta.update(1.0)
    reference = meta.as_dict()
    doc = to_pytest_benchmark(_sample_run())
    assert set(doc) >= {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert set(doc["commit_info"]) == {"id", "time", "author_time", "dirty", "project", "branch"}
    assert doc["commit_info"]["id"] == SHA and doc["commit_info"]["dirty"] is True
    assert doc["datetime"] == "2024-05-01T12:00:00+00:00"
    for bench in doc["benchmarks"]:
        assert set(bench) == set(reference)
        assert set(bench["stats"]) == set(reference["stats"])
        # The keys BenchmarkFixture._make_stats puts in ``options``.
        assert set(bench["options"]) == {
            "disable_gc",
            "timer",
            "min_rounds",
            "max_time",
            "min_time",
            "precision",
            "confidence",
            "warmup",
        }
    json.dumps(doc, allow_nan=False)


def test_benchmarks_content_in_seconds() -> None:
    doc = to_pytest_benchmark(_sample_run())
    # The scenario without samples is left out.
    assert [b["fullname"] for b in doc["benchmarks"]] == [
        "suites/vision.yaml::resnet",
        "tests/test_pre.py::test_tokenize[short]",
    ]
    yaml_bench, bridged = doc["benchmarks"]
    assert yaml_bench["stats"]["data"] == pytest.approx([1e-6, 2e-6, 3e-6, 4e-6, 10e-6])
    assert yaml_bench["stats"]["mean"] == pytest.approx(4e-6)
    assert yaml_bench["stats"]["ops"] == pytest.approx(1 / 4e-6)
    assert yaml_bench["stats"]["iterations"] == 1
    assert yaml_bench["group"] == "suites/vision.yaml"
    assert yaml_bench["param"] == "torch-cpu-fp32"
    assert yaml_bench["extra_info"]["batch_size"] == 4
    assert yaml_bench["extra_info"]["p50_ns"] == 3000
    # A bridged pytest-benchmark test keeps its group, params, iterations, extra_info.
    assert bridged["name"] == "test_tokenize[short]" and bridged["param"] == "short"
    assert bridged["group"] == "text" and bridged["params"] == {"length": "short"}
    assert bridged["stats"]["iterations"] == 10 and bridged["stats"]["rounds"] == 4
    assert bridged["extra_info"]["corpus"] == "wiki"
    assert bridged["stats"]["median"] == pytest.approx(625e-9)


def test_export_command_file_and_stdout(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    write_json_atomic(results, _sample_run().to_dict())
    text = export_command(results, "pytest-benchmark", None)
    assert isinstance(text, str)
    assert json.loads(text) == json.loads(json.dumps(to_pytest_benchmark(_sample_run())))
    out = tmp_path / "out" / "bench.json"
    assert export_command(results, "pytest-benchmark", out) == out
    assert json.loads(out.read_text()) == json.loads(text)
    with pytest.raises(ResultsError, match="unknown export format"):
        export_command(results, "csv", None)


def test_pytest_benchmark_compare_loads_the_export(tmp_path: Path) -> None:
    """pytest-benchmark's own CLI reads the file: the strongest format check."""
    pytest.importorskip("pytest_benchmark")
    results = tmp_path / "results.json"
    write_json_atomic(results, _sample_run().to_dict())
    out = tmp_path / "0001_export.json"
    export_command(results, "pytest-benchmark", out)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(out), "--columns=min,mean,ops"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "Failed to load" not in output, output
    assert "resnet" in output and "test_tokenize[short]" in output, output
