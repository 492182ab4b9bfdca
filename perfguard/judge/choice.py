"""Which baseline a session compares with, and the archive behind it.

``--perfguard-baseline`` decides: ``auto`` (the nearest ancestor stored on this
environment, else one on another environment: ``incomparable``), ``none``, a git ref,
or a path to a ``results.json`` or baseline file. :class:`Archive` resolves it once per
session and serves the chosen baseline's cells, the stored ancestors' figures for the
trend and change points, and the ``missing`` verdicts of cells the baseline had.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfguard.baseline.git import ancestors, resolve
from perfguard.baseline.read import read_baseline_file
from perfguard.baseline.store import Baseline, DirectoryStore, select_auto_baseline
from perfguard.core.errors import GitError
from perfguard.judge.compare import compare_scenario, environment_diff
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import Environment, ScenarioResult


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


class Archive:
    """The baselines one session sees on its environment: the chosen one and the stored
    ancestors behind it, read once."""

    def __init__(
        self,
        store: DirectoryStore,
        rootdir: Path,
        environment: Environment,
        *,
        wanted: str,
        target_branch: str,
    ) -> None:
        self.store = store
        self.rootdir = rootdir
        self.environment = environment
        self.wanted = wanted  # auto | none | <git ref> | <path to a results/baseline file>
        self.target_branch = target_branch

    @functools.cached_property
    def choice(self) -> BaselineChoice:
        return self._choose()

    def _choose(self) -> BaselineChoice:
        wanted = self.wanted
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
                self.store, fingerprint, self.rootdir, self.target_branch
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


__all__ = ["Archive", "BaselineChoice"]
