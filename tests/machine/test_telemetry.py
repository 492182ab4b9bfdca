"""NVML telemetry against a scripted stand-in for pynvml (no GPU, no timing assertions).

The stand-in is checked against the real module (``nvidia-ml-py``, a test dependency):
it raises pynvml's own exception classes, copies pynvml's constants, and offers no
name pynvml lacks (``test_the_fakes_offer_only_what_pynvml_has``). What needs no GPU
(NVML without a driver) is tested against the real module itself.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

import pynvml as real
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfguard.machine import telemetry
from perfguard.machine.telemetry import (
    BENIGN_REASONS,
    CLOCK_REASON_CALLS,
    INSTALL_HINT,
    KNOWN_REASONS,
    POLICY_REASONS,
    POWER_REASONS,
    PROCESS_CALLS,
    THERMAL_REASONS,
    THROTTLE_REASONS,
    TelemetrySampler,
    decode_reasons,
    invalid_reason,
    load_nvml,
    static_info,
)

NOT_SUPPORTED, NO_PERMISSION = real.NVML_ERROR_NOT_SUPPORTED, real.NVML_ERROR_NO_PERMISSION
DRIVER_NOT_LOADED, FUNCTION_NOT_FOUND = (
    real.NVML_ERROR_DRIVER_NOT_LOADED,
    real.NVML_ERROR_FUNCTION_NOT_FOUND,
)
GPU_IS_LOST, INVALID_ARGUMENT = real.NVML_ERROR_GPU_IS_LOST, real.NVML_ERROR_INVALID_ARGUMENT
# nvml.h's bit values (pynvml's constants are checked against them below).
BITS = {
    "GpuIdle": 0x1,
    "ApplicationsClocksSetting": 0x2,
    "SwPowerCap": 0x4,
    "HwSlowdown": 0x8,
    "SyncBoost": 0x10,
    "SwThermalSlowdown": 0x20,
    "HwThermalSlowdown": 0x40,
    "HwPowerBrakeSlowdown": 0x80,
    "DisplayClockSetting": 0x100,
    "BoardLimit": 0x200,
    "Reliability": 0x400,
}
SHORT = dict(zip(BITS, KNOWN_REASONS, strict=True))
SW_POWER_CAP, HW_SLOWDOWN, SW_THERMAL, GPU_IDLE = 0x4, 0x8, 0x20, 0x1
OTHER_PID = os.getpid() + 100_000
MIB = 1024 * 1024
EVENT_CALL, THROTTLE_CALL = CLOCK_REASON_CALLS
V3, V2, UNVERSIONED = PROCESS_CALLS
#: What a pynvml from before NVML's rename (and before the _v3 process call) lacks.
OLD_PYNVML = frozenset(
    {EVENT_CALL, V3, *(n for n in dir(real) if n.startswith("nvmlClocksEventReason"))}
)


def nvml_error(code: int) -> Exception:
    """What pynvml raises for an nvmlReturn_t: its own NVMLError_* subclass."""
    error: Exception = real.NVMLError(code)
    return error


class FakeNvml:
    """The slice of pynvml that perfguard.machine.telemetry calls, with scripted answers.

    ``script[name]`` lists the answers of successive calls (the last repeats); an
    exception in it is raised. ``counts`` counts calls by script name, ``calls`` lists
    the NVML functions called; ``on_call`` is invoked after each answer (the tests use
    it to wake on the n-th read). ``pynvml_lacks``: names this "pynvml" does not have
    (an older nvidia-ml-py); ``driver_lacks``: functions the driver's NVML does not
    have, which raise as pynvml does then (``NVMLError_FunctionNotFound``, and
    ``NVMLLibraryMismatchError`` from the unversioned process call over a missing _v3).
    """

    NVMLError = real.NVMLError
    NVMLLibraryMismatchError = real.NVMLLibraryMismatchError

    def __init__(
        self,
        *,
        pynvml_lacks: Iterable[str] = (),
        driver_lacks: Iterable[str] = (),
        **script: Any,
    ) -> None:
        self.pynvml_lacks = frozenset(pynvml_lacks)
        self.driver_lacks = frozenset(driver_lacks)
        self.script: dict[str, list[Any]] = {
            "reasons": [0],
            "sm": [1980],
            "mem": [2619],
            "temperature": [45],
            "power_mw": [300_000],
            "memory_used": [1024 * MIB],
            "processes": [[]],
        }
        self.script.update(script)
        self.counts: dict[str, int] = {}
        self.calls: list[str] = []
        self.on_call: Callable[[str, int], None] = lambda name, count: None
        self.lock = threading.Lock()

    def __getattribute__(self, name: str) -> Any:
        if name in object.__getattribute__(self, "pynvml_lacks"):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return object.__getattribute__(self, name)

    def _driver(self, function: str) -> None:
        """Note the call; raise as pynvml does when the driver's NVML lacks ``function``."""
        with self.lock:
            self.calls.append(function)
        if function in self.driver_lacks:
            raise nvml_error(FUNCTION_NOT_FOUND)

    def _answer(self, name: str) -> Any:
        with self.lock:
            count = self.counts.get(name, 0)
            self.counts[name] = count + 1
        answers = self.script[name]
        answer = answers[min(count, len(answers) - 1)]
        self.on_call(name, count + 1)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def nvmlInit(self) -> None:
        if "init" in self.script:
            self._answer("init")

    def nvmlShutdown(self) -> None:
        with self.lock:
            self.counts["shutdown"] = self.counts.get("shutdown", 0) + 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        if "handle" in self.script:
            self._answer("handle")
        return ("gpu", index)

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        return int(self._answer("sm" if type == self.NVML_CLOCK_SM else "mem"))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return int(self._answer("temperature"))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return int(self._answer("power_mw"))

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        used = self._answer("memory_used")
        return types.SimpleNamespace(total=80 * 1024 * MIB, used=used, free=0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        self._driver(EVENT_CALL)
        return int(self._answer("reasons"))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        self._driver(THROTTLE_CALL)
        return int(self._answer("reasons"))

    def _processes(self, function: str) -> list[Any]:
        self._driver(function)
        found = self._answer("processes")
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in found]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[Any]:
        return self._processes(V3)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return self._processes(V2)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        # pynvml's unversioned call is _v3 behind @throwOnVersionMismatch.
        try:
            return self._processes(V3)
        except real.NVMLError_FunctionNotFound:
            raise real.NVMLLibraryMismatchError("Unversioned function called ...") from None


# pynvml's own constants: clock domains, sensors, features, error codes, reason bits.
for _name in dir(real):
    if _name.startswith(
        ("NVML_CLOCK_", "NVML_TEMPERATURE_", "NVML_FEATURE_", "NVML_ERROR_", "nvmlClocks")
    ):
        setattr(FakeNvml, _name, getattr(real, _name))


class StaticNvml(FakeNvml):
    """Adds the fixed facts ``static_info`` reads; each entry may be an exception."""

    def __init__(self, **facts: Any) -> None:
        super().__init__()
        self.facts = {
            "name": b"NVIDIA H100 80GB HBM3",
            "driver": "550.54.15",
            "cuda": 12040,
            "power_limit_mw": 700_000,
            "persistence": 1,
            "app_sm": 1755,
            "app_mem": 2619,
            "max_sm": 1980,
            "max_mem": 2619,
        }
        self.facts.update(facts)

    def _fact(self, key: str) -> Any:
        value = self.facts[key]
        if isinstance(value, BaseException):
            raise value
        return value

    def nvmlDeviceGetName(self, handle: Any) -> Any:
        return self._fact("name")

    def nvmlSystemGetDriverVersion(self) -> Any:
        return self._fact("driver")

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return int(self._fact("cuda"))

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return int(self._fact("power_limit_mw"))

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        return int(self._fact("persistence"))

    def nvmlDeviceGetApplicationsClock(self, handle: Any, clock: int) -> int:
        return int(self._fact("app_sm" if clock == self.NVML_CLOCK_SM else "app_mem"))

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: int) -> int:
        return int(self._fact("max_sm" if clock == self.NVML_CLOCK_SM else "max_mem"))


def install(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    """Make ``import pynvml`` return ``module`` (None: raise ImportError)."""
    monkeypatch.setitem(sys.modules, "pynvml", module)


# --- the fakes and the code against the real pynvml ------------------------

#: The fakes' own plumbing, not pynvml's.
PLUMBING = {"script", "counts", "calls", "on_call", "lock", "pynvml_lacks", "driver_lacks", "facts"}


def _public(cls: type) -> list[str]:
    return [n for n in dir(cls) if not n.startswith("_") and n not in PLUMBING]


@pytest.mark.parametrize("fake", ["FakeNvml", "StaticNvml"])
def test_the_fakes_offer_only_what_pynvml_has(fake: str) -> None:
    cls = globals()[fake]
    for name in _public(cls):
        assert hasattr(real, name), f"{fake}.{name} is not in pynvml {real.__name__}"
        ours, theirs = getattr(cls, name), getattr(real, name)
        if isinstance(theirs, type | int):
            assert ours is theirs or ours == theirs, name
        elif callable(theirs):
            # A call the fake answers must be one pynvml answers: same required arguments.
            mine = list(inspect.signature(ours).parameters)[1:]  # without self
            inspect.signature(theirs).bind(*mine)  # raises TypeError on a mismatch


def test_every_nvml_name_perfguard_uses_is_in_pynvml() -> None:
    import re

    from perfguard.machine import env, placement

    names: set[str] = set()
    for module in (telemetry, env, placement):
        source = inspect.getsource(module)
        names |= set(re.findall(r"\b(nvml[A-Z]\w*|NVML_[A-Z_]+[A-Z]|NVMLError_\w+)\b", source))
    # Prefixes of names made from a table (checked below), and nvml.h's type in prose.
    names -= {"nvmlClocksEventReason", "nvmlClocksThrottleReason", "nvmlReturn_t"}
    assert {"nvmlDeviceGetCurrentClocksEventReasons", "NVML_ERROR_NO_PERMISSION"} <= names
    missing = sorted(n for n in names if not hasattr(real, n))
    assert not missing, f"not in nvidia-ml-py: {missing}"
    for name, value, _ in telemetry._FIXES:
        assert getattr(real, name) == value, name
    assert real.NVML_ERROR_FUNCTION_NOT_FOUND == telemetry._FUNCTION_NOT_FOUND
    assert real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH == telemetry._ARGUMENT_VERSION_MISMATCH


def test_the_reason_bits_are_pynvmls() -> None:
    for short, suffix, value in telemetry._REASONS:
        assert getattr(real, f"nvmlClocksThrottleReason{suffix}") == value, short
        event = getattr(real, f"nvmlClocksEventReason{suffix}", value)
        assert event == value, short
    assert decode_reasons(real.nvmlClocksThrottleReasonAll, real) == list(KNOWN_REASONS)


# --- loading ---------------------------------------------------------------


def test_load_nvml_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, None)
    assert load_nvml() == (None, INSTALL_HINT)
    assert "pip install 'perfguard[gpu]'" in INSTALL_HINT


def test_load_nvml_initialises(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(init=[None])
    install(monkeypatch, fake)
    assert load_nvml() == (fake, None)
    assert fake.counts["init"] == 1


def test_load_nvml_init_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(init=[nvml_error(DRIVER_NOT_LOADED)]))
    nvml, reason = load_nvml()
    assert nvml is None
    assert reason == (
        "NVML could not start: Driver Not Loaded. Fix: load the NVIDIA kernel module "
        "(`nvidia-smi` must work; reboot after installing the driver)"
    )


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        (real.NVML_ERROR_LIBRARY_NOT_FOUND, "install the NVIDIA driver (it ships libnvidia-ml"),
        (real.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "reboot after the driver update"),
        (GPU_IS_LOST, "Xid errors"),
        (NO_PERMISSION, "read access to /dev/nvidia*"),
        (real.NVML_ERROR_UNKNOWN, "check that `nvidia-smi` works"),
    ],
)
def test_load_nvml_says_what_failed_and_the_fix_for_it(
    monkeypatch: pytest.MonkeyPatch, code: int, fix: str
) -> None:
    install(monkeypatch, FakeNvml(init=[nvml_error(code)]))
    _, reason = load_nvml()
    assert reason is not None
    assert reason.startswith(f"NVML could not start: {nvml_error(code)}. Fix: ")
    assert fix in reason


def test_load_nvml_init_failure_that_is_not_an_nvml_error(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(init=[OSError("libnvidia-ml.so.1: cannot open")]))
    nvml, reason = load_nvml()
    assert nvml is None and reason is not None
    assert reason.startswith("NVML could not start: libnvidia-ml.so.1")


def _real_nvml_error() -> Exception:
    """What the real pynvml's nvmlInit raises on this machine (skip where it starts)."""
    try:
        real.nvmlInit()
    except real.NVMLError as error:
        found: Exception = error
        return found
    real.nvmlShutdown()
    pytest.skip("NVML starts on this machine: the no-driver path needs a machine without one")


def test_the_real_pynvml_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    # No fake: the real module on a machine without the NVIDIA driver (CI, laptops).
    error = _real_nvml_error()
    install(monkeypatch, real)
    nvml, reason = load_nvml()
    assert nvml is None
    assert reason == f"NVML could not start: {error}. Fix: {telemetry.nvml_fix(error, real)}"
    if isinstance(error, real.NVMLError_LibraryNotFound):  # no libnvidia-ml.so.1 at all
        assert reason.startswith("NVML could not start: NVML Shared Library Not Found. Fix: ")
        assert "install the NVIDIA driver" in reason
    with TelemetrySampler(0, interval_s=0.001) as sampler:
        pass
    result = sampler.result()
    assert result["available"] is False and result["reason"] == reason
    assert result["processes_available"] is False and result["processes_error"] == reason


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (None, INSTALL_HINT),
        (FakeNvml(init=[nvml_error(DRIVER_NOT_LOADED)]), "NVML could not start: Driver"),
        (FakeNvml(init=[nvml_error(NO_PERMISSION)]), "NVML could not start: Insufficient"),
    ],
    ids=["not-installed", "init-failure", "no-permission"],
)
def test_sampler_without_nvml_is_unavailable_and_measures_on(
    monkeypatch: pytest.MonkeyPatch, module: Any, expected: str
) -> None:
    install(monkeypatch, module)
    with TelemetrySampler(0, interval_s=0.001) as sampler:
        sampler.sample_once()  # a no-op, never an error
    result = sampler.result()
    assert result["available"] is False
    assert result["reason"].startswith(expected)
    assert result["samples"] == 0
    for key in ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "memory_used_mib"):
        assert result[key] is None
    assert result["reasons_seen"] == [] and result["other_processes"] == []
    assert result["throttled"] == {"power": False, "thermal": False, "policy": False}
    assert invalid_reason(result, allow_throttle=False, exclusive=False) is None
    # `exclusive` cannot pass unchecked without NVML.
    message = invalid_reason(result, allow_throttle=False, exclusive=True)
    assert message is not None and "processes on it could not be listed" in message
    assert static_info(0) == {}


def test_sampler_without_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(handle=[nvml_error(2)])
    install(monkeypatch, fake)
    with TelemetrySampler(3) as sampler:
        pass
    result = sampler.result()
    assert result["available"] is False
    assert result["reason"].startswith("NVML has no GPU 3")
    assert fake.counts["shutdown"] == 1  # what it loaded, it shut down


def test_sampler_shuts_down_only_what_it_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = FakeNvml()
    install(monkeypatch, loaded)
    with TelemetrySampler(0, background=False):
        pass
    assert loaded.counts["shutdown"] == 1
    given_nvml = FakeNvml()
    with TelemetrySampler(0, nvml=given_nvml, background=False):
        pass
    assert "shutdown" not in given_nvml.counts


# --- static info -----------------------------------------------------------


def test_static_info() -> None:
    assert static_info(0, StaticNvml()) == {
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_driver": "550.54.15",
        "cuda_driver": "12.4",
        "gpu_power_limit_w": "700",
        "gpu_persistence_mode": "on",
        "gpu_app_clock_sm_mhz": "1755",
        "gpu_app_clock_mem_mhz": "2619",
        "gpu_max_clock_sm_mhz": "1980",
        "gpu_max_clock_mem_mhz": "2619",
    }


def test_static_info_leaves_out_refused_fields() -> None:
    nvml = StaticNvml(
        power_limit_mw=nvml_error(NOT_SUPPORTED),
        persistence=nvml_error(NO_PERMISSION),
        app_sm=nvml_error(NOT_SUPPORTED),
        app_mem=nvml_error(NOT_SUPPORTED),
        cuda=12080,
    )
    info = static_info(0, nvml)
    assert info == {
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_driver": "550.54.15",
        "cuda_driver": "12.8",
        "gpu_max_clock_sm_mhz": "1980",
        "gpu_max_clock_mem_mhz": "2619",
    }
    assert all(isinstance(v, str) for v in info.values())


def test_static_info_formats() -> None:
    info = static_info(0, StaticNvml(persistence=0, power_limit_mw=262_500, cuda=11080))
    assert info["gpu_persistence_mode"] == "off"
    assert info["gpu_power_limit_w"] == "262.5"
    assert info["cuda_driver"] == "11.8"


def test_static_info_falls_back_to_the_older_cuda_call() -> None:
    class Older(StaticNvml):
        nvmlSystemGetCudaDriverVersion_v2 = None  # type: ignore[assignment]

        def nvmlSystemGetCudaDriverVersion(self) -> int:
            return 12020

    assert static_info(0, Older())["cuda_driver"] == "12.2"


def test_static_info_loads_and_shuts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = StaticNvml()
    install(monkeypatch, nvml)
    assert static_info(0)["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert nvml.counts["shutdown"] == 1


def test_static_info_without_the_device() -> None:
    assert static_info(7, FakeNvml(handle=[nvml_error(2)])) == {}


# --- reasons ---------------------------------------------------------------


@pytest.mark.parametrize("suffix", list(BITS))
def test_decode_each_known_bit(suffix: str) -> None:
    for nvml in (None, FakeNvml(), FakeNvml(pynvml_lacks=OLD_PYNVML)):
        assert decode_reasons(BITS[suffix], nvml) == [SHORT[suffix]]


def test_decode_reason_names() -> None:
    assert KNOWN_REASONS == (
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "display_clock_setting",
        "board_limit",
        "reliability",
    )
    assert decode_reasons(0) == []
    assert decode_reasons(SW_POWER_CAP | GPU_IDLE) == ["gpu_idle", "sw_power_cap"]


def test_decode_unknown_bits() -> None:
    assert decode_reasons(0x800) == ["unknown_0x800"]
    assert decode_reasons(0x8000000000000000 | 0x1000 | SW_THERMAL) == [
        "sw_thermal_slowdown",
        "unknown_0x1000",
        "unknown_0x8000000000000000",
    ]


def test_the_bits_new_in_nvidia_ml_py_13_are_named() -> None:
    # 0x200 and 0x400 have only the old generation of names in pynvml 13.
    assert not hasattr(real, "nvmlClocksEventReasonBoardLimit")
    assert decode_reasons(0x200 | 0x400, real) == ["board_limit", "reliability"]
    assert decode_reasons(0x200 | 0x400) == ["board_limit", "reliability"]


def test_decode_uses_the_modules_constants() -> None:
    # Whatever value the module gives a reason wins over nvml.h's.
    nvml = types.SimpleNamespace(nvmlClocksThrottleReasonSwPowerCap=0x1000)
    assert decode_reasons(0x1000, nvml) == ["sw_power_cap"]
    assert decode_reasons(0x4, nvml) == ["unknown_0x4"]


def test_power_thermal_and_policy_sets() -> None:
    assert {"sw_power_cap", "hw_power_brake_slowdown"} <= POWER_REASONS
    assert {"sw_thermal_slowdown", "hw_thermal_slowdown"} <= THERMAL_REASONS
    assert {"board_limit", "reliability"} == POLICY_REASONS
    # NVML sets hw_slowdown for thermal, power-brake and fast-trigger events alike.
    assert "hw_slowdown" in POWER_REASONS & THERMAL_REASONS
    benign = {"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"}
    assert benign == BENIGN_REASONS
    assert POWER_REASONS | THERMAL_REASONS | POLICY_REASONS == THROTTLE_REASONS
    assert not BENIGN_REASONS & THROTTLE_REASONS
    assert set(KNOWN_REASONS) == BENIGN_REASONS | THROTTLE_REASONS


@given(st.sets(st.sampled_from(list(BITS))), st.integers(min_value=len(BITS), max_value=63))
def test_decode_any_subset_of_known_bits(subset: set[str], unknown_shift: int) -> None:
    mask = 0
    for suffix in subset:
        mask |= BITS[suffix]
    names = [SHORT[suffix] for suffix in BITS if suffix in subset]
    assert decode_reasons(mask) == names
    assert decode_reasons(mask, FakeNvml(pynvml_lacks=OLD_PYNVML)) == names
    unknown = 1 << unknown_shift
    assert decode_reasons(mask | unknown) == [*names, f"unknown_{unknown:#x}"]


# --- sampler ---------------------------------------------------------------


def scripted(**script: Any) -> TelemetrySampler:
    return TelemetrySampler(0, nvml=FakeNvml(**script), background=False)


def test_sampler_statistics_from_scripted_values() -> None:
    sampler = scripted(
        sm=[1000, 1500, 2000, 1200],
        mem=[2619],
        temperature=[50, 60, 70, 80],
        power_mw=[100_000, 200_000, 300_000, 400_000],
        memory_used=[512 * MIB, 1024 * MIB, 1536 * MIB, 2048 * MIB],
    )
    sampler.start()  # first sample
    sampler.sample_once()
    sampler.sample_once()
    sampler.stop()  # last sample
    result = sampler.result()
    assert result["available"] is True and result["reason"] is None
    assert result["device_index"] == 0
    assert result["samples"] == 4
    assert result["sm_clock_mhz"] == {"min": 1000.0, "max": 2000.0, "mean": 1425.0}
    assert result["mem_clock_mhz"] == {"min": 2619.0, "max": 2619.0, "mean": 2619.0}
    assert result["temperature_c"] == {"min": 50.0, "max": 80.0, "mean": 65.0}
    assert result["power_w"] == {"min": 100.0, "max": 400.0, "mean": 250.0}
    assert result["memory_used_mib"] == {"min": 512.0, "max": 2048.0, "mean": 1280.0}
    assert result["reasons_seen"] == []
    assert result["throttled"] == {"power": False, "thermal": False, "policy": False}


def test_sampler_result_is_plain_json() -> None:
    import json

    sampler = scripted(reasons=[SW_POWER_CAP], processes=[[(OTHER_PID, 5 * MIB)]])
    with sampler:
        pass
    result = sampler.result()
    assert json.loads(json.dumps(result)) == result


def test_throttle_only_mid_run_is_caught() -> None:
    sampler = scripted(reasons=[0, GPU_IDLE, SW_POWER_CAP | HW_SLOWDOWN, 0, 0])
    sampler.start()
    for _ in range(3):
        sampler.sample_once()
    sampler.stop()
    result = sampler.result()
    assert result["samples"] == 5
    assert result["reasons_seen"] == ["gpu_idle", "hw_slowdown", "sw_power_cap"]
    assert result["throttled"] == {"power": True, "thermal": True, "policy": False}


def test_older_throttle_reason_function_is_used() -> None:
    sampler = TelemetrySampler(
        0, nvml=FakeNvml(pynvml_lacks=OLD_PYNVML, reasons=[SW_THERMAL]), background=False
    )
    with sampler:
        pass
    assert sampler.result()["reasons_seen"] == ["sw_thermal_slowdown"]
    assert sampler.result()["throttled"] == {"power": False, "thermal": True, "policy": False}


def test_errors_in_reads_mark_fields_unavailable() -> None:
    refused = nvml_error(NOT_SUPPORTED)
    sampler = scripted(
        temperature=[refused],
        power_mw=[refused, 250_000, RuntimeError("ctypes said no")],
        reasons=[nvml_error(NO_PERMISSION), SW_THERMAL, ValueError("bad")],
        processes=[refused],
    )
    with sampler:
        sampler.sample_once()
    result = sampler.result()
    assert result["available"] is True
    assert result["samples"] == 3
    assert result["temperature_c"] is None
    assert result["power_w"] == {"min": 250.0, "max": 250.0, "mean": 250.0}
    assert result["sm_clock_mhz"] is not None
    assert result["reasons_seen"] == ["sw_thermal_slowdown"]
    assert result["other_processes"] == [] and result["processes_available"] is False


def test_errors_in_the_background_thread_do_not_propagate() -> None:
    # An exception escaping the thread would fail this test through pytest's
    # threadexception warning (warnings are errors here).
    wake = threading.Event()
    nvml = FakeNvml(sm=[1500, nvml_error(15), RuntimeError("gone")], temperature=[KeyError("x")])

    def on_call(name: str, count: int) -> None:
        if name == "sm" and count >= 6:
            wake.set()

    nvml.on_call = on_call
    with TelemetrySampler(0, nvml=nvml, interval_s=0.001) as sampler:
        assert wake.wait(30)
    result = sampler.result()
    assert result["samples"] >= 6
    assert result["sm_clock_mhz"] == {"min": 1500.0, "max": 1500.0, "mean": 1500.0}
    assert result["temperature_c"] is None


def test_background_thread_catches_a_mid_run_throttle_and_stop_joins() -> None:
    wake = threading.Event()
    nvml = FakeNvml(reasons=[0, 0, 0, SW_POWER_CAP, 0])

    def on_call(name: str, count: int) -> None:
        if name == "reasons" and count >= 5:
            wake.set()

    nvml.on_call = on_call
    sampler = TelemetrySampler(0, nvml=nvml, interval_s=0.001)
    sampler.start()
    thread = sampler._thread
    assert thread is not None and thread.daemon
    assert wake.wait(30)
    sampler.stop()
    assert not thread.is_alive()
    result = sampler.result()
    assert result["samples"] >= 5
    assert result["reasons_seen"] == ["sw_power_cap"]
    assert result["throttled"]["power"] is True
    sampler.stop()  # idempotent


def test_short_measurement_has_two_samples() -> None:
    # interval far longer than the measurement: start and stop still sample, and
    # stop wakes the thread instead of waiting out the interval.
    with TelemetrySampler(0, nvml=FakeNvml(), interval_s=3600) as sampler:
        pass
    assert sampler._thread is not None and not sampler._thread.is_alive()
    assert sampler.result()["samples"] == 2


def test_other_processes_exclude_this_one() -> None:
    own = os.getpid()
    sampler = scripted(
        processes=[
            [(own, 900 * MIB), (OTHER_PID, 256 * MIB)],
            [(own, 900 * MIB), (OTHER_PID, 512 * MIB), (OTHER_PID + 1, None)],
        ]
    )
    with sampler:
        pass
    result = sampler.result()
    assert result["processes_available"] is True
    assert result["other_processes"] == [
        {"pid": OTHER_PID, "used_mib": 512.0},
        {"pid": OTHER_PID + 1, "used_mib": None},
    ]


def test_sampler_rejects_a_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        TelemetrySampler(0, interval_s=0)


def test_result_before_start() -> None:
    result = TelemetrySampler(1).result()
    assert result["available"] is False and result["reason"]
    assert result["device_index"] == 1 and result["samples"] == 0


# --- older drivers: the calls fall back, and what cannot be read is said ----


def test_a_driver_without_the_event_reasons_call_falls_back_once_per_device() -> None:
    # pynvml 12+ offers nvmlDeviceGetCurrentClocksEventReasons; a driver before the rename
    # raises FunctionNotFound for it. The old throttle-reasons call must be read instead.
    nvml = FakeNvml(driver_lacks={EVENT_CALL}, reasons=[0, SW_THERMAL, 0])
    sampler = TelemetrySampler(0, nvml=nvml, background=False)
    with sampler:
        sampler.sample_once()
    result = sampler.result()
    assert result["reasons_seen"] == ["sw_thermal_slowdown"]
    assert result["reasons_read"] == 3 and result["reasons_error"] is None
    assert result["throttled"]["thermal"] is True
    assert invalid_reason(result, allow_throttle=False, exclusive=False) is not None
    reason_calls = [c for c in nvml.calls if c in CLOCK_REASON_CALLS]
    assert reason_calls == [EVENT_CALL, THROTTLE_CALL, THROTTLE_CALL, THROTTLE_CALL]
    with TelemetrySampler(0, nvml=nvml, background=False):  # remembered for GPU 0
        pass
    assert nvml.calls.count(EVENT_CALL) == 1
    with TelemetrySampler(1, nvml=nvml, background=False):  # another GPU is asked anew
        pass
    assert nvml.calls.count(EVENT_CALL) == 2


def test_no_clock_reason_call_at_all_is_said_with_the_fix() -> None:
    nvml = FakeNvml(driver_lacks=set(CLOCK_REASON_CALLS), reasons=[SW_POWER_CAP])
    with TelemetrySampler(0, nvml=nvml, background=False) as sampler:
        pass
    result = sampler.result()
    assert result["available"] is True and result["reasons_read"] == 0
    assert result["reasons_error"] == (
        f"this NVML answers none of {EVENT_CALL}, {THROTTLE_CALL} "
        f"({EVENT_CALL}: Function Not Found; {THROTTLE_CALL}: Function Not Found). "
        "Fix: update the NVIDIA driver, or install the nvidia-ml-py of the driver's branch"
    )


def test_a_refused_clock_reason_read_is_not_a_version_gap() -> None:
    nvml = FakeNvml(reasons=[nvml_error(NOT_SUPPORTED), SW_POWER_CAP])
    with TelemetrySampler(0, nvml=nvml, background=False) as sampler:
        pass
    result = sampler.result()
    # The refusal is that read's answer (the old call asks the same driver); the next
    # read still uses the newer call, and sees the throttle.
    assert THROTTLE_CALL not in nvml.calls
    assert result["reasons_seen"] == ["sw_power_cap"] and result["reasons_read"] == 1
    assert result["reasons_error"] == (
        f"{EVENT_CALL}: Not Supported. Fix: none here: this GPU or driver does not report it"
    )


@pytest.mark.parametrize(
    ("pynvml_lacks", "driver_lacks", "used"),
    [
        ((), (), [V3]),
        ((), {V3}, [V3, V2]),  # a driver older than _v3 (pynvml's unversioned call raises)
        ({V3}, (), [V2]),  # an older pynvml
        ({V3, V2}, (), [V3]),  # a pynvml with only the unversioned call (it calls _v3)
    ],
    ids=["v3", "driver-without-v3", "pynvml-without-v3", "unversioned-only"],
)
def test_the_process_list_falls_back_to_the_calls_this_nvml_has(
    pynvml_lacks: set[str], driver_lacks: set[str], used: list[str]
) -> None:
    nvml = FakeNvml(
        pynvml_lacks=pynvml_lacks, driver_lacks=driver_lacks, processes=[[(OTHER_PID, 64 * MIB)]]
    )
    with TelemetrySampler(0, nvml=nvml, background=False) as sampler:
        pass
    result = sampler.result()
    assert result["processes_available"] is True and result["processes_error"] is None
    assert result["other_processes"] == [{"pid": OTHER_PID, "used_mib": 64.0}]
    process_calls = [c for c in nvml.calls if c in PROCESS_CALLS]
    assert process_calls == [*used, used[-1]]  # at start (finding it) and at stop
    assert invalid_reason(result, allow_throttle=False, exclusive=True) is not None


def test_a_process_list_no_call_gives_is_unavailable_with_the_fix() -> None:
    nvml = FakeNvml(driver_lacks={V3, V2}, processes=[[(OTHER_PID, 64 * MIB)]])
    with TelemetrySampler(0, nvml=nvml, background=False) as sampler:
        pass
    result = sampler.result()
    assert result["processes_available"] is False and result["other_processes"] == []
    error = result["processes_error"]
    assert error.startswith(f"this NVML answers none of {V3}, {V2}, {UNVERSIONED} (")
    assert "Unversioned function called" in error and "update the NVIDIA driver" in error


def test_every_read_refused_is_telemetry_unavailable() -> None:
    refused = nvml_error(NOT_SUPPORTED)
    nvml = FakeNvml(
        sm=[refused], mem=[refused], temperature=[refused], power_mw=[refused],
        memory_used=[refused], reasons=[refused],
    )  # fmt: skip
    with TelemetrySampler(0, nvml=nvml, background=False) as sampler:
        pass
    result = sampler.result()
    assert result["available"] is False and result["samples"] == 2
    assert result["reason"] == (
        "NVML refused every read of GPU 0 (sm_clock_mhz: Not Supported). "
        "Fix: none here: this GPU or driver does not report it"
    )


# --- invalid_reason --------------------------------------------------------


def run(
    reasons: Iterable[int] = (0,),
    processes: Iterable[list[tuple[int, int | None]] | Exception] = ([],),
) -> dict[str, Any]:
    sampler = scripted(
        reasons=list(reasons),
        processes=list(processes),
        sm=[1980, 1410],
        temperature=[71, 88],
        power_mw=[650_000, 699_400],
    )
    with sampler:
        pass
    return sampler.result()


def test_power_throttle_invalidates() -> None:
    message = invalid_reason(run([0, SW_POWER_CAP]), allow_throttle=False, exclusive=False)
    assert message is not None
    assert "sw_power_cap" in message
    assert "SM clock 1410-1980 MHz" in message
    assert "max temperature 88 C" in message and "max power 699 W" in message
    assert "nvidia-smi -lgc" in message and "gpu: {allow_throttle: true}" in message


def test_thermal_throttle_invalidates() -> None:
    message = invalid_reason(run([SW_THERMAL | 0x40]), allow_throttle=False, exclusive=False)
    assert message is not None
    assert "sw_thermal_slowdown, hw_thermal_slowdown" not in message  # sorted names
    assert "hw_thermal_slowdown, sw_thermal_slowdown" in message
    assert "cool" in message


@pytest.mark.parametrize(("bit", "name"), [(0x200, "board_limit"), (0x400, "reliability")])
def test_the_board_limit_and_reliability_policies_invalidate(bit: int, name: str) -> None:
    result = run([0, bit])
    assert result["reasons_seen"] == [name]
    assert result["throttled"] == {"power": False, "thermal": False, "policy": True}
    message = invalid_reason(result, allow_throttle=False, exclusive=False)
    assert message is not None and name in message and "nvidia-smi -q -d PERFORMANCE" in message
    assert invalid_reason(result, allow_throttle=True, exclusive=False) is None


def test_idle_and_clock_settings_are_valid() -> None:
    benign = GPU_IDLE | 0x2 | 0x10 | 0x100
    assert invalid_reason(run([benign]), allow_throttle=False, exclusive=False) is None


def test_allow_throttle() -> None:
    result = run([SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL])
    assert result["throttled"] == {"power": True, "thermal": True, "policy": False}
    assert invalid_reason(result, allow_throttle=True, exclusive=False) is None
    assert invalid_reason(result, allow_throttle=False, exclusive=False) is not None


def test_exclusive_with_other_processes() -> None:
    own = os.getpid()
    result = run(processes=[[(own, 900 * MIB), (OTHER_PID, 300 * MIB), (OTHER_PID + 1, None)]])
    assert invalid_reason(result, allow_throttle=False, exclusive=False) is None
    message = invalid_reason(result, allow_throttle=False, exclusive=True)
    assert message is not None
    assert f"pid {OTHER_PID} (300 MiB)" in message
    assert f"pid {OTHER_PID + 1} (memory unknown)" in message
    assert f"pid {own} " not in message
    assert "drop `exclusive`" in message


def test_exclusive_with_a_process_list_lost_at_the_end_is_invalid() -> None:
    # Read at start, refused at stop: the measurement's end went unchecked.
    result = run(processes=[[], nvml_error(NO_PERMISSION)])
    assert result["processes_available"] is False and result["other_processes"] == []
    assert invalid_reason(result, allow_throttle=False, exclusive=False) is None
    message = invalid_reason(result, allow_throttle=False, exclusive=True)
    assert message == (
        "the suite asks for GPU 0 alone (`gpu: {exclusive: true}`), but the processes on "
        f"it could not be listed: {V3}: Insufficient Permissions. Fix: give the user read "
        "access to /dev/nvidia* (in a container, start it with the NVIDIA Container "
        "Toolkit), or drop `exclusive` to measure without that check"
    )


def test_exclusive_alone_on_the_gpu() -> None:
    result = run(processes=[[(os.getpid(), 900 * MIB)]])
    assert result["other_processes"] == []
    assert invalid_reason(result, allow_throttle=False, exclusive=True) is None


def test_both_problems_in_one_message() -> None:
    result = run([HW_SLOWDOWN], processes=[[(OTHER_PID, 64 * MIB)]])
    message = invalid_reason(result, allow_throttle=False, exclusive=True)
    assert message is not None
    assert "hw_slowdown" in message and f"pid {OTHER_PID}" in message


def test_invalid_reason_tolerates_missing_figures() -> None:
    result = run([SW_POWER_CAP])
    for key in ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w"):
        result[key] = None
    message = invalid_reason(result, allow_throttle=False, exclusive=False)
    assert message is not None and "sw_power_cap" in message
