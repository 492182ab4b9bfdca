"""Threads that model code leaves running.

A non-daemon thread that a factory or a model starts and never stops would hang pytest
forever once its summary is printed: the interpreter waits for every such thread at
exit. The session notes the threads alive before and after each cell; those a cell left
that still run when the session ends are named in the terminal summary (the thread, the
cell that started it, the fix), and the process then ends without waiting for them,
with pytest's exit status, once pytest is done and its output flushed.

Worker threads of a ``concurrent.futures`` thread pool are not counted: the standard
library stops them at exit itself.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

#: What the summary says to do about a thread a model left.
LEFT_THREAD_FIX = (
    "stop and join the thread the model code starts (or start it with daemon=True) "
    "before the factory or the model's call returns"
)


@dataclass(frozen=True)
class LeftThread:
    """A non-daemon thread started while a cell ran and still running after it."""

    name: str
    ident: int
    cell: str


class ThreadWatch:
    """The non-daemon threads each cell left behind (``cell``), and at the end of the
    session those still running (``still_running``)."""

    def __init__(self) -> None:
        self._left: dict[int, LeftThread] = {}

    @contextlib.contextmanager
    def cell(self, cell_id: str) -> Iterator[None]:
        """Around one cell: threads it started and left running are remembered."""
        before = {t.ident for t in threading.enumerate()}
        try:
            yield
        finally:
            for thread in _blocking_exit():
                if thread.ident not in before and thread.ident not in self._left:
                    assert thread.ident is not None  # started: enumerate() lists no others
                    self._left[thread.ident] = LeftThread(thread.name, thread.ident, cell_id)

    def still_running(self) -> list[LeftThread]:
        """The threads cells left that are running now, in the order they were found."""
        running = {t.ident for t in _blocking_exit()}
        return [left for ident, left in self._left.items() if ident in running]

    def summary_lines(self) -> list[str]:
        """The terminal summary's lines about the threads still running (none: [])."""
        left = self.still_running()
        if not left:
            return []
        lines = [
            f"perfguard: model code left {len(left)} thread(s) running; the interpreter "
            "would wait for them forever at exit, so perfguard ends the process without "
            "them once pytest is done:"
        ]
        lines += [f"perfguard:   thread {t.name!r}, started by {t.cell}" for t in left]
        lines.append(f"perfguard: Fix: {LEFT_THREAD_FIX}")
        return lines

    def exit_without_them(self, exit_status: int) -> bool:
        """If threads cells left still run, end the process with ``exit_status`` when the
        interpreter would start waiting for them (after pytest returns, before ``atexit``
        handlers); True when that was arranged."""
        if not self.still_running():
            return False
        idents = set(self._left)

        def end() -> None:
            # Called by threading._shutdown before it joins the non-daemon threads.
            if not any(t.ident in idents for t in _blocking_exit()):
                return  # they ended meanwhile: a normal exit
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(exit_status)

        # The documented hook (atexit) runs after the interpreter has joined the
        # threads, which is too late: threading's own exit hook runs before.
        threading._register_atexit(end)  # type: ignore[attr-defined]
        return True


def _blocking_exit() -> list[threading.Thread]:
    """The running threads the interpreter would wait for at exit."""
    pooled = _pool_workers()
    return [
        t
        for t in threading.enumerate()
        if t.is_alive() and not t.daemon and t is not threading.main_thread() and t not in pooled
    ]


def _pool_workers() -> set[threading.Thread]:
    """``concurrent.futures`` thread-pool workers: the library joins them at exit."""
    futures = sys.modules.get("concurrent.futures.thread")
    queues = getattr(futures, "_threads_queues", None)
    return set(queues.keys()) if queues is not None else set()
