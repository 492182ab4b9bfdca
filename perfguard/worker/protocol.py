"""The worker protocol: newline-delimited JSON objects on a pipe, version 1.

Every message is one JSON object on one line (UTF-8, no embedded newlines)
carrying ``"v": PROTOCOL_VERSION``. Plain data only: never a pickle, so a
worker running another revision's code (or another Python) can never hand the
parent an object of its own classes.

Requests (parent -> worker)::

    {"v": 1, "id": 7, "op": "measure", "k": 1}

Replies (worker -> parent), one per request, with the request's ``id``::

    {"v": 1, "id": 7, "ok": true, "samples_ns": [12345]}
    {"v": 1, "id": 7, "ok": false,
     "error": {"type": "ModelError", "message": "...", "traceback_tail": "...",
               "problem": "...", "expected": "...", "fix": "...",
               "location": {"path": "...", "line": 3}}}

``type`` is the exception's class name; the structured fields after
``traceback_tail`` are present only for a ``PerfguardError`` (so the parent can
rebuild it exactly). A failure with a traceback worth showing (the model's exception,
perfguard's own) also has ``trace`` (the short form, :mod:`perfguard.core.blame`) and
``traceback`` (every frame); ``cell`` is the open cell's pytest node id and, for the
model's own exception, ``location`` its suite line. A worker of an older perfguard
(same-run A/B's base revision) sends none of these; the parent reads both.
Non-finite floats travel as Python's ``json`` writes them (``NaN``, ``Infinity``):
both ends are Python. Ops: ``hello``, ``open``, ``warmup``, ``measure``,
``loop``, ``check``, ``profile``, ``close``, ``bye``, and for a cell under ``load:``
``load_warmup``, ``load_level`` (one short level; same-run A/B alternates them between
two slots) and ``load_interleaved`` (one short level shared by two slots, their requests
alternating on every client). A worker of an older perfguard answers ``profile`` with an
unknown-op error. See ``perfguard.worker.serve``.
"""

from __future__ import annotations

import json
import math
import os
import select
import shlex
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfguard import __version__
from perfguard.core import errors
from perfguard.core.blame import HOST_MEMORY_FIX, RemoteTraceback
from perfguard.core.errors import (
    HostMemoryError,
    InternalError,
    Location,
    PerfguardError,
    ProtocolError,
    WorkerCrashed,
    WorkerError,
    WorkerRequestFailed,
    WorkerTimeout,
)

__all__ = [
    "OPS",
    "LineReader",
    "MAIN_SLOT",
    "PROTOCOL_VERSION",
    "QUOTE_CHARS",
    "check_hello",
    "check_reply",
    "crashed_error",
    "decode",
    "describe_exit",
    "encode",
    "error_fields",
    "error_from_reply",
    "quote",
    "speaks_our_version",
    "timeout_error",
]

PROTOCOL_VERSION = 1
#: The slot a request's cell is in when it names none (A/B opens slots `a` and `b`).
MAIN_SLOT = "main"

#: Every op a version-1 worker answers.
OPS = (
    "hello", "open", "warmup", "measure", "pairs", "loop", "result", "check", "profile",
    "close", "bye", "load_warmup", "load_level", "load_interleaved",
)  # fmt: skip

#: How much of an offending line an error message quotes.
QUOTE_CHARS = 200
#: A reply longer than this (without its newline) is garbage, not a reply.
MAX_LINE_BYTES = 256 * 1024 * 1024
_IDLE_CHECK_S = 1.0  # while waiting, how often to look whether the process still lives


def _plain(value: Any) -> Any:
    """What ``json`` cannot encode by itself, as plain data (paths, numpy scalars)."""
    if isinstance(value, Path):
        return str(value)
    item = getattr(value, "item", None)  # numpy scalars and 0-d arrays
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError):
            pass
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        return tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, default=_plain)


def encode(message: dict[str, Any]) -> bytes:
    """One message as a protocol line (``ensure_ascii``: never a raw newline inside)."""
    return (_encoder.encode(message) + "\n").encode("ascii")


def quote(line: bytes | str) -> str:
    """The first ``QUOTE_CHARS`` characters of an offending line, as a repr."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.rstrip("\r\n")
    cut = text[:QUOTE_CHARS]
    more = f" ... ({len(text)} characters)" if len(text) > QUOTE_CHARS else ""
    return repr(cut) + more


def decode(line: bytes, *, who: str, worker: str = "") -> dict[str, Any]:
    """Parse one line into a message of this protocol version, or raise ``ProtocolError``.

    ``who`` says where the line came from, for the message (``"worker 'base'"``).
    """
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError(
            f"{who} sent a line that is not JSON: {quote(line)}",
            expected=f"one JSON object per line (perfguard worker protocol v{PROTOCOL_VERSION})",
            fix="model code must not write to the protocol pipe; if this is not a "
            "perfguard worker, check the command that started it",
            worker=worker,
        ) from None
    if not isinstance(message, dict):
        raise ProtocolError(
            f"{who} sent a JSON {type(message).__name__}, not an object: {quote(line)}",
            expected="a JSON object with `v`",
            worker=worker,
        )
    version = message.get("v")
    if not speaks_our_version(message):
        raise ProtocolError(
            f"{who} speaks worker protocol version {version!r}, this perfguard speaks "
            f"version {PROTOCOL_VERSION}: {quote(line)}",
            expected=f'"v": {PROTOCOL_VERSION} in every message',
            fix="run both sides with perfguard versions of the same worker protocol",
            worker=worker,
        )
    return message


def speaks_our_version(message: dict[str, Any]) -> bool:
    """Whether a message (request or reply) carries this protocol's ``"v"``: the one
    version check, for the parent reading replies and for the worker reading requests."""
    version = message.get("v")
    return version == PROTOCOL_VERSION and not isinstance(version, bool)


def check_reply(message: dict[str, Any], expected_id: int, line: bytes, worker: str) -> None:
    """Raise ``ProtocolError`` unless ``message`` is the reply to request ``expected_id``."""
    who = f"worker {worker!r}"
    got = message.get("id")
    if got != expected_id or isinstance(got, bool):
        raise ProtocolError(
            f"{who} answered request id {got!r} while request {expected_id} was waiting: "
            f"{quote(line)}",
            expected=f"the reply to request {expected_id}, in order",
            fix="a worker answers each request once, in order; this one is out of step",
            worker=worker,
        )
    ok = message.get("ok")
    if not isinstance(ok, bool) or (not ok and not isinstance(message.get("error"), dict)):
        raise ProtocolError(
            f"{who} sent a reply without a boolean `ok` (or `ok: false` without an "
            f"`error` object): {quote(line)}",
            expected='"ok": true, or "ok": false with "error": {"type", "message"}',
            worker=worker,
        )


def check_hello(hello: dict[str, Any], who: str, worker: str) -> None:
    """Raise ``ProtocolError`` naming both versions unless the worker speaks ours."""
    if hello.get("protocol") != PROTOCOL_VERSION:
        raise ProtocolError(
            f"{who} runs perfguard {hello.get('perfguard')!r} and speaks worker protocol "
            f"{hello.get('protocol')!r}; this perfguard {__version__} speaks protocol "
            f"{PROTOCOL_VERSION}",
            expected=f"protocol {PROTOCOL_VERSION} on both sides",
            fix="run the worker with a perfguard of the same worker protocol",
            worker=worker,
        )


class LineReader:
    """Protocol lines from a pipe, each awaited with a deadline (``poll``, no thread)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self._poll = select.poll()  # leaner per wait than a `selectors` wrapper
        self._poll.register(fd, select.POLLIN)

    def read_line(self, deadline: float | None, alive: Callable[[], bool], who: str) -> bytes:
        """The next line, or ``b""`` once the pipe has ended or ``alive()`` is false.

        ``alive`` is asked while nothing arrives (a child of the worker may hold
        the pipe open after the worker died); ``TimeoutError`` at ``deadline``
        (``time.monotonic``); ``ProtocolError`` for an endless line.
        """
        buffer = self.buffer
        while True:
            end = buffer.find(b"\n")
            if end >= 0:
                line = bytes(buffer[: end + 1])
                del buffer[: end + 1]
                return line
            if len(buffer) > MAX_LINE_BYTES:
                head = quote(bytes(buffer[:QUOTE_CHARS]))
                raise ProtocolError(
                    f"{who} sent {len(buffer)} bytes without a newline: {head}",
                    expected="one JSON object per line",
                )
            wait = _IDLE_CHECK_S
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                wait = min(left, wait)
            if not self._poll.poll(math.ceil(wait * 1000)):
                if not alive():
                    return b""
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return b""
            buffer += chunk

    def close(self) -> None:
        self._poll.unregister(self.fd)


def error_fields(exc: BaseException, traceback_tail: str) -> dict[str, Any]:
    """The ``error`` object of a failed reply for ``exc``."""
    fields: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback_tail": traceback_tail,
    }
    if isinstance(exc, PerfguardError):
        fields["problem"] = exc.problem
        fields["expected"] = exc.expected
        fields["fix"] = exc.fix
        if exc.location is not None:
            fields["location"] = {"path": str(exc.location.path), "line": exc.location.line}
    return fields


# --- failures as exceptions (the parent's side) ---------------------------------


def describe_exit(returncode: int) -> str:
    """``exit status 3`` / ``killed by signal SIGSEGV (11)``."""
    if returncode >= 0:
        return f"exit status {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "signal"
    text = f"killed by signal {name} ({number})"
    if number == signal.SIGKILL:
        text += " (outside perfguard: often the kernel's out-of-memory killer)"
    return text


def crashed_error(
    who: str, worker: str, returncode: int, op: str, start_fix: str, tail: str
) -> WorkerCrashed:
    """The worker ended (exit or signal) while ``op`` waited; ``start_fix`` for ``hello``."""
    verb = "died with" if returncode >= 0 else "was"
    when = "while starting" if op == "hello" else f"while answering `{op}`"
    fix = (
        "see the worker's stderr below: a crash in native code, os._exit or sys.exit "
        "in the model, or the out-of-memory killer ends the worker"
    )
    return WorkerCrashed(
        f"{who} {verb} {describe_exit(returncode)} {when}",
        expected=f"a reply to `{op}`",
        fix=start_fix if op == "hello" else fix,
        worker=worker,
        tail=tail,
        tail_label="stderr",
    )


def timeout_error(
    who: str, worker: str, op: str, timeout_s: float | None, tail: str
) -> WorkerTimeout:
    return WorkerTimeout(
        f"{who} gave no reply to `{op}` within {timeout_s:g} s; it was killed",
        expected=f"a reply to `{op}` within {timeout_s:g} s",
        fix="find where the model hangs (the worker's stacks and stderr are below), "
        "or raise the timeout for slow models",
        worker=worker,
        tail=tail,
        tail_label="stderr",
    )


def error_from_reply(error: dict[str, Any], op: str, who: str, worker: str) -> PerfguardError:
    """An ``ok: false`` reply's ``error`` as the exception it stands for.

    A ``PerfguardError`` class of the same name is rebuilt from the structured
    fields (problem, expected, fix, location); any other type (the user's
    model raised it) becomes ``WorkerRequestFailed`` with the worker's traceback:
    its short form (``trace``: the model's frames, as in-process) where the worker
    sent one. Every frame (``traceback``) becomes the rebuilt error's cause, a
    ``RemoteTraceback`` (what ``--tb=long`` prints).
    """
    type_name = str(error.get("type", "Exception"))
    message = str(error.get("message", ""))
    trace = str(error.get("trace") or "")
    full = str(error.get("traceback") or "")
    cell = error.get("cell")
    debug = _debug_in_process(cell if isinstance(cell, str) else None)
    where = error.get("location")
    location = None
    if isinstance(where, dict) and where.get("path"):
        line = where.get("line")
        location = Location(Path(str(where["path"])), line if isinstance(line, int) else None)
    cls = getattr(errors, type_name, None)
    rebuilt: PerfguardError
    if isinstance(cls, type) and issubclass(cls, PerfguardError) and cls is not WorkerRequestFailed:
        kwargs: dict[str, Any] = {"worker": worker} if issubclass(cls, WorkerError) else {}
        fix = _opt_str(error.get("fix"))
        if trace and not issubclass(cls, InternalError):  # the model's exception
            fix = f"{fix}; {debug}" if fix else debug
        rebuilt = cls(
            f"{error.get('problem') or message} (in worker {worker!r})",
            expected=_opt_str(error.get("expected")),
            fix=fix,
            location=location,
            **kwargs,
        )
        if trace:
            rebuilt.__cause__ = RemoteTraceback(trace, full)
        return rebuilt
    if type_name == "MemoryError":  # the host's memory, not the model's signature
        return HostMemoryError(
            f"out of host memory in {who} while answering `{op}` ({message or type_name})",
            expected="the model, its inputs and the cells running at once to fit in memory",
            fix=HOST_MEMORY_FIX,
            location=location,
        )
    rebuilt = WorkerRequestFailed(
        f"{who}: `{op}` raised {type_name}: {message}",
        remote_type=type_name,
        expected=f"`{op}` to complete",
        fix=f"the traceback below is from inside the worker; {debug}",
        location=location,
        worker=worker,
        tail=trace or str(error.get("traceback_tail", "")),
        tail_label="traceback",
    )
    if full:
        rebuilt.__cause__ = RemoteTraceback("", full)
    return rebuilt


def _debug_in_process(cell: str | None) -> str:
    """How to run a worker's cell (its pytest node id) in the test process, where a
    debugger reaches it."""
    node = shlex.quote(cell) if cell else "<the cell's node id>"
    return (
        "to debug it in this process, run the cell alone without --perfguard-isolate "
        f"and --perfguard-ab: `pytest --perfguard {node} --pdb`"
    )


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
