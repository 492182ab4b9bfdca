"""Building and caching TensorRT engines for ``backend: tensorrt``.

An engine is built once per :class:`EngineSpec` (ONNX content hash, TensorRT
version, GPU and compute capability, precision, workspace, optimization level,
profile, int8 calibration data) into ``<model>-<key16>.engine`` beside a JSON
sidecar of those fields, under a file lock and renamed into place, so workers
never build a key twice nor read half an engine. An engine whose sidecar names
another TensorRT or GPU (or is unreadable) is never deserialized: it is rebuilt.
The timing cache is one file per (TensorRT version, GPU), loaded into each build.

How a precision reaches the network is read off the TensorRT module itself
(:func:`capabilities`), never from its version string: where ``BuilderFlag``
has the precision's flag (TensorRT 10 and older) the network is weakly typed and
the flag set; where it does not (TensorRT 11 removed them) the network is
strongly typed and the precision comes from the graph: an fp16 graph converted
from the ONNX export (``LayerNormalization`` kept in fp32), or an int8 graph of
Q/DQ nodes from ONNX Runtime's static quantization on the calibration data
(:func:`precision_plan`). Every engine is built with detailed profiling
verbosity where the module has it, so the engine inspector names each layer's
type; it changes only the layer information an engine carries.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from perfguard.core.atomicio import read_json, write_json_atomic
from perfguard.core.errors import (
    BackendUnavailable,
    CellError,
    InputError,
    Location,
    ModelError,
    PerfguardError,
)
from perfguard.models.cache import KEY_CHARS, make_cache_folder, safe_name

__all__ = [
    "Capabilities",
    "Engine",
    "EngineSpec",
    "KEEP_FP32_OPS",
    "OPTIONAL_MEMBERS",
    "PrecisionPlan",
    "Profile",
    "Shape",
    "calibration_digest",
    "capabilities",
    "dtype_name",
    "load_engine",
    "make_calibrator",
    "outside_profile",
    "precision_plan",
    "trt_logger",
    "trt_major",
]

Shape = tuple[int, ...]
#: input name -> (min, opt, max) shapes of the engine's one optimization profile.
Profile = dict[str, tuple[Shape, Shape, Shape]]
Feeds = Mapping[str, np.ndarray]

_LOG_TAIL = 20
#: The ``BuilderFlag`` member of each reduced precision (weakly typed networks).
_FLAGS = {"fp16": "FP16", "bf16": "BF16", "int8": "INT8"}
#: Members of ``tensorrt`` that perfguard names directly (``trt.X``) although a
#: supported TensorRT lacks them, each with the :class:`Capabilities` field that is
#: False there, so the code never reaches it; every other ``trt.X`` must exist in
#: TensorRT 10 and 11 alike (tests/backends/test_tensorrt_conformance.py reads the sources).
OPTIONAL_MEMBERS = {"IInt8EntropyCalibrator2": "implicit_int8"}
#: Op types an fp16 graph keeps in fp32 for a strongly typed network: normalisation
#: accumulates in a range fp16 overflows (NVIDIA's mixed-precision guidance).
KEEP_FP32_OPS = ("LayerNormalization",)
_LOGGERS: dict[int, Any] = {}
_LOGGERS_LOCK = threading.Lock()


def trt_major(version: str) -> int:
    """The major number of a ``tensorrt.__version__`` string (0 when unreadable)."""
    match = re.match(r"\d+", version)
    return int(match.group(0)) if match else 0


@dataclass(frozen=True)
class Capabilities:
    """What a ``tensorrt`` module offers for building, read off its names."""

    version: str
    #: Precisions with a ``BuilderFlag`` member (weak typing): TensorRT 10 and older.
    precision_flags: frozenset[str]
    #: Implicit int8 calibration (``IInt8EntropyCalibrator2``): TensorRT 8-10.
    implicit_int8: bool
    #: ``NetworkDefinitionCreationFlag.STRONGLY_TYPED``: TensorRT 9.1+; always on in 11.
    strongly_typed: bool
    #: ``ProfilingVerbosity.DETAILED``: layer types in the engine inspector.
    detailed_profiling: bool


def capabilities(trt: Any) -> Capabilities:
    """The :class:`Capabilities` of the imported ``tensorrt`` module ``trt``."""
    flags = getattr(trt, "BuilderFlag", None)
    creation = getattr(trt, "NetworkDefinitionCreationFlag", None)
    verbosity = getattr(trt, "ProfilingVerbosity", None)
    return Capabilities(
        version=str(getattr(trt, "__version__", "unknown")),
        precision_flags=frozenset(p for p, name in _FLAGS.items() if hasattr(flags, name)),
        implicit_int8=hasattr(trt, "IInt8EntropyCalibrator2") and hasattr(flags, "INT8"),
        strongly_typed=hasattr(creation, "STRONGLY_TYPED"),
        detailed_profiling=hasattr(verbosity, "DETAILED"),
    )


@dataclass(frozen=True)
class PrecisionPlan:
    """How one cell's precision reaches its TensorRT network."""

    precision: str
    #: "weak" (builder flags choose kernels) or "strong" (the graph's own types).
    typing: str
    #: The ``BuilderFlag`` member to set (weak typing), if any.
    builder_flag: str | None = None
    #: The conversion of the ONNX graph a strongly typed network needs first:
    #: "fp16" (float16 conversion), "int8-qdq" (static Q/DQ quantization) or None.
    graph: str | None = None
    #: Implicit int8 calibration through an ``IInt8EntropyCalibrator2``.
    calibrator: bool = False

    def describe(self) -> str:
        if self.typing == "weak":
            return f"BuilderFlag.{self.builder_flag}" if self.builder_flag else "fp32"
        how = {"fp16": "graph converted to fp16", "int8-qdq": "graph quantized to Q/DQ int8"}
        return "strongly typed network, " + how.get(self.graph or "", "the graph's own types")


def precision_plan(
    caps: Capabilities, precision: str, *, user_graph: bool, location: Location | None
) -> PrecisionPlan:
    """How ``precision`` is built on TensorRT with ``caps``; CellError where it cannot be.

    ``user_graph``: the model is the suite's ``onnx:`` file, whose own types a strongly
    typed network can take as they are (a bf16 graph, say).
    """
    version = caps.version
    if precision == "fp32":
        return PrecisionPlan(precision, "weak")
    if precision == "int8" and caps.implicit_int8:
        return PrecisionPlan(precision, "weak", builder_flag="INT8", calibrator=True)
    if precision in ("fp16", "bf16") and precision in caps.precision_flags:
        return PrecisionPlan(precision, "weak", builder_flag=_FLAGS[precision])
    if not caps.strongly_typed:
        other = next((p for p in ("fp16", "bf16") if p in caps.precision_flags), "fp32")
        raise CellError(
            f"precision {precision} needs BuilderFlag.{_FLAGS[precision]} or a strongly "
            f"typed network, and TensorRT {version} has neither",
            expected="TensorRT 10 (builder flags) or 11 (strongly typed networks)",
            fix=f"upgrade TensorRT (pip install -U tensorrt) or run this cell at {other}",
            location=location,
        )
    if precision == "fp16":
        return PrecisionPlan(precision, "strong", graph="fp16")
    if precision == "int8":
        return PrecisionPlan(precision, "strong", graph="int8-qdq")
    if user_graph:  # bf16 from the suite's own graph: its types are the precision
        return PrecisionPlan(precision, "strong")
    raise CellError(
        f"TensorRT {version} takes bf16 from the graph (strongly typed networks only; "
        "BuilderFlag.BF16 is gone), and perfguard converts exported graphs to fp16 only",
        expected="a bf16 ONNX graph for a strongly typed network, or TensorRT 10's "
        "BuilderFlag.BF16",
        fix="convert the graph yourself (NVIDIA ModelOpt AutoCast, low_precision_type bf16) "
        "and point `onnx:` at it, run this cell at `precision: fp16`, or use TensorRT 10 "
        "(pip install 'tensorrt-cu12==10.*')",
        location=location,
    )


def dtype_name(dtype: Any) -> str:
    """``trt.DataType.HALF`` -> ``"HALF"``."""
    return str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1].upper()


def trt_logger(trt: Any) -> Any:
    """The process's logger for ``trt``: an ``ILogger`` that keeps warnings and errors.

    TensorRT treats the logger as process-wide, so every builder and runtime
    shares this one; ``mark()``/``tail(mark)`` give the lines logged since a point.
    """
    with _LOGGERS_LOCK:
        logger = _LOGGERS.get(id(trt))
        if logger is None or logger.trt is not trt:
            logger = _logger_class(trt)()
            _LOGGERS[id(trt)] = logger
        return logger


def _logger_class(trt: Any) -> type[Any]:
    base = trt.ILogger
    kept = {getattr(base.Severity, name) for name in ("INTERNAL_ERROR", "ERROR", "WARNING")}

    class KeepingLogger(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.trt = trt
            self._seq = itertools.count(1)
            self._lines: deque[tuple[int, str]] = deque(maxlen=500)

        def log(self, severity: Any, msg: str) -> None:
            if severity in kept:
                self._lines.append((next(self._seq), f"[{dtype_name(severity)}] {msg}"))

        def mark(self) -> int:
            return self._lines[-1][0] if self._lines else 0

        def tail(self, since: int, count: int = _LOG_TAIL) -> list[str]:
            return [text for seq, text in list(self._lines) if seq > since][-count:]

    return KeepingLogger


@dataclass(frozen=True)
class EngineSpec:
    """Everything that changes a built engine; its sha256 is the cache key."""

    onnx_sha256: str
    tensorrt: str
    gpu: str
    capability: tuple[int, int]
    precision: str
    workspace_mib: int
    optimization_level: int | None
    #: ``gpu: tensorrt: profiles`` entries: (input, min, opt, max).
    profiles: tuple[tuple[str, Shape, Shape, Shape], ...]
    #: The suite inputs' shapes; the profile of an input ``profiles`` does not name.
    input_shapes: tuple[tuple[str, Shape], ...]
    #: Dynamic batching's ``max_batch``: a dynamic axis 0 reaches this many times the batch.
    batch_multiplier: int = 1
    calibration: str | None = None  # sha256 of the int8 calibration feeds
    #: PrecisionPlan.typing: "weak" (builder flags) or "strong" (the graph's types).
    typing: str = "weak"
    #: The engine's layer information (``ProfilingVerbosity``); "" where TensorRT has none.
    profiling_verbosity: str = "DETAILED"

    def fields(self) -> dict[str, Any]:
        return {
            "onnx_sha256": self.onnx_sha256,
            "tensorrt": self.tensorrt,
            "gpu": self.gpu,
            "capability": list(self.capability),
            "precision": self.precision,
            "workspace_mib": self.workspace_mib,
            "builder_optimization_level": self.optimization_level,
            "profiles": [[n, list(a), list(b), list(c)] for n, a, b, c in self.profiles],
            "input_shapes": [[n, list(s)] for n, s in self.input_shapes],
            "batch_multiplier": self.batch_multiplier,
            "calibration_sha256": self.calibration,
            "typing": self.typing,
            "profiling_verbosity": self.profiling_verbosity,
        }

    @property
    def key(self) -> str:
        text = json.dumps(["perfguard-tensorrt-engine-v2", self.fields()], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def resolve_profile(
        self, network_inputs: Sequence[tuple[str, Shape]], location: Location | None = None
    ) -> Profile:
        """The profile for the parsed network's inputs; ``InputError`` on a mismatch."""
        explicit = {name: (lo, opt, hi) for name, lo, opt, hi in self.profiles}
        shapes = dict(self.input_shapes)
        names = [name for name, _ in network_inputs]
        problems = [
            f"`profiles` names {name!r}, which the model has no input of"
            for name in explicit
            if name not in names
        ]
        profile: Profile = {}
        for name, dims in network_inputs:
            if name in explicit:
                lo, opt, hi = explicit[name]
                if not len(lo) == len(opt) == len(hi) or any(
                    not 1 <= a <= b <= c for a, b, c in zip(lo, opt, hi, strict=False)
                ):
                    problems.append(f"`profiles` {name!r} needs 1 <= min <= opt <= max, one rank")
            elif name in shapes:
                lo = opt = hi = shapes[name]
                if self.batch_multiplier > 1 and dims and dims[0] == -1 and hi:
                    hi = (hi[0] * self.batch_multiplier, *hi[1:])
            else:
                problems.append(f"no suite input for model input {name!r} {list(dims)}")
                continue
            if len(lo) != len(dims):
                problems.append(f"{name!r} has rank {len(lo)} here, the model's is {len(dims)}")
            elif any(d != -1 and not lo[i] == opt[i] == hi[i] == d for i, d in enumerate(dims)):
                problems.append(
                    f"{name!r} {list(lo)}..{list(hi)} differs from the model's fixed "
                    f"dimensions {list(dims)} (-1 is dynamic)"
                )
            profile[name] = (lo, opt, hi)
        if problems:
            model = ", ".join(f"{name} {list(dims)}" for name, dims in network_inputs)
            raise InputError(
                "inputs do not match the ONNX model: "
                + "; ".join(problems)
                + f" (model inputs: {model})",
                expected="one suite input (or `profiles` entry) per model input, with the "
                "model's rank and fixed dimensions",
                fix="change the suite's `inputs:` or `gpu: tensorrt: profiles:` to match the model",
                location=location,
            )
        return profile


def outside_profile(
    name: str, shape: Shape, profile: Profile, location: Location | None = None
) -> InputError | None:
    """An ``InputError`` when ``shape`` lies outside ``name``'s profile, else ``None``."""
    lo, _, hi = profile[name]
    if len(shape) == len(lo) and all(a <= s <= b for a, s, b in zip(lo, shape, hi, strict=True)):
        return None
    return InputError(
        f"input {name!r} has shape {list(shape)}, outside the TensorRT engine's optimization "
        f"profile (min {list(lo)}, max {list(hi)})",
        expected=f"every dimension of {name!r} within the profile's min..max",
        fix=f"widen `gpu: tensorrt: profiles:` for {name!r} (input, min, opt, max) to cover "
        f"{list(shape)}; the engine is rebuilt for the new profile",
        location=location,
    )


def calibration_digest(samples: Sequence[Feeds]) -> str:
    """The sha256 of the calibration feeds (names, dtypes, shapes and bytes, in order)."""
    digest = hashlib.sha256(b"perfguard-tensorrt-calibration-v1")
    for index, feed in enumerate(samples):
        for name in sorted(feed):
            array = np.ascontiguousarray(feed[name])
            digest.update(f"{index}\0{name}\0{array.dtype.str}\0{array.shape}\0".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def make_calibrator(
    trt: Any,
    samples: Sequence[Feeds],
    upload: Callable[[np.ndarray, str], Any],
    sync: Callable[[], None],
) -> Any:
    """An ``IInt8EntropyCalibrator2`` serving ``samples`` in order (``upload``-ed), then None.

    No calibration cache of its own: the engine's key holds the data's hash.
    """
    base = trt.IInt8EntropyCalibrator2

    class FeedCalibrator(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.samples, self.served, self.held = list(samples), 0, list[Any]()
            self.dtypes: dict[str, str] = {}  # set by the build: input name -> DataType name
            self.cache: bytes | None = None

        def get_batch_size(self) -> int:
            return 1  # explicit-batch networks: the batch is part of each input's shape

        def get_batch(self, names: Sequence[str], *_: Any) -> list[int] | None:
            self.held = []  # the last batch stays on the device until the next call
            if self.served >= len(self.samples):
                return None
            feed = self.samples[self.served]
            self.served += 1
            self.held = [upload(np.asarray(feed[n]), self.dtypes.get(n, "FLOAT")) for n in names]
            sync()
            return [int(tensor.data_ptr()) for tensor in self.held]

        def read_calibration_cache(self, *_: Any) -> bytes | None:
            return None

        def write_calibration_cache(self, cache: Any) -> None:
            self.cache = bytes(memoryview(cache))

    return FeedCalibrator()


@dataclass
class Engine:
    """A deserialized engine and where it came from."""

    runtime: Any
    engine: Any
    path: Path
    key: str
    built: bool
    build_s: float
    profile: Profile
    timing_cache: Path | None


def load_engine(
    trt: Any,
    spec: EngineSpec,
    *,
    name: str,
    onnx_path: Path,
    cache_dir: Path,
    timing_cache: bool,
    calibrator: Any = None,
    location: Location | None = None,
) -> Engine:
    """The cached engine for ``spec``, built (once, under a file lock) when missing or stale."""
    logger = trt_logger(trt)
    key = spec.key
    path = Path(cache_dir) / f"{safe_name(name)}-{key[:KEY_CHARS]}.engine"
    sidecar = path.with_suffix(".json")
    timing = _timing_path(Path(cache_dir), spec) if timing_cache else None
    make_cache_folder(path.parent, location, "engine cache")
    runtime = trt.Runtime(logger)
    with FileLock(str(path) + ".lock"):
        profile = _fresh_profile(sidecar, spec, key) if path.is_file() else None
        if profile is not None:
            engine = runtime.deserialize_cuda_engine(path.read_bytes())
            if engine is not None:
                return Engine(runtime, engine, path, key, False, 0.0, profile, timing)
        mark = logger.mark()
        data, profile, build_s = _build(trt, logger, spec, onnx_path, timing, calibrator, location)
        with contextlib.suppress(FileNotFoundError):
            sidecar.unlink()  # never a new engine beside an old sidecar
        with _temporary(path) as tmp:
            tmp.write_bytes(data)
            tmp.replace(path)
        meta = {
            **spec.fields(),
            "key": key,
            "build_s": round(build_s, 3),
            "profile": {n: [list(s) for s in shapes] for n, shapes in profile.items()},
        }
        write_json_atomic(sidecar, meta)
    engine = runtime.deserialize_cuda_engine(data)
    if engine is None:
        raise _build_error(
            "built an engine it cannot deserialize",
            spec,
            onnx_path,
            [],
            logger.tail(mark),
            location,
        )
    return Engine(runtime, engine, path, key, True, build_s, profile, timing)


def _fresh_profile(sidecar: Path, spec: EngineSpec, key: str) -> Profile | None:
    """The sidecar's profile when it describes ``spec`` on this TensorRT and GPU, else None."""
    try:
        meta = read_json(sidecar)
        if (
            meta.get("key") != key
            or meta.get("tensorrt") != spec.tensorrt
            or meta.get("gpu") != spec.gpu
            or meta.get("capability") != list(spec.capability)
        ):
            return None
        return {
            str(n): (tuple(lo), tuple(opt), tuple(hi))
            for n, (lo, opt, hi) in meta["profile"].items()
        }
    except (PerfguardError, OSError, AttributeError, KeyError, TypeError, ValueError):
        return None


def _build(
    trt: Any,
    logger: Any,
    spec: EngineSpec,
    onnx_path: Path,
    timing: Path | None,
    calibrator: Any,
    location: Location | None,
) -> tuple[bytes, Profile, float]:
    mark = logger.mark()
    builder = _builder(trt, logger, spec, mark)
    network = builder.create_network(_network_flags(trt, spec))
    parser = trt.OnnxParser(network, logger)
    parsed = parser.parse(Path(onnx_path).read_bytes(), str(onnx_path))  # path: external data
    errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
    if not parsed:
        raise _build_error("could not parse", spec, onnx_path, errors, logger.tail(mark), location)
    tensors = [network.get_input(i) for i in range(network.num_inputs)]
    profile = spec.resolve_profile([(t.name, tuple(t.shape)) for t in tensors], location)
    for name, shape in spec.input_shapes:  # before any calibration runs at these shapes
        problem = outside_profile(name, shape, profile, location) if name in profile else None
        if problem is not None:
            raise problem
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, spec.workspace_mib << 20)
    if spec.optimization_level is not None:
        if not hasattr(config, "builder_optimization_level"):
            raise CellError(
                f"TensorRT {spec.tensorrt} has no builder optimization level",
                expected="TensorRT 8.6 or newer for `builder_optimization_level`",
                fix="upgrade TensorRT or remove `gpu: tensorrt: builder_optimization_level`",
                location=location,
            )
        config.builder_optimization_level = spec.optimization_level
    if spec.typing == "weak" and spec.precision in _FLAGS:
        config.set_flag(getattr(trt.BuilderFlag, _FLAGS[spec.precision]))
    if spec.profiling_verbosity:  # layer types for "where the time went"
        config.profiling_verbosity = getattr(trt.ProfilingVerbosity, spec.profiling_verbosity)
    optimization = builder.create_optimization_profile()
    for name, (lo, opt, hi) in profile.items():
        optimization.set_shape(name, lo, opt, hi)
    config.add_optimization_profile(optimization)
    if calibrator is not None:
        calibrator.dtypes = {t.name: dtype_name(t.dtype) for t in tensors}
        # Calibrate at the suite inputs' own shapes (the calibration feeds share them).
        fixed = builder.create_optimization_profile()
        for name, shape in spec.input_shapes:
            if name in profile:
                fixed.set_shape(name, shape, shape, shape)
        with warnings.catch_warnings():  # implicit int8 is deprecated since TensorRT 10.1
            warnings.simplefilter("ignore", DeprecationWarning)
            config.int8_calibrator = calibrator
            config.set_calibration_profile(fixed)
    cache = _attach_timing_cache(config, timing) if timing is not None else None
    started = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    build_s = time.perf_counter() - started
    if serialized is None:
        raise _build_error("could not build", spec, onnx_path, errors, logger.tail(mark), location)
    if cache is not None and timing is not None:
        _save_timing_cache(cache, timing)
    return bytes(memoryview(serialized)), profile, build_s


def _builder(trt: Any, logger: Any, spec: EngineSpec, mark: int) -> Any:
    """``trt.Builder(logger)``, or BackendUnavailable with TensorRT's own reason.

    TensorRT returns no builder where it cannot use the GPU (no device, a driver too
    old, its libraries missing); the Python bindings then raise a bare TypeError
    ("factory function returned nullptr") and the reason is only in the log.
    """
    try:
        builder = trt.Builder(logger)
    except TypeError as exc:
        builder, problem = None, f"{exc}"
    else:
        problem = "it returned no builder"
    if builder is not None:
        return builder
    tail = logger.tail(mark)
    said = "; TensorRT logged:\n  " + "\n  ".join(tail) if tail else "; TensorRT logged nothing"
    raise BackendUnavailable(
        f"TensorRT {spec.tensorrt} cannot create a builder on {spec.gpu} ({problem}){said}",
        expected="a CUDA GPU and driver TensorRT can use",
        fix="check `nvidia-smi` and the driver version TensorRT "
        f"{spec.tensorrt} needs (scripts/gpu-check diagnoses a runner)",
    )


def _network_flags(trt: Any, spec: EngineSpec) -> int:
    """``create_network``'s flags: strong typing, or explicit batch before TensorRT 10.

    TensorRT 10 ignores EXPLICIT_BATCH (deprecated: every network is explicit batch);
    TensorRT 11 has no such member and every network is strongly typed.
    """
    creation = trt.NetworkDefinitionCreationFlag
    if spec.typing == "strong":
        return 1 << int(creation.STRONGLY_TYPED)
    explicit = getattr(creation, "EXPLICIT_BATCH", None)
    if explicit is None or trt_major(spec.tensorrt) >= 10:
        return 0
    return 1 << int(explicit)


def _build_error(
    what: str,
    spec: EngineSpec,
    onnx_path: Path,
    errors: list[str],
    tail: list[str],
    location: Location | None,
) -> ModelError:
    text = f"TensorRT {spec.tensorrt} {what} {onnx_path} ({spec.precision}, {spec.gpu})"
    if errors:
        text += "; ONNX parser errors: " + "; ".join(errors)
    text += (
        "; last TensorRT warnings/errors:\n  " + "\n  ".join(tail)
        if tail
        else "; TensorRT logged no warnings or errors"
    )
    return ModelError(
        text,
        expected="an ONNX model this TensorRT version can parse and build for this GPU",
        fix="check the model's operators and opset against TensorRT's ONNX support, simplify "
        "it (onnxsim, polygraphy surgeon sanitize), raise `gpu: tensorrt: workspace_mib` if the "
        "log mentions memory, or run it with `backend: onnxruntime`",
        location=location,
    )


def _timing_path(cache_dir: Path, spec: EngineSpec) -> Path:
    major, minor = spec.capability
    return (
        cache_dir
        / f"timing-trt{safe_name(spec.tensorrt)}-{safe_name(spec.gpu)}-sm{major}{minor}.cache"
    )


def _attach_timing_cache(config: Any, path: Path) -> Any:
    """The timing cache from ``path`` (or a new one) attached to ``config``."""
    data = b""
    with contextlib.suppress(OSError):
        data = path.read_bytes()
    try:
        cache = config.create_timing_cache(data)
        if cache is not None and config.set_timing_cache(cache, ignore_mismatch=False):
            return cache
    except Exception:  # a corrupt file: start afresh, the build rewrites it
        pass
    cache = config.create_timing_cache(b"")
    config.set_timing_cache(cache, ignore_mismatch=False)
    return cache


def _save_timing_cache(cache: Any, path: Path) -> None:
    data = bytes(memoryview(cache.serialize()))
    with FileLock(str(path) + ".lock"), _temporary(path) as tmp:
        tmp.write_bytes(data)
        tmp.replace(path)


@contextlib.contextmanager
def _temporary(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target`` (same folder: the rename is atomic), removed after."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
