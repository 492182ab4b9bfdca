"""The CUDA side of the torch backend, and ``torch.compile``.

One ``CudaRuntime`` per CUDA session holds:

* the model's stream (``torch.cuda.current_stream(device)`` when the session
  opens): the timed loop synchronises that stream, not the whole device;
* an ``EventTimer``: per-request device time from a pair of CUDA events;
* the CUDA graphs (``gpu: {cuda_graph: true}``): one per input signature,
  captured with the documented recipe (warm-up on a side stream, then
  ``torch.cuda.graph`` on that stream), and one more per load worker. A graph
  replays on the stream current when ``replay`` is called (the model's stream,
  or a worker's), so that is the stream the timed loop synchronises;
* the cuDNN autotuner setting, restored at close.

``torch.compile`` (``gpu: {compile: MODE}``) works on the CPU too; its helpers
live here to keep the backend module short. ``describe_oom`` turns a
``torch.cuda.OutOfMemoryError`` into one line with the device's memory figures.
"""

from __future__ import annotations

import functools
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from perfguard.core.errors import CellError
from perfguard.core.scenario import Scenario

__all__ = [
    "GRAPH_WARMUP_CALLS",
    "CapturedCall",
    "CudaRuntime",
    "EventTimer",
    "GraphInputs",
    "compile_module",
    "describe_oom",
    "first_compiled_call",
    "forget_frames",
    "profiler_activities",
    "self_device_us",
]

#: Calls on a side stream before a capture (cuBLAS/cuDNN handles, autotuning,
#: the caching allocator), as the CUDA graphs recipe in torch's notes does.
GRAPH_WARMUP_CALLS = 3
_NS_PER_MS = 1_000_000
_MIB = 1024 * 1024
# torch.compile modes that already capture CUDA graphs of their own.
_GRAPHING_MODES = ("reduce-overhead", "max-autotune")
_CAPTURE_EXPECTED = (
    "a model whose forward can be captured (static shapes, no host synchronisation, "
    "no CPU tensors created in forward)"
)
_CAPTURE_FIX = "set `gpu: {cuda_graph: false}` or fix the operation named above"

Forward = Callable[[Mapping[str, Any]], Any]


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def forget_frames(exc: BaseException) -> None:
    """Drop the locals of the frames an exception passed through (finished ones).

    A ``torch.cuda.OutOfMemoryError`` keeps the forward's frames, and with them
    its activations, alive for as long as the caller holds the exception; cleared,
    the memory returns to the allocator and ``close`` can hand it back.
    """
    traceback.clear_frames(exc.__traceback__)


class EventTimer:
    """Per-request device time: a start and an end CUDA event around each call.

    Host cost inside the timed region: two ``Event.record(stream)`` calls per
    request (each one ``cudaEventRecord``: enqueued, never waits, about 1-3 us of
    host time) plus a list lookup; the first window also creates the event objects
    (the CUDA events themselves are created at their first record) and later
    windows reuse them. The elapsed times are read only in ``stop``, after
    synchronising the stream, never between requests.
    """

    def __init__(self, torch: Any, stream: Any) -> None:
        self._event = functools.partial(torch.cuda.Event, enable_timing=True)
        self._stream = stream
        self._pairs: list[tuple[Any, Any]] = []
        self._used = 0
        self.active = False

    def start(self) -> None:
        self._used = 0
        self.active = True

    def around(self, call: Callable[[Any], Any], arg: Any) -> Any:
        pairs = self._pairs
        used = self._used
        if used == len(pairs):
            pairs.append((self._event(), self._event()))
        start, end = pairs[used]
        start.record(self._stream)
        outputs = call(arg)
        end.record(self._stream)
        self._used = used + 1
        return outputs

    def stop(self) -> list[int]:
        """Device time of each timed call in ns, in call order (ms from CUDA -> ns)."""
        self.active = False
        used, self._used = self._used, 0
        if not used:
            return []
        self._stream.synchronize()
        return [round(s.elapsed_time(e) * _NS_PER_MS) for s, e in self._pairs[:used]]

    def clear(self) -> None:
        self.active = False
        self._pairs.clear()
        self._used = 0


class CapturedCall:
    """One request captured into a CUDA graph on static input buffers.

    ``replay`` copies a request's inputs into the static buffers only when they
    are not already there (a timed loop replaying one prepared request copies
    nothing) and returns the static outputs: the next replay overwrites them.
    """

    def __init__(
        self, torch: Any, device: Any, forward: Forward, inputs: Mapping[str, Any], sc: Scenario
    ) -> None:
        self.static_inputs = {name: tensor.clone() for name, tensor in inputs.items()}
        side = torch.cuda.Stream(device=device)
        try:
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(GRAPH_WARMUP_CALLS):
                    forward(self.static_inputs)
            torch.cuda.current_stream(device).wait_stream(side)
        except torch.cuda.OutOfMemoryError as exc:
            forget_frames(exc)
            raise
        except Exception as exc:
            raise _capture_error(sc, exc, "in the warm-up before the capture") from exc
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=side):
                outputs = forward(self.static_inputs)
        except torch.cuda.OutOfMemoryError as exc:
            forget_frames(exc)
            raise
        except Exception as exc:
            raise _capture_error(sc, exc, "") from exc
        self.graph: Any = graph
        self.static_outputs: Any = outputs
        self.loaded: Any = inputs  # whose values the static inputs hold now

    def replay(self, inputs: Mapping[str, Any]) -> Any:
        graph = self.graph
        if graph is None:
            raise RuntimeError("the torch session is closed")
        if self.loaded is not inputs:
            for name, tensor in inputs.items():
                self.static_inputs[name].copy_(tensor)
            self.loaded = inputs
        graph.replay()
        return self.static_outputs

    def release(self) -> None:
        self.graph = None
        self.static_outputs = None
        self.static_inputs = {}
        self.loaded = None


def _capture_error(sc: Scenario, exc: BaseException, phase: str) -> CellError:
    where = f" {phase}" if phase else ""
    return CellError(
        f"CUDA graph capture of model {sc.model.name!r} on {sc.device} failed{where}: "
        f"{_first_line(exc)}",
        expected=_CAPTURE_EXPECTED,
        fix=_CAPTURE_FIX,
        location=sc.location,
    )


class GraphInputs(dict[str, Any]):
    """A graphed session's prepared request: its tensors and the graph it replays."""

    __slots__ = ("captured",)
    captured: CapturedCall


def _signature(inputs: Mapping[str, Any]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    return tuple((name, tuple(t.shape), str(t.dtype)) for name, t in inputs.items())


class CudaRuntime:
    """What a torch session on a CUDA device adds: stream, events, graphs, cuDNN."""

    def __init__(
        self, torch: Any, device: Any, sc: Scenario, forward: Forward, info: dict[str, Any]
    ) -> None:
        self._torch = torch
        self._device = device
        self._scenario = sc
        self._forward = forward
        self._info = info
        self.stream = torch.cuda.current_stream(device)
        self.synchronize: Callable[[], None] = self.stream.synchronize
        self.timer = EventTimer(torch, self.stream)
        self._graphs: dict[Any, CapturedCall] | None = {} if sc.gpu.cuda_graph else None
        self._lanes: weakref.WeakSet[CapturedCall] = weakref.WeakSet()
        self._previous_benchmark: bool | None = None
        if sc.gpu.cudnn_benchmark is not None:
            self._previous_benchmark = bool(torch.backends.cudnn.benchmark)
            torch.backends.cudnn.benchmark = sc.gpu.cudnn_benchmark
        info["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        info["cuda_graph"] = False

    @staticmethod
    def check(sc: Scenario) -> None:
        """Refuse GPU options that cannot work together, before anything is built."""
        mode = sc.gpu.compile_mode
        if sc.gpu.cuda_graph and mode in _GRAPHING_MODES:
            raise CellError(
                f"`gpu: {{cuda_graph: true}}` with `compile: {mode}`: that mode already "
                "replays CUDA graphs of its own, and a graph cannot be captured around them",
                expected="cuda_graph with eager torch or `compile: default`",
                fix="drop one of the two (`compile: reduce-overhead` alone is torch's own "
                "CUDA-graph mode)",
                location=sc.location,
            )

    @property
    def graphed(self) -> bool:
        return self._graphs is not None

    def run(self, prepared: Any) -> Any:
        try:
            if type(prepared) is GraphInputs:
                call: Callable[[Any], Any] = prepared.captured.replay
            else:
                call = self._forward
            if self.timer.active:
                return self.timer.around(call, prepared)
            return call(prepared)
        except self._torch.cuda.OutOfMemoryError as exc:
            forget_frames(exc)
            raise

    def graph_inputs(self, tensors: Mapping[str, Any]) -> GraphInputs:
        """The prepared request; the first of its shapes is captured (outside timing)."""
        inputs = GraphInputs(tensors)
        key = _signature(tensors)
        assert self._graphs is not None
        captured = self._graphs.get(key)
        if captured is None:
            captured = self._capture(inputs)
            self._graphs[key] = captured
            self._info["cuda_graph"] = True
        inputs.captured = captured
        return inputs

    def _capture(self, inputs: Mapping[str, Any]) -> CapturedCall:
        return CapturedCall(self._torch, self._device, self._forward, inputs, self._scenario)

    def graph_worker_calls(
        self, prepared: Mapping[int, Any]
    ) -> tuple[dict[int, Callable[[], Any]], Callable[[], None]]:
        """One load worker: its own stream, and its own graph and static buffers per
        batch size, captured now; a call replays on the worker's stream.

        Graphs are never shared between workers (one graph's static buffers can
        serve one request at a time). The session keeps only weak references:
        a worker's graphs are freed with its calls (or at close).
        """
        torch = self._torch
        stream = torch.cuda.Stream(device=self._device)
        enter = functools.partial(torch.cuda.stream, stream)

        def replay(captured: CapturedCall, inputs: Mapping[str, Any]) -> Any:
            try:
                with enter():
                    return captured.replay(inputs)
            except torch.cuda.OutOfMemoryError as exc:
                forget_frames(exc)
                raise

        calls: dict[int, Callable[[], Any]] = {}
        for k, inputs in prepared.items():
            captured = self._capture(inputs)
            self._lanes.add(captured)
            calls[k] = functools.partial(replay, captured, inputs)
        sync: Callable[[], None] = stream.synchronize
        return calls, sync

    def reset_peak(self) -> None:
        self._torch.cuda.reset_peak_memory_stats(self._device)

    def peak_mib(self) -> float:
        return float(self._torch.cuda.max_memory_allocated(self._device)) / _MIB

    def close(self) -> None:
        """Free graphs, static buffers and events; restore cuDNN's autotuner setting."""
        for captured in [*(self._graphs or {}).values(), *self._lanes]:
            captured.release()
        if self._graphs is not None:
            self._graphs.clear()
        self._lanes = weakref.WeakSet()
        self.timer.clear()
        if self._previous_benchmark is not None:
            self._torch.backends.cudnn.benchmark = self._previous_benchmark
            self._previous_benchmark = None


def _compile_error(sc: Scenario, exc: BaseException, when: str) -> CellError:
    return CellError(
        f"torch.compile(mode={sc.gpu.compile_mode!r}) of model {sc.model.name!r} failed "
        f"{when}: {_first_line(exc)}",
        expected="a model torch.compile can compile in that mode",
        fix="drop `compile:` or use another mode",
        location=sc.location,
    )


def compile_module(torch: Any, module: Any, sc: Scenario) -> Callable[..., Any]:
    """``torch.compile(module, mode=...)``; compilation itself happens at the first call."""
    try:
        compiled: Callable[..., Any] = torch.compile(module, mode=sc.gpu.compile_mode)
    except Exception as exc:
        raise _compile_error(sc, exc, "at torch.compile") from exc
    return compiled


def first_compiled_call(
    torch: Any,
    forward: Forward,
    inputs: Mapping[str, Any],
    synchronize: Callable[[], None] | None,
    sc: Scenario,
) -> float:
    """Run the compiled model once (which compiles it); the seconds that took."""
    start = time.perf_counter()
    try:
        forward(inputs)
        if synchronize is not None:
            synchronize()
    except torch.cuda.OutOfMemoryError as exc:
        forget_frames(exc)
        raise
    except Exception as exc:
        raise _compile_error(sc, exc, "on its first call") from exc
    return time.perf_counter() - start


def describe_oom(exc: BaseException, device: Any = None) -> str:
    """One line for a ``torch.cuda.OutOfMemoryError``: the error and the device's memory.

    ``device`` defaults to the current CUDA device. The figures are read after
    the error; if even that fails, the line says so instead.
    """
    import torch

    where = str(device) if device is not None else "cuda"
    try:
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
            where = str(device)
        allocated = torch.cuda.memory_allocated(device) / _MIB
        reserved = torch.cuda.memory_reserved(device) / _MIB
        free, total = torch.cuda.mem_get_info(device)
        figures = (
            f"allocated {allocated:.1f} MiB, reserved {reserved:.1f} MiB, "
            f"free {free / _MIB:.1f} of {total / _MIB:.1f} MiB (torch.cuda.mem_get_info)"
        )
    except Exception as err:
        figures = f"memory figures unavailable ({_first_line(err)})"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    return f"device out of memory on {where}: {first}; {figures}"


def profiler_activities(torch: Any, device: Any) -> list[Any]:
    """``torch.profiler`` activities for a session on ``device``: CPU, and CUDA on a GPU."""
    activity = torch.profiler.ProfilerActivity
    if getattr(device, "type", "cpu") == "cuda":
        return [activity.CPU, activity.CUDA]
    return [activity.CPU]


def self_device_us(event: Any) -> float:
    """A profiled function's own device time in us: its kernels, not its children's.

    ``self_device_time_total`` (torch 2.4+), else ``self_cuda_time_total``.
    """
    value = getattr(event, "self_device_time_total", None)
    if value is None:
        value = getattr(event, "self_cuda_time_total", 0.0)
    return float(value or 0.0)
