"""Live progress: events reach the installed sinks only, and a broken sink is dropped."""

from __future__ import annotations

from perfguard.core import progress
from perfguard.core.progress import ProgressEvent


def test_events_reach_sinks_inside_the_block_only() -> None:
    seen: list[ProgressEvent] = []
    progress.report("export", 1, 3)  # nobody listening: nothing happens
    with progress.sink(seen.append):
        progress.report("export", 2, 3, cell="m[onnx]", detail="opset 17")
    progress.report("export", 3, 3)
    assert [e.done for e in seen] == [2]
    assert seen[0].line() == "export m[onnx]: 2/3 (opset 17)"
    # No total: the count means nothing on its own, so the detail alone is shown.
    assert ProgressEvent("SLO search", 4).line() == "SLO search"
    export = ProgressEvent("export", 0, cell="resnet18", detail="to ONNX, opset 17")
    assert export.line() == "export resnet18: to ONNX, opset 17"


def test_a_sink_that_raises_is_dropped_not_the_step() -> None:
    calls: list[int] = []

    def broken(event: ProgressEvent) -> None:
        calls.append(event.done)
        raise RuntimeError("terminal closed")

    with progress.sink(broken):
        progress.report("A/B pairs", 100)
        progress.report("A/B pairs", 200)
    assert calls == [100]
