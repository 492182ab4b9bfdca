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
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from perfguard.core.errors import ResultsError, check_schema_version
from perfguard.core.paths import display_path
from perfguard.core.scenario import Scenario
from perfguard.records.accuracyfigures import AccuracyFigures
from perfguard.records.declare import TAMPERED_FIX, Codec, Record, decode, spec
from perfguard.records.figures import JSON, LatencySummary, RuntimeInfo
from perfguard.records.loadfigures import LoadFigures
from perfguard.records.opprofile import PROFILE_CODEC, OperatorProfile
from perfguard.records.tokenfigures import TokenFigures

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


def _object(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"a JSON object, not {type(value).__name__}")
    return value


# Hand-written codecs, kept where the JSON form is more than a record's shape:
# runtime is an open object (the backend's own facts first, perfguard's keys after,
# each only when set: RuntimeInfo.to_dict/from_dict); accuracy's figures hold
# non-finite values written as null and per-metric tables (AccuracyFigures); a profile
# is stored as rows of a table under its column names (profile.PROFILE_CODEC).
_RUNTIME = Codec(
    encode=lambda runtime: runtime.to_dict(),
    decode=lambda value, source, path: RuntimeInfo.from_dict(_object(value)),
    schema={"type": "object", "description": "Open: providers, library versions, options."},
    expected="object",
)
_ACCURACY = Codec(
    encode=lambda accuracy: accuracy.to_dict(),
    decode=lambda value, source, path: AccuracyFigures.from_dict(_object(value)),
    schema={
        "type": ["object", "null"],
        "description": "accuracy figures and checks against the reference cell and the baseline",
    },
    expected="accuracy figures written by perfguard",
)
_NON_NEGATIVE = spec(minimum=0)


@dataclass(frozen=True)
class ScenarioResult(Record):
    """Everything measured for one scenario cell.

    On any ``status`` but ``passed`` the figures may be absent and ``message`` says
    why. A cell's result starts from :meth:`for_cell`; the typed parts are
    ``runtime`` (:class:`~perfguard.records.figures.RuntimeInfo`), ``accuracy``
    (:class:`~perfguard.records.accuracyfigures.AccuracyFigures`) and ``load``
    (:class:`~perfguard.records.loadfigures.LoadFigures`: a cell measured under
    concurrent load, whose ``latency_ns``/``samples_ns`` then hold the corrected
    per-request latencies).
    """

    SCHEMA_NAME: ClassVar[str] = "scenario"

    id: str = field(metadata=spec(min_length=1))
    suite: str
    name: str
    backend: str
    device: str
    precision: str
    status: Status = Status.PASSED
    message: str | None = None
    batch_size: int = field(default=1, metadata=spec(minimum=1))
    threads: int | None = field(
        default=None, metadata=spec(minimum=0, description="null or 0: the runtime's default")
    )
    latency_ns: LatencySummary | None = None
    # samples per second, counting the batch
    throughput: float | None = field(
        default=None, metadata=spec(minimum=0, description="samples per second")
    )
    cold_start_ns: int | None = field(default=None, metadata=_NON_NEGATIVE)
    warmup_iterations: int = field(default=0, metadata=_NON_NEGATIVE)
    warmup_ns: int = field(default=0, metadata=_NON_NEGATIVE)
    stable: bool = True
    # median(last third) / median(first third)
    stability_ratio: float | None = field(default=None, metadata=_NON_NEGATIVE)
    runtime: RuntimeInfo = field(default_factory=RuntimeInfo, metadata=spec(codec=_RUNTIME))
    # Median time of the machine-speed canary measured beside this scenario (ns);
    # the ratio of two runs' canaries normalises their latencies for host slow spells.
    canary_ns: float | None = field(
        default=None,
        metadata=spec(
            minimum=0,
            description="median time of the machine-speed canary measured beside the scenario",
        ),
    )
    peak_memory_mib: float | None = field(default=None, metadata=_NON_NEGATIVE)
    # Peak device memory allocated by the runtime during the cell (torch on CUDA:
    # torch.cuda.max_memory_allocated after a reset); None where not measured.
    gpu_peak_memory_mib: float | None = field(
        default=None,
        metadata=spec(minimum=0, description="peak device memory allocated during the cell (MiB)"),
    )
    accuracy: AccuracyFigures | None = field(default=None, metadata=spec(codec=_ACCURACY))
    # Outputs of the first few accuracy inputs, archived with a baseline so the next
    # commit can be checked against them: {output: perfguard.records.arrays.encode_array(...)}.
    golden_outputs: dict[str, dict[str, JSON]] | None = field(
        default=None,
        metadata=spec(
            description="encoded outputs of the first accuracy inputs, archived with baselines"
        ),
    )
    load: LoadFigures | None = None
    tags: tuple[str, ...] = ()
    samples_ns: tuple[int, ...] = field(default=(), metadata=_NON_NEGATIVE)
    # Everything the cell took in its run (model open, warm-up, measurement, rounds,
    # A/B pairs, load levels): the cost a shard plan balances (perfguard.shard.plan).
    wall_ns: int | None = field(
        default=None,
        metadata=spec(
            omit="none",  # absent from older files: they encode to their own bytes
            minimum=0,
            description="The cell's wall time in its run (model open, warm-up, measurement, "
            "confirmation rounds, A/B pairs, load levels), in ns: the cost a shard plan "
            "balances. Absent from older files.",
        ),
    )
    # Where the time went (perfguard.records.opprofile): taken after the timed measurement
    # for a cell with `profile: true`, `--perfguard-profile`, or one that regressed.
    profile: OperatorProfile | None = field(
        default=None, metadata=spec(omit="none", codec=PROFILE_CODEC)
    )
    # A generative cell's token-level timing (perfguard.records.tokenfigures); its
    # samples_ns are then each request's end-to-end time.
    tokens: TokenFigures | None = field(default=None, metadata=spec(omit="none"))

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


#: ``RunResult.mode`` values: how a run's figures were measured.
RUN_MODES: tuple[str, ...] = ("plain", "ab")


@dataclass(frozen=True)
class RunResult(Record):
    """One pytest session's results: commit, environment and every scenario."""

    SCHEMA_NAME: ClassVar[str] = "run"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "One pytest session's results, as written to reports/<commit12>/results.json by "
        "RunResult.to_dict(). Generated from the record declarations "
        "(perfguard.records.declare); closed objects, only `runtime` is open."
    )
    KEY_ORDER: ClassVar[tuple[str, ...] | None] = (
        "schema_version",
        "perfguard_version",
        "created_at",
        "commit",
        "environment",
        "scenarios",
        "mode",
    )

    commit: CommitInfo
    environment: Environment
    scenarios: tuple[ScenarioResult, ...]
    created_at: str = field(metadata=spec(min_length=1, description="ISO 8601, UTC"))
    perfguard_version: str = field(metadata=spec(min_length=1))
    schema_version: int = field(default=SCHEMA_VERSION, metadata=spec(values=(SCHEMA_VERSION,)))
    #: How the figures were measured: ``plain`` (one revision, as archived baselines
    #: are) or ``ab`` (same-run A/B: interleaved with the base revision, so slower
    #: than a plain run and judged only against that base, never an archived baseline).
    mode: str = field(
        default="plain",
        metadata=spec(
            omit="default",  # a plain run's file is as it always was
            values=RUN_MODES,
            description="How the figures were measured: plain (absent from older files) or "
            "ab (same-run A/B, interleaved with the base revision; never judged against an "
            "archived baseline).",
        ),
    )

    def __post_init__(self) -> None:
        if self.mode not in RUN_MODES:
            raise ValueError(f"run mode {self.mode!r}; expected one of {', '.join(RUN_MODES)}")

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

    # Hand-written beyond the shape: the version is checked first (a newer perfguard's
    # file says "upgrade", not "bad value"), an older file without perfguard_version
    # reads as "unknown", and the environment's fingerprint is verified.
    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        source: str = "<results>",
        path: str = "$",
        what: str = "results file",
        fix: str = TAMPERED_FIX,
        verify: bool = True,
    ) -> RunResult:
        """A stored run read back, every value checked as it is read; ``verify``: refuse
        an environment whose fingerprint is not its fields' hash (a baseline file checks
        it itself, as corruption)."""
        cls.check_version(data, source=source)
        data = {"perfguard_version": "unknown", **data}
        try:
            run = decode(cls, data, source=source, path=path, what=what, fix=fix)
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
