"""Waiting for quiet: until other processes leave the CPUs, within bounds.

A cell measured while other processes used more than the contention limit of the
CPUs (or whose run drifted) cannot be trusted (``perfguard.judge.compare``: ``invalid``).
Re-measuring straight away would mostly measure the neighbour again, so the gatekeeper
first waits here until other processes have stayed under the limit for ``quiet_s``
(``QUIET_SECONDS``) running, reading the share in windows of ``window_s`` seconds from
the same ``/proc/stat`` counters the canary probe uses (``perfguard.measure.canary``).

Bounds (``perfguard.core.policy``): one wait is capped by its caller (a cell's
``QUIET_WAIT_S``), and every wait of a session draws on one ``QuietWaiter``'s budget
(``QUIET_BUDGET_S``), so a machine that stays busy all session costs that much once,
not once per cell. The wait reports itself as it goes (``perfguard.core.progress``,
step ``waiting for quiet``) so the terminal shows why nothing seems to happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from perfguard.core import progress
from perfguard.core.policy import QUIET_BUDGET_S, QUIET_SAMPLE_S, QUIET_SECONDS
from perfguard.measure import canary

WAIT_STEP = "waiting for quiet"

#: ``sample(seconds)``: other processes' share of all CPUs over the next ``seconds``
#: (None where the machine does not tell).
Sampler = Callable[[float], "float | None"]


def sample_foreign_cpu(seconds: float) -> float | None:
    """Other processes' share of all CPUs over the next ``seconds`` (sleeping meanwhile)."""
    start = canary.cpu_snapshot()
    time.sleep(seconds)
    return canary.cpu_shares(start, canary.cpu_snapshot())[0]


@dataclass(frozen=True)
class QuietWait:
    """How one wait ended.

    ``quiet``: other processes stayed under the limit for the quiet stretch (also True
    when the machine cannot tell: nothing to wait for). ``waited_s``: time spent.
    ``foreign``: the last window's share (None when unread). ``budget_spent``: the
    session's budget ran out (or was already out) before quiet came.
    """

    quiet: bool
    waited_s: float
    foreign: float | None = None
    budget_spent: bool = False


class QuietWaiter:
    """Waits for quiet on behalf of one session, drawing on one budget of seconds.

    ``sample`` is injectable for tests (a fake machine, no sleeping); by default it is
    :func:`sample_foreign_cpu`, looked up when called.
    """

    def __init__(
        self,
        limit: float,
        *,
        budget_s: float = QUIET_BUDGET_S,
        quiet_s: float = QUIET_SECONDS,
        window_s: float = QUIET_SAMPLE_S,
        sample: Sampler | None = None,
    ) -> None:
        if window_s <= 0.0 or quiet_s < 0.0 or budget_s < 0.0:
            raise ValueError(
                f"window_s must be > 0 and quiet_s, budget_s >= 0; got {window_s}, "
                f"{quiet_s}, {budget_s}"
            )
        self.limit = limit
        self.budget_s = budget_s
        self.quiet_s = quiet_s
        self.window_s = window_s
        self._sample = sample
        self.spent_s = 0.0

    @property
    def budget_left_s(self) -> float:
        return max(0.0, self.budget_s - self.spent_s)

    def sample(self, seconds: float) -> float | None:
        return (self._sample or sample_foreign_cpu)(seconds)

    def wait(self, max_s: float, *, cell: str = "") -> QuietWait:
        """Wait up to ``max_s`` (and what is left of the budget) for a quiet stretch."""
        allowed = min(max_s, self.budget_left_s)
        # Quiet only counts once it lasted ``quiet_s``: at least one window.
        needed = max(self.quiet_s, self.window_s)
        if allowed + 1e-9 < needed:
            return QuietWait(False, 0.0, None, budget_spent=self.budget_left_s + 1e-9 < needed)
        waited = quiet_for = 0.0
        last: float | None = None
        while quiet_for + 1e-9 < needed:
            if waited + self.window_s > allowed + 1e-9:
                spent = self.budget_left_s + 1e-9 < self.window_s
                self._report(cell, waited, allowed, last, final=True)
                return QuietWait(False, waited, last, budget_spent=spent)
            share = self.sample(self.window_s)
            waited += self.window_s
            self.spent_s += self.window_s
            if share is None:  # no /proc/stat: the machine cannot say, so do not wait
                return QuietWait(True, waited, None)
            last = share
            quiet_for = quiet_for + self.window_s if share <= self.limit else 0.0
            self._report(cell, waited, allowed, last, final=False)
        self._report(cell, waited, allowed, last, final=True, quiet=True)
        return QuietWait(True, waited, last)

    def _report(
        self,
        cell: str,
        waited: float,
        allowed: float,
        share: float | None,
        *,
        final: bool,
        quiet: bool = False,
    ) -> None:
        use = "unknown" if share is None else f"{share:.0%}"
        figures = f"other processes use {use} of the CPUs; limit {self.limit:.0%}"
        if not final:
            detail = f"{figures}; {waited:.0f} s of {allowed:.0f} s"
        elif quiet:
            detail = f"quiet after {waited:.0f} s ({figures})"
        else:
            detail = f"still busy after {waited:.0f} s of {allowed:.0f} s ({figures})"
        progress.report(
            WAIT_STEP, round(waited), round(allowed), cell=cell, detail=detail, final=final
        )


__all__ = ["WAIT_STEP", "QuietWait", "QuietWaiter", "Sampler", "sample_foreign_cpu"]
