"""Environment fingerprint: what is comparable, what is only recorded, GPU discovery."""

from __future__ import annotations

import hashlib
import json
import platform
import socket
import stat
import sys
import types
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from perfguard.machine import env
from perfguard.machine.env import collect_environment, diff_comparable, package_version
from perfguard.records.results import Environment, fingerprint

GPU_KEYS = {"gpu_model", "gpu_memory_gib", "gpu_driver_major", "cuda_major"}


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only what a test puts there (so no real nvidia-smi is found)."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    return path


@pytest.fixture
def no_gpu(bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import pynvml` raise ImportError.
    monkeypatch.setitem(sys.modules, "pynvml", None)


def fake_nvidia_smi(bin_dir: Path, query_output: str, *, rc: int = 0) -> Path:
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--query-gpu=name,memory.total,driver_version" ]; then\n'
        f"  printf '%b' '{query_output}'\n"
        f"  exit {rc}\n"
        "fi\n"
        "echo '| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |'\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def fake_pynvml(
    *,
    name: bytes | str = b"NVIDIA A100-SXM4-80GB",
    driver: bytes | str = b"550.54.15",
    cuda: int = 12040,
    count: int = 1,
    init_error: Exception | None = None,
    memory_mib: int | None = 81559,
) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    calls: list[str] = []

    def record(fn_name: str, result: Any = None) -> Callable[..., Any]:
        def fn(*args: Any) -> Any:
            calls.append(fn_name)
            if fn_name == "nvmlInit" and init_error is not None:
                raise init_error
            return result

        return fn

    module.nvmlInit = record("nvmlInit")  # type: ignore[attr-defined]
    module.nvmlShutdown = record("nvmlShutdown")  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = record("nvmlDeviceGetCount", count)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = record("handle", object())  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = record("name", name)  # type: ignore[attr-defined]
    module.nvmlSystemGetDriverVersion = record("driver", driver)  # type: ignore[attr-defined]
    module.nvmlSystemGetCudaDriverVersion = record("cuda", cuda)  # type: ignore[attr-defined]
    if memory_mib is not None:
        memory = types.SimpleNamespace(total=memory_mib * 2**20)
        module.nvmlDeviceGetMemoryInfo = record("memory", memory)  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    return module


def test_fingerprint_is_sha256_of_sorted_json() -> None:
    comparable = {"b": "2", "a": "1"}
    blob = json.dumps({"a": "1", "b": "2"}, sort_keys=True, separators=(",", ":"))
    assert fingerprint(comparable) == hashlib.sha256(blob.encode()).hexdigest()[:12]
    assert fingerprint({"a": "1", "b": "2"}) == fingerprint(comparable)


@pytest.mark.usefixtures("no_gpu")
def test_collect_environment_without_gpu() -> None:
    environment = collect_environment()
    comparable = environment.comparable
    for key in ("cpu_model", "cpu_count", "machine", "os", "python"):
        assert comparable[key], key
    assert comparable["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert comparable["numpy"] == metadata.version("numpy")
    assert {"torch", "onnxruntime", "tensorrt"} <= set(comparable)
    assert not GPU_KEYS & set(comparable)
    assert "gpu_driver" not in environment.recorded
    assert environment.recorded["perfguard"]
    assert environment.recorded["python_full"].startswith(comparable["python"])
    assert all(isinstance(v, str) for v in environment.recorded.values())
    assert len(environment.fingerprint) == 12
    assert environment.fingerprint == fingerprint(comparable)


@pytest.mark.usefixtures("no_gpu")
def test_fingerprint_stable_across_calls() -> None:
    first, second = collect_environment(), collect_environment()
    assert first.fingerprint == second.fingerprint
    assert first.comparable == second.comparable


@pytest.mark.usefixtures("no_gpu")
def test_fingerprint_changes_with_a_comparable_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Intel(R)  Xeon(R)   Gold 6338\n")
    monkeypatch.setattr(env, "CPUINFO_PATH", cpuinfo)
    before = collect_environment()
    assert before.comparable["cpu_model"] == "Intel(R) Xeon(R) Gold 6338"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\n")
    after = collect_environment()
    assert after.fingerprint != before.fingerprint
    assert diff_comparable(before, after) == {
        "cpu_model": ("Intel(R) Xeon(R) Gold 6338", "AMD EPYC 7763 64-Core Processor")
    }


@pytest.mark.usefixtures("no_gpu")
def test_fingerprint_ignores_recorded_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    before = collect_environment()
    monkeypatch.setattr(socket, "gethostname", lambda: "some-other-runner")
    after = collect_environment()
    assert after.recorded["hostname"] == "some-other-runner"
    assert after.fingerprint == before.fingerprint


@pytest.mark.usefixtures("no_gpu")
def test_extra_fields_are_comparable() -> None:
    base = collect_environment()
    one = collect_environment({"instance_type": "c6i.large"})
    two = collect_environment({"instance_type": "c7i.large"})
    assert one.comparable["instance_type"] == "c6i.large"
    assert len({base.fingerprint, one.fingerprint, two.fingerprint}) == 3
    # extra wins on a clash, e.g. to name a CPU family the same across hosts
    assert collect_environment({"cpu_model": "xeon"}).comparable["cpu_model"] == "xeon"


@pytest.mark.usefixtures("no_gpu")
def test_cpu_model_falls_back_without_cpuinfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(env, "CPUINFO_PATH", tmp_path / "missing")
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert collect_environment().comparable["cpu_model"] == "aarch64"


@pytest.mark.usefixtures("no_gpu")
def test_runtimes_are_not_imported() -> None:
    heavy = ("torch", "onnxruntime", "tensorrt")
    before = {name for name in heavy if name in sys.modules}
    collect_environment()
    assert {name for name in heavy if name in sys.modules} == before


def test_package_version_reads_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = {"onnxruntime-gpu": "1.18.0", "tensorrt-cu12": "10.0.1"}

    def version(name: str) -> str:
        if name in installed:
            return installed[name]
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", version)
    assert package_version(env.RUNTIME_DISTRIBUTIONS["onnxruntime"]) == "1.18.0 (onnxruntime-gpu)"
    assert package_version(env.RUNTIME_DISTRIBUTIONS["tensorrt"]) == "10.0.1 (tensorrt-cu12)"
    assert package_version(env.RUNTIME_DISTRIBUTIONS["torch"]) == "absent"
    installed["onnxruntime"] = "1.18.0"
    # Both builds side by side shadow each other: show it.
    assert (
        package_version(env.RUNTIME_DISTRIBUTIONS["onnxruntime"], report_all=True)
        == "1.18.0 + 1.18.0 (onnxruntime-gpu)"
    )
    installed["tensorrt"] = "10.0.1"
    assert package_version(env.RUNTIME_DISTRIBUTIONS["tensorrt"]) == "10.0.1"


@pytest.mark.usefixtures("no_gpu")
def test_an_optional_runtime_enters_the_fingerprint_only_where_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = metadata.version
    installed: dict[str, str] = {}

    def version(name: str) -> str:
        if name.startswith("onnxruntime-genai"):
            if name in installed:
                return installed[name]
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    without = collect_environment()
    assert "onnxruntime-genai" not in without.comparable  # archives keep their fingerprint
    installed["onnxruntime-genai-cuda"] = "0.18.0"
    with_cuda = collect_environment()
    assert with_cuda.comparable["onnxruntime-genai"] == "0.18.0 (onnxruntime-genai-cuda)"
    assert with_cuda.fingerprint != without.fingerprint
    installed["onnxruntime-genai"] = "0.19.0"
    assert collect_environment().comparable["onnxruntime-genai"] == "0.19.0"


def test_gpu_from_pynvml(bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    environment = collect_environment()
    assert environment.comparable["gpu_model"] == "NVIDIA A100-SXM4-80GB"
    assert environment.comparable["gpu_memory_gib"] == "80"
    assert environment.comparable["gpu_driver_major"] == "550"
    assert environment.comparable["cuda_major"] == "12"
    assert environment.recorded["gpu_driver"] == "550.54.15"
    assert environment.recorded["gpu_count"] == "1"
    assert module.calls[0] == "nvmlInit"
    assert module.calls[-1] == "nvmlShutdown"


def test_pynvml_str_names_and_no_devices(monkeypatch: pytest.MonkeyPatch, bin_dir: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(name="NVIDIA L4", driver="535.1"))
    assert env.gpu_facts()["gpu_model"] == "NVIDIA L4"
    module = fake_pynvml(count=0)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    assert env.gpu_facts() == {}
    assert module.calls[-1] == "nvmlShutdown"


def test_pynvml_failure_falls_back_to_nvidia_smi(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        sys.modules, "pynvml", fake_pynvml(init_error=RuntimeError("NVML Shared Library Not Found"))
    )
    fake_nvidia_smi(
        bin_dir,
        "NVIDIA H100 80GB HBM3, 81559 MiB, 535.104.05\\n"
        "NVIDIA H100 80GB HBM3, 81559 MiB, 535.104.05\\n",
    )
    environment = collect_environment()
    assert environment.comparable["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert environment.comparable["gpu_memory_gib"] == "80"
    assert environment.comparable["gpu_driver_major"] == "535"
    assert environment.comparable["cuda_major"] == "12"
    assert environment.recorded["gpu_driver"] == "535.104.05"
    assert environment.recorded["gpu_count"] == "2"


@pytest.mark.usefixtures("no_gpu")
def test_nvidia_smi_without_pynvml_matches_nvml_fingerprint(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvidia_smi(bin_dir, "Tesla T4, 15360 MiB, 535.104.05\\n")
    via_smi = collect_environment()
    monkeypatch.setitem(
        sys.modules,
        "pynvml",
        fake_pynvml(name=b"Tesla T4", driver=b"535.104.05", cuda=12020, memory_mib=15360),
    )
    via_nvml = collect_environment()
    # The discovery route must not change the fingerprint of the same machine.
    assert via_smi.comparable["gpu_memory_gib"] == via_nvml.comparable["gpu_memory_gib"] == "15"
    assert via_smi.fingerprint == via_nvml.fingerprint


def test_gpu_memory_is_part_of_the_device_identity(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One name, two memory sizes (an A100 PCIe came as 40 GB and 80 GB): not comparable.
    monkeypatch.setitem(
        sys.modules, "pynvml", fake_pynvml(name="NVIDIA A100-PCIE", memory_mib=40960)
    )
    small = collect_environment()
    monkeypatch.setitem(
        sys.modules, "pynvml", fake_pynvml(name="NVIDIA A100-PCIE", memory_mib=81920)
    )
    large = collect_environment()
    assert (small.comparable["gpu_memory_gib"], large.comparable["gpu_memory_gib"]) == ("40", "80")
    assert small.fingerprint != large.fingerprint
    # An NVML without the memory call still names the GPU (its memory left out).
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(name="NVIDIA L4", memory_mib=None))
    assert "gpu_memory_gib" not in collect_environment().comparable


@pytest.mark.usefixtures("no_gpu")
def test_failing_nvidia_smi_means_no_gpu(bin_dir: Path) -> None:
    fake_nvidia_smi(bin_dir, "NVIDIA-SMI has failed because it couldn't communicate", rc=9)
    assert not GPU_KEYS & set(collect_environment().comparable)
    fake_nvidia_smi(bin_dir, "")
    assert not GPU_KEYS & set(collect_environment().comparable)


def test_the_fake_pynvml_offers_only_what_pynvml_has() -> None:
    real = pytest.importorskip("pynvml")
    fake = fake_pynvml()
    names = [n for n in vars(fake) if n.startswith("nvml")]
    assert len(names) >= 8
    assert [n for n in names if not hasattr(real, n)] == []


@pytest.mark.usefixtures("no_gpu")
def test_no_gpu_in_the_fingerprint_says_why() -> None:
    environment = collect_environment()
    assert not GPU_KEYS & set(environment.comparable)
    assert environment.recorded["gpu_absent"] == (
        "nvidia-ml-py is not installed (pip install 'perfguard[gpu]'); nvidia-smi: not on PATH"
    )


def test_a_driver_that_is_not_loaded_is_named(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = pytest.importorskip("pynvml")
    error = real.NVMLError(real.NVML_ERROR_DRIVER_NOT_LOADED)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_error=error))
    fake_nvidia_smi(
        bin_dir,
        # (\\047: printf's apostrophe; the script quotes its text in '...')
        "\\nNVIDIA-SMI has failed because it couldn\\047t communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\\n",
        rc=9,
    )
    environment = collect_environment()
    assert not GPU_KEYS & set(environment.comparable)
    assert environment.recorded["gpu_absent"] == (
        "NVML could not start: Driver Not Loaded. Fix: load the NVIDIA kernel module "
        "(`nvidia-smi` must work; reboot after installing the driver); nvidia-smi: exit "
        "status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
        "driver. Make sure that the latest NVIDIA driver is installed and running."
    )


def test_the_real_pynvml_without_a_driver_is_named(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = pytest.importorskip("pynvml")
    try:
        real.nvmlInit()
    except real.NVMLError as error:
        found = str(error)
    else:
        real.nvmlShutdown()
        pytest.skip("NVML starts on this machine")
    monkeypatch.setitem(sys.modules, "pynvml", real)
    absent = collect_environment().recorded["gpu_absent"]
    assert absent.startswith(f"NVML could not start: {found}. Fix: ")
    assert absent.endswith("; nvidia-smi: not on PATH")


def test_nvml_without_devices_and_a_gpu_found_say_so(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(count=0))
    fake_nvidia_smi(bin_dir, "")
    assert env.probe_gpu() == (
        {},
        "NVML started but sees no GPU (nvmlDeviceGetCount is 0); nvidia-smi: listed no GPU",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert "gpu_absent" not in collect_environment().recorded
    assert env.probe_gpu()[1] is None


def test_diff_comparable() -> None:
    a = Environment("a" * 12, {"cpu_model": "x", "torch": "2.3.0", "gpu_model": "L4"}, {})
    b = Environment("b" * 12, {"cpu_model": "x", "torch": "2.4.0"}, {"hostname": "h"})
    assert diff_comparable(a, b) == {"gpu_model": ("L4", None), "torch": ("2.3.0", "2.4.0")}
    assert diff_comparable(a, a) == {}
    assert list(diff_comparable(a, b)) == ["gpu_model", "torch"]


def test_cuda_runtime_and_cudnn_enter_the_fingerprint_on_a_gpu_machine(
    bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    first = collect_environment()
    assert first.comparable["cuda_runtime"] == "12.4"
    assert first.comparable["cudnn"] == "90100"
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90300)
    assert collect_environment().fingerprint != first.fingerprint  # a cuDNN upgrade


AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n"


@pytest.mark.parametrize(
    ("machine", "cpuinfo", "saturates"),
    [
        ("x86_64", AVX2, True),  # AVX2 only: pmaddubsw's int16 step
        ("x86_64", AVX2.replace("avx2", "avx2 avx512_vnni", 1), False),
        ("x86_64", AVX2.replace("avx2", "avx2 avx_vnni", 1), False),
        ("x86_64", AVX2.replace("avx2", "avx2 amx_int8", 1), False),
        ("aarch64", "processor\t: 0\nFeatures\t: fp asimd\n", False),  # other kernels
        ("x86_64", None, False),  # unknown: left as it was
    ],
)
def test_u8s8_kernels_saturate_on_x86_without_vnni(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    machine: str,
    cpuinfo: str | None,
    saturates: bool,
) -> None:
    path = tmp_path / "cpuinfo"
    if cpuinfo is not None:
        path.write_text(cpuinfo)
    monkeypatch.setattr(env, "CPUINFO_PATH", path)
    monkeypatch.setattr(env.platform, "machine", lambda: machine)
    assert env.u8s8_saturates() is saturates
