"""The TensorRT backend: an ``onnx:`` file or exported factory, built into a cached engine.

Runs ``execute_async_v3`` on CUDA streams; memory and streams come from ``torch.cuda``
(:class:`TorchCuda`). fp16/bf16 let TensorRT pick half kernels (bf16: TensorRT 9+); int8
is implicit quantization calibrated on the accuracy inputs (deprecated by TensorRT 10.1).

``TensorRTSession.profiler`` profiles requests per layer with TensorRT's ``IProfiler``
(``TrtProfiler``), set on the session's execution context for the pass only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.backends import tensorrt_build as build
from perfguard.backends.base import ProfiledRequests
from perfguard.backends.tensorrt_build import Engine, EngineSpec, Shape
from perfguard.backends.torch_backend import parse_torch_device
from perfguard.core.errors import (
    BackendUnavailable,
    CellError,
    InputError,
    Location,
    ModelError,
)
from perfguard.core.scenario import Scenario
from perfguard.machine import native
from perfguard.models.cache import file_sha256, onnx_file_of
from perfguard.models.quantize import convert_fp16, quantize_int8

__all__ = [
    "import_tensorrt",
    "UNKNOWN_LAYER_TYPE",
    "TensorRTBackend",
    "TensorRTSession",
    "TorchCuda",
    "TrtProfiler",
    "layer_types",
]

_INSTALL_HINT = (
    "TensorRT is not installed (pip install tensorrt-cu13-bindings, the GPU lock's, with "
    "TensorRT's libraries on the loader path: docs/ci.md; or use NVIDIA's container)"
)
_TORCH_HINT = "the TensorRT backend needs PyTorch for GPU memory (pip install torch, CUDA build)"
_PRECISIONS = ("fp32", "fp16", "bf16", "int8")
_DTYPES = dict(  # TensorRT DataType name -> torch/numpy dtype name
    zip(
        ["FLOAT", "HALF", "BF16", "INT8", "INT32", "INT64", "BOOL", "UINT8"],
        ["float32", "float16", "bfloat16", "int8", "int32", "int64", "bool", "uint8"],
        strict=True,
    )
)


def import_tensorrt() -> Any:
    """TensorRT's Python module: ``tensorrt`` (NVIDIA's ``tensorrt`` packages), else
    ``tensorrt_bindings``, the module of the ``tensorrt-cu13-bindings`` wheel alone (what
    the GPU lock installs, the runner providing TensorRT's native libraries). The
    ImportError of ``tensorrt`` is raised when neither is installed."""
    try:
        import tensorrt
    except ModuleNotFoundError as exc:
        if exc.name != "tensorrt":
            raise
        try:
            import tensorrt_bindings
        except ModuleNotFoundError as inner:
            if inner.name != "tensorrt_bindings":
                raise
            raise exc from None
        return tensorrt_bindings
    return tensorrt


def _load_tensorrt() -> Any:
    """:func:`import_tensorrt` (tests replace this with a fake module)."""
    return import_tensorrt()


def _load_cuda(scenario: Scenario) -> TorchCuda:
    """The CUDA device of ``scenario`` (tests replace this with a CPU fake)."""
    return TorchCuda(parse_torch_device(scenario))


def import_problem(exc: ImportError, location: Location | None = None) -> BackendUnavailable:
    """The skip for a failed ``import tensorrt``: not installed, or its libraries missing.

    The bindings import only where ``libnvinfer.so.<major>`` and friends load; their
    ImportError names the library the loader could not find.
    """
    if isinstance(exc, ModuleNotFoundError) and exc.name in ("tensorrt", "tensorrt_bindings"):
        return BackendUnavailable(_INSTALL_HINT, location=location)
    return BackendUnavailable(
        f"TensorRT is installed but does not import: {exc}",
        expected="the TensorRT libraries its Python bindings link (libnvinfer, "
        "libnvinfer_plugin, libnvonnxparser of the same major), loadable here",
        fix="install TensorRT's libraries of the bindings' major (NVIDIA's TensorRT "
        "tarball or packages, or `pip install --extra-index-url https://pypi.nvidia.com "
        "tensorrt-cu13-libs` of the same version) and put their folder on LD_LIBRARY_PATH "
        "(docs/ci.md, runner requirements)",
        location=location,
    )


def _module_missing(name: str) -> bool:
    return importlib.util.find_spec(name) is None


def _cuda_problem() -> str | None:
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda and (driver := native.driver_problem()) is not None:
        return f"the TensorRT backend needs an NVIDIA GPU, but {driver}"
    return (
        "the TensorRT backend needs an NVIDIA GPU, but torch.cuda.is_available() is False "
        f"(torch {torch.__version__}, built with CUDA {torch.version.cuda or 'none'})"
    )


class TorchCuda:
    """GPU memory, streams and device facts through ``torch.cuda``."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = device

    def name(self) -> str:
        return str(self.torch.cuda.get_device_name(self.device))

    def capability(self) -> tuple[int, int]:
        major, minor = self.torch.cuda.get_device_capability(self.device)
        return int(major), int(minor)

    def new_stream(self) -> Any:
        return self.torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def activate(self) -> None:
        """Make the device current for this thread: TensorRT builds and runs on that one."""
        self.torch.cuda.set_device(self.device)

    def release(self) -> None:
        self.torch.cuda.empty_cache()

    def dtype(self, trt_dtype: str) -> Any:
        return getattr(self.torch, _DTYPES[trt_dtype])

    def upload(self, array: np.ndarray, trt_dtype: str) -> Any:
        host = np.asarray(array)
        if host.dtype.name == "bfloat16":  # numpy's bfloat16 (ml_dtypes) is unknown to torch
            host = host.astype(np.float32)
        tensor = self.torch.from_numpy(np.array(host, copy=True, order="C"))
        return tensor.to(device=self.device, dtype=self.dtype(trt_dtype)).contiguous()

    def empty(self, shape: Shape, trt_dtype: str) -> Any:
        return self.torch.empty(shape, dtype=self.dtype(trt_dtype), device=self.device)

    def download(self, tensor: Any) -> np.ndarray:
        if tensor.dtype in (self.torch.float16, self.torch.bfloat16):
            tensor = tensor.float()
        result: np.ndarray = tensor.detach().cpu().numpy()
        return result


class TensorRTBackend:
    """Builds ONNX models into TensorRT engines and runs them on a CUDA stream."""

    name = "tensorrt"

    def unavailable_reason(self) -> str | None:
        if _module_missing("tensorrt") and _module_missing("tensorrt_bindings"):
            return _INSTALL_HINT
        if _module_missing("torch"):
            return _TORCH_HINT
        return _cuda_problem()

    def open(
        self,
        scenario: Scenario,
        feeds: Mapping[str, np.ndarray],
        cache_dir: Path,
        *,
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    ) -> TensorRTSession:
        return TensorRTSession(scenario, feeds, cache_dir, calibration=calibration)


@dataclass
class _Prepared:
    """Device tensors for one request: inputs (with their shapes) and output buffers."""

    inputs: dict[str, Any]
    shapes: dict[str, Shape]
    outputs: dict[str, Any]


class _Runner:
    """One execution context on one stream."""

    def __init__(self, context: Any, stream: Any, handle: int) -> None:
        self.context = context
        self.stream = stream
        self.handle = handle
        self.bound: _Prepared | None = None
        self.activate: Callable[[], None] | None = None  # once, on the worker's own thread

    def bind(self, prepared: _Prepared) -> None:
        context = self.context
        for name, tensor in prepared.inputs.items():
            if not context.set_input_shape(name, prepared.shapes[name]):
                raise RuntimeError(f"TensorRT rejected shape {prepared.shapes[name]} for {name!r}")
            context.set_tensor_address(name, int(tensor.data_ptr()))
        for name, tensor in prepared.outputs.items():
            context.set_tensor_address(name, int(tensor.data_ptr()))
        self.bound = prepared

    def run(self, prepared: _Prepared) -> dict[str, Any]:
        """Enqueue one request on the stream; returns without waiting for it."""
        if self.context is None:
            raise RuntimeError("the tensorrt session is closed")
        if (activate := self.activate) is not None:
            self.activate = None
            activate()
        if self.bound is not prepared:  # (re)binding costs host time: once per prepared set
            self.bind(prepared)
        if not self.context.execute_async_v3(self.handle):
            raise RuntimeError("TensorRT execute_async_v3 failed (see the TensorRT log)")
        return prepared.outputs


class TensorRTSession:
    """One TensorRT engine with an execution context and a CUDA stream."""

    def __init__(
        self,
        scenario: Scenario,
        feeds: Mapping[str, np.ndarray],
        cache_dir: Path,
        *,
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    ) -> None:
        self._scenario = scenario
        self._check_cell(scenario)
        try:
            trt = _load_tensorrt()
        except ImportError as exc:
            raise import_problem(exc, scenario.location) from exc
        self._trt = trt
        caps = build.capabilities(trt)
        plan = build.precision_plan(
            caps,
            scenario.precision,
            user_graph=scenario.model.onnx is not None,
            location=scenario.location,
        )
        self._check_calibration(scenario, calibration)
        self._cuda = cuda = _load_cuda(scenario)
        cuda.activate()
        options = scenario.gpu.tensorrt
        samples = self._samples(scenario, feeds, calibration)
        path, from_factory = self._model_file(scenario, feeds, cache_dir)
        path = self._typed_graph(scenario, plan, path, cache_dir, samples)
        batching = scenario.load.batching if scenario.load is not None else None
        spec = EngineSpec(
            onnx_sha256=file_sha256(path).hexdigest(),
            tensorrt=str(trt.__version__),
            gpu=cuda.name(),
            capability=cuda.capability(),
            precision=scenario.precision,
            workspace_mib=options.workspace_mib,
            optimization_level=options.builder_optimization_level,
            profiles=tuple(
                (name, tuple(lo), tuple(opt), tuple(hi)) for name, lo, opt, hi in options.profiles
            ),
            input_shapes=tuple((name, tuple(np.shape(a))) for name, a in feeds.items()),
            batch_multiplier=batching.max_batch if batching is not None else 1,
            calibration=build.calibration_digest(samples) if plan.calibrator else None,
            typing=plan.typing,
            profiling_verbosity="DETAILED" if caps.detailed_profiling else "",
        )
        calibrator = (
            build.make_calibrator(trt, samples, cuda.upload, cuda.synchronize)
            if plan.calibrator
            else None
        )
        self._engine: Engine | None = build.load_engine(
            trt,
            spec,
            name=scenario.model.name,
            onnx_path=path,
            cache_dir=cache_dir,
            timing_cache=options.timing_cache,
            calibrator=calibrator,
            location=scenario.model.location,
        )
        engine = self._engine.engine
        self._profile = self._engine.profile
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        is_input = {n: engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self._dtypes = {n: build.dtype_name(engine.get_tensor_dtype(n)) for n in names}
        if unknown := sorted(set(self._dtypes.values()) - set(_DTYPES)):
            raise ModelError(
                f"the TensorRT engine has inputs/outputs of type {', '.join(unknown)}",
                expected=", ".join(_DTYPES),
                fix="export the model with float/int inputs and outputs",
                location=scenario.model.location,
            )
        self._inputs = [n for n in names if is_input[n]]
        self._outputs = [n for n in names if not is_input[n]]
        for name in self._inputs:
            self._check_feed(name, feeds)
        self._runners: list[_Runner] = []
        self._main = self._new_runner()
        self.synchronize: Callable[[], None] | None = self._main.stream.synchronize
        unused = [name for name in feeds if name not in is_input]
        profile = {
            n: {"min": list(lo), "opt": list(opt), "max": list(hi)}
            for n, (lo, opt, hi) in self._profile.items()
        }
        self.runtime_info: dict[str, Any] = {
            "tensorrt": str(trt.__version__),
            "gpu": spec.gpu,
            "compute_capability": ".".join(map(str, spec.capability)),
            "device": scenario.device,
            "precision": scenario.precision,
            "precision_build": plan.describe(),
            "engine_path": str(self._engine.path),
            "cache_key": self._engine.key[:16],
            "built": self._engine.built,
            "build_s": round(self._engine.build_s, 3),
            "workspace_mib": options.workspace_mib,
            "builder_optimization_level": options.builder_optimization_level,
            "profile": profile,
            "timing_cache": str(self._engine.timing_cache) if self._engine.timing_cache else None,
            "onnx_sha256": spec.onnx_sha256[:16],
            "model_source": "factory export" if from_factory else "onnx file",
        }
        if plan.calibrator:
            self.runtime_info["int8"] = {
                "calibrator": "IInt8EntropyCalibrator2",
                "calibration_inputs": len(samples),
                "calibration_sha256": (spec.calibration or "")[:16],
                "quantization": "implicit (deprecated since TensorRT 10.1, gone in 11)",
            }
        elif plan.graph == "int8-qdq":
            self.runtime_info["int8"] = {
                "calibration_inputs": len(samples),
                "quantization": "explicit Q/DQ (onnxruntime static quantization, symmetric, "
                f"per channel, {scenario.quantization.calibration})",
            }
        if unused:
            self.runtime_info["unused_inputs"] = unused

    # -- opening -------------------------------------------------------------------
    @staticmethod
    def _check_cell(scenario: Scenario) -> None:
        if scenario.precision not in _PRECISIONS:
            raise CellError(
                f"unknown precision {scenario.precision!r} for the tensorrt backend",
                expected=", ".join(_PRECISIONS),
                fix="set `precision:` to a supported value",
                location=scenario.location,
            )
        device = scenario.device.strip().lower()
        if not re.fullmatch(r"cuda(:\d+)?", device):
            raise CellError(
                f"device {scenario.device!r} for the tensorrt backend, which runs on NVIDIA "
                "GPUs only",
                expected="cuda or cuda:N",
                fix="set `device: cuda` (or cuda:<index>) for this cell, or run the CPU cell "
                "with `backend: onnxruntime` or `backend: torch`",
                location=scenario.location,
            )
        level = scenario.gpu.tensorrt.builder_optimization_level
        if level is not None and not 0 <= level <= 5:
            raise CellError(
                f"builder_optimization_level {level} is out of range",
                expected="0..5 (TensorRT's default is 3)",
                fix="set `gpu: tensorrt: builder_optimization_level:` between 0 and 5",
                location=scenario.location,
            )

    @staticmethod
    def _check_calibration(
        scenario: Scenario, calibration: Sequence[Mapping[str, np.ndarray]] | None
    ) -> None:
        if scenario.precision == "int8" and not calibration:
            raise CellError(
                "precision int8 on the tensorrt backend calibrates on the scenario's accuracy "
                "inputs, but this scenario has none",
                expected="calibration feeds for int8: the scenario's accuracy inputs",
                fix="add `accuracy: {inputs: ...}` to the scenario (its inputs are the "
                "calibration data), or run this cell at fp16",
                location=scenario.location,
            )

    @staticmethod
    def _typed_graph(
        scenario: Scenario,
        plan: build.PrecisionPlan,
        path: Path,
        cache_dir: Path,
        samples: Sequence[Mapping[str, np.ndarray]],
    ) -> Path:
        """The graph a strongly typed network is built from: ``path`` converted to the
        plan's precision (cached by content), or ``path`` itself."""
        location = scenario.model.location
        if plan.graph == "fp16":
            keep = build.KEEP_FP32_OPS if scenario.keep_fp32 is None else scenario.keep_fp32
            return convert_fp16(path, cache_dir, location, keep_fp32=keep)
        if plan.graph == "int8-qdq":
            quant = dataclasses.replace(
                scenario.quantization,
                mode="static",
                per_channel=True,
                weight_type="qint8",
                activation_type="qint8",
                symmetric=True,
                # TensorRT's kernels take full 8-bit weights; auto is for ORT's CPU ones.
                reduce_range=bool(scenario.quantization.reduce_range),
            )
            return quantize_int8(path, cache_dir, location, quant=quant, calibration=samples)
        return path

    @staticmethod
    def _samples(
        scenario: Scenario,
        feeds: Mapping[str, np.ndarray],
        calibration: Sequence[Mapping[str, np.ndarray]] | None,
    ) -> list[Mapping[str, np.ndarray]]:
        """The calibration feeds (the first ``quantization.calibration_samples``), checked."""
        if scenario.precision != "int8" or not calibration:
            return []
        samples = list(calibration)[: scenario.quantization.calibration_samples]
        for index, sample in enumerate(samples):
            wrong = [
                f"{name} {list(np.shape(sample[name])) if name in sample else 'missing'}"
                for name, array in feeds.items()
                if name not in sample or np.shape(sample[name]) != np.shape(array)
            ]
            if wrong:
                want = ", ".join(f"{n} {list(np.shape(a))}" for n, a in feeds.items())
                raise InputError(
                    f"calibration input {index} has {', '.join(wrong)}",
                    expected=f"the timing inputs' names and shapes: {want}",
                    fix="make `accuracy: inputs:` give each input at the timing shape",
                    location=scenario.location,
                )
        return samples

    @staticmethod
    def _model_file(
        scenario: Scenario, feeds: Mapping[str, np.ndarray], cache_dir: Path
    ) -> tuple[Path, bool]:
        return onnx_file_of(scenario, feeds, cache_dir)

    def _check_feed(self, name: str, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        location = self._scenario.location
        if name not in feeds:
            raise InputError(
                f"no suite input for the engine's input {name!r}",
                expected="inputs: " + ", ".join(self._inputs),
                fix="name the suite's `inputs:` after the model's inputs",
                location=location,
            )
        array = np.asarray(feeds[name])
        want = _DTYPES[self._dtypes[name]]
        have = "float32" if array.dtype.name == "bfloat16" else array.dtype.name
        kinds = ["f" if "float" in d else "b" if d == "bool" else "i" for d in (have, want)]
        if kinds[0] != kinds[1]:
            raise InputError(
                f"{name!r} is {array.dtype}, the engine wants {want}",
                expected="the same kind of dtype (float, int or bool) as the model's input",
                fix=f"set `dtype:` of input {name!r} to {want}",
                location=location,
            )
        problem = build.outside_profile(name, tuple(array.shape), self._profile, location)
        if problem is not None:
            raise problem
        return array

    def _new_runner(self) -> _Runner:
        if self._engine is None:
            raise RuntimeError("the tensorrt session is closed")
        context = self._engine.engine.create_execution_context()
        if context is None:
            raise ModelError(
                "TensorRT could not create an execution context (out of GPU memory?): "
                + " | ".join(build.trt_logger(self._trt).tail(0, 5)),
                expected="enough free GPU memory for the engine's activations",
                fix="free GPU memory (other processes), lower the batch, or fewer load workers",
                location=self._scenario.location,
            )
        stream = self._cuda.new_stream()
        runner = _Runner(context, stream, int(stream.cuda_stream))
        self._runners.append(runner)
        return runner

    # -- Session -------------------------------------------------------------------
    def prepare(self, feeds: Mapping[str, np.ndarray]) -> _Prepared:
        """Device tensors in the engine's dtypes for its inputs, and output buffers."""
        inputs: dict[str, Any] = {}
        shapes: dict[str, Shape] = {}
        for name in self._inputs:
            array = self._check_feed(name, feeds)
            inputs[name] = self._cuda.upload(array, self._dtypes[name])
            shapes[name] = tuple(array.shape)
        context = self._main.context
        self._main.bound = None
        for name in self._inputs:  # within the profile (checked): output shapes follow
            context.set_input_shape(name, shapes[name])
        outputs: dict[str, Any] = {}
        for name in self._outputs:
            shape = tuple(int(d) for d in context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise ModelError(
                    f"output {name!r} has a data-dependent shape {list(shape)}",
                    expected="output shapes that follow from the input shapes",
                    fix="run this model with `backend: onnxruntime` or `backend: torch`",
                    location=self._scenario.model.location,
                )
            outputs[name] = self._cuda.empty(shape, self._dtypes[name])
        self._cuda.synchronize()  # uploads ran on torch's stream, requests run on ours
        return _Prepared(inputs, shapes, outputs)

    def run(self, prepared: Any) -> Any:
        """Enqueue one request on the session's stream (``synchronize`` waits for it)."""
        return self._main.run(prepared)

    def worker_calls(
        self, prepared: Mapping[int, Any]
    ) -> tuple[dict[int, Callable[[], Any]], Callable[[], None]]:
        """Calls for one concurrent load worker (``prepared`` per batch size).

        Each call of this makes one new execution context on one new stream
        (with its own output buffers), so workers' requests overlap on the GPU
        as a multi-stream server's do; the returned sync waits for that stream.
        """
        runner = self._new_runner()
        runner.activate = self._cuda.activate
        calls: dict[int, Callable[[], Any]] = {}
        for k, request in prepared.items():
            outs = {
                n: self._cuda.empty(tuple(t.shape), self._dtypes[n])
                for n, t in request.outputs.items()
            }
            own = _Prepared(request.inputs, request.shapes, outs)
            calls[k] = functools.partial(runner.run, own)
        sync: Callable[[], None] = runner.stream.synchronize
        return calls, sync

    def profiler(self, prepared: Any) -> TrtProfiler:
        """A per-layer ``IProfiler`` pass over requests of ``prepared`` (``TrtProfiler``)."""
        if self._engine is None:
            raise RuntimeError("the tensorrt session is closed")
        return TrtProfiler(self._trt, self._engine.engine, self._main, prepared)

    def to_numpy(self, outputs: Any) -> list[np.ndarray]:
        """The outputs in engine order as float32/int arrays (waits for the GPU first)."""
        self._cuda.synchronize()
        return [self._cuda.download(outputs[name]) for name in self._outputs]

    def close(self) -> None:
        if self._engine is None:
            return
        with contextlib.suppress(Exception):
            self._cuda.synchronize()
        self._main = _Runner(None, None, 0)
        self._runners.clear()  # contexts before the engine, the engine before its runtime
        self._engine = None
        self._cuda.release()


#: Op type of the layers whose type the engine does not tell (in ``op_types`` only).
UNKNOWN_LAYER_TYPE = "(layer type unknown)"
_NS_PER_MS = 1_000_000.0


def layer_types(trt: Any, engine: Any) -> dict[str, str]:
    """Layer name -> layer type, from the engine inspector; ``{}`` when it tells none.

    Types are only there for an engine built with detailed profiling verbosity; the
    default (layer names only) lists names, which map to nothing here.
    """
    try:
        inspector = engine.create_engine_inspector()
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        layers = json.loads(text).get("Layers", [])
    except Exception:  # an older TensorRT, or no inspector: types stay unknown
        return {}
    types: dict[str, str] = {}
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and "Name" in layer:
            types[str(layer["Name"])] = str(layer.get("LayerType", ""))
    return types


class TrtProfiler:
    """One ``IProfiler`` pass over a TensorRT session (``OperatorProfiler``).

    An ``IProfiler`` subclass is set as the session's execution context's ``profiler``
    for the pass (and the previous one put back by ``finish``). TensorRT reports each
    layer's time once per enqueue, after the execution completes
    (``report_layer_time(layer_name, ms)``); each request is enqueued and its stream
    synchronised before the next, so the reports of one request are its own. A context
    that does not emit profiles on enqueue (``enqueue_emits_profile`` false) is asked
    with ``report_to_profiler()``. Nodes are layers (op type from the engine inspector,
    else ``""``); the Chrome trace is synthesised: each recorded request's layers laid
    end to end from the request's start, in the order TensorRT reported them.
    """

    def __init__(self, trt: Any, engine: Any, runner: _Runner, prepared: Any) -> None:
        self._runner = runner
        self._prepared = prepared
        self._types = layer_types(trt, engine)
        self._current: list[tuple[str, float]] = []
        self._recorded: list[tuple[int, list[tuple[str, float]]]] = []
        self._start = time.perf_counter_ns()
        self._finished = False
        sink = self._current

        class LayerTimes(trt.IProfiler):  # type: ignore[misc]
            def __init__(self) -> None:
                trt.IProfiler.__init__(self)  # pybind11 needs the base initialised

            def report_layer_time(self, layer_name: str, ms: float) -> None:
                sink.append((str(layer_name), float(ms) * _NS_PER_MS))

        context = runner.context
        self._previous = getattr(context, "profiler", None)
        self._reporter = LayerTimes()
        context.profiler = self._reporter

    def request(self, *, record: bool) -> None:
        runner = self._runner
        self._current.clear()
        began = time.perf_counter_ns() - self._start
        runner.run(self._prepared)
        runner.stream.synchronize()
        context = runner.context
        if not getattr(context, "enqueue_emits_profile", True):
            context.report_to_profiler()
        if record:
            self._recorded.append((began, list(self._current)))

    def finish(self) -> ProfiledRequests:
        """Put the context's previous profiler back; each recorded request's layers."""
        if self._finished:
            raise RuntimeError("this profiling pass is already finished")
        self._finished = True
        self._runner.context.profiler = self._previous
        nodes: list[dict[str, float]] = []
        op_types: list[dict[str, float]] = []
        info: dict[str, tuple[str, str]] = {}
        events: list[dict[str, Any]] = []
        for index, (began, layers) in enumerate(self._recorded):
            per_node: dict[str, float] = {}
            per_type: dict[str, float] = {}
            at = began / 1000.0
            events.append(_trace_event("perfguard/request", "Request", at, layers, index))
            for name, ns in layers:
                kind = self._types.get(name, "")
                info.setdefault(name, (kind, "cuda"))
                per_node[name] = per_node.get(name, 0.0) + ns
                key = kind or UNKNOWN_LAYER_TYPE
                per_type[key] = per_type.get(key, 0.0) + ns
                events.append(_trace_event(name, "Layer", at, [(name, ns)], index, kind))
                at += ns / 1000.0
            nodes.append(per_node)
            op_types.append(per_type)
        trace = json.dumps({"traceEvents": events, "displayTimeUnit": "ms"})
        return ProfiledRequests("tensorrt", tuple(nodes), tuple(op_types), info, trace)


def _trace_event(
    name: str,
    category: str,
    ts_us: float,
    layers: list[tuple[str, float]],
    request: int,
    op_type: str = "",
) -> dict[str, Any]:
    args: dict[str, Any] = {"request": request}
    if op_type:
        args["op_type"] = op_type
    return {
        "name": name,
        "cat": category,
        "ph": "X",
        "ts": round(ts_us, 3),
        "dur": round(sum(ns for _, ns in layers) / 1000.0, 3),
        "pid": 0,
        "tid": 0,
        "args": args,
    }
