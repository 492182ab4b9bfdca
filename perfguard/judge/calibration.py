"""A runner's calibration sheet (issue 31): what the gate sees on this machine, counted
from runs of the user's own cells.

A calibration measures each cell again and again in the gate's mode: **A/A** runs (both
sides the same code: every regression verdict is a false alarm) and runs with a
**planted** slowdown of a known fraction (``perfguard.measure.plant``: every regression
verdict is a detection). ``CalibrationRun`` is one such run; ``sheet_of`` turns a cell's
runs into its ``CellSheet``:

* false alarms and detections as ``k/n`` with an exact (Clopper-Pearson) 95% interval,
  ``scipy.stats.binomtest``'s: 0 false alarms of 20 runs is still up to 16.8%;
* the smallest planted size caught at least 19 times in 20 (``smallest_caught``: the
  observed rate over at least 20 runs of that size; ``None`` when none reached it);
* the cost: the median seconds and pairs of one run.

Everything here is plain data from figures (``judge/`` needs nothing of ``measure/``);
``perfguard.ab.calibrate`` measures the runs and keeps them.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfguard.core.atomicio import write_text_atomic
from perfguard.core.errors import StoreError

__all__ = [
    "CALIBRATION_FILE",
    "CAUGHT_RATE",
    "CAUGHT_RUNS",
    "CalibrationFile",
    "CalibrationRun",
    "CellSheet",
    "Tally",
    "sheet_lines",
    "sheet_of",
    "tally",
]

#: A planted size is "seen" when at least this share of its runs caught it (19 in 20),
#: over at least ``CAUGHT_RUNS`` runs (fewer cannot tell 19 in 20 from luck).
CAUGHT_RATE = 0.95
CAUGHT_RUNS = 20
#: The confidence of a tally's interval.
TALLY_CONFIDENCE = 0.95
#: The calibration file's name, in a fingerprint's folder of the baseline directory.
CALIBRATION_FILE = "calibration.json"
_VERSION = 1


@dataclass(frozen=True)
class CalibrationRun:
    """One calibration run of a cell: ``planted`` 0 for A/A, else the planted fraction;
    ``verdict`` what the gate concluded (``regression``, ``unchanged``, ``improvement``
    or ``undecided``); the gated figure's B/A ``ratio``; the ``pairs`` and ``seconds``
    it cost."""

    planted: float
    verdict: str
    ratio: float | None
    pairs: int
    seconds: float

    @property
    def alarm(self) -> bool:
        """Whether the gate would have failed this run (a regression verdict)."""
        return self.verdict == "regression"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CalibrationRun:
        ratio = data.get("ratio")
        return cls(
            planted=float(data["planted"]),
            verdict=str(data["verdict"]),
            ratio=None if ratio is None else float(ratio),
            pairs=int(data["pairs"]),
            seconds=float(data["seconds"]),
        )


@dataclass(frozen=True)
class Tally:
    """``k`` of ``n`` runs, and the exact 95% interval of the rate behind them."""

    k: int
    n: int
    low: float
    high: float

    def text(self) -> str:
        if self.n == 0:
            return "no runs"
        return f"{self.k}/{self.n} ({self.low:.0%}..{self.high:.0%})"


def tally(k: int, n: int) -> Tally:
    """``k`` of ``n`` with its exact (Clopper-Pearson) 95% interval (0..1 without runs)."""
    if not 0 <= k <= n:
        raise ValueError(f"a tally of {k} of {n}; expected 0 <= k <= n")
    if n == 0:
        return Tally(0, 0, 0.0, 1.0)
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=TALLY_CONFIDENCE, method="exact")
    return Tally(k, n, float(ci.low), float(ci.high))


@dataclass(frozen=True)
class CellSheet:
    """What one cell's calibration found: ``metric`` and ``limit`` are the gate it ran
    under (``p95``, 0.05), ``mode`` the gate's mode (``ab``)."""

    cell: str
    mode: str
    metric: str
    limit: float
    false_alarms: Tally
    caught: tuple[tuple[float, Tally], ...]
    smallest_caught: float | None
    seconds_per_run: float | None
    pairs_per_run: float | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["caught"] = [{"planted": size, **asdict(t)} for size, t in self.caught]
        return data


def sheet_of(
    cell: str, mode: str, metric: str, limit: float, runs: Sequence[CalibrationRun]
) -> CellSheet:
    """The sheet of ``cell`` from its calibration ``runs`` (any order)."""
    aa = [r for r in runs if r.planted == 0]
    sizes = sorted({r.planted for r in runs if r.planted > 0})
    caught = []
    for size in sizes:
        planted = [r for r in runs if r.planted == size]
        caught.append((size, tally(sum(r.alarm for r in planted), len(planted))))
    smallest = next(
        (size for size, t in caught if t.n >= CAUGHT_RUNS and t.k / t.n >= CAUGHT_RATE), None
    )
    return CellSheet(
        cell=cell,
        mode=mode,
        metric=metric,
        limit=limit,
        false_alarms=tally(sum(r.alarm for r in aa), len(aa)),
        caught=tuple(caught),
        smallest_caught=smallest,
        seconds_per_run=statistics.median(r.seconds for r in runs) if runs else None,
        pairs_per_run=statistics.median(r.pairs for r in runs) if runs else None,
    )


def sheet_lines(sheet: CellSheet) -> list[str]:
    """The sheet as the terminal prints it, one finding per line."""
    gate = f"{sheet.metric.upper()} {sheet.limit:+.0%}"
    lines = [f"{sheet.cell} ({'same-run A/B' if sheet.mode == 'ab' else sheet.mode}, {gate})"]
    lines.append(f"  false alarms (A/A): {sheet.false_alarms.text()}")
    for size, t in sheet.caught:
        lines.append(f"  planted +{size:.0%}: caught {t.text()}")
    if sheet.smallest_caught is not None:
        lines.append(
            f"  this runner sees >= +{sheet.smallest_caught:.0%} on {sheet.metric.upper()} "
            f"(caught in >= {CAUGHT_RATE:.0%} of runs)"
        )
    elif sheet.caught and min(t.n for _, t in sheet.caught) < CAUGHT_RUNS:
        fewest = min(t.n for _, t in sheet.caught)
        lines.append(
            f"  {fewest} run(s) of a planted size: {CAUGHT_RUNS} are needed to say what is "
            f"caught 19 times in 20 (--planted {CAUGHT_RUNS})"
        )
    elif sheet.caught:
        largest = sheet.caught[-1][0]
        lines.append(
            f"  no planted size up to +{largest:.0%} was caught in {CAUGHT_RATE:.0%} of runs"
        )
    if sheet.seconds_per_run is not None and sheet.pairs_per_run is not None:
        lines.append(
            f"  cost: {sheet.seconds_per_run:.1f} s and {sheet.pairs_per_run:.0f} pairs per run"
        )
    return lines


class CalibrationFile:
    """``<baseline_dir>/<fingerprint>/calibration.json``: every cell's plan, runs and
    sheet on this machine's fingerprint, rewritten atomically after each run."""

    def __init__(self, baseline_dir: Path, fingerprint: str) -> None:
        self.path = baseline_dir / fingerprint / CALIBRATION_FILE
        self.fingerprint = fingerprint
        self.cells: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                cells = data["cells"]
                if data.get("version") != _VERSION or not isinstance(cells, dict):
                    raise ValueError(f"version {data.get('version')!r}")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise StoreError(
                    f"calibration file {self.path} cannot be read ({type(exc).__name__}: {exc})",
                    expected=f"the JSON perfguard calibrate writes (version {_VERSION})",
                    fix="move it away and calibrate again (perfguard never writes over a "
                    "file it cannot read)",
                ) from exc
            self.cells = cells

    def runs(self, cell: str, key: dict[str, Any]) -> tuple[list[CalibrationRun], bool]:
        """The kept runs of ``cell`` under plan ``key``, and whether runs under another
        plan were dropped."""
        entry = self.cells.get(cell)
        if entry is None:
            return [], False
        if entry.get("plan") != key:
            return [], True
        return [CalibrationRun.from_dict(r) for r in entry.get("runs", [])], False

    def keep(
        self, cell: str, key: dict[str, Any], runs: Sequence[CalibrationRun], sheet: CellSheet
    ) -> None:
        self.cells[cell] = {
            "plan": key,
            "runs": [r.to_dict() for r in runs],
            "sheet": sheet.to_dict(),
        }
        data = {"version": _VERSION, "fingerprint": self.fingerprint, "cells": self.cells}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
