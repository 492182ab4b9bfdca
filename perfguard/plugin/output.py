"""The files a run leaves: ``results.json``, ``comparison.json``, the archived baseline,
``report.html`` + ``summary.md`` (and the index), and GitHub's job summary.

Only the controller writes them (an xdist worker ships its results instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from perfguard.ab.run import ABRun, base_results
from perfguard.core.results import RunResult, ScenarioResult
from perfguard.core.resultsio import write_results
from perfguard.judge.gatekeeper import Gatekeeper
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.plugin.settings import RunSettings
from perfguard.report import render_markdown, write_report
from perfguard.report.comparison import comparison_path, write_comparison
from perfguard.report.github import in_github_actions, write_step_summary
from perfguard.report.model import ReportInput

#: pytest's exit status for a run whose ``--perfguard-save`` was refused (tests failed).
SAVE_REFUSED_EXIT = 1


@dataclass
class RunFiles:
    """What was written so far (the terminal summary names each)."""

    results: Path | None = None
    saved: Path | None = None
    report: Path | None = None


def write_run_files(
    run: RunResult,
    verdicts: Mapping[str, ScenarioVerdict],
    *,
    settings: RunSettings,
    gatekeeper: Gatekeeper,
    ab: ABRun | None,
    files: RunFiles,
    exit_status: int | None = None,
) -> int | None:
    """Write every file of the run, in order, recording each path in ``files`` as it lands.

    ``exit_status`` is pytest's: comparison.json keeps it, so the report index says how
    the run ended, and the report's outcome agrees with it. A refused ``--perfguard-save``
    fails the run (the CI baseline job must not pass leaving the old baseline in
    place), so it is tried first and the exit status the files record is returned.
    """
    files.results = write_results(run, settings.report_dir)
    if settings.judging.save:
        files.saved = gatekeeper.save(run)
        if gatekeeper.save_refused and not exit_status:
            exit_status = SAVE_REFUSED_EXIT
    write_comparison(
        comparison_path(files.results),
        baseline=gatekeeper.choice.to_dict(),
        gate=settings.judging.gate,
        verdicts=verdicts.values(),
        exit_status=exit_status,
    )
    files.report = _write_report(run, verdicts, settings, gatekeeper, ab, exit_status)
    return exit_status


def _write_report(
    run: RunResult,
    verdicts: Mapping[str, ScenarioVerdict],
    settings: RunSettings,
    gatekeeper: Gatekeeper,
    ab: ABRun | None,
    exit_status: int | None,
) -> Path:
    """report.html + summary.md beside results.json; the job summary on GitHub."""
    choice = gatekeeper.choice
    results = {r.id: r for r in run.scenarios}
    baseline: dict[str, ScenarioResult] = {}
    if ab is not None:
        baseline = base_results(verdicts, results)
    elif choice.baseline is not None:
        for sid in choice.baseline.scenario_ids():
            pooled = choice.baseline.pooled(sid)
            if pooled is not None:
                baseline[sid] = pooled
    report = ReportInput(
        run=run,
        verdicts=tuple(verdicts.values()),
        baseline=baseline,
        baseline_info=(
            {**choice.to_dict(), "commit": ab.base.sha, "how": ab.how}
            if ab is not None and ab.base is not None
            else choice.to_dict()
        ),
        baseline_environment=(
            choice.baseline.launches[-1].environment if choice.baseline else None
        ),
        history={sid: gatekeeper.history_results(sid) for sid in results},
        gate=settings.judging.gate,
        exit_status=exit_status,
    )
    path = write_report(report, settings.report_dir)
    if in_github_actions():
        write_step_summary(render_markdown(report))
    return path
