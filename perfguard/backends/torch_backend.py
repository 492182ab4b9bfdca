"""The PyTorch backend: a factory's ``nn.Module``, eager or ``torch.compile``d.

Precisions: fp32; fp16/bf16 cast the model and its floating inputs; int8 is
dynamic quantization of the ``nn.Linear`` layers (CPU only). On CUDA the
session synchronises the model's own stream, can time each request with CUDA
events, replay CUDA graphs and set cuDNN's autotuner (``perfguard.backends.torch_cuda``).

``TorchSession.profiler`` profiles requests with ``torch.profiler`` (``TorchProfiler``):
one ``record_function`` range per module call, from forward hooks installed for the
pass only, gives each module's self time; aten ops give the time per op type.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from perfguard.backends.base import ProfiledRequests
from perfguard.backends.torch_cuda import (
    CudaRuntime,
    compile_module,
    describe_oom,
    first_compiled_call,
    forget_frames,
    profiler_device,
    self_device_us,
)
from perfguard.core.errors import CellError
from perfguard.core.scenario import Scenario
from perfguard.models.factory import check_forward_inputs, feeds_positionally, load_factory
from perfguard.models.quantize import quantize_torch_int8, torch_quant_facts
from perfguard.records.opprofile import PATH_SEPARATOR

if TYPE_CHECKING:
    import torch

__all__ = [
    "REQUEST_RANGE",
    "ROOT_NODE",
    "TorchBackend",
    "TorchProfiler",
    "TorchSession",
    "parse_torch_device",
]

_INSTALL_HINT = "PyTorch is not installed (pip install 'perfguard[torch]')"


class TorchBackend:
    """Runs ``factory:`` models with PyTorch."""

    name = "torch"

    def unavailable_reason(self) -> str | None:
        return None if importlib.util.find_spec("torch") is not None else _INSTALL_HINT

    def open(
        self,
        scenario: Scenario,
        feeds: Mapping[str, np.ndarray],
        cache_dir: Path,
        *,
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    ) -> TorchSession:
        """``calibration`` is ignored: torch int8 is dynamic quantization."""
        return TorchSession(scenario, feeds)


def parse_torch_device(scenario: Scenario) -> torch.device:
    """``cpu``/``cuda``/``cuda:N`` as a ``torch.device``, checked against this machine."""
    import torch

    text = scenario.device.strip().lower()
    index: int | None = None
    if text.startswith("cuda:"):
        suffix = text.partition(":")[2]
        if not suffix.isdigit():
            raise _bad_device(scenario)
        index = int(suffix)
    elif text not in ("cpu", "cuda"):
        raise _bad_device(scenario)
    if text == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise CellError(
            f"device {scenario.device!r} requested but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, built with CUDA {torch.version.cuda or 'none'})",
            expected="a CUDA build of PyTorch and a visible NVIDIA GPU",
            fix="install a CUDA build of torch, check CUDA_VISIBLE_DEVICES and the driver, "
            "or run this cell with `device: cpu`",
            location=scenario.location,
        )
    count = torch.cuda.device_count()
    if index is None:
        index = torch.cuda.current_device()
    if index >= count:
        raise CellError(
            f"device {scenario.device!r} requested but only {count} CUDA device(s) are visible",
            expected=f"cuda:0 .. cuda:{count - 1}",
            fix="pick a visible device index or check CUDA_VISIBLE_DEVICES",
            location=scenario.location,
        )
    return torch.device("cuda", index)


def _bad_device(scenario: Scenario) -> CellError:
    return CellError(
        f"unknown device {scenario.device!r} for the torch backend",
        expected="cpu, cuda or cuda:N",
        fix="set `device:` to cpu, cuda or cuda:<index>",
        location=scenario.location,
    )


class TorchSession:
    """A factory's module on one device at one precision.

    Beyond the ``Session`` protocol (all no-ops or ``None`` on the CPU):
    ``start_device_timing``/``stop_device_timing`` (per-request device time from
    CUDA events), ``reset_device_peak``/``device_peak_mib`` (the CUDA caching
    allocator's peak), ``describe_oom`` (a ``torch.cuda.OutOfMemoryError`` as one
    line) and ``worker_calls`` (one stream per concurrent load worker).
    """

    def __init__(self, scenario: Scenario, feeds: Mapping[str, np.ndarray]) -> None:
        import torch

        self._scenario = scenario
        self._positional = False
        self._cuda: CudaRuntime | None = None
        self._compile_pending = False
        self.synchronize: Callable[[], None] | None = None
        self.runtime_info: dict[str, Any] = {}
        if scenario.model.factory is None:
            raise CellError(
                f"model {scenario.model.name!r} is an ONNX file; the torch backend needs a "
                "`factory:`",
                expected="`factory: module:function` returning a torch.nn.Module",
                fix="run this model with `backend: onnxruntime`, or add a factory",
                location=scenario.location,
            )
        if scenario.precision not in ("fp32", "fp16", "bf16", "int8"):
            raise CellError(
                f"unknown precision {scenario.precision!r} for the torch backend",
                expected="fp32, fp16, bf16 or int8",
                fix="set `precision:` to a supported value",
                location=scenario.location,
            )
        self.device = parse_torch_device(scenario)
        if scenario.precision == "int8" and self.device.type != "cpu":
            raise CellError(
                f"precision int8 on {scenario.device} is not supported by the torch backend",
                expected="int8 (dynamic quantization of nn.Linear) on device cpu",
                fix="run int8 with `device: cpu`, or use fp16/bf16 on the GPU",
                location=scenario.location,
            )
        if self.device.type == "cuda":
            CudaRuntime.check(scenario)
        self.dtype = precision_dtype(scenario.precision)
        self._threads = TorchThreads(scenario.threads)
        try:
            self._module = self._build(scenario, feeds)
            self._call: Callable[..., Any] = self._module
            if scenario.gpu.compile_mode is not None:
                self._call = compile_module(torch, self._module, scenario)
                self._compile_pending = True  # compiled by the first call, in prepare()
            self.runtime_info = {
                "torch": torch.__version__,
                "device": str(self.device),
                "dtype": str(self.dtype).removeprefix("torch."),
                "precision": scenario.precision,
                "threads": torch.get_num_threads(),
            }
            if scenario.precision == "int8":  # what torch's quantizer replaced
                applied = torch_quant_facts(self._module)
                self.runtime_info["quantization"] = {"applied": applied.to_dict()}
            if scenario.gpu.compile_mode is not None:
                self.runtime_info["compile_mode"] = scenario.gpu.compile_mode
            if self.device.type == "cuda":
                self.runtime_info["cuda"] = torch.version.cuda
                self.runtime_info["gpu"] = torch.cuda.get_device_name(self.device)
                self._cuda = CudaRuntime(
                    torch, self.device, scenario, self._forward, self.runtime_info
                )
                # The model's stream, not the whole device: other work on the GPU
                # (another session, a load worker's stream) is not waited for.
                self.synchronize = self._cuda.synchronize
        except BaseException:
            self._threads.restore()
            raise

    def _build(self, scenario: Scenario, feeds: Mapping[str, np.ndarray]) -> torch.nn.Module:
        module = load_factory(scenario.model)
        module.eval()
        self._positional = feeds_positionally(module, list(feeds))
        check_forward_inputs(module, list(feeds), scenario.model.location)
        if scenario.precision == "int8":
            module = quantize_torch_int8(module, scenario.model.name, scenario.location)
        elif scenario.precision in ("fp16", "bf16"):
            module = module.to(self.dtype)
        return module.to(self.device)

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """numpy -> tensors on the device; floats cast to the precision's dtype.

        Also outside any timing: the first call of a ``torch.compile``d model
        (``runtime_info["compile_s"]``), and with ``cuda_graph`` the capture of
        the first request of each input shape (the result then carries its graph).
        """
        import torch

        bf16_inputs = {
            spec.name for spec in self._scenario.model.inputs if spec.dtype == "bfloat16"
        }
        prepared: dict[str, torch.Tensor] = {}
        for name, array in feeds.items():
            tensor = torch.from_numpy(np.array(array, copy=True, order="C"))
            if tensor.is_floating_point():
                if self.dtype != torch.float32:
                    tensor = tensor.to(self.dtype)
                elif name in bf16_inputs:
                    tensor = tensor.to(torch.bfloat16)
            prepared[name] = tensor.to(self.device)
        if self._compile_pending:
            self._compile_pending = False
            self.runtime_info["compile_s"] = first_compiled_call(
                torch, self._forward, prepared, self.synchronize, self._scenario
            )
        if self._cuda is not None and self._cuda.graphed:
            return self._cuda.graph_inputs(prepared)
        return prepared

    def run(self, prepared: Any) -> Any:
        cuda = self._cuda
        if cuda is not None:  # events while timing, graph replay, OOM clean-up
            return cuda.run(prepared)
        import torch

        with torch.inference_mode():
            if self._positional:  # a lone input into a single-input forward()
                return self._call(*prepared.values())
            return self._call(**prepared)

    def _forward(self, prepared: Mapping[str, Any]) -> Any:
        """One eager (or compiled) model call: no events, no graph."""
        import torch

        with torch.inference_mode():
            if self._positional:
                return self._call(*prepared.values())
            return self._call(**prepared)

    def start_device_timing(self) -> None:
        """From now on every ``run`` is timed on the device too (CUDA only).

        ``run`` records a CUDA event on the model's stream before and after the
        model call: two ``cudaEventRecord`` calls, a few microseconds of host time
        per request, inside the timed region. Nothing is read until
        ``stop_device_timing``. Load workers' calls are never event-timed.
        """
        if self._cuda is not None:
            self._cuda.timer.start()

    def stop_device_timing(self) -> list[int] | None:
        """Device time in ns of each ``run`` since ``start_device_timing``, in call
        order (cold start and warm-up included when they came after the start);
        read after synchronising the model's stream. ``None`` on the CPU."""
        return self._cuda.timer.stop() if self._cuda is not None else None

    def reset_device_peak(self) -> None:
        """Restart the CUDA allocator's peak (``torch.cuda.reset_peak_memory_stats``)."""
        if self._cuda is not None:
            self._cuda.reset_peak()

    def device_peak_mib(self) -> float | None:
        """Peak device memory held by tensors since the last reset (MiB); ``None`` on CPU."""
        return self._cuda.peak_mib() if self._cuda is not None else None

    def describe_oom(self, exc: BaseException) -> str:
        """A ``torch.cuda.OutOfMemoryError`` from this session as one line with the
        device's memory figures (``torch_cuda.describe_oom``)."""
        return describe_oom(exc, self.device)

    def worker_calls(
        self, prepared: Mapping[int, Any]
    ) -> tuple[dict[int, Callable[[], Any]], Callable[[], None] | None]:
        """Calls for one concurrent load worker (``prepared`` per batch size).

        On CUDA each worker gets its own stream, so workers' kernels can overlap
        as a multi-stream server's do, and the worker synchronises that stream
        only. With ``cuda_graph`` each worker also gets its own graphs and static
        buffers, captured here on its stream. Elsewhere the calls are plain
        ``run`` calls.
        """
        calls: dict[int, Callable[[], Any]]
        if self.device.type != "cuda":
            calls = {k: functools.partial(self.run, p) for k, p in prepared.items()}
            return calls, None
        if self._cuda is not None and self._cuda.graphed:
            return self._cuda.graph_worker_calls(prepared)
        import torch

        stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        forward = self._forward

        def on_stream(inputs: Any) -> Any:
            try:
                with torch.cuda.stream(stream):
                    return forward(inputs)
            except torch.cuda.OutOfMemoryError as exc:
                forget_frames(exc)
                raise

        calls = {k: functools.partial(on_stream, p) for k, p in prepared.items()}
        sync: Callable[[], None] = stream.synchronize
        return calls, sync

    def profiler(self, prepared: Any) -> TorchProfiler:
        """A ``torch.profiler`` pass over requests of ``prepared`` (``TorchProfiler``)."""
        hooked = None
        if self._call is self._module and not (self._cuda is not None and self._cuda.graphed):
            hooked = self._module  # a compiled or graph-replayed call runs no module hooks
        return TorchProfiler(self, prepared, hooked)

    def to_numpy(self, outputs: Any) -> list[np.ndarray]:
        arrays: list[np.ndarray] = []
        _flatten(outputs, arrays)
        return arrays

    def close(self) -> None:
        """Release the model, graphs and events; restore threads and cuDNN's setting.

        Safe after a ``torch.cuda.OutOfMemoryError`` from ``run``: the failed
        call's frames were cleared, and the allocator's cache is emptied here.
        """
        import torch

        module = getattr(self, "_module", None)
        if module is not None:
            del self._module
            self._call = _closed
        cuda = self._cuda
        if cuda is not None:
            cuda.close()
        if self.device.type == "cuda":
            if cuda is not None:
                gc.collect()  # reference cycles (a failed request's traceback) hold memory
            torch.cuda.empty_cache()
        self._threads.restore()


def precision_dtype(precision: str) -> torch.dtype:
    """The torch dtype a cell's model and float inputs run in at ``precision``."""
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)


class TorchThreads:
    """torch's intra-op threads for one session: ``threads`` set when it opens (None:
    left as they are), the previous count restored by ``restore`` (once; safe again)."""

    def __init__(self, threads: int | None) -> None:
        import torch

        self._previous: int | None = None
        if threads is not None:
            self._previous = torch.get_num_threads()
            torch.set_num_threads(threads)

    def restore(self) -> None:
        import torch

        if self._previous is not None:
            torch.set_num_threads(self._previous)
            self._previous = None


def _closed(*_: Any, **__: Any) -> Any:
    raise RuntimeError("the torch session is closed")


#: The ``record_function`` range around each recorded request.
REQUEST_RANGE = "perfguard/request"
#: The node of the model's own module (its forward outside its submodules); also the
#: whole request when no module hooks can run (``torch.compile``, CUDA graphs).
ROOT_NODE = "(model)"


class TorchProfiler:
    """One ``torch.profiler`` pass over a torch session (``OperatorProfiler``).

    While the pass lasts, every module of the model has a forward pre-hook that opens
    a ``record_function`` range named after its qualified path (``layer2.0.conv1``;
    the model itself ``(model)``) and a forward hook (``always_call``) that closes it;
    both are removed by ``finish``. A recorded request runs inside a
    ``perfguard/request`` range, so events are split per request by their ancestors.

    A node's time is its module's *self* time: on the CPU its range less the ranges of
    the modules called inside it; on CUDA the device time of the kernels its own aten
    ops launched (``self_device_us``). Op types are aten ops (any profiled function
    that is not one of these ranges): self CPU time, or self device time on CUDA.
    """

    def __init__(self, session: TorchSession, prepared: Any, hooked: Any) -> None:
        import torch

        self._session = session
        self._prepared = prepared
        self._device = session.device
        self._ranges: dict[str, tuple[str, str]] = {}  # range name -> (node, module class)
        self._handles: list[Any] = []
        self._profile: Any = None
        self._finished = False
        if hooked is not None:
            self._hook(torch, hooked)
        try:
            # The autograd profiler is what torch.profiler.profile wraps (the same
            # kineto events and Chrome trace); used directly it does not import
            # torch._dynamo on its first start, which costs seconds per process.
            self._profile = torch.autograd.profiler.profile(
                use_kineto=True, use_cpu=True, use_device=profiler_device(self._device)
            )
            self._profile.__enter__()
        except BaseException:
            self._unhook()
            raise

    def _hook(self, torch: Any, model: Any) -> None:
        record_function = torch.profiler.record_function
        for path, module in model.named_modules():
            label = path or ROOT_NODE
            node = path.replace(".", PATH_SEPARATOR) if path else ROOT_NODE
            self._ranges[label] = (node, type(module).__name__)
            open_ranges: list[Any] = []

            def enter(
                _module: Any, _args: Any, _label: str = label, _open: list[Any] = open_ranges
            ) -> None:
                span = record_function(_label)
                span.__enter__()
                _open.append(span)

            def leave(_module: Any, _args: Any, _out: Any, _open: list[Any] = open_ranges) -> None:
                if _open:
                    _open.pop().__exit__(None, None, None)

            self._handles.append(module.register_forward_pre_hook(enter))
            self._handles.append(module.register_forward_hook(leave, always_call=True))

    def _unhook(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def request(self, *, record: bool) -> None:
        import torch

        session = self._session
        if record:
            with torch.profiler.record_function(REQUEST_RANGE):
                session.run(self._prepared)
                if session.synchronize is not None:
                    session.synchronize()
        else:
            session.run(self._prepared)
            if session.synchronize is not None:
                session.synchronize()

    def finish(self) -> ProfiledRequests:
        """Stop the profiler, remove the hooks; each recorded request's figures."""
        if self._finished:
            raise RuntimeError("this profiling pass is already finished")
        self._finished = True
        try:
            self._profile.__exit__(None, None, None)
        finally:
            self._unhook()
        trace = _chrome_trace(self._profile)
        on_device = self._device.type == "cuda"
        # On the CPU the events are read back from the trace: torch's own event objects
        # (``function_events``) take ten times longer to build. On a GPU they are
        # needed: they link each kernel's device time to the op that launched it.
        events: Sequence[Any] = (
            list(self._profile.function_events)
            if on_device or trace is None
            else trace_events(trace)
        )
        nodes, op_types, info = split_torch_events(events, self._ranges, on_device=on_device)
        provider = self._device.type
        return ProfiledRequests(
            profiler="torch.profiler",
            nodes=nodes,
            op_types=op_types,
            node_info={node: (op_type, provider) for node, op_type in info.items()},
            trace=trace,
        )


def _chrome_trace(profile: Any) -> str | None:
    """The pass's Chrome trace as JSON text (``export_chrome_trace`` writes a file)."""
    with tempfile.TemporaryDirectory(prefix="perfguard-profile-") as folder:
        path = Path(folder) / "trace.json"
        profile.export_chrome_trace(str(path))
        return path.read_text(encoding="utf-8") if path.is_file() else None


@dataclass
class TraceEvent:
    """A CPU event of a Chrome trace, shaped as ``split_torch_events`` reads torch's
    function events: ``name``, ``time_range`` (us), ``cpu_parent``, ``self_cpu_time_total``."""

    name: str
    time_range: SimpleNamespace
    cpu_parent: TraceEvent | None = None
    self_cpu_time_total: float = 0.0


def trace_events(trace: str) -> list[TraceEvent]:
    """The CPU ops and ``record_function`` ranges of a ``torch.profiler`` Chrome trace,
    each linked to the event it runs inside (on its thread) and with its self time:
    its duration less its children's."""
    document = json.loads(trace)
    raw = document.get("traceEvents", []) if isinstance(document, dict) else document
    threads: dict[Any, list[tuple[float, float, str]]] = {}
    for item in raw:
        if item.get("ph") == "X" and item.get("cat") in ("cpu_op", "user_annotation"):
            start = float(item["ts"])
            span = (start, start + float(item.get("dur", 0.0)), str(item["name"]))
            threads.setdefault((item.get("pid"), item.get("tid")), []).append(span)
    events: list[TraceEvent] = []
    for spans in threads.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_events: list[TraceEvent] = []
        for start, end, name in spans:
            while open_events and open_events[-1].time_range.end < end - _NESTING_SLACK_US:
                open_events.pop()
            parent = open_events[-1] if open_events else None
            event = TraceEvent(name, SimpleNamespace(start=start, end=end), parent, end - start)
            if parent is not None:
                parent.self_cpu_time_total -= end - start
            open_events.append(event)
            events.append(event)
    return events


#: Rounding of a trace's microsecond timestamps: a child may end this much after its parent.
_NESTING_SLACK_US = 0.01


def split_torch_events(
    events: Sequence[Any], ranges: Mapping[str, tuple[str, str]], *, on_device: bool
) -> tuple[tuple[dict[str, float], ...], tuple[dict[str, float], ...], dict[str, str]]:
    """Per recorded request: node -> self ns and op type -> self ns; node -> op type.

    ``events`` are ``torch.profiler`` function events (``name``, ``time_range`` in us,
    ``cpu_parent``, ``self_cpu_time_total``, self device time); ``ranges`` maps a module
    range's name to its node and module class. Events outside a ``perfguard/request``
    range (the warm requests) are left out. Without module ranges the whole request
    is the ``(model)`` node.
    """
    requests = sorted(
        (e for e in events if e.name == REQUEST_RANGE), key=lambda e: e.time_range.start
    )
    index = {id(e): i for i, e in enumerate(requests)}
    nodes: list[dict[str, float]] = [{} for _ in requests]
    op_types: list[dict[str, float]] = [{} for _ in requests]
    info: dict[str, str] = {}
    if not ranges:
        ranges = {REQUEST_RANGE: (ROOT_NODE, "")}

    def add(table: dict[str, float], key: str, ns: float) -> None:
        table[key] = table.get(key, 0.0) + ns

    for event in events:
        name = event.name
        parent = event.cpu_parent
        enclosing = None  # the nearest module range above this event
        request = event if name == REQUEST_RANGE else None
        while parent is not None and request is None:
            if enclosing is None and parent.name in ranges:
                enclosing = parent
            if parent.name == REQUEST_RANGE:
                request = parent
            parent = parent.cpu_parent
        if request is None:
            continue
        at = index[id(request)]
        if name in ranges:
            node, module_class = ranges[name]
            info.setdefault(node, module_class)
            if not on_device:
                span = (event.time_range.end - event.time_range.start) * 1000.0
                add(nodes[at], node, span)
                if enclosing is not None:  # the caller's self time excludes this module
                    add(nodes[at], ranges[enclosing.name][0], -span)
            else:
                nodes[at].setdefault(node, 0.0)
            continue
        if name == REQUEST_RANGE:
            continue
        ns = (self_device_us(event) if on_device else float(event.self_cpu_time_total)) * 1000.0
        if ns <= 0:
            continue
        add(op_types[at], name, ns)
        if on_device and enclosing is not None:
            add(nodes[at], ranges[enclosing.name][0], ns)
    return tuple(nodes), tuple(op_types), info


def _flatten(value: Any, out: list[np.ndarray]) -> None:
    import torch

    if value is None:
        return
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.float()
        out.append(tensor.cpu().numpy())
    elif hasattr(value, "to_tuple") and callable(value.to_tuple):  # transformers ModelOutput
        _flatten(value.to_tuple(), out)
    elif isinstance(value, Mapping):
        for item in value.values():
            _flatten(item, out)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _flatten(item, out)
    elif isinstance(value, np.ndarray):
        out.append(value.astype(np.float32) if value.dtype == np.float16 else value)
    else:
        out.append(np.asarray(value))
