"""The TensorRT backend against small fakes of ``tensorrt`` and the CUDA surface
(tests/helpers/fake_tensorrt.py).

No GPU and no TensorRT are needed: ``tensorrt_backend._load_tensorrt`` returns
the fake module built by ``fake_trt`` and ``tensorrt_backend._load_cuda`` a
``FakeCuda`` (``TorchCuda`` on the CPU with fake streams), so the device
buffers are real CPU torch tensors whose ``data_ptr()`` the fakes can read.
The fake "serialized engine" is JSON of the network's inputs, outputs and
profile, so cache hits deserialize what the fake build wrote.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfguard.backends import tensorrt_backend
from perfguard.backends import tensorrt_build as build
from perfguard.backends.tensorrt_backend import (
    UNKNOWN_LAYER_TYPE,
    TensorRTBackend,
    TensorRTSession,
    layer_types,
)
from perfguard.backends.tensorrt_build import EngineSpec
from perfguard.core.errors import CellError, InputError, Location, ModelError
from perfguard.core.scenario import (
    BatchingSpec,
    GpuSpec,
    InputSpec,
    LoadSpec,
    ModelSpec,
    QuantSpec,
    Scenario,
    TensorRTSpec,
)
from perfguard.measure.profiling import PROFILE_WARM_REQUESTS, profile_session
from perfguard.models.cache import quiet
from perfguard.models.inputs import make_inputs
from tests.helpers.fake_tensorrt import (
    DataType,
    FakeCuda,
    Tensor,
    fake_trt,
)

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

LOCATION = Location(Path("suite.yaml"), 8)


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """Install a fake tensorrt 10.3 and an H200; ``fakes.use(...)`` swaps either."""
    state = types.SimpleNamespace(trt=fake_trt(), cuda=FakeCuda())

    def use(trt: Any = None, cuda: FakeCuda | None = None) -> None:
        state.trt = trt if trt is not None else state.trt
        state.cuda = cuda if cuda is not None else state.cuda

    state.use = use
    monkeypatch.setattr(tensorrt_backend, "_load_tensorrt", lambda: state.trt)
    monkeypatch.setattr(tensorrt_backend, "_load_cuda", lambda scenario: state.cuda)
    return state


def scenario(tmp_path: Path, **fields: Any) -> Scenario:
    """A cuda cell of a one-input ONNX model (the fake parser ignores its content)."""
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", 1, ["batch", 8])],
        [helper.make_tensor_value_info("y", 1, ["batch", 8])],
    )
    onnx.save(helper.make_model(graph), tmp_path / "m.onnx")
    model_fields: dict[str, Any] = {
        "name": "m",
        "location": Location(tmp_path / "suite.yaml", 3),
        "base_dir": tmp_path,
        "onnx": Path("m.onnx"),
        "inputs": (InputSpec("x", (2, 8), seed=1),),
        **fields.pop("model", {}),
    }
    model = ModelSpec(**model_fields)
    trt_spec = fields.pop("trt", {})
    return Scenario(
        suite=tmp_path / "suite.yaml",
        name="s",
        cell_id="",
        model=model,
        location=LOCATION,
        backend="tensorrt",
        device=fields.pop("device", "cuda"),
        gpu=GpuSpec(tensorrt=TensorRTSpec(**trt_spec)),
        **fields,
    )


def open_trt(sc: Scenario, tmp_path: Path, **kwargs: Any) -> TensorRTSession:
    return TensorRTBackend().open(sc, make_inputs(sc.model), tmp_path / "cache", **kwargs)


def calibration_feeds(count: int) -> list[dict[str, np.ndarray]]:
    return [{"x": np.full((2, 8), i + 0.5, dtype=np.float32)} for i in range(count)]


# -- building ----------------------------------------------------------------------------
def test_fp32_build_records_settings(tmp_path: Path, fakes: Any) -> None:
    session = open_trt(scenario(tmp_path), tmp_path)
    (config,) = fakes.trt.configs
    assert fakes.trt.network_flags == [0]  # TensorRT 10: explicit batch is the default
    assert config.flags == set() and config.pools == {"WORKSPACE": 1024 << 20}
    assert config.builder_optimization_level == 3  # left at TensorRT's default
    assert config.profiles[0].shapes == {"x": ((2, 8), (2, 8), (2, 8))}
    assert config.int8_calibrator is None
    info = session.runtime_info
    assert info["tensorrt"] == "10.3.0" and info["gpu"] == "NVIDIA H200"
    assert info["compute_capability"] == "9.0" and info["precision"] == "fp32"
    assert info["built"] is True and isinstance(info["build_s"], float)
    assert info["profile"] == {"x": {"min": [2, 8], "opt": [2, 8], "max": [2, 8]}}
    assert info["workspace_mib"] == 1024 and info["model_source"] == "onnx file"
    engine = Path(info["engine_path"])
    assert engine.is_file() and engine.parent == tmp_path / "cache"
    assert engine.name == f"m-{info['cache_key']}.engine"
    sidecar = json.loads(engine.with_suffix(".json").read_text())
    assert sidecar["tensorrt"] == "10.3.0" and sidecar["gpu"] == "NVIDIA H200"
    assert sidecar["capability"] == [9, 0] and sidecar["precision"] == "fp32"
    assert sidecar["key"].startswith(info["cache_key"])
    session.close()


@pytest.mark.parametrize(
    ("precision", "flags"), [("fp16", {"FP16"}), ("bf16", {"BF16"}), ("int8", {"INT8"})]
)
def test_precision_sets_its_builder_flag(
    tmp_path: Path, fakes: Any, precision: str, flags: set[str]
) -> None:
    session = open_trt(
        scenario(tmp_path, precision=precision), tmp_path, calibration=calibration_feeds(2)
    )
    assert fakes.trt.configs[-1].flags == flags
    assert (fakes.trt.configs[-1].int8_calibrator is not None) == (precision == "int8")
    session.close()


def test_tensorrt_8_explicit_batch_and_no_bf16(tmp_path: Path, fakes: Any) -> None:
    fakes.use(fake_trt("8.6.1", bf16=False))
    open_trt(scenario(tmp_path), tmp_path).close()
    assert fakes.trt.network_flags == [1 << 0]  # EXPLICIT_BATCH
    with pytest.raises(CellError, match=r"bf16 .*TensorRT 8\.6\.1") as info:
        open_trt(scenario(tmp_path, precision="bf16"), tmp_path)
    assert "fp16" in str(info.value.fix)


def linear_norm_onnx(tmp_path: Path) -> Path:
    """A Linear and a LayerNorm exported at opset 17 (LayerNormalization), input x [2, 8]."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).eval()
    path = tmp_path / "ln.onnx"
    with quiet():  # the exporter's deprecation notice is not ours
        torch.onnx.export(
            module, (torch.zeros(2, 8),), str(path), dynamo=False, opset_version=17,
            input_names=["x"], output_names=["y"],
        )  # fmt: skip
    return path


def _initializer_types(path: Path) -> dict[str, int]:
    model = onnx.load(str(path))
    return {init.name: init.data_type for init in model.graph.initializer}


def test_tensorrt_11_fp16_builds_a_strongly_typed_network_from_an_fp16_graph(
    tmp_path: Path, fakes: Any
) -> None:
    """TensorRT 11 has no BuilderFlag.FP16: the precision must be in the graph."""
    fakes.use(fake_trt("11.4.0"))
    linear_norm_onnx(tmp_path)
    sc = scenario(tmp_path, precision="fp16", model={"onnx": Path("ln.onnx")})
    session = open_trt(sc, tmp_path)
    (config,) = fakes.trt.configs
    strongly_typed = int(fakes.trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    assert fakes.trt.network_flags == [1 << strongly_typed]
    assert config.flags == set() and config.profiling_verbosity.name == "DETAILED"
    info = session.runtime_info
    assert info["precision_build"] == "strongly typed network, graph converted to fp16"
    (converted,) = (tmp_path / "cache").glob("ln-fp16-*.onnx")
    assert info["onnx_sha256"] == hashlib.sha256(converted.read_bytes()).hexdigest()[:16]
    model = onnx.load(str(converted))
    types_ = _initializer_types(converted)
    matmul_weights = [n.input[1] for n in model.graph.node if n.op_type in ("MatMul", "Gemm")]
    assert matmul_weights and all(types_[w] == onnx.TensorProto.FLOAT16 for w in matmul_weights)
    (norm,) = [n for n in model.graph.node if n.op_type == "LayerNormalization"]
    assert types_[norm.input[1]] == onnx.TensorProto.FLOAT  # kept in fp32
    session.close()


def test_tensorrt_11_fp16_keeps_what_the_suite_names_in_float32(tmp_path: Path, fakes: Any) -> None:
    """`keep_fp32:` replaces the default (LayerNormalization) with the suite's own list:
    here the output head's node by name, the LayerNorm converted with the rest."""
    fakes.use(fake_trt("11.4.0"))
    source = onnx.load(str(linear_norm_onnx(tmp_path)))
    (head,) = [n.name for n in source.graph.node if n.op_type in ("MatMul", "Gemm")]
    sc = scenario(tmp_path, precision="fp16", model={"onnx": Path("ln.onnx")}, keep_fp32=(head,))
    open_trt(sc, tmp_path).close()
    (converted,) = (tmp_path / "cache").glob("ln-fp16-*.onnx")
    model, types_ = onnx.load(str(converted)), _initializer_types(converted)
    (gemm,) = [n for n in model.graph.node if n.name == head]
    assert types_[gemm.input[1]] == onnx.TensorProto.FLOAT  # the named node kept
    (norm,) = [n for n in model.graph.node if n.op_type == "LayerNormalization"]
    assert types_[norm.input[1]] == onnx.TensorProto.FLOAT16  # no longer the default


def test_tensorrt_11_int8_builds_from_symmetric_qdq_nodes(tmp_path: Path, fakes: Any) -> None:
    fakes.use(fake_trt("11.4.0"))
    linear_norm_onnx(tmp_path)
    sc = scenario(tmp_path, precision="int8", model={"onnx": Path("ln.onnx")})
    session = open_trt(sc, tmp_path, calibration=calibration_feeds(4))
    (config,) = fakes.trt.configs
    assert config.flags == set() and config.int8_calibrator is None
    assert fakes.trt.network_flags == [1 << 0] and not fakes.trt.calibration
    (quantized,) = (tmp_path / "cache").glob("ln-int8-static-*.onnx")
    model = onnx.load(str(quantized))
    ops = [n.op_type for n in model.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    zero_points = [inits[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert zero_points and all(z.dtype == np.int8 and not z.any() for z in zero_points)
    assert "explicit Q/DQ" in session.runtime_info["int8"]["quantization"]
    session.close()


def test_tensorrt_11_bf16_takes_a_suite_graph_as_it_is_and_refuses_an_export(
    tmp_path: Path, fakes: Any
) -> None:
    fakes.use(fake_trt("11.4.0"))
    session = open_trt(scenario(tmp_path, precision="bf16"), tmp_path)
    assert session.runtime_info["precision_build"] == (
        "strongly typed network, the graph's own types"
    )
    assert fakes.trt.network_flags == [1 << 0] and fakes.trt.configs[0].flags == set()
    session.close()
    caps = build.capabilities(fake_trt("11.4.0"))
    with pytest.raises(CellError, match=r"TensorRT 11\.4\.0 takes bf16 from the graph") as info:
        build.precision_plan(caps, "bf16", user_graph=False, location=LOCATION)
    assert "ModelOpt AutoCast" in str(info.value.fix) and "fp16" in str(info.value.fix)


def test_fp32_networks_have_no_flags_on_tensorrt_10_and_11(tmp_path: Path, fakes: Any) -> None:
    for version in ("10.16.1", "11.4.0"):
        fakes.use(fake_trt(version))
        open_trt(scenario(tmp_path), tmp_path).close()
        assert fakes.trt.network_flags == [0], version
        assert fakes.trt.configs[0].profiling_verbosity.name == "DETAILED"


def test_workspace_and_optimization_level(tmp_path: Path, fakes: Any) -> None:
    sc = scenario(tmp_path, trt={"workspace_mib": 256, "builder_optimization_level": 5})
    session = open_trt(sc, tmp_path)
    (config,) = fakes.trt.configs
    assert config.pools == {"WORKSPACE": 256 << 20} and config.builder_optimization_level == 5
    assert session.runtime_info["builder_optimization_level"] == 5
    with pytest.raises(CellError, match="builder_optimization_level 7"):
        open_trt(scenario(tmp_path, trt={"builder_optimization_level": 7}), tmp_path)


def test_explicit_profile_and_shapes_outside_it(tmp_path: Path, fakes: Any) -> None:
    sc = scenario(tmp_path, trt={"profiles": (("x", (1, 8), (4, 8), (16, 8)),)})
    session = open_trt(sc, tmp_path)
    assert fakes.trt.configs[0].profiles[0].shapes == {"x": ((1, 8), (4, 8), (16, 8))}
    assert session.runtime_info["profile"]["x"] == {"min": [1, 8], "opt": [4, 8], "max": [16, 8]}
    session.run(session.prepare({"x": np.zeros((16, 8), np.float32)}))
    with pytest.raises(InputError) as info:
        session.prepare({"x": np.zeros((32, 8), np.float32)})
    text = str(info.value)
    assert "'x'" in text and "[32, 8]" in text and "min [1, 8]" in text and "max [16, 8]" in text
    assert "profiles" in str(info.value.fix)
    session.close()
    narrow = scenario(tmp_path, trt={"profiles": (("x", (4, 8), (4, 8), (8, 8)),)})
    with pytest.raises(InputError, match=r"'x' has shape \[2, 8\], outside"):
        open_trt(narrow, tmp_path)
    inverted = scenario(tmp_path, trt={"profiles": (("x", (8, 8), (4, 8), (2, 8)),)})
    with pytest.raises(InputError, match=r"`profiles` 'x' needs 1 <= min <= opt <= max"):
        open_trt(inverted, tmp_path)


def test_batching_widens_the_default_profile(tmp_path: Path, fakes: Any) -> None:
    load = LoadSpec(mode="closed", level=2, batching=BatchingSpec(max_batch=4, max_wait_ms=1.0))
    session = open_trt(scenario(tmp_path, load=load), tmp_path)
    assert fakes.trt.configs[0].profiles[0].shapes == {"x": ((2, 8), (2, 8), (8, 8))}
    session.prepare({"x": np.zeros((8, 8), np.float32)})
    session.close()


def test_model_inputs_must_match(tmp_path: Path, fakes: Any) -> None:
    fakes.trt.inputs.append(Tensor(name="mask", shape=(-1, 8), dtype=DataType.INT64))
    with pytest.raises(InputError, match="no suite input for model input 'mask'"):
        open_trt(scenario(tmp_path), tmp_path)
    fakes.trt.inputs[1:] = []
    fakes.trt.inputs[0] = Tensor(name="x", shape=(-1, 6), dtype=DataType.FLOAT)
    with pytest.raises(InputError, match="fixed dimensions"):
        open_trt(scenario(tmp_path), tmp_path)
    fakes.trt.inputs[0] = Tensor(name="x", shape=(-1, 8), dtype=DataType.INT32)
    with pytest.raises(InputError, match="'x' is float32, the engine wants int32"):
        open_trt(scenario(tmp_path), tmp_path)


# -- the engine cache ------------------------------------------------------------------
def test_second_open_loads_the_cached_engine(tmp_path: Path, fakes: Any) -> None:
    first = open_trt(scenario(tmp_path), tmp_path)
    first.close()
    second = open_trt(scenario(tmp_path), tmp_path)
    assert len(fakes.trt.configs) == 1  # no second build
    assert second.runtime_info["built"] is False and second.runtime_info["build_s"] == 0.0
    assert second.runtime_info["engine_path"] == first.runtime_info["engine_path"]
    assert second.runtime_info["profile"] == first.runtime_info["profile"]
    second.close()


def test_other_settings_get_other_engines(tmp_path: Path, fakes: Any) -> None:
    paths = {open_trt(scenario(tmp_path), tmp_path).runtime_info["engine_path"]}
    paths.add(open_trt(scenario(tmp_path, precision="fp16"), tmp_path).runtime_info["engine_path"])
    sc = scenario(tmp_path, trt={"profiles": (("x", (1, 8), (2, 8), (4, 8)),)})
    paths.add(open_trt(sc, tmp_path).runtime_info["engine_path"])
    fakes.use(cuda=FakeCuda("NVIDIA A100-SXM4-80GB", (8, 0)))
    paths.add(open_trt(scenario(tmp_path), tmp_path).runtime_info["engine_path"])
    fakes.use(trt=fake_trt("10.4.0"))
    paths.add(open_trt(scenario(tmp_path), tmp_path).runtime_info["engine_path"])
    assert len(paths) == 5


names = st.sampled_from(["x", "ids"])
dims = st.tuples(st.integers(1, 3), st.integers(1, 3))
specs = st.builds(
    EngineSpec,
    onnx_sha256=st.sampled_from(["a" * 64, "b" * 64]),
    tensorrt=st.sampled_from(["8.6.1", "10.3.0"]),
    gpu=st.sampled_from(["NVIDIA H200", "NVIDIA A100"]),
    capability=st.sampled_from([(8, 0), (9, 0)]),
    precision=st.sampled_from(["fp32", "fp16", "bf16", "int8"]),
    workspace_mib=st.sampled_from([256, 1024]),
    optimization_level=st.sampled_from([None, 0, 3]),
    profiles=st.lists(st.tuples(names, dims, dims, dims), max_size=1).map(tuple),
    input_shapes=st.lists(st.tuples(names, dims), max_size=2).map(tuple),
    batch_multiplier=st.sampled_from([1, 4]),
    calibration=st.sampled_from([None, "c" * 64]),
)


@given(specs, specs)
def test_cache_key_is_one_to_one_with_the_settings(a: EngineSpec, b: EngineSpec) -> None:
    assert (a.key == b.key) == (a == b)
    assert EngineSpec(**vars(a)).key == a.key


@pytest.mark.parametrize(("field", "value"), [("tensorrt", "10.0.1"), ("gpu", "NVIDIA L4")])
def test_engine_of_another_version_or_gpu_is_rebuilt(
    tmp_path: Path, fakes: Any, field: str, value: str
) -> None:
    session = open_trt(scenario(tmp_path), tmp_path)
    sidecar = Path(session.runtime_info["engine_path"]).with_suffix(".json")
    meta = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**meta, field: value}))
    again = open_trt(scenario(tmp_path), tmp_path)
    assert len(fakes.trt.configs) == 2 and again.runtime_info["built"] is True
    assert len(fakes.trt.engines) == 2  # the stale engine was never deserialized
    assert json.loads(sidecar.read_text())[field] == meta[field]


def test_engine_without_sidecar_or_unreadable_is_rebuilt(tmp_path: Path, fakes: Any) -> None:
    path = Path(open_trt(scenario(tmp_path), tmp_path).runtime_info["engine_path"])
    path.with_suffix(".json").unlink()
    assert open_trt(scenario(tmp_path), tmp_path).runtime_info["built"] is True
    path.write_bytes(b"not an engine")
    assert open_trt(scenario(tmp_path), tmp_path).runtime_info["built"] is True
    assert len(fakes.trt.configs) == 3
    assert open_trt(scenario(tmp_path), tmp_path).runtime_info["built"] is False


def test_timing_cache_is_written_then_reused(tmp_path: Path, fakes: Any) -> None:
    open_trt(scenario(tmp_path), tmp_path).close()
    (timing,) = (tmp_path / "cache").glob("timing-*.cache")
    assert timing.name == "timing-trt10.3.0-NVIDIA_H200-sm90.cache"
    assert fakes.trt.configs[0].timing_cache.data == b""
    assert timing.read_bytes() == b"+entry"
    session = open_trt(scenario(tmp_path, precision="fp16"), tmp_path)
    assert fakes.trt.configs[1].timing_cache.data == b"+entry"  # loaded into the config
    assert timing.read_bytes() == b"+entry+entry"
    assert session.runtime_info["timing_cache"] == str(timing)
    timing.write_bytes(b"bad: another TensorRT's cache")
    open_trt(scenario(tmp_path, precision="bf16"), tmp_path).close()
    assert fakes.trt.configs[2].timing_cache.data == b""  # a mismatch starts afresh
    off = open_trt(
        scenario(tmp_path, precision="int8", trt={"timing_cache": False}),
        tmp_path,
        calibration=calibration_feeds(1),
    )
    assert fakes.trt.configs[3].timing_cache is None and off.runtime_info["timing_cache"] is None


def test_build_failure_carries_the_log_tail(tmp_path: Path, fakes: Any) -> None:
    fakes.trt.build_log = [f"warning number {i}" for i in range(30)]
    fakes.trt.fail_build = True
    with pytest.raises(ModelError) as info:
        open_trt(scenario(tmp_path), tmp_path)
    text = str(info.value)
    assert "could not build" in text and "out of device memory for tactic 7" in text
    assert "warning number 29" in text and "warning number 11" in text
    assert "warning number 10" not in text  # the last 20 lines only
    assert "info line" not in text
    assert info.value.location == scenario(tmp_path).model.location
    assert not list((tmp_path / "cache").glob("*.engine"))


def test_parse_failure_carries_the_parser_errors(tmp_path: Path, fakes: Any) -> None:
    fakes.trt.parse_errors = ["In node 3 (importFancyOp): UNSUPPORTED_NODE: FancyOp"]
    with pytest.raises(ModelError) as info:
        open_trt(scenario(tmp_path), tmp_path)
    text = str(info.value)
    assert "could not parse" in text and "UNSUPPORTED_NODE: FancyOp" in text
    assert "[ERROR] ModelImporter: failed to parse the graph" in text
    assert fakes.trt.configs == []


def test_factory_model_is_exported_then_built(tmp_path: Path, fakes: Any) -> None:
    (tmp_path / "pg_trt_models.py").write_text(
        textwrap.dedent(
            """
            import torch

            def mlp():
                torch.manual_seed(0)
                return torch.nn.Sequential(torch.nn.Linear(8, 4))
            """
        )
    )
    sc = scenario(tmp_path, model={"onnx": None, "factory": "pg_trt_models:mlp"})
    session = open_trt(sc, tmp_path)
    assert session.runtime_info["model_source"] == "factory export"
    assert list((tmp_path / "cache").glob("m-*.onnx"))
    session.close()


# -- int8 ------------------------------------------------------------------------------
def test_int8_needs_calibration_inputs(tmp_path: Path, fakes: Any) -> None:
    nothing: tuple[list[dict[str, np.ndarray]] | None, ...] = (None, [])
    for calibration in nothing:
        with pytest.raises(CellError, match="accuracy inputs") as info:
            open_trt(scenario(tmp_path, precision="int8"), tmp_path, calibration=calibration)
        assert "accuracy:" in str(info.value.fix)
    assert fakes.trt.configs == []


def test_int8_calibrator_serves_the_feeds_in_order(tmp_path: Path, fakes: Any) -> None:
    feeds = calibration_feeds(3)
    session = open_trt(scenario(tmp_path, precision="int8"), tmp_path, calibration=feeds)
    config = fakes.trt.configs[0]
    assert config.calibration_profile.shapes == {"x": ((2, 8), (2, 8), (2, 8))}
    served = fakes.trt.calibration
    assert served[-1] is None and len(served) == 4
    for got, sent in zip(served[:-1], feeds, strict=True):
        np.testing.assert_array_equal(got["x"], sent["x"])
    assert config.int8_calibrator.cache == b"calibration table"
    info = session.runtime_info["int8"]
    assert (
        info["calibration_inputs"] == 3 and "deprecated since TensorRT 10.1" in info["quantization"]
    )
    # other calibration data, other engine; calibration_samples limits the feeds used
    other = open_trt(scenario(tmp_path, precision="int8"), tmp_path, calibration=feeds[:2])
    assert other.runtime_info["engine_path"] != session.runtime_info["engine_path"]
    limited = scenario(tmp_path, precision="int8", quantization=QuantSpec(calibration_samples=2))
    same = open_trt(limited, tmp_path, calibration=feeds)
    assert same.runtime_info["engine_path"] == other.runtime_info["engine_path"]


def test_int8_calibration_inputs_must_match_the_timing_inputs(tmp_path: Path, fakes: Any) -> None:
    feeds = [{"x": np.zeros((3, 8), np.float32)}]
    with pytest.raises(InputError, match=r"calibration input 0 .*x \[3, 8\]"):
        open_trt(scenario(tmp_path, precision="int8"), tmp_path, calibration=feeds)


# -- running ---------------------------------------------------------------------------
def test_run_binds_every_tensor_and_enqueues_on_the_stream(tmp_path: Path, fakes: Any) -> None:
    session = open_trt(scenario(tmp_path), tmp_path)
    prepared = session.prepare(make_inputs(scenario(tmp_path).model))
    (engine,) = fakes.trt.engines
    (context,) = engine.contexts
    (stream,) = fakes.cuda.streams
    assert prepared.inputs["x"].dtype == torch.float32 and prepared.outputs["y"].shape == (2, 4)
    outputs = session.run(prepared)
    assert context.addresses == {
        "x": prepared.inputs["x"].data_ptr(),
        "y": prepared.outputs["y"].data_ptr(),
    }
    assert context.shapes == {"x": (2, 8)} and context.executed == [stream.cuda_stream]
    session.run(prepared)
    assert context.executed == [stream.cuda_stream] * 2
    assert session.synchronize is not None
    session.synchronize()
    assert stream.synced == 1
    (y,) = session.to_numpy(outputs)
    assert y.dtype == np.float32 and y.shape == (2, 4)
    other = session.prepare({"x": np.ones((2, 8), np.float32)})
    session.run(other)
    assert context.addresses["x"] == other.inputs["x"].data_ptr()


def test_outputs_come_back_as_float32_and_int(tmp_path: Path, fakes: Any) -> None:
    fakes.trt.outputs = [
        Tensor(name="half", shape=(-1, 4), dtype=DataType.HALF),
        Tensor(name="ids", shape=(-1,), dtype=DataType.INT64),
    ]
    session = open_trt(scenario(tmp_path), tmp_path)
    prepared = session.prepare(make_inputs(scenario(tmp_path).model))
    half, ids = session.to_numpy(session.run(prepared))
    assert half.dtype == np.float32 and half.shape == (2, 4)
    assert ids.dtype == np.int64 and ids.shape == (2,)


def test_worker_calls_get_their_own_context_and_stream(tmp_path: Path, fakes: Any) -> None:
    session = open_trt(scenario(tmp_path), tmp_path)
    prepared = {1: session.prepare(make_inputs(scenario(tmp_path).model))}
    calls_a, sync_a = session.worker_calls(prepared)
    calls_b, sync_b = session.worker_calls(prepared)
    (engine,) = fakes.trt.engines
    main, ctx_a, ctx_b = engine.contexts
    _, stream_a, stream_b = fakes.cuda.streams
    assert fakes.cuda.activated == 1  # on open
    calls_a[1]()
    calls_b[1]()
    calls_b[1]()
    assert fakes.cuda.activated == 3  # once more per worker, on its first call
    assert main.executed == []
    assert ctx_a.executed == [stream_a.cuda_stream]
    assert ctx_b.executed == [stream_b.cuda_stream] * 2
    assert ctx_a.addresses["x"] == ctx_b.addresses["x"] == prepared[1].inputs["x"].data_ptr()
    assert ctx_a.addresses["y"] != ctx_b.addresses["y"] != prepared[1].outputs["y"].data_ptr()
    sync_a()
    assert (stream_a.synced, stream_b.synced) == (1, 0)
    sync_b()
    assert stream_b.synced == 1


def test_close_releases_the_session(tmp_path: Path, fakes: Any) -> None:
    session = open_trt(scenario(tmp_path), tmp_path)
    prepared = session.prepare(make_inputs(scenario(tmp_path).model))
    session.close()
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.run(prepared)


# -- profiling ----------------------------------------------------------------------------
@pytest.mark.parametrize("emits", [True, False])
def test_iprofiler_times_each_layer_per_request(tmp_path: Path, fakes: Any, emits: bool) -> None:
    fakes.trt.layers = [("conv1", 0.5), ("relu1", 0.1), ("fc", 0.2)]
    fakes.trt.layer_info = [{"Name": "conv1", "LayerType": "CaskConvolution"}, "relu1"]
    sc = scenario(tmp_path)
    session = open_trt(sc, tmp_path)
    prepared = session.prepare(make_inputs(sc.model))
    (engine,) = fakes.trt.engines
    (context,) = engine.contexts
    context.enqueue_emits_profile = emits
    trace = tmp_path / "traces" / "trt.json"
    profile = profile_session(sc, session, prepared, requests=5, trace_path=trace)
    assert context.profiler is None  # put back as it was
    assert context.asked_for_reports == (0 if emits else PROFILE_WARM_REQUESTS + 5)
    # execution k reports k times the base figure; recorded are executions 4..8: median 6
    runs = PROFILE_WARM_REQUESTS + 3
    assert profile.profiler == "tensorrt" and profile.requests == 5
    nodes = {n.name: n for n in profile.nodes}
    assert nodes["conv1"].ns == pytest.approx(0.5e6 * runs)  # per request, not 5 requests
    assert nodes["conv1"].op_type == "CaskConvolution" and nodes["conv1"].provider == "cuda"
    assert nodes["relu1"].op_type == nodes["fc"].op_type == ""  # the inspector gave no type
    ops = {o.op_type: o.ns for o in profile.op_types}
    assert ops == pytest.approx({"CaskConvolution": 0.5e6 * runs, UNKNOWN_LAYER_TYPE: 0.3e6 * runs})
    events = json.loads(trace.read_text())["traceEvents"]
    assert [e["name"] for e in events if e["cat"] == "Request"] == ["perfguard/request"] * 5
    assert sum(e["name"] == "conv1" for e in events) == 5
    executed = len(context.executed)
    session.run(prepared)  # still serving, no longer profiled
    assert len(context.executed) == executed + 1 and context.asked_for_reports in (
        0,
        PROFILE_WARM_REQUESTS + 5,
    )


def test_layer_types_without_an_inspector_are_unknown(fakes: Any) -> None:
    assert layer_types(fakes.trt, object()) == {}


# -- cells that cannot run -------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "tpu", "cuda:x"])
def test_non_cuda_device_fails_the_cell(tmp_path: Path, fakes: Any, device: str) -> None:
    with pytest.raises(CellError, match="NVIDIA GPUs only") as info:
        open_trt(scenario(tmp_path, device=device), tmp_path)
    assert "device: cuda" in str(info.value.fix)


def test_unknown_precision_fails_the_cell(tmp_path: Path, fakes: Any) -> None:
    with pytest.raises(CellError, match="unknown precision 'fp8'"):
        open_trt(scenario(tmp_path, precision="fp8"), tmp_path)


def test_unavailable_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = TensorRTBackend()
    assert backend.name == "tensorrt"
    missing: set[str] = {"tensorrt", "tensorrt_bindings"}
    monkeypatch.setattr(tensorrt_backend, "_module_missing", lambda name: name in missing)
    monkeypatch.setattr(tensorrt_backend, "_cuda_problem", lambda: "no GPU here")
    assert str(backend.unavailable_reason()).startswith("TensorRT is not installed")
    missing = {"tensorrt"}  # the bindings wheel alone, as the GPU lock installs it
    assert backend.unavailable_reason() == "no GPU here"
    missing = {"torch"}
    assert "PyTorch" in str(backend.unavailable_reason())
    missing = set()
    assert backend.unavailable_reason() == "no GPU here"
    monkeypatch.setattr(tensorrt_backend, "_cuda_problem", lambda: None)
    assert backend.unavailable_reason() is None
