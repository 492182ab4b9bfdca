"""The torch backend's CUDA paths, against a small fake of the ``torch.cuda`` surface.

The machine has no GPU: tensors stay on the CPU while the session believes it
runs on ``cuda:0``. Every fake appends to one log, so a test can check the
order of what happened (model call, event records, which stream was synchronised).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from perfguard.backends import torch_cuda
from perfguard.backends.torch_backend import TorchSession
from perfguard.core.errors import CellError
from perfguard.core.scenario import GpuSpec, LoopSpec
from perfguard.measure.timing import measure
from tests.helpers.torch_cells import LOCATION, open_session, reference, scenario

torch = pytest.importorskip("torch")

MIB = 1024 * 1024


@dataclass
class Cuda:
    """What the fakes saw, in order, and what they answer."""

    log: list[str] = field(default_factory=list)
    stack: list[FakeStream] = field(default_factory=list)
    elapsed_ms: list[float] = field(default_factory=list)
    events: int = 0
    graphs: int = 0
    streams: int = 0
    capturing: bool = False
    fail_in_capture: str | None = None


class FakeStream:
    def __init__(self, cuda: Cuda, name: str) -> None:
        self.cuda, self.name = cuda, name

    def synchronize(self) -> None:
        self.cuda.log.append(f"sync:{self.name}")

    def wait_stream(self, other: FakeStream) -> None:
        self.cuda.log.append(f"wait:{self.name}<-{other.name}")


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> Cuda:
    state = Cuda()
    state.stack.append(FakeStream(state, "main"))
    log = state.log

    def new_stream(device: Any = None) -> FakeStream:
        state.streams += 1
        return FakeStream(state, f"s{state.streams}")

    class StreamContext:
        def __init__(self, stream: FakeStream) -> None:
            self.stream = stream

        def __enter__(self) -> None:
            log.append(f"enter:{self.stream.name}")
            state.stack.append(self.stream)

        def __exit__(self, *exc: object) -> None:
            state.stack.pop()

    class FakeEvent:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing
            state.events += 1

        def record(self, stream: FakeStream) -> None:
            log.append(f"record:{stream.name}")

        def elapsed_time(self, end: FakeEvent) -> float:
            log.append("elapsed")
            return state.elapsed_ms.pop(0)

    class FakeGraph:
        def __init__(self) -> None:
            state.graphs += 1
            self.name = f"g{state.graphs}"

        def replay(self) -> None:
            log.append(f"replay:{self.name}:{state.stack[-1].name}")

    class Capture:
        def __init__(self, graph: FakeGraph, stream: FakeStream) -> None:
            self.graph, self.stream = graph, stream

        def __enter__(self) -> None:
            log.append(f"capture:{self.graph.name}:{self.stream.name}")
            state.stack.append(self.stream)
            state.capturing = True

        def __exit__(self, *exc: object) -> None:
            state.capturing = False
            state.stack.pop()

    def strip_cuda(original: Any) -> Any:
        def to(self: Any, *args: Any, **kwargs: Any) -> Any:
            kept = [a for a in args if not (isinstance(a, torch.device) and a.type == "cuda")]
            return original(self, *kept, **kwargs) if kept or kwargs else self

        return to

    cu = torch.cuda
    monkeypatch.setattr(cu, "is_available", lambda: True)
    monkeypatch.setattr(cu, "device_count", lambda: 1)
    monkeypatch.setattr(cu, "current_device", lambda: 0)
    monkeypatch.setattr(cu, "get_device_name", lambda device=None: "Fake GPU")
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.nn.Module, "to", strip_cuda(torch.nn.Module.to))
    monkeypatch.setattr(torch.Tensor, "to", strip_cuda(torch.Tensor.to))
    monkeypatch.setattr(cu, "current_stream", lambda device=None: state.stack[-1])
    monkeypatch.setattr(cu, "Stream", new_stream)
    monkeypatch.setattr(cu, "stream", StreamContext)
    monkeypatch.setattr(cu, "Event", FakeEvent)
    monkeypatch.setattr(cu, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(cu, "graph", Capture)
    monkeypatch.setattr(cu, "synchronize", lambda device=None: log.append("device_sync"))
    monkeypatch.setattr(cu, "empty_cache", lambda: log.append("empty_cache"))
    monkeypatch.setattr(
        cu, "reset_peak_memory_stats", lambda device=None: log.append(f"reset_peak:{device}")
    )
    monkeypatch.setattr(cu, "max_memory_allocated", lambda device=None: 3 * MIB + MIB // 2)
    monkeypatch.setattr(cu, "memory_allocated", lambda device=None: 100 * MIB)
    monkeypatch.setattr(cu, "memory_reserved", lambda device=None: 120 * MIB)
    monkeypatch.setattr(cu, "mem_get_info", lambda device=None: (5 * MIB, 8192 * MIB))
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    return state


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch, cuda: Cuda) -> None:
    """Log every ``Tensor.copy_`` (a graph's static inputs are filled with it)."""
    original = torch.Tensor.copy_

    def copy_(self: Any, *args: Any, **kwargs: Any) -> Any:
        cuda.log.append("copy")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)


def recording(session: TorchSession, cuda: Cuda) -> None:
    """Log each model call; fail it during a capture when the test asks."""
    inner = session._call

    def call(*args: Any, **kwargs: Any) -> Any:
        cuda.log.append("call")
        if cuda.capturing and cuda.fail_in_capture:
            raise RuntimeError(cuda.fail_in_capture)
        return inner(*args, **kwargs)

    session._call = call


@contextmanager
def gpu_session(
    tmp_path: Path, cuda: Cuda, **gpu: Any
) -> Iterator[tuple[TorchSession, dict[str, np.ndarray]]]:
    session, feeds = open_session(scenario(tmp_path, device="cuda:0", gpu=GpuSpec(**gpu)), tmp_path)
    recording(session, cuda)
    try:
        yield session, feeds
    finally:
        session.close()


def test_synchronize_waits_for_the_model_stream_not_the_device(tmp_path: Path, cuda: Cuda) -> None:
    with gpu_session(tmp_path, cuda) as (session, feeds):
        info = session.runtime_info
        assert info["device"] == "cuda:0" and info["gpu"] == "Fake GPU"
        assert info["cuda_graph"] is False and info["cudnn_benchmark"] is False
        prepared = session.prepare(feeds)
        assert session.synchronize is not None
        measure(
            functools.partial(session.run, prepared),
            session.synchronize,
            LoopSpec(iterations=1, seconds=0),
            LoopSpec(iterations=2, seconds=0),
        )
        # The stream current at open is synchronised after every request, never the device.
        assert cuda.log == ["call", "sync:main"] * 3
        np.testing.assert_allclose(
            session.to_numpy(session.run(prepared))[0], reference(feeds), rtol=1e-6, atol=1e-6
        )
    assert cuda.log[-1] == "empty_cache"


def test_device_timing_records_events_around_each_run_while_on(tmp_path: Path, cuda: Cuda) -> None:
    with gpu_session(tmp_path, cuda) as (session, feeds):
        prepared = session.prepare(feeds)
        session.run(prepared)  # timing off: no events
        assert cuda.log == ["call"]
        cuda.log.clear()
        session.start_device_timing()
        assert session.synchronize is not None
        measure(
            functools.partial(session.run, prepared),
            session.synchronize,
            LoopSpec(iterations=1, seconds=0),
            LoopSpec(iterations=2, seconds=0),
        )
        # Each request: start event, model call, end event (all on the model's
        # stream), then the loop's sync; nothing is read inside the loop.
        assert cuda.log == ["record:main", "call", "record:main", "sync:main"] * 3
        cuda.log.clear()
        cuda.elapsed_ms = [0.5, 1.25, 0.002]
        assert session.stop_device_timing() == [500_000, 1_250_000, 2_000]
        assert cuda.log == ["sync:main", "elapsed", "elapsed", "elapsed"]
        cuda.log.clear()
        session.run(prepared)
        assert cuda.log == ["call"]
        # A second window reuses the first window's events.
        session.start_device_timing()
        session.run(prepared)
        cuda.elapsed_ms = [2.0]
        assert session.stop_device_timing() == [2_000_000]
        assert cuda.events == 6
        assert session.stop_device_timing() == []


def test_cpu_session_has_no_device_figures(tmp_path: Path) -> None:
    sc = scenario(tmp_path, gpu=GpuSpec(cuda_graph=True, cudnn_benchmark=True))
    session, feeds = open_session(sc, tmp_path)
    try:
        session.start_device_timing()
        prepared = session.prepare(feeds)
        assert type(prepared) is dict  # cuda_graph is ignored on the CPU
        session.run(prepared)
        assert session.stop_device_timing() is None
        session.reset_device_peak()
        assert session.device_peak_mib() is None
        assert session.synchronize is None
        assert "cuda_graph" not in session.runtime_info
        assert "cudnn_benchmark" not in session.runtime_info
        assert torch.backends.cudnn.benchmark is False
    finally:
        session.close()


@pytest.mark.usefixtures("copies")
def test_cuda_graph_is_captured_once_and_replayed(tmp_path: Path, cuda: Cuda) -> None:
    with gpu_session(tmp_path, cuda, cuda_graph=True) as (session, feeds):
        assert session.runtime_info["cuda_graph"] is False  # nothing captured yet
        prepared = session.prepare(feeds)
        warmup = ["call"] * torch_cuda.GRAPH_WARMUP_CALLS
        # Static inputs filled, warm-up on a side stream, then one captured call.
        assert cuda.log == [
            "wait:s1<-main",
            "enter:s1",
            *warmup,
            "wait:main<-s1",
            "capture:g1:s1",
            "call",
        ]
        assert session.runtime_info["cuda_graph"] is True
        captured = prepared.captured  # type: ignore[attr-defined]
        assert captured.static_inputs["x"] is not prepared["x"]
        assert torch.equal(captured.static_inputs["x"], prepared["x"])
        cuda.log.clear()
        session.start_device_timing()
        outputs = [session.run(prepared) for _ in range(3)]
        # No copy, no model call: the graph replays on the model's stream.
        assert cuda.log == ["record:main", "replay:g1:main", "record:main"] * 3
        assert all(out is captured.static_outputs for out in outputs)
        cuda.elapsed_ms = [1.0, 1.0, 1.0]
        assert session.stop_device_timing() == [1_000_000] * 3
        # Another request of the same shapes reuses the graph: its inputs are
        # copied into the static buffers once, when it is run.
        other = session.prepare({"x": feeds["x"] + 1})
        cuda.log.clear()
        session.run(other)
        session.run(other)
        session.run(prepared)
        assert cuda.log == ["copy", "replay:g1:main", "replay:g1:main", "copy", "replay:g1:main"]
        assert torch.equal(captured.static_inputs["x"], prepared["x"])
        assert cuda.graphs == 1
        # Another shape gets a graph of its own.
        session.prepare({"x": np.ones((3, 8), np.float32)})
        assert cuda.graphs == 2
    assert captured.graph is None and captured.static_inputs == {}
    with pytest.raises(RuntimeError, match="closed"):
        session.run(prepared)


@pytest.mark.parametrize("warmup", [False, True])
def test_capture_failure_is_a_cell_error(tmp_path: Path, cuda: Cuda, warmup: bool) -> None:
    message = "CUDA error: operation not permitted when stream is capturing\nCUDA kernel errors"
    with gpu_session(tmp_path, cuda, cuda_graph=True, cudnn_benchmark=True) as (session, feeds):
        if warmup:
            session._call = functools.partial(_raise, RuntimeError("bad input"))
        else:
            cuda.fail_in_capture = message
        with pytest.raises(CellError) as info:
            session.prepare(feeds)
    error = info.value
    expected = "bad input" if warmup else "CUDA error: operation not permitted when stream"
    assert f"RuntimeError: {expected}" in error.problem
    assert "CUDA kernel errors" not in error.problem
    assert ("warm-up" in error.problem) is warmup
    assert error.expected is not None and "no host synchronisation" in error.expected
    assert error.fix == "set `gpu: {cuda_graph: false}` or fix the operation named above"
    assert error.location == LOCATION
    assert torch.backends.cudnn.benchmark is False  # the session still closed cleanly


def _raise(exc: Exception, *args: Any, **kwargs: Any) -> Any:
    raise exc


@pytest.mark.usefixtures("copies")
def test_graphed_load_workers_each_capture_their_own_graph(tmp_path: Path, cuda: Cuda) -> None:
    with gpu_session(tmp_path, cuda, cuda_graph=True) as (session, feeds):
        prepared = {1: session.prepare(feeds)}  # graph g1 on the session's side stream s1
        first, sync_first = session.worker_calls(prepared)  # worker stream s2, capture on s3
        second, sync_second = session.worker_calls(prepared)  # worker stream s4, capture on s5
        assert cuda.graphs == 3
        assert [e for e in cuda.log if e.startswith("capture")] == [
            "capture:g1:s1",
            "capture:g2:s3",
            "capture:g3:s5",
        ]
        cuda.log.clear()
        first[1]()
        second[1]()
        first[1]()
        assert sync_first is not None and sync_second is not None
        sync_second()
        # Each worker replays its own graph on its own stream; nothing is copied.
        assert cuda.log == [
            "enter:s2",
            "replay:g2:s2",
            "enter:s4",
            "replay:g3:s4",
            "enter:s2",
            "replay:g2:s2",
            "sync:s4",
        ]


@pytest.mark.parametrize(("before", "wanted"), [(False, True), (True, False), (True, None)])
def test_cudnn_benchmark_is_set_for_the_session_and_restored(
    tmp_path: Path, cuda: Cuda, before: bool, wanted: bool | None
) -> None:
    torch.backends.cudnn.benchmark = before
    with gpu_session(tmp_path, cuda, cudnn_benchmark=wanted) as (session, _):
        effective = before if wanted is None else wanted
        assert torch.backends.cudnn.benchmark is effective
        assert session.runtime_info["cudnn_benchmark"] is effective
    assert torch.backends.cudnn.benchmark is before


def fake_compile(monkeypatch: pytest.MonkeyPatch, log: list[str], fail_first: str = "") -> None:
    """torch.compile that logs its mode; its first call takes 2.5 fake seconds."""
    now = [100.0]
    monkeypatch.setattr(torch_cuda, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def compile(module: Any, *, mode: str | None = None) -> Any:
        log.append(f"compile:{mode}")

        def compiled(*args: Any, **kwargs: Any) -> Any:
            log.append("compiled_call")
            first = "compiled_call" not in log[:-1]
            now[0] += 2.5 if first else 0.001
            if first and fail_first:
                raise RuntimeError(fail_first)
            return module(*args, **kwargs)

        return compiled

    monkeypatch.setattr(torch, "compile", compile)


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_compile_happens_in_prepare_and_is_timed(
    tmp_path: Path, cuda: Cuda, monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    fake_compile(monkeypatch, cuda.log)
    sc = scenario(tmp_path, device=device, gpu=GpuSpec(compile_mode="reduce-overhead"))
    session, feeds = open_session(sc, tmp_path)
    try:
        assert cuda.log == ["compile:reduce-overhead"]  # compiled at open, not called
        assert "compile_s" not in session.runtime_info
        prepared = session.prepare(feeds)
        sync = ["sync:main"] if device != "cpu" else []
        assert cuda.log == ["compile:reduce-overhead", "compiled_call", *sync]
        assert session.runtime_info["compile_s"] == 2.5
        assert session.runtime_info["compile_mode"] == "reduce-overhead"
        session.prepare(feeds)  # compiled once
        (out,) = session.to_numpy(session.run(prepared))
        np.testing.assert_allclose(out, reference(feeds), rtol=1e-6, atol=1e-6)
        assert cuda.log.count("compiled_call") == 2
    finally:
        session.close()


def test_compile_failures_are_cell_errors(
    tmp_path: Path, cuda: Cuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = scenario(tmp_path, gpu=GpuSpec(compile_mode="max-autotune"))
    fake_compile(monkeypatch, cuda.log, fail_first="backend='inductor' raised:\nCompilationError")
    session, feeds = open_session(sc, tmp_path)
    try:
        with pytest.raises(CellError) as info:
            session.prepare(feeds)
    finally:
        session.close()
    text = str(info.value)
    assert "mode='max-autotune'" in text and "on its first call" in text
    assert "RuntimeError: backend='inductor' raised:" in text
    assert "CompilationError" not in text
    assert info.value.fix == "drop `compile:` or use another mode"

    def refuse(module: Any, *, mode: str | None = None) -> Any:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: default")

    monkeypatch.setattr(torch, "compile", refuse)
    bad = scenario(tmp_path, gpu=GpuSpec(compile_mode="fastest"))
    with pytest.raises(CellError, match=r"at torch.compile: RuntimeError: Unrecognized mode"):
        open_session(bad, tmp_path)


def test_cuda_graph_with_a_graphing_compile_mode_is_refused(tmp_path: Path, cuda: Cuda) -> None:
    sc = scenario(
        tmp_path,
        device="cuda:0",
        gpu=GpuSpec(cuda_graph=True, compile_mode="reduce-overhead", cudnn_benchmark=True),
    )
    with pytest.raises(CellError, match="already replays CUDA graphs") as info:
        open_session(sc, tmp_path)
    assert info.value.location == LOCATION
    assert torch.backends.cudnn.benchmark is False


def test_peak_device_memory(tmp_path: Path, cuda: Cuda) -> None:
    with gpu_session(tmp_path, cuda) as (session, _):
        session.reset_device_peak()
        assert cuda.log == ["reset_peak:cuda:0"]
        assert session.device_peak_mib() == 3.5


def test_out_of_memory_frees_the_request_and_is_described(tmp_path: Path, cuda: Cuda) -> None:
    activations: list[weakref.ref[Any]] = []
    message = "CUDA out of memory. Tried to allocate 2.00 GiB.\nGPU 0 has a total capacity"

    def out_of_memory(*args: Any, **kwargs: Any) -> Any:
        activation = torch.ones(1024)
        activations.append(weakref.ref(activation))
        raise torch.cuda.OutOfMemoryError(message)

    with gpu_session(tmp_path, cuda) as (session, feeds):
        prepared = session.prepare(feeds)
        session.start_device_timing()
        session.run(prepared)
        session._call = out_of_memory
        with pytest.raises(torch.cuda.OutOfMemoryError) as info:
            session.run(prepared)
        # The failed call's frames were cleared: its tensors are gone while the
        # caller still holds the exception.
        assert activations[0]() is None
        cuda.elapsed_ms = [0.25]
        assert session.stop_device_timing() == [250_000]  # the failed request is not counted
        assert session.describe_oom(info.value) == (
            "device out of memory on cuda:0: CUDA out of memory. Tried to allocate 2.00 GiB.; "
            "allocated 100.0 MiB, reserved 120.0 MiB, free 5.0 of 8192.0 MiB "
            "(torch.cuda.mem_get_info)"
        )
    assert cuda.log[-1] == "empty_cache"


def test_describe_oom_without_a_device_or_figures(
    cuda: Cuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    exc = torch.cuda.OutOfMemoryError("CUDA out of memory.")
    assert torch_cuda.describe_oom(exc).startswith("device out of memory on cuda:0: ")

    def broken(device: Any = None) -> tuple[int, int]:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "mem_get_info", broken)
    assert torch_cuda.describe_oom(exc, torch.device("cuda", 0)) == (
        "device out of memory on cuda:0: CUDA out of memory.; memory figures unavailable "
        "(RuntimeError: CUDA error: an illegal memory access was encountered)"
    )


def test_plain_load_workers_are_never_event_timed(tmp_path: Path, cuda: Cuda) -> None:
    with gpu_session(tmp_path, cuda) as (session, feeds):
        calls, sync = session.worker_calls({1: session.prepare(feeds)})
        session.start_device_timing()
        calls[1]()
        assert sync is not None
        sync()
        assert cuda.log == ["enter:s1", "call", "sync:s1"]
        assert session.stop_device_timing() == []


# --- profiling on CUDA ------------------------------------------------------------------
@pytest.fixture
def cuda_profiler(monkeypatch: pytest.MonkeyPatch, cuda: Cuda) -> SimpleNamespace:
    """``torch.autograd.profiler.profile`` as on a GPU: the real CPU profiler, and
    each ``aten::addmm`` given one 7 us CUDA kernel (as kineto links a launch's kernel
    to the op that launched it); the device asked for is kept."""
    real = torch.autograd.profiler.profile
    seen = SimpleNamespace(device=None)

    class GpuProfile:
        def __init__(self, *, use_kineto: bool, use_cpu: bool, use_device: str | None) -> None:
            seen.device = use_device
            self.real = real(use_kineto=use_kineto, use_cpu=use_cpu)

        def __enter__(self) -> GpuProfile:
            cuda.log.append("profiler_start")
            self.real.__enter__()
            return self

        def __exit__(self, *exc: object) -> None:
            cuda.log.append("profiler_stop")
            self.real.__exit__(None, None, None)

        def export_chrome_trace(self, path: str) -> None:
            self.real.export_chrome_trace(path)

        @property
        def function_events(self) -> Any:
            events = self.real.function_events
            for event in events:
                event.use_device = "cuda"
                if event.name == "aten::addmm":
                    event.append_kernel("sm90_gemm", 0, 7.0)
            return events

    monkeypatch.setattr(torch.autograd.profiler, "profile", GpuProfile)
    return seen


def test_cuda_profile_is_device_time_per_module_and_op(
    tmp_path: Path, cuda: Cuda, cuda_profiler: SimpleNamespace
) -> None:
    from perfguard.measure.profiling import PROFILE_WARM_REQUESTS, profile_session

    sc = scenario(tmp_path, device="cuda:0")
    session, feeds = open_session(sc, tmp_path)
    try:
        prepared = session.prepare(feeds)
        trace = tmp_path / "cuda.json"
        profile = profile_session(sc, session, prepared, requests=4, trace_path=trace)
        assert cuda_profiler.device == "cuda"  # kernels recorded beside the CPU ops
        # every request, warm or recorded, waits for the model's stream
        assert cuda.log.count("sync:main") == PROFILE_WARM_REQUESTS + 4
        assert cuda.log[0] == "profiler_start" and cuda.log[-1] == "profiler_stop"
        nodes = {n.name: n for n in profile.nodes}
        # the MLP: fc1 and fc2 each launch one 7 us gemm per request; the model none
        assert {k: n.ns for k, n in nodes.items()} == {"(model)": 0, "fc1": 7000, "fc2": 7000}
        assert {n.provider for n in profile.nodes} == {"cuda"}
        assert nodes["fc1"].op_type == "Linear" and nodes["(model)"].op_type == "MLP"
        assert [(o.op_type, o.ns) for o in profile.op_types] == [("aten::addmm", 14000)]
        assert trace.is_file()
        module = session._module
        assert all(not m._forward_hooks and not m._forward_pre_hooks for m in module.modules())
        np.testing.assert_allclose(
            session.to_numpy(session.run(prepared))[0], reference(feeds), rtol=1e-6, atol=1e-6
        )
    finally:
        session.close()


def test_a_graphed_cuda_session_is_profiled_as_one_node(
    tmp_path: Path, cuda: Cuda, cuda_profiler: SimpleNamespace
) -> None:
    """Graph replays run no module hooks: the whole request is the model's node."""
    from perfguard.measure.profiling import profile_session

    sc = scenario(tmp_path, device="cuda:0", gpu=GpuSpec(cuda_graph=True))
    with gpu_session(tmp_path, cuda, cuda_graph=True) as (session, feeds):
        prepared = session.prepare(feeds)
        profile = profile_session(sc, session, prepared, requests=2)
        assert [n.name for n in profile.nodes] == ["(model)"]
        assert not any(m._forward_pre_hooks for m in session._module.modules())
