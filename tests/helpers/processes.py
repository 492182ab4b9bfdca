"""Whether a process still runs (read from /proc), and a busy neighbour process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def gone(pid: int, within_s: float = 30.0) -> bool:
    """Whether ``pid`` stops running within ``within_s`` (a kill takes a moment to land)."""
    end = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def busy_neighbour() -> Iterator[int]:
    """A process spinning on a core for the length of the block (a CI runner's
    normal neighbour); yields its pid, kills it on the way out."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
