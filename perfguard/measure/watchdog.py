"""A watchdog for the steps of an in-process cell that may hang: opening the model and
warming it up.

A model whose factory waits on a lock, a download or a device that never answers would
otherwise hang the whole session. ``Watchdog(step, limit_s, ...)`` guards one step: a
timer thread waits ``limit_s`` seconds; if the step is still running then, it writes the
Python stacks of all threads to stderr (pytest shows them under the cell's captured
stderr) and interrupts the main thread with SIGALRM, whose handler raises
``WatchdogTimeout``. The cell fails with the step, the limit, the line the main thread
was at and the fix; the session goes on with the next cell.

The limit is the setting ``--perfguard-open-timeout`` (ini ``perfguard_open_timeout``,
default ``perfguard.core.policy.OPEN_TIMEOUT_S``). ``cell_limit`` makes it the limit of
the steps inside a cell's open session (``perfguard.measure.opencell.open_session`` sets it,
``perfguard.measure.timing.measure`` watches its warm-up with ``watch``).

Limits, by design:

* Only the main thread can be interrupted (signal handlers run there), so the watchdog
  does nothing in other threads, and nothing where there is no SIGALRM (Windows).
* A signal handler runs when the main thread is back in the Python interpreter: native
  code that never returns (a torch op stuck in a kernel, a deadlock in a C library)
  cannot be interrupted. The stacks are still dumped at the limit, but the cell only
  fails if the call ever returns. ``--perfguard-isolate`` is the hard timeout: its worker
  is killed with its process group.
* A handler for SIGALRM installed by someone else (pytest-timeout's ``signal`` method)
  is set aside while a step is watched and still called for an alarm of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

from perfguard.core.errors import Location, WatchdogTimeout

__all__ = ["Watchdog", "cell_limit", "current_limit", "watch"]

# (limit in seconds, cell, location) of the steps watched now.
_LIMIT: contextvars.ContextVar[tuple[float | None, str, Location | None]] = contextvars.ContextVar(
    "perfguard_watchdog_limit", default=(None, "", None)
)
_SIGNAL = getattr(signal, "SIGALRM", None)
_CONSUME_WAIT_S = 2.0  # how long a step that ended as the alarm came waits for it
_active = threading.local()


def current_limit() -> float | None:
    """The limit of the steps watched now (``None``: not watched)."""
    return _LIMIT.get()[0]


@contextlib.contextmanager
def cell_limit(
    limit_s: float | None, *, cell: str = "", location: Location | None = None
) -> Iterator[None]:
    """Inside the block, ``watch`` guards its steps with ``limit_s`` (``None``: off),
    naming ``cell`` and its ``location`` in the error."""
    token = _LIMIT.set((limit_s, cell, location))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def watch(step: str, *, allowance_s: float = 0.0, allowance: str = "") -> Watchdog:
    """A ``Watchdog`` for ``step`` with the limit and cell of the enclosing ``cell_limit``
    (plus ``allowance_s`` the step is entitled to, e.g. the warm-up's own time cap)."""
    limit_s, cell, location = _LIMIT.get()
    return Watchdog(
        step, limit_s, cell=cell, location=location, allowance_s=allowance_s, allowance=allowance
    )


class Watchdog:
    """Fails the step in its ``with`` block with ``WatchdogTimeout`` after ``limit_s``.

    ``step`` names it in the error ("opening the model", "the warm-up"); ``cell`` and
    ``location`` say whose step it was. ``allowance_s`` (named by ``allowance``) is
    added to the limit: time the step may take by design (the warm-up's
    ``max_seconds``), so that only a hang past it counts. A no-op when ``limit_s`` is
    ``None``, off the main thread, without SIGALRM, or inside another watched step.
    """

    def __init__(
        self,
        step: str,
        limit_s: float | None,
        *,
        cell: str = "",
        location: Location | None = None,
        allowance_s: float = 0.0,
        allowance: str = "",
    ) -> None:
        self.step = step
        self.limit_s = limit_s
        self.allowance_s = allowance_s
        self.allowance = allowance
        self.cell = cell
        self.location = location
        self.fired = False  # the timer ran out and signalled the main thread
        self.raised = False  # the handler raised WatchdogTimeout
        self.where = ""  # the main thread's innermost line when the timer ran out
        self._armed = False
        self._previous: Any = None
        self._done = threading.Event()
        self._timer: threading.Thread | None = None
        self._started = 0.0
        self._error: WatchdogTimeout | None = None

    def __enter__(self) -> Watchdog:
        if (
            self.limit_s is None
            or _SIGNAL is None
            or threading.current_thread() is not threading.main_thread()
            or getattr(_active, "watchdog", None) is not None
        ):
            return self
        self._previous = signal.signal(_SIGNAL, self._on_alarm)
        self._armed = True
        _active.watchdog = self
        self._started = time.monotonic()
        self._timer = threading.Thread(
            target=self._wait,
            args=(threading.main_thread().ident,),
            daemon=True,
            name="perfguard-watchdog",
        )
        self._timer.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._armed:
            return
        self._done.set()
        assert self._timer is not None
        self._timer.join()
        try:
            if self.fired and not self.raised:
                # The step ended just as the alarm was sent: wait for the signal, so that
                # it never reaches the previous handler (SIGALRM's default kills).
                end = time.monotonic() + _CONSUME_WAIT_S
                while not self.raised and time.monotonic() < end:
                    time.sleep(0.01)  # the handler raises WatchdogTimeout here
            if self._error is not None and not isinstance(exc, WatchdogTimeout):
                # The step caught the interruption (a factory's `except Exception`, a
                # backend wrapping errors): the timeout is still what happened.
                raise self._error from (None if _caused_by(exc, self._error) else exc)
        finally:
            if not self.fired or self.raised:
                signal.signal(_SIGNAL, self._previous)  # type: ignore[arg-type]
            # else: the alarm is still on its way; the handler stays, and ignores it.
            self._armed = False
            _active.watchdog = None

    def _wait(self, main_ident: int | None) -> None:
        assert self.limit_s is not None
        if self._done.wait(self.limit_s + self.allowance_s) or main_ident is None:
            return
        self.fired = True
        frame = sys._current_frames().get(main_ident)
        if frame is not None:
            self.where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        _dump_stacks(self._header())
        assert _SIGNAL is not None
        signal.pthread_kill(main_ident, _SIGNAL)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.fired and not self.raised:
            self.raised = True
            self._error = self.error()
            raise self._error
        previous = self._previous
        if callable(previous):  # someone else's alarm
            previous(signum, frame)

    def _header(self) -> str:
        who = f" of {self.cell}" if self.cell else ""
        return (
            f"perfguard watchdog: {self.step}{who} has run for {self._limit_text()} "
            "(--perfguard-open-timeout); the Python stacks of all threads follow"
        )

    def _limit_text(self) -> str:
        """``600 s`` or ``605 s (5 s of warmup.max_seconds + the open timeout 600 s)``."""
        assert self.limit_s is not None
        if not self.allowance_s:
            return f"{self.limit_s:g} s"
        total = self.limit_s + self.allowance_s
        return (
            f"{total:g} s ({self.allowance_s:g} s of {self.allowance or 'allowance'} + the "
            f"open timeout {self.limit_s:g} s)"
        )

    def error(self) -> WatchdogTimeout:
        elapsed = time.monotonic() - self._started
        who = f" of {self.cell}" if self.cell else ""
        where = f"; the main thread was at {self.where}" if self.where else ""
        return WatchdogTimeout(
            f"{self.step}{who} was stopped after {elapsed:.1f} s, past its limit of "
            f"{self._limit_text()}{where} (the stacks of all threads are in the "
            "captured stderr)",
            expected=f"{self.step} to finish within {self._limit_text()}",
            fix="find where it hangs in the dumped stacks; if the model only needs longer "
            "(export, quantization, compilation), raise --perfguard-open-timeout (ini "
            "perfguard_open_timeout); code stuck in native calls is only stopped by "
            "--perfguard-isolate",
            location=self.location,
        )


def _dump_stacks(header: str) -> None:
    """The stacks of all threads to stderr, most recent call last (as a traceback)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = [f"\n{header}\n"]
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue  # the watchdog's own thread
        parts.append(f"\nThread {names.get(ident, ident)!s} (most recent call last):\n")
        parts.extend(traceback.format_stack(frame))
    with contextlib.suppress(Exception):  # stderr may be closed or replaced
        sys.stderr.write("".join(parts))
        sys.stderr.flush()


def _caused_by(exc: BaseException | None, error: BaseException) -> bool:
    """Whether ``error`` is ``exc`` or in its chain of causes (chaining it again would
    make a cycle)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if exc is error:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
