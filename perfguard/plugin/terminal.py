"""What a run prints: the report header line, the ``perfguard`` summary section (its
last line the run's outcome) and, under GitHub Actions, one ``::error`` annotation per
failed cell (``::warning`` per inconclusive or blind one)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from perfguard.core.progress import ProgressEvent
from perfguard.core.text import one_line
from perfguard.judge.outcome import PROFILE_LINE, Outcome, RunOutcome
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import CommitInfo, Environment, ScenarioResult, Status
from perfguard.report.github import annotation, in_github_actions
from perfguard.report.tables import (
    accuracy_lines,
    load_lines,
    outcome_lines,
    summary_lines,
    telemetry_lines,
)
from perfguard.run.finish import RunFiles


def header_line(commit: CommitInfo, environment: Environment, report_dir: Path) -> str:
    """The line ``pytest_report_header`` adds: commit, environment, where reports go."""
    where = commit.short if commit.sha else f"uncommitted ({commit.note})"
    dirty = ", dirty" if commit.dirty else ""
    return (
        f"perfguard: commit {where}{dirty}; environment {environment.fingerprint}; "
        f"reports -> {report_dir}"
    )


def github_annotations(
    results: Sequence[ScenarioResult],
    locations: Mapping[str, tuple[str, int | None]],
    outcome: RunOutcome,
) -> list[str]:
    """Under GitHub Actions, one ``::error`` per failed cell and one ``::warning`` per
    inconclusive or blind one, at its suite line; a failed cell's inconclusive or blind
    finding beside its outcome (``CellOutcome.also``) is a ``::warning`` of its own."""
    if not in_github_actions():
        return []
    by_id = {r.id: r for r in results}
    lines = []
    for cell in outcome.cells:
        result = by_id.get(cell.scenario_id)
        if result is None:
            continue
        path, line = locations.get(result.id, (result.suite, None))
        for kind, reason, main in cell.findings():
            if main and cell.failed:
                level = "error"
            elif kind in (Outcome.INCONCLUSIVE, Outcome.BLIND):
                level = "warning"
            else:
                continue
            title = f"perfguard {kind.label}: {result.name}"
            message = result.message if main and cell.failed and result.message else reason
            lines.append(annotation(path, line, title, message or kind.label, level))
    return lines


def write_summary(
    terminalreporter: Any,
    *,
    baseline_how: str,
    results: Sequence[ScenarioResult],
    verdicts: Mapping[str, ScenarioVerdict],
    locations: Mapping[str, tuple[str, int | None]],
    files: RunFiles,
    outcome: RunOutcome,
) -> None:
    """The ``perfguard`` section of the terminal summary, ending with the run's outcome
    (the same one report.html, summary.md and the index give)."""
    write = terminalreporter.write_line
    terminalreporter.section("perfguard")
    write(f"baseline: {one_line(baseline_how)}")
    for line in summary_lines(list(results), verdicts, outcome=outcome):
        write(line)
    for result in results:  # a regression's failure message names its top contributor
        for line in (result.message or "").splitlines():
            if result.status is Status.FAILED and line.startswith(PROFILE_LINE):
                write(f"{result.name}: {line}")
    loaded = load_lines(list(results), outcome)
    if loaded:
        write("under load (latency from the scheduled send time):")
    for line in loaded:
        write(line)
    for line in accuracy_lines(list(results)):
        write(f"accuracy: {line}")
    for line in telemetry_lines(results):
        write(f"telemetry: {line}", yellow=True)
    for line, failed in outcome_lines(outcome):
        write(line, **({"red": True} if failed else {"yellow": True}))
    for line in github_annotations(results, locations, outcome):
        write(line)
    for line, failed in files.lines():
        write(one_line(line), **({"red": True} if failed else {}))
    colour = {"failed": "red", "warnings": "yellow", "passed": "green"}[outcome.state]
    write(f"perfguard: {outcome.summary()}", **{colour: True, "bold": True})


#: Off a terminal, how often a step still going on says so (seconds): a CI log gets a
#: long A/B step's start, a line a minute, and its end, never a line per poll.
LOG_INTERVAL_S = 60.0


class ProgressPrinter:
    """A progress sink (``perfguard.core.progress``) that shows each long step's state.

    On a terminal (``rewrite`` given: pytest's output is a tty) a step's line changes in
    place as it goes, at most once per ``interval_s``, and its final event ends it: a
    minute of export or of waiting for quiet is one line that moves. Elsewhere (a CI
    log, a pipe, pytester) each state is printed once: the step's first event, a line
    every ``log_interval_s`` while it goes on, and its final event (how it ended), so a
    wait that polls every second is two lines, not one per poll.

    ``write`` prints a whole line (on a fresh line); ``rewrite`` replaces the line being
    rewritten (the first time, on a fresh line); ``end`` ends that line.
    """

    def __init__(
        self,
        write: Callable[[str], None],
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        rewrite: Callable[[str], None] | None = None,
        end: Callable[[], None] | None = None,
        log_interval_s: float = LOG_INTERVAL_S,
    ) -> None:
        self.write = write
        self.interval_s = interval_s
        self.clock = clock
        self.rewrite = rewrite
        self.end = end or (lambda: None)
        self.log_interval_s = log_interval_s
        self._last: dict[tuple[str, str], float] = {}
        self._open: tuple[str, str] | None = None  # the step whose line is rewritten

    def __call__(self, event: ProgressEvent) -> None:
        key = (event.step, event.cell)
        now = self.clock()
        last = self._last.get(key)
        every = self.interval_s if self.rewrite is not None else self.log_interval_s
        if not event.final and last is not None and now - last < every:
            return
        if event.final:
            self._last.pop(key, None)
        else:
            self._last[key] = now
        text = f"perfguard: {one_line(event.line())}"
        if self.rewrite is None:
            self.write(text)
            return
        if self._open is not None and self._open != key:
            self.end()  # another step's line stays as it last was
            self._open = None
        if event.final:
            if self._open == key:
                self.rewrite(text)
                self.end()
            else:
                self.write(text)
            self._open = None
            return
        self.rewrite(text)
        self._open = key

    @classmethod
    def for_config(cls, config: pytest.Config) -> ProgressPrinter:
        """A printer on pytest's terminal, around output capture (as live logging does);
        lines rewritten in place only when that terminal is a tty."""

        def reporter() -> Any:
            return config.pluginmanager.get_plugin("terminalreporter")

        def around_capture(show: Callable[[Any], None]) -> None:
            terminal = reporter()
            if terminal is None:
                return
            capture = config.pluginmanager.get_plugin("capturemanager")
            if capture is None:
                show(terminal)
                return
            with capture.global_and_fixture_disabled():
                show(terminal)

        def write(line: str) -> None:
            around_capture(lambda terminal: terminal.write_line(line))

        def rewrite(line: str) -> None:
            def show(terminal: Any) -> None:
                width = max(20, terminal._tw.fullwidth - 1)  # a wrapped line cannot be rewritten
                if terminal.currentfspath != _REWRITING:
                    terminal.ensure_newline()
                terminal.rewrite(line[:width], erase=True)
                terminal.flush()
                # pytest's next line (or ours) starts afresh: ensure_newline ends this one.
                terminal.currentfspath = _REWRITING

            around_capture(show)

        def end() -> None:
            around_capture(lambda terminal: terminal.ensure_newline())

        terminal = reporter()
        if terminal is not None and terminal.isatty():
            return cls(write, rewrite=rewrite, end=end)
        return cls(write)


#: ``TerminalReporter.currentfspath`` while a progress line is being rewritten (a value
#: pytest never sets): pytest ends the line (``ensure_newline``) before it writes more.
_REWRITING = "<perfguard progress line>"
