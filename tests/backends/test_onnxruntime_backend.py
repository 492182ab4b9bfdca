"""The ONNX Runtime backend: models, providers (proved), options and input checks."""

from __future__ import annotations

import textwrap
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.backends.onnxruntime_backend import (
    OnnxRuntimeBackend,
    OnnxRuntimeSession,
    split_ort_trace,
)
from perfguard.backends.torch_backend import TorchBackend
from perfguard.core.errors import CellError, InputError, Location, ModelError, ProviderFallbackError
from perfguard.core.scenario import InputSpec, ModelSpec, QuantSpec, Scenario
from perfguard.machine.env import u8s8_saturates
from perfguard.models.cache import cache_key_of
from perfguard.models.inputs import make_inputs
from perfguard.records.figures import RuntimeInfo

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
pytest.importorskip("torch")

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    class MLP(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc1 = nn.Linear(8, width)
            self.fc2 = nn.Linear(width, 4)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))


    class Conv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.head = nn.Linear(4, 2)

        def forward(self, image, unused=None):
            return self.head(torch.relu(self.conv(image)).mean(dim=(2, 3)))


    def mlp(width=32):
        torch.manual_seed(0)
        return MLP(width)


    def conv():
        torch.manual_seed(0)
        return Conv()


    def sequential():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    """
)
LOCATION = Location(Path("suite.yaml"), 8)
MLP_INPUTS = (InputSpec("x", (2, 8), "float32", seed=1),)


def model_spec(tmp_path: Path, **fields: Any) -> ModelSpec:
    (tmp_path / "pg_ort_models.py").write_text(MODELS)
    values: dict[str, Any] = {
        "name": "m",
        "location": Location(tmp_path / "suite.yaml", 3),
        "base_dir": tmp_path,
        "inputs": MLP_INPUTS,
    }
    if "onnx" not in fields:
        values["factory"] = "pg_ort_models:mlp"
    values.update(fields)
    return ModelSpec(**values)


def scenario(model: ModelSpec, **fields: Any) -> Scenario:
    return Scenario(
        suite=model.base_dir / "suite.yaml",
        name="s",
        cell_id="",
        model=model,
        location=LOCATION,
        backend=fields.pop("backend", "onnxruntime"),
        **fields,
    )


def open_ort(sc: Scenario, tmp_path: Path) -> tuple[OnnxRuntimeSession, dict[str, np.ndarray]]:
    feeds = make_inputs(sc.model)
    return OnnxRuntimeBackend().open(sc, feeds, tmp_path / "cache"), feeds


def relu_onnx(path: Path, shape: list[Any], elem: int = 1) -> Path:
    """A one-node model; ``shape`` may hold symbolic dims (strings)."""
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_factory_fp32_matches_torch(tmp_path: Path) -> None:
    model = model_spec(tmp_path)
    session, feeds = open_ort(scenario(model, threads=1), tmp_path)
    torch_session = TorchBackend().open(scenario(model, backend="torch"), feeds, tmp_path)
    try:
        assert session.synchronize is None
        (ort_out,) = session.to_numpy(session.run(session.prepare(feeds)))
        (torch_out,) = torch_session.to_numpy(torch_session.run(torch_session.prepare(feeds)))
        np.testing.assert_allclose(ort_out, torch_out, rtol=1e-4, atol=1e-4)
        assert ort_out.dtype == np.float32
        info = session.runtime_info
        assert info["onnxruntime"] == ort.__version__
        assert info["providers"][0] == "CPUExecutionProvider"
        assert info["graph_optimization_level"] == "all"
        assert info["intra_op_num_threads"] == 1 and info["inter_op_num_threads"] == 1
        path = Path(info["model_path"])
        assert path.parent == tmp_path / "cache" and path.is_file()
        assert info["cache_key"] == cache_key_of(path) and info["cache_key"]
    finally:
        session.close()
        torch_session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.run({})


def test_int8_runs_the_quantized_export(tmp_path: Path) -> None:
    model = model_spec(tmp_path, factory_kwargs=(("width", 256),))
    fp32, feeds = open_ort(scenario(model), tmp_path)
    int8, _ = open_ort(scenario(model, precision="int8"), tmp_path)
    try:
        fp32_path = Path(fp32.runtime_info["model_path"])
        int8_path = Path(int8.runtime_info["model_path"])
        assert int8_path != fp32_path and "int8" in int8_path.name
        assert int8_path.stat().st_size < fp32_path.stat().st_size
        assert int8.runtime_info["cache_key"] == cache_key_of(int8_path)
        (a,) = fp32.to_numpy(fp32.run(fp32.prepare(feeds)))
        (b,) = int8.to_numpy(int8.run(int8.prepare(feeds)))
        np.testing.assert_allclose(a, b, atol=0.05)
    finally:
        fp32.close()
        int8.close()


def test_onnx_file_model_and_dtype_cast(tmp_path: Path) -> None:
    path = relu_onnx(tmp_path / "relu.onnx", [2, 4])
    inputs = (InputSpec("x", (2, 4), "float64"),)  # suite says float64, model wants float
    model = model_spec(tmp_path, onnx=Path("relu.onnx"), inputs=inputs)
    session, feeds = open_ort(scenario(model), tmp_path)
    try:
        prepared = session.prepare(feeds)
        assert prepared["x"].dtype == np.float32 and prepared["x"].flags.c_contiguous
        (out,) = session.to_numpy(session.run(prepared))
        np.testing.assert_allclose(out, np.maximum(feeds["x"], 0), rtol=1e-6)
        assert session.runtime_info["model_path"] == str(path)
        assert session.runtime_info["cache_key"] is None
    finally:
        session.close()


def test_options_reach_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    relu_onnx(tmp_path / "relu.onnx", [2, 4])
    model = model_spec(tmp_path, onnx=Path("relu.onnx"), inputs=(InputSpec("x", (2, 4)),))
    seen: list[Any] = []
    real = ort.InferenceSession

    def spy(path: str, sess_options: Any = None, providers: Any = None) -> Any:
        seen.append((sess_options, providers))
        return real(path, sess_options=sess_options, providers=providers)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    levels = ort.GraphOptimizationLevel
    expected = {
        "disable": levels.ORT_DISABLE_ALL,
        "basic": levels.ORT_ENABLE_BASIC,
        "extended": levels.ORT_ENABLE_EXTENDED,
        "all": levels.ORT_ENABLE_ALL,
    }
    for name, level in expected.items():
        seen.clear()
        session, _ = open_ort(scenario(model, graph_optimization_level=name, threads=2), tmp_path)
        session.close()
        options, providers = seen[0]
        assert options.graph_optimization_level == level
        assert options.intra_op_num_threads == 2 and options.inter_op_num_threads == 1
        assert providers == ["CPUExecutionProvider"]


def test_bf16_is_a_cell_error(tmp_path: Path) -> None:
    with pytest.raises(CellError, match="precision bf16") as info:
        open_ort(scenario(model_spec(tmp_path), precision="bf16"), tmp_path)
    assert info.value.fix is not None and "torch backend" in info.value.fix


def test_fp16_runs_the_converted_export(tmp_path: Path) -> None:
    model = model_spec(tmp_path)
    fp32, feeds = open_ort(scenario(model), tmp_path)
    fp16, _ = open_ort(scenario(model, precision="fp16"), tmp_path)
    try:
        info = fp16.runtime_info
        path = Path(info["model_path"])
        assert info["precision"] == "fp16" and "-fp16-" in path.name
        assert path != Path(fp32.runtime_info["model_path"]) and path.parent == tmp_path / "cache"
        assert info["cache_key"] == cache_key_of(path) == info["fp16"]["cache_key"]
        assert info["fp16"]["keep_io_types"] is True
        prepared = fp16.prepare(feeds)
        assert prepared["x"].dtype == np.float32  # float32 feeds, as at fp32
        (a,) = fp32.to_numpy(fp32.run(fp32.prepare(feeds)))
        (b,) = fp16.to_numpy(fp16.run(prepared))
        assert b.dtype == np.float32
        np.testing.assert_allclose(a, b, atol=1e-2)
        weights = [t for t in onnx.load(str(path)).graph.initializer if t.data_type != 7]
        assert weights and all(t.data_type == onnx.TensorProto.FLOAT16 for t in weights)
    finally:
        fp32.close()
        fp16.close()


def test_fp16_of_an_onnx_file(tmp_path: Path) -> None:
    source = relu_onnx(tmp_path / "relu.onnx", [2, 4])
    model = model_spec(tmp_path, onnx=Path("relu.onnx"), inputs=(InputSpec("x", (2, 4)),))
    session, feeds = open_ort(scenario(model, precision="fp16"), tmp_path)
    try:
        path = Path(session.runtime_info["model_path"])
        assert path != source and path.name.startswith("relu-fp16-")
        assert session.runtime_info["cache_key"] == cache_key_of(path)
        (out,) = session.to_numpy(session.run(session.prepare(feeds)))
        np.testing.assert_allclose(out, np.maximum(feeds["x"], 0), atol=1e-2)
    finally:
        session.close()
    assert sorted(p.name for p in tmp_path.glob("relu*")) == ["relu.onnx"]


def calibration_feeds(count: int = 4) -> list[dict[str, np.ndarray]]:
    return [
        {"x": np.random.default_rng(100 + i).standard_normal((2, 8)).astype(np.float32)}
        for i in range(count)
    ]


def test_int8_dynamic_runtime_info_names_the_preset(tmp_path: Path) -> None:
    spec = QuantSpec(name="pc", per_channel=True)
    session, _ = open_ort(
        scenario(model_spec(tmp_path), precision="int8", quantization=spec), tmp_path
    )
    try:
        quant = session.runtime_info["quantization"]
        assert quant["name"] == "pc" and quant["mode"] == "dynamic"
        assert quant["per_channel"] is True
        # reduce_range left to auto: as this CPU's uint8 x int8 kernels need, and said so.
        assert quant["reduce_range"] is u8s8_saturates() and quant["reduce_range_auto"] is True
        assert quant["weight_type"] == "qint8" and "calibration" not in quant
        assert quant["cache_key"] == session.runtime_info["cache_key"]
        # What the quantizer did, read from the quantized graph.
        applied = RuntimeInfo(backend=session.runtime_info).quantization
        assert applied is not None and applied.tool.endswith("quantize_dynamic")
        assert sum(applied.quantized.values()) >= 1 and applied.ops["DynamicQuantizeLinear"] >= 1
    finally:
        session.close()


def test_int8_static_calibrates_on_the_given_feeds(tmp_path: Path) -> None:
    model = model_spec(tmp_path)
    spec = QuantSpec(name="st", mode="static", calibration="minmax", calibration_samples=3)
    sc = scenario(model, precision="int8", quantization=spec)
    feeds = make_inputs(model)
    backend = OnnxRuntimeBackend()
    fp32 = backend.open(scenario(model), feeds, tmp_path / "cache")
    # Static ranges clip what calibration never saw: calibrate on the timing feeds too.
    calibration = [dict(feeds), *calibration_feeds()]
    int8 = backend.open(sc, feeds, tmp_path / "cache", calibration=calibration)
    try:
        info = int8.runtime_info
        path = Path(info["model_path"])
        assert "-int8-static-" in path.name and info["cache_key"] == cache_key_of(path)
        quant = info["quantization"]
        assert quant["mode"] == "static" and quant["calibration"] == "minmax"
        assert quant["calibration_inputs"] == 3 and quant["activation_type"] == "quint8"
        assert quant["cache_key"] == info["cache_key"]
        applied = RuntimeInfo(backend=info).quantization
        assert applied is not None and applied.tool.endswith("quantize_static, QDQ")
        assert sum(applied.quantized.values()) >= 1 and applied.ops["QuantizeLinear"] >= 1
        (a,) = fp32.to_numpy(fp32.run(fp32.prepare(feeds)))
        (b,) = int8.to_numpy(int8.run(int8.prepare(feeds)))
        np.testing.assert_allclose(a, b, atol=0.05)
    finally:
        fp32.close()
        int8.close()


def test_int8_static_feeds_only_the_exported_inputs(tmp_path: Path) -> None:
    inputs = (InputSpec("image", (1, 3, 8, 8)), InputSpec("unused", (1,), "int64"))
    model = model_spec(tmp_path, factory="pg_ort_models:conv", inputs=inputs)
    spec = QuantSpec(mode="static", calibration="entropy", per_channel=True)
    rng = np.random.default_rng(5)
    calibration = [
        {"image": rng.standard_normal((1, 3, 8, 8)), "unused": np.zeros(1, np.int64)}
        for _ in range(3)
    ]  # float64 images: cast to the model's float32
    feeds = make_inputs(model)
    sc = scenario(model, precision="int8", quantization=spec)
    session = OnnxRuntimeBackend().open(sc, feeds, tmp_path / "cache", calibration=calibration)
    try:
        assert session.runtime_info["unused_inputs"] == ["unused"]
        (out,) = session.to_numpy(session.run(session.prepare(feeds)))
        assert out.shape == (1, 2) and np.isfinite(out).all()
    finally:
        session.close()


def test_int8_static_without_calibration_fails_before_exporting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    def no_export(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a static preset without calibration must fail before exporting")

    monkeypatch.setattr(torch.onnx, "export", no_export)
    sc = scenario(model_spec(tmp_path), precision="int8", quantization=QuantSpec(mode="static"))
    with pytest.raises(CellError, match="needs calibration data") as info:
        open_ort(sc, tmp_path)
    assert info.value.location == LOCATION
    assert info.value.fix is not None and "accuracy: {inputs: ...}" in info.value.fix


class _Untouchable(list[dict[str, np.ndarray]]):
    """Calibration feeds that record every read of them."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        super().__init__(feeds)
        self.reads: list[str] = []

    def __iter__(self) -> Any:
        self.reads.append("iter")
        return super().__iter__()

    def __len__(self) -> int:
        self.reads.append("len")
        return super().__len__()

    def __getitem__(self, index: Any) -> Any:
        self.reads.append("getitem")
        return super().__getitem__(index)


def test_torch_backend_ignores_calibration(tmp_path: Path) -> None:
    # torch int8 is dynamic quantization: calibration inputs are never read, and the
    # session (its outputs, its runtime record) is the one opened without them.
    model = model_spec(tmp_path)
    feeds = make_inputs(model)
    sc = scenario(model, backend="torch", precision="int8")
    calibration = _Untouchable(calibration_feeds())
    outputs, infos = [], []
    for given in (None, calibration):
        session = TorchBackend().open(sc, feeds, tmp_path, calibration=given)
        try:
            outputs.append(session.to_numpy(session.run(session.prepare(feeds))))
            infos.append(session.runtime_info)
        finally:
            session.close()
    assert calibration.reads == []
    assert infos[0] == infos[1]
    assert len(outputs[0]) == len(outputs[1]) == 1
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])


def test_unknown_device(tmp_path: Path) -> None:
    with pytest.raises(CellError, match="unknown device"):
        open_ort(scenario(model_spec(tmp_path), device="gpu"), tmp_path)


def test_missing_onnx_file(tmp_path: Path) -> None:
    model = model_spec(tmp_path, onnx=Path("nowhere.onnx"))
    with pytest.raises(ModelError, match="not found") as info:
        open_ort(scenario(model), tmp_path)
    assert info.value.location == model.location


def test_cuda_on_a_cpu_only_onnxruntime_fails_before_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("no session may be created")

    monkeypatch.setattr(ort, "InferenceSession", never)
    with pytest.raises(ProviderFallbackError) as info:
        open_ort(scenario(model_spec(tmp_path), device="cuda"), tmp_path)
    text = str(info.value)
    assert "CUDAExecutionProvider" in text and "only offers CPUExecutionProvider" in text
    assert info.value.fix is not None and "onnxruntime-gpu" in info.value.fix
    assert info.value.location == LOCATION


class FakeNodeArg:
    def __init__(self, name: str, shape: list[Any], type_: str = "tensor(float)") -> None:
        self.name, self.shape, self.type = name, shape, type_


def fake_onnxruntime(actual: list[str], created: list[dict[str, Any]]) -> types.ModuleType:
    """Just the surface the backend touches, with a session that fell back to the CPU."""
    fake = types.ModuleType("onnxruntime")
    fake.__version__ = "9.9.9-fake"  # type: ignore[attr-defined]
    fake.get_available_providers = lambda: [  # type: ignore[attr-defined]
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    fake.GraphOptimizationLevel = types.SimpleNamespace(  # type: ignore[attr-defined]
        ORT_DISABLE_ALL=0, ORT_ENABLE_BASIC=1, ORT_ENABLE_EXTENDED=2, ORT_ENABLE_ALL=99
    )
    fake.SessionOptions = types.SimpleNamespace  # type: ignore[attr-defined]

    class InferenceSession:
        def __init__(self, path: str, sess_options: Any = None, providers: Any = None) -> None:
            created.append({"path": path, "providers": providers})

        def get_providers(self) -> list[str]:
            return list(actual)

        def get_inputs(self) -> list[FakeNodeArg]:
            return [FakeNodeArg("x", [2, 4])]

        def run(self, names: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            return [feeds["x"]]

    fake.InferenceSession = InferenceSession  # type: ignore[attr-defined]
    return fake


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        ((InputSpec("input", (2, 4)),), "the model has no input(s) input"),
        ((InputSpec("input", (2, 4)),), "no suite input for model input 'x'"),
        ((InputSpec("x", (2, 5)),), "'x' has shape [2, 5], the model wants [2, 4]"),
        ((InputSpec("x", (2, 4, 1)),), "'x' has shape [2, 4, 1]"),
        ((InputSpec("x", (2, 4), "int64"),), "'x' is int64, the model wants float32"),
    ],
)
def test_inputs_that_do_not_match_the_model(
    tmp_path: Path, inputs: tuple[InputSpec, ...], words: str
) -> None:
    relu_onnx(tmp_path / "relu.onnx", [2, 4])
    model = model_spec(tmp_path, onnx=Path("relu.onnx"), inputs=inputs)
    with pytest.raises(InputError) as info:
        open_ort(scenario(model), tmp_path)
    text = str(info.value)
    assert words in text
    assert "model inputs: x float32[2, 4]" in text and "suite inputs: " in text
    assert info.value.location == model.location


def test_factory_input_names_are_checked_before_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    def no_export(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a mismatch must be reported before exporting")

    monkeypatch.setattr(torch.onnx, "export", no_export)
    inputs = (InputSpec("pixels", (1, 3, 8, 8)), InputSpec("unused", (1,)))
    model = model_spec(tmp_path, factory="pg_ort_models:conv", inputs=inputs)
    with pytest.raises(InputError) as info:
        open_ort(scenario(model), tmp_path)
    text = str(info.value)
    assert "no parameter(s) pixels" in text and "model parameters: image, unused" in text
    assert info.value.location == model.location


def test_symbolic_dims_accept_any_size(tmp_path: Path) -> None:
    relu_onnx(tmp_path / "dyn.onnx", ["batch", 4])
    for batch in (1, 7):
        model = model_spec(tmp_path, onnx=Path("dyn.onnx"), inputs=(InputSpec("x", (batch, 4)),))
        session, feeds = open_ort(scenario(model), tmp_path)
        (out,) = session.to_numpy(session.run(session.prepare(feeds)))
        assert out.shape == (batch, 4)
        session.close()
    model = model_spec(tmp_path, onnx=Path("dyn.onnx"), inputs=(InputSpec("x", (3, 5)),))
    with pytest.raises(InputError, match=r"wants \['\?', 4\]"):
        open_ort(scenario(model), tmp_path)


def test_exported_factory_tolerates_inputs_forward_ignores(tmp_path: Path) -> None:
    inputs = (InputSpec("image", (1, 3, 8, 8)), InputSpec("unused", (1,)))
    model = model_spec(tmp_path, factory="pg_ort_models:conv", inputs=inputs)
    session, feeds = open_ort(scenario(model), tmp_path)
    try:
        assert list(session.prepare(feeds)) == ["image"]
        assert session.runtime_info["unused_inputs"] == ["unused"]
        (out,) = session.to_numpy(session.run(session.prepare(feeds)))
        assert out.shape == (1, 2)
    finally:
        session.close()


def test_lone_input_exports_a_sequential_under_the_suite_name(tmp_path: Path) -> None:
    model = model_spec(tmp_path, factory="pg_ort_models:sequential")
    session, feeds = open_ort(scenario(model), tmp_path)
    torch_session = TorchBackend().open(scenario(model, backend="torch"), feeds, tmp_path)
    try:
        exported = onnx.load(session.runtime_info["model_path"])
        assert [i.name for i in exported.graph.input] == ["x"]
        (a,) = session.to_numpy(session.run(session.prepare(feeds)))
        (b,) = torch_session.to_numpy(torch_session.run(torch_session.prepare(feeds)))
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    finally:
        session.close()
        torch_session.close()


def test_float16_outputs_become_float32(tmp_path: Path) -> None:
    relu_onnx(tmp_path / "half.onnx", [3], elem=10)  # TensorProto.FLOAT16
    model = model_spec(tmp_path, onnx=Path("half.onnx"), inputs=(InputSpec("x", (3,)),))
    session, feeds = open_ort(scenario(model), tmp_path)
    try:
        prepared = session.prepare(feeds)
        assert prepared["x"].dtype == np.float16
        (out,) = session.to_numpy(session.run(prepared))
        assert out.dtype == np.float32
    finally:
        session.close()


# --- profiling ----------------------------------------------------------------------------
def test_profiling_runs_in_a_twin_with_the_same_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    relu_onnx(tmp_path / "relu.onnx", [2, 4])
    model = model_spec(tmp_path, onnx=Path("relu.onnx"), inputs=(InputSpec("x", (2, 4)),))
    seen: list[Any] = []
    real = ort.InferenceSession

    def spy(path: str, sess_options: Any = None, providers: Any = None) -> Any:
        seen.append((path, sess_options, providers))
        return real(path, sess_options=sess_options, providers=providers)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    sc = scenario(model, graph_optimization_level="basic", threads=2)
    session, feeds = open_ort(sc, tmp_path)
    try:
        prepared = session.prepare(feeds)
        measured = session._session
        profiler = session.profiler(prepared)
        (_, options, _), (path, twin_options, providers) = seen
        assert not options.enable_profiling  # the measured session is never profiled
        assert twin_options.enable_profiling and path == str(tmp_path / "relu.onnx")
        assert twin_options.graph_optimization_level == options.graph_optimization_level
        assert twin_options.intra_op_num_threads == 2 and providers == ["CPUExecutionProvider"]
        folder = Path(twin_options.profile_file_prefix).parent
        profiler.request(record=False)
        profiler.request(record=True)
        recorded = profiler.finish()
        assert not folder.exists()  # the profile file and its folder are gone
        assert recorded.profiler == "onnxruntime" and len(recorded.nodes) == 1
        assert recorded.node_info and all(
            info == ("Relu", "CPUExecutionProvider") for info in recorded.node_info.values()
        )
        assert session._session is measured
        (out,) = session.to_numpy(session.run(prepared))
        np.testing.assert_allclose(out, np.maximum(feeds["x"], 0), rtol=1e-6)
    finally:
        session.close()


def test_ort_trace_is_split_into_recorded_requests() -> None:
    def run(ts: int, dur: int) -> dict[str, Any]:
        return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur, "ph": "X"}

    def node(name: str, ts: int, dur: int, op: str = "MatMul") -> dict[str, Any]:
        args = {"op_name": op, "provider": "CPUExecutionProvider"}
        return {"cat": "Node", "name": name, "ts": ts, "dur": dur, "args": args}

    events = [
        {"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 5},
        run(10, 10),  # warm: not recorded
        node("/a/MatMul_kernel_time", 11, 4),
        run(30, 10),
        node("/a/MatMul_fence_before", 31, 1),  # fences repeat the node: not counted
        node("/a/MatMul_kernel_time", 31, 3),
        node("/loop/body/Add_kernel_time", 35, 1, "Add"),  # a Loop body: twice in a run
        node("/loop/body/Add_kernel_time", 37, 2, "Add"),
        run(50, 10),
        node("/a/MatMul_kernel_time", 51, 5),
        node("/late_kernel_time", 70, 9),  # outside any run
    ]
    nodes, op_types, info = split_ort_trace(events, [False, True, True])
    assert nodes == ({"/a/MatMul": 3000.0, "/loop/body/Add": 3000.0}, {"/a/MatMul": 5000.0})
    assert op_types == ({"MatMul": 3000.0, "Add": 3000.0}, {"MatMul": 5000.0})
    assert info == {
        "/a/MatMul": ("MatMul", "CPUExecutionProvider"),
        "/loop/body/Add": ("Add", "CPUExecutionProvider"),
    }
