"""A tiny ONNX Runtime cell (one Relu over a ``[2, 4]`` input) for backend tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
from onnx import helper

from perfguard.core.errors import Location
from perfguard.core.scenario import InputSpec, ModelSpec, Scenario

LOCATION = Location(Path("suite.yaml"), 12)


def relu_onnx(path: Path) -> Path:
    """Write a one-node Relu graph, ``x`` -> ``y``, both float ``[2, 4]``, to ``path``."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", 1, [2, 4])],
        [helper.make_tensor_value_info("y", 1, [2, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def relu_cell(tmp_path: Path, device: str = "cuda", **fields: Any) -> Scenario:
    """An onnxruntime cell of :func:`relu_onnx` in ``tmp_path`` on ``device``."""
    relu_onnx(tmp_path / "relu.onnx")
    model = ModelSpec(
        name="m",
        location=Location(tmp_path / "suite.yaml", 3),
        base_dir=tmp_path,
        onnx=Path("relu.onnx"),
        inputs=(InputSpec("x", (2, 4), seed=3),),
    )
    return Scenario(
        suite=tmp_path / "suite.yaml",
        name="s",
        cell_id="",
        model=model,
        location=LOCATION,
        backend="onnxruntime",
        device=device,
        **fields,
    )
