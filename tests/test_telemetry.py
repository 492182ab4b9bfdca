"""NVML telemetry against a scripted stand-in for pynvml (no GPU, no timing assertions)."""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfguard.machine.telemetry import (
    INSTALL_HINT,
    KNOWN_REASONS,
    POWER_REASONS,
    THERMAL_REASONS,
    TelemetrySampler,
    decode_reasons,
    invalid_reason,
    load_nvml,
    static_info,
)

# nvml.h's values.
NOT_SUPPORTED, NO_PERMISSION, DRIVER_NOT_LOADED = 3, 4, 9
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
}
SHORT = dict(zip(BITS, KNOWN_REASONS, strict=True))
SW_POWER_CAP, HW_SLOWDOWN, SW_THERMAL, GPU_IDLE = 0x4, 0x8, 0x20, 0x1
OTHER_PID = os.getpid() + 100_000
MIB = 1024 * 1024


class FakeNVMLError(Exception):
    """pynvml's NVMLError: carries the nvmlReturn_t in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 4: "Insufficient Permissions", 9: "Driver Not Loaded"}.get(
            self.value, f"NVML error {self.value}"
        )


class FakeNvml:
    """The slice of pynvml that perfguard.machine.telemetry calls, with scripted answers.

    ``script[name]`` lists the answers of successive calls (the last repeats); an
    exception in it is raised. ``counts`` counts calls; ``on_call`` is invoked
    after each one (the tests use it to wake on the n-th read).
    """

    NVMLError = FakeNVMLError
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED = 0, 1
    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION = NOT_SUPPORTED, NO_PERMISSION

    def __init__(self, *, event_names: bool = True, **script: Any) -> None:
        # Only one generation of names exists in a given pynvml.
        generation = "Event" if event_names else "Throttle"
        for suffix, bit in BITS.items():
            setattr(self, f"nvmlClocks{generation}Reason{suffix}", bit)
        reasons_fn = f"nvmlDeviceGetCurrentClocks{generation}Reasons"
        self.script: dict[str, list[Any]] = {reasons_fn: script.pop("reasons", [0])}
        setattr(self, reasons_fn, lambda handle: self._answer(reasons_fn))
        self.script.update(
            {
                "sm": [1980],
                "mem": [2619],
                "temperature": [45],
                "power_mw": [300_000],
                "memory_used": [1024 * MIB],
                "processes": [[]],
            }
        )
        self.script.update(script)
        self.counts: dict[str, int] = {}
        self.on_call: Callable[[str, int], None] = lambda name, count: None
        self.lock = threading.Lock()

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

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        return int(self._answer("sm" if clock == self.NVML_CLOCK_SM else "mem"))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return int(self._answer("temperature"))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return int(self._answer("power_mw"))

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        used = self._answer("memory_used")
        return types.SimpleNamespace(total=80 * 1024 * MIB, used=used, free=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        found = self._answer("processes")
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in found]


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
    install(monkeypatch, FakeNvml(init=[FakeNVMLError(DRIVER_NOT_LOADED)]))
    nvml, reason = load_nvml()
    assert nvml is None
    assert reason == "NVML could not initialise: Driver Not Loaded (no NVIDIA driver?)"


def test_load_nvml_init_failure_that_is_not_an_nvml_error(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(init=[OSError("libnvidia-ml.so.1: cannot open")]))
    nvml, reason = load_nvml()
    assert nvml is None and reason is not None
    assert reason.startswith("NVML could not initialise: libnvidia-ml.so.1")


def test_load_nvml_no_permission(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(init=[FakeNVMLError(NO_PERMISSION)]))
    nvml, reason = load_nvml()
    assert nvml is None and reason is not None
    assert reason.startswith("no permission to query NVML: Insufficient Permissions")


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (None, INSTALL_HINT),
        (FakeNvml(init=[FakeNVMLError(DRIVER_NOT_LOADED)]), "NVML could not initialise"),
        (FakeNvml(init=[FakeNVMLError(NO_PERMISSION)]), "no permission"),
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
    assert result["throttled"] == {"power": False, "thermal": False}
    assert invalid_reason(result, allow_throttle=False, exclusive=True) is None
    assert static_info(0) == {}


def test_sampler_without_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(handle=[FakeNVMLError(2)])
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
        power_limit_mw=FakeNVMLError(NOT_SUPPORTED),
        persistence=FakeNVMLError(NO_PERMISSION),
        app_sm=FakeNVMLError(NOT_SUPPORTED),
        app_mem=FakeNVMLError(NOT_SUPPORTED),
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
    assert static_info(7, FakeNvml(handle=[FakeNVMLError(2)])) == {}


# --- reasons ---------------------------------------------------------------


@pytest.mark.parametrize("suffix", list(BITS))
def test_decode_each_known_bit(suffix: str) -> None:
    for nvml in (None, FakeNvml(), FakeNvml(event_names=False)):
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
    )
    assert decode_reasons(0) == []
    assert decode_reasons(SW_POWER_CAP | GPU_IDLE) == ["gpu_idle", "sw_power_cap"]


def test_decode_unknown_bits() -> None:
    assert decode_reasons(0x200) == ["unknown_0x200"]
    assert decode_reasons(0x8000000000000000 | 0x400 | SW_THERMAL) == [
        "sw_thermal_slowdown",
        "unknown_0x400",
        "unknown_0x8000000000000000",
    ]


def test_decode_uses_the_modules_constants() -> None:
    # Whatever value the module gives a reason wins over nvml.h's.
    nvml = types.SimpleNamespace(nvmlClocksThrottleReasonSwPowerCap=0x1000)
    assert decode_reasons(0x1000, nvml) == ["sw_power_cap"]
    assert decode_reasons(0x4, nvml) == ["unknown_0x4"]


def test_power_and_thermal_sets() -> None:
    assert {"sw_power_cap", "hw_power_brake_slowdown"} <= POWER_REASONS
    assert {"sw_thermal_slowdown", "hw_thermal_slowdown"} <= THERMAL_REASONS
    # NVML sets hw_slowdown for thermal, power-brake and fast-trigger events alike.
    assert "hw_slowdown" in POWER_REASONS & THERMAL_REASONS
    benign = {"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"}
    assert not benign & (POWER_REASONS | THERMAL_REASONS)
    assert POWER_REASONS | THERMAL_REASONS | benign == set(KNOWN_REASONS)


@given(st.sets(st.sampled_from(list(BITS))), st.integers(min_value=9, max_value=63))
def test_decode_any_subset_of_known_bits(subset: set[str], unknown_shift: int) -> None:
    mask = 0
    for suffix in subset:
        mask |= BITS[suffix]
    names = [SHORT[suffix] for suffix in BITS if suffix in subset]
    assert decode_reasons(mask) == names
    assert decode_reasons(mask, FakeNvml(event_names=False)) == names
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
    assert result["throttled"] == {"power": False, "thermal": False}


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
    assert result["throttled"] == {"power": True, "thermal": True}


def test_older_throttle_reason_function_is_used() -> None:
    sampler = TelemetrySampler(
        0, nvml=FakeNvml(event_names=False, reasons=[SW_THERMAL]), background=False
    )
    with sampler:
        pass
    assert sampler.result()["reasons_seen"] == ["sw_thermal_slowdown"]
    assert sampler.result()["throttled"] == {"power": False, "thermal": True}


def test_errors_in_reads_mark_fields_unavailable() -> None:
    refused = FakeNVMLError(NOT_SUPPORTED)
    sampler = scripted(
        temperature=[refused],
        power_mw=[refused, 250_000, RuntimeError("ctypes said no")],
        reasons=[FakeNVMLError(NO_PERMISSION), SW_THERMAL, ValueError("bad")],
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
    nvml = FakeNvml(sm=[1500, FakeNVMLError(15), RuntimeError("gone")], temperature=[KeyError("x")])

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
        if name == "nvmlDeviceGetCurrentClocksEventReasons" and count >= 5:
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


# --- invalid_reason --------------------------------------------------------


def run(
    reasons: Iterable[int] = (0,), processes: Iterable[list[tuple[int, int | None]]] = ([],)
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


def test_idle_and_clock_settings_are_valid() -> None:
    benign = GPU_IDLE | 0x2 | 0x10 | 0x100
    assert invalid_reason(run([benign]), allow_throttle=False, exclusive=False) is None


def test_allow_throttle() -> None:
    result = run([SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL])
    assert result["throttled"] == {"power": True, "thermal": True}
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
