"""A planted slowdown of a known size: how a calibration (issue 31) learns what a gate can
see, by slowing a cell's requests on purpose and counting the verdicts.

``Plant(fraction).wrap(call, sync)`` is the request ``call`` (waited for with ``sync``)
followed by a busy-wait of ``fraction`` times that request's own measured time, inside
the request as the timing loop times it: each request takes ``1 + fraction`` times what
it took itself. The slowdown is proportional to each request's *own* time, so it stays
the stated fraction on a busy machine too, where the request itself runs slower (a
fixed added delay would shrink, in relative terms, as the machine slows). The wait ends
at a wall-clock deadline, so a preemption inside it does not lengthen it (beyond the
time slice the deadline falls in). A busy-wait, not a sleep: the core stays busy as a
real slowdown's compute would, and a sleep's wake-up latency (tens of microseconds)
would add noise of its own.

A generative request is planted per token instead (``Plant.stamps``): each decoding
step waits the fraction of its own time before its token is stamped, so TTFT, ITL, TPOT
and the whole request each grow by the fraction.

Each planted request records what it spun (``Plant.spun_ns``, one entry per request,
or per token, cleared by ``take``), so a caller can check that every timed sample holds its wait:
``sample >= spun * (1 + fraction) / fraction``. ``benchmarks/plant_accuracy.py``
measures the added fraction on a quiet and a busy machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["MAX_FRACTION", "SLEEP_MARGIN_NS", "Plant", "spin_until"]

#: The largest slowdown a plant adds (+400%): calibrations plant sizes around a gate's
#: limit, a few percent to a few tens of percent.
MAX_FRACTION = 4.0


#: A yielding wait sleeps until this long before its deadline, then spins: a sleep's
#: wake-up comes late by the timer slack (50 us on Linux) and a scheduler tick.
SLEEP_MARGIN_NS = 200_000


def spin_until(deadline_ns: int, *, yielding: bool = False) -> None:
    """Busy-wait until ``time.perf_counter_ns()`` reaches ``deadline_ns``. ``yielding``
    lets go of the GIL for all but the last ``SLEEP_MARGIN_NS`` (a sleep), so the other
    clients' threads of a cell under load run meanwhile: a planted request of one client
    must slow that client, not the others. (A spin that let go of the GIL at every turn
    would wait to take it back at every turn, behind whichever thread holds it.)"""
    clock = time.perf_counter_ns
    if yielding:
        left = deadline_ns - clock() - SLEEP_MARGIN_NS
        if left > 0:
            time.sleep(left / 1e9)
    while clock() < deadline_ns:
        pass


@dataclass
class Plant:
    """A slowdown of ``fraction`` (0.1: each request +10% of its own time)."""

    fraction: float
    spun_ns: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.fraction <= MAX_FRACTION:
            raise ValueError(
                f"a planted slowdown of {self.fraction!r}; expected a fraction in "
                f"(0, {MAX_FRACTION:g}] of each request's own time"
            )

    def wrap(
        self,
        call: Callable[[], object],
        sync: Callable[[], None] | None,
        *,
        yielding: bool = False,
    ) -> Callable[[], object]:
        """``call`` then ``sync`` (None: nothing to wait for), then the busy-wait: one
        planted request (its caller times it as one, with no ``sync`` of its own).
        ``yielding``: the wait lets go of the GIL (``spin_until``), for requests made
        from several threads at once."""
        clock = time.perf_counter_ns
        fraction = self.fraction
        spun = self.spun_ns.append

        def planted() -> object:
            start = clock()
            out = call()
            if sync is not None:
                sync()
            done = clock()
            wait = int((done - start) * fraction)
            spin_until(done + wait, yielding=yielding)
            spun(wait)
            return out

        return planted

    def stamps(self, stamp: Callable[[], None], *, yielding: bool = False) -> Callable[[], None]:
        """A generative request's ``stamp`` (called as each decoding step's tokens are
        ready), planted per token: before each stamp, a wait of the fraction of that
        step's own time (from the request's start for the first token, from the previous
        stamp's end after that), so time to first token, every inter-token latency and
        the whole request each take ``1 + fraction`` times their own. Make it as the
        request starts: the first step's time counts from here."""
        clock = time.perf_counter_ns
        fraction = self.fraction
        spun = self.spun_ns.append
        last = clock()

        def planted() -> None:
            nonlocal last
            now = clock()
            wait = int((now - last) * fraction)
            spin_until(now + wait, yielding=yielding)
            spun(wait)
            stamp()
            last = clock()

        return planted

    def take(self) -> list[int]:
        """What each planted request since the last ``take`` waited, in ns, in order."""
        taken, self.spun_ns[:] = list(self.spun_ns), []
        return taken
