"""ONNX Runtime on a GPU, against a small fake of the onnxruntime surface.

No GPU here: the fake records what perfguard asks of onnxruntime (providers,
their options, the session config, IOBinding calls) and answers as the real
runtime does (the CPU-fallback refusal, per-node profiling events).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.backends import onnxruntime_backend
from perfguard.backends.onnxruntime_backend import OnnxRuntimeBackend, OnnxRuntimeSession
from perfguard.backends.ort_gpu import DISABLE_CPU_FALLBACK, GpuPlan, Placement
from perfguard.core.errors import CellError, ModelError, ProviderFallbackError
from perfguard.core.scenario import GpuSpec, QuantSpec, Scenario
from perfguard.machine import native
from perfguard.models.inputs import make_inputs
from tests.helpers.onnx_cells import LOCATION, relu_cell
from tests.helpers.ort_gpu_real import ort_gpu_site, run_with_ort_gpu

onnx = pytest.importorskip("onnx")

CUDA = "CUDAExecutionProvider"
TRT = "TensorrtExecutionProvider"
CPU = "CPUExecutionProvider"
REFUSAL = (
    "[ONNXRuntimeError] : 1 : FAIL : This session contains graph nodes that are assigned to "
    "the default CPU EP, but fallback to CPU EP has been explicitly disabled by the user."
)


class NodeArg:
    def __init__(self, name: str, shape: list[Any], type_: str = "tensor(float)") -> None:
        self.name, self.shape, self.type = name, shape, type_


class FakeOrt:
    """The onnxruntime surface the backend uses, scripted per test.

    ``cpu_nodes``: (name, op) the CPU provider gets (the creation is refused
    when fallback is disabled, unless ``refuse`` is False: a node inside a
    subgraph, which the creation check does not see). ``loads``: whether the
    requested GPU provider loads at all.
    """

    def __init__(
        self,
        *,
        cpu_nodes: tuple[tuple[str, str], ...] = (),
        refuse: bool = True,
        loads: bool = True,
        profile: bool = True,
        extra_nodes: tuple[tuple[str, str, str], ...] = (),
        available: tuple[str, ...] = (TRT, CUDA, CPU),
    ) -> None:
        self.cpu_nodes, self.refuse, self.loads, self.profile = cpu_nodes, refuse, loads, profile
        self.extra_nodes = extra_nodes
        self.available = available
        self.created: list[dict[str, Any]] = []
        self.sessions: list[Any] = []
        self.uploads: list[tuple[tuple[int, ...], str, int]] = []
        self.module = self._module()

    def _module(self) -> types.ModuleType:
        fake = self
        mod = types.ModuleType("onnxruntime")
        mod.__version__ = "1.99.0-fake"  # type: ignore[attr-defined]
        mod.get_available_providers = lambda: list(fake.available)  # type: ignore[attr-defined]
        mod.GraphOptimizationLevel = types.SimpleNamespace(  # type: ignore[attr-defined]
            ORT_DISABLE_ALL=0, ORT_ENABLE_BASIC=1, ORT_ENABLE_EXTENDED=2, ORT_ENABLE_ALL=99
        )

        class SessionOptions:
            def __init__(self) -> None:
                self.config: dict[str, str] = {}
                self.enable_profiling = False
                self.profile_file_prefix = "onnxruntime_profile_"

            def add_session_config_entry(self, key: str, value: str) -> None:
                self.config[key] = value

        class OrtValue:
            def __init__(self, array: np.ndarray, device: str) -> None:
                self.array, self.device = array, device

            @classmethod
            def ortvalue_from_numpy(
                cls, array: np.ndarray, device_type: str = "cpu", device_id: int = 0
            ) -> OrtValue:
                fake.uploads.append((array.shape, device_type, device_id))
                return cls(np.array(array), device_type)

        mod.SessionOptions = SessionOptions  # type: ignore[attr-defined]
        mod.OrtValue = OrtValue  # type: ignore[attr-defined]
        mod.InferenceSession = self._session_class()  # type: ignore[attr-defined]
        return mod

    def _session_class(self) -> type:
        fake = self

        class IOBinding:
            def __init__(self, session: Any) -> None:
                self.session = session
                self.calls: list[tuple[Any, ...]] = []
                self.inputs: dict[str, np.ndarray] = {}
                self.outputs: list[np.ndarray] = []
                self.synced = 0
                self.copied = 0

            def bind_ortvalue_input(self, name: str, value: Any) -> None:
                assert value.device == "cuda"
                self.calls.append(("bind_ortvalue_input", name))
                self.inputs[name] = value.array

            def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
                self.calls.append(("bind_cpu_input", name))
                self.inputs[name] = array

            def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0) -> None:
                self.calls.append(("bind_output", name, device_type, device_id))

            def synchronize_outputs(self) -> None:
                self.synced += 1

            def copy_outputs_to_cpu(self) -> list[np.ndarray]:
                self.copied += 1
                return [np.array(o) for o in self.outputs]

        class InferenceSession:
            def __init__(
                self, path: str, sess_options: Any = None, providers: Any = None, **kwargs: Any
            ) -> None:
                names = [p if isinstance(p, str) else p[0] for p in providers]
                config = dict(sess_options.config)
                fake.created.append({"providers": providers, "config": config, "kwargs": kwargs})
                strict = config.get(DISABLE_CPU_FALLBACK) == "1"
                if strict and CPU in names:
                    raise RuntimeError(
                        "Conflicting session configuration: explicitly added the CPU EP"
                    )
                if strict and ((fake.cpu_nodes and fake.refuse) or not fake.loads):
                    raise RuntimeError(REFUSAL)
                self.requested = names[0]
                self.providers = [*names, CPU] if CPU not in names else names
                if not fake.loads:
                    self.providers = [CPU]
                self.options = {p[0]: dict(p[1]) for p in providers if not isinstance(p, str)}
                self.profiling = sess_options.enable_profiling
                self.prefix = sess_options.profile_file_prefix
                self.runs: list[dict[str, np.ndarray]] = []
                self.bound_runs: list[Any] = []
                self.bindings: list[IOBinding] = []
                self.profiles = 0
                fake.sessions.append(self)

            def get_providers(self) -> list[str]:
                return list(self.providers)

            def get_provider_options(self) -> dict[str, dict[str, str]]:
                return {name: {**opts, "applied": "yes"} for name, opts in self.options.items()}

            def get_inputs(self) -> list[NodeArg]:
                return [NodeArg("x", [2, 4])]

            def get_outputs(self) -> list[NodeArg]:
                return [NodeArg("y", [2, 4])]

            def run(self, names: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
                self.runs.append(feeds)
                return [feeds["x"]]

            def io_binding(self) -> IOBinding:
                binding = IOBinding(self)
                self.bindings.append(binding)
                return binding

            def run_with_iobinding(self, binding: IOBinding) -> None:
                assert binding.session is self
                self.bound_runs.append(binding)
                binding.outputs = [np.array(binding.inputs["x"])]

            def end_profiling(self) -> str:
                self.profiles += 1
                if not (self.profiling and fake.profile):
                    return ""
                self.profiling = False  # as onnxruntime: profiling ends here
                gpu = self.providers[0]
                nodes = [("relu", "Relu", gpu)]
                nodes += [("x_copy", "MemcpyFromHost", CUDA), ("y_copy", "MemcpyToHost", CUDA)]
                nodes += [(name, op, CPU) for name, op in fake.cpu_nodes]
                nodes += list(fake.extra_nodes)
                events: list[dict[str, Any]] = [
                    {"cat": "Session", "name": "model_run", "args": {}},
                ]
                for name, op, provider in nodes:
                    args = {"op_name": op, "provider": provider}
                    events.append({"cat": "Node", "name": f"{name}_fence_before", "args": {}})
                    events.append({"cat": "Node", "name": f"{name}_kernel_time", "args": args})
                    # a node run twice (inside a Loop body) is one node
                    events.append({"cat": "Node", "name": f"{name}_kernel_time", "args": args})
                path = Path(f"{self.prefix}_2026-01-01.json")
                path.write_text(json.dumps(events), encoding="utf-8")
                return str(path)

        return InferenceSession


@pytest.fixture
def fake_ort(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install a FakeOrt built with the given script as ``onnxruntime``."""

    def install(**script: Any) -> FakeOrt:
        fake = FakeOrt(**script)
        monkeypatch.setitem(sys.modules, "onnxruntime", fake.module)
        # The fake is a machine with a GPU: its driver loads (it has no provider files).
        monkeypatch.setattr(native, "driver_problem", lambda: None)
        return fake

    return install


def open_session(sc: Scenario, tmp_path: Path) -> tuple[OnnxRuntimeSession, dict[str, np.ndarray]]:
    feeds = make_inputs(sc.model)
    return OnnxRuntimeBackend().open(sc, feeds, tmp_path / "cache"), feeds


# -- providers and their options ------------------------------------------------------


def test_cuda_provider_gets_the_device_and_the_users_options(tmp_path: Path, fake_ort: Any) -> None:
    fake = fake_ort()
    options = (
        ("arena_extend_strategy", "kSameAsRequested"),
        ("cudnn_conv_algo_search", "HEURISTIC"),
        ("do_copy_in_default_stream", "true"),
        ("gpu_mem_limit", "1073741824"),
    )
    sc = relu_cell(tmp_path, "cuda:1", gpu=GpuSpec(provider_options=options))
    session, _ = open_session(sc, tmp_path)
    created = fake.created[0]
    assert created["providers"] == [
        (
            CUDA,
            {
                "device_id": "1",
                "arena_extend_strategy": "kSameAsRequested",
                "cudnn_conv_algo_search": "HEURISTIC",
                "do_copy_in_default_stream": "1",
                "gpu_mem_limit": "1073741824",
            },
        )
    ]  # no CPU provider: onnxruntime refuses it next to disable_cpu_ep_fallback
    assert created["config"] == {DISABLE_CPU_FALLBACK: "1"}
    assert created["kwargs"] == {"enable_fallback": 0}
    info = session.runtime_info
    assert info["requested_provider"] == CUDA and info["device"] == "cuda:1"
    assert info["provider_options"]["cudnn_conv_algo_search"] == "HEURISTIC"
    assert info["provider_options_applied"]["applied"] == "yes"


def test_tensorrt_falls_back_to_cuda_with_fp16_and_an_engine_cache(
    tmp_path: Path, fake_ort: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_ort()
    monkeypatch.setattr(onnxruntime_backend, "convert_fp16", lambda path, cache, loc, **_: path)
    gpu = GpuSpec(ort_provider="tensorrt", provider_options=(("trt_timing_cache_enable", "0"),))
    session, _ = open_session(relu_cell(tmp_path, "cuda:2", precision="fp16", gpu=gpu), tmp_path)
    providers = fake.created[0]["providers"]
    assert [p[0] for p in providers] == [TRT, CUDA]
    trt, cuda = providers[0][1], providers[1][1]
    assert trt["device_id"] == "2" and cuda == {"device_id": "2"}
    assert trt["trt_fp16_enable"] == "True"
    assert trt["trt_engine_cache_enable"] == "True"
    cache = Path(trt["trt_engine_cache_path"])
    assert cache.is_dir() and (tmp_path / "cache" / "ort-tensorrt") in cache.parents
    assert trt["trt_timing_cache_enable"] == "False"  # the user's, in TensorRT's spelling
    assert session.runtime_info["placement"]["nodes"] == {TRT: 1}
    assert fake.created[0]["config"] == {DISABLE_CPU_FALLBACK: "1"}


def test_tensorrt_flags_follow_the_precision(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fp32 = GpuPlan.build(relu_cell(tmp_path, gpu=GpuSpec(ort_provider="tensorrt")), 0, cache, "1")
    assert "trt_fp16_enable" not in fp32.options and "trt_int8_enable" not in fp32.options
    static = relu_cell(
        tmp_path,
        precision="int8",
        quantization=QuantSpec(mode="static"),
        gpu=GpuSpec(ort_provider="TensorRT", provider_options=(("trt_dla_core", "1"),)),
    )
    plan = GpuPlan.build(static, 0, cache, "1")
    assert plan.options["trt_int8_enable"] == "True"
    assert plan.options["trt_dla_core"] == "1"  # an integer option keeps its spelling


def test_unknown_provider_and_conflicting_device_id_are_cell_errors(tmp_path: Path) -> None:
    with pytest.raises(CellError) as info:
        GpuPlan.build(relu_cell(tmp_path, gpu=GpuSpec(ort_provider="rocm")), 0, tmp_path, "1")
    assert "cuda or tensorrt" in str(info.value) and info.value.location == LOCATION
    clash = GpuSpec(provider_options=(("device_id", "0"),))
    with pytest.raises(CellError, match="device_id 0") as info:
        GpuPlan.build(relu_cell(tmp_path, "cuda:3", gpu=clash), 3, tmp_path, "1")
    assert info.value.fix is not None and "cuda:<index>" in info.value.fix


# -- placement proof ------------------------------------------------------------------


def test_refused_creation_names_the_cpu_nodes(tmp_path: Path, fake_ort: Any) -> None:
    fake = fake_ort(cpu_nodes=(("topk_3", "TopK"), ("nms", "NonMaxSuppression")))
    with pytest.raises(ProviderFallbackError) as info:
        open_session(relu_cell(tmp_path, "cuda"), tmp_path)
    text = str(info.value)
    assert "refused to create the session on CUDAExecutionProvider" in text
    assert "2 nodes [topk_3 (TopK), nms (NonMaxSuppression)]" in text
    assert "every node on CUDAExecutionProvider" in text
    assert info.value.fix is not None and "`gpu: {allow_cpu_fallback: true}`" in info.value.fix
    assert info.value.location == LOCATION
    # the diagnosis: a second session with the CPU allowed and no refusal entry
    strict, diagnosis = fake.created
    assert strict["config"] == {DISABLE_CPU_FALLBACK: "1"}
    assert diagnosis["config"] == {} and diagnosis["providers"][-1] == CPU


def test_refusal_because_the_provider_did_not_load(tmp_path: Path, fake_ort: Any) -> None:
    fake_ort(loads=False)
    with pytest.raises(ProviderFallbackError) as info:
        open_session(relu_cell(tmp_path, "cuda"), tmp_path)
    assert "CUDAExecutionProvider, but it did not load" in str(info.value)
    assert info.value.fix is not None and "LD_LIBRARY_PATH" in info.value.fix


def test_silent_cpu_fallback_with_fallback_allowed_is_caught(tmp_path: Path, fake_ort: Any) -> None:
    fake_ort(loads=False)
    sc = relu_cell(tmp_path, "cuda:1", gpu=GpuSpec(allow_cpu_fallback=True))
    with pytest.raises(ProviderFallbackError) as info:
        open_session(sc, tmp_path)
    text = str(info.value)
    assert "requested CUDAExecutionProvider" in text
    assert "session runs on CPUExecutionProvider" in text


def test_profiled_cpu_node_fails_listing_ten_and_the_count(tmp_path: Path, fake_ort: Any) -> None:
    # created fine (the nodes sit in a subgraph), but the profile shows them on the CPU
    nodes = tuple((f"loop_body_{i}", "NonZero") for i in range(12))
    fake_ort(cpu_nodes=nodes, refuse=False)
    with pytest.raises(ProviderFallbackError) as info:
        open_session(relu_cell(tmp_path, "cuda"), tmp_path)
    text = str(info.value)
    assert (
        "12 nodes [loop_body_0 (NonZero)" in text and "loop_body_9 (NonZero), and 2 more]" in text
    )
    assert "loop_body_10" not in text
    assert "run on CPUExecutionProvider instead of CUDAExecutionProvider" in text
    assert "Memcpy nodes excepted" in text


def test_memcpy_nodes_are_not_a_fallback(tmp_path: Path, fake_ort: Any) -> None:
    on_cpu = (("in_copy", "MemcpyFromHost", CPU), ("out_copy", "MemcpyToHost", CPU))
    fake = fake_ort(extra_nodes=on_cpu)
    session, _ = open_session(relu_cell(tmp_path, "cuda"), tmp_path)
    placement = session.runtime_info["placement"]
    assert placement["nodes"] == {CUDA: 1}
    assert placement["memcpy_nodes"] == 4 and placement["cpu_node_count"] == 0
    assert placement["checked"] is True and "refused" in placement["cpu_fallback"]
    # one check run with host arrays, then profiling ended before any timing
    (sess,) = fake.sessions
    assert len(sess.runs) == 1 and sess.profiles == 1 and not sess.profiling


def test_allowed_cpu_fallback_is_recorded_not_failed(tmp_path: Path, fake_ort: Any) -> None:
    fake = fake_ort(cpu_nodes=(("nms", "NonMaxSuppression"),))
    sc = relu_cell(tmp_path, "cuda", gpu=GpuSpec(allow_cpu_fallback=True))
    session, _ = open_session(sc, tmp_path)
    created = fake.created[0]
    assert DISABLE_CPU_FALLBACK not in created["config"]
    assert created["providers"][-1] == CPU
    placement = session.runtime_info["placement"]
    assert placement["nodes"] == {CUDA: 1, CPU: 1}
    assert placement["cpu_nodes"] == ["nms (NonMaxSuppression)"]
    assert "allowed" in placement["cpu_fallback"]


def test_shape_nodes_get_a_hint(tmp_path: Path, fake_ort: Any) -> None:
    fake_ort(cpu_nodes=(("Shape_1", "Shape"), ("Gather_2", "Gather")), refuse=False)
    with pytest.raises(ProviderFallbackError) as info:
        open_session(relu_cell(tmp_path, "cuda"), tmp_path)
    assert info.value.fix is not None and "shape computations" in info.value.fix


def test_no_profile_is_no_proof(tmp_path: Path, fake_ort: Any) -> None:
    fake_ort(profile=False)
    with pytest.raises(ProviderFallbackError, match="could not be read"):
        open_session(relu_cell(tmp_path, "cuda"), tmp_path)
    fake_ort(profile=False)
    sc = relu_cell(tmp_path, "cuda", gpu=GpuSpec(allow_cpu_fallback=True))
    session, _ = open_session(sc, tmp_path)
    assert session.runtime_info["placement"]["checked"] is False


def test_profile_parsing_ignores_other_events(tmp_path: Path) -> None:
    assert Placement.from_profile("") is None
    assert Placement.from_profile(str(tmp_path / "missing.json")) is None
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"cat": "Session", "name": "x_kernel_time", "args": {"provider": CPU}},
                    {"cat": "Node", "name": "a_kernel_time", "args": {"op_name": "Add"}},
                ]
            }
        )
    )
    placement = Placement.from_profile(str(path))
    assert placement is not None and placement.per_provider == {"unknown": 1}


# -- IOBinding --------------------------------------------------------------------------


def test_resident_inputs_are_bound_once_and_outputs_stay_on_the_device(
    tmp_path: Path, fake_ort: Any
) -> None:
    fake = fake_ort()
    session, feeds = open_session(relu_cell(tmp_path, "cuda:1"), tmp_path)
    (sess,) = fake.sessions
    prepared = session.prepare(feeds)
    assert fake.uploads == [((2, 4), "cuda", 1)]
    binding = prepared.binding
    assert binding.calls == [("bind_ortvalue_input", "x"), ("bind_output", "y", "cuda", 1)]
    for _ in range(3):
        out = session.run(prepared)
        assert session.synchronize is not None
        session.synchronize()
    assert sess.bound_runs == [binding] * 3 and len(sess.runs) == 1  # runs 2-4: no session.run
    assert len(binding.calls) == 2 and binding.copied == 0  # nothing re-bound, nothing copied
    assert sum(b.synced for b in sess.bindings) == 3
    (array,) = session.to_numpy(out)
    np.testing.assert_array_equal(array, feeds["x"])
    assert binding.copied == 1
    info = session.runtime_info
    assert info["iobinding"] is True and info["copies_timed"] is False
    assert "copies not timed" in info["io"]


def test_included_copies_bind_and_copy_on_every_run(tmp_path: Path, fake_ort: Any) -> None:
    fake = fake_ort()
    sc = relu_cell(tmp_path, "cuda", gpu=GpuSpec(include_copies=True))
    session, feeds = open_session(sc, tmp_path)
    prepared = session.prepare(feeds)
    assert fake.uploads == []  # inputs stay on the host until each run
    binding = prepared.binding
    for _ in range(3):
        outputs = session.run(prepared)
    assert [c for c in binding.calls if c[0] == "bind_cpu_input"] == [("bind_cpu_input", "x")] * 3
    assert binding.copied == 3
    np.testing.assert_array_equal(session.to_numpy(outputs)[0], feeds["x"])
    assert binding.copied == 3  # the host outputs need no further copy
    assert session.runtime_info["copies_timed"] is True
    assert session.synchronize is not None


def test_without_iobinding_session_run_takes_host_arrays(tmp_path: Path, fake_ort: Any) -> None:
    fake = fake_ort()
    session, feeds = open_session(
        relu_cell(tmp_path, "cuda", gpu=GpuSpec(iobinding=False)), tmp_path
    )
    (sess,) = fake.sessions
    prepared = session.prepare(feeds)
    assert isinstance(prepared, dict) and session.synchronize is None
    np.testing.assert_array_equal(session.to_numpy(session.run(prepared))[0], feeds["x"])
    assert len(sess.runs) == 2 and sess.bindings == []
    info = session.runtime_info
    assert info["iobinding"] is False and info["copies_timed"] is True
    assert "copies timed" in info["io"]
    calls, sync = session.worker_calls({1: prepared})
    assert sync is None and len(calls[1]()) == 1


def test_each_worker_gets_its_own_bindings(tmp_path: Path, fake_ort: Any) -> None:
    fake = fake_ort()
    session, feeds = open_session(relu_cell(tmp_path, "cuda"), tmp_path)
    (sess,) = fake.sessions
    tiled = {k: np.concatenate([feeds["x"]] * k) for k in (1, 2)}
    prepared = {k: session.prepare({"x": v}) for k, v in tiled.items()}
    uploads = len(fake.uploads)
    first, sync_a = session.worker_calls(prepared)
    second, sync_b = session.worker_calls(prepared)
    assert sync_a is None and sync_b is None  # run_with_iobinding already waits for its run
    assert len(fake.uploads) == uploads  # the workers reuse the resident inputs
    for k in (1, 2):
        first[k]()
        second[k]()
    used = sess.bound_runs
    assert len(used) == 4 and len({id(b) for b in used}) == 4
    assert not {id(p.binding) for p in prepared.values()} & {id(b) for b in used}
    for binding in used:
        assert ("bind_output", "y", "cuda", 0) in binding.calls
    assert session.to_numpy(first[2]())[0].shape == (4, 4)


def test_cpu_scenarios_keep_plain_runs(tmp_path: Path, fake_ort: Any) -> None:
    fake = fake_ort(available=(CPU,))
    session, feeds = open_session(relu_cell(tmp_path, "cpu"), tmp_path)
    created = fake.created[0]
    assert created["providers"] == [CPU] and created["config"] == {} and created["kwargs"] == {}
    assert session.synchronize is None and "placement" not in session.runtime_info
    prepared = session.prepare(feeds)
    calls, sync = session.worker_calls({1: prepared})
    assert sync is None
    np.testing.assert_array_equal(calls[1]()[0], feeds["x"])
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.run(prepared)


def test_a_model_failing_its_check_run_is_a_located_model_error(
    tmp_path: Path, fake_ort: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_ort()

    def broken(self: Any, names: Any, feeds: Any) -> Any:
        raise RuntimeError("CUDA failure 2: out of memory\nmore detail")

    monkeypatch.setattr(fake.module.InferenceSession, "run", broken)
    with pytest.raises(ModelError) as info:
        open_session(relu_cell(tmp_path, "cuda"), tmp_path)
    text = str(info.value)
    assert "placement check: CUDA failure 2: out of memory" in text and "more detail" not in text
    assert info.value.location == LOCATION


# -- against the real onnxruntime-gpu (the GPU lock's wheel, on this CPU machine) --------


def _public(obj: Any) -> set[str]:
    return {name for name in vars(obj) if not name.startswith("_")}


def test_the_fake_offers_only_what_the_real_onnxruntime_gpu_has(tmp_path: Path) -> None:
    """Every module attribute, class and method the fake offers, and so every one the
    backend's tests let it call, exists in the onnxruntime-gpu the GPU lock installs."""
    fake = FakeOrt().module
    offered: dict[str, list[str]] = {"": sorted(_public(fake) - {"__version__"})}
    for name in ("SessionOptions", "OrtValue", "InferenceSession"):
        offered[name] = sorted(_public(getattr(fake, name)))
    session = object.__new__(fake.InferenceSession)
    session.bindings = []
    offered["IOBinding"] = sorted(_public(type(session.io_binding())))
    # GraphOptimizationLevel's members, as the backend reads them.
    offered["GraphOptimizationLevel"] = sorted(vars(fake.GraphOptimizationLevel))
    code = (
        "import json, sys, onnxruntime as ort\n"
        "offered = json.loads(sys.argv[1])\n"
        "where = {'': ort, 'IOBinding': ort.IOBinding}\n"
        "missing = [f'{k}.{n}' if k else n for k, names in offered.items() for n in names\n"
        "           if not hasattr(where.get(k) or getattr(ort, k), n)]\n"
        "print(json.dumps({'version': ort.__version__, 'file': ort.__file__,\n"
        "                  'providers': ort.get_available_providers(), 'missing': missing}))\n"
    )
    site = ort_gpu_site()
    done = run_with_ort_gpu(site, ["-c", code, json.dumps(offered)])
    assert done.returncode == 0, done.stderr
    real = json.loads(done.stdout)
    assert real["file"].startswith(str(site)), real  # the GPU build, not the CPU one
    assert {CUDA, TRT} <= set(real["providers"])
    assert real["missing"] == [], f"the fake offers what onnxruntime {real['version']} lacks"


@pytest.mark.slow  # runs pytest in a subprocess
def test_the_gpu_suite_is_skipped_with_its_causes_where_no_gpu_is(tmp_path: Path) -> None:
    """onnxruntime-gpu installed, no GPU: its CUDA cell used to fail, blaming the install
    ("install onnxruntime-gpu"); every cell is now skipped naming what is missing."""
    site = ort_gpu_site()
    done = run_with_ort_gpu(
        site,
        ["-m", "pytest", "--perfguard", "suites/gpu.yaml", "-rs", "-p", "no:cacheprovider",
         f"--perfguard-report-dir={tmp_path / 'reports'}",
         f"--perfguard-baseline-dir={tmp_path / 'baselines'}"],
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "4 skipped" in out and " failed" not in out, out
    assert (
        "CUDAExecutionProvider is listed by onnxruntime 1.31.1, but the NVIDIA driver's "
        "libcuda.so.1 does not load" in out
    )
    assert "its driver installed (the driver brings libcuda.so.1)" in out
    assert "sees no CUDA device here" in out  # the torch cells


def test_gpu_diagnose_names_each_provider_that_does_not_load() -> None:
    """scripts/gpu-check's first stage with onnxruntime-gpu installed and no GPU: exit 3
    within seconds, each listed GPU provider BROKEN with the library or driver missing."""
    done = run_with_ort_gpu(ort_gpu_site(), ["scripts/gpu_diagnose.py"], timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    for provider in (CUDA, TRT):
        assert "libcuda.so.1" in rows[provider], done.stdout
    assert "onnxruntime-gpu" not in rows[CUDA]  # not "install onnxruntime-gpu": it is
