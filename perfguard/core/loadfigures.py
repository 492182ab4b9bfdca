"""The figures of a cell measured under concurrent load (``ScenarioResult.load``).

:func:`perfguard.measure.loadstats.level_figures` computes them (its docstring says
what each figure means) and :mod:`perfguard.measure.load` adds the SLO search and
the batching service probe; the reports only read them. ``to_dict`` gives exactly
the ``load`` object of ``results.json`` (every key present, None where a figure
does not apply). ``ScenarioResult.latency_ns``/``samples_ns`` of such a cell hold
the *corrected* per-request latencies; ``uncorrected_ns`` here is the model call
alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from perfguard.core.figures import LatencySummary, summary_or_none

__all__ = [
    "BatchingFigures",
    "LateFigures",
    "LevelMemory",
    "LoadFigures",
    "ServiceProbe",
    "SloSearch",
    "SloStep",
]


@dataclass(frozen=True)
class LateFigures:
    """Requests dispatched more than ``limit_ms`` after their scheduled time (or never)."""

    count: int
    share: float
    limit_ms: float
    max_share: float
    lag_p99_ms: float | None
    lag_max_ms: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LateFigures:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class ServiceProbe:
    """The model's own service time alone and at the largest batch, and the capacities
    they imply (filled by ``perfguard.measure.load`` after the level ran)."""

    service_ms_batch1: float | None = None
    service_ms_max_batch: float | None = None
    capacity_unbatched: float | None = None
    capacity_batched: float | None = None
    gain: float | None = None


@dataclass(frozen=True)
class BatchingFigures:
    """Dynamic batching of one level: how requests were grouped, and how long they waited."""

    max_batch: int
    max_wait_ms: float
    batches: int
    mean_batch: float | None
    sizes: dict[str, int]  # batch size (as a string, a JSON key) -> batches of that size
    wait_ns: LatencySummary | None
    probe: ServiceProbe = field(default_factory=ServiceProbe)

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_batch": self.max_batch,
            "max_wait_ms": self.max_wait_ms,
            "batches": self.batches,
            "mean_batch": self.mean_batch,
            "sizes": dict(self.sizes),
            "wait_ns": self.wait_ns.to_dict() if self.wait_ns is not None else None,
            **asdict(self.probe),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchingFigures:
        return cls(
            max_batch=data["max_batch"],
            max_wait_ms=data["max_wait_ms"],
            batches=data["batches"],
            mean_batch=data["mean_batch"],
            sizes=dict(data["sizes"]),
            wait_ns=summary_or_none(data.get("wait_ns")),
            probe=ServiceProbe(**{f.name: data.get(f.name) for f in fields(ServiceProbe)}),
        )


@dataclass(frozen=True)
class SloStep:
    """One level tried by an SLO search; ``invalid`` says why it could not count."""

    level: float
    p_ms: float | None
    throughput: float
    ok: bool
    invalid: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SloStep:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class SloSearch:
    """An SLO search: the levels tried (``over`` concurrency or rate) and the best one
    meeting ``P<percentile> <= target_ms`` (None when none did)."""

    percentile: float
    target_ms: float
    over: str
    steps: tuple[SloStep, ...]
    best_level: float | None = None
    best_throughput: float | None = None
    best_p_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "percentile": self.percentile,
            "target_ms": self.target_ms,
            "over": self.over,
            "best_level": self.best_level,
            "best_throughput": self.best_throughput,
            "best_p_ms": self.best_p_ms,
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SloSearch:
        return cls(
            percentile=data["percentile"],
            target_ms=data["target_ms"],
            over=data["over"],
            steps=tuple(SloStep.from_dict(s) for s in data["steps"]),
            best_level=data.get("best_level"),
            best_throughput=data.get("best_throughput"),
            best_p_ms=data.get("best_p_ms"),
        )


@dataclass(frozen=True)
class LevelMemory:
    """Host memory of one load level, in MiB (the process's RSS; Linux only).

    ``idle_mib`` is resident after the cell's first session opened, before any
    request; ``level_peak_mib`` the high-water mark over the measured level alone
    (restarted after the warm-up); ``streams`` the requests the level serves at
    once: its clients (closed loop) or its workers (open loop, dynamic batching).
    ``held_mib``, the peak above the idle model, is what serving the level costs:
    the sessions, buffers and caches its streams keep (a generative model's KV
    caches among them). Across the levels of one scenario its slope is the memory
    each added stream costs (``perfguard.report.tables.memory_growth``).
    """

    idle_mib: float
    level_peak_mib: float
    streams: int

    @property
    def held_mib(self) -> float:
        return self.level_peak_mib - self.idle_mib

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LevelMemory:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class LoadFigures:
    """One measured load level (or the chosen level of an SLO search).

    ``mode`` is ``closed`` (``concurrency`` clients) or ``open`` (``rate_asked``
    requests per second, ``arrivals`` their spacing); the other mode's fields are
    None. ``invalid`` says why the level cannot be trusted (the generator fell
    behind), None when it can.
    """

    mode: str
    level: str
    concurrency: int | None
    rate_asked: float | None
    rate_sent: float | None
    rate_achieved: float | None
    arrivals: str | None
    workers: int
    sessions: str
    requests: int
    completed: int
    failed: int
    unserved: int
    duration_s: float
    throughput: float
    uncorrected_ns: LatencySummary | None
    queue_share: float | None
    late: LateFigures
    errors: dict[str, int]  # error text -> count
    batching: BatchingFigures | None = None
    slo: SloSearch | None = None
    invalid: str | None = None
    memory: LevelMemory | None = None  # absent from older files, and where RSS is not read

    @property
    def is_open(self) -> bool:
        return self.mode == "open"

    def with_probe(self, probe: ServiceProbe) -> LoadFigures:
        """These figures with the batching service probe filled in (a batching level)."""
        if self.batching is None:
            raise ValueError("only a level with dynamic batching has a service probe")
        return replace(self, batching=replace(self.batching, probe=probe))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if hasattr(value, "to_dict") else value
        out["errors"] = dict(self.errors)
        if self.memory is None:  # files from before the figure, and systems without it
            del out["memory"]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadFigures:
        kwargs = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        kwargs["uncorrected_ns"] = summary_or_none(data.get("uncorrected_ns"))
        kwargs["late"] = LateFigures.from_dict(data["late"])
        kwargs["errors"] = dict(data.get("errors") or {})
        batching, slo = data.get("batching"), data.get("slo")
        kwargs["batching"] = BatchingFigures.from_dict(batching) if batching else None
        kwargs["slo"] = SloSearch.from_dict(slo) if slo else None
        memory = data.get("memory")
        kwargs["memory"] = LevelMemory.from_dict(memory) if memory else None
        return cls(**kwargs)
