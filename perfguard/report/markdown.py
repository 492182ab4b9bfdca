"""The short Markdown summary for a pull-request comment (``summary.md``).

It starts with a marker line so a workflow can find and update one comment,
lists only what a reviewer must read (regressions, improvements, accuracy
failures) and stays well under GitHub's comment limit for any number of
scenarios by truncating each list.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from perfguard.core.results import ScenarioResult
from perfguard.judge.verdict import ScenarioVerdict, VerdictKind
from perfguard.report.model import ReportInput
from perfguard.report.render import verdict_counts
from perfguard.report.tables import load_figures, load_notes, ordered_load_results

MARKER = "<!-- perfguard-summary -->"
#: Rows per list before "... and N more"; messages are cut to this many characters.
MAX_ROWS = 40
MAX_MESSAGE = 300


def cell(text: str, limit: int = MAX_MESSAGE) -> str:
    """Text safe for one Markdown table cell: one line, no pipes, no raw HTML."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        flat = flat[: limit - 3] + "..."
    return html.escape(flat, quote=False).replace("|", "\\|")


def _change(verdict: ScenarioVerdict) -> str:
    metric = verdict.metric("p95")
    if metric is None or metric.change is None:
        return "-"
    return f"{metric.change * 100:+.1f}%"


def _message(verdict: ScenarioVerdict) -> str:
    wanted = [m.message for m in verdict.metrics if m.verdict == verdict.verdict]
    return "; ".join(wanted or list(verdict.messages)) or verdict.verdict.value


def _table(title: str, rows: list[tuple[str, str, str]]) -> list[str]:
    if not rows:
        return []
    lines = [f"**{title} ({len(rows)})**", "", "| scenario | Δ P95 | why |", "| --- | --- | --- |"]
    lines += [f"| {cell(a, 200)} | {b} | {cell(c)} |" for a, b, c in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"| ... and {len(rows) - MAX_ROWS} more | | |")
    return [*lines, ""]


def _load_table(results: Sequence[ScenarioResult]) -> list[str]:
    """Load levels a reviewer must read: invalid ones and SLO searches (P95, thrpt, note)."""
    wanted = [
        r
        for r in ordered_load_results(results)
        if r.load is not None and (r.load.invalid or r.load.slo is not None)
    ]
    if not wanted:
        return []
    lines = [
        f"**Load ({len(wanted)})**",
        "",
        "| load cell | P95 ms | thrpt/s | note |",
        "| --- | --- | --- | --- |",
    ]
    for r in wanted[:MAX_ROWS]:
        figures = load_figures(r)
        note = (r.load.invalid if r.load else None) or "; ".join(load_notes(r.load))
        lines.append(f"| {cell(r.id, 200)} | {figures[3]} | {figures[6]} | {cell(note)} |")
    if len(wanted) > MAX_ROWS:
        lines.append(f"| ... and {len(wanted) - MAX_ROWS} more | | | |")
    return [*lines, ""]


def render_markdown(inp: ReportInput, *, link: str | None = None) -> str:
    """A PR-comment summary: header, regressions, improvements, accuracy failures, counts."""
    counts = verdict_counts(inp.verdicts)
    commit = inp.run.commit
    base = inp.baseline_info.get("commit") if inp.baseline_info else None
    base = base or next((v.baseline_commit for v in inp.verdicts if v.baseline_commit), None)
    failed = counts[VerdictKind.REGRESSION] > 0 and inp.gate
    status = "❌ regression" if failed else "✅ no regression"
    head = (
        f"### perfguard {status}: `{cell(commit.short)}`"
        + (f" ({cell(commit.branch, 80)})" if commit.branch else "")
        + f" vs baseline `{cell(base[:12]) if base else 'none'}`"
    )
    shown = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
    lines = [MARKER, head, "", shown or "no verdicts", ""]
    if link:
        lines += [f"[Full report]({link})", ""]
    ordered = sorted(inp.verdicts, key=lambda v: v.scenario_id)
    for kind, title in (
        (VerdictKind.REGRESSION, "Regressions"),
        (VerdictKind.IMPROVEMENT, "Improvements"),
    ):
        rows = [(v.scenario_id, _change(v), _message(v)) for v in ordered if v.verdict == kind]
        lines += _table(title, rows)
    acc = [
        (s.id, "-", "; ".join(s.accuracy.failures))
        for s in sorted(inp.run.scenarios, key=lambda s: s.id)
        if s.accuracy is not None and not s.accuracy.passed
    ]
    lines += _table("Accuracy failures", acc)
    lines += _load_table(inp.run.scenarios)
    also = (VerdictKind.NEW, VerdictKind.MISSING, VerdictKind.INCOMPARABLE, VerdictKind.INVALID)
    rest = [f"{counts[k]} {k.value}" for k in also if counts[k]]
    if rest:
        lines.append("Also: " + ", ".join(rest) + ".")
    return "\n".join(lines).rstrip() + "\n"
