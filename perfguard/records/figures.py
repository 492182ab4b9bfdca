"""The latency summary and the runtime facts of a measured cell, as typed records.

Both travel inside a :class:`~perfguard.records.results.ScenarioResult`; ``to_dict`` gives
exactly the JSON ``results.json`` and baseline files hold (key order included, since
a reviewer diffs those files), ``from_dict`` reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from perfguard.core.policy import LATENCY_QS
from perfguard.core.stats import as_samples, rank_index
from perfguard.records.declare import Record, spec

__all__ = [
    "RESERVED_KEYS",
    "BenchmarkFacts",
    "CpuShares",
    "GpuFacts",
    "JSON",
    "QUANT_LAYERS_KEPT",
    "LatencySummary",
    "QuantFacts",
    "RuntimeInfo",
]

#: A value read from or written to a JSON file, as ``json`` gives it.
JSON = Any


_NS = spec(minimum=0)


@dataclass(frozen=True)
class LatencySummary(Record):
    """Summary of per-request latencies, all in nanoseconds (percentiles: nearest rank)."""

    SCHEMA_NAME: ClassVar[str] = "latency"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "Latency summary in nanoseconds (nearest-rank percentiles)."
    )

    n: int = field(metadata=spec(minimum=0))
    min: float = field(metadata=_NS)
    max: float = field(metadata=_NS)
    mean: float = field(metadata=_NS)
    std: float = field(metadata=_NS)
    p50: float = field(metadata=_NS)
    p90: float = field(metadata=_NS)
    p95: float = field(metadata=_NS)
    p99: float = field(metadata=_NS)
    p999: float = field(metadata=_NS)


def summary_or_none(data: Mapping[str, Any] | None) -> LatencySummary | None:
    """``LatencySummary.from_dict`` of an optional summary."""
    return LatencySummary.from_dict(data) if data is not None else None


@dataclass(frozen=True)
class CpuShares:
    """What the machine-speed canary saw besides the cell (see ``perfguard.measure.canary``):
    other processes' share of all CPUs (``foreign_cpu``) and the hypervisor's (``steal``);
    None where the host does not tell (no ``/proc/stat``)."""

    foreign_cpu: float | None
    steal: float | None


@dataclass(frozen=True)
class GpuFacts:
    """A GPU cell's telemetry (``perfguard.machine.telemetry``) and, for torch on CUDA,
    the device-side latency summary of the timed requests."""

    telemetry: dict[str, JSON] | None
    device_latency_ns: LatencySummary | None = None


@dataclass(frozen=True)
class BenchmarkFacts:
    """A result bridged from pytest-benchmark (``perfguard.interop.benchmark_bridge``)."""

    source: str
    rounds: int
    iterations: int
    sample: str
    group: JSON
    params: JSON
    extra_info: JSON


#: Names of quantized layers a cell's runtime facts keep (the rest are counted).
QUANT_LAYERS_KEPT = 50


def _counts(value: JSON) -> dict[str, int]:
    """``{op type: count}`` from a stored object; anything else is left out."""
    if not isinstance(value, Mapping):
        return {}
    return {
        str(k): int(v) for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)
    }


@dataclass(frozen=True)
class QuantFacts:
    """What a quantizer actually did to a cell's model, read from what it made (the
    quantized ONNX graph, or the modules torch replaced): ``quantized`` and ``kept``
    count the quantizable nodes (or modules), by op type, it quantized and left in
    float; ``ops`` counts the quantization nodes of the quantized graph
    (``DynamicQuantizeLinear``, ``QuantizeLinear``, ``MatMulInteger``, ``QLinear*``...);
    ``layers`` names the quantized nodes or modules (the first ``QUANT_LAYERS_KEPT``),
    ``layer_count`` how many there are. A backend keeps it in its own runtime facts,
    under ``quantization.applied`` (``RuntimeInfo.quantization``)."""

    tool: str
    quantized: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)
    layers: tuple[str, ...] = ()
    layer_count: int = 0

    def to_dict(self) -> dict[str, JSON]:
        return {
            "tool": self.tool,
            "quantized": dict(self.quantized),
            "kept": dict(self.kept),
            "ops": dict(self.ops),
            "layers": list(self.layers[:QUANT_LAYERS_KEPT]),
            "layer_count": self.layer_count,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, JSON]) -> QuantFacts:
        layers = data.get("layers")
        names = tuple(str(n) for n in layers) if isinstance(layers, list) else ()
        count = data.get("layer_count")
        return cls(
            tool=str(data.get("tool") or ""),
            quantized=_counts(data.get("quantized")),
            kept=_counts(data.get("kept")),
            ops=_counts(data.get("ops")),
            layers=names,
            layer_count=count if isinstance(count, int) else len(names),
        )

    def text(self) -> str:
        """``2 of 3 MatMul quantized, 1 MatMul left in float (graph: MatMulInteger 2,
        DynamicQuantizeLinear 2; onnxruntime.quantization.quantize_dynamic)``, or
        ``nothing quantized: 2 Gemm left in float (...)``."""

        def listed(counts: Mapping[str, int]) -> str:
            return ", ".join(f"{n} {op}" for op, n in counts.items() if n)

        parts = []
        if any(self.quantized.values()):
            parts.append(
                ", ".join(
                    f"{n} of {n + self.kept.get(op, 0)} {op}"
                    for op, n in self.quantized.items()
                    if n
                )
                + " quantized"
            )
        else:
            parts.append("nothing quantized")
        left = {op: n for op, n in self.kept.items() if n}
        if left:
            parts.append(f"{listed(left)} left in float")
        where = [f"{op} {n}" for op, n in self.ops.items() if n]
        tail = f"graph: {', '.join(where)}; " if where else ""
        return f"{', '.join(parts)} ({tail}{self.tool})"


#: The runtime keys perfguard itself writes; a backend's own facts use other names.
RESERVED_KEYS = frozenset(
    {"foreign_cpu", "steal", "sessions", "telemetry", "device_latency_ns", "isolated", "ab_base"}
    | {f.name for f in fields(BenchmarkFacts)}
)


@dataclass(frozen=True)
class RuntimeInfo:
    """What a result says about how it ran (``ScenarioResult.runtime``).

    ``backend`` holds the backend's own facts, free-form and in its order (providers,
    versions, optimisation level, engine path...: ``Session.runtime_info``). The rest
    is what perfguard itself records and reads: ``cpu`` (contention during the cell,
    gated by the judging policy), ``sessions`` (runtime sessions of a load cell),
    ``gpu`` (telemetry), ``isolated`` (measured in a worker of its own), ``ab_base``
    (the base commit of a same-run A/B cell) and ``benchmark`` (a pytest-benchmark
    test). In JSON they follow the backend's facts, each only when set; their keys
    (``RESERVED_KEYS``) are not for a backend's own facts.
    """

    backend: dict[str, JSON] = field(default_factory=dict)
    cpu: CpuShares | None = None
    sessions: int | None = None
    gpu: GpuFacts | None = None
    isolated: bool = False
    ab_base: str | None = None
    benchmark: BenchmarkFacts | None = None

    @property
    def foreign_cpu(self) -> float | None:
        """Other processes' share of all CPUs during the cell; None when not measured."""
        return self.cpu.foreign_cpu if self.cpu is not None else None

    @property
    def quantization(self) -> QuantFacts | None:
        """What the quantizer did to the cell's model (the backend's
        ``quantization.applied`` facts); None for a cell not quantized, or measured
        before perfguard recorded it."""
        found = self.backend.get("quantization")
        applied = found.get("applied") if isinstance(found, Mapping) else None
        return QuantFacts.from_dict(applied) if isinstance(applied, Mapping) else None

    def to_dict(self) -> dict[str, JSON]:
        out: dict[str, JSON] = dict(self.backend)
        if self.cpu is not None:
            out.update(foreign_cpu=self.cpu.foreign_cpu, steal=self.cpu.steal)
        if self.sessions is not None:
            out["sessions"] = self.sessions
        if self.gpu is not None:
            out["telemetry"] = self.gpu.telemetry
            if self.gpu.device_latency_ns is not None:
                out["device_latency_ns"] = self.gpu.device_latency_ns.to_dict()
        if self.isolated:
            out["isolated"] = True
        if self.ab_base is not None:
            out["ab_base"] = self.ab_base
        if self.benchmark is not None:
            out.update(asdict(self.benchmark))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, JSON]) -> RuntimeInfo:
        rest = dict(data)
        cpu = None
        if "foreign_cpu" in rest or "steal" in rest:
            cpu = CpuShares(rest.pop("foreign_cpu", None), rest.pop("steal", None))
        gpu = None
        if "telemetry" in rest or "device_latency_ns" in rest:
            gpu = GpuFacts(
                rest.pop("telemetry", None), summary_or_none(rest.pop("device_latency_ns", None))
            )
        benchmark = None
        if rest.get("source") == "pytest-benchmark":
            names = [f.name for f in fields(BenchmarkFacts)]
            benchmark = BenchmarkFacts(**{name: rest.pop(name, None) for name in names})
        return cls(
            cpu=cpu,
            sessions=rest.pop("sessions", None),
            gpu=gpu,
            isolated=bool(rest.pop("isolated", False)),
            ab_base=rest.pop("ab_base", None),
            benchmark=benchmark,
            backend=rest,
        )


# The percentiles a LatencySummary holds, by field name: the gateable latency metrics.
_SUMMARY_QS: tuple[tuple[str, float], ...] = tuple(LATENCY_QS.items())


def summarize(samples_ns: npt.ArrayLike) -> LatencySummary:
    """n, min, max, mean, std (ddof=1; 0 for one sample) and nearest-rank percentiles."""
    arr = np.sort(as_samples(samples_ns, "samples_ns"))
    n = int(arr.size)
    pct = {name: float(arr[rank_index(n, q)]) for name, q in _SUMMARY_QS}
    return LatencySummary(
        n=n,
        min=float(arr[0]),
        max=float(arr[-1]),
        mean=float(np.mean(arr)),
        std=float(np.std(arr, ddof=1)) if n > 1 else 0.0,
        **pct,
    )
