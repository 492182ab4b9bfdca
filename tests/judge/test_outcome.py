"""The outcome model: what became of each cell and of the run (perfguard.judge.outcome)."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from _pytest._io import TerminalWriter
from hypothesis import given
from hypothesis import strategies as st

from perfguard.core.errors import AccuracyFailure, InconclusiveFailure
from perfguard.core.policy import GateSpec
from perfguard.core.progress import ProgressEvent
from perfguard.judge.compare import compare_scenario
from perfguard.judge.outcome import (
    ALSO,
    OUTCOMES,
    AlsoOutcome,
    Outcome,
    RunOutcome,
    cell_outcome,
    grouped,
    run_outcome,
)
from perfguard.judge.verdict import (
    ABDetail,
    Decision,
    DecisionKind,
    MetricVerdict,
    ScenarioVerdict,
    VerdictKind,
)
from perfguard.plugin.items import PlainRepr
from perfguard.plugin.terminal import ProgressPrinter, write_summary
from perfguard.records.accuracyfigures import AccuracyFigures
from perfguard.records.figures import summarize
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult, Status
from perfguard.records.resultsfile import write_results
from perfguard.report import render_html, render_markdown
from perfguard.report.comparison import comparison_path, read_comparison, write_comparison
from perfguard.report.index import render_index
from perfguard.report.model import ReportInput
from perfguard.report.tables import outcome_lines
from perfguard.run.cell import judged_end
from perfguard.run.finish import RunFiles
from perfguard.worker.client import WorkerProcess
from tests.helpers.results import run_of
from tests.helpers.samples import lognormal
from tests.helpers.samples import result as measured

SAMPLES = tuple(range(1_000_000, 1_000_100))


def cell(
    sid: str,
    status: Status = Status.PASSED,
    *,
    message: str | None = None,
    accuracy_failures: tuple[str, ...] | None = None,
    figures: bool = True,
    inconclusive: tuple[str, ...] = (),
) -> ScenarioResult:
    accuracy = (
        AccuracyFigures(n=4, failures=accuracy_failures, inconclusive=inconclusive)
        if accuracy_failures is not None
        else None
    )
    return ScenarioResult(
        id=sid,
        suite="s.yaml",
        name="m",
        backend="torch",
        device="cpu",
        precision="fp32",
        status=status,
        message=message,
        latency_ns=summarize(SAMPLES) if figures else None,
        accuracy=accuracy,
    )


def p95(kind: VerdictKind, *, lower: float = 0.99, upper: float = 1.01) -> MetricVerdict:
    return MetricVerdict(
        "p95", kind, f"P95 latency {kind.value}", "rule", ratio=1.0, lower=lower, upper=upper,
        limit=0.05, effective_limit=0.05,
    )  # fmt: skip


def judged(
    sid: str, kind: VerdictKind, *, blind: bool = False, mode: str = "archived"
) -> ScenarioVerdict:
    metric = p95(kind, lower=0.8 if blind else 0.99)
    return ScenarioVerdict(
        sid, kind, (metric,), "b" * 40, messages=(f"{kind.value} because",), mode=mode
    )


# --------------------------------------------------------------------------- cells


def test_each_outcome_from_its_inputs() -> None:
    cases = [
        (cell("a", Status.ERROR, message="boom", figures=False), None, Outcome.ERROR, True),
        (cell("a", Status.FAILED), judged("a", VerdictKind.REGRESSION), Outcome.REGRESSION, True),
        (
            cell("a", Status.FAILED, accuracy_failures=("cos 0.9 < 0.99",)),
            judged("a", VerdictKind.UNCHANGED),
            Outcome.ACCURACY,
            True,
        ),
        (cell("a", Status.FAILED, message="no figures", figures=False), None, Outcome.FAILED, True),
        # --perfguard-inconclusive=fail: measured, failed with the verdict's reason.
        (
            cell("a", Status.FAILED, message="invalid: busy"),
            judged("a", VerdictKind.INVALID),
            Outcome.INCONCLUSIVE,
            True,
        ),
        (cell("a"), judged("a", VerdictKind.INVALID), Outcome.INCONCLUSIVE, False),
        (cell("a"), judged("a", VerdictKind.UNCHANGED, blind=True), Outcome.BLIND, False),
        (None, judged("a", VerdictKind.MISSING), Outcome.MISSING, False),
        (cell("a"), judged("a", VerdictKind.INCOMPARABLE), Outcome.INCOMPARABLE, False),
        (cell("a"), judged("a", VerdictKind.NEW), Outcome.NEW, False),
        (cell("a"), None, Outcome.NEW, False),
        (cell("a"), judged("a", VerdictKind.IMPROVEMENT), Outcome.IMPROVEMENT, False),
        (cell("a", Status.SKIPPED, message="no onnxruntime"), None, Outcome.SKIPPED, False),
        (cell("a"), judged("a", VerdictKind.UNCHANGED), Outcome.PASSED, False),
    ]
    for result, verdict, outcome, failed in cases:
        got = cell_outcome(result, verdict)
        assert (got.outcome, got.failed) == (outcome, failed), (result, verdict)


def test_gate_off_regression_passes_its_item_but_is_still_a_regression() -> None:
    got = cell_outcome(cell("a"), judged("a", VerdictKind.REGRESSION), gate=False)
    assert got.outcome is Outcome.REGRESSION and not got.failed
    run = run_outcome([cell("a")], [judged("a", VerdictKind.REGRESSION)], gate=False)
    assert run.state == "warnings" and run.headline() == "⚠️ passed with 1 regression"
    # A stored run judged again with the gate on fails, as the plugin would have.
    assert run_outcome([cell("a")], [judged("a", VerdictKind.REGRESSION)]).failed


def test_blind_note_says_the_fix_for_its_mode() -> None:
    archived = cell_outcome(cell("a"), judged("a", VerdictKind.UNCHANGED, blind=True))
    ab = cell_outcome(cell("a"), judged("a", VerdictKind.UNCHANGED, blind=True, mode="ab"))
    assert archived.reason == (
        "P95 latency limit +5%, but only >= +25% is detectable here: use --perfguard-ab "
        "(same-run A/B) or a quieter machine"
    )
    assert ab.reason.endswith("run more A/B pairs or use a quieter machine")
    assert archived.detectable is not None and archived.detectable > 0.05
    one_side = judged("a", VerdictKind.UNCHANGED, blind=True, mode="ab")
    decision = Decision(
        stop=True, verdict=DecisionKind.UNCHANGED, ratio=1.0, lo=0.8, hi=1.25, pairs=0, reason=""
    )
    one_side = replace(
        one_side, ab=ABDetail(base="a" * 40, base_how="HEAD~1", decision=decision,
                              elapsed_s=1.0, levels="alone"),
    )  # fmt: skip
    alone = cell_outcome(cell("a"), one_side)
    assert alone.reason.endswith("measure each side longer (`measure.seconds`) or use a "
                                 "quieter machine")  # fmt: skip


def test_a_regressed_cell_that_failed_accuracy_too_says_both() -> None:
    result = cell("a", Status.FAILED, accuracy_failures=("cos 0.9 < 0.99",))
    got = cell_outcome(result, judged("a", VerdictKind.REGRESSION))
    assert got.outcome is Outcome.REGRESSION and "P95 latency regression" in got.reason
    assert got.also == (AlsoOutcome(Outcome.ACCURACY, "cos 0.9 < 0.99"),)
    assert got.label() == "regression + accuracy failure"
    # Both lines are failures (red): the accuracy failure failed the item too.
    lines = outcome_lines(run_outcome([result], [judged("a", VerdictKind.REGRESSION)]))
    assert lines == [
        ("regression: a: P95 latency regression; regression because", True),
        ("accuracy failure: a: cos 0.9 < 0.99", True),
    ]


# --------------------------------------------------------------------------- runs

STATUSES = st.sampled_from(list(Status))
KINDS = st.one_of(st.none(), st.sampled_from(list(VerdictKind)))


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[ScenarioResult], list[ScenarioVerdict], bool, int]:
    n = draw(st.integers(0, 8))
    results, verdicts = [], []
    for i in range(n):
        sid = f"s::c{i}"
        status = draw(STATUSES)
        failures = draw(st.one_of(st.none(), st.just(()), st.just(("cos low",))))
        degenerate = draw(st.sampled_from([(), ("reference degenerate",)]))
        if draw(st.booleans()) or status is not Status.PASSED:
            message = draw(st.sampled_from(["", "why"]))
            figures = draw(st.booleans())
            results.append(cell(sid, status, message=message, accuracy_failures=failures,
                                figures=figures, inconclusive=degenerate))  # fmt: skip
        kind = draw(KINDS)
        if kind is not None:
            verdicts.append(judged(sid, kind, blind=draw(st.booleans())))
        elif not results or results[-1].id != sid:
            verdicts.append(judged(sid, VerdictKind.MISSING))
    return results, verdicts, draw(st.booleans()), draw(st.sampled_from([0, 0, 1, 2]))


@given(runs())
def test_run_outcome_invariants(
    run: tuple[list[ScenarioResult], list[ScenarioVerdict], bool, int],
) -> None:
    results, verdicts, gate, exit_status = run
    outcome = run_outcome(results, verdicts, exit_status=exit_status, gate=gate)
    ids = {r.id for r in results} | {v.scenario_id for v in verdicts}
    # Every cell is there once, an errored one too; counts sum to the cells.
    assert sorted(c.scenario_id for c in outcome.cells) == sorted(ids)
    assert sum(outcome.counts.values()) == len(ids)
    # Worst first, in the cells and in the counts.
    ranks = [c.outcome.rank for c in outcome.cells]
    assert ranks == sorted(ranks)
    assert list(outcome.counts) == [o for o in OUTCOMES if o in outcome.counts]
    # The run passes iff every cell ran, was judged and passed, and pytest exited 0.
    clean = all(c.outcome in (Outcome.PASSED, Outcome.IMPROVEMENT) for c in outcome.cells)
    failing = any(r.status in (Status.FAILED, Status.ERROR) for r in results)
    assert outcome.passed == (bool(ids) and clean and not failing and exit_status == 0)
    # A failed item, or a non-zero exit status, is never reported as passing.
    if failing or exit_status:
        assert outcome.state == "failed" and outcome.headline().startswith("❌")
    if any(r.status is Status.ERROR for r in results):
        assert outcome.counts.get(Outcome.ERROR)
    assert outcome.headline().startswith("✅") == outcome.passed
    # Findings beside an outcome are less severe, of the kinds that can be, each once.
    for c in outcome.cells:
        kinds = [a.outcome for a in c.also]
        assert all(k in ALSO and k.rank > c.outcome.rank for k in kinds)
        assert len(set(kinds)) == len(kinds) and c.outcomes == (c.outcome, *kinds)
    assert sum(outcome.also_counts.values()) == sum(len(c.also) for c in outcome.cells)
    # A degenerate reference never reads as clean.
    for r in results:
        if r.accuracy is not None and r.accuracy.inconclusive:
            got = next(c for c in outcome.cells if c.scenario_id == r.id)
            assert not got.outcome.clean
            assert Outcome.INCONCLUSIVE in got.outcomes or got.outcome in (
                Outcome.ERROR, Outcome.SKIPPED, Outcome.FAILED
            )  # fmt: skip
    # Round trip.
    assert RunOutcome.from_dict(outcome.to_dict()) == outcome


def test_headlines_and_counts() -> None:
    ok = run_outcome([cell("a"), cell("b")], [judged("a", VerdictKind.UNCHANGED),
                     judged("b", VerdictKind.IMPROVEMENT)], exit_status=0)  # fmt: skip
    assert ok.summary() == "✅ passed: 1 improvement, 1 passed (2 cells)"
    new = run_outcome([cell(f"n{i}") for i in range(4)], [], exit_status=0)
    assert new.summary() == "⚠️ passed with 4 new (4 cells)"
    bad = run_outcome(
        [cell("e", Status.ERROR, message="x", figures=False), cell("ok")],
        [judged("ok", VerdictKind.UNCHANGED)],
        exit_status=1,
    )
    assert bad.summary() == "❌ error: 1 error, 1 passed (2 cells)"
    # pytest failed for a reason no cell explains (a suite that did not load).
    outside = run_outcome([cell("ok")], [judged("ok", VerdictKind.UNCHANGED)], exit_status=1)
    assert outside.headline() == "❌ failed (pytest exit status 1)"


def test_same_reason_cells_are_one_group() -> None:
    run = run_outcome([cell(f"s::c{i}") for i in range(10)], [])
    [(outcome, who, reason)] = grouped(run.cells)
    assert outcome is Outcome.NEW and reason == "not compared"
    assert who == "new (10): s::c0, s::c1, s::c2, s::c3, s::c4 and 5 more"


# --------------------------------------------------------------------------- wording


def test_an_invalid_run_says_its_reason_once() -> None:
    busy = replace(measured(lognormal(300, 1)), stable=False, stability_ratio=1.4)
    v = compare_scenario(
        busy,
        measured(lognormal(300, 2)),
        (GateSpec("p95", 0.05), GateSpec("throughput", 0.05, higher_is_worse=False)),
        baseline_commit="c" * 40,
    )
    assert v.verdict is VerdictKind.INVALID
    text = "; ".join(v.messages)
    assert text.count("this run was unstable") == 1, text
    # Each metric still says why on its own.
    assert all("this run was unstable" in m.message for m in v.metrics)
    got = cell_outcome(busy, v)
    assert got.outcome is Outcome.INCONCLUSIVE and got.reason.count("unstable") == 1


def test_a_blind_latency_verdict_names_what_it_could_see() -> None:
    rng_base, rng_cur = lognormal(120, 3, sigma=0.8), lognormal(120, 4, sigma=0.8)
    v = compare_scenario(
        measured(rng_cur), measured(rng_base), (GateSpec("p95", 0.05),), baseline_commit="c" * 40
    )
    metric = v.metrics[0]
    assert metric.blind and metric.verdict is not VerdictKind.REGRESSION
    assert metric.message.endswith(f"only >= +{metric.detectable * 100:.0f}% was detectable")


# --------------------------------------------------------------------------- sinks


def test_worker_stderr_tail_is_plain() -> None:
    worker = WorkerProcess(name="evil")
    # Not started: the tail is what was kept at close.
    worker._final_tail = "ok\n\x1b]8;;http://x\x07link\x1b]8;;\x07\n::add-mask::secret\n\rdone"
    tail = worker.stderr_tail()
    assert "\x1b" not in tail and "\r" not in tail
    assert not any(line.lstrip().startswith("::") for line in tail.splitlines())
    assert "link" in tail and "add-mask" in tail and "done" in tail


def test_progress_printer_rate_limits_per_step_and_always_prints_the_final() -> None:
    now = [0.0]
    lines: list[str] = []
    printer = ProgressPrinter(lines.append, clock=lambda: now[0], log_interval_s=1.0)
    for i in range(10):  # ten events within 0.9 s: one line
        now[0] = i * 0.1
        printer(ProgressEvent("quantize", i, 10, cell="m"))
    printer(ProgressEvent("export", 0, cell="m"))  # another step: its own line
    now[0] = 1.5
    printer(ProgressEvent("quantize", 10, 10, cell="m"))  # a second later: printed
    printer(ProgressEvent("quantize", 10, 10, cell="m", detail="done in 1.5 s", final=True))
    printer(ProgressEvent("export", 1, cell="m\x1b[2J", final=True))
    assert lines == [
        "perfguard: quantize m: 0/10",
        "perfguard: export m",
        "perfguard: quantize m: 10/10",
        "perfguard: quantize m: 10/10 (done in 1.5 s)",
        "perfguard: export m",
    ]


def test_index_reads_how_old_and_new_runs_ended(tmp_path: Path) -> None:
    """An old comparison.json (no exit_status) is judged from results.json's statuses;
    a new one carries pytest's exit status, which fails a run no cell explains."""
    failing = [cell("s::boom", Status.FAILED, message="import failed", figures=False)]
    passing = [cell("s::ok")]
    for sha, cells, status in (("1" * 40, failing, None), ("2" * 40, passing, 2),
                               ("3" * 40, passing, 0)):  # fmt: skip
        run = RunResult(
            commit=CommitInfo(sha=sha, branch="b", dirty=False),
            environment=Environment.of({}),
            scenarios=tuple(cells),
            created_at=f"2026-01-0{sha[0]}T00:00:00+00:00",
            perfguard_version="0",
        )
        path = write_results(run, tmp_path)
        write_comparison(
            comparison_path(path),
            baseline={},
            gate=True,
            verdicts=[judged(c.id, VerdictKind.UNCHANGED) for c in cells if c.passed],
            exit_status=status,
        )
        if status is None:
            data = json.loads(comparison_path(path).read_text())
            assert "exit_status" not in data
        else:
            assert read_comparison(comparison_path(path)).exit_status == status
    index = render_index(tmp_path).read_text()
    states = dict(re.findall(r'data-commit="(\w+)" data-state="(\w+)"', index))
    assert states == {"1" * 12: "failed", "2" * 12: "failed", "3" * 12: "passed"}


def test_a_traceback_carrying_escapes_is_written_plain() -> None:
    out = io.StringIO()
    PlainRepr("E   RuntimeError: \x1b[31mred\n::add-mask::x").toterminal(TerminalWriter(out))
    text = out.getvalue()
    assert "\x1b" not in text and "red" in text
    assert not any(line.startswith("::") for line in text.splitlines())


# --------------------------------------------------------------------------- every verdict


class Terminal:
    """What ``write_summary`` writes, line by line (a pytest terminal reporter's part)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, bool]]] = []

    def section(self, title: str) -> None:
        self.lines.append((f"== {title}", {}))

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append((line, markup))


def test_an_accuracy_failure_beside_an_invalid_latency_verdict_shows_both_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28: the P95 verdict (invalid) of a cell failing accuracy appeared only in
    comparison.json; every output now shows both findings, from the one outcome."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    busy = "P95 latency invalid: other processes took 60% of the CPUs"
    invalid = ScenarioVerdict(
        "s::bad", VerdictKind.INVALID, (replace(p95(VerdictKind.INVALID), message=busy),),
        "b" * 40, messages=(busy,),
    )  # fmt: skip
    measured_cell = replace(
        cell("s::bad"),
        accuracy=AccuracyFigures(n=4, failures=("cosine similarity min 0.42 < 0.99",)),
    )
    end = judged_end(
        measured_cell, invalid, gate=True, inconclusive_fails=False, base_profile=lambda r, v: None
    )
    # The pytest failure names both.
    assert isinstance(end.failure, AccuracyFailure) and end.warning is None
    assert end.record.message == (f"cosine similarity min 0.42 < 0.99\nalso inconclusive: {busy}")
    results = [end.record, cell("s::ok")]
    verdicts = [invalid, judged("s::ok", VerdictKind.UNCHANGED)]
    run = run_outcome(results, verdicts, exit_status=1)

    bad = next(c for c in run.cells if c.scenario_id == "s::bad")
    assert bad.outcome is Outcome.ACCURACY and bad.failed
    assert bad.also == (AlsoOutcome(Outcome.INCONCLUSIVE, busy),)
    assert run.counts == {Outcome.ACCURACY: 1, Outcome.PASSED: 1}  # one per cell
    assert run.also_counts == {Outcome.INCONCLUSIVE: 1}
    summary = "❌ accuracy failure: 1 accuracy failure, 1 passed (2 cells; also 1 inconclusive)"
    assert run.summary() == summary

    # The terminal: the outcome column, the inconclusive line (not red), the last line.
    terminal = Terminal()
    write_summary(
        terminal, baseline_how="b", results=results, verdicts={v.scenario_id: v for v in verdicts},
        locations={}, files=RunFiles(), outcome=run,
    )  # fmt: skip
    text = [line for line, _ in terminal.lines]
    [row] = [line for line in text if line.startswith("s::bad ")]
    assert row.endswith("ACCURACY FAILURE + inconclusive")
    assert (f"inconclusive: s::bad: {busy}", {"yellow": True}) in terminal.lines
    assert any(line.startswith("accuracy failure: s::bad: cosine") for line in text)
    assert text[-1] == f"perfguard: {summary}"
    # GitHub: the failure is an error, the inconclusive gate a warning of its own.
    assert any(
        line.startswith("::warning ") and "perfguard inconclusive" in line and "60%" in line
        for line in text
    )

    # summary.md (the PR comment) and report.html.
    inp = ReportInput(run=run_of(results), verdicts=tuple(verdicts), exit_status=1)
    md = render_markdown(inp)
    assert "1 accuracy failure, 1 passed (2 cells; also 1 inconclusive)" in md
    assert "**Accuracy failures (1)**" in md and "**Inconclusive (1)**" in md
    assert "beside its accuracy failure: P95 latency invalid: other processes" in md
    html = render_html(inp)
    assert "also inconclusive: <b>1</b>" in html
    assert "accuracy failure + inconclusive" in html
    assert f'<p class="reason also">inconclusive: {busy}</p>' in html


def test_a_degenerate_reference_makes_a_passing_cell_inconclusive() -> None:
    """Accuracy checks not made (the reference is degenerate) are neither passed nor
    failed: the cell is inconclusive, and under --perfguard-inconclusive=fail it fails."""
    why = "accuracy on output logits not checked: reference r is degenerate (near zero)"
    degenerate = replace(cell("s::q"), accuracy=AccuracyFigures(n=4, inconclusive=(why,)))
    unchanged = judged("s::q", VerdictKind.UNCHANGED)
    got = cell_outcome(degenerate, unchanged)
    assert (got.outcome, got.failed, got.reason, got.also) == (Outcome.INCONCLUSIVE, False, why, ())
    run = run_outcome([degenerate], [unchanged], exit_status=0)
    assert run.summary() == "⚠️ passed with 1 inconclusive (1 cell)"

    warned = judged_end(
        degenerate, unchanged, gate=True, inconclusive_fails=False, base_profile=lambda r, v: None
    )
    assert warned.failure is None and warned.warning is not None
    assert str(warned.warning).startswith(
        f"s::q is inconclusive (accuracy not checked), not gated: {why}. It passes under"
    )
    failed = judged_end(
        degenerate, unchanged, gate=True, inconclusive_fails=True, base_profile=lambda r, v: None
    )
    assert isinstance(failed.failure, InconclusiveFailure)
    assert failed.record.status is Status.FAILED
    # Judged again from the stored record (failed by that choice): still inconclusive.
    again = cell_outcome(failed.record, unchanged)
    assert again.outcome is Outcome.INCONCLUSIVE and again.failed
