"""Signal handling that keeps perfguard's process trees and temporary checkouts clean.

``SignalHandlers`` installs a handler for SIGTERM (and, with ``defer``, SIGINT)
while it is active and restores the previous handlers on exit. Only the main
thread can install signal handlers; elsewhere it does nothing and the signals
keep their current handling. ``Terminated`` is what the A/B worktree raises on
SIGTERM (a ``KeyboardInterrupt``, so pytest stops the session).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

__all__ = ["SignalHandlers", "Terminated", "raise_terminated"]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while a base worktree existed; raised so that it is removed."""


def _restore(signum: int, handler: Any) -> None:
    # None: the previous handler was not installed from Python; the default is closest.
    signal.signal(signum, signal.SIG_DFL if handler is None else handler)


class SignalHandlers:
    """While active, SIGTERM (and with ``defer``, also SIGINT) run ``on_signal``."""

    def __init__(self, on_signal: Callable[[int, FrameType | None], None], *, defer: bool) -> None:
        self.on_signal = on_signal
        self.signums = (signal.SIGTERM, signal.SIGINT) if defer else (signal.SIGTERM,)
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
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


def raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"perfguard received signal {signum} (SIGTERM)")
