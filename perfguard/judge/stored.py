"""Judging two stored runs the way the plugin judges a live one.

``perfguard compare`` and ``perfguard report --baseline`` both come here, so the same
pair of files gets the same verdicts from either command and from ``pytest --perfguard
--perfguard-baseline=FILE``: each scenario's gates come from the suite file that still
defines it (the policy's default gates otherwise), and confidence, normalisation and the
contention limit start from the policy's defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from perfguard.core.errors import ResultsError
from perfguard.core.paths import under_root
from perfguard.core.policy import CONFIDENCE, CONTENTION_LIMIT, NORMALISE, GateSpec
from perfguard.judge.compare import compare_runs
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import RunResult
from perfguard.suite.loader import Suite, load_suite

__all__ = ["check_plain_runs", "judge_runs", "suite_gates"]


def suite_gates(ids: Sequence[str], rootdir: Path) -> dict[str, tuple[GateSpec, ...]]:
    """Gates of each id whose suite file exists under ``rootdir`` and still has it."""
    suites: dict[Path, Suite | None] = {}
    gates: dict[str, tuple[GateSpec, ...]] = {}
    for sid in ids:
        rel, sep, _ = sid.partition("::")
        if not sep:
            continue
        path = rootdir / rel
        if path not in suites:
            # An id comes from a stored file, which may say anything: only a suite file
            # inside the rootdir is ever read for its gates.
            inside = under_root(path, rootdir) is not None
            suites[path] = load_suite(path) if inside and path.is_file() else None
        suite = suites[path]
        for scenario in suite.scenarios if suite is not None else ():
            if scenario.scenario_id(rootdir) == sid:
                gates[sid] = scenario.gates
    return gates


def check_plain_runs(current: RunResult, baseline: RunResult, *, names: Sequence[str]) -> None:
    """Refuse to judge a same-run A/B run's figures against another run.

    A/B measures both revisions interleaved, request by request, in one session: its
    latencies are slower than a plain run's (two workers share the machine and its
    caches), and its verdicts stand only against the base it was interleaved with,
    which its own ``comparison.json`` holds. ``names``: how to call (current, baseline).
    """
    for run, name in zip((current, baseline), names, strict=True):
        if run.mode == "ab":
            raise ResultsError(
                f"{name} was measured in same-run A/B (interleaved with base "
                f"{_ab_base(run)}), so its latencies are not comparable with a plain run's "
                "(interleaving slows both sides alike, by a different amount than a plain run)",
                expected="two plain runs: results of `pytest --perfguard` without "
                "--perfguard-ab, or archived baselines",
                fix="read the A/B run's own verdicts (`perfguard report` on its results.json, "
                "or its comparison.json), or measure a plain run to compare",
            )


def _ab_base(run: RunResult) -> str:
    bases = sorted({s.runtime.ab_base[:12] for s in run.scenarios if s.runtime.ab_base})
    return ", ".join(bases) or "unknown"


def judge_runs(
    current: RunResult,
    baseline: RunResult,
    *,
    rootdir: Path,
    confidence: float = CONFIDENCE,
    normalise: bool = NORMALISE,
    contention_limit: float = CONTENTION_LIMIT,
    names: tuple[str, str] = ("the current run", "the baseline"),
) -> list[ScenarioVerdict]:
    """One verdict per scenario of either run, with the suites' gates (see the module).

    ResultsError when either run was measured in same-run A/B (``check_plain_runs``;
    ``names`` say which file each run came from).
    """
    check_plain_runs(current, baseline, names=names)
    ids = list(dict.fromkeys(s.id for run in (current, baseline) for s in run.scenarios))
    return compare_runs(
        current,
        baseline,
        suite_gates(ids, rootdir),
        baseline_commit=baseline.commit.sha,
        confidence=confidence,
        normalise=normalise,
        contention_limit=contention_limit,
    )
