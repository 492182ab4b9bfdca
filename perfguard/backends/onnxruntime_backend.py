"""The ONNX Runtime backend: an ``onnx:`` file, or a factory exported through the cache.

Precisions: fp32; fp16 is the fp32 model converted to float16 with float32
inputs/outputs; int8 is quantized as ``scenario.quantization`` says (dynamic, or
static calibrated on the ``calibration`` feeds). bf16 is not supported.

Placement is proved, not assumed: ONNX Runtime silently falls back to the CPU
when the CUDA provider cannot load, so the session's first provider is checked
against the one requested and a mismatch fails the cell. On ``cuda[:N]`` the
CUDA or TensorRT provider, the proof of every node's placement and IOBinding
live in ``perfguard.backends.ort_gpu``.

``OnnxRuntimeSession.profiler`` profiles requests with ONNX Runtime's own session
profiling (``OrtProfiler``) in a profiling twin of the session: the same model file,
options and providers, opened with ``enable_profiling`` for the pass and closed after,
so the measured session is never altered.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import importlib.util
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.backends.base import ProfiledRequests
from perfguard.backends.ort_gpu import Bound, BoundIO, GpuPlan
from perfguard.core.errors import (
    BackendUnavailable,
    CellError,
    InputError,
    ModelError,
    PerfguardError,
    ProviderFallbackError,
)
from perfguard.core.scenario import Scenario
from perfguard.machine import native
from perfguard.models.cache import cache_key_of, onnx_file_of
from perfguard.models.quantize import (
    calibration_samples,
    check_quant_spec,
    convert_fp16,
    onnx_quant_facts,
    ort_quant_tool,
    quant_settings,
    quantize_int8,
    require_calibration,
)

__all__ = [
    "OnnxRuntimeBackend",
    "OnnxRuntimeSession",
    "OrtProfiler",
    "ort_device_index",
    "provider_problem",
    "split_ort_trace",
]

_INSTALL_HINT = "ONNX Runtime is not installed (pip install 'perfguard[onnx]')"
_OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(bfloat16)": "bfloat16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}
_CPU_EP = "CPUExecutionProvider"
_GPU_FIX = (
    "install onnxruntime-gpu (and uninstall the CPU-only onnxruntime), put the CUDA and "
    "cuDNN libraries it was built for on the library path (LD_LIBRARY_PATH), and keep "
    "CUDAExecutionProvider first in the provider list"
)


class OnnxRuntimeBackend:
    """Runs ``onnx:`` files and exported ``factory:`` models with ONNX Runtime."""

    name = "onnxruntime"

    def unavailable_reason(self) -> str | None:
        return None if importlib.util.find_spec("onnxruntime") is not None else _INSTALL_HINT

    def open(
        self,
        scenario: Scenario,
        feeds: Mapping[str, np.ndarray],
        cache_dir: Path,
        *,
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    ) -> OnnxRuntimeSession:
        """``calibration``: the feeds static int8 quantization calibrates on (accuracy inputs)."""
        return OnnxRuntimeSession(scenario, feeds, cache_dir, calibration=calibration)


_DRIVER_FIX = (
    "run it on a machine with an NVIDIA GPU and its driver installed (the driver brings "
    "libcuda.so.1); on a machine without a GPU this cell is skipped"
)
_CUDA_LIBS_FIX = (
    "install the libraries it names: pip install 'onnxruntime-gpu[cuda,cudnn]' (NVIDIA's "
    "wheels, found by onnxruntime.preload_dlls()) or put them on LD_LIBRARY_PATH"
)
_TENSORRT_LIBS_FIX = (
    "install TensorRT's libraries of the major this onnxruntime links (TensorRT 10 for "
    "onnxruntime-gpu 1.31: libnvinfer.so.10, libnvonnxparser.so.10) and put their folder on "
    "LD_LIBRARY_PATH (docs/ci.md, runner requirements)"
)
#: The ``onnxruntime.preload_dlls`` functions already called in this process.
_PRELOADED: set[Any] = set()


def provider_problem(ort: Any, provider: str) -> tuple[str, str] | None:
    """Why ``provider``'s native library cannot load here (the loader's words) and the fix
    for that finding, or None.

    onnxruntime-gpu lists its GPU providers whatever the machine has; a provider that
    cannot load makes onnxruntime fall back to the CPU with the reason on stderr only.
    """
    preload = getattr(ort, "preload_dlls", None)
    if callable(preload) and preload not in _PRELOADED:
        # NVIDIA's pip wheels of CUDA and cuDNN, where installed: once per process (the
        # libraries stay loaded), not at every GPU cell's open.
        _PRELOADED.add(preload)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
            preload()
    problem = native.driver_problem()
    if problem is not None:
        return problem, _DRIVER_FIX
    where = getattr(ort, "__file__", None)
    library = native.ort_provider_library(where, provider) if where else None
    if library is None:
        return None
    loaded = native.load_problem(library)
    if loaded is None:
        return None
    fix = _TENSORRT_LIBS_FIX if provider == "TensorrtExecutionProvider" else _CUDA_LIBS_FIX
    return f"its library {library.name} does not load ({loaded})", fix


def ort_device_index(scenario: Scenario) -> int | None:
    """The GPU index of ``scenario.device`` (``cuda`` is 0); ``None`` for ``cpu``."""
    text = scenario.device.strip().lower()
    if text == "cpu":
        return None
    if text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        return int(text[5:]) if text.startswith("cuda:") else 0
    raise CellError(
        f"unknown device {scenario.device!r} for the onnxruntime backend",
        expected="cpu, cuda or cuda:N",
        fix="set `device:` to cpu, cuda or cuda:<index>",
        location=scenario.location,
    )


def _numpy_dtype(name: str) -> np.dtype[Any]:
    if name == "bfloat16":
        import ml_dtypes  # shipped with onnx; numpy has no bfloat16 of its own

        bfloat16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bfloat16
    return np.dtype(name)


def _describe(name: str, dtype: str, shape: Sequence[object]) -> str:
    dims = ", ".join("?" if dim is None else str(dim) for dim in shape)
    return f"{name} {dtype}[{dims}]"


class OnnxRuntimeSession:
    """One ``InferenceSession`` on the requested execution provider."""

    # None on the CPU and for session.run with host arrays (it returns when done);
    # IOBinding on a GPU synchronises the device (``BoundIO.synchronize``).
    synchronize: Callable[[], None] | None = None

    def __init__(
        self,
        scenario: Scenario,
        feeds: Mapping[str, np.ndarray],
        cache_dir: Path,
        *,
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    ) -> None:
        import onnxruntime as ort

        self._scenario = scenario
        model = scenario.model
        if scenario.precision not in ("fp32", "fp16", "int8"):
            raise CellError(
                f"precision {scenario.precision} is not supported by the onnxruntime backend",
                expected="fp32, fp16 (converted from fp32) or int8 (quantized)",
                fix="run bf16 on the torch backend, or convert the model to bfloat16 "
                "yourself, point `onnx:` at it and use `precision: fp32`",
                location=scenario.location,
            )
        quant = scenario.quantization
        if scenario.precision == "int8":  # before any export: a bad preset fails fast
            check_quant_spec(quant, scenario.location)
            require_calibration(quant, calibration, scenario.location)
        if scenario.graph_optimization_level not in _OPT_LEVELS:
            raise CellError(
                f"unknown graph_optimization_level {scenario.graph_optimization_level!r}",
                expected="one of: " + ", ".join(_OPT_LEVELS),
                fix="set `graph_optimization_level:` to a supported value",
                location=scenario.location,
            )
        index = ort_device_index(scenario)
        plan = None if index is None else GpuPlan.build(scenario, index, cache_dir, ort.__version__)
        providers: list[Any] = [_CPU_EP] if plan is None else plan.providers
        requested = _CPU_EP if plan is None else plan.provider
        available = list(ort.get_available_providers())
        if requested not in available:
            raise ProviderFallbackError(
                f"{scenario.device} requested {requested}, but this onnxruntime "
                f"({ort.__version__}) only offers {', '.join(available)}",
                expected=f"{requested} in onnxruntime.get_available_providers()",
                fix=_GPU_FIX,
                location=scenario.location,
            )
        if plan is not None:
            found = provider_problem(ort, requested)
            if found is not None:
                problem, fix = found
                raise BackendUnavailable(
                    f"{requested} is listed by onnxruntime {ort.__version__}, but {problem}",
                    expected="an NVIDIA driver and the CUDA (and cuDNN, TensorRT) libraries "
                    "this onnxruntime was built for, loadable here",
                    fix=fix,
                    location=scenario.location,
                )

        from_factory = model.onnx is None
        path, key = self._model_file(scenario, feeds, cache_dir)
        variant: dict[str, Any] | None = None
        source = path
        if scenario.precision == "fp16":
            path = convert_fp16(path, cache_dir, model.location, keep_fp32=scenario.keep_fp32 or ())
            key = cache_key_of(path)
            variant = {"converter": "onnxruntime.transformers.float16", "keep_io_types": True}
        elif scenario.precision == "int8":
            path = quantize_int8(path, cache_dir, model.location, quant, calibration)
            key = cache_key_of(path)
            variant = {"name": quant.name, **quant_settings(quant)}
            if quant.reduce_range is None:  # auto: this CPU's int8 kernels decided
                variant["reduce_range_auto"] = True
            samples = calibration_samples(quant, calibration)
            if samples is not None:
                variant["calibration_inputs"] = len(samples)
        if variant is not None:
            variant["cache_key"] = key
            if scenario.precision == "int8":  # what the quantizer did, read from its graph
                applied = onnx_quant_facts(source, path, ort_quant_tool(quant))
                variant["applied"] = applied.to_dict()

        # The GPU placement check profiles into a private directory, removed after.
        workdir = tempfile.mkdtemp(prefix="perfguard-ort-") if plan is not None else None
        try:
            session = self._create(ort, path, providers, plan, workdir, feeds)
            actual = list(session.get_providers())
            if not actual or actual[0] != requested:
                raise ProviderFallbackError(
                    f"{scenario.device} requested {requested}, but the session runs on "
                    f"{', '.join(actual) or 'nothing'} (available: {', '.join(available)})",
                    expected=f"{requested} as the session's first provider",
                    fix=_GPU_FIX,
                    location=scenario.location,
                )
            self._session = session
            self._dtypes, unused = self._check_inputs(session, feeds, strict=not from_factory)
            placement = None if plan is None else self._prove(plan, session, feeds)
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
        self._path, self._providers, self._plan = path, providers, plan  # for a profiling twin
        self._io: BoundIO | None = None if plan is None else plan.io(ort, session)
        self._call: Callable[[Any], Any] = functools.partial(session.run, None)
        if self._io is not None:
            self._call = self._io.run
            self.synchronize = self._io.synchronize
        self.runtime_info: dict[str, Any] = {
            "onnxruntime": ort.__version__,
            "providers": actual,
            "requested_provider": requested,
            "graph_optimization_level": scenario.graph_optimization_level,
            "intra_op_num_threads": scenario.threads if scenario.threads is not None else 0,
            "inter_op_num_threads": 1,
            "precision": scenario.precision,
            "model_path": str(path),
            "cache_key": key,
        }
        if variant is not None:
            self.runtime_info["fp16" if scenario.precision == "fp16" else "quantization"] = variant
        if unused:
            self.runtime_info["unused_inputs"] = unused
        if plan is not None:
            self.runtime_info.update(plan.runtime_info(session))
            self.runtime_info["placement"] = placement

    def _options(self, ort: Any) -> Any:
        sc = self._scenario
        options = ort.SessionOptions()
        level_name = _OPT_LEVELS[sc.graph_optimization_level]
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level_name)
        if sc.threads is not None:
            options.intra_op_num_threads = sc.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only; placement is checked below
        return options

    def _prove(self, plan: GpuPlan, session: Any, feeds: Mapping[str, np.ndarray]) -> Any:
        """Where the nodes run, from one profiled run; a model failure is located."""
        try:
            return plan.prove(session, self._host(feeds))
        except PerfguardError:
            raise
        except Exception as exc:
            sc = self._scenario
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ModelError(
                f"model {sc.model.name!r} raised {type(exc).__name__} on its first run on "
                f"{sc.device} ({plan.provider}), the placement check: {first}",
                expected="the model to run the suite's inputs on the GPU",
                fix="check the inputs declared under "
                f"models.{sc.model.name}.inputs and `gpu: provider_options`",
                location=sc.location,
            ) from exc

    def _create(
        self,
        ort: Any,
        path: Path,
        providers: list[Any],
        plan: GpuPlan | None,
        workdir: str | None,
        feeds: Mapping[str, np.ndarray],
    ) -> Any:
        """The ``InferenceSession``; a load failure becomes a located ``ModelError``."""
        options = self._options(ort)
        try:
            if plan is None or workdir is None:
                return ort.InferenceSession(str(path), sess_options=options, providers=providers)
            plan.configure(options, str(Path(workdir) / "placement"))

            def diagnose() -> Any:
                def host(session: Any) -> dict[str, np.ndarray]:
                    return self._host(feeds, self._check_inputs(session, feeds, strict=False)[0])

                prefix = str(Path(workdir) / "diagnosis")
                return plan.diagnose(ort, path, self._options(ort), prefix, host)

            return plan.create(ort, path, options, diagnose)
        except PerfguardError:
            raise
        except Exception as exc:
            on = "" if plan is None else f" with {plan.provider} {plan.options}"
            raise ModelError(
                f"onnxruntime could not load {path}{on}: {type(exc).__name__}: {exc}",
                expected="a model this onnxruntime version and provider can run",
                fix="check the model's opset and operators against onnxruntime "
                f"{ort.__version__}, or try another `opset:`"
                + ("" if plan is None else "; check `gpu: provider_options`"),
                location=self._scenario.model.location,
            ) from exc

    @staticmethod
    def _model_file(
        scenario: Scenario, feeds: Mapping[str, np.ndarray], cache_dir: Path
    ) -> tuple[Path, str | None]:
        path, exported = onnx_file_of(scenario, feeds, cache_dir)
        return path, cache_key_of(path) if exported else None

    def _check_inputs(
        self, session: Any, feeds: Mapping[str, np.ndarray], *, strict: bool
    ) -> tuple[dict[str, np.dtype[Any]], list[str]]:
        """The numpy dtype per model input; raises ``InputError`` on a mismatch.

        ``strict=False`` (an exported factory) tolerates suite inputs the
        exporter dropped because ``forward`` never used them.
        """
        model_inputs = list(session.get_inputs())
        wanted = [_describe(i.name, _ORT_TYPES.get(i.type, i.type), i.shape) for i in model_inputs]
        given = [_describe(n, str(np.asarray(a).dtype), np.shape(a)) for n, a in feeds.items()]
        problems: list[str] = []
        dtypes: dict[str, np.dtype[Any]] = {}
        names = {i.name for i in model_inputs}
        unused = [name for name in feeds if name not in names]
        if unused and strict:
            problems.append(f"the model has no input(s) {', '.join(unused)}")
        for spec in model_inputs:
            if spec.name not in feeds:
                problems.append(f"no suite input for model input {spec.name!r}")
                continue
            array = np.asarray(feeds[spec.name])
            type_name = _ORT_TYPES.get(spec.type)
            if type_name is None:
                problems.append(f"model input {spec.name!r} has unsupported type {spec.type}")
                continue
            want = _numpy_dtype(type_name)
            if not _same_kind(array.dtype, want):
                problems.append(f"{spec.name!r} is {array.dtype}, the model wants {type_name}")
            if not _shape_fits(spec.shape, array.shape):
                shown = ["?" if not isinstance(d, int) else d for d in spec.shape]
                problems.append(
                    f"{spec.name!r} has shape {list(array.shape)}, the model wants {shown}"
                )
            dtypes[spec.name] = want
        if problems:
            raise InputError(
                "inputs do not match the ONNX model: "
                + "; ".join(problems)
                + f" (model inputs: {', '.join(wanted)}; suite inputs: {', '.join(given)})",
                expected="one suite input per model input with the same name, rank, fixed "
                "dimensions and kind of dtype",
                fix="change the suite's `inputs:` to match the model (symbolic dims accept any "
                "size)",
                location=self._scenario.model.location,
            )
        return dtypes, unused

    def _host(
        self, feeds: Mapping[str, np.ndarray], dtypes: Mapping[str, np.dtype[Any]] | None = None
    ) -> dict[str, np.ndarray]:
        """Contiguous arrays in the dtypes the model declares, for its inputs only."""
        return {
            name: np.asarray(np.asarray(feeds[name]).astype(dtype, copy=False), order="C")
            for name, dtype in (self._dtypes if dtypes is None else dtypes).items()
        }

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Any:
        """Host arrays in the model's dtypes; with IOBinding, also on the device and bound."""
        host = self._host(feeds)
        return host if self._io is None else self._io.prepare(host)

    def run(self, prepared: Any) -> Any:
        return self._call(prepared)

    def worker_calls(
        self, prepared: Mapping[int, Any]
    ) -> tuple[dict[int, Callable[[], Any]], Callable[[], None] | None]:
        """Calls for one concurrent load worker (``prepared`` per batch size).

        With IOBinding each worker gets IOBindings of its own (a binding is not
        shared between threads); otherwise plain ``run`` calls and no sync.
        """
        if self._io is not None:
            return self._io.worker_calls(prepared)
        return {k: functools.partial(self.run, p) for k, p in prepared.items()}, None

    def profiler(self, prepared: Any) -> OrtProfiler:
        """An ONNX Runtime profiling pass over requests of ``prepared`` (``OrtProfiler``)."""
        import onnxruntime as ort

        return OrtProfiler(ort, self, prepared)

    def to_numpy(self, outputs: Any) -> list[np.ndarray]:
        """Works on every ``run`` result: host arrays, or an IOBinding's device outputs."""
        arrays: list[np.ndarray] = []
        for output in BoundIO.to_host(outputs):
            array = np.asarray(output)
            if array.dtype == np.float16 or array.dtype.name == "bfloat16":
                array = array.astype(np.float32)
            arrays.append(array)
        return arrays

    def close(self) -> None:
        self._io = None
        if hasattr(self, "_session"):
            del self._session
        self._call = _closed


def _closed(*_: Any) -> Any:
    raise RuntimeError("the onnxruntime session is closed")


class OrtProfiler:
    """One profiling pass of an ONNX Runtime session (``OperatorProfiler``).

    ONNX Runtime profiles a session from its creation on (``enable_profiling``), so
    the pass opens a twin of the measured session: the same model file, session
    options and providers (on a GPU: the same provider options, CPU-fallback policy and
    IOBinding), with ``profile_file_prefix`` in a private folder. ``finish`` ends the
    twin's profiling (``end_profiling()``), reads the trace, closes the twin and removes
    the folder. Each request is one ``model_run`` event of the trace; a node's time in a
    request is the ``dur`` of its ``<node>_kernel_time`` events (category ``Node``)
    inside it, with ``args.op_name`` its op type and ``args.provider`` where it ran.
    """

    def __init__(self, ort: Any, session: OnnxRuntimeSession, prepared: Any) -> None:
        self._folder = tempfile.mkdtemp(prefix="perfguard-ort-profile-")
        self._recorded: list[bool] = []
        self._finished = False
        try:
            self._twin, self._call = self._open(ort, session, prepared)
        except BaseException:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise

    def _open(
        self, ort: Any, session: OnnxRuntimeSession, prepared: Any
    ) -> tuple[Any, Callable[[], Any]]:
        options = session._options(ort)
        prefix = str(Path(self._folder) / "profile")
        plan = session._plan
        host = prepared.host if isinstance(prepared, Bound) else prepared
        if plan is None:
            options.enable_profiling = True
            options.profile_file_prefix = prefix
            twin = ort.InferenceSession(
                str(session._path), sess_options=options, providers=session._providers
            )
            return twin, functools.partial(twin.run, None, host)
        plan.configure(options, prefix)
        twin = plan.create(ort, session._path, options, lambda: None)
        io = plan.io(ort, twin)
        if io is None:
            return twin, functools.partial(twin.run, None, host)
        bound = io.prepare(dict(host))

        def bound_run() -> Any:
            outputs = io.run(bound)
            io.synchronize()
            return outputs

        return twin, bound_run

    def request(self, *, record: bool) -> None:
        self._recorded.append(record)
        self._call()

    def finish(self) -> ProfiledRequests:
        """End the twin's profiling, close it and remove its folder; the figures."""
        if self._finished:
            raise RuntimeError("this profiling pass is already finished")
        self._finished = True
        try:
            path = self._twin.end_profiling()
            text = Path(path).read_text(encoding="utf-8") if path else "[]"
        finally:
            self._twin = None
            self._call = _closed
            shutil.rmtree(self._folder, ignore_errors=True)
        events = json.loads(text)
        if isinstance(events, dict):
            events = events.get("traceEvents", [])
            trace = text  # already a trace document
        else:  # ORT writes a bare event list: wrapped as it is, not encoded again
            trace = f'{{"traceEvents": {text.strip() or "[]"}, "displayTimeUnit": "ms"}}'
        nodes, op_types, info = split_ort_trace(events, self._recorded)
        return ProfiledRequests("onnxruntime", nodes, op_types, info, trace)


_KERNEL_SUFFIX = "_kernel_time"


def split_ort_trace(
    events: Sequence[Any], recorded: Sequence[bool]
) -> tuple[tuple[dict[str, float], ...], tuple[dict[str, float], ...], dict[str, tuple[str, str]]]:
    """Per recorded request: node -> ns and op type -> ns; node -> (op type, provider).

    ``events``: an ONNX Runtime profile (Chrome trace events, ``ts``/``dur`` in us);
    its ``model_run`` events, in time order, are the requests, of which those whose
    ``recorded`` flag is true count. A node inside a ``Loop``/``Scan`` body runs many
    times in a request: its times add up.
    """
    dicts = [e for e in events if isinstance(e, dict)]
    runs = sorted(
        (e for e in dicts if e.get("cat") == "Session" and e.get("name") == "model_run"),
        key=lambda e: float(e.get("ts", 0)),
    )
    spans = [
        (float(e.get("ts", 0)), float(e.get("ts", 0)) + float(e.get("dur", 0)))
        for e, keep in zip(runs, recorded, strict=False)
        if keep
    ]
    nodes: list[dict[str, float]] = [{} for _ in spans]
    op_types: list[dict[str, float]] = [{} for _ in spans]
    info: dict[str, tuple[str, str]] = {}
    starts = [start for start, _ in spans]
    for event in dicts:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        ts = float(event.get("ts", 0))
        at = _span_of(starts, spans, ts)
        if at is None:
            continue
        node = name.removesuffix(_KERNEL_SUFFIX)
        args = event.get("args") or {}
        op = str(args.get("op_name", ""))
        info.setdefault(node, (op, str(args.get("provider", ""))))
        ns = float(event.get("dur", 0)) * 1000.0
        nodes[at][node] = nodes[at].get(node, 0.0) + ns
        op_types[at][op] = op_types[at].get(op, 0.0) + ns
    return tuple(nodes), tuple(op_types), info


def _span_of(
    starts: Sequence[float], spans: Sequence[tuple[float, float]], ts: float
) -> int | None:
    at = bisect.bisect_right(starts, ts) - 1
    if at < 0 or ts > spans[at][1]:
        return None
    return at


def _shape_fits(model_shape: Sequence[object] | None, shape: tuple[int, ...]) -> bool:
    """Same rank and every fixed dimension equal; symbolic dimensions take any size."""
    if model_shape is None:
        return True
    if len(model_shape) != len(shape):
        return False
    return all(not isinstance(d, int) or d == n for d, n in zip(model_shape, shape, strict=True))


def _same_kind(have: np.dtype[Any], want: np.dtype[Any]) -> bool:
    """Casting keeps the meaning: float to float, signed/unsigned int to int, bool to bool."""

    def kind(dtype: np.dtype[Any]) -> str:
        if dtype.name == "bfloat16":
            return "f"
        return "i" if dtype.kind == "u" else dtype.kind

    return kind(have) == kind(want)
