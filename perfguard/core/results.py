"""Results as plain, serialisable data: what a run measured, and its JSON form.

``RunResult.to_dict()`` is exactly what ``reports/<commit12>/results.json`` holds
(validated by ``perfguard/schemas/results.schema.json``); ``RunResult.from_dict``
reads it back and refuses a file of another schema version with a clear message.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from perfguard.core.errors import ResultsError

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class LatencySummary:
    """Summary of per-request latencies, all in nanoseconds (percentiles: nearest rank)."""

    n: int
    min: float
    max: float
    mean: float
    std: float
    p50: float
    p90: float
    p95: float
    p99: float
    p999: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencySummary:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class CommitInfo:
    """The git state a run was measured at. ``sha`` is None outside a git checkout."""

    sha: str | None
    branch: str | None
    dirty: bool
    note: str | None = None  # e.g. "not a git repository", "detached HEAD"

    @property
    def short(self) -> str:
        """The 12-character directory name for reports; ``uncommitted`` outside git."""
        return self.sha[:12] if self.sha else "uncommitted"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CommitInfo:
        return cls(
            sha=data.get("sha"),
            branch=data.get("branch"),
            dirty=bool(data.get("dirty", False)),
            note=data.get("note"),
        )


@dataclass(frozen=True)
class Environment:
    """Where a run was measured.

    ``comparable`` holds the fields that must match for two runs to be compared
    (CPU model and count, GPU, runtime versions, Python); ``recorded`` holds what
    is only informative (hostname, OS build, ...). ``fingerprint`` is a short hash
    of ``comparable``.
    """

    fingerprint: str
    comparable: dict[str, str] = field(default_factory=dict)
    recorded: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "comparable": dict(self.comparable),
            "recorded": dict(self.recorded),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Environment:
        return cls(
            fingerprint=str(data["fingerprint"]),
            comparable={str(k): str(v) for k, v in data.get("comparable", {}).items()},
            recorded={str(k): str(v) for k, v in data.get("recorded", {}).items()},
        )


@dataclass(frozen=True)
class ScenarioResult:
    """Everything measured for one scenario cell.

    ``status`` is ``passed``, ``failed``, ``skipped`` or ``error``; on anything but
    ``passed`` the figures may be absent and ``message`` says why.
    """

    id: str
    suite: str
    name: str
    backend: str
    device: str
    precision: str
    status: str = "passed"
    message: str | None = None
    batch_size: int = 1
    threads: int | None = None
    latency_ns: LatencySummary | None = None
    throughput: float | None = None  # samples per second, counting the batch
    cold_start_ns: int | None = None
    warmup_iterations: int = 0
    warmup_ns: int = 0
    stable: bool = True
    stability_ratio: float | None = None  # median(last third) / median(first third)
    runtime: dict[str, Any] = field(default_factory=dict)  # providers, versions, opt level
    # Median time of the machine-speed canary measured beside this scenario (ns);
    # the ratio of two runs' canaries normalises their latencies for host slow spells.
    canary_ns: float | None = None
    peak_memory_mib: float | None = None
    # Peak device memory allocated by the runtime during the cell (torch on CUDA:
    # torch.cuda.max_memory_allocated after a reset); None where not measured.
    gpu_peak_memory_mib: float | None = None
    # Accuracy against the reference cell / baseline (see perfguard.accuracy.metrics):
    # {"reference": ..., "outputs": {name: {metric: value}}, "checks": [...],
    #  "worst_inputs": [...], "task_metric": ...}
    accuracy: dict[str, Any] | None = None
    # Outputs of the first few accuracy inputs, archived with a baseline so the
    # next commit can be checked against them: {output: {"shape", "dtype", "data"}}.
    golden_outputs: dict[str, Any] | None = None
    # Figures of a cell measured under concurrent load (perfguard.measure.load):
    # mode, level, concurrency/rate asked and achieved, the uncorrected latency
    # summary, queue share, late and failed requests, batching and SLO search.
    # ``latency_ns``/``samples_ns`` then hold the corrected per-request latencies.
    load: dict[str, Any] | None = None
    tags: tuple[str, ...] = ()
    samples_ns: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["latency_ns"] = self.latency_ns.to_dict() if self.latency_ns else None
        data["tags"] = list(self.tags)
        data["samples_ns"] = list(self.samples_ns)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioResult:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        if kwargs.get("latency_ns") is not None:
            kwargs["latency_ns"] = LatencySummary.from_dict(kwargs["latency_ns"])
        kwargs["tags"] = tuple(kwargs.get("tags", ()))
        kwargs["samples_ns"] = tuple(int(s) for s in kwargs.get("samples_ns", ()))
        return cls(**kwargs)


@dataclass(frozen=True)
class RunResult:
    """One pytest session's results: commit, environment and every scenario."""

    commit: CommitInfo
    environment: Environment
    scenarios: tuple[ScenarioResult, ...]
    created_at: str  # ISO 8601, UTC
    perfguard_version: str
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "perfguard_version": self.perfguard_version,
            "created_at": self.created_at,
            "commit": self.commit.to_dict(),
            "environment": self.environment.to_dict(),
            "scenarios": [s.to_dict() for s in self.scenarios],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<results>") -> RunResult:
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            newer = isinstance(version, int) and version > SCHEMA_VERSION
            raise ResultsError(
                f"{source}: results schema_version {version!r} is not supported",
                expected=f"schema_version {SCHEMA_VERSION}",
                fix=(
                    "upgrade perfguard to read files written by a newer version"
                    if newer
                    else "re-create the file with this perfguard version"
                ),
            )
        try:
            return cls(
                schema_version=version,
                perfguard_version=str(data.get("perfguard_version", "unknown")),
                created_at=str(data["created_at"]),
                commit=CommitInfo.from_dict(data["commit"]),
                environment=Environment.from_dict(data["environment"]),
                scenarios=tuple(ScenarioResult.from_dict(s) for s in data["scenarios"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultsError(
                f"{source}: results file is missing or has a malformed field ({exc!r})",
                expected="a results file written by perfguard",
                fix="re-create it with `pytest --perfguard`",
            ) from exc
