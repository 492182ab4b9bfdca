"""The figures of a cell measured under concurrent load (``ScenarioResult.load``).

:func:`perfguard.measure.levelfigures.level_figures` computes them (its docstring says
what each figure means) and :mod:`perfguard.measure.loadcell` adds the SLO search and
the batching service probe; the reports only read them. ``to_dict`` gives exactly
the ``load`` object of ``results.json`` (every key present, None where a figure
does not apply). ``ScenarioResult.latency_ns``/``samples_ns`` of such a cell hold
the *corrected* per-request latencies; ``uncorrected_ns`` here is the model call
alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from perfguard.records.declare import Record, spec
from perfguard.records.figures import LatencySummary

__all__ = [
    "BatchingFigures",
    "GoodputFigures",
    "LateFigures",
    "LevelMemory",
    "LoadFigures",
    "ServiceProbe",
    "SloSearch",
    "SloStep",
]


#: A figure that is never negative (a share, a time) and a count.
_NON_NEGATIVE = spec(minimum=0)
_COUNT = spec(minimum=0)


@dataclass(frozen=True)
class LateFigures(Record):
    """Requests dispatched more than ``limit_ms`` after their scheduled time (or never)."""

    SCHEMA_NAME: ClassVar[str] = "late"

    count: int = field(metadata=_COUNT)
    share: float = field(metadata=_NON_NEGATIVE)
    limit_ms: float = field(metadata=_NON_NEGATIVE)
    max_share: float = field(metadata=_NON_NEGATIVE)
    lag_p99_ms: float | None = field(metadata=_NON_NEGATIVE)
    lag_max_ms: float | None = field(metadata=_NON_NEGATIVE)


@dataclass(frozen=True)
class ServiceProbe(Record):
    """The model's own service time alone and at the largest batch, and the capacities
    they imply (filled by ``perfguard.measure.loadcell`` after the level ran). Stored inline:
    its keys sit in the batching object."""

    SCHEMA_NAME: ClassVar[str] = "service_probe"

    service_ms_batch1: float | None = field(default=None, metadata=_NON_NEGATIVE)
    service_ms_max_batch: float | None = field(default=None, metadata=_NON_NEGATIVE)
    capacity_unbatched: float | None = field(default=None, metadata=_NON_NEGATIVE)
    capacity_batched: float | None = field(default=None, metadata=_NON_NEGATIVE)
    gain: float | None = field(default=None, metadata=_NON_NEGATIVE)


@dataclass(frozen=True)
class BatchingFigures(Record):
    """Dynamic batching of one level: how requests were grouped, and how long they waited."""

    SCHEMA_NAME: ClassVar[str] = "batching"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "Dynamic batching under load: batch sizes, waits, the service probe and its gain "
        "(perfguard.records.loadfigures.BatchingFigures)."
    )

    max_batch: int = field(metadata=spec(minimum=1))
    max_wait_ms: float = field(metadata=_NON_NEGATIVE)
    batches: int = field(metadata=_COUNT)
    mean_batch: float | None = field(metadata=_NON_NEGATIVE)
    # batch size (as a string, a JSON key) -> batches of that size
    sizes: dict[str, int] = field(
        metadata=spec(
            minimum=0,
            key_pattern="^[0-9]+$",
            description="batches per batch size (the size as a string key)",
        )
    )
    wait_ns: LatencySummary | None
    probe: ServiceProbe = field(default_factory=ServiceProbe, metadata=spec(inline=True))


@dataclass(frozen=True)
class SloStep(Record):
    """One level tried by an SLO search; ``invalid`` says why it could not count;
    ``good_share`` (a goodput search's) the share of its requests that were good."""

    SCHEMA_NAME: ClassVar[str] = "slo_step"

    level: float = field(metadata=_NON_NEGATIVE)
    p_ms: float | None = field(metadata=_NON_NEGATIVE)
    throughput: float = field(metadata=_NON_NEGATIVE)
    ok: bool
    invalid: str | None
    good_share: float | None = field(default=None, metadata=spec(omit="none", minimum=0, maximum=1))


@dataclass(frozen=True)
class SloSearch(Record):
    """An SLO search: the levels tried (``over`` concurrency or rate) and the best one
    meeting ``P<percentile> <= target_ms`` (None when none did), or for a goodput search
    (``goodput_share`` set, ``target_ms`` null) the best one where at least that share of
    the requests was good. In JSON ``steps`` comes last, after the best level."""

    SCHEMA_NAME: ClassVar[str] = "slo"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "The search for the highest load meeting a latency target "
        "(perfguard.records.loadfigures.SloSearch)."
    )

    percentile: float = field(metadata=spec(minimum=0, maximum=100))
    target_ms: float | None = field(metadata=_NON_NEGATIVE)
    over: str
    best_level: float | None = field(default=None, metadata=_NON_NEGATIVE)
    best_throughput: float | None = field(default=None, metadata=_NON_NEGATIVE)
    best_p_ms: float | None = field(default=None, metadata=_NON_NEGATIVE)
    goodput_share: float | None = field(
        default=None, metadata=spec(omit="none", minimum=0, maximum=1)
    )
    steps: tuple[SloStep, ...] = ()


@dataclass(frozen=True)
class LevelMemory(Record):
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

    SCHEMA_NAME: ClassVar[str] = "level_memory"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "Host memory of the level in MiB (perfguard.records.loadfigures.LevelMemory): resident "
        "after the first session opened, before any request (idle_mib); the RSS high-water "
        "mark over the measured level alone (level_peak_mib); the requests served at once "
        "(streams: clients, or workers in an open loop). Absent from older files and where "
        "the RSS is not read."
    )

    idle_mib: float = field(metadata=_NON_NEGATIVE)
    level_peak_mib: float = field(metadata=_NON_NEGATIVE)
    streams: int = field(metadata=spec(minimum=1))

    @property
    def held_mib(self) -> float:
        return self.level_peak_mib - self.idle_mib


@dataclass(frozen=True)
class GoodputFigures(Record):
    """The goodput of a generative level: of its ``requests``, the ``good`` ones met
    both limits (TTFT from the scheduled send within ``ttft_ms``, TPOT within
    ``tpot_ms``); ``per_s`` is good requests per second of the level's window (the
    gated figure), ``share`` good over all requests (failed and unserved ones are
    never good)."""

    SCHEMA_NAME: ClassVar[str] = "goodput"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "Requests of a generative level meeting its TTFT and TPOT limits together "
        "(perfguard.records.loadfigures.GoodputFigures); per_s is the goodput."
    )

    ttft_ms: float = field(metadata=_NON_NEGATIVE)
    tpot_ms: float = field(metadata=_NON_NEGATIVE)
    good: int = field(metadata=_COUNT)
    per_s: float = field(metadata=_NON_NEGATIVE)
    share: float = field(metadata=spec(minimum=0, maximum=1))


@dataclass(frozen=True)
class LoadFigures(Record):
    """One measured load level (or the chosen level of an SLO search).

    ``mode`` is ``closed`` (``concurrency`` clients) or ``open`` (``rate_asked``
    requests per second, ``arrivals`` their spacing); the other mode's fields are
    None. ``invalid`` says why the level cannot be trusted (the generator fell
    behind), None when it can. ``shortfall`` (an open loop that did not keep up:
    answered under 90% of the asked rate) says what it achieved: its figures are those
    of an overloaded level, not of the rate asked. ``goodput``: a generative level's,
    when its scenario sets the limits.
    """

    SCHEMA_NAME: ClassVar[str] = "load"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "A cell measured under concurrent load (perfguard.measure.loadcell; the record is "
        "perfguard.records.loadfigures.LoadFigures). Latencies in ns; corrected = from the "
        "scheduled send time, uncorrected = from the start of the model call."
    )

    mode: str = field(metadata=spec(values=("closed", "open")))
    level: str = field(metadata=spec(min_length=1))
    concurrency: int | None = field(metadata=spec(minimum=1))
    rate_asked: float | None = field(metadata=_NON_NEGATIVE)
    rate_sent: float | None = field(metadata=_NON_NEGATIVE)
    rate_achieved: float | None = field(metadata=_NON_NEGATIVE)
    arrivals: str | None = field(metadata=spec(values=("poisson", "constant", None)))
    workers: int = field(metadata=spec(minimum=1))
    sessions: str = field(metadata=spec(values=("shared", "per_worker")))
    requests: int = field(metadata=_COUNT)
    completed: int = field(metadata=_COUNT)
    failed: int = field(metadata=_COUNT)
    unserved: int = field(metadata=_COUNT)
    duration_s: float = field(metadata=_NON_NEGATIVE)
    # None in a pooled level's file (the launches keep their own throughput)
    throughput: float | None = field(metadata=_NON_NEGATIVE)
    uncorrected_ns: LatencySummary | None
    queue_share: float | None = field(metadata=_NON_NEGATIVE)
    late: LateFigures
    errors: dict[str, int] = field(  # error text -> count
        metadata=spec(minimum=1, description="failed requests per first line of the error")
    )
    batching: BatchingFigures | None = None
    slo: SloSearch | None = None
    invalid: str | None = None
    # absent from older files, and where RSS is not read
    memory: LevelMemory | None = field(default=None, metadata=spec(omit="none"))
    shortfall: str | None = field(default=None, metadata=spec(omit="none"))
    goodput: GoodputFigures | None = field(default=None, metadata=spec(omit="none"))

    @property
    def is_open(self) -> bool:
        return self.mode == "open"

    def with_probe(self, probe: ServiceProbe) -> LoadFigures:
        """These figures with the batching service probe filled in (a batching level)."""
        if self.batching is None:
            raise ValueError("only a level with dynamic batching has a service probe")
        return replace(self, batching=replace(self.batching, probe=probe))
