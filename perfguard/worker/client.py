"""The parent's side: start a worker process, send requests, never hang on it.

``WorkerProcess`` spawns ``python -m perfguard.worker`` with pipes for the
protocol and its stderr in a temporary file, whose last lines go into every
failure. Replies are awaited with ``poll`` on the pipe, so a timeout holds
whatever the worker does; a worker that dies is noticed at once (end of file
on the pipe), a hanging one is killed at the timeout, and a garbled pipe is a
``ProtocolError``. After any of these the worker is gone and reaped; further
requests raise at once.

Each worker leads a process group of its own (``_OWN_GROUP``), so whatever a
model starts inside it can be killed with it: every way out (``close``, a
crash, a timeout, a garbled pipe) ends by killing the whole group, and while
the worker lives its group is registered with :mod:`perfguard.core.signals`,
which kills it on SIGTERM, SIGINT and at interpreter exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from perfguard.core.errors import PerfguardError, ProtocolError, WorkerError
from perfguard.core.policy import OPEN_TIMEOUT_S
from perfguard.core.signals import (
    LIFELINE_ENV,
    kill_group,
    open_lifeline,
    track_group,
    untrack_group,
)
from perfguard.core.text import plain
from perfguard.records.opprofile import OperatorProfile
from perfguard.worker.protocol import (
    PROTOCOL_VERSION,
    LineReader,
    check_hello,
    check_reply,
    crashed_error,
    decode,
    encode,
    error_from_reply,
    timeout_error,
)

__all__ = ["DEFAULT_TIMEOUT_S", "OPEN_TIMEOUT_S", "WorkerProcess"]

#: A request's default reply timeout (``open`` may export and quantize a model).
DEFAULT_TIMEOUT_S = OPEN_TIMEOUT_S
#: A process group of its own: killed as one with whatever the model starts. On
#: Python 3.11+ only the group changes (``setpgid``); a new session (``setsid``) would
#: also move the worker into a scheduling autogroup of its own on Linux, so that it
#: would compete for the CPUs unlike an in-process cell.
_OWN_GROUP: dict[str, Any] = (
    {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
)
_STDERR_LINES = 20
_STDERR_BYTES = 64 * 1024
_LINE_CHARS = 300  # a stderr line longer than this is cut in the tail
_DUMP_WAIT_S = 0.5  # after a timeout, how long the worker gets to dump its stacks


class WorkerProcess:
    """One worker process, as a context manager (``start`` on enter, ``close`` on exit).

    ``env`` is the worker's whole environment (default: this process's);
    ``pythonpath_first`` goes first on its ``PYTHONPATH`` (a git worktree whose
    code it should run); ``command`` replaces ``[python, "-m", "perfguard.worker"]``.
    ``name`` appears in every error ("worker 'base' (pid 123) died ...").
    """

    def __init__(
        self,
        python: str = sys.executable,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        pythonpath_first: Path | None = None,
        name: str = "worker",
        startup_timeout_s: float = 60.0,
        command: Sequence[str] | None = None,
    ) -> None:
        self.python = python
        self.cwd = cwd
        self.env = env
        self.pythonpath_first = pythonpath_first
        self.name = name
        self.startup_timeout_s = startup_timeout_s
        self.command: list[str] = (
            list(command) if command is not None else [python, "-m", "perfguard.worker"]
        )
        #: The ``hello`` reply once started: pid, python, perfguard, protocol, cwd, ...
        self.info: dict[str, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._final_tail = ""
        self._reader: LineReader | None = None
        self._in_fd = -1
        self._next_id = 0
        self._in_flight = False
        self._failure: WorkerError | None = None
        self._closed = False
        self._stopped = False
        # The write end of the worker's lifeline (signals.watch_parent): held, never
        # written, closed with the worker; the worker ends itself if this process dies.
        self._lifeline = -1

    # --- life cycle ----------------------------------------------------------

    def __enter__(self) -> WorkerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<WorkerProcess {self.name!r} pid={self.pid} returncode={self.poll()}>"

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self._proc

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def poll(self) -> int | None:
        """The exit status once the process has ended (and been reaped), else ``None``."""
        return self._proc.poll() if self._proc is not None else None

    def start(self) -> dict[str, Any]:
        """Spawn the worker and check its ``hello``; returns the ``hello`` reply."""
        if self._proc is not None or self._closed:
            raise WorkerError(
                f"worker {self.name!r} was already started",
                expected="one start() per WorkerProcess",
                fix="create a new WorkerProcess to start another worker",
                worker=self.name,
            )
        env = dict(os.environ if self.env is None else self.env)
        if self.pythonpath_first is not None:
            rest = env.get("PYTHONPATH", "")
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.pythonpath_first), rest) if p)
        # Closed in close(), which start() calls on every failure.
        self._stderr = tempfile.TemporaryFile(prefix=f"perfguard-worker-{self.name}-")  # noqa: SIM115
        lifeline = open_lifeline()
        if lifeline is not None:
            env[LIFELINE_ENV] = f"{lifeline[0]}:{os.getpid()}"
            self._lifeline = lifeline[1]
        try:
            self._proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=self.cwd,
                env=env,
                bufsize=0,
                close_fds=True,
                pass_fds=lifeline[:1] if lifeline is not None else (),
                **_OWN_GROUP,
            )
        except OSError as exc:
            self.close()
            raise WorkerError(
                f"cannot start worker {self.name!r} with {self.command!r}: {exc}",
                expected="an executable Python interpreter with perfguard importable",
                fix="check the interpreter path and the working directory",
                worker=self.name,
            ) from None
        finally:
            if lifeline is not None:
                os.close(lifeline[0])  # the worker's end: only the worker holds it now
        track_group(self._proc.pid, self.name)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in_fd = self._proc.stdin.fileno()
        self._reader = LineReader(self._proc.stdout.fileno())
        try:
            hello = self.request("hello", timeout_s=self.startup_timeout_s)
            try:
                check_hello(hello, self._who(), self.name)
            except ProtocolError as exc:
                raise self._broken(exc) from None
        except BaseException:
            self.close()
            raise
        self.info = hello
        return hello

    def close(self, timeout_s: float = 5.0) -> None:
        """Say ``bye`` (when idle and healthy), wait briefly, else kill; always reaps.

        Idempotent; the stderr tail stays readable afterwards.
        """
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        try:
            idle = self._failure is None and not self._in_flight
            if proc is not None and proc.poll() is None and idle:
                with contextlib.suppress(WorkerError):
                    self._request("bye", timeout_s)
            self._reap(timeout_s)
        finally:
            self._final_tail = self._stderr_text()
            if self._reader is not None:
                self._reader.close()
            for stream in (proc.stdin, proc.stdout) if proc is not None else ():
                if stream is not None:
                    stream.close()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
            if self._lifeline >= 0:
                os.close(self._lifeline)
                self._lifeline = -1

    def _reap(self, wait_s: float) -> None:
        """Give the worker ``wait_s`` to exit, then stop its whole group (``_stop``)."""
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s)
        self._stop()

    def _stop(self) -> None:
        """Kill the worker's process group (the worker, if still running, and every
        process a model started in it) and reap the worker; idempotent.

        After a worker that exited by itself has been reaped, its group lives on
        while a child of it does (and its id cannot be reused then); once empty,
        ``killpg`` finds nothing, which is no error.
        """
        proc = self._proc
        if proc is None or self._stopped:
            return
        kill_group(proc.pid)
        proc.wait()
        untrack_group(proc.pid)
        self._stopped = True  # the group id may belong to another process later

    def stderr_tail(self, lines: int = _STDERR_LINES) -> str:
        """The last ``lines`` lines the worker wrote to stderr (kept after ``close``).

        Made ``plain``: the tail goes into error messages that reach the terminal, CI
        logs and reports, and a model may print escape sequences or workflow commands.
        """
        tail = plain(self._stderr_text()).splitlines()[-lines:]
        return "\n".join(t if len(t) <= _LINE_CHARS else t[:_LINE_CHARS] + " ..." for t in tail)

    def _stderr_text(self) -> str:
        """The last 64 KiB of the worker's stderr."""
        if self._stderr is None:
            return self._final_tail
        fd = self._stderr.fileno()
        size = os.fstat(fd).st_size
        start = max(0, size - _STDERR_BYTES)
        data = os.pread(fd, size - start, start)  # pread: the worker's offset is untouched
        return data.decode("utf-8", "replace")

    # --- requests -------------------------------------------------------------

    def request(
        self, op: str, timeout_s: float | None = DEFAULT_TIMEOUT_S, **fields: Any
    ) -> dict[str, Any]:
        """Send one request and return its ``ok: true`` reply (``v``, ``id``, ``ok`` included).

        ``ok: false`` raises the worker's error as a ``PerfguardError`` subclass of
        the same name (``SuiteError``, ``ModelError``, ``CellNotFound``, ...), or
        ``WorkerRequestFailed`` for any other exception. ``timeout_s=None`` waits
        as long as the worker lives.
        """
        if self._closed:
            raise WorkerError(
                f"worker {self.name!r} is closed; cannot send `{op}`",
                expected="requests between start() and close()",
                worker=self.name,
            )
        return self._request(op, timeout_s, **fields)

    def _request(self, op: str, timeout_s: float | None, **fields: Any) -> dict[str, Any]:
        if self._failure is not None:
            raise self._still_failed(op)
        if self._proc is None:
            raise WorkerError(
                f"worker {self.name!r} was not started; cannot send `{op}`",
                expected="start() (or `with WorkerProcess(...)`) first",
                worker=self.name,
            )
        self._next_id += 1
        request_id = self._next_id
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._in_flight = True
        try:
            _write_all(
                self._in_fd, encode({"v": PROTOCOL_VERSION, "id": request_id, "op": op, **fields})
            )
        except OSError:  # BrokenPipeError: the worker is gone
            raise self._crashed(op) from None
        line = self._read_line(op, timeout_s, deadline)
        try:
            reply = decode(line, who=f"worker {self.name!r} (pid {self.pid})", worker=self.name)
            check_reply(reply, request_id, line, self.name)
        except ProtocolError as exc:
            raise self._broken(exc) from None
        self._in_flight = False
        if reply["ok"]:
            return reply
        raise self._remote_error(op, reply["error"])

    def _read_line(self, op: str, timeout_s: float | None, deadline: float | None) -> bytes:
        assert self._reader is not None
        try:
            line = self._reader.read_line(deadline, lambda: self.poll() is None, self._who())
        except TimeoutError:
            raise self._timed_out(op, timeout_s or 0.0) from None
        except ProtocolError as exc:
            raise self._broken(exc) from None
        if not line:  # end of file: the worker is gone
            raise self._crashed(op)
        return line

    # --- typed helpers for the ops ---------------------------------------------

    def open_cell(
        self,
        suite: Path,
        cell: str,
        rootdir: Path,
        cache_dir: Path,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> dict[str, Any]:
        """Load ``suite``, open the cell whose item name is ``cell``; its description."""
        return self.request(
            "open",
            timeout_s,
            suite=str(suite),
            cell=cell,
            rootdir=str(rootdir),
            cache_dir=str(cache_dir),
        )

    def warmup(
        self,
        iterations: int,
        seconds: float,
        max_seconds: float | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {"iterations": iterations, "seconds": seconds}
        if max_seconds is not None:
            fields["max_seconds"] = max_seconds
        return self.request("warmup", timeout_s, **fields)

    def measure(self, k: int = 1, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> list[int]:
        """``k`` requests, each timed on its own in the worker: their latencies in ns."""
        samples: list[int] = self.request("measure", timeout_s, k=k)["samples_ns"]
        return samples

    def loop(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """The cell's own warm-up and timed loop (``perfguard.measure.runner.run_loop``)."""
        return self.request("loop", timeout_s)

    def check(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """One more request whose outputs must be finite (else ``NonFiniteOutputError``)."""
        return self.request("check", timeout_s)

    def profile(
        self,
        requests: int | None = None,
        trace_path: Path | None = None,
        *,
        slot: str | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> OperatorProfile:
        """The open cell's operator profile, taken in the worker after its measurement.

        ``requests``: recorded requests (default ``PROFILE_REQUESTS``); ``trace_path``:
        where the worker writes the Chrome trace (atomically); ``slot``: the cell's slot
        (same-run A/B profiles each side in its own slot). The session keeps serving.
        """
        fields: dict[str, Any] = {}
        if requests is not None:
            fields["requests"] = requests
        if trace_path is not None:
            fields["trace_path"] = str(trace_path)
        if slot is not None:
            fields["slot"] = slot
        reply = self.request("profile", timeout_s, **fields)
        return OperatorProfile.from_dict(reply["profile"], source=f"worker {self.name!r}")

    def close_cell(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        return self.request("close", timeout_s)

    # --- failures -------------------------------------------------------------

    def _who(self) -> str:
        return f"worker {self.name!r} (pid {self.pid})"

    def _fail(self, exc: WorkerError) -> WorkerError:
        self._failure = exc
        self._in_flight = False
        return exc

    def _crashed(self, op: str) -> WorkerError:
        self._reap(5.0)
        assert self._proc is not None
        start_fix = (
            f"check that `{' '.join(self.command)}` runs (interpreter, cwd "
            f"{self.cwd or Path.cwd()}, PYTHONPATH) and see its stderr below"
        )
        code = self._proc.returncode
        tail = self.stderr_tail()
        return self._fail(crashed_error(self._who(), self.name, code, op, start_fix, tail))

    def _timed_out(self, op: str, timeout_s: float) -> WorkerError:
        proc = self._proc
        assert proc is not None
        if proc.poll() is None and op != "bye" and hasattr(signal, "SIGUSR1"):
            # The worker registered faulthandler on SIGUSR1: its threads' stacks
            # land in stderr, so the tail below shows where it hung.
            size = os.fstat(self._stderr.fileno()).st_size if self._stderr else 0
            proc.send_signal(signal.SIGUSR1)
            end = time.monotonic() + _DUMP_WAIT_S
            while time.monotonic() < end and proc.poll() is None and self._stderr is not None:
                if os.fstat(self._stderr.fileno()).st_size > size:
                    time.sleep(0.05)  # let the dump finish
                    break
                time.sleep(0.01)
        self._stop()
        return self._fail(timeout_error(self._who(), self.name, op, timeout_s, self.stderr_tail()))

    def _broken(self, exc: ProtocolError) -> WorkerError:
        """The pipe is out of step: stop the worker; the error gets its stderr tail."""
        proc = self._proc
        if proc is not None:
            self._stop()
        return self._fail(
            ProtocolError(
                exc.problem + "; the worker was stopped",
                expected=exc.expected,
                fix=exc.fix,
                worker=self.name,
                tail=self.stderr_tail(),
                tail_label="stderr",
            )
        )

    def _still_failed(self, op: str) -> WorkerError:
        failure = self._failure
        assert failure is not None
        return type(failure)(
            f"worker {self.name!r} cannot answer `{op}`: it is gone after an earlier "
            f"failure ({failure.problem})",
            expected="a running worker",
            fix="start a new WorkerProcess",
            worker=self.name,
        )

    def _remote_error(self, op: str, error: dict[str, Any]) -> PerfguardError:
        self._in_flight = False
        return error_from_reply(error, op, self._who(), self.name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
