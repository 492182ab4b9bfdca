"""Peak host memory of one scenario: the process's resident-set high-water mark.

On Linux the kernel keeps the peak RSS in ``/proc/self/status`` (``VmHWM``) and
lets a process reset it by writing ``5`` to ``/proc/self/clear_refs``; resetting
before a scenario and reading after gives that scenario's own peak, model load
included. Where the reset is not possible (other systems, restricted
containers) the figure is ``None`` rather than a process-lifetime peak that
would blame one scenario for another's memory.
"""

from __future__ import annotations

from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


class PeakMemory:
    """``start()`` before the scenario, ``peak_mib()`` after it."""

    def __init__(self, status: Path = _STATUS, clear_refs: Path = _CLEAR_REFS) -> None:
        self._status = status
        self._clear_refs = clear_refs
        self._reset_ok = False

    def start(self) -> None:
        try:
            self._clear_refs.write_text("5")
        except OSError:
            self._reset_ok = False
        else:
            self._reset_ok = _read_kib(self._status, "VmHWM") is not None

    def peak_mib(self) -> float | None:
        if not self._reset_ok:
            return None
        kib = _read_kib(self._status, "VmHWM")
        return None if kib is None else kib / 1024.0


def _read_kib(status: Path, field: str) -> int | None:
    try:
        text = status.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1])
    return None
