"""The regression gate of one session: which baseline, what verdict, and saving.

``Gatekeeper`` resolves the baseline once (``--perfguard-baseline``), judges
each measured scenario against it (``perfguard.judge.compare``), waits for quiet and
re-measures a cell whose figures could not be trusted (inconclusive rounds), asks for
confirmation rounds before a regression may fail an item, and archives the run
(``--perfguard-save``, refused when a cell stayed inconclusive). The pytest hooks only
call it.

Inconclusive rounds. A cell is re-measured only for a reason that can pass: other
processes used more than the contention limit of the CPUs, or the run drifted
(``stable`` false). A reason that is the same on every round (too few samples for the
gate, a gate on an unknown metric, a scenario that failed, a baseline figure <= 0) is
not: the cell is judged again with those run-level facts cleared, and if it is still
``invalid`` re-measuring cannot help. Before each round the gatekeeper waits for quiet
with the waiter it is given (``quiet``: the plugin's
``perfguard.measure.quiet.QuietWaiter``, one budget per session; without one it does
not wait); a wait that ends with the machine still busy ends the rounds. GPU
throttling and a load generator that fell behind reach the plugin as ``RunInvalid``
(a skipped item) before any verdict, so they are not re-measured here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from perfguard.baseline.git import ancestors, resolve
from perfguard.baseline.read import read_baseline_file
from perfguard.baseline.store import Baseline, DirectoryStore, select_auto_baseline
from perfguard.core import progress
from perfguard.core.errors import GitError, PerfguardError, StoreError
from perfguard.core.policy import (
    BASELINE,
    BASELINE_DIR,
    CONFIDENCE,
    CONFIRM_ROUNDS,
    CONTENTION_LIMIT,
    INCONCLUSIVE,
    INCONCLUSIVE_ROUNDS,
    NORMALISE,
    QUIET_WAIT_S,
    TARGET_BRANCH,
    GateSpec,
)
from perfguard.judge.compare import compare_scenario, environment_diff
from perfguard.judge.verdict import (
    ScenarioVerdict,
    VerdictKind,
    confirm,
    needs_confirmation,
)
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult

REMEASURE_STEP = "re-measuring"


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
        said = f" ({commit.note})" if commit.note else ""
        return (
            f"--perfguard-save refused: the working tree has uncommitted changes{said}, so the "
            f"baseline would not describe commit {commit.sha[:12]}; commit or stash them, "
            "or pass --perfguard-allow-dirty"
        )
    return None


#: Untracked files named in a refused save, at most (then how many more).
_UNTRACKED_SHOWN = 5


def untracked_refusal(untracked: Sequence[str], sha: str | None) -> str | None:
    """Why ``--perfguard-save`` saves nothing when untracked files lie where the run's
    code and suites come from, or None when there are none."""
    if not untracked:
        return None
    shown = ", ".join(untracked[:_UNTRACKED_SHOWN])
    more = len(untracked) - _UNTRACKED_SHOWN
    also = f" and {more} more" if more > 0 else ""
    commit = f"commit {sha[:12]}" if sha else "the commit"
    return (
        f"untracked files under the suites' and factories' folders ({shown}{also}) can "
        f"change what this run measured but are in no commit, so the baseline would not describe "
        f"{commit}. Fix: commit them (git add), delete them or list them in .gitignore, "
        f"then run again; or pass --perfguard-allow-dirty"
    )


class QuietWaitEnd(Protocol):
    """How a wait for quiet ended (``perfguard.measure.quiet.QuietWait``)."""

    @property
    def quiet(self) -> bool: ...
    @property
    def waited_s(self) -> float: ...
    @property
    def foreign(self) -> float | None: ...
    @property
    def budget_spent(self) -> bool: ...


class QuietWaits(Protocol):
    """What waits for quiet before a re-measurement (``perfguard.measure.quiet.QuietWaiter``)."""

    @property
    def budget_s(self) -> float: ...
    def wait(self, max_s: float, *, cell: str = "") -> QuietWaitEnd: ...


@dataclass(frozen=True)
class _NoWait:
    """No waiter given: the machine counts as quiet at once."""

    budget_s: float = 0.0

    def wait(self, max_s: float, *, cell: str = "") -> QuietWaitEnd:
        return _Ended()


@dataclass(frozen=True)
class _Ended:
    quiet: bool = True
    waited_s: float = 0.0
    foreign: float | None = None
    budget_spent: bool = False


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
        self.store = DirectoryStore(settings.baseline_dir)
        self.quiet: QuietWaits = quiet if quiet is not None else _NoWait()
        # Set by save(): the inconclusive cells that refused (or were marked in) the save.
        self.save_refused: dict[str, str] = {}
        self.save_marked: dict[str, str] = {}

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
        """Judge, re-measure an inconclusive cell after waiting for quiet, and
        re-measure a suspected regression before believing it.

        Returns the result to record (the round whose verdict stands) and the
        combined verdict, with one note on the inconclusive rounds when there were any.
        """
        first, verdict, note = self._until_conclusive(first, gates, remeasure)
        results = [first]
        verdicts = [verdict]
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
        if note:
            verdict = verdict.with_note(note)
        return chosen, verdict

    def remeasurable(
        self, result: ScenarioResult, verdict: ScenarioVerdict, gates: Sequence[GateSpec]
    ) -> str | None:
        """Why waiting and re-measuring could make this cell trustworthy, or None.

        An ``invalid`` verdict qualifies when its run was contended or unstable and
        nothing else would keep it invalid; a comparable-free verdict (``new``,
        ``incomparable``) only when the run is to be saved as a baseline.
        """
        why = run_problem(result, self.settings.contention_limit)
        if why is None or not (self.settings.gate or self.settings.save):
            return None
        if verdict.verdict is VerdictKind.INVALID:
            cleared = dataclasses.replace(
                result,
                stable=True,
                runtime=dataclasses.replace(result.runtime, cpu=None),
            )
            if self.judge(cleared, gates).verdict is VerdictKind.INVALID:
                return None  # invalid on every round: re-measuring cannot fix it
            return why
        return why if self.settings.save else None

    def _until_conclusive(
        self,
        result: ScenarioResult,
        gates: Sequence[GateSpec],
        remeasure: Callable[[], ScenarioResult],
    ) -> tuple[ScenarioResult, ScenarioVerdict, str | None]:
        """Wait for quiet and re-measure while the cell is inconclusive for a reason that
        can pass; the last round's result and verdict, and one note saying what happened."""
        verdict = self.judge(result, gates)
        why = self.remeasurable(result, verdict, gates)
        if why is None:
            return result, verdict, None
        first_why = why
        rounds = 0
        waited = 0.0
        stopped: str | None = None
        while why is not None and rounds < INCONCLUSIVE_ROUNDS:
            wait = self.quiet.wait(QUIET_WAIT_S - waited, cell=result.id)
            waited += wait.waited_s
            if not wait.quiet:
                if wait.budget_spent:
                    stopped = (
                        f"this session's {self.quiet.budget_s:.0f} s of waiting for quiet is spent"
                    )
                elif wait.waited_s == 0.0:
                    stopped = f"the cell's {QUIET_WAIT_S:.0f} s of waiting for quiet is spent"
                else:
                    use = f"{wait.foreign:.0%}" if wait.foreign is not None else "too much"
                    stopped = (
                        f"other processes still used {use} of the CPUs after {waited:.0f} s "
                        f"(limit {self.settings.contention_limit:.0%})"
                    )
                break
            rounds += 1
            progress.report(
                REMEASURE_STEP,
                rounds,
                INCONCLUSIVE_ROUNDS,
                cell=result.id,
                detail=f"round {rounds} of {INCONCLUSIVE_ROUNDS}: {why}",
            )
            result = remeasure()
            verdict = self.judge(result, gates)
            why = self.remeasurable(result, verdict, gates)
        still = "invalid" if verdict.verdict is VerdictKind.INVALID else "inconclusive"
        note = _rounds_note(first_why, why, rounds, waited, stopped, still)
        if rounds:  # the step's last report: how the rounds ended
            progress.report(
                REMEASURE_STEP,
                rounds,
                INCONCLUSIVE_ROUNDS,
                cell=result.id,
                detail="valid" if why is None else f"still {still}: {why}",
                final=True,
            )
        return result, verdict, note

    def missing(
        self, collected_suites: set[str], collected_ids: set[str]
    ) -> dict[str, ScenarioVerdict]:
        """``missing`` verdicts for baseline scenarios of collected suites that are gone."""
        baseline = self.choice.baseline
        if baseline is None:
            return {}
        found: dict[str, ScenarioVerdict] = {}
        for sid in baseline.scenario_ids():
            suite = sid.split("::", 1)[0]
            if suite in collected_suites and sid not in collected_ids:
                base = baseline.pooled(sid)
                if base is not None:
                    found[sid] = compare_scenario(None, base, (), baseline_commit=baseline.sha)
        return found

    # -- saving -------------------------------------------------------------------
    def contaminated_cells(self, run: RunResult) -> dict[str, str]:
        """``{scenario id: why}`` of the cells whose figures cannot be trusted as a
        baseline: a run contended or unstable (after its rounds), whatever its verdict.

        An ``invalid`` verdict for a reason of the gate's own (too few samples for its
        percentile, an unknown metric) or an undecided A/B cell does not count: those
        figures are clean, and the next comparison says again what is missing.
        """
        found: dict[str, str] = {}
        for result in run.scenarios:
            why = run_problem(result, self.settings.contention_limit)
            if why is not None:
                found[result.id] = why
        return found

    def save_target(self, run: RunResult) -> Path:
        """Where :meth:`save` writes ``run`` (the archive's path for its commit), for the
        messages about it; the fingerprint's folder when the commit has no full sha."""
        fingerprint = run.environment.fingerprint
        try:
            return self.store.path_for(fingerprint, run.commit.sha or "")
        except StoreError:
            return self.store.root / fingerprint

    def save(self, run: RunResult) -> Path | None:
        """Archive ``run`` as its commit's baseline, unless a cell is contaminated.

        Refused (nothing written; ``save_refused`` says which cells and why) when any
        cell is (``contaminated_cells``), unless ``save_invalid``: then saved with those
        cells marked (``save_marked``; see ``BaselineStore.save``).
        """
        bad = self.contaminated_cells(run)
        if bad and not self.settings.save_invalid:
            self.save_refused = bad
            return None
        self.save_marked = bad
        return self.store.save(run, inconclusive=bad)


SAVE_REFUSED_FIX = (
    "re-run on an idle machine, raise --perfguard-contention-limit if this machine is "
    "never quieter, or pass --perfguard-save-invalid to save with those cells marked"
)


def run_problem(result: ScenarioResult, contention_limit: float) -> str | None:
    """Why a measured cell's own run cannot be trusted, whatever it is compared with.

    The two run-level checks of ``perfguard.judge.compare`` that can pass on another
    try: a drifting (unstable) run, and other processes above the contention limit.
    """
    if result.latency_ns is None:  # nothing measured, nothing to distrust
        return None
    if not result.stable:
        ratio = result.stability_ratio
        drift = f" (median of last third / first third = {ratio:.2f})" if ratio else ""
        return f"the run was unstable{drift}"
    foreign = result.runtime.foreign_cpu
    if foreign is not None and foreign > contention_limit:
        return (
            f"other processes used {foreign:.0%} of the CPUs while it was measured "
            f"(limit {contention_limit:.0%})"
        )
    return None


def _rounds_note(
    first_why: str,
    why: str | None,
    rounds: int,
    waited: float,
    stopped: str | None,
    still: str = "invalid",
) -> str:
    """The one note on a cell's inconclusive rounds (``still``: what the cell still is)."""
    after = f"after waiting {waited:.0f} s for quiet"
    if why is None:
        return f"valid on round {rounds + 1} {after} (round 1: {first_why})"
    if rounds == 0:
        return f"not re-measured: {stopped}; still {still}: {why}"
    plural = "round" if rounds == 1 else "rounds"
    tail = f", then {stopped}" if stopped else ""
    return f"re-measured {rounds} {plural} {after}{tail}; still {still}: {why}"


def failure_message(verdict: ScenarioVerdict) -> str:
    """The one line (per regressed figure) that fails the item."""
    lines = [m.message for m in verdict.metrics if m.verdict.failed]
    per_metric = {m.message for m in verdict.metrics}
    lines.extend(note for note in verdict.messages if note not in per_metric)
    return "\n".join(lines)


__all__ = [
    "REMEASURE_STEP",
    "SAVE_REFUSED_FIX",
    "BaselineChoice",
    "GateSettings",
    "Gatekeeper",
    "PerfguardError",
    "check_can_save",
    "failure_message",
    "run_problem",
]
