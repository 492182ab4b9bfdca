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

from perfguard.baseline.store import DirectoryStore
from perfguard.core.atomicio import write_text_atomic
from perfguard.core.errors import StoreError
from perfguard.records.declare import Record, spec

__all__ = [
    "CALIBRATION_FILE",
    "CAUGHT_RATE",
    "CAUGHT_RUNS",
    "CalibrationFile",
    "CalibrationNote",
    "MODES",
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
_VERSION = 2
#: A/A runs needed before the sheet models the noise from their spread.
NOISE_RUNS = 5
#: The limits whose cost every sheet states, beside the cell's own.
TARGET_LIMITS = (0.02, 0.05)
#: A check's p-value below which the runner has drifted from its sheet.
DRIFT_P = 0.01
#: The gate modes a calibration measures: same-run A/B (the default) and archived; and
#: how each is named on a sheet.
MODES = ("ab", "archived")
_MODE_NAMES = {"ab": "same-run A/B", "archived": "archived"}
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
    #: What one paired observation of the gate is: ``pairs`` of requests, ``rounds`` of
    #: load levels (same-run A/B), or whole ``runs`` (archived: the noise is from run to
    #: run, and more requests per run do not narrow it).
    unit: str = "pairs"
    #: Runs the gate could not judge (invalid: contended or unstable; undecided), which
    #: fail a check run under --perfguard-inconclusive=fail.
    inconclusive: Tally = field(default_factory=lambda: Tally(0, 0, 0.0, 1.0))
    #: What the planted runs say of the calibrated limit itself: True when a planted
    #: change of twice it was caught in 19 of 20 runs or more (over 20 runs at least),
    #: False when beyond doubt less often (its interval's upper end under 95%), None
    #: otherwise. The planted runs are the measurement and the noise model extrapolates,
    #: so where they refute it the tightest limit is not stated below the calibrated one.
    limit_holds: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["caught"] = [{"planted": size, **asdict(t)} for size, t in self.caught]
        data["pairs_needed"] = [{"limit": lim, "pairs": n} for lim, n in self.pairs_needed]
        return data


def _pct(fraction: float) -> str:
    """A relative limit as a suite writes it: 0.05 -> +5%, 0.0083 -> +0.83%."""
    return f"+{fraction * 100:.3g}%"


#: Verdicts of a run the gate could not judge.
INCONCLUSIVE = frozenset({"invalid", "undecided"})
#: The pairs (rounds) a sheet states the A/A spread at: round numbers.
_SPREAD_AT = {"pairs": 200, "rounds": 10}


def _aa_ratios(runs: Sequence[CalibrationRun], unit: str = "pairs") -> list[tuple[int, float]]:
    """(weight, ratio) of each A/A run that has a ratio: its pairs (rounds), or 1 when the
    ``unit`` is whole ``runs``."""
    return [
        (1 if unit == "runs" else r.pairs, r.ratio)
        for r in runs
        if r.planted == 0 and r.ratio is not None and r.ratio > 0 and r.pairs > 0
    ]


def _rms_noise(aa: Sequence[tuple[int, float]]) -> float:
    return math.sqrt(statistics.fmean(pairs * math.log(ratio) ** 2 for pairs, ratio in aa))


def noise_per_pair(runs: Sequence[CalibrationRun], unit: str = "pairs") -> float | None:
    """The spread of the A/A runs' log(ratio), scaled to one pair (round):
    ``sqrt(mean(pairs * log(ratio)^2))``, or the spread of one run when the ``unit`` is
    whole ``runs``; None with fewer than ``NOISE_RUNS`` A/A runs that have a ratio. Not
    centred: a bias between two identical sides is noise to the gate as much as the
    spread is."""
    aa = _aa_ratios(runs, unit)
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
    unit: str = "pairs",
) -> CellSheet:
    """The sheet of ``cell`` from its calibration ``runs`` (any order), for a gate that
    measures at most ``max_pairs`` pairs (rounds) of ``unit``; an archived gate (``unit``
    ``runs``) compares one run with another, so its noise is a run's and its cap 1."""
    if unit == "runs":
        max_pairs = 1
    aa = [r for r in runs if r.planted == 0]
    sizes = sorted({r.planted for r in runs if r.planted > 0})
    caught = []
    for size in sizes:
        planted = [r for r in runs if r.planted == size]
        caught.append((size, tally(sum(r.alarm for r in planted), len(planted))))
    smallest = next(
        (size for size, t in caught if t.n >= CAUGHT_RUNS and t.k / t.n >= CAUGHT_RATE), None
    )
    noise = noise_per_pair(runs, unit)
    tightest = None if noise is None or max_pairs is None else tightest_limit(noise, max_pairs)
    twice = next((t for size, t in caught if math.isclose(size, 2 * limit)), None)
    holds: bool | None = None
    if twice is not None and twice.n >= CAUGHT_RUNS and twice.k / twice.n >= CAUGHT_RATE:
        holds = True
    elif twice is not None and twice.n and twice.high < CAUGHT_RATE:
        holds = False  # beyond doubt: even its interval's upper end is under 19 in 20
    if holds is False and tightest is not None and tightest <= limit:
        tightest = None  # the planted runs refute the model at the calibrated limit
    targets = sorted({*TARGET_LIMITS, limit})
    needed: tuple[tuple[float, int], ...] = ()
    if noise is not None and unit != "runs":
        needed = tuple((lim, pairs_for(noise, lim)) for lim in targets)
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
        unit=unit,
        inconclusive=tally(sum(r.verdict in INCONCLUSIVE for r in runs), len(runs)),
        limit_holds=holds,
    )


def sheet_lines(sheet: CellSheet) -> list[str]:
    """The sheet as the terminal prints it, one finding per line."""
    gate = f"{sheet.metric.upper()} {_pct(sheet.limit)}"
    lines = [f"{sheet.cell} ({_MODE_NAMES[sheet.mode]}, {gate})"]
    lines.append(f"  false alarms (A/A): {sheet.false_alarms.text()}")
    if sheet.inconclusive.k:
        lines.append(
            f"  inconclusive: {sheet.inconclusive.text()} of all runs (contended or unstable: "
            "each fails a run under --perfguard-inconclusive=fail)"
        )
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
            + (": the archived gate sees nothing here" if sheet.mode == "archived" else "")
        )
    if sheet.seconds_per_run is not None and sheet.pairs_per_run is not None:
        what = "requests" if sheet.unit == "runs" else sheet.unit
        lines.append(
            f"  cost: {sheet.seconds_per_run:.1f} s and {sheet.pairs_per_run:.0f} {what} per run"
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
    if sheet.unit == "runs" and not (sheet.limit_holds is False and sheet.tightest_limit is None):
        tight = sheet.tightest_limit
        return [
            f"  noise: A/A {figure} ratios spread +-{sheet.noise_per_pair:.1%} (1 sd) from run "
            "to run (archived: more requests per run do not narrow it)",
            f"  tightest limit that holds here: {_pct(tight)} (a change of twice it caught 19 "
            "times in 20)"
            if tight is not None
            else "  no limit holds here: the noise between runs hides a doubling",
        ]
    at = _SPREAD_AT.get(sheet.unit, 200)
    unit = sheet.unit
    lines = [
        f"  noise: A/A {figure} ratios spread +-{sheet.noise_per_pair / math.sqrt(at):.1%} "
        f"(1 sd) at {at} {unit}"
    ]
    cap = sheet.max_pairs
    if sheet.limit_holds is False and sheet.tightest_limit is None:
        twice = _pct(2 * sheet.limit)
        lines.append(
            f"  tightest limit that holds here: above {_pct(sheet.limit)} (the noise model "
            f"says less, but the planted {twice} was caught in fewer than 19 of 20 runs "
            "beyond doubt)"
        )
    elif cap is not None:
        tight = sheet.tightest_limit
        lines.append(
            f"  tightest limit that holds here: {_pct(tight)} (a change of twice it caught 19 "
            f"times in 20 within the gate's {cap} {unit})"
            if tight is not None
            else f"  no limit holds here: the noise hides a doubling within {cap} {unit}"
        )
    needs = []
    for lim, pairs in sheet.pairs_needed:
        over = f", over the gate's {cap}" if cap is not None and pairs > cap else ""
        needs.append(f"{_pct(lim)} ~{pairs} {unit}{over}")
    lines.append(f"  {unit} a limit needs (twice it caught 19 times in 20): " + "; ".join(needs))
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
    unit: str = "pairs"

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
        at = _SPREAD_AT.get(self.unit, 1)
        where = f" at {at} {self.unit}" if self.unit in _SPREAD_AT else " from run to run"
        spread = (
            f"A/A noise +-{self.noise / math.sqrt(at):.2%}{where} against "
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

    aa = _aa_ratios(runs, sheet.unit)
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
        unit=sheet.unit,
    )


@dataclass(frozen=True)
class CalibrationNote(Record):
    """A verdict's word from the runner's calibration sheet (``ScenarioVerdict.
    calibration``): the gate it was calibrated for (``mode``, ``metric``, ``limit``),
    the A/A false alarms, the smallest planted size caught 19 times in 20 (``sees``),
    the tightest limit that holds, and the warning when the cell's limit is tighter
    than that. Shown in the report and the pull-request summary."""

    SCHEMA_NAME: ClassVar[str] = "calibration"

    mode: str = field(metadata=spec(values=MODES))
    metric: str = field(metadata=spec(min_length=1))
    limit: float = field(metadata=spec(minimum=0))
    false_alarms: int = field(metadata=spec(minimum=0))
    aa_runs: int = field(metadata=spec(minimum=0))
    sees: float | None = field(default=None, metadata=spec(omit="none", minimum=0))
    tightest_limit: float | None = field(default=None, metadata=spec(omit="none", minimum=0))
    warning: str | None = field(default=None, metadata=spec(omit="none"))

    def text(self) -> str:
        """One line: what this runner sees for the cell, by its calibration."""
        how = _MODE_NAMES[self.mode]
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
    limit would pass more than once in 20 runs); a false-alarm rate above 1 in 20 beyond
    doubt (its interval's lower end above 5%); a limit at or below the calibrated one
    whose planted twice was caught less than 19 times in 20 beyond doubt
    (``limit_holds`` False); a sheet of the same limit whose planted sizes were all
    caught less than 19 times in 20 beyond doubt. A sheet of another figure says nothing
    of this gate: calibrate again."""
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
    if sheet.limit_holds is False and limit <= sheet.limit:
        twice = next(t for size, t in sheet.caught if math.isclose(size, 2 * sheet.limit))
        return (
            f"{where} does not hold on this runner: with the limit at {_pct(sheet.limit)}, "
            f"its calibration caught a planted {_pct(2 * sheet.limit)} in only "
            f"{twice.text()} runs (19 in 20 are needed). Fix: raise the limit, or gate "
            f"this cell on a quieter runner and run {redo}"
        )
    missed = sheet.caught and all(t.n and t.high < CAUGHT_RATE for _, t in sheet.caught)
    if sheet.limit == limit and missed:
        largest = sheet.caught[-1][0]
        return (
            f"{where}: no planted slowdown up to {_pct(largest)} was caught 19 times in 20 by "
            "its calibration, so the gate misses most regressions here. Fix: gate this cell "
            f"on a quieter runner, or raise its limit and run {redo}"
        )
    return None


class CalibrationFile:
    """``<baseline_dir>/<fingerprint>/calibration.json``: every cell's plan, runs, sheet
    and checks on this machine's fingerprint, one entry per gate mode (``ab``,
    ``archived``), rewritten atomically after each run under the archive's lock,
    merged with what other processes wrote meanwhile. A file of version 1 (one entry
    per cell, same-run A/B) is read as that cell's ``ab`` entry."""

    def __init__(self, baseline_dir: Path, fingerprint: str) -> None:
        self.path = baseline_dir / fingerprint / CALIBRATION_FILE
        self.fingerprint = fingerprint
        self.cells: dict[str, dict[str, dict[str, Any]]] = (
            self._read() if self.path.exists() else {}
        )

    def _read(self) -> dict[str, dict[str, dict[str, Any]]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            cells = data["cells"]
            version = data.get("version")
            if version not in (1, _VERSION) or not isinstance(cells, dict):
                raise ValueError(f"version {version!r}")
            if version == 1:
                cells = {cell: {"ab": entry} for cell, entry in cells.items()}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(
                f"calibration file {self.path} cannot be read ({type(exc).__name__}: {exc})",
                expected=f"the JSON perfguard calibrate writes (version {_VERSION})",
                fix="move it away and calibrate again (perfguard never writes over a "
                "file it cannot read)",
            ) from exc
        return cells

    def _entry(self, cell: str, mode: str) -> dict[str, Any] | None:
        return self.cells.get(cell, {}).get(mode)

    def runs(self, cell: str, key: dict[str, Any]) -> tuple[list[CalibrationRun], bool]:
        """The kept runs of ``cell`` under plan ``key`` (its ``mode``'s entry), and
        whether runs under another plan were dropped."""
        entry = self._entry(cell, str(key["mode"]))
        if entry is None:
            return [], False
        if entry.get("plan") != key:
            return [], True
        return [CalibrationRun.from_dict(r) for r in entry.get("runs", [])], False

    def sheet(self, cell: str, mode: str = "ab") -> CellSheet | None:
        """``cell``'s sheet in gate ``mode``, made again from its kept plan and runs (so a
        sheet read is always one of this perfguard's making); None when the cell was not
        calibrated in that mode."""
        entry = self._entry(cell, mode)
        if entry is None:
            return None
        try:
            plan = entry["plan"]
            runs = [CalibrationRun.from_dict(r) for r in entry.get("runs", [])]
            kept = entry.get("sheet", {})
            cap = kept.get("max_pairs")
            return sheet_of(
                cell,
                str(plan["mode"]),
                str(plan["metric"]),
                float(plan["limit"]),
                runs,
                None if cap is None else int(cap),
                unit=str(kept.get("unit", "pairs")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StoreError(
                f"calibration file {self.path}: the {mode} entry of {cell} cannot be read "
                f"({type(exc).__name__}: {exc})",
                expected="the plan, runs and sheet perfguard calibrate writes",
                fix="calibrate the cell again with `perfguard calibrate --fresh -k ...` "
                "(or move the file away)",
            ) from exc

    def keep(
        self, cell: str, key: dict[str, Any], runs: Sequence[CalibrationRun], sheet: CellSheet
    ) -> None:
        mode = str(key["mode"])
        before = self._entry(cell, mode) or {}
        self.cells.setdefault(cell, {})[mode] = {
            "plan": key,
            "runs": [r.to_dict() for r in runs],
            "sheet": sheet.to_dict(),
            # The checks of this sheet (perfguard calibrate --check); a new plan drops them.
            "checks": before.get("checks", []) if before.get("plan") == key else [],
        }
        self._write(cell, mode)

    def keep_check(
        self, cell: str, mode: str, drift: Drift, runs: Sequence[CalibrationRun]
    ) -> None:
        """Add a check of ``cell``'s sheet in ``mode`` (its A/A runs and finding) to its
        history."""
        entry = self.cells[cell][mode]
        entry.setdefault("checks", []).append(
            {
                "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "finding": drift.to_dict(),
                "runs": [r.to_dict() for r in runs],
            }
        )
        self._write(cell, mode)

    def checks(self, cell: str, mode: str) -> int:
        """How many checks ``cell``'s sheet in ``mode`` has had."""
        return len((self._entry(cell, mode) or {}).get("checks", []))

    def _write(self, cell: str, mode: str) -> None:
        """Write this process's entry of ``cell`` in ``mode`` into the file as it is on
        disk now, under the archive's lock: a calibration of other cells running beside
        this one (another job on the runner) keeps its entries."""
        entry = self.cells[cell][mode]
        with DirectoryStore(self.path.parent.parent).locked(self.fingerprint, "calibration"):
            if self.path.exists():
                self.cells = self._read()
            self.cells.setdefault(cell, {})[mode] = entry
            data = {"version": _VERSION, "fingerprint": self.fingerprint, "cells": self.cells}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
