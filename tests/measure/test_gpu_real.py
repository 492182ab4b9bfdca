"""Checks on a real NVIDIA GPU (marker ``gpu``): run by ``scripts/gpu-check``.

Everywhere else they are skipped with the reason (tests/conftest.py). Each test
also skips, with its reason, when the runtime it needs is not installed there.
The CPU-runnable tests of the same paths use fakes (test_torch_cuda.py,
test_ort_gpu.py, test_tensorrt_backend.py, test_telemetry.py, test_gpuwatch.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.core.errors import Location, ModelError
from perfguard.core.scenario import GpuSpec, InputSpec, LoopSpec, ModelSpec, Scenario
from perfguard.measure.opencell import RunContext, open_session
from perfguard.measure.runner import run_loop
from tests.helpers.models import TINY_MODELS
from tests.helpers.suites import write_suite

pytestmark = pytest.mark.gpu


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    (tmp_path / "tinymodels.py").write_text(TINY_MODELS)
    return tmp_path


def cell(base: Path, backend: str = "torch", precision: str = "fp32", **gpu: Any) -> Scenario:
    model = ModelSpec(
        name="mlp",
        location=Location(base / "s.yaml", 2),
        base_dir=base,
        factory="tinymodels:mlp",
        factory_kwargs=(("width", 256),),
        inputs=(InputSpec("x", (64, 8), seed=1),),
    )
    return Scenario(
        suite=base / "s.yaml",
        name="mlp",
        cell_id=f"{backend}-{precision}",
        model=model,
        location=Location(base / "s.yaml", 9),
        backend=backend,
        device="cuda:0",
        precision=precision,
        gpu=GpuSpec(**gpu),
        warmup=LoopSpec(5, 0),
        measure=LoopSpec(50, 0),
    )


@contextmanager
def opened(sc: Scenario, base: Path) -> Iterator[tuple[Any, Any]]:
    with open_session(sc, RunContext(base, base / "cache")) as (session, prepared, _batch):
        yield session, prepared


def outputs(sc: Scenario, base: Path) -> np.ndarray:
    with opened(sc, base) as (session, prepared):
        return session.to_numpy(session.run(prepared))[0]


def test_torch_times_every_request_on_its_stream_and_reads_device_memory(
    models_dir: Path,
) -> None:
    import torch

    with opened(cell(models_dir, precision="fp16"), models_dir) as (session, prepared):
        assert session.synchronize is not None
        session.reset_device_peak()
        session.start_device_timing()
        for _ in range(20):
            session.run(prepared)
            session.synchronize()
        device_ns = session.stop_device_timing()
        assert device_ns is not None and len(device_ns) == 20 and min(device_ns) > 0
        assert (session.device_peak_mib() or 0) > 0
        assert torch.cuda.current_stream().query()  # nothing left in flight


def test_cuda_graph_replays_the_eager_result(models_dir: Path) -> None:
    eager = outputs(cell(models_dir), models_dir)
    graphed = cell(models_dir, cuda_graph=True)
    with opened(graphed, models_dir) as (session, prepared):
        replayed = session.to_numpy(session.run(prepared))[0]
        assert session.runtime_info["cuda_graph"] is True
    np.testing.assert_allclose(replayed, eager, rtol=1e-5, atol=1e-5)


def test_out_of_memory_fails_the_cell_and_the_memory_comes_back(models_dir: Path) -> None:
    import torch

    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()

    class Greedy:
        synchronize = None

        def run(self, prepared: object) -> object:
            held = torch.empty(1024, 1024, 256, device="cuda")  # 1 GiB held by this frame
            total = torch.cuda.get_device_properties(0).total_memory
            return held, torch.empty(total * 4, dtype=torch.uint8, device="cuda")

    with pytest.raises(ModelError, match="out of memory"):
        run_loop(cell(models_dir), Greedy(), None)  # type: ignore[arg-type]
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() <= before + 1024 * 1024


def test_onnxruntime_cuda_places_every_node_on_the_gpu(models_dir: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)")
    reference = outputs(cell(models_dir), models_dir)
    for copies in (False, True):
        sc = cell(models_dir, backend="onnxruntime", include_copies=copies)
        with opened(sc, models_dir) as (session, prepared):
            got = session.to_numpy(session.run(prepared))[0]
            info = session.runtime_info
        assert info["providers"][0] == "CUDAExecutionProvider"
        assert info["copies_timed"] is copies
        assert info["placement"]["cpu_node_count"] == 0, info["placement"]
        np.testing.assert_allclose(got, reference, rtol=1e-3, atol=1e-3)


def test_tensorrt_builds_once_and_matches_torch(models_dir: Path) -> None:
    pytest.importorskip("tensorrt")
    reference = outputs(cell(models_dir), models_dir)
    sc = cell(models_dir, backend="tensorrt", precision="fp16")
    with opened(sc, models_dir) as (session, prepared):
        got = session.to_numpy(session.run(prepared))[0]
        first = dict(session.runtime_info)
    with opened(sc, models_dir) as (session, _prepared):
        second = dict(session.runtime_info)
    assert first["built"] is True and first["build_s"] > 0
    assert second["built"] is False and second["build_s"] == 0.0
    assert second["cache_key"] == first["cache_key"]
    np.testing.assert_allclose(got, reference, rtol=2e-2, atol=2e-2)


def test_nvml_telemetry_reads_this_gpu() -> None:
    pytest.importorskip("pynvml")
    from perfguard.machine.telemetry import TelemetrySampler, static_info

    assert static_info(0).get("gpu_model")
    sampler = TelemetrySampler(0, interval_s=0.02).start()
    import torch

    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(50):
        x = x @ x
        x = x / x.norm()
    torch.cuda.synchronize()
    sampler.stop()
    result = sampler.result()
    assert result["available"] and result["samples"] >= 2
    assert result["sm_clock_mhz"]["max"] > 0 and result["power_w"]["max"] > 0


def test_a_gpu_suite_runs_end_to_end_with_device_figures(suite_writer: pytest.Pytester) -> None:
    write_suite(
        suite_writer,
        "gpu",
        """\
        defaults:
          device: cuda
          warmup: {iterations: 10, seconds: 0}
          measure: {iterations: 200, seconds: 0}
          gate: {p95: "+5%", gpu_mem: "+10%"}
        models:
          mlp:
            factory: tinymodels:mlp
            kwargs: {width: 256}
            inputs:
              x: {shape: [64, 8], dtype: float32, seed: 1}
        scenarios:
          - name: mlp
            model: mlp
            matrix:
              precision: [fp32, fp16]
          - name: load
            model: mlp
            load: {concurrency: [1, 2]}
        """,
    )
    result = suite_writer.runpytest("--perfguard", "-v", "--perfguard-baseline=none")
    result.assert_outcomes(passed=4)
    (path,) = (suite_writer.path / "reports").glob("*/results.json")
    for scenario in json.loads(path.read_text())["scenarios"]:
        assert scenario["gpu_peak_memory_mib"] > 0
        assert "telemetry" in scenario["runtime"]
        if scenario["load"] is None:
            assert scenario["runtime"]["device_latency_ns"]["n"] == 200
