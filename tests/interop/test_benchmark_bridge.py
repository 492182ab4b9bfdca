"""pytest-benchmark's ``benchmark`` fixture feeding perfguard results (benchmark_bridge)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult
from perfguard.records.resultsfile import validate

pytest.importorskip("pytest_benchmark")

# A conftest that registers the bridge with a callback writing each result as a
# JSON line: the session's recording/gating is not involved.
BRIDGE_CONFTEST = textwrap.dedent(
    """
    import json
    from pathlib import Path

    from perfguard.interop.benchmark_bridge import BRIDGE_PLUGIN_NAME, register_bridge


    def pytest_configure(config):
        out = Path(config.rootpath) / "bridged.jsonl"

        def on_result(item, result):
            with out.open("a") as fh:
                fh.write(json.dumps({"nodeid": item.nodeid, "result": result.to_dict()}) + "\\n")

        register_bridge(config, on_result)
        register_bridge(config, on_result)  # idempotent
        assert config.pluginmanager.get_plugin(BRIDGE_PLUGIN_NAME) is not None
    """
)

BENCH_TESTS = textwrap.dedent(
    """
    import pytest


    def test_auto(benchmark):
        benchmark(sum, range(100))


    @pytest.mark.parametrize("n", [10, 20])
    def test_pedantic(benchmark, n):
        benchmark.extra_info["n"] = n
        benchmark.pedantic(sum, args=(range(n),), rounds=7, iterations=3)


    def test_no_benchmark():
        assert sum(range(10)) == 45


    def test_fixture_unused(benchmark):
        assert benchmark is not None


    def test_body_fails_after(benchmark):
        benchmark.pedantic(sum, args=(range(5),), rounds=3)
        assert False, "boom"


    def test_benchmarked_function_raises(benchmark):
        benchmark.pedantic(lambda: 1 / 0, rounds=2)
    """
)

FAST = (
    "--benchmark-min-rounds=5",
    "--benchmark-max-time=0.02",
    "--benchmark-min-time=0.00001",
    "--benchmark-warmup=off",
)


@pytest.fixture
def bridged(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, dict], dict]:
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(BRIDGE_CONFTEST)
    pytester.makepyfile(test_pre=BENCH_TESTS)
    run = pytester.runpytest(*FAST, "--benchmark-json=bench.json", "-p", "no:cacheprovider")
    lines = (pytester.path / "bridged.jsonl").read_text().splitlines()
    results = {}
    for line in lines:
        record = json.loads(line)
        results[record["nodeid"]] = record["result"]
    assert len(results) == len(lines), "one result per test"
    bench = json.loads((pytester.path / "bench.json").read_text())
    return run, results, {b["fullname"]: b for b in bench["benchmarks"]}


def test_only_finished_benchmarks_become_results(
    bridged: tuple[pytest.RunResult, dict[str, dict], dict],
) -> None:
    run, results, _ = bridged
    run.assert_outcomes(passed=5, failed=2)
    assert set(results) == {
        "test_pre.py::test_auto",
        "test_pre.py::test_pedantic[10]",
        "test_pre.py::test_pedantic[20]",
    }


def test_result_fields_match_pytest_benchmark_data(
    bridged: tuple[pytest.RunResult, dict[str, dict], dict],
) -> None:
    _, results, bench = bridged
    for nodeid, data in results.items():
        result = ScenarioResult.from_dict(data)
        stats = bench[nodeid]["stats"]
        assert result.id == nodeid
        assert result.suite == "test_pre.py"
        assert result.name == nodeid.split("::")[1]
        assert (result.backend, result.device, result.precision) == ("python", "cpu", "-")
        assert result.batch_size == 1 and result.cold_start_ns is None and result.tags == ()
        # One sample per round: pytest-benchmark's per-call seconds, in whole ns.
        assert len(result.samples_ns) == stats["rounds"]
        assert list(result.samples_ns) == [round(s * 1e9) for s in stats["data"]]
        assert all(s > 0 for s in result.samples_ns)
        summary = result.latency_ns
        assert summary is not None and summary.n == stats["rounds"]
        assert summary.min == min(result.samples_ns) and summary.max == max(result.samples_ns)
        assert summary.min <= summary.p50 <= summary.p99 <= summary.max
        assert summary.mean == pytest.approx(stats["mean"] * 1e9, rel=1e-6, abs=1.0)
        assert result.throughput == pytest.approx(1e9 / summary.mean, rel=1e-9)
        facts = result.runtime.benchmark
        assert facts is not None and facts.source == "pytest-benchmark"
        assert facts.rounds == stats["rounds"]
        assert facts.iterations == stats["iterations"]
        assert result.stability_ratio is not None and result.stability_ratio > 0
    pedantic = ScenarioResult.from_dict(results["test_pre.py::test_pedantic[20]"])
    facts = pedantic.runtime.benchmark
    assert facts is not None and facts.rounds == 7 and facts.iterations == 3
    assert facts.params == {"n": 20}
    assert facts.extra_info == {"n": 20}


def test_bridged_results_fit_the_results_schema(
    bridged: tuple[pytest.RunResult, dict[str, dict], dict],
) -> None:
    _, results, _ = bridged
    run = RunResult(
        commit=CommitInfo(sha=None, branch=None, dirty=False),
        environment=Environment.of({}),
        scenarios=tuple(ScenarioResult.from_dict(r) for r in results.values()),
        created_at="2024-01-01T00:00:00+00:00",
        perfguard_version="0.1.0",
    )
    validate(run.to_dict())
    assert RunResult.from_dict(json.loads(json.dumps(run.to_dict()))) == run


def test_export_of_bridged_results_matches_pytest_benchmarks_json(
    bridged: tuple[pytest.RunResult, dict[str, dict], dict],
) -> None:
    from perfguard.interop.benchmark_json import to_pytest_benchmark

    _, results, bench = bridged
    run = RunResult(
        commit=CommitInfo(sha=None, branch=None, dirty=False),
        environment=Environment.of({}),
        scenarios=tuple(ScenarioResult.from_dict(r) for r in results.values()),
        created_at="2024-01-01T00:00:00+00:00",
        perfguard_version="0.1.0",
    )
    for exported in to_pytest_benchmark(run)["benchmarks"]:
        original = bench[exported["fullname"]]
        for key in ("name", "fullname", "group", "params", "param"):
            assert exported[key] == original[key], key
        assert exported["extra_info"].items() >= original["extra_info"].items()
        mine, theirs = exported["stats"], original["stats"]
        assert mine["rounds"] == theirs["rounds"]
        assert mine["iterations"] == theirs["iterations"]
        # Equal up to the whole-nanosecond rounding of each sample.
        for key in ("min", "max", "mean", "median", "q1", "q3"):
            assert mine[key] == pytest.approx(theirs[key], abs=1e-9), key
        assert mine["ops"] == pytest.approx(theirs["ops"], rel=0.01)


def test_callback_exception_fails_that_test(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(
        textwrap.dedent(
            """
            from perfguard.interop.benchmark_bridge import register_bridge


            def pytest_configure(config):
                def on_result(item, result):
                    if "slow" in item.name:
                        raise AssertionError(f"regressed: {result.id}")

                register_bridge(config, on_result)
            """
        )
    )
    pytester.makepyfile(
        test_gate=textwrap.dedent(
            """
            def test_fast(benchmark):
                benchmark.pedantic(sum, args=(range(3),), rounds=3)


            def test_slow(benchmark):
                benchmark.pedantic(sum, args=(range(3),), rounds=3)
            """
        )
    )
    run = pytester.runpytest(*FAST)
    run.assert_outcomes(passed=1, failed=1)
    run.stdout.fnmatch_lines(["*regressed: test_gate.py::test_slow*"])


def test_benchmark_result_none_when_fixture_unused(tmp_path: Path) -> None:
    from perfguard.interop.benchmark_bridge import benchmark_result

    class Unused:
        stats = None
        has_error = False

    assert benchmark_result(None, Unused(), tmp_path) is None  # type: ignore[arg-type]


def test_register_bridge_without_pytest_benchmark_does_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from perfguard.interop import benchmark_bridge

    class NoPlugins:
        def get_plugin(self, name: str) -> None:
            raise AssertionError("must not be consulted")

        def register(self, plugin: object, name: str) -> None:
            raise AssertionError("must not register")

    class FakeConfig:
        pluginmanager = NoPlugins()
        rootpath = Path()

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pytest_benchmark" else real_find_spec(name, *a),
    )
    assert not benchmark_bridge.benchmark_available()
    benchmark_bridge.register_bridge(FakeConfig(), lambda item, result: None)  # type: ignore[arg-type]
