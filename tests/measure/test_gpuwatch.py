"""GpuWatch and OOM handling against fakes of a GPU session and of the NVML sampler."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

from perfguard.core.errors import Location, ModelError, RunInvalid
from perfguard.core.scenario import GpuSpec, InputSpec, LoopSpec, ModelSpec, Scenario
from perfguard.measure import gpuwatch
from perfguard.measure.gpuwatch import GpuWatch, cuda_unavailable, device_index, is_out_of_memory
from perfguard.measure.runner import run_loop
from perfguard.records.results import ScenarioResult
from tests.helpers.suites import write_suite

MODEL = ModelSpec(
    name="m",
    location=Location(Path("s.yaml"), 3),
    base_dir=Path(),
    factory="x:y",
    inputs=(InputSpec("x", (1, 8)),),
)


def scenario(device: str = "cuda:1", **gpu: Any) -> Scenario:
    return Scenario(
        suite=Path("s.yaml"),
        name="m",
        cell_id="",
        model=MODEL,
        location=Location(Path("s.yaml"), 7),
        device=device,
        gpu=GpuSpec(**gpu),
        warmup=LoopSpec(2, 0),
        measure=LoopSpec(5, 0),
    )


class FakeSession:
    synchronize = None

    def __init__(self) -> None:
        self.runtime_info: dict[str, Any] = {}
        self.calls: list[str] = []
        self.device_ns = [900, 901, 1000, 2000, 3000]

    def reset_device_peak(self) -> None:
        self.calls.append("reset_peak")

    def device_peak_mib(self) -> float:
        self.calls.append("peak")
        return 321.5

    def start_device_timing(self) -> None:
        self.calls.append("start_timing")

    def stop_device_timing(self) -> list[int]:
        self.calls.append("stop_timing")
        return self.device_ns


def fake_sampler(result: dict[str, Any], seen: list[int]) -> type:
    class Sampler:
        def __init__(self, index: int) -> None:
            seen.append(index)
            self.stopped = False

        def start(self) -> Sampler:
            return self

        def stop(self) -> None:
            self.stopped = True

        def result(self) -> dict[str, Any]:
            return result

    return Sampler


QUIET = {
    "available": True,
    "reason": None,
    "samples": 12,
    "sm_clock_mhz": {"min": 1980, "max": 1980, "mean": 1980},
    "mem_clock_mhz": {"min": 2619, "max": 2619, "mean": 2619},
    "temperature_c": {"min": 40, "max": 44, "mean": 42},
    "power_w": {"min": 90, "max": 300, "mean": 200},
    "memory_used_mib": None,
    "reasons_seen": ["gpu_idle"],
    "throttled": {"power": False, "thermal": False},
    "other_processes": [],
    "processes_available": True,
    "processes_error": None,
}
HOT = {
    **QUIET,
    "reasons_seen": ["sw_thermal_slowdown"],
    "throttled": {"power": False, "thermal": True},
    "sm_clock_mhz": {"min": 1100, "max": 1980, "mean": 1500},
}


def result_of(sc: Scenario) -> ScenarioResult:
    return ScenarioResult(
        id="s.yaml::m",
        suite="s.yaml",
        name="m",
        backend="torch",
        device=sc.device,
        precision="fp32",
    )


def test_on_the_cpu_the_watch_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpuwatch, "TelemetrySampler", None)  # would fail if touched
    session = FakeSession()
    sc = scenario(device="cpu")
    with GpuWatch(sc, session) as watch:
        pass
    assert session.calls == [] and watch.facts(3) is None
    assert watch.check(result_of(sc)) == result_of(sc)


def test_a_quiet_gpu_run_gets_telemetry_device_time_and_peak_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[int] = []
    monkeypatch.setattr(gpuwatch, "TelemetrySampler", fake_sampler(QUIET, seen))
    session = FakeSession()
    sc = scenario()
    with GpuWatch(sc, session) as watch:
        session.calls.append("loop")
    assert seen == [1]  # cuda:1 samples GPU 1
    assert session.calls == ["reset_peak", "start_timing", "loop", "stop_timing", "peak"]
    facts = watch.facts(3)  # the last 3 device times are the timed requests
    assert facts is not None and facts.telemetry == QUIET
    device = facts.device_latency_ns
    assert device is not None and device.n == 3
    assert device.min == 1000 and device.max == 3000
    checked = watch.check(result_of(sc))
    assert checked.gpu_peak_memory_mib == 321.5 and checked.status == "passed"


def test_a_throttled_run_is_invalid_with_its_figures_unless_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gpuwatch, "TelemetrySampler", fake_sampler(HOT, []))
    sc = scenario()
    with GpuWatch(sc, FakeSession()) as watch:
        pass
    with pytest.raises(RunInvalid) as info:
        watch.check(result_of(sc))
    assert "sw_thermal_slowdown" in str(info.value) and "allow_throttle" in str(info.value)
    kept = info.value.result
    assert kept.status == "skipped" and kept.gpu_peak_memory_mib == 321.5  # never a baseline
    lenient = scenario(allow_throttle=True)
    with GpuWatch(lenient, FakeSession()) as watch:
        pass
    assert watch.check(result_of(lenient)).status == "passed"


def test_exclusive_refuses_to_start_while_others_use_the_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    busy = {**QUIET, "other_processes": [{"pid": 4242, "used_mib": 2048.0}]}
    monkeypatch.setattr(gpuwatch, "TelemetrySampler", fake_sampler(busy, []))
    session = FakeSession()
    with pytest.raises(RunInvalid, match="pid 4242"), GpuWatch(scenario(exclusive=True), session):
        session.calls.append("loop")
    assert "loop" not in session.calls
    with GpuWatch(scenario(), FakeSession()):  # not exclusive: measured, others reported
        pass


def test_exclusive_refuses_to_start_when_the_process_list_cannot_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unlisted = {
        **QUIET,
        "device_index": 1,
        "processes_available": False,
        "processes_error": "this NVML answers none of nvmlDeviceGetComputeRunningProcesses_v3, "
        "... (...). Fix: update the NVIDIA driver",
    }
    monkeypatch.setattr(gpuwatch, "TelemetrySampler", fake_sampler(unlisted, []))
    session = FakeSession()
    with (
        pytest.raises(RunInvalid) as info,
        GpuWatch(scenario(exclusive=True), session),
    ):
        session.calls.append("loop")
    assert "loop" not in session.calls
    message = str(info.value)
    assert message.startswith(
        "s.yaml:7: m on cuda:1: the suite asks for GPU 1 alone (`gpu: {exclusive: true}`), "
        "but the processes on it could not be listed: this NVML answers none of"
    )
    assert "so this run was refused" in message
    assert message.endswith(
        "Fix: update the NVIDIA driver, or drop `exclusive` to measure without that check"
    )
    with GpuWatch(scenario(), FakeSession()) as watch:  # not exclusive: measured
        pass
    assert watch.check(result_of(scenario())).status == "passed"


def test_exclusive_without_a_driver_is_refused_for_real(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real pynvml and the real sampler on a machine where NVML cannot start.
    real = pytest.importorskip("pynvml")
    try:
        real.nvmlInit()
    except real.NVMLError:
        pass
    else:
        real.nvmlShutdown()
        pytest.skip("NVML starts on this machine")
    monkeypatch.setitem(sys.modules, "pynvml", real)
    session = FakeSession()
    with pytest.raises(RunInvalid) as info, GpuWatch(scenario(exclusive=True), session):
        session.calls.append("loop")
    assert "loop" not in session.calls
    message = str(info.value)
    assert "the processes on it could not be listed: NVML could not start: " in message
    assert "or drop `exclusive` to measure without that check" in message
    with GpuWatch(scenario(), session) as watch:  # not exclusive: measured, telemetry off
        session.calls.append("loop")
    assert watch.telemetry is not None and watch.telemetry["available"] is False
    assert watch.check(result_of(scenario())).status == "passed"


def test_device_index_and_oom_classification() -> None:
    assert device_index("cuda") == 0 and device_index("cuda:3") == 3

    class OutOfMemoryError(RuntimeError):
        pass

    assert is_out_of_memory(OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_out_of_memory_fails_the_cell_without_keeping_the_failed_frames() -> None:
    class OutOfMemoryError(RuntimeError):
        pass

    class Exploding(FakeSession):
        def run(self, prepared: object) -> None:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

        def describe_oom(self, exc: BaseException) -> str:
            return f"device out of memory on cuda:1: {exc}; allocated 79000 MiB"

    with pytest.raises(ModelError) as info:
        run_loop(scenario(), Exploding(), {})  # type: ignore[arg-type]
    message = str(info.value)
    assert "device out of memory on cuda:1" in message and "allocated 79000 MiB" in message
    assert "s.yaml:7" in message and "fp16" in message
    # Neither chained nor carrying a context: the tensors of the failed call can be freed.
    assert info.value.__cause__ is None and info.value.__context__ is None


def test_cuda_missing_is_a_skip_reason_per_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime as ort
    import torch

    assert cuda_unavailable(scenario(device="cpu")) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    reason = cuda_unavailable(scenario())
    assert reason is not None and "sees no CUDA device" in reason and torch.__version__ in reason
    ort_cell = dataclasses.replace(scenario(), backend="onnxruntime")
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    reason = cuda_unavailable(ort_cell)
    assert reason is not None and "no CUDAExecutionProvider" in reason
    monkeypatch.setattr(
        ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    assert cuda_unavailable(ort_cell) is None
    trt_ep = dataclasses.replace(ort_cell, gpu=GpuSpec(ort_provider="tensorrt"))
    assert "TensorrtExecutionProvider" in (cuda_unavailable(trt_ep) or "")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert "has 1 CUDA device" in (cuda_unavailable(scenario(device="cuda:1")) or "")
    assert cuda_unavailable(scenario(device="cuda:0")) is None


def test_cuda_cells_are_skipped_with_the_reason_where_there_is_none(
    suite_writer: pytest.Pytester,
) -> None:
    write_suite(
        suite_writer,
        "gpu",
        """\
        models:
          mlp:
            factory: tinymodels:mlp
            inputs:
              x: {shape: [1, 8]}
        scenarios:
          - name: mlp
            model: mlp
            device: cuda
            matrix:
              backend: [torch, onnxruntime]
          - name: cpu
            model: mlp
            measure: {iterations: 30, seconds: 0}
        """,
    )
    result = suite_writer.runpytest("--perfguard", "-rs", "--perfguard-baseline=none")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        ["*SKIPPED*sees no CUDA device*", "*SKIPPED*no CUDAExecutionProvider*"],
        consecutive=False,
    )
