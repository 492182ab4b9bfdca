"""What a GPU runner has, checked piece by piece: the first stage of scripts/gpu-check.

    python scripts/gpu_diagnose.py      # exit 0: a GPU is usable; 3: none is (and why)

Each row is one piece a GPU cell needs, with what was found and, where it is missing
or broken, the fix: ``nvidia-smi``, NVML, the driver's ``libcuda.so.1``, torch's CUDA
build and devices, each GPU provider ONNX Runtime lists and whether its library
loads, TensorRT's version and whether a builder can be made. A GPU is usable when
the driver loads and torch or NVML sees a device; without one, gpu-check stops here,
in seconds, instead of running tests that would all skip.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfguard.machine import native

OK, MISSING, BROKEN = "ok", "missing", "BROKEN"


@dataclass(frozen=True)
class Row:
    piece: str
    status: str
    found: str
    fix: str = ""


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:200]


def nvidia_smi() -> Row:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return Row("nvidia-smi", MISSING, "not on PATH", "install the NVIDIA driver")
    query = ["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        done = subprocess.run([tool, *query], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Row("nvidia-smi", BROKEN, f"{type(exc).__name__}: {exc}", "check the driver")
    if done.returncode != 0:
        said = _first_line(done.stdout + done.stderr)
        return Row("nvidia-smi", BROKEN, said, "reinstall or reload the driver (reboot)")
    return Row("nvidia-smi", OK, "; ".join(done.stdout.strip().splitlines()))


def nvml() -> Row:
    try:
        import pynvml
    except ImportError:
        return Row("NVML", MISSING, "nvidia-ml-py not installed", "pip install nvidia-ml-py")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_DriverNotLoaded, _LibraryNotFound, RM mismatch
        return Row("NVML", BROKEN, f"{type(exc).__name__}: {exc}", "install or reload the driver")
    try:
        count = pynvml.nvmlDeviceGetCount()
        driver = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    status = OK if count else MISSING
    return Row("NVML", status, f"{count} device(s), driver {driver}")


def driver() -> Row:
    problem = native.driver_problem()
    if problem is not None:
        return Row(native.DRIVER_LIBRARY, MISSING, problem, "install the NVIDIA driver")
    return Row(native.DRIVER_LIBRARY, OK, "loads")


def torch_cuda() -> tuple[Row, int]:
    try:
        import torch
    except ImportError:
        return Row("torch", MISSING, "not installed", "pip install a CUDA build of torch"), 0
    build = torch.version.cuda
    if not build:
        fix = "install a CUDA build (PyPI's torch on Linux x86_64 is one; the GPU lock pins it)"
        return Row("torch", MISSING, f"{torch.__version__}, a CPU-only build", fix), 0
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not count:
        return Row("torch", BROKEN, f"{torch.__version__} (CUDA {build}) sees no device",
                   "check the driver against CUDA " + build), 0  # fmt: skip
    name = torch.cuda.get_device_name(0)
    return Row("torch", OK, f"{torch.__version__} (CUDA {build}), {count} device(s): {name}"), count


def onnxruntime_providers() -> list[Row]:
    try:
        import onnxruntime as ort
    except ImportError:
        return [Row("onnxruntime", MISSING, "not installed", "pip install onnxruntime-gpu")]
    from perfguard.backends.onnxruntime_backend import provider_problem

    listed = list(ort.get_available_providers())
    rows = [Row("onnxruntime", OK, f"{ort.__version__}: {', '.join(listed)}")]
    for provider in ("CUDAExecutionProvider", "TensorrtExecutionProvider"):
        if provider not in listed:
            rows.append(Row(provider, MISSING, "not listed", "pip install onnxruntime-gpu"))
            continue
        found = provider_problem(ort, provider)
        rows.append(
            Row(provider, BROKEN, *found) if found else Row(provider, OK, "its library loads")
        )
    return rows


def tensorrt() -> Row:
    from perfguard.backends.tensorrt_backend import import_problem, import_tensorrt

    try:
        trt = import_tensorrt()  # `tensorrt`, else the bindings wheel's `tensorrt_bindings`
    except ImportError as exc:
        problem = import_problem(exc)
        return Row("tensorrt", MISSING, str(problem).splitlines()[0][:200], problem.fix or "")
    from perfguard.backends.tensorrt_build import trt_logger

    logger = trt_logger(trt)
    try:
        builder = trt.Builder(logger)
    except TypeError:
        builder = None
    if builder is None:
        said = "; ".join(logger.tail(0)) or "TensorRT logged nothing"
        return Row("tensorrt", BROKEN, f"{trt.__version__}: no builder ({said})",
                   "check the driver version this TensorRT needs")  # fmt: skip
    return Row("tensorrt", OK, f"{trt.__version__}: a builder can be made")


def diagnose() -> tuple[list[Row], bool, list[str]]:
    """The rows, whether a GPU is usable, and why not."""
    smi, management, lib = nvidia_smi(), nvml(), driver()
    torch_row, devices = torch_cuda()
    rows = [smi, management, lib, torch_row, *onnxruntime_providers(), tensorrt()]
    nvml_devices = management.status == OK
    usable = lib.status == OK and (devices > 0 or nvml_devices)
    why = [f"{r.piece}: {r.found}" for r in (smi, management, lib, torch_row) if r.status != OK]
    return rows, usable, why


def main() -> int:
    rows, usable, why = diagnose()
    width = max(len(r.piece) for r in rows)
    print(f"{'piece'.ljust(width)}  status   found (fix)")
    for row in rows:
        fix = f"  (fix: {row.fix})" if row.fix and row.status != OK else ""
        print(f"{row.piece.ljust(width)}  {row.status:7s}  {row.found}{fix}")
    if not usable:
        print("\nno GPU is usable here: " + "; ".join(why))
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
