"""This runner's calibration sheets in a ``pytest --perfguard`` run (issue 31).

``perfguard calibrate`` keeps each cell's sheet in
``<baseline-dir>/<fingerprint>/calibration.json`` (:mod:`perfguard.judge.calibration`).
A run reads the file of its own fingerprint once per process, and

* at collection, warns (``CalibrationWarning``) for each collected cell whose gated
  latency limit is tighter than its sheet allows (``limit_warning``), with the fix;
* gives each of those cells' verdicts the sheet's headline (``CalibrationNote``), which
  the report and the pull-request summary show.

The sheet of the run's own mode is used (same-run A/B under ``--perfguard-ab``, else
archived); a cell calibrated in the other mode only gets that one's, which says its
mode.

No sheet, no word: a runner never calibrated runs as before. A calibration file that
cannot be read is one warning naming it, never a failed run (the gate does not depend
on it).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from perfguard.ab.abrun import latency_gate
from perfguard.core.errors import PerfguardWarning, StoreError
from perfguard.core.scenario import Scenario
from perfguard.judge.calibration import (
    MODES,
    CalibrationFile,
    CalibrationNote,
    CellSheet,
    limit_warning,
    note_of,
)

__all__ = ["CalibrationWarning", "RunnerSheets"]


class CalibrationWarning(PerfguardWarning):
    """A cell's limit is tighter than this runner's calibration sheet allows, or the
    sheet cannot be read."""


class RunnerSheets:
    """The sheets of ``baseline_dir``'s folder for this machine's ``fingerprint`` (called
    when first needed)."""

    def __init__(self, baseline_dir: Path, fingerprint: Callable[[], str]) -> None:
        self._baseline_dir = baseline_dir
        self._fingerprint = fingerprint
        self._file: CalibrationFile | None = None
        self._read = False
        self._sheets: dict[tuple[str, str], CellSheet | None] = {}

    def _store(self) -> CalibrationFile | None:
        if not self._read:
            self._read = True
            try:
                self._file = CalibrationFile(self._baseline_dir, self._fingerprint())
            except StoreError as exc:
                warnings.warn(
                    CalibrationWarning(f"{exc} (its sheets are not used in this run)"),
                    stacklevel=2,
                )
        return self._file

    def _sheet(self, sid: str, mode: str) -> CellSheet | None:
        """``sid``'s sheet in ``mode``, or in the other mode when it has only that one;
        made once per cell and mode (collection and every verdict ask)."""
        if (sid, mode) not in self._sheets:
            store = self._store()
            found = None
            if store is not None:
                sheets = (store.sheet(sid, m) for m in (mode, *(m for m in MODES if m != mode)))
                found = next((sheet for sheet in sheets if sheet is not None), None)
            self._sheets[(sid, mode)] = found
        return self._sheets[(sid, mode)]

    def warning(self, sid: str, scenario: Scenario, mode: str) -> str | None:
        """Why ``scenario``'s gate in ``mode`` is tighter than its sheet allows, or None
        (no sheet, or a limit the sheet holds)."""
        try:
            sheet = self._sheet(sid, mode)
        except StoreError as exc:
            return str(exc)
        return None if sheet is None else _tight(sheet, scenario)

    def warn_tight(self, cells: Iterable[tuple[str, Scenario]], mode: str) -> None:
        """One ``CalibrationWarning`` per cell whose limit its sheet does not hold, at
        the cell's line in its suite file. Made an error (``-W error::...``), it stops the
        run as a usage error with the same message."""
        try:
            for sid, scenario in cells:
                message = self.warning(sid, scenario, mode)
                if message is None:
                    continue
                warnings.warn_explicit(
                    CalibrationWarning(message),
                    CalibrationWarning,
                    filename=str(scenario.location.path),
                    lineno=scenario.location.line or 0,
                )
        except CalibrationWarning as exc:
            raise pytest.UsageError(
                f"perfguard: {exc} (a CalibrationWarning, made an error by -W or filterwarnings)"
            ) from exc

    def note(self, sid: str, scenario: Scenario, mode: str) -> CalibrationNote | None:
        """The headline a verdict of ``scenario`` in ``mode`` carries; None without a
        sheet."""
        try:
            sheet = self._sheet(sid, mode)
        except StoreError:
            return None  # said at collection
        if sheet is None:
            return None
        return note_of(sheet, _tight(sheet, scenario))


def _tight(sheet: CellSheet, scenario: Scenario) -> str | None:
    metric, limit = latency_gate(scenario)
    return limit_warning(sheet, metric, limit)
