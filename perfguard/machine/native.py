"""Whether the native libraries a GPU runtime needs load here, and if not, which one.

A Python package can import while the shared libraries it hands work to cannot load:
``onnxruntime-gpu`` lists its CUDA and TensorRT providers whether or not the CUDA
libraries (or a GPU) exist, and its provider library fails only when a session
asks for it, with the reason on stderr. Loading the library with ``ctypes`` here
gives the loader's own message, which names the missing file
(``libcublasLt.so.13: cannot open shared object file``), so a cell can be skipped
with the piece that is missing instead of failed with a guess.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

__all__ = ["DRIVER_LIBRARY", "driver_problem", "load_problem", "ort_provider_library"]

#: The NVIDIA driver's user-space library every CUDA program loads.
DRIVER_LIBRARY = "libcuda.so.1"
#: onnxruntime-gpu's provider libraries (in ``onnxruntime/capi``), by provider.
_ORT_PROVIDER_LIBRARIES = {
    "CUDAExecutionProvider": "libonnxruntime_providers_cuda.so",
    "TensorrtExecutionProvider": "libonnxruntime_providers_tensorrt.so",
}


def load_problem(library: str | Path) -> str | None:
    """The loader's message when ``library`` (a path or soname) cannot load, else None."""
    try:
        ctypes.CDLL(str(library))
    except OSError as exc:
        return str(exc)
    return None


def driver_problem() -> str | None:
    """Why the NVIDIA driver cannot be used here (its library does not load), or None."""
    if not sys.platform.startswith("linux"):
        return None  # nvcuda.dll on Windows: the runtimes say so themselves
    problem = load_problem(DRIVER_LIBRARY)
    if problem is None:
        return None
    return f"the NVIDIA driver's {DRIVER_LIBRARY} does not load ({problem})"


def ort_provider_library(ort_file: str | Path, provider: str) -> Path | None:
    """The provider library of ``provider`` beside ``onnxruntime/__init__.py``, if any."""
    name = _ORT_PROVIDER_LIBRARIES.get(provider)
    if name is None or not sys.platform.startswith("linux"):
        return None
    path = Path(ort_file).resolve().parent / "capi" / name
    return path if path.is_file() else None
