"""pytest collection nodes: a suite file, its scenario cells, and a broken suite.

A suite that fails to load becomes ONE failing item carrying the located error,
instead of a collection error: pytest stops the whole session on collection
errors, and one bad suite must not stop the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import pytest
from _pytest._code.code import ExceptionInfo, TerminalRepr
from _pytest._io import TerminalWriter

from perfguard.core.blame import blame, failure_text
from perfguard.core.errors import BackendUnavailable, PerfguardError, RunInvalid, SuiteError
from perfguard.core.scenario import Scenario
from perfguard.core.text import plain
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import ScenarioResult
from perfguard.suite.loader import load_suite


class CellRunner(Protocol):
    """What the nodes need of the run: the run's state object implements it."""

    def register_suite(self, path: Path, scenarios: tuple[Scenario, ...]) -> None:
        """Remember a loaded suite's cells."""

    def register_markers(self, tags: Iterable[str]) -> None:
        """Declare a suite's tags as markers."""

    def run_item(self, item: ScenarioItem) -> None:
        """Measure, record and judge one cell; raise to fail or skip it."""

    def item_properties(self, scenario: Scenario) -> list[tuple[str, object]]:
        """The cell's (name, value) pairs for JUnit XML."""


class SuiteFile(pytest.File):
    """A ``suites/*.yaml`` file; yields one item per matrix cell."""

    def __init__(self, *, runner: CellRunner, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.runner = runner

    def collect(self) -> Iterable[pytest.Item]:
        try:
            suite = load_suite(self.path)
        except SuiteError as exc:
            yield SuiteErrorItem.from_parent(self, name="suite", error=exc)
            return
        self.runner.register_suite(self.path, suite.scenarios)
        for scenario in suite.scenarios:
            item = ScenarioItem.from_parent(
                self, name=scenario.item_name, scenario=scenario, runner=self.runner
            )
            self.runner.register_markers(scenario.tags)
            item.add_marker("perfguard")
            for tag in scenario.tags:
                item.add_marker(tag)
            # -k can select on runtime figures too: `-k "onnxruntime and int8"`.
            item.extra_keyword_matches.update(
                {scenario.backend, scenario.device, scenario.precision}
            )
            yield item


class ScenarioItem(pytest.Item):
    """One scenario cell: measured, recorded and (with a baseline) gated."""

    def __init__(self, *, scenario: Scenario, runner: CellRunner, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.scenario = scenario
        self.runner = runner

    def runtest(self) -> None:
        try:
            self.runner.run_item(self)
        except (BackendUnavailable, RunInvalid) as exc:
            pytest.skip(str(exc))
        finally:
            # The figures travel with the item: --junitxml writes them as <property>.
            self.user_properties.extend(self.runner.item_properties(self.scenario))

    def repr_failure(
        self,
        excinfo: ExceptionInfo[BaseException],
        style: str | None = None,
    ) -> str | TerminalRepr:
        # The text may carry a model's or an exception's words: ``plain`` leaves no
        # escape sequence or workflow command in the terminal or the CI log.
        exc = excinfo.value
        if isinstance(exc, Exception) and not isinstance(exc, PerfguardError):
            # No step wrapped it: perfguard's own or the model's, told by its traceback.
            error = blame(
                exc,
                doing=f"running cell {self.name}",
                culprit=f"model {self.scenario.model.name!r}",
                fix="fix the model at the last line of the traceback below",
                location=self.scenario.location,
            )
            error.__cause__ = exc
            exc = error
        if isinstance(exc, PerfguardError):
            text = failure_text(exc)
            if self.config.option.tbstyle == "long":
                full = super().repr_failure(excinfo, style="long")
                text += f"\n\n--- every frame (--tb=long) ---\n{full}"
            return plain(text)
        shown = super().repr_failure(excinfo, style=style)  # type: ignore[arg-type]
        if isinstance(shown, str):
            return plain(shown)
        text = str(shown)
        return shown if plain(text) == text else PlainRepr(text)

    def reportinfo(self) -> tuple[str, int | None, str]:
        line = self.scenario.location.line
        return str(self.path), (line - 1 if line else None), f"scenario: {self.name}"


class PlainRepr(TerminalRepr):
    """pytest's failure representation (a traceback) whose text carried escape
    sequences or workflow commands, written through ``plain`` (without colours)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def toterminal(self, tw: TerminalWriter) -> None:
        tw.write(plain(self.text))
        tw.line()


class SuiteErrorItem(pytest.Item):
    """Stands in for a suite that could not be loaded, and fails with its error."""

    def __init__(self, *, error: SuiteError, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.error = error

    def runtest(self) -> None:
        raise self.error

    def repr_failure(
        self,
        excinfo: ExceptionInfo[BaseException],
        style: str | None = None,
    ) -> str | TerminalRepr:
        return plain(str(excinfo.value))

    def reportinfo(self) -> tuple[str, int | None, str]:
        line = self.error.location.line if self.error.location else None
        return str(self.path), (line - 1 if line else None), "suite: failed to load"


def junit_properties(
    result: ScenarioResult, verdict: ScenarioVerdict | None
) -> list[tuple[str, object]]:
    """(name, value) pairs for JUnit XML (``<property>``): a cell's figures and verdict.

    Plain values only (words, numbers): under pytest-xdist the report carrying them
    travels to the controller through execnet, which refuses an enum.
    """
    props: list[tuple[str, object]] = [("perfguard_status", str(result.status))]
    if result.latency_ns is not None:
        for key in ("p50", "p95", "p99"):
            props.append((f"perfguard_{key}_ms", round(getattr(result.latency_ns, key) / 1e6, 6)))
        props.append(("perfguard_n", result.latency_ns.n))
    if result.throughput is not None:
        props.append(("perfguard_throughput", round(result.throughput, 3)))
    if result.peak_memory_mib is not None:
        props.append(("perfguard_peak_memory_mib", round(result.peak_memory_mib, 1)))
    if verdict is not None:
        props.append(("perfguard_verdict", str(verdict.verdict)))
        p95 = verdict.metric("p95")
        if p95 is not None and p95.change is not None:
            props.append(("perfguard_p95_change_pct", round(p95.change * 100, 2)))
    if result.accuracy:
        props.append(("perfguard_accuracy_passed", result.accuracy.passed))
        if result.accuracy.inconclusive:  # checks not made: a degenerate reference
            props.append(("perfguard_accuracy_inconclusive", True))
    return props
