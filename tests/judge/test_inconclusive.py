"""Inconclusive cells: wait for quiet and re-measure, then refuse to save what stayed invalid.

The gatekeeper runs against a fake machine (``FakeMachine``: scripted shares, no
sleeping) and a scripted sequence of re-measurements.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from perfguard.baseline.store import Baseline, DirectoryStore
from perfguard.core import progress
from perfguard.core.policy import INCONCLUSIVE_ROUNDS, GateSpec
from perfguard.core.progress import ProgressEvent
from perfguard.judge.choice import BaselineChoice
from perfguard.judge.gatekeeper import Gatekeeper, GateSettings
from perfguard.judge.remeasure import REMEASURE_STEP, run_problem
from perfguard.judge.verdict import VerdictKind
from perfguard.measure.quiet import WAIT_STEP, QuietWaiter
from perfguard.records.figures import CpuShares, RuntimeInfo
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult
from tests.helpers.fake_machine import FakeMachine
from tests.helpers.samples import lognormal, result

P95 = (GateSpec("p95", 0.05),)
ENV = Environment.of({"cpu": "test"})
SHA = "b" * 40


def contended(r: ScenarioResult, share: float = 0.5) -> ScenarioResult:
    return dataclasses.replace(r, runtime=RuntimeInfo(cpu=CpuShares(share, 0.0)))


def run_of(*scenarios: ScenarioResult, sha: str = SHA) -> RunResult:
    return RunResult(
        commit=CommitInfo(sha=sha, branch="main", dirty=False),
        environment=ENV,
        scenarios=scenarios,
        created_at="2026-01-01T00:00:00+00:00",
        perfguard_version="test",
    )


def keeper(
    tmp_path: Path,
    machine: FakeMachine,
    *,
    baseline: ScenarioResult | None = None,
    budget_s: float = 120.0,
    **settings: object,
) -> Gatekeeper:
    gate = GateSettings(baseline="none", baseline_dir=tmp_path / "baselines", **settings)  # type: ignore[arg-type]
    quiet = QuietWaiter(gate.contention_limit, budget_s=budget_s, sample=machine)
    gk = Gatekeeper(gate, tmp_path, ENV, quiet=quiet)
    if baseline is not None:
        commit = CommitInfo(sha="a" * 40, branch="main", dirty=False)
        base = Baseline(ENV.fingerprint, commit, (run_of(baseline),), None)
        gk.archive.__dict__["choice"] = BaselineChoice(base, "test baseline")
    return gk


class Rounds:
    """The re-measurements a cell gets, in order."""

    def __init__(self, *results: ScenarioResult) -> None:
        self.results = list(results)
        self.calls = 0

    def __call__(self) -> ScenarioResult:
        self.calls += 1
        return self.results.pop(0)


@pytest.fixture
def events() -> Iterator[list[ProgressEvent]]:
    seen: list[ProgressEvent] = []
    with progress.sink(seen.append):
        yield seen


BASE = result(lognormal(300, 1))
CLEAN = result(lognormal(300, 2))


def test_a_cell_quiet_on_round_2_is_valid_and_the_terminal_saw_the_wait(
    tmp_path: Path, events: list[ProgressEvent]
) -> None:
    machine = FakeMachine([0.4, 0.02])  # the neighbour leaves after a second
    gk = keeper(tmp_path, machine, baseline=BASE)
    rounds = Rounds(CLEAN)
    chosen, verdict = gk.judge_confirmed(contended(result(lognormal(300, 3))), P95, rounds)
    assert rounds.calls == 1 and chosen is CLEAN
    assert verdict.verdict is VerdictKind.UNCHANGED
    notes = [m for m in verdict.messages if "round" in m]
    assert notes == [
        "valid on round 2 after waiting 4 s for quiet (round 1: other processes used 50% "
        "of the CPUs while it was measured (limit 10%))"
    ]
    # What the terminal is told, in order: the wait, the round, how the rounds ended.
    assert [(e.step, e.final) for e in events if e.final or e.step == REMEASURE_STEP] == [
        (WAIT_STEP, True),
        (REMEASURE_STEP, False),
        (REMEASURE_STEP, True),
    ]
    waits = [e for e in events if e.step == WAIT_STEP]
    assert waits[0].detail.startswith("other processes use 40% of the CPUs; limit 10%; 1 s of")
    remeasures = [e for e in events if e.step == REMEASURE_STEP]
    assert [(e.done, e.total) for e in remeasures] == [(1, INCONCLUSIVE_ROUNDS)] * 2
    assert "round 1 of 2: other processes used 50%" in remeasures[0].detail
    assert remeasures[1].detail == "valid"


def test_a_cell_contended_every_round_stays_invalid_with_one_note(tmp_path: Path) -> None:
    gk = keeper(tmp_path, FakeMachine([0.0]), baseline=BASE)
    rounds = Rounds(*(contended(CLEAN, 0.3) for _ in range(INCONCLUSIVE_ROUNDS)))
    _, verdict = gk.judge_confirmed(contended(CLEAN), P95, rounds)
    assert rounds.calls == INCONCLUSIVE_ROUNDS
    assert verdict.verdict is VerdictKind.INVALID
    assert verdict.messages[-1] == (
        "re-measured 2 rounds after waiting 6 s for quiet; still invalid: other processes "
        "used 30% of the CPUs while it was measured (limit 10%)"
    )
    assert sum("round" in m for m in verdict.messages) == 1


def test_a_machine_that_stays_busy_is_not_re_measured(tmp_path: Path) -> None:
    gk = keeper(tmp_path, FakeMachine([0.6]), baseline=BASE)
    rounds = Rounds()
    _, verdict = gk.judge_confirmed(contended(CLEAN), P95, rounds)
    assert rounds.calls == 0 and verdict.verdict is VerdictKind.INVALID
    assert verdict.messages[-1] == (
        "not re-measured: other processes still used 60% of the CPUs after 30 s "
        "(limit 10%); still invalid: other processes used 50% of the CPUs while it "
        "was measured (limit 10%)"
    )


def test_the_session_budget_stops_waiting_for_the_later_cells(tmp_path: Path) -> None:
    machine = FakeMachine([0.6])
    gk = keeper(tmp_path, machine, baseline=BASE, budget_s=40.0)
    notes = []
    for _ in range(3):
        _, verdict = gk.judge_confirmed(contended(CLEAN), P95, Rounds())
        notes.append(verdict.messages[-1])
    assert len(machine.windows) == 40  # 30 s, then the 10 s left, then none
    assert notes[1].startswith("not re-measured: this session's 40 s of waiting for quiet")
    assert notes[2] == notes[1]


def test_the_cells_own_wait_bounds_its_later_rounds(tmp_path: Path) -> None:
    # Quiet only in the last 3 s of the cell's 30: round 2 has no wait left.
    machine = FakeMachine([0.6] * 27 + [0.0])
    gk = keeper(tmp_path, machine, baseline=BASE)
    rounds = Rounds(contended(CLEAN))
    _, verdict = gk.judge_confirmed(contended(CLEAN), P95, rounds)
    assert rounds.calls == 1 and len(machine.windows) == 30
    assert verdict.messages[-1].startswith(
        "re-measured 1 round after waiting 30 s for quiet, then the cell's 30 s of waiting "
        "for quiet is spent; still invalid: other processes used 50%"
    )


def test_an_unstable_run_is_re_measured_too(tmp_path: Path) -> None:
    gk = keeper(tmp_path, FakeMachine([0.0]), baseline=BASE)
    rounds = Rounds(CLEAN)
    _, verdict = gk.judge_confirmed(result(lognormal(300, 3), stable=False), P95, rounds)
    assert rounds.calls == 1 and verdict.verdict is VerdictKind.UNCHANGED
    assert "(round 1: the run was unstable (median of last third" in verdict.messages[-1]


def test_a_reason_that_repeats_every_round_is_not_re_measured(tmp_path: Path) -> None:
    # 50 samples cannot bound a P95 at 99%, however quiet the machine gets.
    gk = keeper(tmp_path, FakeMachine([0.0]), baseline=BASE)
    rounds = Rounds()
    _, verdict = gk.judge_confirmed(contended(result(lognormal(50, 3))), P95, rounds)
    assert rounds.calls == 0 and verdict.verdict is VerdictKind.INVALID
    assert not any("round" in m for m in verdict.messages)


def test_without_a_baseline_only_a_save_waits_for_a_clean_run(tmp_path: Path) -> None:
    first = contended(CLEAN)
    gk = keeper(tmp_path, FakeMachine([0.0]))
    rounds = Rounds()
    assert gk.judge_confirmed(first, P95, rounds)[1].verdict is VerdictKind.NEW
    assert rounds.calls == 0
    saving = keeper(tmp_path, FakeMachine([0.0]), save=True)
    rounds = Rounds(CLEAN)
    chosen, verdict = saving.judge_confirmed(first, P95, rounds)
    assert rounds.calls == 1 and chosen is CLEAN
    assert verdict.messages[-1].startswith("valid on round 2 after waiting 3 s")


def test_run_problem_names_the_two_passing_reasons() -> None:
    assert run_problem(CLEAN, 0.1) is None
    assert run_problem(contended(CLEAN, 0.05), 0.1) is None
    assert run_problem(contended(CLEAN, 0.5), 1.0) is None
    assert run_problem(contended(CLEAN, 0.5), 0.1) == (
        "other processes used 50% of the CPUs while it was measured (limit 10%)"
    )
    assert "unstable" in (run_problem(result(stable=False), 0.1) or "")
    unmeasured = dataclasses.replace(contended(CLEAN), latency_ns=None, samples_ns=())
    assert run_problem(unmeasured, 0.1) is None


# --------------------------------------------------------------------------- saving


def test_a_save_with_an_inconclusive_cell_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    gk = keeper(tmp_path, FakeMachine([0.6]), save=True)
    other = dataclasses.replace(CLEAN, id="suites/s.yaml::other")
    run = run_of(contended(CLEAN), other)
    assert gk.save(run) is None
    assert list(gk.saver.save_refused) == [CLEAN.id]
    assert "other processes used 50%" in gk.saver.save_refused[CLEAN.id]
    assert not (tmp_path / "baselines").exists()


def test_an_invalid_verdict_of_the_gates_own_does_not_refuse_the_save(tmp_path: Path) -> None:
    # Too few samples for a P95 bound: clean figures, the next comparison says it again.
    gk = keeper(tmp_path, FakeMachine([0.0]), baseline=BASE, save=True)
    few = result(lognormal(50, 3))
    assert gk.judge_confirmed(few, P95, Rounds())[1].verdict is VerdictKind.INVALID
    assert (
        gk.save(run_of(few)) is not None and not gk.saver.save_refused and not gk.saver.save_marked
    )


def test_save_invalid_marks_the_cells_and_a_later_comparison_says_so(tmp_path: Path) -> None:
    gk = keeper(tmp_path, FakeMachine([0.6]), save=True, save_invalid=True)
    other = dataclasses.replace(CLEAN, id="suites/s.yaml::other")
    path = gk.save(run_of(contended(CLEAN), other))
    assert path is not None and not gk.saver.save_refused
    assert list(gk.saver.save_marked) == [CLEAN.id]
    stored = json.loads(path.read_text())["launches"][0]["scenarios"]
    marks = {s["id"]: (s["stable"], s.get("inconclusive")) for s in stored}
    assert marks[other.id] == (True, None)
    assert marks[CLEAN.id][0] is False
    assert "other processes used 50%" in marks[CLEAN.id][1]

    baseline = DirectoryStore(tmp_path / "baselines").load(ENV.fingerprint, SHA)
    assert baseline is not None
    pooled = baseline.pooled(CLEAN.id)
    assert pooled is not None and not pooled.stable
    later = keeper(tmp_path, FakeMachine([0.0]), baseline=pooled)
    _, verdict = later.judge_confirmed(result(lognormal(300, 5)), P95, Rounds())
    assert any("measured unstable or on a busy machine" in m for m in verdict.messages)


def test_a_clean_run_saves_as_before(tmp_path: Path) -> None:
    gk = keeper(tmp_path, FakeMachine([0.0]), save=True)
    path = gk.save(run_of(CLEAN))
    assert path is not None and not gk.saver.save_refused and not gk.saver.save_marked
    assert '"inconclusive"' not in path.read_text()


def test_marked_samples_read_back_unchanged(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    store.save(run_of(contended(CLEAN)), inconclusive={CLEAN.id: "busy"})
    loaded = store.load(ENV.fingerprint, SHA)
    assert loaded is not None
    back = loaded.launches[0].scenarios[0]
    assert np.array_equal(back.samples_ns, CLEAN.samples_ns) and not back.stable
