"""The HTML report of one commit: a view model built from ``ReportInput``, rendered by Jinja2.

Everything a template shows is a plain string or number prepared here, so the
template stays logic-light and every user-supplied string passes through Jinja's
autoescape; only the SVGs made by ``perfguard.report.plots`` and the icicle of
``perfguard.report.profilediff`` (which escapes every name it draws) are marked safe.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jinja2
from markupsafe import Markup

from perfguard.core.policy import CONTENTION_LIMIT
from perfguard.core.text import plain
from perfguard.judge.outcome import OUTCOMES, CellOutcome, Outcome, blind_note
from perfguard.judge.verdict import ScenarioVerdict, VerdictKind, pct
from perfguard.machine.env import diff_comparable
from perfguard.records.accuracyfigures import AccuracyFigures, AccuracyReport
from perfguard.records.figures import RESERVED_KEYS
from perfguard.records.results import RunResult, ScenarioResult
from perfguard.report import plots
from perfguard.report.loadsections import load_context, load_fact
from perfguard.report.model import ReportInput
from perfguard.report.profilediff import ProfileView, profile_view
from perfguard.report.tables import busy_host, cells_named, on_busy_host, telemetry_gaps
from perfguard.report.tokensections import TokenView, token_view

#: Scenarios (in table order: regressions first) drawn as full matplotlib figures;
#: the rest get sparklines, so a 500-scenario report stays fast and small
#: (cost per figure: benchmarks/notes.md).
FULL_PLOT_BUDGET = 24
#: Canary moves beyond this (relative) between baseline and current get a banner.
CANARY_BANNER = 0.05
NO_VERDICT = "none"
#: The latency-vs-throughput scatter is drawn for models with 3..this many cells.
MAX_SCATTER_CELLS = 24
#: Quantized layers named in a cell's details; the rest are counted.
QUANT_LAYERS_SHOWN = 20


@functools.cache
def environment() -> jinja2.Environment:
    # Autoescape keeps HTML inert; ``finalize`` strips what escaping leaves live in a
    # string that came from a YAML file, a model or an exception (ANSI/OSC escapes,
    # control characters, workflow-command lines) from every ``{{ }}`` it prints.
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("perfguard.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_plain_value,
    )
    env.filters["plain"] = _plain_value
    return env


def _plain_value(value: Any) -> Any:
    """:func:`perfguard.core.text.plain` for untrusted strings; markup made here passes."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return plain(value)
    return value


def ms(value_ns: float | None) -> str:
    return "-" if value_ns is None else f"{value_ns / 1e6:.3f}"


def canary_ratio(
    run_scenarios: Sequence[ScenarioResult],
    baseline: Mapping[str, ScenarioResult],
    contention_limit: float = CONTENTION_LIMIT,
) -> float | None:
    """Median current/baseline canary over scenarios measured with a canary on both sides,
    neither side on a busy host (other processes over ``contention_limit`` of the CPUs:
    the canary then measures their load, not the machine's speed)."""
    ratios = [
        s.canary_ns / base.canary_ns
        for s in run_scenarios
        if s.canary_ns
        and (base := baseline.get(s.id)) is not None
        and base.canary_ns
        and not on_busy_host(s, contention_limit)
        and not on_busy_host(base, contention_limit)
    ]
    return float(statistics.median(ratios)) if ratios else None


def env_diff(inp: ReportInput) -> dict[str, tuple[str | None, str | None]]:
    stored = inp.baseline_info.get("env_diff") if inp.baseline_info else None
    if isinstance(stored, Mapping) and stored:
        out: dict[str, tuple[str | None, str | None]] = {}
        for key, pair in stored.items():
            if isinstance(pair, Mapping):
                out[str(key)] = (pair.get("baseline"), pair.get("current"))
            elif isinstance(pair, Sequence) and len(pair) == 2:
                out[str(key)] = (pair[0], pair[1])
        return out
    if inp.baseline_environment is not None:
        return diff_comparable(inp.baseline_environment, inp.run.environment)
    return {}


# --------------------------------------------------------------------------- accuracy


def _fmt(value: Any, digits: int = 6) -> str:
    """A figure for the report; ``-`` for None and for NaN/Inf (written as null to
    results.json)."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "-"
    if isinstance(value, int | float):
        return f"{value:.{digits}g}"
    return str(value)


def _failures(n: int, inconclusive: int = 0) -> str:
    if n == 0:
        return "inconclusive" if inconclusive else "ok"
    return f"{n} failure{'s' if n != 1 else ''}"


def _state(report: AccuracyReport) -> str:
    """``passed``, ``failed`` or ``inconclusive`` (checks not made: degenerate reference)."""
    if not report.passed:
        return "failed"
    return "inconclusive" if report.inconclusive else "passed"


def golden_label(base: AccuracyReport) -> str:
    """``golden outputs of baseline 1a2b3c4``: what the baseline comparison checked against
    (``base.reference`` is ``baseline <sha7>``)."""
    return f"golden outputs of {base.reference}"


def _other_failures(accuracy: AccuracyFigures) -> int:
    """Failed gates that are neither a reference check nor a golden-output check (the task
    metric's drop, the drift of a figure since the baseline)."""
    counted = sum(len(r.failures) for r in (accuracy.report, accuracy.baseline) if r is not None)
    return max(0, len(accuracy.failures) - counted)


def accuracy_verdicts(accuracy: AccuracyFigures) -> list[tuple[str, str]]:
    """Each comparison the cell's accuracy was checked by and how it ended (``passed``,
    ``failed``, ``inconclusive``): against the reference cell, against the baseline's
    golden outputs, and the other gates."""
    out = []
    report, base = accuracy.report, accuracy.baseline
    if report is not None:
        out.append((f"vs reference {accuracy.reference or report.reference}", _state(report)))
    if base is not None:
        out.append((f"vs {golden_label(base)}", _state(base)))
    others = _other_failures(accuracy)
    if others or (not out and accuracy.task_metric is not None):
        out.append(("other gates" if out else "task metric", "passed" if others == 0 else "failed"))
    return out


def accuracy_headline(accuracy: AccuracyFigures | None) -> str:
    """``cos 0.99996/0.9993 vs torch-fp32: ok; golden outputs: 1 failure`` or ``-``: each
    comparison says its own result, so a failed golden-output check never reads as a
    failure against the reference."""
    if accuracy is None:
        return "-"
    report, base = accuracy.report, accuracy.baseline
    parts = []
    for output in report.outputs if report is not None else ():
        mean = output.values.get("cosine_mean")
        if mean is not None and math.isfinite(mean):
            parts.append(f"cos {_fmt(mean)}/{_fmt(output.values.get('cosine_min'))}")
            break
    segments = []
    if report is not None:
        ref = accuracy.reference or report.reference
        verdict = _failures(len(report.failures), len(report.inconclusive))
        segments.append(" ".join([*parts, f"vs {ref}: {verdict}"]))
    if base is not None:
        segments.append(f"golden outputs: {_failures(len(base.failures), len(base.inconclusive))}")
    others = _other_failures(accuracy)
    if others:
        segments.append(f"other gates: {_failures(others)}")
    if not segments:
        segments.append("ok" if accuracy.passed else "FAILED")
    return "; ".join(segments)


@dataclass
class AccuracyView:
    headline: str
    passed: bool
    reference: str
    verdicts: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    inconclusive: list[str] = field(default_factory=list)
    baseline: list[dict[str, Any]] = field(default_factory=list)
    baseline_title: str = "drift vs baseline"
    baseline_note: str = ""
    task: list[tuple[str, str]] = field(default_factory=list)
    #: A generative cell's greedy tokens against the reference's, and its perplexity.
    generated: list[tuple[str, str]] = field(default_factory=list)


def _generated(accuracy: AccuracyFigures) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    tokens = accuracy.tokens
    if tokens is not None:
        parted = [p for p in tokens.first_divergence if p is not None]
        rows += [
            ("greedy tokens matching", f"{_fmt(tokens.match, 4)} of {tokens.tokens}"),
            ("rows equal throughout", f"{tokens.identical} of {tokens.rows}"),
            (
                "first divergence (token)",
                ", ".join(str(p) for p in sorted(parted)) if parted else "none",
            ),
            ("token_match_min", _fmt(tokens.limit)),
        ]
    ppl = accuracy.perplexity
    if ppl is not None:
        rise = f"{ppl.rise:+.3%}" if ppl.rise is not None and math.isfinite(ppl.rise) else "-"
        rows += [
            (f"perplexity ({ppl.texts} texts x {ppl.tokens} tokens)", _fmt(ppl.current)),
            ("reference perplexity", _fmt(ppl.reference)),
            ("rise", rise),
            ("perplexity_rise_max", _fmt(ppl.limit)),
        ]
    return rows


def _outputs(report: AccuracyReport | None) -> list[dict[str, Any]]:
    return [
        {
            # The name as stored: only a degenerate reference's gets the note.
            "name": f"{output.name} (degenerate reference)" if output.degenerate else output.name,
            "values": [(str(k), _fmt(v)) for k, v in output.values.items()],
            "worst": ", ".join(str(i) for i in output.worst_inputs),
        }
        for output in (report.outputs if report is not None else ())
    ]


#: Checks of the current outputs alone (NaN/Inf count): the same figure whichever side
#: they are compared with, so the checks table lists each once.
CURRENT_ONLY_CHECKS = frozenset({"nonfinite_max"})


def _checks(*sides: tuple[str, AccuracyReport | None]) -> list[dict[str, Any]]:
    """The rows of the checks table, each with what it checked against (``against``)."""
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for against, report in sides:
        for c in report.checks if report is not None else ():
            if c.metric in CURRENT_ONLY_CHECKS:
                if (c.metric, c.output) in seen:
                    continue
                seen.add((c.metric, c.output))
                where = "this run's outputs"
            else:
                where = against
            rows.append(
                {
                    "metric": c.metric,
                    "output": c.output,
                    "against": where,
                    "value": _fmt(c.value),
                    "limit": _fmt(c.limit),
                    "passed": c.passed,
                    "worst": ", ".join(str(i) for i in c.worst_inputs),
                    "message": c.message,
                }
            )
    return rows


def accuracy_view(accuracy: AccuracyFigures | None) -> AccuracyView | None:
    if accuracy is None:
        return None
    report, base = accuracy.report, accuracy.baseline
    task = accuracy.task_metric or (report.task_metric if report is not None else None)
    reference = accuracy.reference or (report.reference if report is not None else "") or ""
    return AccuracyView(
        headline=accuracy_headline(accuracy),
        passed=accuracy.passed,
        reference=reference or "none",
        verdicts=accuracy_verdicts(accuracy),
        outputs=_outputs(report),
        checks=_checks(
            (f"reference {reference}", report),
            (golden_label(base) if base is not None else "", base),
        ),
        failures=list(accuracy.failures),
        inconclusive=list(accuracy.inconclusive),
        baseline=_outputs(base),
        baseline_title=f"vs {golden_label(base)}" if base is not None else "",
        baseline_note=accuracy.baseline_skipped or "",
        task=[(str(k), _fmt(v)) for k, v in (task.to_dict() if task is not None else {}).items()],
        generated=_generated(accuracy),
    )


# --------------------------------------------------------------------------- scenarios


@dataclass
class Row:
    """One scenario: its table row and its section."""

    sid: str
    anchor: str
    verdict: str
    outcome: str
    outcome_label: str
    failed: bool
    reason: str
    backend: str
    device: str
    precision: str
    status: str
    base: tuple[str, str, str]
    cur: tuple[str, str, str]
    change: str
    change_sort: str
    bound: str
    throughput: str
    memory: str
    accuracy: AccuracyView | None
    messages: list[str]
    cdf: Markup | None = None
    cdf_caption: str = ""
    trend: Markup | None = None
    trend_points: int = 0
    #: Change points marked on the trend (perfguard.judge.changes), for its caption.
    trend_changes: int = 0
    #: (label, reason) of each finding beside the outcome (``CellOutcome.also``).
    also: list[tuple[str, str]] = field(default_factory=list)
    trend_caption: str = ""
    scatter: Markup | None = None
    scatter_legend: list[tuple[int, str, str, str]] = field(default_factory=list)
    runtime: list[tuple[str, str]] = field(default_factory=list)
    facts: list[tuple[str, str]] = field(default_factory=list)
    #: "Where the time went" (``perfguard.report.profilediff``), for a cell with a profile.
    profile: ProfileView | None = None
    #: Token timing (``perfguard.report.tokensections``), for a generative cell.
    tokens: TokenView | None = None


def _triple(result: ScenarioResult | None) -> tuple[str, str, str]:
    lat = result.latency_ns if result is not None else None
    if lat is None:
        return ("-", "-", "-")
    return (ms(lat.p50), ms(lat.p95), ms(lat.p99))


def _contention(result: ScenarioResult, limit: float) -> str | None:
    """``other processes used 45% of the CPUs while it was measured (contention limit
    10%): the host was busy ...``, or None when not measured."""
    cpu = result.runtime.cpu
    if cpu is None or cpu.foreign_cpu is None:
        return None
    text = (
        f"other processes used {cpu.foreign_cpu:.0%} of the CPUs while it was measured "
        f"(contention limit {limit:.0%})"
    )
    if on_busy_host(result, limit):
        text += ": the host was busy, so its figures measure that load, not the code"
    if cpu.steal:
        text += f"; the hypervisor took {cpu.steal:.0%}"
    return text


def _quantization_facts(result: ScenarioResult) -> list[tuple[str, str]]:
    """What the quantizer did to the cell's model, when its runtime facts say."""
    applied = result.runtime.quantization
    if applied is None:
        return []
    facts = [("quantization applied", applied.text())]
    if applied.layers:
        more = applied.layer_count - min(len(applied.layers), QUANT_LAYERS_SHOWN)
        names = ", ".join(applied.layers[:QUANT_LAYERS_SHOWN])
        facts.append(("quantized layers", names + (f" and {more} more" if more > 0 else "")))
    return facts


#: Runtime facts that differ from run to run by nature (not a change to point out).
_VOLATILE_FACTS = frozenset({"ready_s", "compile_s", "build_s", "export_s"})


def _runtime_rows(
    result: ScenarioResult | None, base: ScenarioResult | None = None
) -> list[tuple[str, str]]:
    """The cell's runtime facts as rows; what the quantizer did has rows of its own
    (``_quantization_facts``), so the settings' row leaves it out. A backend fact that
    differs from the base's (a server's command or version, a provider) says what it was
    (``... (base: ...)``): what a change of the runtime's own settings looks like."""
    rows = []
    was = base.runtime.backend if base is not None else {}
    for key, value in (result.runtime.to_dict() if result is not None else {}).items():
        if key == "quantization" and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if k != "applied"}
            if not value:
                continue
        text = str(value)
        if (
            key in was
            and key not in RESERVED_KEYS
            and key not in _VOLATILE_FACTS
            and str(was[key]) != text
        ):
            text = f"{text} (base: {was[key]})"
        rows.append((str(key), text))
    return rows


def _facts(
    result: ScenarioResult | None, contention_limit: float = CONTENTION_LIMIT
) -> list[tuple[str, str]]:
    if result is None:
        return [("status", "not measured in this run")]
    facts = [("status", result.status.value)]
    if result.message:
        facts.append(("message", result.message))
    facts.append(("batch size", str(result.batch_size)))
    if result.threads is not None:
        facts.append(("threads", str(result.threads)))
    if result.latency_ns is not None:
        facts.append(("samples", str(result.latency_ns.n)))
    facts.append(("cold start", f"{ms(result.cold_start_ns)} ms"))
    facts.append(("warm-up", f"{result.warmup_iterations} iterations, {ms(result.warmup_ns)} ms"))
    ratio = "-" if result.stability_ratio is None else f"{result.stability_ratio:.3f}"
    stable = "stable" if result.stable else "UNSTABLE"
    facts.append(("stability", f"{stable} (median last/first third {ratio})"))
    if result.canary_ns is not None:
        facts.append(("canary", f"{ms(result.canary_ns)} ms"))
    contention = _contention(result, contention_limit)
    if contention is not None:
        facts.append(("contention", contention))
    facts += _quantization_facts(result)
    if result.tags:
        facts.append(("tags", ", ".join(result.tags)))
    if (load := load_fact(result)) is not None:
        facts.append(("load", load))
    return facts


def _detectable_facts(verdict: ScenarioVerdict | None) -> list[tuple[str, str]]:
    """What each relative latency/throughput gate could see (``MetricVerdict.detectable``)."""
    facts = []
    for m in verdict.metrics if verdict is not None else ():
        seen = m.detectable
        if seen is None or m.verdict in (VerdictKind.INVALID, VerdictKind.INCOMPARABLE):
            continue
        sign = "+" if m.higher_is_worse else "-"
        if m.blind:
            text = blind_note(m, verdict)
        else:
            text = f"{sign}{seen * 100:.1f}% (limit {sign}{m.limit * 100:g}%)"
        facts.append((f"{m.label}: smallest detectable change", text))
    return facts


def _row(
    index: int,
    sid: str,
    cur: ScenarioResult | None,
    base: ScenarioResult | None,
    verdict: ScenarioVerdict | None,
    outcome: CellOutcome,
    contention_limit: float = CONTENTION_LIMIT,
) -> Row:
    src = cur or base
    p95 = verdict.metric("p95") if verdict is not None else None
    change = "-" if p95 is None or p95.change is None else f"{p95.change * 100:+.1f}%"
    bound = "-"
    if p95 is not None and p95.lower is not None and p95.upper is not None:
        bound = f"{pct(p95.lower)}..{pct(p95.upper)} ({p95.confidence:.0%})"
    messages = list(verdict.messages) if verdict is not None else []
    if verdict is not None and not messages:
        messages = [m.message for m in verdict.metrics]
    # The outcome's reason (and each finding's beside it) heads the section; nothing
    # below says it again.
    said = " ".join([outcome.reason, *(a.reason for a in outcome.also)])
    messages = [m for m in dict.fromkeys(messages) if m not in said]
    facts = [
        (k, v)
        for k, v in _facts(cur, contention_limit)
        + _detectable_facts(verdict)
        + _ab_facts(verdict)
        + _calibration_facts(verdict)
        if not (k == "message" and v in outcome.reason)
    ]
    return Row(
        sid=sid,
        anchor=f"s{index}",
        verdict=verdict.verdict.value if verdict is not None else NO_VERDICT,
        outcome=outcome.outcome.value,
        outcome_label=outcome.label(),
        also=[(a.outcome.label, a.reason) for a in outcome.also],
        failed=outcome.failed,
        reason=outcome.reason,
        backend=src.backend if src else "-",
        device=src.device if src else "-",
        precision=src.precision if src else "-",
        status=cur.status.value if cur else "absent",
        base=_triple(base),
        cur=_triple(cur),
        change=change,
        change_sort="" if p95 is None or p95.change is None else f"{p95.change:.6f}",
        bound=bound,
        throughput="-" if cur is None or cur.throughput is None else f"{cur.throughput:.1f}",
        memory="-" if cur is None or cur.peak_memory_mib is None else f"{cur.peak_memory_mib:.1f}",
        accuracy=accuracy_view(cur.accuracy if cur else None),
        messages=messages,
        runtime=_runtime_rows(cur, base),
        facts=facts,
    )


def _calibration_facts(verdict: ScenarioVerdict | None) -> list[tuple[str, str]]:
    """What this runner's calibration sheet says of the cell's gate (perfguard calibrate)."""
    note = verdict.calibration if verdict is not None else None
    if note is None:
        return []
    facts = [("runner calibration", note.text())]
    if note.warning is not None:
        facts.append(("calibration warning", note.warning))
    return facts


def _ab_facts(verdict: ScenarioVerdict | None) -> list[tuple[str, str]]:
    """A same-run A/B verdict: the base, the pairs used and the per-round ratios."""
    if verdict is None or verdict.mode != "ab" or verdict.ab is None:
        return []
    ab = verdict.ab
    shown = ", ".join(f"{r.round}: {r.ratio:.3f}" for r in ab.rounds[:30])
    # A load cell's round is one short load level per side (``pairs`` 1 each), or one
    # level both sides shared (``levels: interleaved``).
    levels = ab.levels is not None or (bool(ab.rounds) and all(r.pairs == 1 for r in ab.rounds))
    if ab.levels == "alone":
        how, unit = "one side at a time, each alone (`server.exclusive`)", "pairs"
        per_round = "no rounds"
    elif ab.levels == "interleaved":
        how, unit = "in rounds of one load level each, A's and B's requests alternating", "rounds"
        per_round = "one shared load level"
    elif levels:
        how, unit = "in alternating rounds of whole load levels", "rounds"
        per_round = "one load level per side"
    else:
        how, unit = "interleaved request by request", "pairs"
        per_round = f"{ab.rounds[0].pairs} pairs" if ab.rounds else "-"
    return [
        (
            "same-run A/B",
            f"base {ab.base[:12]} ({ab.base_how}), measured in this run, {how}; "
            f"{ab.decision.pairs} {unit} in {ab.elapsed_s:.1f} s; {ab.decision.reason}",
        ),
        (f"A/B per-round P95 ratio (B/A, {per_round} each)", shown or "-"),
    ]


def _trend_values(
    inp: ReportInput, sid: str, cur: ScenarioResult | None
) -> list[tuple[str, float]]:
    points = [
        (sha, r.latency_ns.p95 / 1e6)
        for sha, r in inp.history.get(sid, ())
        if r.latency_ns is not None
    ]
    if cur is not None and cur.latency_ns is not None:
        sha = inp.run.commit.sha or "current"
        if points and points[-1][0] == sha:
            points.pop()
        points.append((sha, cur.latency_ns.p95 / 1e6))
    return points


@dataclass(frozen=True)
class ABBase:
    """The base side of a cell judged by same-run A/B: its commit and its result of
    this run (None: its figures were not kept)."""

    commit: str
    result: ScenarioResult | None


def _ab_trend_values(
    inp: ReportInput, sid: str, cur: ScenarioResult, ab: ABBase
) -> tuple[list[tuple[str, float]], int]:
    """The trend of a same-run A/B cell: its archived points (other run conditions),
    then its A/B points (the base's of this run, then this run's), and where they start.

    The archive's points were measured in other runs, one side at a time; the A/B's
    two sides in this one, interleaved: never one series."""
    head = inp.run.commit.sha or "current"
    archived = [
        (sha, r.latency_ns.p95 / 1e6)
        for sha, r in inp.history.get(sid, ())
        if r.latency_ns is not None and sha != head
    ]
    pair = []
    if ab.result is not None and ab.result.latency_ns is not None:
        pair.append((ab.commit, ab.result.latency_ns.p95 / 1e6))
    assert cur.latency_ns is not None
    pair.append((head, cur.latency_ns.p95 / 1e6))
    return [*archived, *pair], len(archived)


def _add_plots(
    row: Row,
    inp: ReportInput,
    cur: ScenarioResult | None,
    base: ScenarioResult | None,
    full: bool,
    siblings: Sequence[ScenarioResult],
    side: str = "baseline",
    changed: Collection[str] = (),
    ab: ABBase | None = None,
) -> None:
    """The cell's figures; ``side`` names its base in the captions (``baseline``, or
    ``the A/B base`` for a cell judged by same-run A/B, whose base ``ab`` gives)."""
    base_samples = base.samples_ns if base is not None else None
    # The caption names only the curves drawn: no baseline samples, no baseline curve.
    if cur is not None and cur.samples_ns:
        draw = plots.cdf_svg if full else plots.cdf_sparkline
        row.cdf = Markup(draw(cur.samples_ns, base_samples))
        row.cdf_caption = (
            f"latency CDF: {side} (blue) and current (red)"
            if base_samples
            else f"latency CDF: current (red); no {side} samples to compare with"
        )
    elif base_samples:
        row.cdf = Markup(plots.cdf_sparkline(None, base_samples))
        row.cdf_caption = f"latency CDF: {side} (blue); not measured in this run"
    measured = cur is not None and cur.latency_ns is not None
    ab_from: int | None = None
    if ab is not None and cur is not None and measured:
        points, ab_from = _ab_trend_values(inp, row.sid, cur, ab)
    else:
        points = _trend_values(inp, row.sid, cur)
    row.trend_points = len(points)
    # The trend's last point is drawn as this run: only when this run measured the cell;
    # an A/B cell's only when there is an archived point besides its A/B figures.
    if len(points) >= 2 and measured and ab_from != 0:
        limit = len(points) if ab_from is None else ab_from
        marks = [i for i, (sha, _) in enumerate(points[:limit]) if sha in changed]
        row.trend_changes = len(marks)
        row.trend = Markup(
            plots.trend_svg(points, marks, ab_from)
            if full
            else plots.trend_sparkline([v for _, v in points], marks, ab_from)
        )
        row.trend_caption = _trend_caption(len(points), len(marks), ab_from, full)
    cells = [s for s in siblings if s.latency_ns is not None and s.throughput]
    if full and cur is not None and 3 <= len(cells) <= MAX_SCATTER_CELLS and cur in cells:
        row.scatter = Markup(
            plots.scatter_svg(
                [
                    (s.latency_ns.p50 / 1e6, float(s.throughput or 0.0))  # type: ignore[union-attr]
                    for s in cells
                ],
                cells.index(cur),
            )
        )
        row.scatter_legend = [
            (i + 1, s.backend, s.device, s.precision) for i, s in enumerate(cells)
        ]


def _trend_caption(points: int, changes: int, ab_from: int | None, full: bool) -> str:
    """The trend's caption, naming what ``plots.trend_svg``/``trend_sparkline`` draw."""
    marked = ""
    if changes:
        s = "s" if changes > 1 else ""
        marked = (
            f"; dashed grey line{s}: {changes} change point{s} (a new level from that commit on)"
        )
    if ab_from is None:
        return f"P95 over {points} commits, oldest first; this run in red{marked}"
    base = points - ab_from > 1
    shape = "hollow grey circles, dotted" if full else "dotted grey"
    pair = "the A/B base (blue) and this run (red)" if base else "this run (red)"
    return (
        f"P95: {ab_from} archived commit{'s' if ab_from != 1 else ''}, oldest first "
        f"({shape}: {plots.ARCHIVED_LABEL}, not comparable with the A/B figures), then "
        f"this run's same-run A/B apart from them: {pair}{marked}"
    )


def build_rows(inp: ReportInput) -> list[Row]:
    """One row per scenario of the run and per verdict-only (missing) id, worst outcome
    first (``perfguard.judge.outcome``)."""
    current = {s.id: s for s in inp.run.scenarios}
    verdicts = {v.scenario_id: v for v in inp.verdicts}
    ab_judged = {sid for sid, v in verdicts.items() if v.mode == "ab"}
    outcomes = {c.scenario_id: c for c in inp.outcome.cells}
    order = list(outcomes)
    siblings: dict[tuple[str, str], list[ScenarioResult]] = {}
    for s in inp.run.scenarios:
        if not s.load:  # load levels get their own curve (perfguard.report.loadsections)
            siblings.setdefault((s.suite, s.name), []).append(s)
    found = inp.changes
    rows = []
    budget = FULL_PLOT_BUDGET
    for index, sid in enumerate(order):
        cur, base = current.get(sid), inp.baseline.get(sid)
        row = _row(index, sid, cur, base, verdicts.get(sid), outcomes[sid], inp.contention_limit)
        full = budget > 0 and cur is not None and bool(cur.samples_ns)
        budget -= int(full)
        group = siblings.get((cur.suite, cur.name), []) if cur is not None else []
        side = "the A/B base" if sid in ab_judged else "baseline"
        p95 = {c.commit for c in found.get(sid, ()) if c.metric == "p95"}
        ab_detail = verdicts[sid].ab if sid in ab_judged else None
        ab = ABBase(ab_detail.base, base) if ab_detail is not None else None
        _add_plots(row, inp, cur, base, full, group, side, p95, ab)
        row.profile = profile_view(cur, base)
        row.tokens = token_view(cur, base, verdicts.get(sid), full=full)
        rows.append(row)
    return rows


def run_token(run: RunResult) -> str:
    """Which run a report shows: a digest of the run as its ``results.json`` holds it, kept
    in ``report.html``'s head so the index links a report only beside its own results (a
    report left by an earlier run, whose rewrite failed, is not this run's)."""
    text = json.dumps(run.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def render_html(inp: ReportInput) -> str:
    """The self-contained HTML report (inline CSS, SVG and JS; no external URL)."""
    plots.reset_ids()
    rows = build_rows(inp)
    outcome = inp.outcome
    busy = busy_host(inp.run.scenarios, inp.contention_limit)
    # A canary read on a busy host says nothing of the machine's speed: no banner says
    # "faster" or "slower" then; the busy banner says why.
    ratio = (
        None
        if busy is not None
        else canary_ratio(inp.run.scenarios, inp.baseline, inp.contention_limit)
    )
    info = dict(inp.baseline_info or {})
    base_env = inp.baseline_environment
    context = {
        "run": inp.run,
        "run_token": run_token(inp.run),
        "commit": inp.run.commit,
        "gate": inp.gate,
        "baseline_commit": info.get("commit")
        or (next((v.baseline_commit for v in inp.verdicts if v.baseline_commit), None)),
        "baseline_how": info.get("how") or ("no baseline" if not inp.baseline else ""),
        "baseline_path": info.get("path"),
        "baseline_launches": info.get("launches"),
        "outcome": outcome,
        "headline": outcome.headline(),
        "counts": {o.value: n for o, n in outcome.counts.items()},
        "also_counts": {o.value: n for o, n in outcome.also_counts.items()},
        "count_labels": {o.value: o.label for o in OUTCOMES},
        "env_diff": env_diff(inp),
        "canary_ratio": ratio,
        "canary_moved": ratio is not None and abs(ratio - 1.0) > CANARY_BANNER,
        "canary_change": pct(ratio) if ratio is not None else "",
        "busy_host": busy.text() if busy is not None else "",
        "rows": rows,
        "filters": {
            "outcome": sorted({r.outcome for r in rows}, key=lambda o: Outcome(o).rank),
            "backend": sorted({r.backend for r in rows}),
            "device": sorted({r.device for r in rows}),
        },
        "telemetry_gaps": [
            (gap, cells_named(ids)) for gap, ids in telemetry_gaps(inp.run.scenarios)
        ],
        "environment": inp.run.environment,
        "baseline_environment": base_env,
        **load_context(inp, {r.sid: r.anchor for r in rows}),
    }
    return environment().get_template("report.html.j2").render(**context)
