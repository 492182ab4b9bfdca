"""The report's Load sections: one per scenario group measured under concurrent load.

A group is the load cells sharing suite, scenario and every cell-id part but the
level (``perfguard.report.tables.load_group``). Each section has the level table (the
terminal's figures), a latency-vs-throughput curve, the batching trade-off of
batched levels, the SLO search and, prominently, why a level is invalid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from perfguard.judge.outcome import CellOutcome
from perfguard.records.figures import LatencySummary
from perfguard.records.loadfigures import BatchingFigures, LoadFigures, SloSearch
from perfguard.records.results import ScenarioResult
from perfguard.report import plots
from perfguard.report.model import ReportInput
from perfguard.report.tables import (
    LOAD_HEADERS,
    batching_note,
    level_notes,
    load_figures,
    load_group,
    load_level_key,
    memory_detail,
    memory_growth,
    slo_level,
    slo_note,
)

#: Groups drawn with a full curve (the rest get the tables only).
LOAD_PLOT_BUDGET = 24
#: Width in px of the longest bar of a batch-size histogram.
BAR_PX = 120


def _f(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(float(value), spec)


def _ms(summary: LatencySummary | None, key: str) -> float | None:
    return None if summary is None else float(getattr(summary, key)) / 1e6


@dataclass
class BatchingView:
    """What a batched level gained in throughput and paid in latency."""

    level: str
    headline: str
    gained: str
    paid: str
    histogram: list[tuple[str, int, int]] = field(default_factory=list)  # size, count, px


@dataclass
class SloView:
    level: str
    headline: str
    met: bool
    steps: list[tuple[str, str, str, str]] = field(default_factory=list)  # level, P, thrpt, result
    column: str = "percentile ms"  # what the second column holds


@dataclass
class LoadLevel:
    sid: str
    anchor: str
    figures: tuple[str, ...]
    notes: str
    invalid: str | None
    details: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class LoadGroup:
    key: str
    anchor: str
    levels: list[LoadLevel]
    curve: Markup | None = None
    caption: str = ""
    invalid: list[tuple[str, str]] = field(default_factory=list)  # level, reason
    batching: list[BatchingView] = field(default_factory=list)
    slo: list[SloView] = field(default_factory=list)
    memory: str = ""  # the memory per added stream (tables.MemoryGrowth), or ""
    #: A generative scenario's token figures per level (``token_rows``), else empty.
    tokens: list[tuple[str, ...]] = field(default_factory=list)


#: The columns of a generative scenario's token table, one row per level.
TOKEN_HEADERS = (
    "level",
    "TTFT P50 ms",
    "TTFT P95 ms",
    "TPOT P50 ms",
    "TPOT P95 ms",
    "output tokens/s",
    "goodput/s (good share)",
)


def token_rows(
    members: Sequence[ScenarioResult], base: Sequence[ScenarioResult]
) -> list[tuple[str, ...]]:
    """TTFT, TPOT, output tokens/s and goodput of each generative level, in level order,
    each with the baseline's figure of the same level after an arrow (``4.10 -> 4.52``):
    how they move with concurrency or rate, and how this change moved them."""
    by_level = {r.load.level: r for r in base if r.load is not None}
    rows = []
    for r in sorted(members, key=lambda r: load_level_key(r.load)):
        if r.tokens is None or r.load is None:
            continue
        old = by_level.get(r.load.level)
        cells = [r.load.level]
        for summary, key in (
            ("ttft_ns", "p50"),
            ("ttft_ns", "p95"),
            ("tpot_ns", "p50"),
            ("tpot_ns", "p95"),
        ):
            cells.append(
                _moved(
                    _ms(getattr(old.tokens, summary), key) if old and old.tokens else None,
                    _ms(getattr(r.tokens, summary), key),
                    ".3f",
                )
            )
        cells.append(
            _moved(old.tokens.tokens_per_s if old and old.tokens else None, r.tokens.tokens_per_s)
        )
        good = r.load.goodput
        old_good = old.load.goodput if old and old.load else None
        cells.append(
            f"{_moved(old_good.per_s if old_good else None, good.per_s)} ({good.share * 100:.0f}%)"
            if good is not None
            else "-"
        )
        rows.append(tuple(cells))
    return rows


def _moved(old: float | None, new: float | None, spec: str = ".1f") -> str:
    """``new``, after the baseline's ``old`` and an arrow when there is one."""
    if old is None:
        return _f(new, spec)
    return f"{_f(old, spec)} -> {_f(new, spec)}"


def batching_view(level: str, batching: BatchingFigures) -> BatchingView:
    probe = batching.probe
    cap = f"{_f(probe.capacity_unbatched)}/s -> {_f(probe.capacity_batched)}/s"
    service = (
        f"; model call {_f(probe.service_ms_batch1, '.3g')} ms at batch 1, "
        f"{_f(probe.service_ms_max_batch, '.3g')} ms at batch {batching.max_batch}"
    )
    wait = batching.wait_ns
    paid = (
        f"queue wait P50 {_f(_ms(wait, 'p50'), '.3g')} ms, P95 {_f(_ms(wait, 'p95'), '.3g')} ms; "
        f"mean batch {_f(batching.mean_batch)} over {batching.batches} "
        f"batches (max {batching.max_batch}, "
        f"wait up to {_f(batching.max_wait_ms, 'g')} ms)"
    )
    counts = sorted(
        ((str(k), int(v)) for k, v in batching.sizes.items()),
        key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0, kv[0]),
    )
    top = max((c for _, c in counts), default=0) or 1
    return BatchingView(
        level=level,
        headline=batching_note(batching),
        gained=f"x{_f(probe.gain, '.2f')} capacity ({cap}{service})",
        paid=paid,
        histogram=[(k, c, max(1, round(c / top * BAR_PX))) for k, c in counts],
    )


def slo_view(level: str, slo: SloSearch) -> SloView:
    steps = []
    goodput = slo.goodput_share is not None
    for step in slo.steps:
        outcome = f"invalid: {step.invalid}" if step.invalid else ("met" if step.ok else "missed")
        share = f"{step.good_share * 100:.1f}%" if step.good_share is not None else "-"
        steps.append(
            (
                slo_level(slo, step.level),
                share if goodput else _f(step.p_ms, ".3f"),
                _f(step.throughput),
                outcome,
            )
        )
    column = "good share" if goodput else f"P{float(slo.percentile):g} ms"
    return SloView(level, slo_note(slo), slo.best_level is not None, steps, column)


def _details(load: LoadFigures) -> list[tuple[str, str]]:
    out = []
    if load.is_open:
        out.append(
            (
                "rates",
                f"asked {_f(load.rate_asked)}/s, sent {_f(load.rate_sent)}/s, "
                f"completed {_f(load.rate_achieved)}/s ({load.arrivals or '-'})",
            )
        )
    else:
        out.append(("clients", str(load.concurrency)))
    out.append(
        (
            "requests",
            f"{load.requests} sent, {load.completed} completed, "
            f"{load.failed} failed, {load.unserved} unserved "
            f"in {_f(load.duration_s, '.2f')} s; {load.workers} worker(s), "
            f"sessions {load.sessions}",
        )
    )
    late = load.late
    out.append(
        (
            "late dispatch",
            f"{late.count} ({float(late.share) * 100:.1f}%) more "
            f"than {_f(late.limit_ms, 'g')} ms late (limit "
            f"{float(late.max_share) * 100:.1f}%); lag P99 "
            f"{_f(late.lag_p99_ms, '.3g')} ms, "
            f"max {_f(late.lag_max_ms, '.3g')} ms",
        )
    )
    if load.shortfall:
        out.append(("fell short", load.shortfall))
    good = load.goodput
    if good is not None:
        out.append(
            (
                "goodput",
                f"{good.good} of {load.requests} requests ({good.share * 100:.1f}%) within TTFT "
                f"{_f(good.ttft_ms, 'g')} ms and TPOT {_f(good.tpot_ms, 'g')} ms: "
                f"{_f(good.per_s, '.3g')}/s",
            )
        )
    memory = memory_detail(load)
    if memory is not None:
        out.append(("host memory", memory))
    for error, count in sorted(load.errors.items()):
        out.append(("error", f"{error} (x{count})"))
    return out


def _point(result: ScenarioResult) -> plots.LoadPoint | None:
    load, lat = result.load, result.latency_ns
    if load is None:
        return None
    thrpt = result.throughput if result.throughput is not None else load.throughput
    if lat is None or load.slo is not None or thrpt is None:
        return None
    unc = _ms(load.uncorrected_ns, "p95") if load.is_open else None
    return plots.LoadPoint(
        load.level,
        float(thrpt),
        lat.p50 / 1e6,
        lat.p95 / 1e6,
        unc,
        bool(load.invalid),
    )


def _segments(results: Sequence[ScenarioResult]) -> list[list[plots.LoadPoint]]:
    by_mode: dict[str, list[plots.LoadPoint]] = {}
    for r in sorted(results, key=lambda r: load_level_key(r.load)):
        point = _point(r)
        if point is not None and r.load is not None:
            by_mode.setdefault(r.load.mode, []).append(point)
    return list(by_mode.values())


def _steps(slo: SloSearch) -> list[plots.SloStep]:
    out = []
    for step in slo.steps:
        if step.p_ms is None:
            continue
        outcome = "invalid" if step.invalid else ("ok" if step.ok else "missed")
        out.append(plots.SloStep(float(step.throughput), float(step.p_ms), outcome))
    return out


def _group(
    index: int,
    key: str,
    members: list[ScenarioResult],
    base: list[ScenarioResult],
    anchors: Mapping[str, str],
    draw: bool,
    side: str = "the baseline",
    outcomes: Mapping[str, CellOutcome] | None = None,
) -> LoadGroup:
    outcomes = outcomes or {}
    group = LoadGroup(key=key, anchor=f"load{index}", levels=[])
    targets: list[float] = []
    steps: list[plots.SloStep] = []
    for r in members:
        load = r.load
        assert load is not None  # only load cells are grouped
        level = load.level
        invalid = load.invalid or None
        notes = level_notes(r, outcomes.get(r.id))
        figures, details = load_figures(r), _details(load)
        group.levels.append(
            LoadLevel(r.id, anchors.get(r.id, ""), figures, "; ".join(notes), invalid, details)
        )
        if invalid:
            group.invalid.append((level, invalid))
        if load.batching is not None:
            group.batching.append(batching_view(level, load.batching))
        slo = load.slo
        if slo is not None:
            group.slo.append(slo_view(level, slo))
            if slo.target_ms is not None:  # a goodput search has no latency target
                targets.append(float(slo.target_ms))
            steps += _steps(slo)
    growth = memory_growth(members)
    group.memory = growth.text() if growth is not None else ""
    group.tokens = token_rows(members, base)
    current = _segments(members)
    if draw and (any(current) or steps):
        baseline = _segments(base)
        group.curve = Markup(plots.load_curve_svg(current, baseline, targets, steps))
        group.caption = curve_caption(current, baseline, targets, steps, side)
    return group


#: How ``plots.load_curve_svg`` marks each SLO step outcome.
_STEP_WORDS = {"ok": "circle met", "missed": "cross missed", "invalid": "square invalid"}


def curve_caption(
    current: Sequence[Sequence[plots.LoadPoint]],
    baseline: Sequence[Sequence[plots.LoadPoint]],
    targets: Sequence[float],
    steps: Sequence[plots.SloStep],
    side: str = "the baseline",
) -> str:
    """The load curve's caption, naming only what ``plots.load_curve_svg`` draws from the
    same arguments: no baseline curve (no valid baseline level), no mention of one."""
    valid = [p for line in current for p in line if not p.invalid]
    base = [p for line in baseline for p in line if not p.invalid]
    parts = []
    if valid:
        lines = ["P50 dotted", "P95 solid"]
        if any(p.unc_p95_ms is not None for p in valid):
            lines.append("uncorrected P95 dashed")
        who = "this run in red"
        if base:
            s = "s" if len(base) != 1 else ""
            who += f", {side}'s {len(base)} level{s} fainter in blue"
        parts.append(f"latency vs throughput by level: {', '.join(lines)} ({who})")
    if any(p.invalid for line in current for p in line):
        parts.append("invalid levels as hollow grey circles, off the lines")
    if targets:
        parts.append("SLO target dash-dot")
    shown = [w for outcome, w in _STEP_WORDS.items() if any(s.outcome == outcome for s in steps)]
    if shown:
        parts.append(f"SLO search steps as markers ({', '.join(shown)})")
    return "; ".join(parts)


def build_load_groups(inp: ReportInput, anchors: Mapping[str, str]) -> list[LoadGroup]:
    """One group per load curve of the run, in id order; ``anchors``: scenario id -> section."""
    groups: dict[str, list[ScenarioResult]] = {}
    for r in sorted(inp.run.scenarios, key=lambda s: s.id):
        if r.load is not None:
            groups.setdefault(load_group(r), []).append(r)
    ab_judged = {v.scenario_id for v in inp.verdicts if v.mode == "ab"}
    outcomes = {c.scenario_id: c for c in inp.outcome.cells}
    base: dict[str, list[ScenarioResult]] = {}
    for r in inp.baseline.values():
        if r.load is not None:
            base.setdefault(load_group(r), []).append(r)
    return [
        _group(
            i,
            key,
            sorted(members, key=lambda r: load_level_key(r.load)),
            base.get(key, []),
            anchors,
            i < LOAD_PLOT_BUDGET,
            _side(base.get(key, []), ab_judged),
            outcomes,
        )
        for i, (key, members) in enumerate(groups.items())
    ]


def _side(base: Sequence[ScenarioResult], ab_judged: set[str]) -> str:
    """How a group's caption names its base: levels of a same-run A/B are the A/B base's,
    the rest (an SLO search judged on the archive) the baseline's."""
    drawn = [r for r in base if r.load is not None and r.load.slo is None]
    return "the A/B base" if drawn and all(r.id in ab_judged for r in drawn) else "the baseline"


def load_context(inp: ReportInput, anchors: Mapping[str, str]) -> dict[str, Any]:
    """The template variables of the Load sections (``load_groups``, headers, invalid count)."""
    groups = build_load_groups(inp, anchors)
    return {
        "load_groups": groups,
        "load_headers": LOAD_HEADERS[1:-1],
        "token_headers": TOKEN_HEADERS,
        "load_invalid": [(g.anchor, g.key, lvl, why) for g in groups for lvl, why in g.invalid],
    }


def load_fact(result: ScenarioResult) -> str | None:
    """A one-line description of a load cell for its scenario section, or None."""
    load = result.load
    if load is None:
        return None
    if load.mode == "closed":
        how = f"closed loop, {load.concurrency} clients"
    else:
        how = f"open loop, {_f(load.rate_asked)}/s {load.arrivals or ''}".rstrip()
    return f"{how} (level {load.level}): latencies are corrected, see the Load section"
