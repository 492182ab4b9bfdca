"""The regression gate of one session: which baseline, what verdict, and saving.

``Gatekeeper`` puts together the three halves of the gate for the course of a run
(``perfguard.run``): the baseline chosen once (``judge.choice.Archive``), each measured
cell judged against it (``judge.compare``) and re-measured while its verdict cannot yet
be believed (``judge.remeasure.Rounds``: inconclusive and confirmation rounds), and the
run archived (``judge.save.Saver``: refused when a cell stayed inconclusive).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.baseline.store import DirectoryStore
from perfguard.core.policy import (
    BASELINE,
    BASELINE_DIR,
    CONFIDENCE,
    CONFIRM_ROUNDS,
    CONTENTION_LIMIT,
    INCONCLUSIVE,
    NORMALISE,
    TARGET_BRANCH,
    GateSpec,
)
from perfguard.judge.choice import Archive, BaselineChoice
from perfguard.judge.compare import compare_scenario
from perfguard.judge.remeasure import QuietWaits, Rounds, RoundSettings
from perfguard.judge.save import Saver
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import Environment, RunResult, ScenarioResult


@dataclass(frozen=True)
class GateSettings:
    """What the command line and ini asked of the gate."""

    baseline: str = BASELINE  # auto | none | <git ref> | <path to a results/baseline file>
    baseline_dir: Path = Path(BASELINE_DIR)
    target_branch: str = TARGET_BRANCH
    save: bool = False
    allow_dirty: bool = False
    gate: bool = True
    confirm_rounds: int = CONFIRM_ROUNDS
    confidence: float = CONFIDENCE
    normalise: bool = NORMALISE
    contention_limit: float = CONTENTION_LIMIT
    # A cell still invalid after its rounds: "fail" fails its item, "warn" warns.
    inconclusive: str = INCONCLUSIVE
    save_invalid: bool = False  # --perfguard-save-invalid: save anyway, cells marked


class Gatekeeper:
    """Compares each scenario with the session's baseline; one per session.

    ``quiet`` waits for quiet before each inconclusive round (one budget for the whole
    session); without it the rounds do not wait (a shard merge re-measures nothing)."""

    def __init__(
        self,
        settings: GateSettings,
        rootdir: Path,
        environment: Environment,
        quiet: QuietWaits | None = None,
    ) -> None:
        self.settings = settings
        self.rootdir = rootdir
        self.environment = environment
        store = DirectoryStore(settings.baseline_dir)
        self.archive = Archive(
            store,
            rootdir,
            environment,
            wanted=settings.baseline,
            target_branch=settings.target_branch,
        )
        self.rounds = Rounds(
            self.judge,
            RoundSettings(
                gate=settings.gate,
                save=settings.save,
                confirm_rounds=settings.confirm_rounds,
                contention_limit=settings.contention_limit,
            ),
            quiet,
        )
        self.saver = Saver(
            store,
            contention_limit=settings.contention_limit,
            save_invalid=settings.save_invalid,
        )

    @property
    def choice(self) -> BaselineChoice:
        return self.archive.choice

    def judge(self, current: ScenarioResult, gates: Sequence[GateSpec]) -> ScenarioVerdict:
        """One verdict of a measured cell against the chosen baseline."""
        choice = self.archive.choice
        base = choice.baseline.pooled(current.id) if choice.baseline is not None else None
        return compare_scenario(
            current,
            base,
            gates,
            baseline_commit=choice.commit,
            env_diff=choice.env_diff,
            history=self.archive.history(current.id),
            confidence=self.settings.confidence,
            normalise=self.settings.normalise,
            contention_limit=self.settings.contention_limit,
        )

    def judge_against(
        self,
        current: ScenarioResult,
        base: ScenarioResult,
        gates: Sequence[GateSpec],
        *,
        commit: str,
        against: str,
    ) -> ScenarioVerdict:
        """One verdict of a measured cell against ``base``, a result of commit ``commit``
        measured in this run (named ``against`` in the messages), by the archived gate's
        rules and settings."""
        return compare_scenario(
            current,
            base,
            gates,
            baseline_commit=commit,
            confidence=self.settings.confidence,
            normalise=self.settings.normalise,
            contention_limit=self.settings.contention_limit,
            against=against,
        )

    def judge_confirmed(
        self,
        first: ScenarioResult,
        gates: Sequence[GateSpec],
        remeasure: Callable[[], ScenarioResult],
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """The verdict that stands after the inconclusive and confirmation rounds."""
        return self.rounds.judge_confirmed(first, gates, remeasure)

    def save(self, run: RunResult) -> Path | None:
        """Archive ``run`` as its commit's baseline (``judge.save.Saver.save``)."""
        return self.saver.save(run)


def failure_message(verdict: ScenarioVerdict) -> str:
    """The one line (per regressed figure) that fails the item."""
    lines = [m.message for m in verdict.metrics if m.verdict.failed]
    per_metric = {m.message for m in verdict.metrics}
    lines.extend(note for note in verdict.messages if note not in per_metric)
    return "\n".join(lines)


__all__ = ["GateSettings", "Gatekeeper", "failure_message"]
