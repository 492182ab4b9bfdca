"""Live progress of long steps (export, quantization, A/B pairs, SLO search).

A step calls :func:`report` as it goes; whoever shows progress (the plugin, on the
terminal) installs a sink with :func:`sink` for the length of a run. Without a sink
a report costs one list lookup, so library code reports unconditionally. Sinks are
called in the reporting thread; one that raises is dropped, never the step.

    with progress.sink(print_event):
        ...
        progress.report("A/B pairs", done=200, total=2000, detail="ratio 1.04, bound 0.99")
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressEvent:
    """One step's state: ``done`` of ``total`` units (``total`` None when open-ended).

    ``cell`` names the scenario it is for (empty when not per cell); ``detail`` is one
    short line of figures so far (e.g. the A/B ratio and bound); ``final`` marks the
    step's last report.
    """

    step: str
    done: int
    total: int | None = None
    cell: str = ""
    detail: str = ""
    final: bool = False

    def line(self) -> str:
        """``quantize minilm[onnx]: 3/5 (opset 17)`` - how a terminal shows it.

        A count with no total says nothing on its own (``export m: 0`` of what?), so an
        open-ended step shows its detail alone: ``export m: to ONNX, opset 17``."""
        where = f" {self.cell}" if self.cell else ""
        if self.total is None:
            return f"{self.step}{where}: {self.detail}" if self.detail else f"{self.step}{where}"
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.step}{where}: {self.done}/{self.total}{detail}"


Sink = Callable[[ProgressEvent], None]

#: How often a long step reports, at most (seconds of wall time).
EVERY_S = 0.5


class Throttle:
    """At most one progress report per ``every_s`` seconds of wall time (the first is
    due at once): long steps report between levels, rounds or pairs, never inside a
    timed region, and a chatty loop costs one clock read per look."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        self._next = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.every_s
        return True


_lock = threading.Lock()
_sinks: list[Sink] = []


def report(
    step: str,
    done: int,
    total: int | None = None,
    *,
    cell: str = "",
    detail: str = "",
    final: bool = False,
) -> None:
    """Tell every installed sink how far ``step`` has got."""
    if not _sinks:
        return
    event = ProgressEvent(step, done, total, cell, detail, final)
    for fn in list(_sinks):
        try:
            fn(event)
        except Exception:  # a broken display must never break a measurement
            with _lock, contextlib.suppress(ValueError):
                _sinks.remove(fn)


def listening() -> bool:
    """Whether any sink is installed (a step with no other way to be seen may print)."""
    return bool(_sinks)


@contextlib.contextmanager
def sink(fn: Sink) -> Iterator[None]:
    """Send progress events to ``fn`` inside the ``with`` block."""
    with _lock:
        _sinks.append(fn)
    try:
        yield
    finally:
        with _lock, contextlib.suppress(ValueError):
            _sinks.remove(fn)


__all__ = ["EVERY_S", "ProgressEvent", "Sink", "Throttle", "listening", "report", "sink"]
