"""What a report is rendered from: one run, its verdicts, its baseline and history.

Built by the pytest session at the end of a run, or by ``perfguard report``
from stored files; the renderers only read it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfguard.core.policy import CONTENTION_LIMIT
from perfguard.judge.changes import ChangePoint
from perfguard.judge.outcome import RunOutcome, run_outcome
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import Environment, RunResult, ScenarioResult


@dataclass(frozen=True)
class ReportInput:
    """Everything one commit's report shows.

    ``baseline`` maps scenario id -> the baseline's (pooled) result, for overlaid
    distributions; ``baseline_info`` is ``BaselineChoice.to_dict()`` (commit, how
    it was chosen, path, launches, env_diff); ``history`` maps scenario id -> the
    stored commits' results of that scenario on this fingerprint, oldest first: runs of
    their own, so a cell judged by same-run A/B draws them apart from its A/B figures
    (``perfguard.report.render``), never as one series with them.
    ``exit_status`` is pytest's exit status of the run, when known (older runs did
    not store it); a non-zero one fails the run even when no cell explains it.
    ``changes`` maps scenario id -> the change points of its archived history
    (``perfguard.judge.changes.archive_changes``), found once by whoever builds the
    input: every renderer reads them here and none runs the detection or git.
    ``contention_limit`` is the run's (``--perfguard-contention-limit``): a cell measured
    while other processes used more of the CPUs than this was measured on a busy host.
    """

    run: RunResult
    verdicts: tuple[ScenarioVerdict, ...] = ()
    baseline: Mapping[str, ScenarioResult] = field(default_factory=dict)
    baseline_info: Mapping[str, Any] = field(default_factory=dict)
    baseline_environment: Environment | None = None
    history: Mapping[str, Sequence[tuple[str, ScenarioResult]]] = field(default_factory=dict)
    gate: bool = True
    exit_status: int | None = None
    changes: Mapping[str, Sequence[ChangePoint]] = field(default_factory=dict)
    contention_limit: float = CONTENTION_LIMIT

    @functools.cached_property
    def outcome(self) -> RunOutcome:
        """What became of each cell and of the run (every output reads this), decided
        once per report input however many renderers read it."""
        return run_outcome(
            self.run.scenarios, self.verdicts, exit_status=self.exit_status, gate=self.gate
        )
