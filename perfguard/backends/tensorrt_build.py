"""Building and caching TensorRT engines for ``backend: tensorrt``.

An engine is built once per :class:`EngineSpec` (ONNX content hash, TensorRT
version, GPU and compute capability, precision, workspace, optimization level,
profile, int8 calibration data) into ``<model>-<key16>.engine`` beside a JSON
sidecar of those fields, under a file lock and renamed into place, so workers
never build a key twice nor read half an engine. An engine whose sidecar names
another TensorRT or GPU (or is unreadable) is never deserialized: it is rebuilt.
The timing cache is one file per (TensorRT version, GPU), loaded into each build.
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
from perfguard.core.errors import CellError, InputError, Location, ModelError, PerfguardError
from perfguard.models.cache import KEY_CHARS, make_cache_folder, safe_name

__all__ = [
    "Engine",
    "EngineSpec",
    "Profile",
    "Shape",
    "calibration_digest",
    "dtype_name",
    "load_engine",
    "make_calibrator",
    "outside_profile",
    "trt_logger",
    "trt_major",
]

Shape = tuple[int, ...]
#: input name -> (min, opt, max) shapes of the engine's one optimization profile.
Profile = dict[str, tuple[Shape, Shape, Shape]]
Feeds = Mapping[str, np.ndarray]

_LOG_TAIL = 20
_FLAGS = {"fp16": "FP16", "bf16": "BF16", "int8": "INT8"}
_LOGGERS: dict[int, Any] = {}
_LOGGERS_LOCK = threading.Lock()


def trt_major(version: str) -> int:
    """The major number of a ``tensorrt.__version__`` string (0 when unreadable)."""
    match = re.match(r"\d+", version)
    return int(match.group(0)) if match else 0


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
        }

    @property
    def key(self) -> str:
        text = json.dumps(["perfguard-tensorrt-engine-v1", self.fields()], sort_keys=True)
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
    builder = trt.Builder(logger)
    # TensorRT 10 networks are always explicit-batch (the flag is deprecated there).
    explicit = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(0 if trt_major(spec.tensorrt) >= 10 else explicit)
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
    if spec.precision in _FLAGS:
        config.set_flag(getattr(trt.BuilderFlag, _FLAGS[spec.precision]))
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
