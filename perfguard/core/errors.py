"""One exception tree for perfguard.

Every message says what was found, what was expected and how to fix it, and,
where the problem sits in a file, names the file and line. The pytest items
turn these into a clean failure text instead of a traceback from inside
perfguard.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Location:
    """A place in a user's file (1-based line; ``None`` when unknown)."""

    path: Path
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else str(self.path)


class PerfguardError(Exception):
    """Base of every error perfguard raises on purpose.

    ``problem`` says what was found, ``expected`` what would have been valid and
    ``fix`` what the user can do. ``str()`` joins them into one readable line.
    """

    def __init__(
        self,
        problem: str,
        *,
        expected: str | None = None,
        fix: str | None = None,
        location: Location | None = None,
    ) -> None:
        self.problem = problem
        self.expected = expected
        self.fix = fix
        self.location = location
        # Figures measured before the error (a ScenarioResult), kept in the results file.
        self.result: Any = None
        super().__init__(self.message)

    @property
    def message(self) -> str:
        text = f"{self.location}: {self.problem}" if self.location else self.problem
        if self.expected:
            text += f"; expected {self.expected}"
        if self.fix:
            text += f". Fix: {self.fix}"
        return text

    def __str__(self) -> str:
        return self.message


class SuiteError(PerfguardError):
    """A suite file is malformed, has an unknown key, a wrong type or value."""


class CellError(PerfguardError):
    """One matrix cell cannot run (unsupported combination); only that cell fails."""


class ModelError(PerfguardError):
    """A model cannot be built or loaded: bad factory, missing or invalid ONNX file."""


class ExportError(ModelError):
    """A factory's model cannot be exported to ONNX: the message names the operator or
    type that stopped the exporter and the exporter options that may get past it."""


class InputError(PerfguardError):
    """Inputs do not match the model (names, shapes, dtypes) or an inputs file is bad."""


class BackendUnavailable(PerfguardError):
    """The runtime a cell needs is not installed; the cell is skipped with the install hint."""


class ProviderFallbackError(PerfguardError):
    """A runtime ran on another device or execution provider than the one requested."""


class NonFiniteOutputError(PerfguardError):
    """The model returned NaN or Inf."""


class ResultsError(PerfguardError):
    """A results or baseline file is corrupt, truncated or of an unknown schema version."""


def check_schema_version(
    found: object,
    supported: int,
    what: str,
    *,
    older_fix: str,
    location: Location | None = None,
) -> None:
    """Raise ResultsError unless a file's ``schema_version`` is ``supported``: every file
    perfguard reads says the same about a version it cannot read, and whose fix it is
    (a newer perfguard wrote it: upgrade; an older one: ``older_fix``)."""
    if found == supported and type(found) is int:
        return
    newer = type(found) is int and found > supported
    raise ResultsError(
        f"{what} schema_version {found!r} is not supported",
        expected=f"schema_version {supported}",
        fix="it was written by a newer perfguard: upgrade perfguard to read it"
        if newer
        else f"it was written by an older perfguard (or by hand): {older_fix}",
        location=location,
    )


class ShardError(PerfguardError):
    """A shard setting, plan or shard output that cannot be used (``perfguard.shard``)."""


class GitError(PerfguardError):
    """git could not answer a question perfguard needs (no commits, shallow clone, ...)."""


class GateFailure(PerfguardError):
    """A gated figure regressed beyond its limit."""


class InconclusiveFailure(PerfguardError):
    """A cell's figures stayed untrustworthy (``invalid``) after waiting for quiet and
    re-measuring, and ``--perfguard-inconclusive=fail`` asks for that to fail its item.

    ``problem`` may hold several lines (the reasons, the rounds tried); the fix then
    follows on a line of its own.
    """

    @property
    def message(self) -> str:
        if "\n" not in self.problem or not self.fix:
            return super().message
        return f"{self.problem}\nFix: {self.fix}"


class StoreError(PerfguardError):
    """The baseline archive cannot do what was asked (run without a commit, bad name, lock)."""


class AccuracyError(PerfguardError):
    """Accuracy checks cannot run on their input (shapes, outputs, labels, NaN reference)."""


class AccuracyFailure(GateFailure):
    """An accuracy check against the reference or the baseline fell outside its limit."""


class ServerError(PerfguardError):
    """A served model's server failed: it did not start or get ready, it exited, or a
    request got an error (HTTP status, a timeout, a cut stream, a wrong token count)."""


class LoadError(PerfguardError):
    """A cell under concurrent load failed: errors per request, a hang, a batch shape."""


class RunInvalid(PerfguardError):
    """The measurement cannot be trusted (the load generator fell behind): reported,
    not gated, never a baseline. The item is skipped with the reason."""


class CellNotFound(SuiteError):
    """A suite holds no cell of the requested item name (a worker's ``open``)."""


class WorkerError(PerfguardError):
    """A worker process (``perfguard.worker``) failed; base of the worker failures.

    ``worker`` names it (``"base"``, ``"head"``, ...); ``tail`` is the last lines
    of its stderr (or of a traceback inside it), appended to the message under
    ``tail_label`` so the cause is in the failure text, not only in a log file.
    """

    def __init__(
        self,
        problem: str,
        *,
        expected: str | None = None,
        fix: str | None = None,
        location: Location | None = None,
        worker: str = "",
        tail: str = "",
        tail_label: str = "",
    ) -> None:
        self.worker = worker
        self.tail = tail
        self.tail_label = tail_label
        super().__init__(problem, expected=expected, fix=fix, location=location)

    @property
    def message(self) -> str:
        text = super().message
        if self.tail_label and self.tail.strip():
            text += f"\n--- {self.tail_label} of worker {self.worker!r} (last lines) ---\n"
            text += self.tail.rstrip("\n")
        elif self.tail_label == "stderr":
            text += f" (worker {self.worker!r} wrote nothing to stderr)"
        return text


class WorkerCrashed(WorkerError):
    """The worker process exited or was killed by a signal before answering."""


class WorkerTimeout(WorkerError):
    """The worker gave no reply within the request's timeout; it has been killed."""


class ProtocolError(WorkerError):
    """A line on the worker pipe is not a valid protocol message (not JSON, another
    protocol version, another request's id), or a request broke the protocol."""


class WorkerRequestFailed(WorkerError):
    """Code inside the worker (the user's model) raised an exception that is not a
    ``PerfguardError``; ``remote_type`` names it and ``tail`` holds its traceback."""

    def __init__(self, problem: str, *, remote_type: str, **kwargs: Any) -> None:
        self.remote_type = remote_type
        super().__init__(problem, **kwargs)


class PerfguardWarning(UserWarning):
    """Base of the warnings perfguard emits (filter them with ``-W``/``filterwarnings``)."""


class InconclusiveWarning(PerfguardWarning):
    """A cell stayed ``invalid`` after its rounds and ``--perfguard-inconclusive=warn``
    lets its item pass: the figures were reported, not gated."""


class WatchdogTimeout(PerfguardError):
    """An in-process cell's model open or warm-up ran past the open timeout
    (``--perfguard-open-timeout``); the watchdog dumped the stacks and stopped it."""


class InternalError(PerfguardError):
    """perfguard itself failed: an exception raised inside perfguard's own code (not in
    the user's model, factory or suite). A bug in perfguard, never the user's input;
    ``perfguard.core.blame`` decides the owner and shows perfguard's frames."""


class HostMemoryError(PerfguardError):
    """The host ran out of memory (``MemoryError``) while a cell was built or measured:
    neither the model's signature nor perfguard's fault, but the cell's size."""


#: The fix of every ``InternalError``: nothing the user changes would help.
REPORT_FIX = "this is a bug in perfguard; please report it with the text below"
