"""The GPU lock installs and loads: one CUDA major, wheels only, and every shared
library its native extensions link shipped by a locked wheel or provided by the runner.

The libraries were read from the locked wheels themselves (ELF ``DT_NEEDED``, file
lists) by ``.github/requirements/libraries.py`` at ``make lock``; these tests need no
network and fail when the lock changed without it, or cannot work as a whole.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
import types
from typing import Any

import pytest

from perfguard.backends import tensorrt_backend
from tests.helpers.paths import ROOT

REQUIREMENTS = ROOT / ".github" / "requirements"


def _libraries() -> Any:
    spec = importlib.util.spec_from_file_location(
        "perfguard_lock_libraries", REQUIREMENTS / "libraries.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


libraries = _libraries()


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(libraries.RECORD.read_text(encoding="utf-8"))
    return data


def test_every_locked_package_is_recorded_as_the_wheel_the_lock_pins(
    recorded: dict[str, Any],
) -> None:
    pins = libraries.locked_pins(libraries.LOCK.read_text(encoding="utf-8"))
    assert recorded["lock"] == libraries.LOCK.name
    assert set(recorded["wheels"]) == set(pins), "the lock changed: run `make lock`"
    for name, (version, hashes) in pins.items():
        wheel = recorded["wheels"][name]
        assert wheel["version"] == version, f"{name}: run `make lock`"
        assert wheel["sha256"] in hashes, f"{name}: recorded from another file; run `make lock`"
        # A source distribution runs code at install and may fetch from another index
        # (PyPI's tensorrt-cu13-libs does): the GPU runner installs wheels only.
        assert wheel["wheel"].endswith(".whl"), wheel


def test_every_library_the_native_extensions_link_is_provided(recorded: dict[str, Any]) -> None:
    needs = {
        member
        for wheel in recorded["wheels"].values()
        for member in wheel["needs"]
    }  # fmt: skip
    # What perfguard loads: each of ONNX Runtime's GPU providers and TensorRT's bindings.
    assert {
        "onnxruntime/capi/libonnxruntime_providers_cuda.so",
        "onnxruntime/capi/libonnxruntime_providers_tensorrt.so",
        "tensorrt_bindings/tensorrt.so",
    } <= needs
    assert libraries.unmet(recorded) == []


def test_a_lock_of_two_tensorrt_majors_is_caught(recorded: dict[str, Any]) -> None:
    """The lock before: TensorRT 11 bindings beside ONNX Runtime 1.31, whose TensorRT
    provider links TensorRT 10; and a CUDA provider whose libcurand nothing shipped."""
    before = copy.deepcopy(recorded)
    bindings = before["wheels"]["tensorrt-cu13-bindings"]
    bindings["needs"] = {
        member: [re.sub(r"\.so\.10$", ".so.11", lib) for lib in libs]
        for member, libs in bindings["needs"].items()
    }
    before["wheels"].pop("nvidia-curand")
    missing = libraries.unmet(before)
    assert "tensorrt-cu13-bindings: tensorrt_bindings/tensorrt.so needs libnvinfer.so.11" in (
        missing
    )
    assert (
        "onnxruntime-gpu: onnxruntime/capi/libonnxruntime_providers_cuda.so needs "
        "libcurand.so.10" in missing
    )


def test_the_gpu_lock_is_one_cuda_major() -> None:
    pins = libraries.locked_pins(libraries.LOCK.read_text(encoding="utf-8"))
    cuda12 = sorted(name for name in pins if name.endswith("-cu12"))
    assert not cuda12, f"CUDA 12 wheels beside CUDA 13 ones: {cuda12}"
    assert pins["torch"][0] >= "2.15"  # the CUDA 13 build on PyPI
    assert "tensorrt-cu13-libs" not in pins and "tensorrt" not in pins


def test_the_runner_libraries_are_documented() -> None:
    ci = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    for soname in libraries.RUNNER_LIBRARIES:
        if soname.startswith(("libnv", "libcuda")):
            assert soname in ci, f"docs/ci.md does not say the runner provides {soname}"


def test_tensorrt_imports_from_the_bindings_wheel_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU lock installs tensorrt-cu13-bindings (module ``tensorrt_bindings``) and
    no ``tensorrt`` package: perfguard imports the bindings."""
    bindings = types.ModuleType("tensorrt_bindings")
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # `import tensorrt` fails
    monkeypatch.setitem(sys.modules, "tensorrt_bindings", bindings)
    assert tensorrt_backend.import_tensorrt() is bindings
    monkeypatch.setitem(sys.modules, "tensorrt_bindings", None)
    with pytest.raises(ImportError) as info:
        tensorrt_backend.import_tensorrt()
    assert "tensorrt" in str(info.value)
