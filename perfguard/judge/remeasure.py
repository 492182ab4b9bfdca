"""Re-measuring a cell before its verdict is believed: inconclusive and confirmation rounds.

Inconclusive rounds. A cell is re-measured only for a reason that can pass: other
processes used more than the contention limit of the CPUs, or the run drifted
(``stable`` false). A reason that is the same on every round (too few samples for the
gate, a gate on an unknown metric, a scenario that failed, a baseline figure <= 0) is
not: the cell is judged again with those run-level facts cleared, and if it is still
``invalid`` re-measuring cannot help. Before each round :class:`Rounds` waits for quiet
with the waiter it is given (``quiet``: the plugin's
``perfguard.measure.quiet.QuietWaiter``, one budget per session; without one it does
not wait); a wait that ends with the machine still busy ends the rounds. GPU
throttling and a load generator that fell behind reach the plugin as ``RunInvalid``
(a skipped item) before any verdict, so they are not re-measured here.

Confirmation rounds. A suspected regression is measured again (``confirm_rounds``)
before it may fail an item; the combined verdict is ``judge.verdict.confirm``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from perfguard.core import progress
from perfguard.core.policy import INCONCLUSIVE_ROUNDS, QUIET_WAIT_S, GateSpec
from perfguard.judge.verdict import (
    ScenarioVerdict,
    VerdictKind,
    confirm,
    needs_confirmation,
)
from perfguard.records.results import ScenarioResult

REMEASURE_STEP = "re-measuring"

#: Judges one measured cell against the session's baseline.
Judge = Callable[[ScenarioResult, Sequence[GateSpec]], ScenarioVerdict]


class QuietWaitEnd(Protocol):
    """How a wait for quiet ended (``perfguard.measure.quiet.QuietWait``)."""

    @property
    def quiet(self) -> bool: ...
    @property
    def waited_s(self) -> float: ...
    @property
    def foreign(self) -> float | None: ...
    @property
    def budget_spent(self) -> bool: ...


class QuietWaits(Protocol):
    """What waits for quiet before a re-measurement (``perfguard.measure.quiet.QuietWaiter``)."""

    @property
    def budget_s(self) -> float: ...
    def wait(self, max_s: float, *, cell: str = "") -> QuietWaitEnd: ...


@dataclass(frozen=True)
class _NoWait:
    """No waiter given: the machine counts as quiet at once."""

    budget_s: float = 0.0

    def wait(self, max_s: float, *, cell: str = "") -> QuietWaitEnd:
        return _Ended()


@dataclass(frozen=True)
class _Ended:
    quiet: bool = True
    waited_s: float = 0.0
    foreign: float | None = None
    budget_spent: bool = False


@dataclass(frozen=True)
class RoundSettings:
    """What the gate's settings say about re-measuring."""

    gate: bool
    save: bool
    confirm_rounds: int
    contention_limit: float


class Rounds:
    """Judges a cell, re-measuring it while that can make its verdict trustworthy."""

    def __init__(
        self, judge: Judge, settings: RoundSettings, quiet: QuietWaits | None = None
    ) -> None:
        self.judge = judge
        self.settings = settings
        self.quiet: QuietWaits = quiet if quiet is not None else _NoWait()

    def judge_confirmed(
        self,
        first: ScenarioResult,
        gates: Sequence[GateSpec],
        remeasure: Callable[[], ScenarioResult],
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """Judge, re-measure an inconclusive cell after waiting for quiet, and
        re-measure a suspected regression before believing it.

        Returns the result to record (the round whose verdict stands) and the
        combined verdict, with one note on the inconclusive rounds when there were any.
        """
        first, verdict, note = self._until_conclusive(first, gates, remeasure)
        results = [first]
        verdicts = [verdict]
        while (
            self.settings.gate
            and needs_confirmation(verdicts[-1])
            and len(verdicts) <= self.settings.confirm_rounds
        ):
            results.append(remeasure())
            verdicts.append(self.judge(results[-1], gates))
        verdict = confirm(verdicts)
        if verdict.failed:
            chosen = results[-1]
        else:
            chosen = results[max(i for i, v in enumerate(verdicts) if not v.failed)]
        if note:
            verdict = verdict.with_note(note)
        return chosen, verdict

    def remeasurable(
        self, result: ScenarioResult, verdict: ScenarioVerdict, gates: Sequence[GateSpec]
    ) -> str | None:
        """Why waiting and re-measuring could make this cell trustworthy, or None.

        An ``invalid`` verdict qualifies when its run was contended or unstable and
        nothing else would keep it invalid; a comparable-free verdict (``new``,
        ``incomparable``) only when the run is to be saved as a baseline.
        """
        why = run_problem(result, self.settings.contention_limit)
        if why is None or not (self.settings.gate or self.settings.save):
            return None
        if verdict.verdict is VerdictKind.INVALID:
            cleared = dataclasses.replace(
                result,
                stable=True,
                runtime=dataclasses.replace(result.runtime, cpu=None),
            )
            if self.judge(cleared, gates).verdict is VerdictKind.INVALID:
                return None  # invalid on every round: re-measuring cannot fix it
            return why
        return why if self.settings.save else None

    def _until_conclusive(
        self,
        result: ScenarioResult,
        gates: Sequence[GateSpec],
        remeasure: Callable[[], ScenarioResult],
    ) -> tuple[ScenarioResult, ScenarioVerdict, str | None]:
        """Wait for quiet and re-measure while the cell is inconclusive for a reason that
        can pass; the last round's result and verdict, and one note saying what happened."""
        verdict = self.judge(result, gates)
        why = self.remeasurable(result, verdict, gates)
        if why is None:
            return result, verdict, None
        first_why = why
        rounds = 0
        waited = 0.0
        stopped: str | None = None
        while why is not None and rounds < INCONCLUSIVE_ROUNDS:
            wait = self.quiet.wait(QUIET_WAIT_S - waited, cell=result.id)
            waited += wait.waited_s
            if not wait.quiet:
                if wait.budget_spent:
                    stopped = (
                        f"this session's {self.quiet.budget_s:.0f} s of waiting for quiet is spent"
                    )
                elif wait.waited_s == 0.0:
                    stopped = f"the cell's {QUIET_WAIT_S:.0f} s of waiting for quiet is spent"
                else:
                    use = f"{wait.foreign:.0%}" if wait.foreign is not None else "too much"
                    stopped = (
                        f"other processes still used {use} of the CPUs after {waited:.0f} s "
                        f"(limit {self.settings.contention_limit:.0%})"
                    )
                break
            rounds += 1
            progress.report(
                REMEASURE_STEP,
                rounds,
                INCONCLUSIVE_ROUNDS,
                cell=result.id,
                detail=f"round {rounds} of {INCONCLUSIVE_ROUNDS}: {why}",
            )
            result = remeasure()
            verdict = self.judge(result, gates)
            why = self.remeasurable(result, verdict, gates)
        still = "invalid" if verdict.verdict is VerdictKind.INVALID else "inconclusive"
        note = _rounds_note(first_why, why, rounds, waited, stopped, still)
        if rounds:  # the step's last report: how the rounds ended
            progress.report(
                REMEASURE_STEP,
                rounds,
                INCONCLUSIVE_ROUNDS,
                cell=result.id,
                detail="valid" if why is None else f"still {still}: {why}",
                final=True,
            )
        return result, verdict, note


def run_problem(result: ScenarioResult, contention_limit: float) -> str | None:
    """Why a measured cell's own run cannot be trusted, whatever it is compared with.

    The two run-level checks of ``perfguard.judge.compare`` that can pass on another
    try: a drifting (unstable) run, and other processes above the contention limit.
    """
    if result.latency_ns is None:  # nothing measured, nothing to distrust
        return None
    if not result.stable:
        ratio = result.stability_ratio
        drift = f" (median of last third / first third = {ratio:.2f})" if ratio else ""
        return f"the run was unstable{drift}"
    foreign = result.runtime.foreign_cpu
    if foreign is not None and foreign > contention_limit:
        return (
            f"other processes used {foreign:.0%} of the CPUs while it was measured "
            f"(limit {contention_limit:.0%})"
        )
    return None


def _rounds_note(
    first_why: str,
    why: str | None,
    rounds: int,
    waited: float,
    stopped: str | None,
    still: str = "invalid",
) -> str:
    """The one note on a cell's inconclusive rounds (``still``: what the cell still is)."""
    after = f"after waiting {waited:.0f} s for quiet"
    if why is None:
        return f"valid on round {rounds + 1} {after} (round 1: {first_why})"
    if rounds == 0:
        return f"not re-measured: {stopped}; still {still}: {why}"
    plural = "round" if rounds == 1 else "rounds"
    tail = f", then {stopped}" if stopped else ""
    return f"re-measured {rounds} {plural} {after}{tail}; still {still}: {why}"


__all__ = [
    "REMEASURE_STEP",
    "Judge",
    "QuietWaitEnd",
    "QuietWaits",
    "RoundSettings",
    "Rounds",
    "run_problem",
]
