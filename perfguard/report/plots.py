"""Inline SVG figures for the HTML report.

Two kinds:

* full matplotlib figures (latency CDF, P95 trend, latency-vs-throughput) for
  the scenarios a reviewer looks at first; each costs tens of ms and KB
  (``benchmarks/notes.md``), so a report draws at most a budget of them (see
  ``perfguard.report.render``);
* hand-written sparklines (a few hundred bytes) for the rest, so a 500-scenario
  report stays fast and small.

No user-supplied string ever enters an SVG: axes carry numbers, commit labels
are reduced to hex digits, and cells in the scatter are numbered (the legend is
an HTML table, autoescaped). Output is deterministic: fixed hash salt, no date,
no metadata block; element ids are prefixed per figure so several inline SVGs
can share one document.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import NamedTuple

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

#: Points per CDF curve in a full figure / in a sparkline.
CDF_POINTS = 300
SPARK_POINTS = 48
FIGSIZE = (5.0, 2.6)
CURRENT_COLOR = "#d62728"
BASELINE_COLOR = "#1f77b4"
#: Change points (perfguard.judge.changes) on a trend: a dashed vertical line each.
CHANGE_COLOR = "#7f7f7f"
#: Archived points on the trend of a same-run A/B cell: other run conditions.
ARCHIVED_COLOR = "#a0a0a0"
ARCHIVED_LABEL = "archived, other run conditions"

_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_IDS = re.compile(r'(\bid="|url\(#|href="#)')
_counter = itertools.count()
_PCTS = ((50.0, "P50", ":"), (95.0, "P95", "--"), (99.0, "P99", "-."))


def reset_ids() -> None:
    """Restart the per-figure id prefixes (once per document: same input, same bytes)."""
    global _counter
    _counter = itertools.count()


def cdf_points(samples_ns: Sequence[int], n: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(latency ms, cumulative share) at ``n`` evenly spaced quantiles of the samples."""
    arr = np.sort(np.asarray(samples_ns, dtype=np.float64)) / 1e6
    if arr.size <= n:
        return arr, np.arange(1, arr.size + 1, dtype=np.float64) / arr.size
    probs = np.linspace(1.0 / arr.size, 1.0, n)
    idx = np.clip(np.ceil(probs * arr.size).astype(np.int64) - 1, 0, arr.size - 1)
    return arr[idx], probs


def _nearest_rank(sorted_ms: np.ndarray, q: float) -> float:
    k = int(np.clip(np.ceil(q / 100.0 * sorted_ms.size) - 1, 0, sorted_ms.size - 1))
    return float(sorted_ms[k])


def _style() -> AbstractContextManager[None]:
    """Deterministic, inline-friendly SVG: text as text, fixed id salt, small fonts."""
    return matplotlib.rc_context(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "perfguard",
            "font.size": 8.0,
            "legend.fontsize": 7.0,
        }
    )


def _finish(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = _METADATA.sub("", _PROLOG.sub("", buf.getvalue()))
    prefix = f"f{next(_counter)}-"
    return _IDS.sub(lambda m: m.group(1) + prefix, svg).strip()


def _figure(bottom: float = 0.17) -> Figure:
    # Fixed margins: constrained layout would double the cost of every figure.
    fig = Figure(figsize=FIGSIZE)
    FigureCanvasSVG(fig)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.96, bottom=bottom)
    return fig


def safe_label(commit: str) -> str:
    """A commit label fit for an SVG: the first 7 hex digits, or ``?``."""
    digits = re.sub(r"[^0-9a-fA-F]", "", commit)[:7]
    return digits or "?"


def cdf_svg(
    current: Sequence[int] | np.ndarray,
    baseline: Sequence[int] | np.ndarray | None,
    *,
    what: str = "latency",
    of: str = "requests",
) -> str:
    """Latency CDF of the current run (and the baseline), P50/P95/P99 as vertical lines;
    ``what`` names the figure on the x axis and ``of`` what the samples are."""
    series = [("current", current, CURRENT_COLOR)]
    if baseline is not None and len(baseline):
        series.insert(0, ("baseline", baseline, BASELINE_COLOR))
    with _style():
        fig = _figure()
        ax = fig.add_subplot()
        lo, hi = np.inf, 0.0
        for label, samples, color in series:
            xs, ys = cdf_points(samples)  # type: ignore[arg-type]
            lo, hi = min(lo, float(xs[0])), max(hi, float(xs[-1]))
            ax.step(xs, ys, where="post", color=color, label=label, linewidth=1.2)
            full = np.sort(np.asarray(samples, dtype=np.float64)) / 1e6
            for q, _name, style in _PCTS:
                ax.axvline(_nearest_rank(full, q), color=color, linestyle=style, linewidth=0.8)
        if lo > 0 and hi / lo > 20:
            ax.set_xscale("log")
        ax.set_xlabel(f"{what} (ms); lines: P50 dotted, P95 dashed, P99 dash-dot")
        ax.set_ylabel(f"share of {of}")
        ax.xaxis.label.set_fontsize(7.0)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        return _finish(fig)


def token_timeline_svg(current_ms: Sequence[float], baseline_ms: Sequence[float] | None) -> str:
    """One request's token arrivals: token number against ms since the request was sent
    (the first point is its TTFT, the slope after it its time per token), current red,
    baseline blue."""
    series = [("current", current_ms, CURRENT_COLOR)]
    if baseline_ms:
        series.insert(0, ("baseline", baseline_ms, BASELINE_COLOR))
    with _style():
        fig = _figure()
        ax = fig.add_subplot()
        for label, times, color in series:
            ax.step(
                list(times),
                range(1, len(times) + 1),
                where="post",
                color=color,
                label=label,
                linewidth=1.2,
                marker=".",
                markersize=3,
            )
        ax.set_xlabel("ms since the request was sent")
        ax.set_ylabel("tokens received")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        return _finish(fig)


def trend_svg(
    points: Sequence[tuple[str, float]], changes: Sequence[int] = (), ab_from: int | None = None
) -> str:
    """P95 (ms) over commits, oldest first; the last point (this run) highlighted.

    ``changes``: indices of the points where a change point's new level starts, each
    a dashed vertical line just before its point (one legend entry for them all).
    ``ab_from``: for a cell judged by same-run A/B, where its A/B points start (the
    base's, then this run's); the points before it are archived runs, measured under
    other conditions: drawn apart (grey hollow circles, ``ARCHIVED_LABEL``), never
    joined to the A/B points as one series.
    """
    labels = [safe_label(c) for c, _ in points]
    values = [v for _, v in points]
    xs = np.arange(len(values))
    with _style():
        fig = _figure(bottom=0.25)
        ax = fig.add_subplot()
        if ab_from is None:
            ax.plot(xs, values, color=BASELINE_COLOR, marker="." if len(xs) < 60 else None, lw=1)
        else:
            ax.plot(
                xs[:ab_from], values[:ab_from], color=ARCHIVED_COLOR, ls=":", lw=1,
                marker="o" if ab_from < 60 else None, mfc="none", ms=4, label=ARCHIVED_LABEL,
            )  # fmt: skip
            ax.axvline(ab_from - 0.5, color=ARCHIVED_COLOR, lw=0.8)
            ax.plot(xs[ab_from:], values[ab_from:], color=BASELINE_COLOR, lw=1)
            if len(xs) - ab_from > 1:
                ax.plot(xs[ab_from:-1], values[ab_from:-1], "s", color=BASELINE_COLOR,
                        label="same-run A/B: base")  # fmt: skip
        ax.plot(xs[-1:], values[-1:], "o", color=CURRENT_COLOR, label="this run")
        for n, i in enumerate(sorted(set(changes))):
            label = "change point (new level from here)" if n == 0 else None
            ax.axvline(i - 0.5, color=CHANGE_COLOR, ls="--", lw=1, label=label)
        step = max(1, len(xs) // 12)
        ticks = list(range(0, len(xs), step))
        if len(xs) - 1 - ticks[-1] < max(1, step // 2):
            ticks[-1] = len(xs) - 1  # the current run's label, not one crowding it
        else:
            ticks.append(len(xs) - 1)
        ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=45, ha="right")
        ax.set_ylabel("P95 (ms)")
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        return _finish(fig)


def scatter_svg(points: Sequence[tuple[float, float]], highlight: int) -> str:
    """P50 latency (ms) vs throughput of several cells of one model, numbered 1..n."""
    with _style():
        fig = _figure()
        ax = fig.add_subplot()
        lats = [lat for lat, _ in points]
        rates = [rate for _, rate in points]
        colors = [CURRENT_COLOR if i == highlight else BASELINE_COLOR for i in range(len(lats))]
        ax.scatter(lats, rates, c=colors, s=16)
        for i, (lat, rate) in enumerate(points):
            ax.annotate(str(i + 1), (lat, rate), textcoords="offset points", xytext=(3, 3))
        ax.set_xlabel("P50 latency (ms)")
        ax.set_ylabel("throughput (/s)")
        ax.grid(alpha=0.3)
        return _finish(fig)


class LoadPoint(NamedTuple):
    """One load level on the latency-vs-throughput curve (latencies in ms)."""

    label: str
    throughput: float
    p50_ms: float
    p95_ms: float
    unc_p95_ms: float | None = None
    invalid: bool = False  # drawn apart: its figures do not describe the model


class SloStep(NamedTuple):
    """One step of an SLO search: achieved throughput, the percentile (ms), outcome."""

    throughput: float
    p_ms: float
    outcome: str  # "ok" | "missed" | "invalid"


_STEP_STYLE = {
    "ok": ("o", "#2ca02c", "step met"),
    "missed": ("X", "#7f0000", "step missed"),
    "invalid": ("s", "#999999", "step invalid"),
}
LOAD_FIGSIZE = (5.6, 3.0)


def level_label(label: str) -> str:
    """A level id fit for an SVG: letters, digits, ``.+-`` only, at most 12 characters."""
    return re.sub(r"[^0-9A-Za-z.+-]", "", label)[:12] or "?"


def _load_lines(ax: Axes, segments: Sequence[Sequence[LoadPoint]], baseline: bool) -> None:
    """One polyline per segment; invalid levels as hollow grey markers, not joined."""
    color = BASELINE_COLOR if baseline else CURRENT_COLOR
    alpha = 0.45 if baseline else 1.0
    prefix = "baseline " if baseline else ""
    labelled: set[str] = set()

    def label(name: str) -> str | None:
        fresh = name not in labelled
        labelled.add(name)
        return name if fresh else None

    for points in segments:
        valid = [p for p in points if not p.invalid]
        xs = [p.throughput for p in valid]
        if valid:
            ax.plot(xs, [p.p50_ms for p in valid], color=color, alpha=alpha, lw=1.0, marker=".",
                    linestyle=":", label=label(f"{prefix}P50"))  # fmt: skip
            ax.plot(xs, [p.p95_ms for p in valid], color=color, alpha=alpha, lw=1.4, marker="o",
                    markersize=3.5, label=label(f"{prefix}P95"))  # fmt: skip
        unc = [(p.throughput, p.unc_p95_ms) for p in valid if p.unc_p95_ms is not None]
        if unc and not baseline:
            ax.plot([x for x, _ in unc], [y for _, y in unc], color=color, alpha=0.8, lw=1.0,
                    linestyle="--", label=label("P95 uncorrected"))  # fmt: skip
        bad = [p for p in points if p.invalid]
        if bad and not baseline:
            ax.scatter([p.throughput for p in bad], [p.p95_ms for p in bad], s=26,
                       facecolors="none", edgecolors="#777777",
                       label=label("invalid level"))  # fmt: skip
        if not baseline:
            for p in points:
                ax.annotate(level_label(p.label), (p.throughput, p.p95_ms),
                            textcoords="offset points", xytext=(3, 4), fontsize=6.5)  # fmt: skip


def load_curve_svg(
    current: Sequence[Sequence[LoadPoint]],
    baseline: Sequence[Sequence[LoadPoint]] = (),
    slo_targets_ms: Sequence[float] = (),
    slo_steps: Sequence[SloStep] = (),
) -> str:
    """Latency (ms) vs throughput (/s) of a scenario's load levels.

    ``current``/``baseline``: one polyline per load mode, levels in order (P50
    dotted, P95 solid, uncorrected P95 dashed; baseline fainter, in blue; invalid
    levels hollow grey markers off the lines). An SLO
    search adds its target as a horizontal line and its steps as markers.
    """
    with _style():
        fig = Figure(figsize=LOAD_FIGSIZE)
        FigureCanvasSVG(fig)
        fig.subplots_adjust(left=0.11, right=0.98, top=0.96, bottom=0.15)
        ax = fig.add_subplot()
        _load_lines(ax, baseline, baseline=True)
        _load_lines(ax, current, baseline=False)
        for target in slo_targets_ms:
            ax.axhline(target, color="#555555", linestyle="-.", lw=0.9, label="SLO target")
        for outcome, (marker, color, label) in _STEP_STYLE.items():
            steps = [s for s in slo_steps if s.outcome == outcome]
            if steps:
                ax.scatter([s.throughput for s in steps], [s.p_ms for s in steps], marker=marker,
                           color=color, s=22, zorder=3, label=label)  # fmt: skip
        ys = [p.p95_ms for line in (*current, *baseline) for p in line] + [
            p.p50_ms for line in current for p in line
        ]
        ys += [s.p_ms for s in slo_steps] + list(slo_targets_ms)
        positive = [y for y in ys if y > 0]
        if positive and max(positive) / min(positive) > 20:
            ax.set_yscale("log")
        ax.margins(x=0.08)
        ax.set_xlabel("throughput (samples/s)")
        ax.set_ylabel("latency (ms)")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=6.0, ncol=2)
        return _finish(fig)


# --------------------------------------------------------------------------- sparklines


def _polyline(xs: Sequence[float], ys: Sequence[float], color: str) -> str:
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{pts}"/>'


def cdf_sparkline(current: Sequence[int] | None, baseline: Sequence[int] | None) -> str:
    """A 240x60 CDF of baseline (blue) and current (red) on a shared linear axis; either
    may be absent (not both)."""
    width, height = 240.0, 60.0
    sides = ((baseline, BASELINE_COLOR), (current, CURRENT_COLOR))
    curves = [(cdf_points(s, SPARK_POINTS), c) for s, c in sides if s]
    lo = min(float(xs[0]) for (xs, _), _c in curves)
    hi = max(float(xs[-1]) for (xs, _), _c in curves)
    span = (hi - lo) or 1.0
    lines = [
        _polyline(
            [2 + (float(x) - lo) / span * (width - 4) for x in xs],
            [height - 2 - float(y) * (height - 4) for y in ys],
            color,
        )
        for (xs, ys), color in curves
    ]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="spark" width="{width:g}" '
        f'height="{height:g}" viewBox="0 0 {width:g} {height:g}" role="img">'
        f"<title>latency CDF {lo:.3f} ms to {hi:.3f} ms</title>{''.join(lines)}</svg>"
    )


def trend_sparkline(
    values: Sequence[float], changes: Sequence[int] = (), ab_from: int | None = None
) -> str:
    """A 240x40 line of P95 over commits (decimated), the current run as a red dot;
    ``changes`` (indices where a new level starts) as dashed grey vertical lines.
    ``ab_from`` (a same-run A/B cell): the archived points before it are a dotted grey
    line of their own, the A/B points (base, this run) a separate blue line."""
    width, height = 240.0, 40.0
    if ab_from is not None:
        return _ab_sparkline(values, ab_from, changes, width, height)
    vals = np.asarray(values, dtype=np.float64)
    if vals.size > 2 * SPARK_POINTS:
        keep = np.unique(np.linspace(0, vals.size - 1, 2 * SPARK_POINTS).astype(np.int64))
        xs_idx, vals = keep, vals[keep]
    else:
        xs_idx = np.arange(vals.size)
    lo, hi = float(vals.min()), float(vals.max())
    span = (hi - lo) or 1.0
    last = max(int(xs_idx[-1]), 1)
    xs = [2 + float(i) / last * (width - 8) for i in xs_idx]
    ys = [height - 3 - (float(v) - lo) / span * (height - 6) for v in vals]
    marks = sorted({i for i in changes if 0 < i < len(values)})
    lines = "".join(
        f'<line class="change" x1="{x:.1f}" y1="1" x2="{x:.1f}" y2="{height - 1:g}" '
        f'stroke="{CHANGE_COLOR}" stroke-width="1" stroke-dasharray="3,2"/>'
        for x in (2 + (i - 0.5) / last * (width - 8) for i in marks)
    )
    said = f"; {len(marks)} change point(s), dashed" if marks else ""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="spark" width="{width:g}" '
        f'height="{height:g}" viewBox="0 0 {width:g} {height:g}" role="img">'
        f"<title>P95 over {len(values)} commits, {lo:.3f} ms to {hi:.3f} ms{said}</title>"
        f"{lines}{_polyline(xs, ys, BASELINE_COLOR)}"
        f'<circle cx="{xs[-1]:.1f}" cy="{ys[-1]:.1f}" r="2.5" fill="{CURRENT_COLOR}"/></svg>'
    )


def _ab_sparkline(
    values: Sequence[float], ab_from: int, changes: Sequence[int], width: float, height: float
) -> str:
    """``trend_sparkline`` of a same-run A/B cell: archived points (decimated) and the A/B
    points on one axis, as two lines never joined."""
    archived = np.asarray(values[:ab_from], dtype=np.float64)
    if archived.size > 2 * SPARK_POINTS:
        keep = np.unique(np.linspace(0, archived.size - 1, 2 * SPARK_POINTS).astype(np.int64))
    else:
        keep = np.arange(archived.size)
    idx = [*(int(i) for i in keep), *range(ab_from, len(values))]
    vals = [float(values[i]) for i in idx]
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    last = max(len(values) - 1, 1)

    def x(i: float) -> float:
        return 2 + i / last * (width - 8)

    def y(v: float) -> float:
        return height - 3 - (v - lo) / span * (height - 6)

    old = [i for i in idx if i < ab_from]
    ab = [i for i in idx if i >= ab_from]
    past = _polyline([x(i) for i in old], [y(float(values[i])) for i in old], ARCHIVED_COLOR)
    past = past.replace("/>", ' stroke-dasharray="2,2"/>', 1) + "".join(
        f'<circle class="archived" cx="{x(i):.1f}" cy="{y(float(values[i])):.1f}" r="1.5" '
        f'fill="none" stroke="{ARCHIVED_COLOR}"/>'
        for i in old
    )
    marks = sorted({i for i in changes if 0 < i < ab_from})
    lines = "".join(
        f'<line class="change" x1="{x(i - 0.5):.1f}" y1="1" x2="{x(i - 0.5):.1f}" '
        f'y2="{height - 1:g}" stroke="{CHANGE_COLOR}" stroke-width="1" stroke-dasharray="3,2"/>'
        for i in marks
    )
    pair = _polyline([x(i) for i in ab], [y(float(values[i])) for i in ab], BASELINE_COLOR)
    end = ab[-1]
    said = f"; {len(marks)} change point(s), dashed" if marks else ""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="spark" width="{width:g}" '
        f'height="{height:g}" viewBox="0 0 {width:g} {height:g}" role="img">'
        f"<title>P95 of {ab_from} archived commits ({ARCHIVED_LABEL}), then the same-run "
        f"A/B; {lo:.3f} ms to {hi:.3f} ms{said}</title>{lines}{past}{pair}"
        f'<circle cx="{x(end):.1f}" cy="{y(float(values[end])):.1f}" r="2.5" '
        f'fill="{CURRENT_COLOR}"/></svg>'
    )
