"""Change points in a cell's per-commit history: the commit where a figure's level moved.

A gate compares one run with its baseline; a slowdown that arrives in steps under the
gate's limit, or one that a red gate let through, shows only in the series of archived
commits. This module scans each cell's series along the target branch's first-parent
history (the commits CI measured and archived) for level shifts.

The method (docs/changes.md says why): PELT, the exact penalised segmentation of
Killick, Fearnhead and Eckley (2012), from the ``ruptures`` package, with the L1
(median) cost on the log of each figure scaled by a robust estimate of its noise; every
boundary PELT proposes must then pass Yuen's test (Welch's t on trimmed means) between
the segments it separates (``ALPHA``). The L1 cost and the trimming make one outlying
run unable to open a segment of its own or to hide a real step; the noise scale makes
one penalty fit cells of any jitter; the test keeps a flat, noisy series free of
change points.

A change point names the first commit of the new level and the measured commit before
it, so ``git log BEFORE..COMMIT`` lists every commit that may have brought it (the
series has a hole wherever a commit was not archived).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.baseline.git import git_error, run_git
from perfguard.core.errors import GitError
from perfguard.records.results import ScenarioResult, Status

#: PELT's penalty per change point is ``PENALTY * log(n)`` in units of the series'
#: noise (L1 cost); ``MIN_SEGMENT`` commits at least per level; a boundary stands only
#: when Yuen's trimmed-mean test (``TRIM`` cut from each end) between its two segments
#: gives p < ``ALPHA``.
PENALTY = 2.0
MIN_SEGMENT = 4
TRIM = 0.2
ALPHA = 1e-3
#: Fewer points than this and no change point is looked for (two minimal segments).
MIN_POINTS = 2 * MIN_SEGMENT
#: Only the newest this many points of a series are scanned: PELT with jump 1 costs
#: O(n^2) cost evaluations (about 40 ms at 40 points, 0.6 s at 200 on a CI core).
MAX_POINTS = 100
#: How many first-parent commits are read (about two years of a busy main branch).
FIRST_PARENT_LIMIT = 10_000
# The noise scale never falls below this share of the level (a series of identical
# figures has no noise to measure; without a floor any rounding would be a "change").
_LOG_NOISE_FLOOR = 1e-4
_ABS_NOISE_FLOOR = 1e-7
# The MAD of a normal sample is this share of its standard deviation.
_MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class Metric:
    """One figure scanned per cell: how to read it and which direction is worse."""

    key: str
    label: str
    higher_is_worse: bool
    #: Changes compared on the log scale (latencies, rates) or as they are (cosine).
    relative: bool
    read: Callable[[ScenarioResult, bool], float | None]


def _latency(name: str) -> Callable[[ScenarioResult, bool], float | None]:
    def read(r: ScenarioResult, normalised: bool) -> float | None:
        lat = r.latency_ns
        if lat is None:
            return None
        ns = float(getattr(lat, name))
        if normalised:
            return ns / r.canary_ns if r.canary_ns else None
        return ns / 1e6

    return read


def _throughput(r: ScenarioResult, _normalised: bool) -> float | None:
    return r.throughput if r.throughput else None


def _cosine(r: ScenarioResult, _normalised: bool) -> float | None:
    """The worst output's ``cosine_mean`` against the reference cell, where checked."""
    report = r.accuracy.report if r.accuracy is not None else None
    if report is None:
        return None
    found = [o.values.get("cosine_mean") for o in report.outputs]
    values = [float(v) for v in found if v is not None and math.isfinite(v)]
    return min(values) if values else None


METRICS: tuple[Metric, ...] = (
    Metric("p50", "P50", True, True, _latency("p50")),
    Metric("p95", "P95", True, True, _latency("p95")),
    Metric("throughput", "throughput", False, True, _throughput),
    Metric("cosine", "cosine", False, False, _cosine),
)
_ORDER = {m.key: i for i, m in enumerate(METRICS)}
#: The gated figures, which a report scans (its trend plot is P95; its summary names
#: the regressions no gate caught): half the cost of every metric.
GATED = ("p95", "cosine")


@dataclass(frozen=True)
class ChangePoint:
    """A level shift of one figure of one cell, starting at ``commit``.

    ``before``/``after`` are the medians of the two segments it separates (ms for
    P50/P95, or a multiple of the canary when ``normalised``; requests per second;
    cosine); ``change`` is ``after / before - 1``. ``previous`` is the measured commit
    before it: ``git log previous..commit`` holds the cause. ``worse``: the shift is
    in the regressing direction. ``gated``: the run archived at ``commit`` recorded the
    cell as failed, so a gate said no there (see :func:`uncaught`).
    """

    scenario_id: str
    metric: str
    label: str
    commit: str
    previous: str
    index: int
    points: int
    before: float
    after: float
    change: float
    p_value: float
    worse: bool
    normalised: bool
    gated: bool

    @property
    def unit(self) -> str:
        if self.metric in ("p50", "p95"):
            return "x canary" if self.normalised else "ms"
        return "/s" if self.metric == "throughput" else ""

    @property
    def git_range(self) -> str:
        return f"{self.previous}..{self.commit}"

    @property
    def uncaught(self) -> bool:
        """A regression the gate at its commit did not stop (see :func:`uncaught`)."""
        return self.worse and not self.gated

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario_id": self.scenario_id,
            "metric": self.metric,
            "commit": self.commit,
            "previous": self.previous,
            "range": self.git_range,
            "index": self.index,
            "points": self.points,
            "before": self.before,
            "after": self.after,
            "unit": self.unit,
            "change": self.change,
            "p_value": self.p_value,
            "worse": self.worse,
            "normalised": self.normalised,
            "gated": self.gated,
        }


@dataclass(frozen=True)
class Shift:
    """One boundary in a bare series: the new level starts at ``index``."""

    index: int
    before: float
    after: float
    p_value: float


def _noise(y: np.ndarray, floor: float) -> float:
    """The series' noise scale from its successive differences (a level shift moves
    one difference only, so the median ignores it) by the MAD, normal-consistent."""
    d = np.diff(y)
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(_MAD_TO_SD * mad / math.sqrt(2.0), floor)


def _pelt(y: np.ndarray, noise: float, penalty: float, min_segment: int) -> list[int]:
    """PELT's segment ends (the last is ``len(y)``) on ``y`` in units of ``noise``."""
    import ruptures  # imports scipy and its own C extensions: only when scanning

    # Rounded so a series in other units (ms or s: log y moved by a constant) gives the
    # same segmentation, not one decided by the last bit of a near tie.
    z = np.round((y - np.median(y)) / noise, 6).reshape(-1, 1)
    algo = ruptures.Pelt(model="l1", min_size=min_segment, jump=1).fit(z)
    return [int(b) for b in algo.predict(pen=penalty * math.log(y.size))]


def _segments_differ(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sided p-value of Yuen's test (Welch's t on 20%-trimmed means) of two
    segments; 0 between two plateaus that differ (a deterministic figure such as a
    cosine), 1 between identical ones."""
    from scipy.stats import ttest_ind  # scipy.stats takes seconds to import cold

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(ttest_ind(a, b, equal_var=False, trim=TRIM).pvalue)
    if math.isfinite(p):
        return p
    return 0.0 if np.median(a) != np.median(b) else 1.0


def find_shifts(
    values: Sequence[float],
    *,
    relative: bool = True,
    penalty: float = PENALTY,
    min_segment: int = MIN_SEGMENT,
    alpha: float = ALPHA,
) -> list[Shift]:
    """The level shifts of one series (oldest first), by PELT and a rank test.

    ``relative``: the values are positive and compared by ratio (log scale).
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2 * min_segment or not np.all(np.isfinite(x)):
        return []
    if relative:
        if np.any(x <= 0):
            return []
        y, floor = np.log(x), _LOG_NOISE_FLOOR
    else:
        y, floor = x, _ABS_NOISE_FLOOR * max(1.0, float(np.median(np.abs(x))))
    ends = _pelt(y, _noise(y, floor), penalty, min_segment)
    starts = [0, *ends[:-1]]
    shifts = []
    for i in range(1, len(starts)):
        left, right = x[starts[i - 1] : starts[i]], x[starts[i] : ends[i]]
        p = _segments_differ(y[starts[i - 1] : starts[i]], y[starts[i] : ends[i]])
        if p < alpha:
            shifts.append(Shift(starts[i], float(np.median(left)), float(np.median(right)), p))
    return shifts


def cell_changes(
    scenario_id: str,
    history: Sequence[tuple[str, ScenarioResult]],
    metrics: Collection[str] | None = None,
) -> list[ChangePoint]:
    """The change points of one cell's ``metrics`` (default: all), oldest commit first.

    ``history``: (commit, result) along the first-parent history, oldest first; only
    the newest ``MAX_POINTS`` are scanned. Latencies are canary-normalised when every
    point of the series has a canary.
    """
    history = history[-MAX_POINTS:]
    found = []
    for metric in METRICS:
        if metrics is not None and metric.key not in metrics:
            continue
        normalised = (
            metric.relative
            and metric.key in ("p50", "p95")
            and all(r.canary_ns for _, r in history if r.latency_ns is not None)
        )
        points = [(sha, r, metric.read(r, normalised)) for sha, r in history]
        kept = [(sha, r, v) for sha, r, v in points if v is not None]
        for shift in find_shifts([v for _, _, v in kept], relative=metric.relative):
            sha, result, _ = kept[shift.index]
            rising = shift.after > shift.before
            found.append(
                ChangePoint(
                    scenario_id=scenario_id,
                    metric=metric.key,
                    label=f"{metric.label}/canary" if normalised else metric.label,
                    commit=sha,
                    previous=kept[shift.index - 1][0],
                    index=shift.index,
                    points=len(kept),
                    before=shift.before,
                    after=shift.after,
                    change=shift.after / shift.before - 1.0 if shift.before else math.inf,
                    p_value=shift.p_value,
                    worse=rising == metric.higher_is_worse,
                    normalised=normalised,
                    gated=result.status is Status.FAILED,
                )
            )
    order = {sha: i for i, (sha, _) in enumerate(history)}
    return sorted(found, key=lambda c: (order[c.commit], _ORDER[c.metric]))


def history_changes(
    history: Mapping[str, Sequence[tuple[str, ScenarioResult]]],
    first_parent: Collection[str] | None = None,
    metrics: Collection[str] | None = GATED,
) -> dict[str, list[ChangePoint]]:
    """Change points per scenario id of a report's history (ids without any left out),
    of the gated figures unless ``metrics`` (None: all) says otherwise.

    ``first_parent``: when given, only those commits are scanned (a report's history
    holds every archived ancestor, merged-in branches' commits too).
    """
    out = {}
    for sid, series in history.items():
        kept = [(sha, r) for sha, r in series if first_parent is None or sha in first_parent]
        if changes := cell_changes(sid, kept, metrics):
            out[sid] = changes
    return out


def archive_changes(
    history: Mapping[str, Sequence[tuple[str, ScenarioResult]]],
    rev: str | None,
    cwd: Path | None = None,
) -> dict[str, list[ChangePoint]]:
    """A report's change points: its archived history along ``rev``'s first-parent
    chain when git in ``cwd`` (default: here) knows ``rev``, else as the history is."""
    chain = first_parent_or_none(cwd or Path.cwd(), rev)
    return history_changes(history, None if chain is None else set(chain))


def uncaught(changes: Mapping[str, Sequence[ChangePoint]]) -> list[ChangePoint]:
    """Regressions on the target branch that no gate stopped, oldest commit first per cell.

    The archive keeps, per commit, the figures and the status of each cell, not the
    verdicts of the pull requests' own runs. So a change point counts as caught when
    the run archived at its commit recorded the cell as ``failed`` (a gate said no
    there and the baseline was saved anyway, or the failure was accepted); one whose
    cell passed there (a step under the gate's limit, a gate off, a regression that
    crept in over commits) was caught by nobody.
    """
    return [c for cs in changes.values() for c in cs if c.uncaught]


def first_parent(cwd: Path, rev: str = "HEAD", limit: int = FIRST_PARENT_LIMIT) -> list[str]:
    """``rev``'s first-parent chain, nearest first (``git rev-list --first-parent``)."""
    args = ("rev-list", "--first-parent", f"--max-count={limit}", rev)
    proc = run_git(cwd, *args)
    if proc.returncode != 0:
        raise git_error(cwd, args, proc)
    return proc.stdout.split()


def first_parent_or_none(cwd: Path, rev: str | None) -> list[str] | None:
    """:func:`first_parent`, or None when git cannot say (no checkout, unknown commit)."""
    if not rev:
        return None
    try:
        return first_parent(cwd, rev)
    except GitError:
        return None
