"""The real onnxruntime-gpu, importable on a machine without a GPU.

``make tools`` downloads the GPU lock's ``onnxruntime-gpu`` wheel into
``.perfguard/tools/onnxruntime-gpu/``; it cannot be installed beside the CPU
``onnxruntime`` of the test environment (both are the module ``onnxruntime``), so it is
unpacked once into a folder of its own, and a subprocess with that folder first on
``PYTHONPATH`` imports it instead. Its Python layer and CPU provider work here; its
CUDA and TensorRT providers are listed and fail to load, as on any machine without
a GPU. Missing, the tests skip, except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".perfguard" / "tools" / "onnxruntime-gpu"


def ort_gpu_site() -> Path:
    """The folder holding the unpacked ``onnxruntime`` of onnxruntime-gpu; skips (fails in
    CI) without the wheel."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the onnxruntime-gpu wheel used here is a Linux build")
    wheels = sorted(TOOLS.glob("onnxruntime_gpu-*.whl")) if TOOLS.is_dir() else []
    if not wheels:
        reason = f"no onnxruntime-gpu wheel in {TOOLS} (run `make tools`)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (required in CI: .ci/run runs `make tools`)")
        pytest.skip(reason)
    wheel = wheels[-1]
    site = TOOLS / wheel.name.removesuffix(".whl")
    if not (site / "onnxruntime" / "__init__.py").is_file():
        partial = site.with_name(site.name + ".partial")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(partial)
        partial.rename(site)
    return site


def run_with_ort_gpu(
    site: Path, args: list[str], *, cwd: Path = ROOT, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python *args`` with onnxruntime-gpu shadowing the environment's onnxruntime."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
