"""The backend registry: names map to runtimes, and a missing runtime says how to install it."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from perfguard.backends import get_backend
from perfguard.backends.onnxruntime_backend import OnnxRuntimeBackend
from perfguard.backends.torch_backend import TorchBackend
from perfguard.core.errors import CellError


@pytest.mark.parametrize(
    ("name", "cls", "module", "hint"),
    [
        (
            "torch",
            TorchBackend,
            "torch",
            "PyTorch is not installed (pip install 'perfguard[torch]')",
        ),
        (
            "onnxruntime",
            OnnxRuntimeBackend,
            "onnxruntime",
            "ONNX Runtime is not installed (pip install 'perfguard[onnx]')",
        ),
    ],
)
def test_backend_availability_and_install_hint(
    monkeypatch: pytest.MonkeyPatch, name: str, cls: type, module: str, hint: str
) -> None:
    backend = get_backend(name)
    assert isinstance(backend, cls)
    assert backend.name == name
    assert backend.unavailable_reason() is None
    real = importlib.util.find_spec

    def find_spec(wanted: str, *args: Any, **kwargs: Any) -> Any:
        return None if wanted == module else real(wanted, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert backend.unavailable_reason() == hint


def test_unknown_backend_names_the_supported_ones() -> None:
    with pytest.raises(CellError, match="one of: torch, onnxruntime"):
        get_backend("tensorflow")


@pytest.mark.parametrize("name", ["torch", "onnxruntime", "tensorrt"])
def test_exactly_the_generative_backends_have_a_generation_path(name: str) -> None:
    from perfguard.backends import generative
    from perfguard.core.scenario import GENERATIVE_BACKENDS

    assert (generative(get_backend(name)) is not None) == (name in GENERATIVE_BACKENDS)
