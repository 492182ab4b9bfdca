"""Results as typed, frozen records: what a run measured, and its JSON form.

JSON appears only at the file boundary: ``RunResult.to_dict()`` is exactly what
``reports/<commit12>/results.json`` holds (validated by
``perfguard/schemas/results.schema.json``, and the scenarios of a baseline file);
``RunResult.from_dict`` reads it back and refuses a file of another schema version with
a clear message. A scenario's typed parts live beside: ``figures`` (latency summary,
runtime facts), ``loadfigures`` and ``accuracyfigures``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from perfguard.core.accuracyfigures import AccuracyFigures
from perfguard.core.errors import ResultsError, check_schema_version
from perfguard.core.figures import JSON, LatencySummary, RuntimeInfo
from perfguard.core.loadfigures import LoadFigures
from perfguard.core.paths import display_path
from perfguard.core.profile import OperatorProfile
from perfguard.core.record import Record, spec
from perfguard.core.scenario import Scenario

__all__ = [
    "RUN_MODES",
    "SCHEMA_VERSION",
    "CommitInfo",
    "Environment",
    "RunResult",
    "ScenarioResult",
    "Status",
    "WordEnum",
]

SCHEMA_VERSION = 1


class WordEnum(str, Enum):
    """An enum whose members are the very words the JSON files hold.

    A member equals, hashes like, formats and prints as its value, so it can stand in
    for the string anywhere (a dict key, an f-string, ``json.dumps``).
    """

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Status(WordEnum):
    """How a cell's measurement ended; ``passed`` unless ``message`` says why not.

    ``skipped``: the cell could not run here (runtime missing, invalid run);
    ``failed``: it ran and failed (a gate, failed requests, an accuracy check);
    ``error``: perfguard or the model raised something unexpected.
    """

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"


@dataclass(frozen=True)
class CommitInfo(Record):
    """The git state a run was measured at. ``sha`` is None outside a git checkout.

    A reader is tolerant of a missing key (None, ``dirty`` False), as it always was."""

    SCHEMA_NAME: ClassVar[str] = "commit"

    sha: str | None = field(
        default=None,
        metadata=spec(
            pattern="^([0-9a-f]{40}|[0-9a-f]{64})$",
            description="Full commit id: 40 hex digits (64 in a SHA-256 repository); "
            "null outside git.",
        ),
    )
    branch: str | None = None
    dirty: bool = False
    note: str | None = None  # e.g. "not a git repository", "detached HEAD"

    @property
    def short(self) -> str:
        """The 12-character directory name for reports; ``uncommitted`` outside git."""
        return self.sha[:12] if self.sha else "uncommitted"


def fingerprint(comparable: Mapping[str, str]) -> str:
    """An environment's fingerprint: the first 12 hex digits of sha256 over the sorted
    JSON of its ``comparable`` fields (the one rule; a stored one is checked by it)."""
    blob = json.dumps(dict(comparable), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class Environment(Record):
    """Where a run was measured.

    ``comparable`` holds the fields that must match for two runs to be compared
    (CPU model and count, GPU, runtime versions, Python); ``recorded`` holds what
    is only informative (hostname, OS build, ...). ``fingerprint`` is a short hash
    of ``comparable``.
    """

    SCHEMA_NAME: ClassVar[str] = "environment"

    fingerprint: str = field(
        metadata=spec(
            pattern="^[0-9a-f]{12}$",
            # It names a directory of the baseline archive: one safe path component.
            read_pattern="^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$",
            description="perfguard writes 12 hex digits; a reader accepts any one safe path "
            "component (x-read-pattern: it names a directory of the baseline archive)",
        )
    )
    comparable: dict[str, str] = field(default_factory=dict)
    recorded: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, comparable: Mapping[str, str], recorded: Mapping[str, str] | None = None
    ) -> Environment:
        """The environment of these fields, its fingerprint computed from them."""
        return cls(fingerprint(comparable), dict(comparable), dict(recorded or {}))

    def mismatch(self) -> str | None:
        """Why this stored environment cannot be trusted, or None: a fingerprint that is
        not its ``comparable`` fields' hash means the fields (or it) were edited, and
        gating against it would compare runs of different machines as alike."""
        computed = fingerprint(self.comparable)
        if computed == self.fingerprint:
            return None
        return (
            f"environment fingerprint {self.fingerprint!r} is not the hash of its "
            f"comparable fields ({computed!r}): they were edited after it was written"
        )


@dataclass(frozen=True)
class ScenarioResult:
    """Everything measured for one scenario cell.

    On any ``status`` but ``passed`` the figures may be absent and ``message`` says
    why. A cell's result starts from :meth:`for_cell`; the typed parts are
    ``runtime`` (:class:`~perfguard.core.figures.RuntimeInfo`), ``accuracy``
    (:class:`~perfguard.core.accuracyfigures.AccuracyFigures`) and ``load``
    (:class:`~perfguard.core.loadfigures.LoadFigures`: a cell measured under
    concurrent load, whose ``latency_ns``/``samples_ns`` then hold the corrected
    per-request latencies).
    """

    id: str
    suite: str
    name: str
    backend: str
    device: str
    precision: str
    status: Status = Status.PASSED
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
    runtime: RuntimeInfo = field(default_factory=RuntimeInfo)
    # Median time of the machine-speed canary measured beside this scenario (ns);
    # the ratio of two runs' canaries normalises their latencies for host slow spells.
    canary_ns: float | None = None
    peak_memory_mib: float | None = None
    # Peak device memory allocated by the runtime during the cell (torch on CUDA:
    # torch.cuda.max_memory_allocated after a reset); None where not measured.
    gpu_peak_memory_mib: float | None = None
    accuracy: AccuracyFigures | None = None
    # Outputs of the first few accuracy inputs, archived with a baseline so the next
    # commit can be checked against them: {output: perfguard.core.codec.encode_array(...)}.
    golden_outputs: dict[str, dict[str, JSON]] | None = None
    load: LoadFigures | None = None
    tags: tuple[str, ...] = ()
    samples_ns: tuple[int, ...] = ()
    # Everything the cell took in its run (model open, warm-up, measurement, rounds,
    # A/B pairs, load levels): the cost a shard plan balances (perfguard.shard.plan).
    wall_ns: int | None = None
    # Where the time went (perfguard.core.profile): taken after the timed measurement
    # for a cell with `profile: true`, `--perfguard-profile`, or one that regressed.
    profile: OperatorProfile | None = None

    def __post_init__(self) -> None:
        # Callers may pass the word itself ("skipped"); the record always holds the enum.
        object.__setattr__(self, "status", Status(self.status))

    @classmethod
    def for_cell(
        cls,
        scenario: Scenario,
        rootdir: Path,
        *,
        batch_size: int = 1,
        status: Status = Status.PASSED,
        message: str | None = None,
    ) -> ScenarioResult:
        """The result naming ``scenario``'s cell, before any figure is filled in: the
        one way a measured, unmeasured or A/B cell's result starts."""
        return cls(
            id=scenario.scenario_id(rootdir),
            suite=display_path(scenario.suite, rootdir),
            name=scenario.item_name,
            backend=scenario.backend,
            device=scenario.device,
            precision=scenario.precision,
            status=status,
            message=message,
            batch_size=batch_size,
            threads=scenario.threads,
            tags=scenario.tags,
        )

    @property
    def passed(self) -> bool:
        return self.status == Status.PASSED

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            data[f.name] = value.to_dict() if hasattr(value, "to_dict") else value
        data["status"] = self.status.value
        data["golden_outputs"] = (
            {k: dict(v) for k, v in self.golden_outputs.items()}
            if self.golden_outputs is not None
            else None
        )
        data["tags"] = list(self.tags)
        data["samples_ns"] = list(self.samples_ns)
        # Optional keys: a file written before they existed encodes to its own bytes.
        for optional in ("wall_ns", "profile"):
            if data[optional] is None:
                del data[optional]
        return data

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], *, source: str = "<results>", path: str = "$"
    ) -> ScenarioResult:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["status"] = Status(kwargs.get("status", Status.PASSED))
        if kwargs.get("latency_ns") is not None:
            kwargs["latency_ns"] = LatencySummary.from_dict(
                kwargs["latency_ns"], source=source, path=f"{path}.latency_ns"
            )
        kwargs["runtime"] = RuntimeInfo.from_dict(kwargs.get("runtime") or {})
        if kwargs.get("accuracy") is not None:
            kwargs["accuracy"] = AccuracyFigures.from_dict(kwargs["accuracy"])
        if kwargs.get("load") is not None:
            kwargs["load"] = LoadFigures.from_dict(
                kwargs["load"], source=source, path=f"{path}.load"
            )
        if kwargs.get("profile") is not None:
            kwargs["profile"] = OperatorProfile.from_dict(kwargs["profile"], source=source)
        kwargs["tags"] = tuple(kwargs.get("tags", ()))
        kwargs["samples_ns"] = tuple(int(s) for s in kwargs.get("samples_ns", ()))
        return cls(**kwargs)


#: ``RunResult.mode`` values: how a run's figures were measured.
RUN_MODES: tuple[str, ...] = ("plain", "ab")


@dataclass(frozen=True)
class RunResult:
    """One pytest session's results: commit, environment and every scenario."""

    commit: CommitInfo
    environment: Environment
    scenarios: tuple[ScenarioResult, ...]
    created_at: str  # ISO 8601, UTC
    perfguard_version: str
    schema_version: int = SCHEMA_VERSION
    #: How the figures were measured: ``plain`` (one revision, as archived baselines
    #: are) or ``ab`` (same-run A/B: interleaved with the base revision, so slower
    #: than a plain run and judged only against that base, never an archived baseline).
    mode: str = "plain"

    def __post_init__(self) -> None:
        if self.mode not in RUN_MODES:
            raise ValueError(f"run mode {self.mode!r}; expected one of {', '.join(RUN_MODES)}")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema_version": self.schema_version,
            "perfguard_version": self.perfguard_version,
            "created_at": self.created_at,
            "commit": self.commit.to_dict(),
            "environment": self.environment.to_dict(),
            "scenarios": [s.to_dict() for s in self.scenarios],
        }
        if self.mode != "plain":  # a plain run's file is as it always was
            data["mode"] = self.mode
        return data

    @staticmethod
    def check_version(data: Any, *, source: str = "<results>") -> None:
        """ResultsError unless ``data`` is a results document of this schema version."""
        version = data.get("schema_version") if isinstance(data, dict) else None
        check_schema_version(
            version,
            SCHEMA_VERSION,
            f"{source}: results",
            older_fix="re-create the file with this perfguard version",
        )

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], *, source: str = "<results>", verify: bool = True
    ) -> RunResult:
        """A stored run read back; ``verify``: refuse an environment whose fingerprint
        is not its fields' hash (a baseline file checks it itself, as corruption)."""
        cls.check_version(data, source=source)
        try:
            run = cls(
                schema_version=SCHEMA_VERSION,  # checked above
                perfguard_version=str(data.get("perfguard_version", "unknown")),
                created_at=str(data["created_at"]),
                commit=CommitInfo.from_dict(data["commit"], source=source, path="$.commit"),
                environment=Environment.from_dict(
                    data["environment"], source=source, path="$.environment"
                ),
                scenarios=tuple(
                    ScenarioResult.from_dict(s, source=source, path=f"$.scenarios[{i}]")
                    for i, s in enumerate(data["scenarios"])
                ),
                mode=str(data.get("mode", "plain")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ResultsError(
                f"{source}: results file is missing or has a malformed field ({exc!r})",
                expected="a results file written by perfguard",
                fix="re-create it with `pytest --perfguard`",
            ) from exc
        problem = run.environment.mismatch() if verify else None
        if problem:
            raise ResultsError(
                f"{source}: {problem}",
                expected="the fingerprint perfguard computed from environment.comparable",
                fix="re-create the file with `pytest --perfguard`; never edit its "
                "environment by hand",
            )
        return run
