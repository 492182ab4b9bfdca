"""End-to-end: scenarios under load, run through pytester on real suites.

The models sleep for a known service time (``time.sleep`` releases the GIL and
never returns early), so the checks that involve time are physical bounds or
side-by-side ratios with a wide margin, never a figure of this machine.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from perfguard.records.resultsfile import validate
from tests.helpers.models import SLEEPY_MODEL
from tests.helpers.suites import write_suite

LOAD_MODELS = SLEEPY_MODEL + textwrap.dedent(
    """
    import threading


    class Unsafe(nn.Module):
        # Shared state that breaks when two threads are inside forward at once.
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 4)
            self.owner = None

        def forward(self, x):
            me = threading.get_ident()
            if self.owner is not None and self.owner != me:
                raise RuntimeError("Unsafe.forward entered by two threads at once")
            self.owner = me
            try:
                time.sleep(0.002)
                return self.lin(x)
            finally:
                self.owner = None


    def unsafe():
        torch.manual_seed(0)
        return Unsafe().eval()
    """
)

HEADER = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 100, seconds: 0.5, max_seconds: 20}
  threads: 1
models:
  sleepy:
    factory: loadmodels:sleepy
    kwargs: {ms: 2}
    inputs:
      x: {shape: [1, 8], dtype: float32}
  unsafe:
    factory: loadmodels:unsafe
    inputs:
      x: {shape: [1, 8], dtype: float32}
  mlp:
    factory: tinymodels:mlp
    inputs:
      x: {shape: [1, 8], dtype: float32}
scenarios:
"""


def write(pytester: pytest.Pytester, scenarios: str) -> Path:
    path = write_suite(pytester, "load", HEADER + textwrap.indent(textwrap.dedent(scenarios), "  "))
    (path.parent / "loadmodels.py").write_text(LOAD_MODELS)
    return path


def results(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    files = list((pytester.path / "reports").glob("*/results.json"))
    assert len(files) == 1, files
    data = json.loads(files[0].read_text())
    validate(data)
    return {s["id"]: s for s in data["scenarios"]}


def test_each_level_is_an_item_with_its_load_figures(suite_writer: pytest.Pytester) -> None:
    write(
        suite_writer,
        """\
        - name: closed
          model: sleepy
          load: {concurrency: [1, 4]}
        - name: open
          model: sleepy
          load: {rate: "300/s", arrivals: constant, late_ms: 50}
        """,
    )
    result = suite_writer.runpytest("--perfguard", "-v", "--perfguard-baseline=none")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*suites/load.yaml::closed?c1? PASSED*",
            "*suites/load.yaml::closed?c4? PASSED*",
            "*suites/load.yaml::open?r300? PASSED*",
            "*under load*",
            "*level*P50 ms*P90 ms*P95 ms*P99 ms*",
        ]
    )
    found = results(suite_writer)
    c1 = found["suites/load.yaml::closed[c1]"]
    c4 = found["suites/load.yaml::closed[c4]"]
    open_ = found["suites/load.yaml::open[r300]"]
    assert c1["load"]["concurrency"] == 1 and c4["load"]["concurrency"] == 4
    assert c4["load"]["mode"] == "closed" and c4["load"]["requests"] >= 100
    # Four clients of a 2 ms model really run side by side (1 client: <= 500/s).
    assert c1["throughput"] <= 500 * 1.01
    assert c4["throughput"] > 2 * c1["throughput"]
    # The gated samples are the corrected latencies, one per answered request.
    assert len(c4["samples_ns"]) == c4["load"]["completed"] == c4["latency_ns"]["n"]
    load = open_["load"]
    assert load["mode"] == "open" and load["rate_asked"] == 300
    assert load["requests"] == 150  # 300/s for measure.seconds 0.5
    assert load["uncorrected_ns"]["n"] == 150
    # Corrected latency starts at the scheduled time, before the call: never shorter.
    assert open_["latency_ns"]["p50"] >= load["uncorrected_ns"]["p50"]
    assert open_["latency_ns"]["min"] >= 2_000_000  # the model sleeps 2 ms


def test_a_model_unsafe_under_threads_fails_with_request_counts(
    suite_writer: pytest.Pytester,
) -> None:
    write(
        suite_writer,
        """\
        - name: shared
          model: unsafe
          load: {concurrency: 2}
        - name: own
          model: unsafe
          load: {concurrency: 2, sessions: per_worker}
        """,
    )
    result = suite_writer.runpytest("--perfguard", "-v", "--perfguard-baseline=none")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*::shared?c2? FAILED*",
            "*::own?c2? PASSED*",
            "*requests (*%) failed under load (2 concurrent clients)*"
            "RuntimeError: Unsafe.forward entered by two threads at once*"
            "sessions: per_worker*",
        ]
    )
    found = results(suite_writer)
    shared = found["suites/load.yaml::shared[c2]"]
    assert shared["status"] == "failed"
    failed = shared["load"]["failed"]
    assert failed > 0 and sum(shared["load"]["errors"].values()) == failed
    own = found["suites/load.yaml::own[c2]"]
    assert own["load"]["failed"] == 0 and own["runtime"]["sessions"] == 2


def test_a_generator_that_fell_behind_is_invalid_and_skipped(
    suite_writer: pytest.Pytester,
) -> None:
    # A 1 ns lateness limit that no request can keep: the generator "falls behind".
    write(
        suite_writer,
        """\
        - name: open
          model: mlp
          load: {rate: "200/s", late_ms: 0.000001, late_max: 0}
        """,
    )
    result = suite_writer.runpytest("--perfguard", "-rs", "--perfguard-baseline=none")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*load generator fell behind*asked 200/s*"])
    found = results(suite_writer)["suites/load.yaml::open[r200]"]
    assert found["status"] == "skipped"  # never a baseline: only passed cells are
    assert found["load"]["invalid"] and found["load"]["late"]["share"] > 0


def test_batching_groups_requests_and_reports_the_gain(suite_writer: pytest.Pytester) -> None:
    write(
        suite_writer,
        """\
        - name: batched
          model: sleepy
          load: {rate: "800/s", batching: {max_batch: 4, max_wait_ms: 3}, late_ms: 50}
        """,
    )
    result = suite_writer.runpytest("--perfguard", "-v", "--perfguard-baseline=none")
    result.assert_outcomes(passed=1)
    found = results(suite_writer)["suites/load.yaml::batched[r800]"]
    batching = found["load"]["batching"]
    sizes = {int(k): v for k, v in batching["sizes"].items()}
    assert max(sizes) <= 4 and sum(k * v for k, v in sizes.items()) == 400
    # 800/s against one 2 ms worker (500/s unbatched) only keeps up by batching.
    assert batching["mean_batch"] > 1.2
    # One call costs 2 ms at any batch: four requests per call gain well over 1.5x.
    assert batching["gain"] > 1.5
    assert batching["wait_ns"]["n"] == 400


def test_slo_search_finds_a_level_and_gates_its_throughput(
    suite_writer: pytest.Pytester, tmp_path: Path
) -> None:
    write(
        suite_writer,
        """\
        - name: search
          model: sleepy
          measure: {seconds: 1}
          load:
            rate: "100/s"
            arrivals: constant
            late_ms: 50
            slo: {p95_ms: 40, factor: 2, refine: 1, max: 1600}
        """,
    )
    first = suite_writer.runpytest("--perfguard", "-v", "--perfguard-baseline=none")
    first.assert_outcomes(passed=2)
    found = results(suite_writer)
    slo_cell = found["suites/load.yaml::search[slo]"]
    slo = slo_cell["load"]["slo"]
    steps = slo["steps"]
    assert steps[0]["level"] == 100 and slo["target_ms"] == 40
    assert slo["best_level"] in [s["level"] for s in steps if s["ok"]]
    assert all(s["p_ms"] <= 40 for s in steps if s["ok"])
    assert slo_cell["throughput"] == slo["best_throughput"]

    # A baseline whose searched throughput was twice as high: this run regressed.
    report = next((suite_writer.path / "reports").glob("*/results.json"))
    data = json.loads(report.read_text())
    for scenario in data["scenarios"]:
        if scenario["id"].endswith("[slo]"):
            scenario["throughput"] *= 2
    base = tmp_path / "base.json"
    base.write_text(json.dumps(data))
    # Judged on its figures even when other jobs share this machine (the contention
    # check has tests of its own).
    second = suite_writer.runpytest(
        "--perfguard",
        "-v",
        f"--perfguard-baseline={base}",
        "--perfguard-confirm-rounds=0",
        "--perfguard-contention-limit=1.01",
    )
    second.stdout.fnmatch_lines(["*::search?slo? FAILED*", "*throughput*regressed*"])


def test_shape_buckets_are_cells_with_their_own_inputs(suite_writer: pytest.Pytester) -> None:
    write(
        suite_writer,
        """\
        - name: buckets
          model: mlp
          measure: {iterations: 30, seconds: 0}
          shapes:
            b1: {x: [1, 8]}
            b4: {x: [4, 8]}
          matrix:
            backend: [torch, onnxruntime]
        """,
    )
    result = suite_writer.runpytest("--perfguard", "-v", "--perfguard-baseline=none")
    result.assert_outcomes(passed=4)
    found = results(suite_writer)
    for backend in ("torch", "onnxruntime"):
        assert found[f"suites/load.yaml::buckets[{backend}-b1]"]["batch_size"] == 1
        assert found[f"suites/load.yaml::buckets[{backend}-b4]"]["batch_size"] == 4


def test_a_duration_too_short_for_p95_is_a_suite_error(suite_writer: pytest.Pytester) -> None:
    write(
        suite_writer,
        """\
        - name: short
          model: mlp
          load: {rate: "20/s"}
        """,
    )
    result = suite_writer.runpytest("--perfguard", "--perfguard-baseline=none")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*load.yaml:*10 requests*P95*at least 90*"])
