"""Peak host memory of one scenario: the process's resident-set high-water mark.

On Linux the kernel keeps the peak RSS in ``/proc/self/status`` (``VmHWM``) and
lets a process reset it by writing ``5`` to ``/proc/self/clear_refs``; resetting
before a scenario and reading after gives that scenario's own peak, model load
included. Where the reset is not possible (other systems, restricted
containers) the figure is ``None`` rather than a process-lifetime peak that
would blame one scenario for another's memory.

A load level also takes a *section* of its own (``section()``, then
``section_peak_mib()``): the high-water mark restarted just before the measured
level, the peak of the scenario so far kept aside, so ``peak_mib()`` still covers
the whole scenario. With ``resident_mib()`` (``VmRSS``) read before the first
request, it gives what serving the level held above the idle model
(``perfguard.records.loadfigures.LevelMemory``).
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
        self._earlier_kib = 0  # the scenario's peak before its current section

    def _reset(self) -> bool:
        try:
            self._clear_refs.write_text("5")
        except OSError:
            return False
        return _read_kib(self._status, "VmHWM") is not None

    def start(self) -> None:
        self._earlier_kib = 0
        self._reset_ok = self._reset()

    def section(self) -> None:
        """Restart the high-water mark for a section (a load level), keeping the
        scenario's peak so far for ``peak_mib()``."""
        if not self._reset_ok:
            return
        self._earlier_kib = max(self._earlier_kib, _read_kib(self._status, "VmHWM") or 0)
        self._reset_ok = self._reset()

    def section_peak_mib(self) -> float | None:
        """The peak since ``section()`` (or ``start()``), None without a reset."""
        if not self._reset_ok:
            return None
        kib = _read_kib(self._status, "VmHWM")
        return None if kib is None else kib / 1024.0

    def peak_mib(self) -> float | None:
        """The scenario's peak since ``start()``, sections included."""
        section = self.section_peak_mib()
        return None if section is None else max(section, self._earlier_kib / 1024.0)

    def resident_mib(self) -> float | None:
        """The process's resident memory now (``VmRSS``), None where it is not read."""
        kib = _read_kib(self._status, "VmRSS")
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
