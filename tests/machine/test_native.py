"""Native libraries that do not load are named: real shared objects built here.

A provider library is compiled against a dependency that is then removed, so the
dynamic loader itself refuses it, as onnxruntime-gpu's CUDA provider is refused on a
machine without ``libcublasLt``. onnxruntime lists the CUDA provider here as
onnxruntime-gpu does everywhere (the CPU package does not), by a patched
``get_available_providers``: the rest is the real package.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfguard.core.errors import BackendUnavailable
from perfguard.machine import native
from tests.helpers.onnx_cells import relu_cell

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("cc") is None,
    reason="builds Linux shared libraries with cc",
)


@pytest.fixture
def broken_provider(tmp_path: Path) -> Path:
    """libprovider.so, which needs libgone.so.13; libgone.so.13 is gone."""
    (tmp_path / "gone.c").write_text("int gone(void) { return 1; }\n")
    (tmp_path / "p.c").write_text("int gone(void);\nint provider(void) { return gone(); }\n")
    gone = tmp_path / "libgone.so.13"
    cc = ["cc", "-shared", "-fPIC"]
    subprocess.run([*cc, "-Wl,-soname,libgone.so.13", "-o", str(gone), str(tmp_path / "gone.c")],
                   check=True)  # fmt: skip
    provider = tmp_path / "libprovider.so"
    subprocess.run([*cc, "-o", str(provider), str(tmp_path / "p.c"), str(gone)], check=True)
    gone.unlink()
    return provider


def test_a_library_whose_dependency_is_gone_is_named(broken_provider: Path) -> None:
    problem = native.load_problem(broken_provider)
    assert problem is not None and "libgone.so.13" in problem
    assert native.load_problem("libc.so.6") is None


def test_a_driver_that_does_not_load_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "DRIVER_LIBRARY", "libperfguard-no-driver.so.1")
    problem = native.driver_problem()
    assert problem is not None
    assert problem.startswith("the NVIDIA driver's libperfguard-no-driver.so.1 does not load")


@pytest.mark.parametrize("missing", ["driver", "provider"])
def test_a_listed_cuda_provider_that_cannot_load_skips_its_cell_with_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken_provider: Path, missing: str
) -> None:
    """onnxruntime-gpu on a machine without a GPU: the cell used to fail, blaming the
    install, while the cause (a library that does not load) was on stderr only."""
    ort = pytest.importorskip("onnxruntime")
    from perfguard.backends.onnxruntime_backend import OnnxRuntimeBackend
    from perfguard.models.inputs import make_inputs

    monkeypatch.setattr(
        ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    if missing == "driver":
        monkeypatch.setattr(native, "DRIVER_LIBRARY", "libperfguard-no-driver.so.1")
        cause, fix = "libperfguard-no-driver.so.1", "its driver installed (the driver brings"
    else:
        monkeypatch.setattr(native, "DRIVER_LIBRARY", "libc.so.6")  # a driver that loads
        monkeypatch.setattr(native, "ort_provider_library", lambda where, name: broken_provider)
        cause = "its library libprovider.so does not load (libgone.so.13"
        fix = "onnxruntime-gpu[cuda,cudnn]"
    cell = relu_cell(tmp_path)
    with pytest.raises(BackendUnavailable) as info:
        OnnxRuntimeBackend().open(cell, make_inputs(cell.model), tmp_path / "cache")
    text = str(info.value)
    assert f"CUDAExecutionProvider is listed by onnxruntime {ort.__version__}, but" in text
    assert cause in text and fix in text  # the fix for that finding
    assert not (tmp_path / "cache").exists()  # refused before any model work
