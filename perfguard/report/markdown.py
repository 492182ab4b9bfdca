"""The short Markdown summary for a pull-request comment (``summary.md``).

It starts with a marker line so a workflow can find and update one comment. The
heading tells the run's outcome (``perfguard.judge.outcome``: the same one pytest's
exit status, the terminal and the HTML report give) and the counts once; then one
table per outcome worth reading (regressions, accuracy failures, errors and failed
cells with their message, inconclusive cells, blind gates, improvements; a cell is in
the table of its outcome and in that of each finding beside it, such as the
inconclusive latency gate of a cell that failed accuracy; repeated same-reason cells
such as ``new`` are one line), and what this runner's calibration sheet says of each
calibrated cell (the limits tighter than it allows first). What GPU telemetry could not see
(NVML off, throttling unreadable) is said once, before the tables. Each list is truncated to
``MAX_ROWS``, and the whole text, once escaped, is cut at whole lines to fit GitHub's
comment limit (``COMMENT_LIMIT`` characters), ending with a line that says so and
points at the full report: escaping can multiply a message's length (``&`` becomes
``&amp;``), so only a cut after escaping bounds what GitHub receives.

Everything that came from outside (scenario ids, commits, branch names, messages) is
made inert: names become code spans (``md_code``), messages running text with no
link, mention, reference or HTML left live (``md_text``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfguard.core.text import md_code, md_text
from perfguard.judge.changes import ChangePoint, uncaught
from perfguard.judge.outcome import CellOutcome, Outcome
from perfguard.records.opprofile import diff_profiles
from perfguard.records.results import ScenarioResult
from perfguard.report.model import ReportInput
from perfguard.report.profilediff import markdown_headline
from perfguard.report.tables import (
    busy_host,
    cells_named,
    load_figures,
    load_notes,
    ordered_load_results,
    telemetry_gaps,
)

MARKER = "<!-- perfguard-summary -->"
#: Rows per list before "... and N more"; messages are cut to this many characters.
MAX_ROWS = 40
MAX_MESSAGE = 300
MAX_NAME = 200
#: GitHub refuses an issue or pull-request comment longer than this many characters.
COMMENT_LIMIT = 65_536

#: The tables, in order: (outcome, title). Outcomes not listed (passed, skipped, new,
#: missing, incomparable) are one grouped line each under "Also".
TABLES: tuple[tuple[Outcome, str], ...] = (
    (Outcome.REGRESSION, "Regressions"),
    (Outcome.ACCURACY, "Accuracy failures"),
    (Outcome.ERROR, "Errors"),
    (Outcome.FAILED, "Failed cells (not measured)"),
    (Outcome.INCONCLUSIVE, "Inconclusive"),
    (Outcome.BLIND, "Blind gates (passed, but could not see their limit)"),
    (Outcome.IMPROVEMENT, "Improvements"),
)


def _change(cell: CellOutcome) -> str:
    return "-" if cell.change is None else f"{cell.change * 100:+.1f}%"


def _why(kind: Outcome, cell: CellOutcome, reason: str) -> str:
    """A row's why: the finding's reason; one beside the cell's outcome says so first."""
    why = reason or kind.label
    return why if cell.outcome is kind else f"beside its {cell.outcome.label}: {why}"


def _table(
    title: str,
    kind: Outcome,
    cells: Sequence[tuple[CellOutcome, str]],
    where: Mapping[str, str] | None = None,
) -> list[str]:
    """A table of ``cells`` with the finding ``kind`` (each with that finding's reason);
    ``where`` adds a cell's "where the time went" line to its why."""
    if not cells:
        return []
    where = where or {}
    lines = [f"**{title} ({len(cells)})**", "", "| scenario | Δ P95 | why |", "| --- | --- | --- |"]
    lines += [
        f"| {md_code(c.scenario_id, MAX_NAME)} | {_change(c)} | "
        f"{md_text(_why(kind, c, reason), MAX_MESSAGE)}{where.get(c.scenario_id, '')} |"
        for c, reason in cells[:MAX_ROWS]
    ]
    if len(cells) > MAX_ROWS:
        lines.append(f"| ... and {len(cells) - MAX_ROWS} more | | |")
    return [*lines, ""]


def _where_the_time_went(inp: ReportInput, cells: Sequence[CellOutcome]) -> dict[str, str]:
    """For each of ``cells`` with a profile: ``; +0.41 ms per request, 62% of it in MatMul
    `/encoder/...``` (its top contributor against the base's profile, when it has one)."""
    current = {s.id: s for s in inp.run.scenarios}
    out = {}
    for c in cells[:MAX_ROWS]:
        cur = current.get(c.scenario_id)
        if cur is None or cur.profile is None:
            continue
        base = inp.baseline.get(c.scenario_id)
        diff = diff_profiles(base.profile if base is not None else None, cur.profile)
        now = "" if diff.base_ns is not None else "where the time goes now: "
        out[c.scenario_id] = f"; {now}{markdown_headline(diff)}"
    return out


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
        lines.append(
            f"| {md_code(r.id, MAX_NAME)} | {figures[3]} | {figures[6]} | "
            f"{md_text(note, MAX_MESSAGE)} |"
        )
    if len(wanted) > MAX_ROWS:
        lines.append(f"| ... and {len(wanted) - MAX_ROWS} more | | | |")
    return [*lines, ""]


def _busy(inp: ReportInput) -> list[str]:
    """A line when cells were measured beside other processes over the contention limit."""
    busy = busy_host(inp.run.scenarios, inp.contention_limit)
    if busy is None:
        return []
    text = busy.text(lambda sid: md_code(sid, MAX_NAME, in_table=False))
    return [f"**The host was busy**: {text}", ""]


def _telemetry(results: Sequence[ScenarioResult]) -> list[str]:
    """A line per thing GPU telemetry could not see (its cells, the reason and the fix)."""
    gaps = telemetry_gaps(results)
    lines = []
    for gap, ids in gaps[:MAX_ROWS]:
        named = cells_named([md_code(i, MAX_NAME, in_table=False) for i in ids])
        lines.append(f"- {named}: {md_text(gap, 2 * MAX_MESSAGE)}")
    return ["**GPU telemetry**", "", *lines, ""] if lines else []


def _uncaught_line(c: ChangePoint) -> str:
    unit = f" {c.unit}" if c.unit else ""
    look = f"git log {c.previous[:12]}..{c.commit[:12]}"
    return (
        f"- Change point no gate caught: {md_code(c.scenario_id, MAX_NAME, in_table=False)} "
        f"{c.label} {c.change * 100:+.1f}% ({c.before:.4g} -> {c.after:.4g}{unit}) from "
        f"{md_code(c.commit[:12], in_table=False)}; look at {md_code(look, in_table=False)}"
    )


def _uncaught(inp: ReportInput) -> list[str]:
    """A line per regressing change point on the target branch's archived history whose
    cell passed at its commit: no gate caught it (``perfguard.judge.changes.uncaught``)."""
    found = uncaught(inp.changes)
    lines = [_uncaught_line(c) for c in found[:MAX_ROWS]]
    if len(found) > MAX_ROWS:
        lines.append(f"- ... and {len(found) - MAX_ROWS} more change points no gate caught")
    return [*lines, ""] if lines else []


def _calibration(inp: ReportInput) -> list[str]:
    """What this runner's calibration sheets say of the gated cells (perfguard calibrate),
    one line per cell: the limits tighter than the sheet allows first, with their fix."""
    notes = [(v.scenario_id, v.calibration) for v in inp.verdicts if v.calibration is not None]
    notes.sort(key=lambda pair: pair[1].warning is None)
    lines = []
    for sid, note in notes[:MAX_ROWS]:
        name = md_code(sid, MAX_NAME, in_table=False)
        lines.append(f"- {name}: {md_text(note.text(), MAX_MESSAGE)}")
        if note.warning is not None:
            lines.append(f"  - **limit too tight**: {md_text(note.warning, 2 * MAX_MESSAGE)}")
    if len(notes) > MAX_ROWS:
        lines.append(f"- ... and {len(notes) - MAX_ROWS} more calibrated cells")
    return ["**What this runner sees** (its calibration sheet)", "", *lines, ""] if lines else []


def _also(cells: Sequence[CellOutcome]) -> list[str]:
    """Outcomes without a table (new, missing, incomparable, skipped): a grouped line each."""
    tabled = {o for o, _ in TABLES} | {Outcome.PASSED}
    groups: dict[tuple[Outcome, str], list[str]] = {}
    for c in cells:
        if c.outcome not in tabled:
            groups.setdefault((c.outcome, c.reason), []).append(c.scenario_id)
    lines = []
    for (outcome, reason), ids in groups.items():
        shown = ", ".join(md_code(i, MAX_NAME, in_table=False) for i in ids[:5])
        more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
        count = f" ({len(ids)})" if len(ids) > 1 else ""
        why = f": {md_text(reason, MAX_MESSAGE)}" if reason else ""
        lines.append(f"- {outcome.label}{count}: {shown}{more}{why}")
    return [*lines, ""] if lines else []


def render_markdown(inp: ReportInput, *, link: str | None = None) -> str:
    """A PR-comment summary: the outcome, a table per outcome worth reading, the rest."""
    outcome = inp.outcome
    commit = inp.run.commit
    base = inp.baseline_info.get("commit") if inp.baseline_info else None
    base = base or next((v.baseline_commit for v in inp.verdicts if v.baseline_commit), None)
    where = md_code(commit.short, in_table=False)
    if commit.branch:
        where += f" ({md_code(commit.branch, 80, in_table=False)})"
    against = md_code(base[:12], in_table=False) if base else "none"
    gate = "" if inp.gate else " · gate off"
    head = f"### perfguard {outcome.headline()}: {where} vs baseline {against}{gate}"
    lines = [MARKER, head, "", outcome.counts_line(), ""]
    if link:
        lines += [f"[Full report]({link})", ""]
    lines += _busy(inp)
    lines += _telemetry(inp.run.scenarios)
    for kind, title in TABLES:
        cells = outcome.showing(kind)
        regressed = [c for c, _ in cells] if kind is Outcome.REGRESSION else None
        profiles = _where_the_time_went(inp, regressed) if regressed else None
        lines += _table(title, kind, cells, profiles)
    lines += _load_table(inp.run.scenarios)
    lines += _uncaught(inp)
    lines += _calibration(inp)
    lines += _also(outcome.cells)
    return _fit(lines, link)


def _fit(lines: Sequence[str], link: str | None, limit: int = COMMENT_LIMIT) -> str:
    """``lines`` as one text of at most ``limit`` characters, cut at a whole line.

    The lines are already escaped, so the length counted is the length GitHub gets.
    A cut drops the lines after the last one that fits (a table keeps its whole rows)
    and ends with a line saying how many were left out and where the rest is."""
    text = "\n".join(lines).rstrip() + "\n"
    if len(text) <= limit:
        return text
    where = f"the [full report]({link})" if link else "`report.html` in the run's artifacts"
    kept: list[str] = []
    size = 0
    for index, line in enumerate(lines):
        note = (
            f"\n**Summary cut at GitHub's comment limit: {len(lines) - index} more lines; "
            f"see {where}.**\n"
        )
        if size + len(line) + 1 + len(note) > limit:
            return "\n".join(kept).rstrip() + "\n" + note
        kept.append(line)
        size += len(line) + 1
    return text  # unreachable: the whole text was over the limit
