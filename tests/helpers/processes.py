"""Whether a process still runs (read from /proc)."""

from __future__ import annotations

import time
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
