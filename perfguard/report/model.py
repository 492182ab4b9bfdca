"""What a report is rendered from: one run, its verdicts, its baseline and history.

Built by the pytest session at the end of a run, or by ``perfguard report``
from stored files; the renderers only read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfguard.core.results import Environment, RunResult, ScenarioResult
from perfguard.judge.verdict import ScenarioVerdict


@dataclass(frozen=True)
class ReportInput:
    """Everything one commit's report shows.

    ``baseline`` maps scenario id -> the baseline's (pooled) result, for overlaid
    distributions; ``baseline_info`` is ``BaselineChoice.to_dict()`` (commit, how
    it was chosen, path, launches, env_diff); ``history`` maps scenario id -> the
    stored commits' results of that scenario on this fingerprint, oldest first.
    """

    run: RunResult
    verdicts: tuple[ScenarioVerdict, ...] = ()
    baseline: Mapping[str, ScenarioResult] = field(default_factory=dict)
    baseline_info: Mapping[str, Any] = field(default_factory=dict)
    baseline_environment: Environment | None = None
    history: Mapping[str, Sequence[tuple[str, ScenarioResult]]] = field(default_factory=dict)
    gate: bool = True
