"""Waiting for quiet (perfguard.measure.quiet), on a fake machine: no real sleeping."""

from __future__ import annotations

import pytest

from perfguard.core import progress
from perfguard.core.progress import ProgressEvent
from perfguard.measure import canary
from perfguard.measure.quiet import WAIT_STEP, QuietWaiter, sample_foreign_cpu
from tests.helpers.fake_machine import FakeMachine


def test_quiet_needs_the_whole_stretch_below_the_limit_and_reports_as_it_goes() -> None:
    machine = FakeMachine([0.5, 0.05, 0.5, 0.02, 0.03, 0.01, 0.9])
    waiter = QuietWaiter(0.10, quiet_s=3.0, window_s=1.0, sample=machine)
    events: list[ProgressEvent] = []
    with progress.sink(events.append):
        wait = waiter.wait(30.0, cell="s.yaml::spin")
    # The lull at window 2 is broken by window 3; windows 4-6 are the quiet stretch.
    assert wait.quiet and wait.waited_s == 6.0 and wait.foreign == 0.01
    assert len(machine.windows) == 6
    assert waiter.spent_s == 6.0
    assert {e.step for e in events} == {WAIT_STEP}
    assert events[0].cell == "s.yaml::spin"
    assert events[0].detail == "other processes use 50% of the CPUs; limit 10%; 1 s of 30 s"
    assert (events[0].done, events[0].total) == (1, 30)
    assert events[-1].final and not any(e.final for e in events[:-1])


def test_a_machine_that_stays_busy_is_waited_on_only_as_long_as_allowed() -> None:
    machine = FakeMachine([0.6])
    waiter = QuietWaiter(0.10, budget_s=100.0, sample=machine)
    wait = waiter.wait(30.0)
    assert not wait.quiet and not wait.budget_spent
    assert wait.waited_s == 30.0 and wait.foreign == 0.6
    assert waiter.budget_left_s == 70.0


def test_the_session_budget_caps_every_wait_together() -> None:
    waiter = QuietWaiter(0.10, budget_s=40.0, sample=FakeMachine([0.6]))
    first, second, third = waiter.wait(30.0), waiter.wait(30.0), waiter.wait(30.0)
    assert first.waited_s == 30.0 and not first.budget_spent
    assert second.waited_s == 10.0 and second.budget_spent
    assert third.waited_s == 0.0 and third.budget_spent and not third.quiet
    assert waiter.spent_s == 40.0


def test_a_machine_that_cannot_tell_is_not_waited_on() -> None:
    machine = FakeMachine([None])
    wait = QuietWaiter(0.10, sample=machine).wait(30.0)
    assert wait.quiet and wait.foreign is None and len(machine.windows) == 1


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="window_s"):
        QuietWaiter(0.1, window_s=0.0)


def test_the_real_sampler_reads_the_canary_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    # One reading of /proc/stat for the probe and the wait: the wait uses canary's.
    slept: list[float] = []
    monkeypatch.setattr("perfguard.measure.quiet.time.sleep", slept.append)
    monkeypatch.setattr(canary, "cpu_shares", lambda start, end: (0.42, 0.0))
    assert sample_foreign_cpu(1.0) == 0.42
    assert slept == [1.0]
