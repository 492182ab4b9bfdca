"""A served model's server process: started for a cell, ready before its first request,
and never outliving it.

``ServerProcess.start`` runs the suite's ``command`` (placeholders filled) in the suite's
folder, in a process group of its own, with its output in a log file; ``wait_ready``
polls the health URL until it answers 200, failing with the log's last lines when the
process exits or ``start_timeout_s`` passes; ``stop`` sends the group SIGTERM, then
SIGKILL after ``STOP_GRACE_S``. Nothing is left running on any way out:

* the cell's end, an error, Ctrl-C (``KeyboardInterrupt`` runs ``stop`` on the way up);
* SIGTERM, SIGINT and interpreter exit: the group is registered with
  ``perfguard.core.signals`` while it lives, which kills it then;
* perfguard killed outright (SIGKILL): the server is started through
  ``perfguard.serving.launch``, which asks the kernel to send it SIGTERM when its
  parent dies, then ``exec``s the command (the server then stops its own children,
  as vLLM and SGLang do on SIGTERM).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from perfguard.core.errors import Location, ServerError
from perfguard.core.signals import kill_group, track_group, untrack_group

__all__ = ["LOG_TAIL_LINES", "STOP_GRACE_S", "ServerProcess", "free_port", "log_tail"]

#: Seconds a server has to stop after SIGTERM before its group is killed.
STOP_GRACE_S = 10.0
#: Lines of the server's log an error quotes.
LOG_TAIL_LINES = 20
_POLL_S = 0.1


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's pick; the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the log at ``path`` (indented), or a note it is empty."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"    (cannot read the log {path}: {exc})"
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    if not kept:
        return "    (the server wrote nothing)"
    return "\n".join(f"    {line}" for line in kept)


class ServerProcess:
    """One server, started by :meth:`start` and stopped by :meth:`stop` (idempotent)."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        log: Path,
        name: str,
        location: Location | None = None,
    ) -> None:
        self.args = tuple(args)
        self.cwd = cwd
        self.log = log
        self.name = name
        self.location = location
        self._env = dict(env)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the command in a new process group, its output to :attr:`log`."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log.open("wb")
        launcher = [sys.executable, "-m", "perfguard.serving.launch", *self.args]
        try:
            self._proc = subprocess.Popen(
                launcher,
                cwd=self.cwd,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            self._close_log()
            raise ServerError(
                f"cannot start the server of {self.name} ({self.args[0]}): {exc}",
                expected="a command that runs in the suite's folder",
                fix="check `server.command` (the program must be on PATH or a path)",
                location=self.location,
            ) from exc
        track_group(self._proc.pid, f"server of {self.name}")

    def exit_code(self) -> int | None:
        """The process's exit status once it has ended, else None."""
        return self._proc.poll() if self._proc is not None else None

    def exit_reason(self, wait_s: float = 1.0) -> str | None:
        """Why the server is gone (its exit status and log tail), waiting up to ``wait_s``
        for the exit to land; None while it runs. For a request that failed."""
        end = time.monotonic() + wait_s
        while (code := self.exit_code()) is None and time.monotonic() < end:
            time.sleep(0.05)
        if code is None:
            return None
        tail = log_tail(self.log, LOG_TAIL_LINES // 2)
        return f"the server exited with {_exit_text(code)}; the end of its log {self.log}:\n{tail}"

    def wait_ready(
        self, url: str, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> float:
        """Poll ``url`` (GET, with ``headers``: the API key's) until it answers 200;
        returns the seconds it took.

        Raises ``ServerError`` with the log's tail when the server exits first or does not
        answer within ``timeout_s``."""
        start = time.monotonic()
        deadline = start + timeout_s
        last = "no answer yet"
        while True:
            code = self.exit_code()
            if code is not None:
                raise ServerError(
                    f"the server of {self.name} exited with {_exit_text(code)} before it was "
                    f"ready (waited {time.monotonic() - start:.1f} s for {url}); the end of "
                    f"its log {self.log}:\n{log_tail(self.log)}",
                    expected="a server that keeps running and answers its health URL",
                    fix="run the command by hand in the suite's folder to see why it stops",
                    location=self.location,
                )
            with contextlib.suppress(OSError):
                try:
                    request = urllib.request.Request(url, headers=dict(headers or {}))
                    with urllib.request.urlopen(request, timeout=1.0) as reply:
                        if reply.status == 200:
                            return time.monotonic() - start
                        last = f"HTTP {reply.status}"
                except urllib.error.HTTPError as exc:
                    last = f"HTTP {exc.code}"
                except urllib.error.URLError as exc:
                    last = str(exc.reason)
            if time.monotonic() >= deadline:
                self.stop()
                raise ServerError(
                    f"the server of {self.name} was not ready after {timeout_s:g} s ({url}: "
                    f"{last}); it has been stopped. The end of its log {self.log}:\n"
                    f"{log_tail(self.log)}",
                    expected=f"the health URL answering 200 within {timeout_s:g} s",
                    fix="raise `server.start_timeout_s` if it loads slowly, or check "
                    "`server.health` (vLLM, SGLang, llama.cpp: /health; any: /v1/models)",
                    location=self.location,
                )
            time.sleep(_POLL_S)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM to the group, SIGKILL after ``grace_s``; returns the exit status."""
        proc = self._proc
        if proc is None:
            return None
        try:
            if proc.poll() is None:
                kill_group(proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=grace_s)
            # The leader may be gone while children it started live on: the group goes.
            kill_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
            return proc.returncode
        finally:
            untrack_group(proc.pid)
            self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


def server_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The server's environment: perfguard's own plus the suite's ``env`` (unbuffered
    Python output, so the log's tail is current when an error quotes it)."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra)
    return env
