"""Which process owns a temporary folder, and whether that process still lives.

Every A/B base worktree's temporary folder holds an owner file (``OWNER_FILE``):
the pid, the process's start time and the host (with its pid namespace) of the
run that made it. A run killed outright (SIGKILL, an OOM kill, a lost CI runner)
cannot remove its folder; the next run reads the owner file and removes the
folder as soon as its owner is gone, instead of waiting a day.

``Owner.alive`` answers only what it can prove: an owner on this host (same
hostname, same pid namespace) is dead when no process has its pid, or when the
process that has it started at another time (the pid was reused). An owner on
another host, or one whose start time cannot be read, is never called dead on a
guess: ``None`` (cannot tell) leaves the decision to the age rule.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from perfguard.core.atomicio import read_json, write_json_atomic
from perfguard.core.errors import ResultsError

__all__ = ["OWNER_FILE", "Owner", "process_start", "read_owner", "write_owner"]

OWNER_FILE = "owner.json"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    """This process's pid namespace ("pid:[4026531836]"; empty where unknown)."""
    try:
        return str(Path("/proc/self/ns/pid").readlink())
    except OSError:
        return ""


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, as "<boot id>:<clock ticks since boot>" (Linux's
    /proc/<pid>/stat field 22); None when it cannot be read (no such process, no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")".
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return f"{_boot_id()}:{fields[19]}"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


@dataclass(frozen=True)
class Owner:
    """The process that made a temporary folder: ``pid``, its ``started`` time
    (``process_start``; None where unknown), ``host`` and ``pid_namespace``."""

    pid: int
    started: str | None
    host: str
    pid_namespace: str

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(pid, process_start(pid), socket.gethostname(), _pid_namespace())

    def to_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "started": self.started,
            "host": self.host,
            "pid_namespace": self.pid_namespace,
        }

    def same_host(self) -> bool:
        return self.host == socket.gethostname() and self.pid_namespace == _pid_namespace()

    def alive(self) -> bool | None:
        """True while the owner runs, False once it is provably gone, None when this
        process cannot tell (another host or pid namespace)."""
        if not self.same_host():
            return None
        if not _exists(self.pid):
            return False
        if self.started is None:
            return True  # the pid exists and nothing says it is another process
        now = process_start(self.pid)
        if now is None:  # ended between the two looks, or /proc hides it: look again
            return _exists(self.pid)
        return now == self.started


def write_owner(folder: Path) -> None:
    """Record this process as the owner of ``folder`` (atomically)."""
    write_json_atomic(Path(folder) / OWNER_FILE, Owner.current().to_dict())


def read_owner(folder: Path) -> Owner | None:
    """The owner recorded in ``folder``; None when there is no readable owner file
    (a folder of an older perfguard, or one whose run is still writing it)."""
    path = Path(folder) / OWNER_FILE
    with contextlib.suppress(OSError, ValueError, ResultsError):
        data = read_json(path)
        if isinstance(data, dict):
            pid, started = data.get("pid"), data.get("started")
            host, namespace = data.get("host"), data.get("pid_namespace")
            if (
                isinstance(pid, int)
                and not isinstance(pid, bool)
                and pid > 0
                and (started is None or isinstance(started, str))
                and isinstance(host, str)
                and isinstance(namespace, str)
            ):
                return Owner(pid, started, host, namespace)
    return None
