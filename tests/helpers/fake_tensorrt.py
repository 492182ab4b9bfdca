"""A small fake of the ``tensorrt`` module and the CUDA surface the backend uses.

``fake_trt`` builds a module scripted by its attributes (the parsed network's IO,
parser errors, a failing build, log lines) that records what was asked of it; its
"serialized engine" is JSON of the network's inputs, outputs and profile, so cache
hits deserialize what the fake build wrote. ``FakeCuda`` is ``TorchCuda`` on the
CPU with fake streams: device buffers are real CPU torch tensors whose
``data_ptr()`` the fakes read. tests/backends/test_tensorrt_conformance.py checks every name
the fake offers against the real TensorRT bindings.
"""

from __future__ import annotations

import ctypes
import enum
import json
import types
from typing import Any

import numpy as np
import torch

from perfguard.backends.tensorrt_backend import TorchCuda


# -- the fake tensorrt -----------------------------------------------------------------
class Severity(enum.Enum):
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


class ILogger:
    Severity = Severity


class DataType(enum.Enum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    BF16 = 7
    INT64 = 8


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class IInt8EntropyCalibrator2:
    pass


class Tensor(types.SimpleNamespace):
    name: str
    shape: tuple[int, ...]
    dtype: DataType


class Network:
    def __init__(self) -> None:
        self.inputs: list[Tensor] = []

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def get_input(self, index: int) -> Tensor:
        return self.inputs[index]


class Profile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int, ...], ...]] = {}

    def set_shape(self, name: str, *shapes: Any) -> None:
        self.shapes[name] = tuple(tuple(s) for s in shapes)


class TimingCache:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def serialize(self) -> bytes:
        return self.data + b"+entry"


class Config:
    def __init__(self) -> None:
        self.flags: set[Any] = set()
        self.pools: dict[Any, int] = {}
        self.builder_optimization_level = 3
        self.profiles: list[Profile] = []
        self.int8_calibrator: Any = None
        self.calibration_profile: Profile | None = None
        self.timing_cache: TimingCache | None = None
        self.profiling_verbosity: Any = None

    def set_flag(self, flag: Any) -> None:
        self.flags.add(flag.name)

    def set_memory_pool_limit(self, pool: Any, size: int) -> None:
        self.pools[pool.name] = size

    def add_optimization_profile(self, profile: Profile) -> None:
        self.profiles.append(profile)

    def create_timing_cache(self, data: bytes) -> TimingCache:
        return TimingCache(bytes(data))

    def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool:
        assert ignore_mismatch is False
        self.timing_cache = cache
        return not cache.data.startswith(b"bad")


class CalibratingConfig(Config):
    """A TensorRT 10 (or older) builder config: implicit int8 calibration, gone in 11."""

    def set_calibration_profile(self, profile: Profile) -> None:
        self.calibration_profile = profile


class IProfiler:
    """``tensorrt.IProfiler``: a subclass must call this ``__init__`` (pybind11)."""

    def __init__(self) -> None:
        self.initialised = True


class Context:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.executed: list[int] = []
        self.profiler: Any = None
        self.enqueue_emits_profile = True
        self.asked_for_reports = 0

    def _report(self) -> None:
        # Layer times grow with the execution count: the median request is the middle one.
        for name, ms in self.engine.layers:
            self.profiler.report_layer_time(name, ms * len(self.executed))

    def report_to_profiler(self) -> bool:
        self.asked_for_reports += 1
        self._report()
        return True

    def set_input_shape(self, name: str, shape: Any) -> bool:
        lo, _, hi = self.engine.profile[name]
        self.shapes[name] = tuple(shape)
        return all(a <= s <= b for a, s, b in zip(lo, shape, hi, strict=True))

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        batch = next(iter(self.shapes.values()))[0]
        return tuple(batch if d == -1 else d for d in self.engine.io[name][2])

    def set_tensor_address(self, name: str, pointer: int) -> bool:
        self.addresses[name] = pointer
        return True

    def execute_async_v3(self, handle: int) -> bool:
        self.executed.append(handle)
        if self.profiler is not None and self.enqueue_emits_profile:
            assert self.profiler.initialised
            self._report()
        return True


class Inspector:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def get_engine_information(self, fmt: Any) -> str:
        assert fmt.name == "JSON"
        return json.dumps({"Layers": self.engine.layer_info})


class Engine:
    def __init__(self, blob: dict[str, Any]) -> None:
        self.io = {n: (TensorIOMode[m], DataType[d], tuple(s)) for n, m, d, s in blob["io"]}
        self.profile = {n: [tuple(s) for s in v] for n, v in blob["profile"].items()}
        self.names: list[str] = [n for n, *_ in blob["io"]]
        self.contexts: list[Context] = []
        self.layers: list[tuple[str, float]] = []  # (name, ms) reported per execution
        self.layer_info: list[Any] = []  # the inspector's "Layers"

    def create_engine_inspector(self) -> Inspector:
        return Inspector(self)

    @property
    def num_io_tensors(self) -> int:
        return len(self.names)

    def get_tensor_name(self, index: int) -> str:
        return self.names[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return self.io[name][0]

    def get_tensor_dtype(self, name: str) -> DataType:
        return self.io[name][1]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.io[name][2]

    def create_execution_context(self) -> Context:
        self.contexts.append(Context(self))
        return self.contexts[-1]


#: NetworkDefinitionCreationFlag members by major version, with TensorRT's own values.
_CREATION_FLAGS = {
    8: [("EXPLICIT_BATCH", 0)],
    10: [("EXPLICIT_BATCH", 0), ("STRONGLY_TYPED", 1)],
    11: [("STRONGLY_TYPED", 0)],
}


def fake_trt(version: str = "10.3.0", bf16: bool = True) -> Any:
    """A ``tensorrt`` module: scripted by its attributes, recording what was asked of it.

    Shaped as its major version is: TensorRT 11 has no precision builder flags, no
    implicit int8 calibration and no EXPLICIT_BATCH (tests/backends/test_tensorrt_conformance.py
    checks each shape against the real bindings of its major).
    """
    major = int(version.split(".")[0])
    trt: Any = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.ILogger = ILogger
    trt.DataType = DataType
    trt.TensorIOMode = TensorIOMode
    if major <= 10:
        trt.IInt8EntropyCalibrator2 = IInt8EntropyCalibrator2
    trt.IProfiler = IProfiler
    make_enum: Any = enum.Enum
    precision_flags = ("FP16 INT8 BF16" if bf16 else "FP16 INT8") if major <= 10 else ""
    trt.BuilderFlag = make_enum("BuilderFlag", f"{precision_flags} TF32 REFIT".strip())
    trt.MemoryPoolType = make_enum("MemoryPoolType", "WORKSPACE")
    trt.LayerInformationFormat = make_enum("LayerInformationFormat", "ONELINE JSON")
    trt.ProfilingVerbosity = make_enum("ProfilingVerbosity", "LAYER_NAMES_ONLY NONE DETAILED")
    int_enum: Any = enum.IntEnum  # TensorRT's enums convert with int()
    trt.NetworkDefinitionCreationFlag = int_enum(
        "NetworkDefinitionCreationFlag",
        _CREATION_FLAGS[11 if major >= 11 else 10 if major == 10 else 8],
    )
    # The script: the parsed network's IO, parser errors, build failure and log lines.
    trt.inputs = [Tensor(name="x", shape=(-1, 8), dtype=DataType.FLOAT)]
    trt.outputs = [Tensor(name="y", shape=(-1, 4), dtype=DataType.FLOAT)]
    trt.parse_errors = []
    trt.fail_build = False
    trt.build_log = []
    trt.layers = []  # (name, ms) each execution reports to an IProfiler
    trt.layer_info = []  # what the engine inspector lists
    # What happened.
    trt.network_flags = []
    trt.configs = []
    trt.calibration = []
    trt.engines = []

    class OnnxParser:
        def __init__(self, network: Any, logger: Any) -> None:
            self.network, self.logger = network, logger
            self.errors: list[str] = list(trt.parse_errors)

        def parse(self, data: bytes, path: str | None = None) -> bool:
            assert data and path
            if self.errors:
                self.logger.log(Severity.ERROR, "ModelImporter: failed to parse the graph")
                return False
            self.network.inputs = list(trt.inputs)
            return True

        @property
        def num_errors(self) -> int:
            return len(self.errors)

        def get_error(self, index: int) -> str:
            return self.errors[index]

    class Builder:
        def __init__(self, logger: Any) -> None:
            self.logger = logger

        def create_network(self, flags: int) -> Any:
            trt.network_flags.append(flags)
            return Network()

        def create_builder_config(self) -> Config:
            return CalibratingConfig() if major <= 10 else Config()

        def create_optimization_profile(self) -> Profile:
            return Profile()

        def build_serialized_network(self, network: Any, config: Config) -> bytes | None:
            trt.configs.append(config)
            for line in trt.build_log:
                self.logger.log(Severity.WARNING, line)
            self.logger.log(Severity.INFO, "an info line nobody needs")
            if trt.fail_build:
                self.logger.log(Severity.ERROR, "out of device memory for tactic 7")
                return None
            if config.int8_calibrator is not None:
                calibrate(config, [t.name for t in network.inputs])
            io = [[t.name, "INPUT", t.dtype.name, list(t.shape)] for t in network.inputs]
            io += [[t.name, "OUTPUT", t.dtype.name, list(t.shape)] for t in trt.outputs]
            profile = {n: list(s) for n, s in config.profiles[0].shapes.items()}
            return json.dumps({"io": io, "profile": profile}).encode()

    def calibrate(config: Config, names: list[str]) -> None:
        calibrator = config.int8_calibrator
        assert calibrator.get_batch_size() == 1 and calibrator.read_calibration_cache() is None
        shapes = config.calibration_profile.shapes  # type: ignore[union-attr]
        while (pointers := calibrator.get_batch(names)) is not None:
            batch = {}
            for name, pointer in zip(names, pointers, strict=True):
                shape = shapes[name][1]
                count = int(np.prod(shape))
                raw = (ctypes.c_float * count).from_address(pointer)
                batch[name] = np.ctypeslib.as_array(raw).copy().reshape(shape)
            trt.calibration.append(batch)
        trt.calibration.append(None)
        calibrator.write_calibration_cache(b"calibration table")

    class Runtime:
        def __init__(self, logger: Any) -> None:
            pass

        def deserialize_cuda_engine(self, data: bytes) -> Engine | None:
            try:
                engine = Engine(json.loads(data))
            except ValueError:
                return None
            engine.layers, engine.layer_info = list(trt.layers), list(trt.layer_info)
            trt.engines.append(engine)
            return engine

    trt.OnnxParser, trt.Builder, trt.Runtime = OnnxParser, Builder, Runtime
    return trt


# -- the fake CUDA surface -------------------------------------------------------------
class Stream:
    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle
        self.synced = 0

    def synchronize(self) -> None:
        self.synced += 1


class FakeCuda(TorchCuda):
    """``TorchCuda`` on the CPU: real tensors, fake device facts and streams."""

    def __init__(self, gpu: str = "NVIDIA H200", capability: tuple[int, int] = (9, 0)) -> None:
        super().__init__(torch.device("cpu"))
        self.gpu, self.cc = gpu, capability
        self.streams: list[Stream] = []
        self.synced = 0
        self.activated = 0

    def name(self) -> str:
        return self.gpu

    def capability(self) -> tuple[int, int]:
        return self.cc

    def new_stream(self) -> Stream:
        self.streams.append(Stream(7000 + len(self.streams)))
        return self.streams[-1]

    def synchronize(self) -> None:
        self.synced += 1

    def activate(self) -> None:
        self.activated += 1

    def release(self) -> None:
        pass
