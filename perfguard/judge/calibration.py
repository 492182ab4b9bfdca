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
* the cost: the median seconds and pairs of one run;
* the **noise**, modelled from the A/A runs (``noise_per_pair``): the spread of their
  gated ratio, scaled to one pair (the ratio of two percentiles over n pairs spreads as
  ``noise / sqrt(n)``). From it, the pairs a gate at a given limit needs
  (``pairs_for``: enough that a change of *twice* the limit is caught 19 times in 20;
  a change exactly at a limit is a coin flip whatever the pairs, so "twice" is where a
  limit starts to mean something), and the **tightest limit that holds** within the
  gate's cap of pairs (``tightest_limit``). A suite limit below it is warned about at
  collection (``limit_warning``), and every verdict carries the sheet's headline
  (``CalibrationNote``) into the report and the pull-request summary.

Everything here is plain data from figures (``judge/`` needs nothing of ``measure/``);
``perfguard.ab.calibrate`` measures the runs and keeps them.
"""

from __future__ import annotations

import datetime
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from perfguard.core.atomicio import write_text_atomic
from perfguard.core.errors import StoreError
from perfguard.records.declare import Record, spec

__all__ = [
    "CALIBRATION_FILE",
    "CAUGHT_RATE",
    "CAUGHT_RUNS",
    "CalibrationFile",
    "CalibrationNote",
    "NOISE_RUNS",
    "TARGET_LIMITS",
    "CalibrationRun",
    "CellSheet",
    "DRIFT_P",
    "Drift",
    "Tally",
    "drift_of",
    "limit_warning",
    "noise_per_pair",
    "note_of",
    "pairs_for",
    "sheet_lines",
    "sheet_of",
    "tally",
    "tightest_limit",
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
#: A/A runs needed before the sheet models the noise from their spread.
NOISE_RUNS = 5
#: The limits whose cost every sheet states, beside the cell's own.
TARGET_LIMITS = (0.02, 0.05)
#: A check's p-value below which the runner has drifted from its sheet.
DRIFT_P = 0.01
#: Standard deviations of noise that "caught 19 times in 20" asks for (one-sided).
_Z = statistics.NormalDist().inv_cdf(CAUGHT_RATE)


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
    #: The A/A spread of log(ratio) scaled to one pair (None: fewer than NOISE_RUNS A/A
    #: runs), the gate's cap of pairs, the tightest limit that holds within it, and the
    #: pairs each of TARGET_LIMITS and the cell's limit needs.
    noise_per_pair: float | None = None
    max_pairs: int | None = None
    tightest_limit: float | None = None
    pairs_needed: tuple[tuple[float, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["caught"] = [{"planted": size, **asdict(t)} for size, t in self.caught]
        data["pairs_needed"] = [{"limit": lim, "pairs": n} for lim, n in self.pairs_needed]
        return data


def _pct(fraction: float) -> str:
    """A relative limit as a suite writes it: 0.05 -> +5%, 0.0083 -> +0.83%."""
    return f"+{fraction * 100:.3g}%"


def _aa_ratios(runs: Sequence[CalibrationRun]) -> list[tuple[int, float]]:
    """(pairs, ratio) of each A/A run that has a ratio."""
    return [
        (r.pairs, r.ratio)
        for r in runs
        if r.planted == 0 and r.ratio is not None and r.ratio > 0 and r.pairs > 0
    ]


def _rms_noise(aa: Sequence[tuple[int, float]]) -> float:
    return math.sqrt(statistics.fmean(pairs * math.log(ratio) ** 2 for pairs, ratio in aa))


def noise_per_pair(runs: Sequence[CalibrationRun]) -> float | None:
    """The spread of the A/A runs' log(ratio), scaled to one pair:
    ``sqrt(mean(pairs * log(ratio)^2))``; None with fewer than ``NOISE_RUNS`` A/A runs
    that have a ratio. Not centred: a bias between two identical sides is noise to the
    gate as much as the spread is."""
    aa = _aa_ratios(runs)
    return _rms_noise(aa) if len(aa) >= NOISE_RUNS else None


def pairs_for(noise: float, limit: float) -> int:
    """The pairs at which a gate at ``limit`` catches a change of twice the limit 19
    times in 20, given the ``noise`` per pair: 1.645 standard deviations of the ratio
    fit between the limit and twice it (in log space)."""
    if not limit > 0:
        raise ValueError(f"limit {limit!r}; expected a relative limit > 0")
    gap = math.log((1 + 2 * limit) / (1 + limit))
    return max(1, math.ceil((_Z * noise / gap) ** 2))


def tightest_limit(noise: float, pairs: int) -> float | None:
    """The smallest limit a gate of ``pairs`` pairs holds (a change of twice it caught 19
    times in 20): the inverse of :func:`pairs_for`; None when even a doubling of the
    figure could not be told from this noise."""
    spread = math.exp(_Z * noise / math.sqrt(pairs))
    return (spread - 1) / (2 - spread) if spread < 2 else None


def sheet_of(
    cell: str,
    mode: str,
    metric: str,
    limit: float,
    runs: Sequence[CalibrationRun],
    max_pairs: int | None = None,
) -> CellSheet:
    """The sheet of ``cell`` from its calibration ``runs`` (any order), for a gate that
    measures at most ``max_pairs`` pairs."""
    aa = [r for r in runs if r.planted == 0]
    sizes = sorted({r.planted for r in runs if r.planted > 0})
    caught = []
    for size in sizes:
        planted = [r for r in runs if r.planted == size]
        caught.append((size, tally(sum(r.alarm for r in planted), len(planted))))
    smallest = next(
        (size for size, t in caught if t.n >= CAUGHT_RUNS and t.k / t.n >= CAUGHT_RATE), None
    )
    noise = noise_per_pair(runs)
    tightest = None if noise is None or max_pairs is None else tightest_limit(noise, max_pairs)
    targets = sorted({*TARGET_LIMITS, limit})
    needed = () if noise is None else tuple((lim, pairs_for(noise, lim)) for lim in targets)
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
        noise_per_pair=noise,
        max_pairs=max_pairs,
        tightest_limit=tightest,
        pairs_needed=needed,
    )


def sheet_lines(sheet: CellSheet) -> list[str]:
    """The sheet as the terminal prints it, one finding per line."""
    gate = f"{sheet.metric.upper()} {sheet.limit:+.0%}"
    lines = [f"{sheet.cell} ({'same-run A/B' if sheet.mode == 'ab' else sheet.mode}, {gate})"]
    lines.append(f"  false alarms (A/A): {sheet.false_alarms.text()}")
    for size, t in sheet.caught:
        lines.append(f"  planted {_pct(size)}: caught {t.text()}")
    if sheet.smallest_caught is not None:
        lines.append(
            f"  this runner sees >= {_pct(sheet.smallest_caught)} on {sheet.metric.upper()} "
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
            f"  no planted size up to {_pct(largest)} was caught in {CAUGHT_RATE:.0%} of runs"
        )
    if sheet.seconds_per_run is not None and sheet.pairs_per_run is not None:
        lines.append(
            f"  cost: {sheet.seconds_per_run:.1f} s and {sheet.pairs_per_run:.0f} pairs per run"
        )
    lines += _noise_lines(sheet)
    return lines


def _noise_lines(sheet: CellSheet) -> list[str]:
    if sheet.noise_per_pair is None:
        return [
            f"  {sheet.false_alarms.n} A/A run(s): {NOISE_RUNS} are needed to model the noise "
            "(the pairs a limit needs, the tightest limit that holds)"
        ]
    figure = sheet.metric.upper()
    at = 200  # a round number of pairs to state the spread at
    lines = [
        f"  noise: A/A {figure} ratios spread +-{sheet.noise_per_pair / math.sqrt(at):.1%} "
        f"(1 sd) at {at} pairs"
    ]
    cap = sheet.max_pairs
    if cap is not None:
        tight = sheet.tightest_limit
        lines.append(
            f"  tightest limit that holds here: {_pct(tight)} (a change of twice it caught 19 "
            f"times in 20 within the gate's {cap} pairs)"
            if tight is not None
            else f"  no limit holds here: the noise hides a doubling within {cap} pairs"
        )
    needs = []
    for lim, pairs in sheet.pairs_needed:
        over = f", over the gate's {cap}" if cap is not None and pairs > cap else ""
        needs.append(f"{_pct(lim)} ~{pairs} pairs{over}")
    lines.append("  pairs a limit needs (twice it caught 19 times in 20): " + "; ".join(needs))
    return lines


@dataclass(frozen=True)
class Drift:
    """A small A/A sample checked against a cell's sheet (``perfguard calibrate --check``).

    ``noise`` is the sample's noise per pair (``noise_per_pair``), ``sheet_noise`` the
    sheet's; ``p_noisier`` the chance of a spread this large or larger were the noise
    still the sheet's (the sum over runs of ``pairs * log(ratio)^2 / sheet_noise^2`` is
    chi-square with one degree per run), ``p_quieter`` of one this small or smaller;
    ``p_alarms`` the chance of this many false alarms or more at the sheet's rate (at
    least 1 in 20). ``drifted``: noisier or crying wolf beyond ``DRIFT_P``."""

    cell: str
    runs: int
    noise: float
    sheet_noise: float
    p_noisier: float
    p_quieter: float
    false_alarms: int
    p_alarms: float

    @property
    def drifted(self) -> bool:
        return self.p_noisier < DRIFT_P or self.p_alarms < DRIFT_P

    @property
    def quieter(self) -> bool:
        return self.p_quieter < DRIFT_P

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "drifted": self.drifted, "quieter": self.quieter}

    def text(self) -> str:
        """One line: the check's finding and what to do."""
        at = 200
        spread = (
            f"A/A noise +-{self.noise / math.sqrt(at):.2%} at {at} pairs against "
            f"+-{self.sheet_noise / math.sqrt(at):.2%} in its sheet "
            f"(p {self.p_noisier:.3g} of so much noise); "
            f"{self.false_alarms}/{self.runs} false alarms (p {self.p_alarms:.3g})"
        )
        if self.drifted:
            return (
                f"{self.cell}: DRIFTED: {spread}. Fix: find what changed on the runner "
                "(neighbours, clocks, driver, power), then `perfguard calibrate --fresh` "
                "this cell so its sheet and the limits checked against it are this "
                "runner's again"
            )
        if self.quieter:
            return (
                f"{self.cell}: quieter than its sheet: {spread}; `perfguard calibrate --fresh` "
                "would allow tighter limits"
            )
        return f"{self.cell}: holds: {spread}"


def drift_of(sheet: CellSheet, runs: Sequence[CalibrationRun]) -> Drift | None:
    """The A/A ``runs`` of a check against ``sheet``; None when the sheet has no noise
    figure or the check no A/A run with a ratio."""
    from scipy.stats import binom, chi2

    aa = _aa_ratios(runs)
    if sheet.noise_per_pair is None or not aa:
        return None
    noise = _rms_noise(aa)  # a chi-square of len(aa) degrees however few they are
    k = len(aa)
    stat = k * noise**2 / sheet.noise_per_pair**2
    trials = sum(r.planted == 0 for r in runs)
    alarms = sum(r.alarm for r in runs if r.planted == 0)
    rate = max(1 - CAUGHT_RATE, sheet.false_alarms.k / max(sheet.false_alarms.n, 1))
    return Drift(
        cell=sheet.cell,
        runs=trials,
        noise=noise,
        sheet_noise=sheet.noise_per_pair,
        p_noisier=float(chi2.sf(stat, k)),
        p_quieter=float(chi2.cdf(stat, k)),
        false_alarms=alarms,
        p_alarms=float(binom.sf(alarms - 1, trials, rate)),
    )


@dataclass(frozen=True)
class CalibrationNote(Record):
    """A verdict's word from the runner's calibration sheet (``ScenarioVerdict.
    calibration``): the gate it was calibrated for (``mode``, ``metric``, ``limit``),
    the A/A false alarms, the smallest planted size caught 19 times in 20 (``sees``),
    the tightest limit that holds, and the warning when the cell's limit is tighter
    than that. Shown in the report and the pull-request summary."""

    SCHEMA_NAME: ClassVar[str] = "calibration"

    mode: str = field(metadata=spec(values=("ab", "archived")))
    metric: str = field(metadata=spec(min_length=1))
    limit: float = field(metadata=spec(minimum=0))
    false_alarms: int = field(metadata=spec(minimum=0))
    aa_runs: int = field(metadata=spec(minimum=0))
    sees: float | None = field(default=None, metadata=spec(omit="none", minimum=0))
    tightest_limit: float | None = field(default=None, metadata=spec(omit="none", minimum=0))
    warning: str | None = field(default=None, metadata=spec(omit="none"))

    def text(self) -> str:
        """One line: what this runner sees for the cell, by its calibration."""
        how = "same-run A/B" if self.mode == "ab" else "archived"
        figure = self.metric.upper()
        if self.sees is not None:
            head = f"this runner sees >= {_pct(self.sees)} on {figure}"
        else:
            head = f"this runner's calibration saw no planted {figure} slowdown 19 times in 20"
        also = [f"{self.false_alarms}/{self.aa_runs} A/A false alarms"]
        if self.tightest_limit is not None:
            also.append(f"tightest limit that holds {_pct(self.tightest_limit)}")
        return f"{head} ({how} at {_pct(self.limit)}: {', '.join(also)})"


def note_of(sheet: CellSheet, warning: str | None = None) -> CalibrationNote:
    """The verdict's note of ``sheet``, with the collection ``warning`` if there was one."""
    return CalibrationNote(
        mode=sheet.mode,
        metric=sheet.metric,
        limit=sheet.limit,
        false_alarms=sheet.false_alarms.k,
        aa_runs=sheet.false_alarms.n,
        sees=sheet.smallest_caught,
        tightest_limit=sheet.tightest_limit,
        warning=warning,
    )


def limit_warning(sheet: CellSheet, metric: str, limit: float) -> str | None:
    """Why a gate of ``limit`` on ``metric`` is tighter than ``sheet`` allows, or None.

    Warned: a limit below the sheet's tightest limit that holds (a change of twice the
    limit would pass more than once in 20 runs); a sheet of the same gate whose planted
    sizes, each run 20 times or more, were none caught 19 times in 20; a false-alarm
    rate above 1 in 20 beyond doubt (its interval's lower end above 5%). A sheet of
    another figure says nothing of this gate: calibrate again."""
    where = f"{sheet.cell}: its {metric.upper()} limit {_pct(limit)}"
    redo = "`perfguard calibrate` again"
    if sheet.metric != metric:
        return (
            f"{where} gates another figure than its calibration ({sheet.metric.upper()}), so "
            f"the runner's sheet says nothing of it. Fix: run {redo}"
        )
    if sheet.tightest_limit is not None and limit < sheet.tightest_limit:
        return (
            f"{where} is tighter than this runner resolves: by its calibration (A/A noise) "
            f"the tightest limit that holds is {_pct(sheet.tightest_limit)}, so a regression "
            f"of twice {_pct(limit)} passes more than once in 20 runs. Fix: raise the limit to "
            f"{math.ceil(sheet.tightest_limit * 1000) / 1000:g} (`gates: [{{metric: {metric}, "
            f"limit: ...}}]`), or gate this cell on a quieter runner and calibrate it there"
        )
    if sheet.false_alarms.n and sheet.false_alarms.low > 1 - CAUGHT_RATE:
        return (
            f"{where} cries wolf on this runner: its calibration had "
            f"{sheet.false_alarms.text()} false alarms in A/A runs (more than 1 in 20). Fix: "
            "quiet the runner (pin the job's cores, stop its neighbours) and run "
            f"{redo}, or raise the limit"
        )
    sized = sheet.caught and min(t.n for _, t in sheet.caught) >= CAUGHT_RUNS
    if sheet.limit == limit and sized and sheet.smallest_caught is None:
        largest = sheet.caught[-1][0]
        return (
            f"{where}: no planted slowdown up to {_pct(largest)} was caught 19 times in 20 by "
            "its calibration, so the gate misses most regressions here. Fix: gate this cell "
            f"on a quieter runner, or raise its limit and run {redo}"
        )
    return None


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

    def sheet(self, cell: str) -> CellSheet | None:
        """``cell``'s sheet, made again from its kept plan and runs (so a sheet read is
        always one of this perfguard's making); None when the cell was not calibrated."""
        entry = self.cells.get(cell)
        if entry is None:
            return None
        try:
            plan = entry["plan"]
            runs = [CalibrationRun.from_dict(r) for r in entry.get("runs", [])]
            cap = entry.get("sheet", {}).get("max_pairs")
            return sheet_of(
                cell,
                str(plan["mode"]),
                str(plan["metric"]),
                float(plan["limit"]),
                runs,
                None if cap is None else int(cap),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(
                f"calibration file {self.path}: the entry of {cell} cannot be read "
                f"({type(exc).__name__}: {exc})",
                expected="the plan, runs and sheet perfguard calibrate writes",
                fix="calibrate the cell again with `perfguard calibrate --fresh -k ...` "
                "(or move the file away)",
            ) from exc

    def keep(
        self, cell: str, key: dict[str, Any], runs: Sequence[CalibrationRun], sheet: CellSheet
    ) -> None:
        before = self.cells.get(cell, {})
        self.cells[cell] = {
            "plan": key,
            "runs": [r.to_dict() for r in runs],
            "sheet": sheet.to_dict(),
            # The checks of this sheet (perfguard calibrate --check); a new plan drops them.
            "checks": before.get("checks", []) if before.get("plan") == key else [],
        }
        self._write()

    def keep_check(self, cell: str, drift: Drift, runs: Sequence[CalibrationRun]) -> None:
        """Add a check of ``cell``'s sheet (its A/A runs and finding) to its history."""
        entry = self.cells[cell]
        entry.setdefault("checks", []).append(
            {
                "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "finding": drift.to_dict(),
                "runs": [r.to_dict() for r in runs],
            }
        )
        self._write()

    def checks(self, cell: str) -> int:
        """How many checks ``cell``'s sheet has had."""
        return len(self.cells.get(cell, {}).get("checks", []))

    def _write(self) -> None:
        data = {"version": _VERSION, "fingerprint": self.fingerprint, "cells": self.cells}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
