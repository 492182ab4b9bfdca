"""The progress printer (``perfguard.plugin.terminal.ProgressPrinter``): on a terminal a
step's line changes in place; in a log each state is printed once, not once per poll."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from _pytest.terminal import TerminalReporter

from perfguard.core import progress
from perfguard.core.progress import ProgressEvent
from perfguard.measure.quiet import QuietWaiter
from perfguard.plugin.terminal import ProgressPrinter
from tests.helpers.fake_machine import FakeMachine


def test_off_a_terminal_a_long_quiet_wait_is_two_lines_not_one_per_poll() -> None:
    machine = FakeMachine([0.6])  # stays busy: 30 polls of 1 s
    lines: list[str] = []
    printer = ProgressPrinter(lines.append, clock=lambda: sum(machine.windows))
    with progress.sink(printer):
        wait = QuietWaiter(0.10, sample=machine).wait(30.0, cell="s.yaml::spin")
    assert not wait.quiet and len(machine.windows) == 30
    assert lines == [
        "perfguard: waiting for quiet s.yaml::spin: 1/30 (other processes use 60% of the "
        "CPUs; limit 10%; 1 s of 30 s)",
        "perfguard: waiting for quiet s.yaml::spin: 30/30 (still busy after 30 s of 30 s "
        "(other processes use 60% of the CPUs; limit 10%))",
    ]


def test_off_a_terminal_a_step_still_going_says_so_once_a_minute() -> None:
    now = [0.0]
    lines: list[str] = []
    printer = ProgressPrinter(lines.append, clock=lambda: now[0], log_interval_s=60.0)
    for second in range(0, 150, 5):  # an A/B step reporting every 5 s for 2.5 min
        now[0] = float(second)
        printer(ProgressEvent("A/B pairs", second, 2000, cell="m"))
    printer(ProgressEvent("A/B pairs", 150, 2000, cell="m", detail="stopped", final=True))
    assert lines == [
        "perfguard: A/B pairs m: 0/2000",
        "perfguard: A/B pairs m: 60/2000",
        "perfguard: A/B pairs m: 120/2000",
        "perfguard: A/B pairs m: 150/2000 (stopped)",
    ]


def test_on_a_terminal_a_step_rewrites_its_line_in_place_and_its_end_ends_it() -> None:
    now = [0.0]
    shown: list[tuple[str, str]] = []
    printer = ProgressPrinter(
        lambda line: shown.append(("line", line)),
        interval_s=1.0,
        clock=lambda: now[0],
        rewrite=lambda line: shown.append(("rewrite", line)),
        end=lambda: shown.append(("end", "")),
    )
    for tenth in range(25):  # every 0.1 s for 2.5 s: a rewrite a second
        now[0] = tenth / 10
        printer(ProgressEvent("quantize", tenth, 25, cell="m"))
    printer(ProgressEvent("export", 0, cell="n", detail="to ONNX, opset 17"))  # another step
    printer(ProgressEvent("quantize", 25, 25, cell="m", detail="done in 2.5 s", final=True))
    printer(ProgressEvent("export", 1, cell="n", detail="done in 3.0 s", final=True))
    assert shown == [
        ("rewrite", "perfguard: quantize m: 0/25"),
        ("rewrite", "perfguard: quantize m: 10/25"),
        ("rewrite", "perfguard: quantize m: 20/25"),
        ("end", ""),  # the export's line starts below the quantization's
        ("rewrite", "perfguard: export n: to ONNX, opset 17"),
        ("end", ""),
        ("line", "perfguard: quantize m: 25/25 (done in 2.5 s)"),
        ("line", "perfguard: export n: done in 3.0 s"),
    ]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Plugins:
    def __init__(self, reporter: TerminalReporter) -> None:
        self.reporter = reporter

    def get_plugin(self, name: str) -> object:
        return self.reporter if name == "terminalreporter" else None


def test_pytest_s_terminal_rewrites_a_step_in_place_only_when_it_is_a_tty(
    pytestconfig: pytest.Config,
) -> None:
    events = [
        ProgressEvent("quantize", 1, 4, cell="m"),
        ProgressEvent("quantize", 2, 4, cell="m"),
        ProgressEvent("quantize", 4, 4, cell="m", detail="done", final=True),
    ]
    shown = {}
    for tty in (True, False):
        out = _Tty() if tty else io.StringIO()
        reporter = TerminalReporter(pytestconfig, out)
        config = SimpleNamespace(pluginmanager=_Plugins(reporter))
        printer = ProgressPrinter.for_config(config)  # type: ignore[arg-type]
        printer.interval_s = 0.0  # every event is due
        for event in events:
            printer(event)
        reporter.write_line("next")  # pytest's own next line starts afresh
        shown[tty] = out.getvalue()
    lines = shown[True].split("\n")
    # One line, rewritten in place (carriage returns), ended by its last state.
    assert [line.split("\r")[-1].rstrip() for line in lines] == [
        "perfguard: quantize m: 4/4 (done)",
        "next",
        "",
    ]
    assert "\rperfguard: quantize m: 1/4" in lines[0]
    assert "\rperfguard: quantize m: 2/4" in lines[0]
    # A log: the first state and the last, each a line of its own, nothing rewritten.
    assert shown[False] == "perfguard: quantize m: 1/4\nperfguard: quantize m: 4/4 (done)\nnext\n"
