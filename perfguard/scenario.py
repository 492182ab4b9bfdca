"""Frozen data classes describing what to measure: one ``Scenario`` per matrix cell.

``perfguard.suite`` builds these from YAML; everything downstream only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from perfguard.errors import Location

BACKENDS: tuple[str, ...] = ("torch", "onnxruntime")
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")
GRAPH_OPT_LEVELS: tuple[str, ...] = ("disable", "basic", "extended", "all")
# Numpy dtype names accepted for inputs.
DTYPES: tuple[str, ...] = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)


@dataclass(frozen=True)
class InputSpec:
    """One model input: a fixed shape and how to fill it, reproducibly.

    Exactly one of (``low``/``high``) and ``fill`` applies; with neither, floats are
    drawn from a standard normal and integers from [0, 100). ``high`` is exclusive
    for integers. The tensor depends only on (seed, name, shape, dtype, range).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float | None = None
    high: float | None = None
    fill: float | None = None
    seed: int = 0


@dataclass(frozen=True)
class ModelSpec:
    """Where a model comes from: a Python factory or an ONNX file (exactly one)."""

    name: str
    location: Location
    base_dir: Path
    factory: str | None = None  # "module:function" returning a torch.nn.Module
    factory_kwargs: tuple[tuple[str, object], ...] = ()
    onnx: Path | None = None
    inputs: tuple[InputSpec, ...] = ()
    inputs_file: Path | None = None  # .npz of real inputs, keyed by input name
    output_names: tuple[str, ...] = ()
    opset: int = 17


@dataclass(frozen=True)
class LoopSpec:
    """A loop that runs until BOTH ``iterations`` and ``seconds`` are reached.

    ``max_seconds`` caps the loop so a slow model cannot run forever; the
    iteration count still wins over it only up to that cap.
    """

    iterations: int
    seconds: float
    max_seconds: float = 300.0


@dataclass(frozen=True)
class GateSpec:
    """A limit on one figure, compared against the baseline.

    ``metric`` is e.g. ``p95``, ``p50``, ``p99``, ``throughput``, ``peak_memory``.
    ``limit`` is a relative change when ``relative`` (0.05 for "+5%"), else an
    absolute amount in the metric's unit (ms for latency, MiB for memory, /s for
    throughput). ``higher_is_worse`` says which direction is a regression.
    """

    metric: str
    limit: float
    relative: bool = True
    higher_is_worse: bool = True


@dataclass(frozen=True)
class Scenario:
    """One matrix cell of one scenario of one suite: everything needed to measure it."""

    suite: Path
    name: str
    cell_id: str  # "" when the scenario has no matrix; else e.g. "onnxruntime-int8"
    model: ModelSpec
    location: Location
    backend: str = "torch"
    device: str = "cpu"
    precision: str = "fp32"
    threads: int | None = None
    graph_optimization_level: str = "all"
    warmup: LoopSpec = LoopSpec(iterations=10, seconds=0.5)
    measure: LoopSpec = LoopSpec(iterations=100, seconds=2.0)
    stability_tolerance: float = 0.10
    tags: tuple[str, ...] = ()
    gates: tuple[GateSpec, ...] = (GateSpec(metric="p95", limit=0.05),)
    # Set when the cell's combination is unsupported: the cell fails with it.
    error: str | None = None
    matrix_values: tuple[tuple[str, str], ...] = field(default=())

    @property
    def item_name(self) -> str:
        """The pytest item name, e.g. ``minilm[onnxruntime-int8]``."""
        return f"{self.name}[{self.cell_id}]" if self.cell_id else self.name

    def scenario_id(self, rootdir: Path | None = None) -> str:
        """Stable id used in results and baselines: ``suites/x.yaml::minilm[ort-int8]``."""
        suite = self.suite
        if rootdir is not None:
            try:
                suite = self.suite.resolve().relative_to(rootdir.resolve())
            except ValueError:
                suite = self.suite
        return f"{suite.as_posix()}::{self.item_name}"

    @property
    def is_gpu(self) -> bool:
        return self.device.startswith("cuda")
