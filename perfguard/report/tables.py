"""The run's tables as rows and lines of text, made once for every output: the
terminal summary (``summary_lines``: one row per scenario with P50/P95/P99, throughput
and its outcome, worst first; one line per outcome group; the accuracy, load and
telemetry lines), and what the HTML report and ``summary.md`` share with it (the load
table's figures, groups, order and notes, the memory per added stream, the telemetry
gaps, the cells named in a line).

Names and messages come from YAML files, models and exceptions: every cell of every
line goes through ``perfguard.core.text.one_line`` (no escape sequence, control
character or workflow command reaches the terminal or a CI log).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from perfguard.core.policy import CONTENTION_LIMIT
from perfguard.core.text import one_line
from perfguard.judge.outcome import (
    CellOutcome,
    Outcome,
    RunOutcome,
    cell_outcome,
    grouped,
    run_outcome,
)
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.machine.telemetry import telemetry_gap
from perfguard.records.figures import LatencySummary
from perfguard.records.loadfigures import BatchingFigures, LoadFigures, SloSearch
from perfguard.records.results import ScenarioResult, Status

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
    "outcome",
)


def _finite(value: float | None) -> bool:
    """A figure to show: NaN/Inf figures are written to results.json as null."""
    return value is not None and math.isfinite(value)


def _ms(value_ns: float) -> str:
    return f"{value_ns / 1e6:.3f}"


def _change(verdict: ScenarioVerdict | None) -> str:
    metric = verdict.metric("p95") if verdict is not None else None
    if metric is None or metric.change is None:
        return "-"
    return f"{metric.change * 100:+.1f}%"


def _row(
    result: ScenarioResult, verdict: ScenarioVerdict | None, outcome: CellOutcome | None
) -> tuple[str, ...]:
    lat = result.latency_ns
    if lat is None or result.throughput is None:
        figures = ("-", "-", "-", "-")
    else:
        figures = (_ms(lat.p50), _ms(lat.p95), _ms(lat.p99), f"{result.throughput:.1f}")
    notes = []
    if outcome is not None:
        notes.append(outcome.label(loud=True))
    if not result.stable:
        notes.append("UNSTABLE")
    return (
        one_line(result.id),
        one_line(result.backend),
        one_line(result.device),
        one_line(result.precision),
        *figures,
        _change(verdict),
        " ".join(notes),
    )


def summary_lines(
    results: Sequence[ScenarioResult],
    verdicts: Mapping[str, ScenarioVerdict] | None = None,
    *,
    outcome: RunOutcome | None = None,
) -> list[str]:
    """Aligned text rows, worst outcome first; numeric columns right-aligned; the P95
    change vs the baseline; the cell's outcome (upper case when it failed its item) and
    the findings beside it (``ACCURACY FAILURE + inconclusive``)."""
    found = verdicts or {}
    run = outcome if outcome is not None else run_outcome(results, found.values())
    cells = {c.scenario_id: c for c in run.cells}
    order = {sid: i for i, sid in enumerate(cells)}
    ranked = sorted(results, key=lambda r: order.get(r.id, len(order)))
    rows = [_HEADERS, *(_row(r, found.get(r.id), cells.get(r.id)) for r in ranked)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS))]
    numeric = {4, 5, 6, 7, 8}
    lines = []
    for row in rows:
        padded = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(padded).rstrip())
    return lines


def outcome_lines(outcome: RunOutcome) -> list[tuple[str, bool]]:
    """(line, failed) per group of cells a reviewer should read, worst first.

    Passed cells are left out (the table shows them); cells sharing an outcome and a
    reason are one line: ``new (10): a, b, c, d, e and 5 more: no baseline ...``. A
    finding beside a cell's outcome has its own line (the inconclusive latency gate of a
    cell that failed accuracy); it reads as failed only when it is one that fails an item
    (an accuracy failure beside a regression), in a cell that failed.
    """
    lines = []
    failing = (Outcome.REGRESSION, Outcome.ACCURACY)
    for kind, who, reason in grouped([c for c in outcome.cells if c.outcome.value != "passed"]):
        failed = any(
            c.failed and (main or kind in failing)
            for c in outcome.cells
            for o, why, main in c.findings()
            if o is kind and why == reason
        )
        tail = f": {reason}" if reason else ""
        lines.append((one_line(f"{who}{tail}"), failed))
    return lines


def telemetry_gaps(results: Sequence[ScenarioResult]) -> list[tuple[str, list[str]]]:
    """What GPU telemetry could not see in this run: each gap once (its reason and fix,
    ``perfguard.machine.telemetry.telemetry_gap``) with the ids of the cells it concerns,
    in the order first met. The terminal, ``summary.md`` and the report show these."""
    groups: dict[str, list[str]] = {}
    for result in results:
        gpu = result.runtime.gpu
        gap = telemetry_gap(gpu.telemetry if gpu is not None else None)
        if gap is not None:
            groups.setdefault(gap, []).append(result.id)
    return list(groups.items())


def on_busy_host(result: ScenarioResult, limit: float) -> bool:
    """Measured while other processes used more than ``limit`` of all CPUs."""
    foreign = result.runtime.foreign_cpu
    return foreign is not None and foreign > limit


@dataclass(frozen=True)
class BusyHost:
    """The cells of this run measured on a busy host: other processes used more than
    ``limit`` of all CPUs (``runtime.foreign_cpu``), at most ``busiest``."""

    ids: tuple[str, ...]
    busiest: float
    limit: float

    def text(self, named: Callable[[str], str] = str, shown: int = 5) -> str:
        """``other processes used up to 45% of the CPUs while 2 cells were measured (a, b;
        contention limit 10%): ...``; ``named`` words a cell id (a code span in Markdown)."""
        more = f" and {len(self.ids) - shown} more" if len(self.ids) > shown else ""
        cells = ", ".join(named(i) for i in self.ids[:shown]) + more
        were = "s were" if len(self.ids) != 1 else " was"
        return (
            f"other processes used up to {self.busiest:.0%} of the CPUs while "
            f"{len(self.ids)} cell{were} measured ({cells}; contention limit "
            f"{self.limit:.0%}): their figures and the machine-speed canary measure the "
            "host's load, not the code or the machine's speed. Re-run them on a quiet host."
        )


def busy_host(
    results: Sequence[ScenarioResult], contention_limit: float = CONTENTION_LIMIT
) -> BusyHost | None:
    """The cells measured beside other processes over the contention limit, or None."""
    found = [r for r in results if on_busy_host(r, contention_limit)]
    if not found:
        return None
    busiest = max(r.runtime.foreign_cpu or 0.0 for r in found)
    return BusyHost(tuple(r.id for r in found), busiest, contention_limit)


def cells_named(ids: Sequence[str], shown: int = 5) -> str:
    """``1 GPU cell (a)``, ``7 GPU cells (a, b, c, d, e and 2 more)``."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    plural = "s" if len(ids) != 1 else ""
    return f"{len(ids)} GPU cell{plural} ({', '.join(ids[:shown])}{more})"


def telemetry_lines(results: Sequence[ScenarioResult]) -> list[str]:
    """One terminal line per telemetry gap: the cells, then what was not seen and the fix."""
    return [one_line(f"{cells_named(ids)}: {gap}") for gap, ids in telemetry_gaps(results)]


def accuracy_lines(results: Sequence[ScenarioResult]) -> list[str]:
    """One line per cell with accuracy figures: the headline metrics and the verdict
    (``ok``, ``FAILED``, or ``INCONCLUSIVE`` when a check was not made because its
    reference is degenerate: the outcome lines say why)."""
    lines = []
    for result in results:
        accuracy = result.accuracy
        if not accuracy:
            continue
        parts = []
        for output in accuracy.report.outputs if accuracy.report is not None else ():
            values = output.values
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
                if _finite(values.get(key))
            ]
            name = f"{output.name} (degenerate reference)" if output.degenerate else output.name
            parts.append(f"{name}: " + ", ".join(figures))
        tokens = accuracy.tokens
        if tokens is not None:
            parted = (
                f", first parts at token {tokens.earliest}" if tokens.earliest is not None else ""
            )
            parts.append(f"greedy tokens match {tokens.match:.4g}{parted}")
        ppl = accuracy.perplexity
        if ppl is not None and _finite(ppl.current):
            rise = f" ({ppl.rise:+.2%})" if _finite(ppl.rise) else ""
            parts.append(f"perplexity {ppl.current:.6g}{rise}")
        if accuracy.reference:
            parts.append(f"vs {accuracy.reference}")
        task = accuracy.task_metric
        if task is not None and _finite(task.current):
            ref = task.reference if _finite(task.reference) else None
            parts.append(
                f"task {task.current:.4g}" + (f" (ref {ref:.4g})" if ref is not None else "")
            )
        for output in accuracy.baseline.outputs if accuracy.baseline is not None else ():
            cos = output.values.get("cosine_min")
            if _finite(cos):
                parts.append(f"vs baseline: {output.name} cos min {cos:.4g}")
        if not parts:  # e.g. the reference cell itself, with nothing to compare yet
            continue
        verdict = (
            "FAILED" if not accuracy.passed else "INCONCLUSIVE" if accuracy.inconclusive else "ok"
        )
        lines.append(one_line(f"{result.id}: {'; '.join(parts)} [{verdict}]"))
    return lines


# --------------------------------------------------------------------------- load

#: Columns of the load table (``load_lines`` and the report's Load sections).
LOAD_HEADERS = (
    "scenario",
    "level",
    "P50 ms",
    "P90 ms",
    "P95 ms",
    "P99 ms",
    "unc P95",
    "thrpt/s",
    "queue %",
    "asked/s",
    "achvd/s",
    "late",
    "failed",
    "notes",
)
_LOAD_NUMERIC = frozenset(range(2, 13))
#: An invalid level's reason is cut to this many characters in the notes column.
INVALID_NOTE_LIMIT = 60


def _num(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(float(value), spec)


def _p95_ms(summary: LatencySummary | None) -> float | None:
    return None if summary is None else summary.p95 / 1e6


def load_group(result: ScenarioResult) -> str:
    """The id of a load cell with its level part removed: the cells of one load curve.

    ``s.yaml::m[onnxruntime-c4]`` -> ``s.yaml::m[onnxruntime]``; ``s.yaml::m[r200]`` ->
    ``s.yaml::m``. A result without load (or an unusual id) keeps its id.
    """
    level = result.load.level if result.load is not None else ""
    sid = result.id
    if not level or not sid.endswith("]") or "[" not in sid:
        return sid
    head, cell = sid[:-1].split("[", 1)
    if cell == level:
        rest = ""
    elif cell.endswith("-" + level):
        rest = cell[: -len(level) - 1]
    elif cell.startswith(level + "-"):
        rest = cell[len(level) + 1 :]
    elif f"-{level}-" in cell:
        before, _sep, after = cell.rpartition(f"-{level}-")
        rest = f"{before}-{after}"
    else:
        return sid
    return f"{head}[{rest}]" if rest else head


def load_level_key(load: LoadFigures | None) -> tuple[int, float, str]:
    """Sort key of a level in its group: closed by concurrency, then open by rate, SLO last."""
    if load is None:
        return (3, 0.0, "")
    if load.slo is not None:
        return (2, 0.0, load.level)
    if load.mode == "closed":
        return (0, float(load.concurrency or 0), load.level)
    return (1, float(load.rate_asked or 0.0), load.level)


def ordered_load_results(results: Sequence[ScenarioResult]) -> list[ScenarioResult]:
    """The results with load, grouped (in order of first appearance), levels in order."""
    groups: dict[str, list[ScenarioResult]] = {}
    for result in results:
        if result.load is not None:
            groups.setdefault(load_group(result), []).append(result)
    return [
        r
        for members in groups.values()
        for r in sorted(members, key=lambda r: load_level_key(r.load))
    ]


def short_invalid(reason: str, limit: int = INVALID_NOTE_LIMIT) -> str:
    """The head of an invalid level's reason (up to the first ``;``), at most ``limit`` chars."""
    head = " ".join(reason.split(";", 1)[0].split())
    if len(head) > limit and ": " in head:
        head = head.split(": ", 1)[0]
    return head if len(head) <= limit else head[: limit - 3] + "..."


def batching_note(batching: BatchingFigures) -> str:
    """``batch 3.8 avg, x3.64 capacity, wait P95 1.9 ms`` (parts absent when unknown)."""
    parts = []
    if batching.mean_batch is not None:
        parts.append(f"batch {float(batching.mean_batch):.1f} avg")
    if batching.probe.gain is not None:
        parts.append(f"x{float(batching.probe.gain):.2f} capacity")
    wait = _p95_ms(batching.wait_ns)
    if wait is not None:
        parts.append(f"wait P95 {wait:.3g} ms")
    return ", ".join(parts) or "batched"


def slo_level(slo: SloSearch, level: float | None) -> str:
    """A search level as read: ``340/s`` over a rate, ``c8`` over a concurrency."""
    if level is None:
        return "-"
    return f"c{float(level):g}" if slo.over == "concurrency" else f"{float(level):g}/s"


def slo_note(slo: SloSearch) -> str:
    """``SLO P95<=50 ms: best 340/s -> 338.1/s`` (or ``no level met it``); a goodput
    search: ``SLO good share>=90%: best c2 -> 29.0/s``."""
    head = (
        f"SLO good share>={float(slo.goodput_share) * 100:g}%"
        if slo.goodput_share is not None
        else f"SLO P{float(slo.percentile):g}<={float(slo.target_ms or 0):g} ms"
    )
    if slo.best_level is None:
        return f"{head}: no level met it"
    best = slo_level(slo, slo.best_level)
    return f"{head}: best {best} -> {_num(slo.best_throughput)}/s"


def load_notes(load: LoadFigures | None) -> list[str]:
    """The short notes of one level: invalid reason, batching, SLO, unserved requests."""
    notes: list[str] = []
    if load is None:
        return notes
    if load.invalid:
        notes.append(f"INVALID: {short_invalid(load.invalid)}")
    if load.batching is not None:
        notes.append(batching_note(load.batching))
    if load.slo is not None:
        notes.append(slo_note(load.slo))
    if load.unserved:
        notes.append(f"{load.unserved} unserved")
    return notes


@dataclass(frozen=True)
class MemoryGrowth:
    """What each added stream costs in host memory across one scenario's load levels.

    ``per_stream_mib`` is the least-squares slope of each level's held memory (its
    peak above the idle model, ``LevelMemory.held_mib``) against its streams; the
    fixed costs (the model, the first session's caches) fall into the intercept.
    ``levels`` holds ``(level, streams, held MiB)``; ``own_process`` whether every
    level was measured in a worker of its own (in the pytest process, memory that
    earlier cells freed can absorb a level's and flatten the slope)."""

    per_stream_mib: float
    levels: tuple[tuple[str, int, float], ...]
    own_process: bool
    unit: str  # "client" (closed loop) or "worker"

    def text(self) -> str:
        """``host memory +5.2 MiB per added client (held above the idle model: 1 client
        2.0 MiB, 2 clients 7.1 MiB, 4 clients 17.8 MiB; least squares over 3 levels)``."""
        held = ", ".join(
            f"{streams} {self.unit}{'s' if streams != 1 else ''} {mib:.1f} MiB"
            for _level, streams, mib in self.levels
        )
        text = (
            f"host memory {self.per_stream_mib:+.1f} MiB per added {self.unit} (held above "
            f"the idle model: {held}; least squares over {len(self.levels)} levels)"
        )
        if not self.own_process:
            text += (
                "; measured in the pytest process, where memory earlier cells freed can "
                "absorb a level's: gate peak_memory (or set isolate: true) for a worker "
                "of its own"
            )
        return text


def memory_growth(results: Sequence[ScenarioResult]) -> MemoryGrowth | None:
    """The memory per added stream over the load levels of one scenario (one load
    group, fixed levels of one mode), or None with fewer than two distinct stream
    counts that have a memory figure."""
    points = [
        (r.load.level, r.load.memory.streams, r.load.memory.held_mib, r)
        for r in results
        if r.load is not None and r.load.memory is not None and r.load.slo is None
    ]
    modes = {r.load.mode for *_, r in points if r.load is not None}
    if len(modes) != 1 or len({streams for _, streams, _, _ in points}) < 2:
        return None
    points.sort(key=lambda p: p[1])
    x = np.array([float(streams) for _, streams, _, _ in points])
    y = np.array([held for _, _, held, _ in points])
    slope = float(np.polyfit(x, y, 1)[0])
    return MemoryGrowth(
        per_stream_mib=slope,
        levels=tuple((level, streams, held) for level, streams, held, _ in points),
        own_process=all(bool(r.runtime.isolated) for *_, r in points),
        unit="client" if modes == {"closed"} else "worker",
    )


def memory_detail(load: LoadFigures) -> str | None:
    """A level's memory line: ``idle 290.1 MiB, level peak 301.2 MiB: 11.1 MiB held
    for 4 clients``, or None without the figure."""
    memory = load.memory
    if memory is None:
        return None
    unit = "client" if load.mode == "closed" else "worker"
    return (
        f"idle {memory.idle_mib:.1f} MiB, level peak {memory.level_peak_mib:.1f} MiB: "
        f"{memory.held_mib:.1f} MiB held for {memory.streams} {unit}"
        f"{'s' if memory.streams != 1 else ''}"
    )


def load_figures(result: ScenarioResult) -> tuple[str, ...]:
    """The level's figures, in ``LOAD_HEADERS`` order from ``level`` to ``failed``."""
    load = result.load
    lat = result.latency_ns
    values = () if lat is None else (lat.p50, lat.p90, lat.p95, lat.p99)
    pcts = tuple(_ms(v) for v in values) or ("-",) * 4
    if load is None:
        return ("-", *pcts, "-", _num(result.throughput), "-", "-", "-", "0", "0")
    unc = _p95_ms(load.uncorrected_ns) if load.is_open else None
    thrpt = result.throughput if result.throughput is not None else load.throughput
    share = load.queue_share
    count = load.late.count
    late_text = f"{count} ({float(load.late.share) * 100:.1f}%)" if count else "0"
    return (
        load.level,
        *pcts,
        _num(unc, ".3f"),
        _num(thrpt),
        "-" if share is None else f"{float(share) * 100:.1f}",
        _num(load.rate_asked) if load.is_open else "-",
        _num(load.rate_achieved) if load.is_open else "-",
        late_text,
        str(load.failed),
    )


#: A level's status note is cut to this many characters (the head of the cell's message).
STATUS_NOTE_LIMIT = 60


def status_note(result: ScenarioResult, outcome: CellOutcome | None = None) -> str | None:
    """What a load level's status means, worded for what happened (None: it passed).

    The table's ``failed`` column counts failed requests, so the note never says a bare
    ``failed``: a level whose requests failed says how many; one the gate failed says
    why (``regressed (gated)``, ``accuracy gate not met``, ``inconclusive (gated ...)``);
    an SLO search no level met is said by its SLO note already; anything else gives the
    head of the cell's message. ``outcome`` is the cell's (``judge.outcome``); without it
    the cell's outcome without a verdict is used (a regression is then unknown)."""
    if result.passed:
        return None
    load = result.load
    head = short_invalid(result.message or "", STATUS_NOTE_LIMIT)
    if result.status is Status.ERROR:
        return f"error: {head}" if head else "error"
    if result.status is Status.SKIPPED:
        return f"skipped: {head}" if head and not (load and load.invalid) else "skipped"
    if load is not None and load.failed:
        return f"{load.failed} request{'s' if load.failed != 1 else ''} failed"
    kind = (outcome or cell_outcome(result, None)).outcome
    if kind is Outcome.REGRESSION:
        return "regressed (gated)"
    if kind is Outcome.ACCURACY:
        return "accuracy gate not met"
    if kind is Outcome.INCONCLUSIVE:
        return "inconclusive (gated: --perfguard-inconclusive=fail)"
    if load is not None and load.slo is not None and load.slo.best_level is None:
        return None  # the SLO note says no level met it
    return f"not passed: {head}" if head else "not passed"


def level_notes(result: ScenarioResult, outcome: CellOutcome | None = None) -> list[str]:
    """A load level's notes: its status (``status_note``), then ``load_notes``."""
    status = status_note(result, outcome)
    return [*([status] if status else []), *load_notes(result.load)]


def load_row(result: ScenarioResult, outcome: CellOutcome | None = None) -> tuple[str, ...]:
    """One row of the load table, in ``LOAD_HEADERS`` order."""
    notes = level_notes(result, outcome)
    return (one_line(result.id), *load_figures(result), one_line("; ".join(notes)))


def load_lines(results: Sequence[ScenarioResult], outcome: RunOutcome | None = None) -> list[str]:
    """The load table: one aligned row per result with ``load`` (``[]`` when none has).

    Latency columns are the corrected percentiles (from the scheduled send time);
    ``unc P95`` is what a naive harness would report (open loop only). ``outcome``
    (the run's) words each level's status note.
    """
    ordered = ordered_load_results(results)
    if not ordered:
        return []
    cells = {c.scenario_id: c for c in outcome.cells} if outcome is not None else {}
    rows = [LOAD_HEADERS, *(load_row(r, cells.get(r.id)) for r in ordered)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(LOAD_HEADERS))]
    return [
        "  ".join(
            cell.rjust(widths[i]) if i in _LOAD_NUMERIC else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]
