"""How one cell is measured and judged: which of the three paths, and its accuracy.

* same-run A/B (``--perfguard-ab``): the base revision's worker and this tree's,
  interleaved request by request (a cell under load: in rounds of load levels, each
  shared by both sides' requests where it can be, see :mod:`perfguard.ab.rounds`),
  judged on the paired comparison;
* an isolated worker process (``--perfguard-isolate``, ``isolate: true``, or a cell
  that gates ``peak_memory``: ``Scenario.own_process``): a crash fails only that cell,
  and its peak memory is its own;
* in-process: the default.

A cell A/B cannot take (new in this tree, or an SLO search) goes through the
isolated or in-process path, and its verdict says why. Outside A/B a suspected
regression is re-measured (the gatekeeper's confirmation rounds) before it stands.

Operator profiles (:mod:`perfguard.measure.profiling`) are taken after the cell's timed
measurement and its verdict, never inside it, on the session (or worker, or both A/B
worker slots) that measured it: for a cell with ``profile: true``, for every cell under
``--perfguard-profile``, and for every cell whose latency or throughput regressed. A
profiler that fails leaves a note on the verdict, which stays what it was.

What a cell's outcome means for its test is decided here too, whoever runs it
(:class:`CellEnd`): what the run keeps of it, and whether it passes, warns or fails
with which exception (:func:`judged_end` for a measured and judged cell,
:func:`ended_by` for one an exception stopped). The pytest plugin only records it and
raises or warns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfguard.ab.abrun import ABRun, take_profile
from perfguard.accuracy.checker import AccuracyChecker
from perfguard.core.blame import first_line
from perfguard.core.errors import (
    AccuracyFailure,
    BackendUnavailable,
    GateFailure,
    InconclusiveFailure,
    InconclusiveWarning,
    PerfguardError,
    RunInvalid,
)
from perfguard.core.policy import LATENCY_QS
from perfguard.core.scenario import Scenario
from perfguard.judge.gatekeeper import Gatekeeper, failure_message
from perfguard.judge.outcome import Outcome, cell_outcome, profile_line
from perfguard.judge.verdict import ScenarioVerdict, VerdictKind
from perfguard.measure.generation import open_generator
from perfguard.measure.opencell import RunContext, open_session
from perfguard.measure.profiling import PROFILE_REQUESTS, profile_session
from perfguard.measure.runner import ScenarioRun
from perfguard.records.opprofile import OperatorProfile
from perfguard.records.results import ScenarioResult, Status
from perfguard.report.runfolder import trace_paths
from perfguard.worker.isolate import IsolatedRun

#: What an inconclusive cell's message says to do.
INCONCLUSIVE_FIX = (
    "re-run on an idle machine; raise --perfguard-contention-limit (ini "
    "perfguard_contention_limit) if this machine is never quieter; or gate with "
    "--perfguard-ab, whose paired design tolerates a busy neighbour"
)

#: Gated figures whose regression has a cell profiled without being asked: time
#: figures, which an operator profile explains. Not peak memory (a profile shows time,
#: not memory) nor accuracy (wrong outputs are not a question of where the time went).
PROFILED_REGRESSIONS = frozenset({*LATENCY_QS, "throughput"})


def regressed_in_time(verdict: ScenarioVerdict) -> bool:
    """Whether a latency or throughput figure of ``verdict`` regressed."""
    return any(m.verdict.failed and m.metric in PROFILED_REGRESSIONS for m in verdict.metrics)


class CellMeasurer:
    """Measures a cell on the path its settings choose, checks its accuracy, and profiles
    it when asked (``profile_every``, ``profile: true``) or when its time regressed.

    ``run_folder`` gives the run's report folder (``<commit12>``, ``<commit12>-ab``), in
    whose ``traces/`` the Chrome traces of profiled cells are written."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        isolate: bool,
        ab: ABRun | None,
        gatekeeper: Callable[[], Gatekeeper],
        suites: Mapping[Path, tuple[Scenario, ...]],
        profile_every: bool = False,
        run_folder: Callable[[], Path] | None = None,
    ) -> None:
        self.ctx = ctx
        self.isolate = isolate
        self.ab = ab
        self.profile_every = profile_every
        self._run_folder = run_folder
        self._gatekeeper = gatekeeper  # resolved lazily: the baseline is chosen once
        self.accuracy = AccuracyChecker(
            open_session=lambda scenario, calibration: open_session(scenario, ctx, calibration),
            scenarios_of=lambda path: suites.get(Path(path).resolve(), ()),
            open_generator=lambda scenario: open_generator(scenario, ctx),
        )

    def measure_and_judge(self, scenario: Scenario) -> tuple[ScenarioResult, ScenarioVerdict]:
        ab = self.ab
        if ab is not None and ab.compares(scenario):
            if ab.one_side_at_a_time(scenario):
                result, verdict = ab.measure_each_alone(scenario, self.ctx, self._gatekeeper())
            else:
                result, verdict = ab.measure(scenario, self.ctx, self._ab_traces)
            return self._with_accuracy(scenario, result), verdict
        gatekeeper = self._gatekeeper()
        if self.isolate or scenario.own_process:
            with IsolatedRun(scenario, self.ctx) as iso:
                measured = iso.measure()
                result, verdict = gatekeeper.judge_confirmed(measured, scenario.gates, iso.measure)
                result, verdict = self._profiled(
                    scenario,
                    result,
                    verdict,
                    lambda trace: iso.profile(PROFILE_REQUESTS, trace),
                )
            result = self._with_accuracy(scenario, result)
        else:
            calibration = self.accuracy.calibration_for(scenario)
            with ScenarioRun(scenario, self.ctx, calibration) as run:
                result, verdict = gatekeeper.judge_confirmed(
                    run.measure(), scenario.gates, run.measure
                )
                if scenario.accuracy is not None:
                    opened = run.generator if scenario.generate is not None else run.session
                    result = self._accuracy_of(scenario, opened, result)
                # A load cell too: one stream of requests at concurrency 1 on its session.
                result, verdict = self._profiled(
                    scenario,
                    result,
                    verdict,
                    lambda trace: profile_session(
                        scenario, run.session, run.prepared, trace_path=trace
                    ),
                )
        if ab is not None:  # only in the working tree, an SLO search, or load on one side
            verdict = ab.outside_ab(scenario, verdict)
        return result, verdict

    # -- operator profiles ------------------------------------------------------------
    def wants_profile(self, scenario: Scenario, verdict: ScenarioVerdict) -> bool:
        """``profile: true``, ``--perfguard-profile``, or a latency/throughput regression;
        never a generative cell (its token figures split prefill from decode instead) nor
        a served model (its operators run in the server, out of perfguard's sight)."""
        if scenario.generate is not None or scenario.model.server is not None:
            return False
        return scenario.profile or self.profile_every or regressed_in_time(verdict)

    def base_profile(
        self, result: ScenarioResult, verdict: ScenarioVerdict
    ) -> OperatorProfile | None:
        """The profile ``result``'s is diffed against: the A/B base side's, measured in
        this run, or the archived baseline's stored one (never measured again)."""
        if verdict.mode == "ab":
            return verdict.ab.profile_a if verdict.ab is not None else None
        base = self._gatekeeper().archive.baseline_result(result.id)
        return base.profile if base is not None else None

    def _traces(self, scenario_id: str) -> tuple[Path, Path] | None:
        """(this tree's, the A/B base's) trace paths of a cell; None: no trace kept."""
        if self._run_folder is None:
            return None
        return trace_paths(self._run_folder(), scenario_id)

    def _ab_traces(
        self, scenario: Scenario, verdict: ScenarioVerdict
    ) -> tuple[Path | None, Path | None] | None:
        """For an A/B cell: None when it is not to be profiled, else its (base, working
        tree) trace paths."""
        if not self.wants_profile(scenario, verdict):
            return None
        paths = self._traces(verdict.scenario_id)
        return (paths[1], paths[0]) if paths is not None else (None, None)

    def _profiled(
        self,
        scenario: Scenario,
        result: ScenarioResult,
        verdict: ScenarioVerdict,
        take: Callable[[Path | None], OperatorProfile],
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """``result`` with its operator profile when the cell is to be profiled. A
        profiler's failure is a note on the verdict, which otherwise stays as it was."""
        if not self.wants_profile(scenario, verdict):
            return result, verdict
        paths = self._traces(result.id)
        try:
            profile = take_profile(take, paths[0] if paths is not None else None)
        except Exception as exc:  # never fails the cell nor changes its verdict
            return result, verdict.with_note(f"operator profile not taken: {first_line(exc)}")
        return replace(result, profile=profile), verdict

    def _accuracy_of(
        self, scenario: Scenario, session: Any, result: ScenarioResult
    ) -> ScenarioResult:
        """``result`` with the cell's accuracy checked on ``session``."""
        gatekeeper = self._gatekeeper()
        accuracy, golden = self.accuracy.check(
            scenario,
            session,
            gatekeeper.archive.baseline_result(result.id),
            gatekeeper.choice.commit,
        )
        return replace(result, accuracy=accuracy, golden_outputs=golden)

    def _with_accuracy(self, scenario: Scenario, result: ScenarioResult) -> ScenarioResult:
        """Accuracy of a cell measured out of process: checked here, in a session of its own."""
        if scenario.accuracy is None:
            return result
        if scenario.generate is not None:
            with open_generator(scenario, self.ctx) as (generator, _prompts, _batch):
                return self._accuracy_of(scenario, generator, result)
        calibration = self.accuracy.calibration_for(scenario)
        with open_session(scenario, self.ctx, calibration) as (session, _prepared, _batch):
            return self._accuracy_of(scenario, session, result)


# -- what a cell's outcome means for its test ------------------------------------------


@dataclass(frozen=True)
class CellEnd:
    """How a cell's test ends: the record the run keeps (``record``, its status and
    message final), the exception that fails the test (``failure``; None: it passes, or,
    from :func:`ended_by`, the exception that stopped the cell goes on as it is), and the
    warning a passing test gives (``warning``: an inconclusive cell under
    ``--perfguard-inconclusive=warn``)."""

    record: ScenarioResult
    failure: PerfguardError | None = None
    warning: InconclusiveWarning | None = None


def judged_end(
    result: ScenarioResult,
    verdict: ScenarioVerdict,
    *,
    gate: bool,
    inconclusive_fails: bool,
    base_profile: Callable[[ScenarioResult, ScenarioVerdict], OperatorProfile | None],
) -> CellEnd:
    """A measured and judged cell, by its outcome (:func:`perfguard.judge.outcome.cell_outcome`,
    the one every output shows): a regression (``GateFailure``, with where the time
    went when the cell was profiled) or an accuracy failure (``AccuracyFailure``) fails
    it when ``gate``, its message ending with the cell's other findings (``also
    inconclusive: ...`` for a latency gate that was invalid); an inconclusive cell (an
    invalid verdict, or accuracy checks not made on a degenerate reference) fails it
    under ``inconclusive_fails`` (``InconclusiveFailure``, naming what was inconclusive
    and why) and warns otherwise; else it passes. ``base_profile`` gives the profile a
    regressed cell's is diffed against."""
    # The outcome every output shows (judge.outcome) decides; this says it to pytest.
    judged = cell_outcome(result, verdict, gate=gate)
    outcome = judged.outcome
    if gate and outcome in (Outcome.REGRESSION, Outcome.ACCURACY):
        regressed = outcome is Outcome.REGRESSION
        accuracy_failures = list(result.accuracy.failures) if result.accuracy else []
        lines = ([failure_message(verdict)] if regressed else []) + accuracy_failures
        if regressed and result.profile is not None:
            lines.append(profile_line(base_profile(result, verdict), result.profile))
        # Every verdict of the cell: an inconclusive latency gate beside an accuracy
        # failure too (the accuracy failures are listed above already).
        lines += [
            f"also {also.outcome.label}: {also.reason}"
            for also in judged.also
            if also.outcome is not Outcome.ACCURACY
        ]
        message = "\n".join(lines)
        failure: PerfguardError = GateFailure(message) if regressed else AccuracyFailure(message)
        return CellEnd(replace(result, status=Status.FAILED, message=message), failure)
    if gate and outcome is Outcome.INCONCLUSIVE:
        # The latency verdict invalid, or an accuracy check not made (its reference is
        # degenerate: that message carries its own fix), or both.
        invalid = verdict.verdict is VerdictKind.INVALID
        accuracy = list(result.accuracy.inconclusive) if result.accuracy else []
        reasons = [*(inconclusive_reasons(verdict) if invalid else []), *accuracy]
        header = (
            inconclusive_header(verdict)
            if invalid
            else f"{verdict.scenario_id} is inconclusive (accuracy not checked), not gated"
        )
        fix = INCONCLUSIVE_FIX if invalid else None
        if inconclusive_fails:
            problem = "\n".join([f"{header}:", *(f"  {line}" for line in reasons)])
            failure = InconclusiveFailure(problem, fix=fix)
            return CellEnd(replace(result, status=Status.FAILED, message=str(failure)), failure)
        warning = InconclusiveWarning(
            f"{header}: {'; '.join(reasons)}. It passes under "
            "--perfguard-inconclusive=warn; to fail it instead pass "
            "--perfguard-inconclusive=fail." + (f" Fix: {fix}" if fix else "")
        )
        return CellEnd(result, warning=warning)
    return CellEnd(result)


def ended_by(
    exc: BaseException,
    unmeasured: Callable[[Status, str], ScenarioResult],
    *,
    inconclusive_fails: bool,
) -> CellEnd:
    """A cell an exception stopped before its verdict (``unmeasured(status, message)``
    gives its record without figures). A runtime that is missing is a skip; figures
    that cannot be trusted (``RunInvalid``: a GPU throttled, a load generator behind) a
    skip, or under ``inconclusive_fails`` a failure (``InconclusiveFailure``, raised
    from ``exc``); perfguard's other errors a failure; anything else (the model's own
    exception, ``SystemExit`` from a factory) an error. A load cell's error keeps the
    figures it carries. ``failure`` is None where ``exc`` itself goes on."""
    if isinstance(exc, BackendUnavailable):
        return CellEnd(unmeasured(Status.SKIPPED, str(exc)))
    if isinstance(exc, RunInvalid):
        kept = exc.result if isinstance(exc.result, ScenarioResult) else None
        record = kept or unmeasured(Status.SKIPPED, str(exc))
        if not inconclusive_fails:
            return CellEnd(record)
        # Recorded as the test ends, so every output says failed, as pytest does.
        failure = InconclusiveFailure(f"inconclusive, not gated: {exc}", fix=INCONCLUSIVE_FIX)
        return CellEnd(replace(record, status=Status.FAILED, message=str(failure)), failure)
    if isinstance(exc, PerfguardError):
        kept = exc.result if isinstance(exc.result, ScenarioResult) else None
        return CellEnd(kept or unmeasured(Status.FAILED, str(exc)))
    # SystemExit too (a factory calling argparse, a model calling sys.exit): it is no
    # Exception, and a cell it ended unrecorded vanished from every output and from the
    # baseline a save wrote.
    return CellEnd(unmeasured(Status.ERROR, f"{type(exc).__name__}: {exc}"))


def inconclusive_reasons(verdict: ScenarioVerdict) -> list[str]:
    """What was invalid and why, with what was tried: the verdict's scenario-level
    messages (the reason, the rounds note), after any metric invalid on its own."""
    per_metric = {m.message for m in verdict.metrics}
    notes = [note for note in verdict.messages if note not in per_metric]
    # A metric invalid for a run-level reason repeats that reason (its rule); one
    # invalid on its own (too few samples, unknown metric) says why in its message.
    own = [
        m.message
        for m in verdict.metrics
        if m.verdict is VerdictKind.INVALID and m.rule not in notes
    ]
    return list(dict.fromkeys(own + notes))


def inconclusive_header(verdict: ScenarioVerdict) -> str:
    return f"{verdict.scenario_id} is inconclusive (invalid), not gated"
