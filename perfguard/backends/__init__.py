"""Runtime backends, looked up by the name used in suites."""

from __future__ import annotations

from perfguard.backends.base import Backend, Session
from perfguard.core.errors import CellError

__all__ = ["Backend", "Session", "get_backend"]


def get_backend(name: str) -> Backend:
    """The backend for a suite's ``backend:`` value; runtimes are imported lazily."""
    if name == "torch":
        from perfguard.backends.torch_backend import TorchBackend

        return TorchBackend()
    if name == "onnxruntime":
        from perfguard.backends.onnxruntime_backend import OnnxRuntimeBackend

        return OnnxRuntimeBackend()
    if name == "tensorrt":
        from perfguard.backends.tensorrt_backend import TensorRTBackend

        return TensorRTBackend()
    raise CellError(
        f"unknown backend {name!r}",
        expected="one of: torch, onnxruntime, tensorrt",
        fix="set `backend:` to a supported runtime",
    )
