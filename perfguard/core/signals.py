"""Clean process trees: worker process groups and temporary checkouts never outlive a run.

Every worker runs in a process group of its own (``WorkerProcess`` starts it
so), so a child process that a model starts
inside it is in the same group, and killing the group kills them all. The
group is registered here while the worker lives (``track_group``), and the
same place holds the clean-ups that must run when the run is terminated
(``on_terminate``: the A/B base worktree). While anything is registered, and
only then, handlers for SIGTERM and SIGINT are installed:

* **SIGTERM** (what CI sends on cancel): every registered worker group is
  killed, the registered clean-ups run (last registered first), and the process
  then dies of SIGTERM exactly as it would have without perfguard (exit status
  143 in a shell), unless a handler installed before perfguard's was a Python
  function: that one is called instead.
* **SIGINT** (Ctrl-C): every registered worker group is killed, then the
  previous handler runs (pytest's: ``KeyboardInterrupt``, so the session stops
  and ``finally`` blocks, the worktree's removal among them, run as usual). The
  workers must be killed here: outside the terminal's foreground process group
  they no longer get its Ctrl-C.
* **interpreter exit** (``atexit``): any group still registered is killed.

Only the main thread can install signal handlers; elsewhere a worker still gets
its group killed on close and at exit, but a signal keeps its current handling.
A process killed outright (SIGKILL) runs none of this. Its workers notice by
themselves (``watch_parent``): each holds the read end of a *lifeline* pipe whose
only write end is the parent's, and a thread of the worker blocked on it wakes at
the parent's death (end of file), even while the worker is busy measuring, and
kills the worker's whole group at once. Otherwise it wakes only every
``_PARENT_CHECK_S`` (5 s) to see whether its parent changed (a fork that lost the
pipe's end): one ``select`` and ``getppid`` per 5 s, nothing a measurement can see.

A pytest-xdist worker is not one of ours: execnet starts it, with no lifeline.
When only its controller is signalled (``docker stop`` sends SIGTERM to the
container's first process alone), ``end_with_parent`` has the kernel send the
xdist worker SIGTERM as the controller dies, so its own handler above removes its
A/B worktree and kills its workers instead of leaving them behind.

``SignalHandlers`` and ``deferred_signals`` are the building blocks: the first
installs handlers while active, the second holds SIGTERM and SIGINT back during
a clean-up that must not be cut short and delivers them afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any

__all__ = [
    "SignalHandlers",
    "deferred_signals",
    "end_with_parent",
    "guarded",
    "kill_group",
    "LIFELINE_ENV",
    "on_terminate",
    "open_lifeline",
    "track_group",
    "untrack_group",
    "watch_parent",
]

#: The worker's environment variable naming its lifeline: "<read fd>:<parent pid>".
LIFELINE_ENV = "PERFGUARD_LIFELINE"
# A fork of the parent (model code forking) holds a copy of the write end: the
# parent's pid is checked this often as well, so such a copy delays the end by this.
_PARENT_CHECK_S = 5.0

log = logging.getLogger(__name__)


def _restore(signum: int, handler: Any) -> None:
    # None: the previous handler was not installed from Python; the default is closest.
    signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class SignalHandlers:
    """While active, SIGTERM (and with ``defer``, also SIGINT) run ``on_signal``."""

    def __init__(self, on_signal: Callable[[int, FrameType | None], None], *, defer: bool) -> None:
        self.on_signal = on_signal
        self.signums = (signal.SIGTERM, signal.SIGINT) if defer else (signal.SIGTERM,)
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> None:
        if _in_main_thread():
            for signum in self.signums:
                if signal.getsignal(signum) is not signal.SIG_IGN:  # ignored stays ignored
                    self.previous[signum] = signal.signal(signum, self.on_signal)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, handler in self.previous.items():
            _restore(signum, handler)
        self.previous.clear()


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold SIGTERM and SIGINT back inside the block; deliver them again on its exit.

    For a clean-up that a second Ctrl-C must not cut short. The signal is raised
    anew once the previous handlers are back, so it gets the handling it would
    have had (SIGTERM first when both came).
    """
    pending: list[int] = []
    with SignalHandlers(lambda signum, frame: pending.append(signum), defer=True):
        yield
    for signum in (signal.SIGTERM, signal.SIGINT):
        if signum in pending:
            signal.raise_signal(signum)


def kill_group(pgid: int, signum: int = signal.SIGKILL) -> None:
    """Send ``signum`` to the process group ``pgid``; a group already gone is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class _Guard:
    """The registry of live worker groups and terminate clean-ups, and the handlers."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.groups: dict[int, str] = {}  # pgid -> the worker's name
        self.cleanups: dict[int, Callable[[], None]] = {}  # token -> clean-up, in order
        self.next_token = 0
        self.previous: dict[int, Any] = {}
        self.terminating = False
        self.atexit_registered = False

    # --- registry --------------------------------------------------------------

    def track(self, pgid: int, name: str) -> None:
        with self.lock:
            self.groups[pgid] = name
            self._install()

    def untrack(self, pgid: int) -> None:
        with self.lock:
            self.groups.pop(pgid, None)
            self._uninstall_if_idle()

    def add_cleanup(self, cleanup: Callable[[], None]) -> int:
        with self.lock:
            self.next_token += 1
            self.cleanups[self.next_token] = cleanup
            self._install()
            return self.next_token

    def remove_cleanup(self, token: int) -> None:
        with self.lock:
            self.cleanups.pop(token, None)
            self._uninstall_if_idle()

    # --- handlers ----------------------------------------------------------------

    def _install(self) -> None:
        if not self.atexit_registered:
            atexit.register(self.kill_all)
            self.atexit_registered = True
        if self.previous or not _in_main_thread():
            return
        for signum, handler in ((signal.SIGTERM, self.on_sigterm), (signal.SIGINT, self.on_sigint)):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # ignored stays ignored
                self.previous[signum] = signal.signal(signum, handler)

    def _uninstall_if_idle(self) -> None:
        if self.groups or self.cleanups or not self.previous or not _in_main_thread():
            return
        for signum, handler in self.previous.items():
            # Another handler installed on top of ours since (and not yet removed) stays.
            if signal.getsignal(signum) in (self.on_sigterm, self.on_sigint):
                _restore(signum, handler)
        self.previous.clear()

    def kill_all(self) -> list[int]:
        """Kill every registered worker group at once; returns their ids."""
        with self.lock:
            groups = list(self.groups)
        for pgid in groups:
            kill_group(pgid)
        return groups

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.kill_all()
        previous = self.previous.get(signum)
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.terminating:  # a second SIGTERM while cleaning up: the first one wins
            return
        self.terminating = True
        killed = self.kill_all()
        with self.lock:
            cleanups = list(self.cleanups.values())
            self.cleanups.clear()
        for cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception as exc:  # best effort: the process dies next
                log.warning("clean-up on SIGTERM failed: %s", exc)
        previous = self.previous.get(signum)
        self.groups.clear()
        self._uninstall_if_idle()
        what = f" and ran {len(cleanups)} clean-up(s)" if cleanups else ""
        with contextlib.suppress(Exception):  # stdout/stderr may be closed or broken
            sys.stdout.flush()
            sys.stderr.write(
                f"\nperfguard: SIGTERM: killed {len(killed)} worker process group(s){what}\n"
            )
            sys.stderr.flush()
        self.terminating = False
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # die of the signal, as without perfguard

    def forget(self) -> None:
        """In a forked child: the groups and clean-ups are the parent's, not its own."""
        self.lock = threading.RLock()
        self.groups.clear()
        self.cleanups.clear()


_GUARD = _Guard()
if hasattr(os, "register_at_fork"):  # a model forking must not kill its parent's workers
    os.register_at_fork(after_in_child=_GUARD.forget)


def track_group(pgid: int, name: str) -> None:
    """Register a live worker's process group: killed on SIGTERM, SIGINT and at exit."""
    _GUARD.track(pgid, name)


def untrack_group(pgid: int) -> None:
    """The group is gone (or killed); stop watching it."""
    _GUARD.untrack(pgid)


def guarded() -> dict[int, str]:
    """The worker groups registered now (pgid -> name); for tests and diagnostics."""
    with _GUARD.lock:
        return dict(_GUARD.groups)


@contextlib.contextmanager
def on_terminate(cleanup: Callable[[], None]) -> Iterator[None]:
    """Inside the block, SIGTERM runs ``cleanup`` (after killing the worker groups)
    before the process dies; ``cleanup`` must be safe to run at any point of the block."""
    token = _GUARD.add_cleanup(cleanup)
    try:
        yield
    finally:
        _GUARD.remove_cleanup(token)


def open_lifeline() -> tuple[int, int] | None:
    """A lifeline pipe for a worker about to start: (read fd, write fd), or ``None``
    where there are no inheritable pipes (not POSIX).

    The parent passes the read end to the worker (``pass_fds``, and ``LIFELINE_ENV``
    names it), closes its own copy of the read end once the worker runs, and keeps
    the write end open, never writing to it, for as long as the worker should live.
    """
    if os.name != "posix":
        return None
    return os.pipe()  # both ends non-inheritable: no other child of the parent gets one


def watch_parent(value: str | None) -> threading.Thread | None:
    """In a worker: end the worker's process group when the parent dies.

    ``value`` is ``LIFELINE_ENV``'s ("<fd>:<parent pid>"); ``None`` or a malformed
    value watches nothing (a worker started by hand). Returns the daemon thread.
    """
    try:
        fd_text, pid_text = (value or "").split(":")
        fd, parent = int(fd_text), int(pid_text)
        os.set_inheritable(fd, False)  # the processes a model starts need no lifeline
    except (ValueError, OSError):
        return None
    # The process that started this one (the parent, or a wrapper it ran): a change
    # means it is gone, whatever holds a copy of the lifeline's write end.
    starter = os.getppid()

    def watch() -> None:
        while True:
            try:
                ready, _, _ = select.select([fd], [], [], _PARENT_CHECK_S)
                gone = bool(ready) and os.read(fd, 1) == b""
            except OSError:
                gone = True
            if gone or os.getppid() != starter:
                break
        with contextlib.suppress(Exception):
            sys.stderr.write(
                f"perfguard worker {os.getpid()}: parent process {parent} is gone; "
                "ending this worker and every process it started\n"
            )
            sys.stderr.flush()
        kill_group(os.getpgrp())  # the worker leads its group: itself and its children
        os._exit(1)  # no group of its own (started by hand): still end the worker

    thread = threading.Thread(target=watch, name="perfguard-lifeline", daemon=True)
    thread.start()
    return thread


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def end_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Have the kernel send this process ``signum`` when its parent dies (Linux).

    For a process perfguard did not start (a pytest-xdist worker): its SIGTERM
    handling then runs as if the signal had been sent to it. Returns whether the
    request took (False elsewhere than Linux, or where ``prctl`` is refused).
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request: act on it now
        os.kill(os.getpid(), signum)
    return True
