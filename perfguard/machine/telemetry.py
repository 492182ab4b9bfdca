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
  the result says ``available: False`` and why (with the fix), the run is still
  measured, and the outputs say it once (``telemetry_gap``).
  A refused read (``NotSupported`` on a consumer card, ``NoPermission`` in a
  container) marks that one field unavailable.
* **Samples at both ends.** One sample at start and one at stop, so even a
  measurement shorter than ``interval_s`` has two. The clock-event reasons of
  all samples are OR-ed: a throttle seen only mid-run still counts.
* **Both generations of calls.** A pynvml newer than the driver offers calls the
  driver's NVML lacks: they raise ``NVMLError_FunctionNotFound`` (pynvml's unversioned
  process call raises its ``NVMLLibraryMismatchError`` instead, an unknown struct
  version ``NVMLError_ArgumentVersionMismatch``). Each reading tries its calls newest
  first (``CLOCK_REASON_CALLS``: "clocks event reasons", then the older "clocks
  throttle reasons"; ``PROCESS_CALLS``: ``_v3``, ``_v2``, unversioned) and remembers,
  per device, the first that answers, so the fallback costs one failed call per GPU
  and process. A reading that no call can give is said in the result (``reasons_error``,
  ``processes_error``, each with its fix), never silently empty.

Which reasons invalidate a run (``THROTTLE_REASONS``): those where the GPU lowered its
clocks on its own, against the work's demand, for a cause that changes from run to run:
power (``POWER_REASONS``), temperature (``THERMAL_REASONS``) and the board's limit or
reliability policy (``POLICY_REASONS``: ``board_limit`` 0x200 and ``reliability`` 0x400,
named in nvidia-ml-py 13's ``nvmlClocksThrottleReason*``). Those that reflect a choice
or no demand do not (``BENIGN_REASONS``): ``gpu_idle``, ``applications_clocks_setting``
(clocks set on purpose), ``sync_boost`` (clocks held to a group's) and
``display_clock_setting``. A bit this table does not know is kept as ``unknown_0x...``
in ``reasons_seen`` and does not invalidate a run: nothing says what it means.

``hw_slowdown`` is in *both* ``POWER_REASONS`` and ``THERMAL_REASONS``: NVML sets
it for a too-high temperature, an external power brake and the power-draw
fast trigger alike, and GPUs older than the specific ``hw_thermal_slowdown`` /
``hw_power_brake_slowdown`` bits set only it. It cuts the clocks by half or
more, so it invalidates the run whatever the cause; ``reasons_seen`` keeps the
exact bits.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Mapping
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
    ("board_limit", "BoardLimit", 0x200),
    ("reliability", "Reliability", 0x400),
)
#: The figures sampled, each summarised as {min, max, mean} in ``result()``.
SERIES = ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "memory_used_mib")
KNOWN_REASONS: tuple[str, ...] = tuple(name for name, _, _ in _REASONS)
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown", "hw_slowdown"})
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"})
POLICY_REASONS = frozenset({"board_limit", "reliability"})
#: The reasons that invalidate a run (unless ``allow_throttle``), and those that do not.
THROTTLE_REASONS = POWER_REASONS | THERMAL_REASONS | POLICY_REASONS
BENIGN_REASONS = frozenset(KNOWN_REASONS) - THROTTLE_REASONS

#: Each reading's NVML calls, newest first (see "Both generations of calls" above).
CLOCK_REASON_CALLS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)
PROCESS_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)
# nvml.h's nvmlReturn_t values that mean "this driver has no such call (version)".
_FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH = 13, 25

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


_VERSION_GAP_FIX = "update the NVIDIA driver, or install the nvidia-ml-py of the driver's branch"
# What to do about an NVML error, by nvmlReturn_t (pynvml's constant, nvml.h's value).
_FIXES: tuple[tuple[str, int, str], ...] = (
    ("NVML_ERROR_NOT_SUPPORTED", 3, "none here: this GPU or driver does not report it"),
    (
        "NVML_ERROR_NO_PERMISSION",
        4,
        "give the user read access to /dev/nvidia* (in a container, start it with the "
        "NVIDIA Container Toolkit)",
    ),
    (
        "NVML_ERROR_DRIVER_NOT_LOADED",
        9,
        "load the NVIDIA kernel module (`nvidia-smi` must work; reboot after installing "
        "the driver)",
    ),
    (
        "NVML_ERROR_LIBRARY_NOT_FOUND",
        12,
        "install the NVIDIA driver (it ships libnvidia-ml.so.1), or start the container "
        "with the GPU (`docker run --gpus all` with the NVIDIA Container Toolkit)",
    ),
    ("NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND, _VERSION_GAP_FIX),
    ("NVML_ERROR_ARGUMENT_VERSION_MISMATCH", _ARGUMENT_VERSION_MISMATCH, _VERSION_GAP_FIX),
    (
        "NVML_ERROR_GPU_IS_LOST",
        15,
        "the GPU fell off the bus: read the kernel log for Xid errors, reset the GPU or reboot",
    ),
    (
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        18,
        "the driver's libraries and its loaded kernel module differ: reboot after the "
        "driver update (in a container, use the host's driver libraries)",
    ),
)
_DEFAULT_FIX = "check that `nvidia-smi` works on this machine"
#: How a telemetry reason joins what was found and its fix (``split_fix`` parts them).
_FIX = ". Fix: "


def nvml_fix(error: BaseException, nvml: Any = None) -> str:
    """What to do about ``error``, an NVML failure (an ``NVMLError`` carries its
    nvmlReturn_t in ``value``; pynvml's ``NVMLLibraryMismatchError`` is a version gap)."""
    if _version_gap(error, nvml):
        return _VERSION_GAP_FIX
    value = getattr(error, "value", None)
    for name, default, fix in _FIXES:
        if value == _const(nvml, name, default):
            return fix
    return _DEFAULT_FIX


def _version_gap(error: BaseException, nvml: Any) -> bool:
    """``error`` says the driver's NVML lacks the call, or that version of its struct."""
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    if isinstance(mismatch, type) and isinstance(error, mismatch):
        return True
    value = getattr(error, "value", None)
    return value is not None and value in {
        _const(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND),
        _const(nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", _ARGUMENT_VERSION_MISMATCH),
    }


# (id of the NVML module, device index, the calls) -> (that module, the call that
# answered, or None and why none could). The module is held so its id is not reused.
_CHOSEN: dict[tuple[int, int, tuple[str, ...]], tuple[Any, str | None, str]] = {}
_CHOSEN_LOCK = threading.Lock()


def read_first(
    nvml: Any, index: int, calls: tuple[str, ...], handle: Any
) -> tuple[Any, str | None]:
    """The answer of the first of ``calls`` (newest first) that device ``index``'s NVML
    has: ``(value, None)``, or ``(None, why)`` with ``why`` ending in the fix. Never raises.

    A call this pynvml lacks, or one the driver's NVML lacks (a version gap), is passed
    over; the call that answers (or that none does) is remembered for the device, so
    later reads go straight to it. Any other error (not supported, no permission) is
    that read's answer and is not remembered.
    """
    key = (id(nvml), index, calls)
    with _CHOSEN_LOCK:
        known = _CHOSEN.get(key)
    tried = calls
    if known is not None and known[0] is nvml:
        if known[1] is None:
            return None, known[2]
        tried = (known[1],)
    gaps: list[str] = []
    for name in tried:
        call = getattr(nvml, name, None)
        if call is None:
            gaps.append(f"{name} is not in this pynvml")
            continue
        try:
            value = call(handle)
        except Exception as error:  # NVMLError_*, ctypes, a stand-in's own
            if _version_gap(error, nvml):
                gaps.append(f"{name}: {error}")
                continue
            return None, f"{name}: {error}{_FIX}{nvml_fix(error, nvml)}"
        with _CHOSEN_LOCK:
            _CHOSEN[key] = (nvml, name, "")
        return value, None
    why = (
        f"this NVML answers none of {', '.join(calls)} ({'; '.join(gaps)}){_FIX}{_VERSION_GAP_FIX}"
    )
    with _CHOSEN_LOCK:
        _CHOSEN[key] = (nvml, None, why)
    return None, why


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
        return None, f"NVML could not start: {error}{_FIX}{nvml_fix(error, nvml)}"
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
        self._reason: str | None = None
        self._started = self._stopped = False
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._series: dict[str, list[float]] = {key: [] for key in SERIES}
        self._samples = self._mask = self._mask_reads = self._reads = 0
        # The first error of each reading (a figure, "reasons", "processes"), with its fix.
        self._errors: dict[str, str] = {}
        self._processes: dict[int, float | None] = {}
        self._process_reads = self._process_tries = 0

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
            self._reason = (
                f"NVML has no GPU {self.device_index}: {error}{_FIX}{nvml_fix(error, nvml)}"
            )
            self._close()
            return self
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
        values: dict[str, float] = {}
        errors: dict[str, str] = {}
        for key, read in reads.items():
            try:
                values[key] = read()
            except Exception as error:  # NotSupported/NoPermission/GpuIsLost, ctypes
                errors[key] = f"{error}{_FIX}{nvml_fix(error, nvml)}"
        raw, why = read_first(nvml, self.device_index, CLOCK_REASON_CALLS, handle)
        mask = _try(lambda: int(raw)) if why is None else None
        if why is None and mask is None:
            why = f"clock-event reasons {raw!r} are not a bit mask{_FIX}{_DEFAULT_FIX}"
        if why is not None:
            errors["reasons"] = why
        with self._lock:
            self._samples += 1
            self._reads += len(values) + (mask is not None)
            for key, value in values.items():
                self._series[key].append(value)
            if mask is not None:
                self._mask |= mask
                self._mask_reads += 1
            for key, text in errors.items():
                self._errors.setdefault(key, text)

    def _read_processes(self) -> None:
        nvml, handle = self._nvml, self._handle
        raw, why = read_first(nvml, self.device_index, PROCESS_CALLS, handle)
        found = _try(lambda: list(raw)) if why is None else None
        own = os.getpid()
        with self._lock:
            self._process_tries += 1
            if found is None:
                self._errors.setdefault("processes", why or f"{raw!r} is not a process list")
                return
            self._process_reads += 1
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
        """The figures so far, as plain JSON data: ``available``, ``reason`` (why not,
        with the fix), ``device_index``, ``interval_s``, ``samples``, ``{min, max, mean}``
        or None per name in ``SERIES``, ``reasons_seen`` (sorted, from any sample),
        ``reasons_read`` (samples whose clock-event reasons NVML gave) and
        ``reasons_error`` (the first refusal), ``throttled: {power, thermal, policy}``,
        ``other_processes: [{pid, used_mib}]`` (at start or stop; ``used_mib`` None where
        NVML cannot tell), ``processes_available`` (every process-list read answered) and
        ``processes_error``.

        Telemetry is unavailable without NVML or the device, and also when NVML gave
        the device but refused every read.
        """
        with self._lock:
            series = {key: list(values) for key, values in self._series.items()}
            samples, mask, reads = self._samples, self._mask, self._reads
            mask_reads = self._mask_reads
            errors = dict(self._errors)
            processes = sorted(self._processes.items())
            process_reads, process_tries = self._process_reads, self._process_tries
        reasons = sorted(decode_reasons(mask, self._nvml))
        reason = None
        if self._handle is None:
            reason = self._reason or "telemetry was not started"
        elif samples and not reads:
            key = next(k for k in (*SERIES, "reasons") if k in errors)
            what, fix = split_fix(errors[key])
            reason = f"NVML refused every read of GPU {self.device_index} ({key}: {what})"
            reason += f"{_FIX}{fix}" if fix else ""
        return {
            "available": reason is None,
            "reason": reason,
            "device_index": self.device_index,
            "interval_s": self.interval_s,
            "samples": samples,
            **{key: _stats(values) for key, values in series.items()},
            "reasons_seen": reasons,
            "reasons_read": mask_reads,
            "reasons_error": errors.get("reasons"),
            "throttled": {
                "power": bool(POWER_REASONS.intersection(reasons)),
                "thermal": bool(THERMAL_REASONS.intersection(reasons)),
                "policy": bool(POLICY_REASONS.intersection(reasons)),
            },
            "other_processes": [{"pid": pid, "used_mib": mib} for pid, mib in processes],
            "processes_available": process_tries > 0 and process_reads == process_tries,
            "processes_error": errors.get("processes")
            or (reason if self._handle is None else None),
        }


def telemetry_gap(telemetry: Mapping[str, Any] | None) -> str | None:
    """What a GPU cell's telemetry (``result()``, as stored) could not see, with the
    reason and its fix, or None: the line the terminal, ``summary.md`` and the report
    show once for all cells it concerns.

    Telemetry that was off (no NVML, NVML could not start, no such GPU, every read
    refused) saw neither throttling nor other processes; clock-event reasons that no
    sample could read saw no throttling. A result from before these fields says nothing.
    """
    if not isinstance(telemetry, Mapping):
        return None
    if not telemetry.get("available"):
        reason = telemetry.get("reason") or "telemetry was not started"
        return (
            "GPU telemetry was off, so throttling and other processes on the GPU went "
            f"unchecked: {reason}"
        )
    if telemetry.get("reasons_read") == 0 and telemetry.get("samples"):
        why = telemetry.get("reasons_error") or "NVML gave no clock-event reasons"
        return f"GPU throttling could not be seen (no clock-event reasons): {why}"
    return None


def split_fix(text: str) -> tuple[str, str | None]:
    """A telemetry reason (``what. Fix: how``) as ``(what, how)``; ``how`` None without one."""
    what, sep, fix = text.partition(_FIX)
    return (what, fix) if sep else (text, None)


def unlisted_processes(telemetry: Mapping[str, Any]) -> tuple[str, str]:
    """``(what, fix)`` for a GPU whose process list NVML would not give, so that
    ``exclusive: true`` could not be checked."""
    why = telemetry.get("processes_error") or telemetry.get("reason") or "NVML gave no answer"
    what, fix = split_fix(str(why))
    index = telemetry.get("device_index", 0)
    return (
        f"the suite asks for GPU {index} alone (`gpu: {{exclusive: true}}`), but the "
        f"processes on it could not be listed: {what}",
        f"{fix + ', or ' if fix else ''}drop `exclusive` to measure without that check",
    )


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

    Invalid: a reason of ``THROTTLE_REASONS`` set during the measurement
    (unless ``allow_throttle``), or, when ``exclusive``, other processes on the GPU
    or a process list NVML would not give (at start or at stop: ``exclusive`` never
    passes unchecked). Unavailable telemetry proves nothing about throttling: the
    outputs say it was off (``telemetry_gap``), the run is not invalid for it.
    """
    problems: list[str] = []
    seen = (telemetry.get("reasons_seen") or []) if telemetry.get("available") else []
    throttles = [name for name in seen if name in THROTTLE_REASONS]
    if throttles and not allow_throttle:
        facts = [", ".join(throttles)]
        for key, text, ranged in _FIGURES:
            figure = telemetry.get(key)
            if isinstance(figure, dict):
                low, high = f"{figure['min']:.0f}", f"{figure['max']:.0f}"
                facts.append(text.format(f"{low}-{high}" if ranged and low != high else high))
        problems.append(
            f"the GPU throttled its clocks during the measurement ({'; '.join(facts)}). "
            "Let the GPU cool / check the power limit (`nvidia-smi -q -d PERFORMANCE` names "
            "the active limit), lock clocks with `nvidia-smi -lgc`, "
            "or set `gpu: {allow_throttle: true}`"
        )
    if exclusive and not telemetry.get("processes_available"):
        what, fix = unlisted_processes(telemetry)
        problems.append(f"{what}{_FIX}{fix}")
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
