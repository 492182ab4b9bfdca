"""What the GPU was doing while a scenario was measured, read from NVML.

A GPU at its power limit or too hot lowers its clocks on its own, and another
process on it competes for its SMs and memory bandwidth; neither shows in the
timings, so such a run would pass for a regression (or hide one). This module
reads the GPU's state through NVML (``nvidia-ml-py``, module ``pynvml``) so the
run can be marked invalid instead (``invalid_reason``).

Design constraints, and why:

* **Passive and cheap.** ``TelemetrySampler`` reads six counters every
  ``interval_s`` (50 ms) from a daemon thread; pynvml's ctypes calls release
  the GIL and take tens of microseconds. Nothing is ever set on the GPU.
* **Never raises into the measurement.** No pynvml, no driver, no permission:
  the result says ``available: False`` and why, and the run is still measured.
  A refused read (``NotSupported`` on a consumer card, ``NoPermission`` in a
  container) marks that one field unavailable.
* **Samples at both ends.** One sample at start and one at stop, so even a
  measurement shorter than ``interval_s`` has two. The clock-event reasons of
  all samples are OR-ed: a throttle seen only mid-run still counts.
* **Both generations of names.** NVML renamed "clocks throttle reasons" to
  "clocks event reasons": the new name is tried first, then the old one.

``hw_slowdown`` is in *both* ``POWER_REASONS`` and ``THERMAL_REASONS``: NVML sets
it for a too-high temperature, an external power brake and the power-draw
fast trigger alike, and GPUs older than the specific ``hw_thermal_slowdown`` /
``hw_power_brake_slowdown`` bits set only it. It cuts the clocks by half or
more, so it invalidates the run whatever the cause; ``reasons_seen`` keeps the
exact bits. ``gpu_idle``, ``applications_clocks_setting`` (clocks set on
purpose), ``sync_boost`` and ``display_clock_setting`` are not throttling.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

_T = TypeVar("_T")

INSTALL_HINT = "nvidia-ml-py is not installed (pip install 'perfguard[gpu]')"

# (short name, NVML constant suffix, value in nvml.h): the bit layout is part of
# the driver ABI, the fallback only serves pynvml builds older than a reason.
_REASONS: tuple[tuple[str, str, int], ...] = (
    ("gpu_idle", "GpuIdle", 0x1),
    ("applications_clocks_setting", "ApplicationsClocksSetting", 0x2),
    ("sw_power_cap", "SwPowerCap", 0x4),
    ("hw_slowdown", "HwSlowdown", 0x8),
    ("sync_boost", "SyncBoost", 0x10),
    ("sw_thermal_slowdown", "SwThermalSlowdown", 0x20),
    ("hw_thermal_slowdown", "HwThermalSlowdown", 0x40),
    ("hw_power_brake_slowdown", "HwPowerBrakeSlowdown", 0x80),
    ("display_clock_setting", "DisplayClockSetting", 0x100),
)
#: The figures sampled, each summarised as {min, max, mean} in ``result()``.
SERIES = ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "memory_used_mib")
KNOWN_REASONS: tuple[str, ...] = tuple(name for name, _, _ in _REASONS)
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown", "hw_slowdown"})
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"})

_MIB = 1024 * 1024
_CLOCK_GETTERS = (("app", "nvmlDeviceGetApplicationsClock"), ("max", "nvmlDeviceGetMaxClockInfo"))


def _const(nvml: Any, name: str, default: int) -> int:
    """An NVML constant; nvml.h's value where this pynvml (or a stand-in) lacks it."""
    return int(getattr(nvml, name, default))


def _text(value: object) -> str:
    if isinstance(value, bytes):  # older pynvml returns bytes
        return value.decode("utf-8", "replace").strip()
    return str(value).strip()


def _try(read: Callable[[], _T]) -> _T | None:
    """``read()``, or None when NVML (or anything under it) refuses."""
    try:
        return read()
    except Exception:  # NVMLError_NotSupported/NoPermission/GpuIsLost, ctypes, a missing function
        return None


def load_nvml() -> tuple[Any | None, str | None]:
    """Import pynvml and initialise NVML: ``(module, None)`` or ``(None, reason)``.

    Never raises. A successful load must be paired with ``nvml.nvmlShutdown()``
    (NVML counts initialisations).
    """
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return None, INSTALL_HINT
    try:
        nvml.nvmlInit()
    except Exception as error:
        if getattr(error, "value", None) == _const(nvml, "NVML_ERROR_NO_PERMISSION", 4):
            return None, (
                f"no permission to query NVML: {error} (the user needs read access to /dev/nvidia*)"
            )
        return None, f"NVML could not initialise: {error} (no NVIDIA driver?)"
    return nvml, None


def static_info(index: int, nvml: Any | None = None) -> dict[str, str]:
    """GPU ``index``'s fixed facts, as strings: ``gpu_model``, ``gpu_driver``,
    ``cuda_driver`` ("12.4"), ``gpu_power_limit_w``, ``gpu_persistence_mode``
    (on/off), ``gpu_{app,max}_clock_{sm,mem}_mhz``.

    A field NVML refuses is left out; without NVML or the GPU the dict is empty.
    Never raises. Without ``nvml`` it loads NVML and shuts it down itself.
    """
    owned = nvml is None
    if nvml is None:
        nvml, _ = load_nvml()
        if nvml is None:
            return {}
    try:
        handle = _try(lambda: nvml.nvmlDeviceGetHandleByIndex(index))
        if handle is None:
            return {}
        on = _const(nvml, "NVML_FEATURE_ENABLED", 1)
        reads: dict[str, Callable[[], str]] = {
            "gpu_model": lambda: _text(nvml.nvmlDeviceGetName(handle)),
            "gpu_driver": lambda: _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": lambda: _cuda_version(nvml),
            "gpu_power_limit_w": lambda: (
                f"{nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1e3:g}"
            ),
            "gpu_persistence_mode": lambda: (
                "on" if nvml.nvmlDeviceGetPersistenceMode(handle) == on else "off"
            ),
        }
        for kind, getter in _CLOCK_GETTERS:
            for clock, number in (("sm", 1), ("mem", 2)):
                domain = _const(nvml, f"NVML_CLOCK_{clock.upper()}", number)
                read = partial(lambda g, d: str(int(getattr(nvml, g)(handle, d))), getter, domain)
                reads[f"gpu_{kind}_clock_{clock}_mhz"] = read
        return {key: text for key, read in reads.items() if (text := _try(read))}
    finally:
        if owned:
            _try(nvml.nvmlShutdown)


def _cuda_version(nvml: Any) -> str:
    """``"12.4"`` from NVML's int (12040); the _v2 call where pynvml has it."""
    read = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None)
    version = int((read or nvml.nvmlSystemGetCudaDriverVersion)())
    return f"{version // 1000}.{version % 1000 // 10}"


def decode_reasons(mask: int, nvml: Any = None) -> list[str]:
    """Clock-event reason bits -> short names in bit order, others as ``unknown_0x...``."""
    names: list[str] = []
    claimed = 0
    for name, suffix, default in _REASONS:
        old = getattr(nvml, f"nvmlClocksThrottleReason{suffix}", default)
        bit = int(getattr(nvml, f"nvmlClocksEventReason{suffix}", old))
        claimed |= bit
        if mask & bit:
            names.append(name)
    rest = mask & ~claimed
    while rest:
        low = rest & -rest
        names.append(f"unknown_{low:#x}")
        rest ^= low
    return names


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "max": max(values), "mean": sum(values) / len(values)}


class TelemetrySampler:
    """Samples one GPU's clocks, temperature, power, memory and clock-event reasons.

    Typical use by a runner::

        with TelemetrySampler(device_index) as telemetry:
            measurement = timing.measure(...)
        reason = invalid_reason(telemetry.result(), allow_throttle=..., exclusive=...)

    ``background=False``: no thread, the caller calls ``sample_once()`` (between
    blocks of requests). ``nvml``: an initialised pynvml (or a stand-in) the
    caller shuts down; without it ``start()`` loads NVML and ``stop()`` shuts it.
    The GPU's compute processes are read at start and stop, this one left out by
    pid (in a container NVML reports host pids, so this one may show up too).
    """

    def __init__(
        self,
        device_index: int = 0,
        *,
        interval_s: float = 0.05,
        nvml: Any | None = None,
        background: bool = True,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.device_index = device_index
        self.interval_s = interval_s
        self.background = background
        self._nvml: Any = nvml
        self._owned = False
        self._handle: Any = None
        self._read_mask: Callable[[Any], Any] | None = None
        self._reason: str | None = None
        self._started = self._stopped = False
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._series: dict[str, list[float]] = {key: [] for key in SERIES}
        self._samples = self._mask = 0
        self._processes: dict[int, float | None] = {}
        self._processes_read = False

    def start(self) -> TelemetrySampler:
        """Load NVML (if needed), read the processes, take the first sample, start the thread."""
        if self._started:
            return self
        self._started = True
        if self._nvml is None:
            self._nvml, self._reason = load_nvml()
            self._owned = self._nvml is not None
        if self._nvml is None:
            return self
        nvml = self._nvml
        try:
            self._handle = nvml.nvmlDeviceGetHandleByIndex(self.device_index)
        except Exception as error:
            self._reason = f"NVML has no GPU {self.device_index}: {error}"
            self._close()
            return self
        new = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._read_mask = new or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        self._read_processes()
        self.sample_once()
        if self.background:
            self._thread = threading.Thread(target=self._run, name="perfguard-nvml", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._halt.wait(self.interval_s):
            self.sample_once()

    def sample_once(self) -> None:
        """One read of every counter; a field NVML refuses is skipped. Never raises."""
        if self._handle is None:
            return
        nvml, handle = self._nvml, self._handle
        sm, mem = _const(nvml, "NVML_CLOCK_SM", 1), _const(nvml, "NVML_CLOCK_MEM", 2)
        gpu = _const(nvml, "NVML_TEMPERATURE_GPU", 0)
        reads: dict[str, Callable[[], float]] = {
            "sm_clock_mhz": lambda: float(nvml.nvmlDeviceGetClockInfo(handle, sm)),
            "mem_clock_mhz": lambda: float(nvml.nvmlDeviceGetClockInfo(handle, mem)),
            "temperature_c": lambda: float(nvml.nvmlDeviceGetTemperature(handle, gpu)),
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "memory_used_mib": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / _MIB,
        }
        values = {key: _try(read) for key, read in reads.items()}
        read_mask = self._read_mask
        mask = _try(lambda: int(read_mask(handle))) if read_mask is not None else None
        with self._lock:
            self._samples += 1
            for key, value in values.items():
                if value is not None:
                    self._series[key].append(value)
            if mask is not None:
                self._mask |= mask

    def _read_processes(self) -> None:
        nvml, handle = self._nvml, self._handle
        found = _try(lambda: list(nvml.nvmlDeviceGetComputeRunningProcesses(handle)))
        if found is None:
            return
        own = os.getpid()
        with self._lock:
            self._processes_read = True
            for process in found:
                pid = getattr(process, "pid", None)
                if not isinstance(pid, int) or pid == own:
                    continue
                used = getattr(process, "usedGpuMemory", None)  # bytes; None under WDDM
                mib = used / _MIB if isinstance(used, int | float) else None
                known = [v for v in (self._processes.get(pid), mib) if v is not None]
                self._processes[pid] = max(known, default=None)

    def stop(self) -> None:
        """Stop and join the thread, take the last sample, read the processes again."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._halt.set()
        if self._thread is not None:
            self._thread.join(5.0)  # only a hung driver call holds it longer
        if self._handle is not None:
            self.sample_once()
            self._read_processes()
        self._close()

    def _close(self) -> None:
        if self._owned and self._nvml is not None:
            _try(self._nvml.nvmlShutdown)
            self._owned = False

    def __enter__(self) -> TelemetrySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def result(self) -> dict[str, Any]:
        """The figures so far, as plain JSON data: ``available``, ``reason`` (why not),
        ``device_index``, ``interval_s``, ``samples``, ``{min, max, mean}`` or None per
        name in ``SERIES``, ``reasons_seen`` (sorted, from any sample), ``throttled:
        {power, thermal}``, ``other_processes: [{pid, used_mib}]`` (at start or stop;
        ``used_mib`` None where NVML cannot tell) and ``processes_available``.
        """
        with self._lock:
            series = {key: list(values) for key, values in self._series.items()}
            samples, mask = self._samples, self._mask
            processes = sorted(self._processes.items())
            processes_read = self._processes_read
        reasons = sorted(decode_reasons(mask, self._nvml))
        available = self._handle is not None
        return {
            "available": available,
            "reason": None if available else self._reason or "telemetry was not started",
            "device_index": self.device_index,
            "interval_s": self.interval_s,
            "samples": samples,
            **{key: _stats(values) for key, values in series.items()},
            "reasons_seen": reasons,
            "throttled": {
                "power": bool(POWER_REASONS.intersection(reasons)),
                "thermal": bool(THERMAL_REASONS.intersection(reasons)),
            },
            "other_processes": [{"pid": pid, "used_mib": mib} for pid, mib in processes],
            "processes_available": processes_read,
        }


# (figure, label, whether its range tells more than its maximum) for the message.
_FIGURES = (
    ("sm_clock_mhz", "SM clock {} MHz", True),
    ("mem_clock_mhz", "memory clock {} MHz", True),
    ("temperature_c", "max temperature {} C", False),
    ("power_w", "max power {} W", False),
)


def invalid_reason(
    telemetry: dict[str, Any], *, allow_throttle: bool, exclusive: bool
) -> str | None:
    """Why a run must be marked invalid, or None.

    Invalid: power or thermal throttle reasons set during the measurement
    (unless ``allow_throttle``), or other processes on the GPU (when
    ``exclusive``). Unavailable telemetry, or a process list NVML would not
    give, proves nothing either way: None.
    """
    if not telemetry.get("available"):
        return None
    problems: list[str] = []
    seen = telemetry.get("reasons_seen") or []
    throttles = [name for name in seen if name in POWER_REASONS | THERMAL_REASONS]
    if throttles and not allow_throttle:
        facts = [", ".join(throttles)]
        for key, text, ranged in _FIGURES:
            figure = telemetry.get(key)
            if isinstance(figure, dict):
                low, high = f"{figure['min']:.0f}", f"{figure['max']:.0f}"
                facts.append(text.format(f"{low}-{high}" if ranged and low != high else high))
        problems.append(
            f"the GPU throttled its clocks during the measurement ({'; '.join(facts)}). "
            "Let the GPU cool / check the power limit, lock clocks with `nvidia-smi -lgc`, "
            "or set `gpu: {allow_throttle: true}`"
        )
    others = telemetry.get("other_processes") or []
    if exclusive and others:
        listed = ", ".join(
            f"pid {p['pid']} ({'memory unknown' if m is None else f'{m:.0f} MiB'})"
            for p, m in ((p, p.get("used_mib")) for p in others)
        )
        problems.append(
            f"other processes used GPU {telemetry.get('device_index', 0)} during the "
            f"measurement: {listed}. Stop them or drop `exclusive` (in a container NVML "
            "reports host pids: give it the host's pid namespace)"
        )
    return "; ".join(problems) if problems else None
