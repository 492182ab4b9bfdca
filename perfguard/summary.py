"""The terminal summary table: one row per scenario with P50/P95/P99 and throughput."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from perfguard.results import ScenarioResult
from perfguard.verdict import REGRESSION, UNCHANGED, ScenarioVerdict

_HEADERS = (
    "scenario",
    "backend",
    "device",
    "prec",
    "P50 ms",
    "P95 ms",
    "P99 ms",
    "thrpt/s",
    "vs base",
    "",
)


def _ms(value_ns: float) -> str:
    return f"{value_ns / 1e6:.3f}"


def _change(verdict: ScenarioVerdict | None) -> str:
    metric = verdict.metric("p95") if verdict is not None else None
    if metric is None or metric.change is None:
        return "-"
    return f"{metric.change * 100:+.1f}%"


def _row(result: ScenarioResult, verdict: ScenarioVerdict | None) -> tuple[str, ...]:
    lat = result.latency_ns
    if lat is None or result.throughput is None:
        figures = ("-", "-", "-", "-")
    else:
        figures = (_ms(lat.p50), _ms(lat.p95), _ms(lat.p99), f"{result.throughput:.1f}")
    notes = [result.status] if result.status != "passed" else []
    if not result.stable:
        notes.append("UNSTABLE")
    if verdict is not None:
        notes.append(verdict.verdict.upper() if verdict.verdict == REGRESSION else verdict.verdict)
    return (
        result.id,
        result.backend,
        result.device,
        result.precision,
        *figures,
        _change(verdict),
        " ".join(notes),
    )


def summary_lines(
    results: Sequence[ScenarioResult], verdicts: Mapping[str, ScenarioVerdict] | None = None
) -> list[str]:
    """Aligned text rows; numeric columns right-aligned; the P95 change vs the baseline."""
    found = verdicts or {}
    rows = [_HEADERS, *(_row(r, found.get(r.id)) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS))]
    numeric = {4, 5, 6, 7, 8}
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def verdict_notes(verdicts: Iterable[ScenarioVerdict]) -> list[str]:
    """One warning line per verdict a reviewer should read (anything but unchanged)."""
    lines = []
    for verdict in sorted(verdicts, key=lambda v: v.scenario_id):
        if verdict.verdict == UNCHANGED:
            continue
        reason = "; ".join(verdict.messages) or verdict.verdict
        lines.append(f"{verdict.verdict}: {verdict.scenario_id}: {reason}")
    return lines
