"""How one cell is measured and judged: which of the three paths, and its accuracy.

* same-run A/B (``--perfguard-ab``): the base revision's worker and this tree's,
  interleaved request by request (a cell under load: in alternating rounds of whole
  load levels), judged on the paired comparison;
* an isolated worker process (``--perfguard-isolate`` or ``isolate: true``): a crash
  fails only that cell;
* in-process: the default.

A cell A/B cannot take (new in this tree, or an SLO search) goes through the
isolated or in-process path, and its verdict says why. Outside A/B a suspected
regression is re-measured (the gatekeeper's confirmation rounds) before it stands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfguard.ab.run import ABRun
from perfguard.accuracy.run import AccuracyChecker
from perfguard.core.results import ScenarioResult
from perfguard.core.scenario import Scenario
from perfguard.judge.gatekeeper import Gatekeeper
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.measure.cell import RunContext, open_session
from perfguard.measure.runner import ScenarioRun
from perfguard.worker.isolate import IsolatedRun


class CellMeasurer:
    """Measures a cell on the path its settings choose, and checks its accuracy."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        isolate: bool,
        ab: ABRun | None,
        gatekeeper: Callable[[], Gatekeeper],
        suites: Mapping[Path, tuple[Scenario, ...]],
    ) -> None:
        self.ctx = ctx
        self.isolate = isolate
        self.ab = ab
        self._gatekeeper = gatekeeper  # resolved lazily: the baseline is chosen once
        self.accuracy = AccuracyChecker(
            open_session=lambda scenario, calibration: open_session(scenario, ctx, calibration),
            scenarios_of=lambda path: suites.get(Path(path).resolve(), ()),
        )

    def measure_and_judge(self, scenario: Scenario) -> tuple[ScenarioResult, ScenarioVerdict]:
        ab = self.ab
        if ab is not None and ab.compares(scenario):
            result, verdict = ab.measure(scenario, self.ctx)
            return self._with_accuracy(scenario, result), verdict
        gatekeeper = self._gatekeeper()
        if self.isolate or scenario.isolate:
            with IsolatedRun(scenario, self.ctx) as iso:
                measured = iso.measure()
                result, verdict = gatekeeper.judge_confirmed(measured, scenario.gates, iso.measure)
            result = self._with_accuracy(scenario, result)
        else:
            calibration = self.accuracy.calibration_for(scenario)
            with ScenarioRun(scenario, self.ctx, calibration) as run:
                result, verdict = gatekeeper.judge_confirmed(
                    run.measure(), scenario.gates, run.measure
                )
                if scenario.accuracy is not None:
                    result = self._accuracy_of(scenario, run.session, result)
        if ab is not None:  # only in the working tree, an SLO search, or load on one side
            verdict = ab.outside_ab(scenario, verdict)
        return result, verdict

    def _accuracy_of(
        self, scenario: Scenario, session: Any, result: ScenarioResult
    ) -> ScenarioResult:
        """``result`` with the cell's accuracy checked on ``session``."""
        gatekeeper = self._gatekeeper()
        accuracy, golden = self.accuracy.check(
            scenario, session, gatekeeper.baseline_result(result.id), gatekeeper.choice.commit
        )
        return replace(result, accuracy=accuracy, golden_outputs=golden)

    def _with_accuracy(self, scenario: Scenario, result: ScenarioResult) -> ScenarioResult:
        """Accuracy of a cell measured out of process: checked here, in a session of its own."""
        if scenario.accuracy is None:
            return result
        calibration = self.accuracy.calibration_for(scenario)
        with open_session(scenario, self.ctx, calibration) as (session, _prepared, _batch):
            return self._accuracy_of(scenario, session, result)
