"""What a cell's outcome means for its test (perfguard.run.cell): one decision for every
caller, from hand-made results and verdicts."""

from __future__ import annotations

import dataclasses

import pytest

from perfguard.core.errors import (
    AccuracyFailure,
    BackendUnavailable,
    GateFailure,
    InconclusiveFailure,
    LoadError,
    RunInvalid,
)
from perfguard.judge.verdict import ScenarioVerdict, VerdictKind
from perfguard.records.accuracyfigures import AccuracyFigures
from perfguard.records.opprofile import OperatorProfile
from perfguard.records.results import ScenarioResult, Status
from perfguard.run.cell import INCONCLUSIVE_FIX, ended_by, judged_end
from tests.helpers.results import p95_verdict, scenario

SID = "suites/s.yaml::m[torch]"


def no_profile(result: ScenarioResult, verdict: ScenarioVerdict) -> OperatorProfile | None:
    raise AssertionError("a profile is only asked for a regressed, profiled cell")


def test_a_regression_fails_with_the_verdict_line_and_records_it() -> None:
    result = scenario(SID)
    verdict = p95_verdict(SID, VerdictKind.REGRESSION, 1.2, "P95 latency regressed +20.0%")
    end = judged_end(result, verdict, gate=True, inconclusive_fails=False, base_profile=no_profile)
    assert isinstance(end.failure, GateFailure) and not isinstance(end.failure, AccuracyFailure)
    assert end.record.status is Status.FAILED
    assert end.record.message == "P95 latency regressed +20.0%" == str(end.failure.problem)
    assert end.warning is None
    # Without the gate (--perfguard-no-gate) the same verdict passes, recorded as measured.
    ungated = judged_end(
        result, verdict, gate=False, inconclusive_fails=True, base_profile=no_profile
    )
    assert ungated.failure is None and ungated.record == result


def test_an_accuracy_failure_fails_beside_an_unchanged_latency() -> None:
    accuracy = AccuracyFigures(n=8, failures=("cosine_min 0.9 not met: 0.42",))
    result = dataclasses.replace(scenario(SID), accuracy=accuracy)
    verdict = p95_verdict(SID, VerdictKind.UNCHANGED, 1.0, "P95 latency unchanged +0.0%")
    end = judged_end(result, verdict, gate=True, inconclusive_fails=False, base_profile=no_profile)
    assert isinstance(end.failure, AccuracyFailure)
    assert end.record.message == "cosine_min 0.9 not met: 0.42"


@pytest.mark.parametrize("fails", [True, False])
def test_an_invalid_verdict_fails_or_warns_as_asked_and_names_why(fails: bool) -> None:
    result = scenario(SID)
    verdict = dataclasses.replace(
        p95_verdict(SID, VerdictKind.INVALID, 1.0, "P95 latency invalid"),
        messages=("P95 latency invalid", "other processes took 60% of the CPUs"),
    )
    end = judged_end(result, verdict, gate=True, inconclusive_fails=fails, base_profile=no_profile)
    said = str(end.failure if fails else end.warning)
    assert f"{SID} is inconclusive (invalid), not gated" in said
    assert "other processes took 60% of the CPUs" in said and INCONCLUSIVE_FIX in said
    if fails:
        assert isinstance(end.failure, InconclusiveFailure) and end.warning is None
        assert end.record.status is Status.FAILED and end.record.message == said
    else:
        assert end.failure is None and end.record == result
        assert "passes under --perfguard-inconclusive=warn" in said


def unmeasured(status: Status, message: str) -> ScenarioResult:
    return dataclasses.replace(scenario(SID), status=status, message=message, latency_ns=None)


def test_a_missing_runtime_is_a_skip_and_the_exception_goes_on() -> None:
    end = ended_by(
        BackendUnavailable("onnxruntime is not installed"), unmeasured, inconclusive_fails=True
    )
    assert end.record.status is Status.SKIPPED and end.failure is None
    assert "onnxruntime is not installed" in end.record.message


@pytest.mark.parametrize("fails", [True, False])
def test_untrustworthy_figures_skip_or_fail_keeping_what_was_measured(fails: bool) -> None:
    kept = dataclasses.replace(scenario(SID), status=Status.SKIPPED, message="behind")
    exc = RunInvalid("the load generator fell behind")
    exc.result = kept  # as a load cell's measurement hands its figures on
    end = ended_by(exc, unmeasured, inconclusive_fails=fails)
    assert end.record.latency_ns == kept.latency_ns  # the figures stay in the record
    if fails:
        assert isinstance(end.failure, InconclusiveFailure)
        assert "inconclusive, not gated: the load generator fell behind" in str(end.failure)
        assert end.record.status is Status.FAILED
    else:
        assert end.failure is None and end.record == kept


def test_perfguards_errors_fail_and_anything_else_is_an_error() -> None:
    failed = ended_by(LoadError("3 of 90 requests failed"), unmeasured, inconclusive_fails=False)
    assert failed.record.status is Status.FAILED and failed.failure is None
    assert "3 of 90 requests failed" in failed.record.message
    crashed = ended_by(SystemExit(2), unmeasured, inconclusive_fails=False)
    assert crashed.record.status is Status.ERROR and crashed.record.message == "SystemExit: 2"
    model = ended_by(ValueError("shape mismatch"), unmeasured, inconclusive_fails=True)
    assert model.record.message == "ValueError: shape mismatch" and model.failure is None
