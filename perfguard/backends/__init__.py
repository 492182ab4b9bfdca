"""Runtime backends, looked up by the name used in suites."""

from __future__ import annotations

from perfguard.backends.base import Backend, GenerativeBackend, Session
from perfguard.backends.onnxruntime_backend import OnnxRuntimeBackend
from perfguard.backends.ort_genai import OrtGenAIGeneration
from perfguard.backends.served import ServedBackend, ServedGeneration
from perfguard.backends.tensorrt_backend import TensorRTBackend
from perfguard.backends.torch_backend import TorchBackend
from perfguard.backends.torch_generate import TorchGeneration
from perfguard.core.errors import CellError
from perfguard.core.scenario import BACKENDS, GENERATIVE_BACKENDS, SERVER_BACKEND

__all__ = ["Backend", "GenerativeBackend", "Session", "generative", "get_backend"]


def get_backend(name: str) -> Backend:
    """The backend for a suite's ``backend:`` value; runtimes are imported lazily."""
    if name == "torch":
        return TorchBackend()
    if name == "onnxruntime":
        return OnnxRuntimeBackend()
    if name == "tensorrt":
        return TensorRTBackend()
    if name == SERVER_BACKEND:
        return ServedBackend()
    raise CellError(
        f"unknown backend {name!r}",
        expected=f"one of: {', '.join(BACKENDS)}",
        fix="set `backend:` to a supported runtime",
    )


def generative(backend: Backend) -> GenerativeBackend | None:
    """``backend``'s generation path (``generate:`` cells), or None where it has none."""
    made = _GENERATION.get(backend.name)
    return made() if made is not None else None


#: Each of ``core.scenario.GENERATIVE_BACKENDS``' generation path (the loader refuses a
#: generative cell on any other backend).
_GENERATION: dict[str, type[GenerativeBackend]] = {
    "torch": TorchGeneration,
    "onnxruntime": OrtGenAIGeneration,
    SERVER_BACKEND: ServedGeneration,
}
assert set(_GENERATION) == set(GENERATIVE_BACKENDS)
