"""The terminal summary table: one row per scenario with P50/P95/P99 and throughput."""

from __future__ import annotations

from collections.abc import Sequence

from perfguard.results import ScenarioResult

_HEADERS = ("scenario", "backend", "device", "prec", "P50 ms", "P95 ms", "P99 ms", "thrpt/s", "")


def _ms(value_ns: float) -> str:
    return f"{value_ns / 1e6:.3f}"


def _row(result: ScenarioResult) -> tuple[str, ...]:
    lat = result.latency_ns
    if lat is None or result.throughput is None:
        figures = ("-", "-", "-", "-")
    else:
        figures = (_ms(lat.p50), _ms(lat.p95), _ms(lat.p99), f"{result.throughput:.1f}")
    note = result.status if result.status != "passed" else ("UNSTABLE" if not result.stable else "")
    return (result.id, result.backend, result.device, result.precision, *figures, note)


def summary_lines(results: Sequence[ScenarioResult]) -> list[str]:
    """Aligned text rows; numeric columns right-aligned."""
    rows = [_HEADERS, *(_row(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS))]
    numeric = {4, 5, 6, 7}
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines
