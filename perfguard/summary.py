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


def accuracy_lines(results: Sequence[ScenarioResult]) -> list[str]:
    """One line per cell with accuracy figures: the headline metrics and the verdict."""
    lines = []
    for result in results:
        accuracy = result.accuracy
        if not accuracy:
            continue
        parts = []
        report = accuracy.get("report") or {}
        for output in report.get("outputs", ()):
            values = output.get("values", {})
            # Cosines near 1 need six digits: 0.99996 must not read as "1".
            figures = [
                f"{label} {values[key]:.{digits}g}"
                for key, label, digits in (
                    ("cosine_mean", "cos mean", 6),
                    ("cosine_min", "min", 6),
                    ("kl_mean", "KL", 4),
                    ("max_abs_err", "max abs err", 4),
                    ("mismatch_share", "mismatch", 4),
                )
                if values.get(key) is not None
            ]
            parts.append(f"{output.get('name')}: " + ", ".join(figures))
        if accuracy.get("reference"):
            parts.append(f"vs {accuracy['reference']}")
        task = accuracy.get("task_metric") or {}
        if task.get("current") is not None:
            ref = task.get("reference")
            parts.append(
                f"task {task['current']:.4g}" + (f" (ref {ref:.4g})" if ref is not None else "")
            )
        baseline = accuracy.get("baseline") or {}
        for output in baseline.get("outputs", ()):
            cos = output.get("values", {}).get("cosine_min")
            if cos is not None:
                parts.append(f"vs baseline: {output.get('name')} cos min {cos:.4g}")
        if not parts:  # e.g. the reference cell itself, with nothing to compare yet
            continue
        verdict = "ok" if accuracy.get("passed", True) else "FAILED"
        lines.append(f"{result.id}: {'; '.join(parts)} [{verdict}]")
    return lines
