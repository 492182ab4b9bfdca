"""What a GPU cell adds around its timed loop: telemetry, device time, device memory.

:class:`GpuWatch` wraps one measurement of a ``cuda`` cell:

* **NVML telemetry** (:mod:`perfguard.machine.telemetry`): a sampler runs through the
  measurement; a run during which the GPU throttled for power or temperature
  is *invalid* (the item is skipped with the reason, the result is recorded as
  ``skipped`` and never becomes a baseline) unless ``gpu.allow_throttle``. With
  ``gpu.exclusive`` a run is refused up front while other processes use the
  GPU, and also when NVML cannot list them (no NVML, no driver, a call the driver
  lacks): the check never passes unchecked. Without NVML (not installed, no
  permission) the telemetry is marked unavailable and the run is still measured;
  the outputs say so (``perfguard.machine.telemetry.telemetry_gap``).
* **Device time** from CUDA events, per request, where the session offers it
  (torch): ``RuntimeInfo.gpu.device_latency_ns``, beside the host wall time that is
  gated.
* **Peak device memory** where the session offers it (torch:
  ``torch.cuda.max_memory_allocated`` after a reset): ``gpu_peak_memory_mib``,
  gated by ``gpu_mem``.

On the CPU the watch does nothing.
"""

from __future__ import annotations

import dataclasses
from types import TracebackType
from typing import Any

import numpy as np

from perfguard.core.errors import RunInvalid
from perfguard.core.scenario import Scenario
from perfguard.machine.placement import nvml_index
from perfguard.machine.telemetry import TelemetrySampler, invalid_reason, unlisted_processes
from perfguard.records.figures import GpuFacts, summarize
from perfguard.records.results import ScenarioResult, Status

__all__ = ["GpuWatch", "cuda_unavailable", "device_index", "is_out_of_memory"]


def device_index(device: str) -> int:
    """``cuda:1`` -> 1, ``cuda`` -> 0."""
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


def cuda_unavailable(scenario: Scenario) -> str | None:
    """Why a ``cuda`` cell cannot run on this machine (it is skipped with this), or None.

    torch and TensorRT cells need a CUDA build of torch that sees the device;
    ONNX Runtime cells need the CUDA execution provider in this onnxruntime. A
    runtime without CUDA is a skip with its reason, like a runtime that is not
    installed; a provider that exists but is not used (a silent fallback) stays a
    failure, checked when the session opens.
    """
    if not scenario.is_gpu:
        return None
    index = device_index(scenario.device)
    if scenario.backend == "onnxruntime":
        try:
            import onnxruntime as ort
        except ImportError:
            return None  # the backend's own reason says how to install it
        wanted = (
            "TensorrtExecutionProvider"
            if scenario.gpu.ort_provider == "tensorrt"
            else "CUDAExecutionProvider"
        )
        available = list(ort.get_available_providers())
        if wanted in available:
            return None
        return (
            f"{scenario.device} asked for, but this onnxruntime ({ort.__version__}) has no "
            f"{wanted} (it offers {', '.join(available)}); install onnxruntime-gpu on a "
            "machine with an NVIDIA GPU"
        )
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return (
            f"{scenario.device} asked for, but torch {torch.__version__} ({build}) sees no "
            "CUDA device here; run it on a machine with an NVIDIA GPU and CUDA-enabled torch"
        )
    count = int(torch.cuda.device_count())
    if index >= count:
        return f"{scenario.device} asked for, but this machine has {count} CUDA device(s)"
    return None


def is_out_of_memory(exc: BaseException) -> bool:
    """A device out-of-memory error of any runtime (torch, ONNX Runtime, TensorRT)."""
    if type(exc).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError
        return True
    text = str(exc)
    return "out of memory" in text.lower() and ("CUDA" in text or "cuda" in text)


class GpuWatch:
    """Context manager around one measurement of a cell; inert on the CPU."""

    def __init__(self, scenario: Scenario, session: Any, *, device_timing: bool = True) -> None:
        self.scenario = scenario
        self.session = session
        self.active = scenario.is_gpu
        self._device_timing = device_timing and hasattr(session, "start_device_timing")
        self._sampler: Any = None
        self.telemetry: dict[str, Any] | None = None
        self.device_ns: list[int] | None = None
        self.peak_mib: float | None = None

    def __enter__(self) -> GpuWatch:
        if not self.active:
            return self

        reset = getattr(self.session, "reset_device_peak", None)
        if reset is not None:
            reset()
        # NVML numbers GPUs physically; CUDA_VISIBLE_DEVICES (a placed worker's
        # device) renumbers them for the runtime.
        self._sampler = TelemetrySampler(nvml_index(device_index(self.scenario.device)))
        self._sampler.start()
        if self.scenario.gpu.exclusive:
            self._refuse_unless_alone()
        if self._device_timing:
            self.session.start_device_timing()
        return self

    def _refuse_unless_alone(self) -> None:
        """``exclusive``: refuse the run (``RunInvalid``, before the timed loop) while
        other processes use the GPU, or when NVML cannot list them: the suite asked for a
        check, and an unchecked run must not pass as a checked one."""
        seen = self._sampler.result()
        others = seen.get("other_processes") or []
        if others:
            self._sampler.stop()
            pids = ", ".join(str(p.get("pid")) for p in others)
            raise RunInvalid(
                f"{self.scenario.item_name}: other processes use "
                f"{self.scenario.device} (pid {pids}); the suite asks for the GPU alone "
                "(`gpu: {exclusive: true}`), so this run was refused",
                expected="no other compute process on the GPU",
                fix="stop them, or drop `exclusive`",
                location=self.scenario.location,
            )
        if not seen.get("processes_available"):
            self._sampler.stop()
            what, fix = unlisted_processes(seen)
            raise RunInvalid(
                f"{self.scenario.item_name} on {self.scenario.device}: {what}; so this run "
                "was refused",
                expected="a process list from NVML (nvidia-ml-py and a driver it can read)",
                fix=fix,
                location=self.scenario.location,
            )

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.active:
            return
        if self._device_timing:
            self.device_ns = self.session.stop_device_timing()
        if self._sampler is not None:
            self._sampler.stop()
            self.telemetry = self._sampler.result()
        peak = getattr(self.session, "device_peak_mib", None)
        self.peak_mib = peak() if peak is not None else None

    def facts(self, timed_requests: int) -> GpuFacts | None:
        """The result's GPU facts (``RuntimeInfo.gpu``): telemetry and device-time
        summary; None on a CPU cell.

        ``timed_requests``: how many of the last recorded device times belong to
        the timed loop (warm-up calls come first and are dropped).
        """
        if not self.active:
            return None
        device = None
        if self.device_ns and timed_requests > 0:
            device = summarize(np.asarray(self.device_ns[-timed_requests:], dtype=np.int64))
        return GpuFacts(telemetry=self.telemetry, device_latency_ns=device)

    def check(self, result: ScenarioResult) -> ScenarioResult:
        """The result with the peak device memory; raises ``RunInvalid`` for a throttled run."""
        if not self.active:
            return result
        result = dataclasses.replace(result, gpu_peak_memory_mib=self.peak_mib)

        gpu = self.scenario.gpu
        why = invalid_reason(
            self.telemetry or {}, allow_throttle=gpu.allow_throttle, exclusive=gpu.exclusive
        )
        if why is None:
            return result
        # Each problem in ``why`` carries its own fix.
        problem = RunInvalid(
            f"{self.scenario.item_name}: {why}",
            expected="a GPU that kept its clocks (and, with `exclusive`, that NVML showed "
            "free of other processes) through the measurement",
            location=self.scenario.location,
        )
        problem.result = dataclasses.replace(result, status=Status.SKIPPED, message=str(problem))
        raise problem
