"""The regression gate of one session: which baseline, what verdict, and saving.

``Gatekeeper`` resolves the baseline once (``--perfguard-baseline``), judges
each measured scenario against it (``perfguard.judge.compare``), asks for
confirmation rounds before a regression may fail an item, and archives the run
(``--perfguard-save``). The pytest hooks only call it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfguard.baseline.git import ancestors, resolve
from perfguard.baseline.read import read_baseline_file
from perfguard.baseline.store import Baseline, DirectoryStore, select_auto_baseline
from perfguard.core.errors import GitError, PerfguardError
from perfguard.core.policy import CONFIDENCE, CONTENTION_LIMIT, NORMALISE, GateSpec
from perfguard.core.results import CommitInfo, Environment, RunResult, ScenarioResult
from perfguard.judge.compare import compare_scenario, environment_diff
from perfguard.judge.verdict import ScenarioVerdict, confirm, needs_confirmation


@dataclass(frozen=True)
class GateSettings:
    """What the command line and ini asked of the gate."""

    baseline: str = "auto"  # auto | none | <git ref> | <path to a results/baseline file>
    baseline_dir: Path = Path("baselines")
    target_branch: str = "main"
    save: bool = False
    allow_dirty: bool = False
    gate: bool = True
    confirm_rounds: int = 2
    confidence: float = CONFIDENCE
    normalise: bool = NORMALISE
    contention_limit: float = CONTENTION_LIMIT


@dataclass(frozen=True)
class BaselineChoice:
    """The baseline a session compares with, and a sentence saying how it was chosen."""

    baseline: Baseline | None
    how: str
    env_diff: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)

    @property
    def commit(self) -> str | None:
        if self.baseline is None:
            return None
        return self.baseline.commit.sha

    def to_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "how": self.how,
            "path": str(self.baseline.path) if self.baseline and self.baseline.path else None,
            "launches": len(self.baseline.launches) if self.baseline else 0,
            "env_diff": {k: list(v) for k, v in self.env_diff.items()},
        }


def check_can_save(settings: GateSettings, commit: CommitInfo) -> str | None:
    """Why ``--perfguard-save`` must be refused before anything runs, or None."""
    if not settings.save:
        return None
    if commit.sha is None:
        return (
            f"--perfguard-save needs a commit to file the baseline under, but found "
            f"{commit.note or 'no commit'}; commit first, or run inside a git checkout"
        )
    if commit.dirty and not settings.allow_dirty:
        return (
            "--perfguard-save refused: the working tree has uncommitted changes, so the "
            f"baseline would not describe commit {commit.sha[:12]}; commit or stash them, "
            "or pass --perfguard-allow-dirty"
        )
    return None


class Gatekeeper:
    """Compares each scenario with the session's baseline; one per session."""

    def __init__(self, settings: GateSettings, rootdir: Path, environment: Environment) -> None:
        self.settings = settings
        self.rootdir = rootdir
        self.environment = environment
        self.store = DirectoryStore(settings.baseline_dir)
        self.verdicts: dict[str, ScenarioVerdict] = {}

    @functools.cached_property
    def choice(self) -> BaselineChoice:
        return self._choose()

    def _choose(self) -> BaselineChoice:
        wanted = self.settings.baseline
        fingerprint = self.environment.fingerprint
        if wanted == "none":
            return BaselineChoice(None, "no baseline (--perfguard-baseline=none)")
        path = Path(wanted)
        if not path.is_absolute():
            path = self.rootdir / path
        if wanted.endswith(".json") or path.is_file():
            return self._from_file(path)
        if wanted == "auto":
            baseline, how = select_auto_baseline(
                self.store, fingerprint, self.rootdir, self.settings.target_branch
            )
            if baseline is not None:
                return BaselineChoice(baseline, how)
            return self._other_fingerprint(how)

        sha = resolve(self.rootdir, wanted)
        baseline = self.store.load(fingerprint, sha)
        if baseline is not None:
            return BaselineChoice(baseline, f"baseline of {wanted} ({sha[:7]}), as asked")
        return self._other_fingerprint(
            f"no baseline stored for {wanted} ({sha[:7]}) on this environment "
            f"({fingerprint}); save one with `pytest --perfguard --perfguard-save` "
            f"on that commit",
            only=(sha,),
        )

    def _from_file(self, path: Path) -> BaselineChoice:
        baseline = read_baseline_file(path)
        diff = environment_diff(baseline.launches[-1].environment, self.environment)
        return BaselineChoice(baseline, f"results file {path}, as asked", diff)

    def _other_fingerprint(self, how: str, only: Sequence[str] | None = None) -> BaselineChoice:
        """No baseline on this environment: one on another says ``incomparable``."""
        shas = list(only) if only is not None else self._ancestors()
        for fingerprint in self.store.fingerprints():
            if fingerprint == self.environment.fingerprint:
                continue
            baseline = self.store.nearest_ancestor(fingerprint, shas)
            if baseline is not None:
                diff = environment_diff(baseline.launches[-1].environment, self.environment)
                return BaselineChoice(
                    baseline,
                    f"{how}; the nearest baseline ({baseline.sha[:7]}) was measured on "
                    f"another environment ({fingerprint})",
                    diff,
                )
        return BaselineChoice(None, how)

    @functools.cache  # noqa: B019 - one Gatekeeper per session; the cache dies with it
    def _ancestors(self) -> list[str]:
        try:
            return ancestors(self.rootdir, "HEAD")[1:]
        except GitError:
            return []

    @functools.cached_property
    def _archive(self) -> list[Baseline]:
        """This environment's stored ancestors, oldest first: read once per session."""
        return self.store.ordered_baselines(self.environment.fingerprint, self._ancestors() or None)

    def history_results(self, scenario_id: str) -> list[tuple[str, ScenarioResult]]:
        """The scenario's stored results on this environment, oldest first (for trends)."""
        pooled = ((b.sha, b.pooled(scenario_id)) for b in self._archive)
        return [(sha, result) for sha, result in pooled if result is not None]

    @functools.cache  # noqa: B019 - see above
    def history(self, scenario_id: str) -> tuple[float, ...]:
        """Canary-normalised P95s of this scenario at stored ancestor commits."""
        choice = self.choice
        if choice.baseline is None or choice.env_diff:
            return ()
        values = []
        for _sha, result in self.history_results(scenario_id):
            if result.latency_ns is None:
                continue
            p95 = result.latency_ns.p95
            values.append(p95 / result.canary_ns if result.canary_ns else p95)
        return tuple(values)

    def baseline_result(self, scenario_id: str) -> ScenarioResult | None:
        """The baseline's (pooled) result of a scenario, when it may be compared."""
        choice = self.choice
        if choice.baseline is None or choice.env_diff:
            return None
        return choice.baseline.pooled(scenario_id)

    # -- judging ------------------------------------------------------------------
    def judge(self, current: ScenarioResult, gates: Sequence[GateSpec]) -> ScenarioVerdict:
        choice = self.choice
        base = choice.baseline.pooled(current.id) if choice.baseline is not None else None
        return compare_scenario(
            current,
            base,
            gates,
            baseline_commit=choice.commit,
            env_diff=choice.env_diff,
            history=self.history(current.id),
            confidence=self.settings.confidence,
            normalise=self.settings.normalise,
            contention_limit=self.settings.contention_limit,
        )

    def judge_confirmed(
        self,
        first: ScenarioResult,
        gates: Sequence[GateSpec],
        remeasure: Callable[[], ScenarioResult],
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """Judge, and re-measure a suspected regression before believing it.

        Returns the result to record (the round whose verdict stands) and the
        combined verdict.
        """
        results = [first]
        verdicts = [self.judge(first, gates)]
        while (
            self.settings.gate
            and needs_confirmation(verdicts[-1])
            and len(verdicts) <= self.settings.confirm_rounds
        ):
            results.append(remeasure())
            verdicts.append(self.judge(results[-1], gates))
        verdict = confirm(verdicts)
        if verdict.failed:
            chosen = results[-1]
        else:
            chosen = results[max(i for i, v in enumerate(verdicts) if not v.failed)]
        self.verdicts[verdict.scenario_id] = verdict
        return chosen, verdict

    def missing(self, collected_suites: set[str], collected_ids: set[str]) -> None:
        """Record ``missing`` for baseline scenarios of collected suites that are gone."""
        baseline = self.choice.baseline
        if baseline is None:
            return
        for sid in baseline.scenario_ids():
            suite = sid.split("::", 1)[0]
            if suite in collected_suites and sid not in collected_ids:
                base = baseline.pooled(sid)
                if base is not None:
                    self.verdicts[sid] = compare_scenario(
                        None, base, (), baseline_commit=baseline.sha
                    )

    # -- saving -------------------------------------------------------------------
    def save(self, run: RunResult) -> Path | None:
        return self.store.save(run)


def failure_message(verdict: ScenarioVerdict) -> str:
    """The one line (per regressed figure) that fails the item."""
    lines = [m.message for m in verdict.metrics if m.verdict.failed]
    per_metric = {m.message for m in verdict.metrics}
    lines.extend(note for note in verdict.messages if note not in per_metric)
    return "\n".join(lines)


__all__ = [
    "BaselineChoice",
    "GateSettings",
    "Gatekeeper",
    "PerfguardError",
    "check_can_save",
    "failure_message",
]
