"""The in-process watchdog (perfguard.measure.watchdog): a hanging step fails, with stacks.

The limits are short (half a second) and the hangs long (a minute): a test that passes
was interrupted, one that breaks hangs until pytest's own timeout, never passes by luck.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from perfguard.core.errors import WatchdogTimeout
from perfguard.measure.watchdog import Watchdog, cell_limit, current_limit, watch

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM")


def _hang() -> None:
    time.sleep(60)  # the watched step hangs here


def test_a_hanging_step_fails_with_the_step_the_line_and_the_stacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(WatchdogTimeout) as stopped, Watchdog("opening the model", 0.5, cell="m[x]"):
        _hang()
    text = str(stopped.value)
    assert "opening the model of m[x] was stopped after" in text
    assert "past its limit of 0.5 s" in text
    assert f"{__file__}:" in text and "in _hang" in text
    assert "--perfguard-open-timeout" in text and "--perfguard-isolate" in text
    err = capsys.readouterr().err
    assert "perfguard watchdog: opening the model of m[x] has run for 0.5 s" in err
    assert "time.sleep(60)  # the watched step hangs here" in err
    assert "Thread MainThread (most recent call last)" in err
    assert signal.getsignal(signal.SIGALRM) is before


def test_a_step_that_swallows_the_interruption_still_fails() -> None:
    """A factory's `except Exception` (or a backend wrapping errors) cannot hide it."""
    with (
        pytest.raises(WatchdogTimeout, match="the warm-up was stopped"),
        Watchdog("the warm-up", 0.5),
    ):
        try:
            _hang()
        except Exception as exc:
            raise RuntimeError("wrapped by the backend") from exc


def test_a_step_within_its_limit_runs_untouched() -> None:
    before = signal.getsignal(signal.SIGALRM)
    with Watchdog("step", 30.0) as dog:
        assert signal.getsignal(signal.SIGALRM) is not before
    assert not dog.fired
    assert signal.getsignal(signal.SIGALRM) is before


def test_no_limit_other_threads_and_nested_steps_are_not_watched() -> None:
    before = signal.getsignal(signal.SIGALRM)
    with Watchdog("step", None):
        assert signal.getsignal(signal.SIGALRM) is before
    seen: list[object] = []

    def other() -> None:
        with Watchdog("step", 0.01):
            time.sleep(0.2)
        seen.append(signal.getsignal(signal.SIGALRM))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [before]
    with Watchdog("outer", 30.0):
        inner = signal.getsignal(signal.SIGALRM)
        with Watchdog("inner", 0.01):  # one watchdog at a time: the outer one holds
            assert signal.getsignal(signal.SIGALRM) is inner


def test_cell_limit_sets_the_limit_of_watch() -> None:
    assert current_limit() is None
    assert watch("the warm-up").limit_s is None
    with cell_limit(0.5, cell="c[1]"):
        assert current_limit() == 0.5
        with pytest.raises(WatchdogTimeout, match=r"the warm-up of c\[1\]"), watch("the warm-up"):
            _hang()
    assert current_limit() is None


def test_the_allowance_is_added_to_the_limit_and_named() -> None:
    """The warm-up may run for its own cap first; only a hang past cap + limit fails."""
    dog = Watchdog("the warm-up", 0.3, allowance_s=0.4, allowance="warmup.max_seconds")
    with pytest.raises(WatchdogTimeout) as stopped, dog:
        _hang()
    assert "past its limit of 0.7 s (0.4 s of warmup.max_seconds + the open timeout 0.3 s)" in str(
        stopped.value
    )
