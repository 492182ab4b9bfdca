"""scripts/gpu-check on a machine without a usable GPU: it says so and stops, non-zero.

It used to run the GPU tests and the GPU suite anyway and could exit 0 with every
check skipped ("0 passed"), so a broken runner looked like a good one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT


def _gpu_usable() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_gpu_usable(), reason="a GPU is usable here: gpu-check runs its checks")
def test_gpu_check_stops_early_saying_why_no_gpu_is_usable(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert "no GPU is usable here: " in output
    assert "gpu-check: stopped: no GPU is usable on this machine" in output
    # The pieces are named with what was found: the driver library among them.
    assert "libcuda.so.1" in output and "torch" in output and "tensorrt" in output
    assert not (tmp_path / "gpu-tests.log").exists()  # no test was started
    assert (tmp_path / "diagnosis.txt").read_text().startswith("piece")
