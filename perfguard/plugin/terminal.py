"""What a run prints: the report header line, the ``perfguard`` summary section and,
under GitHub Actions, one ``::error`` annotation per failed cell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfguard.core.results import CommitInfo, Environment, ScenarioResult, Status
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.plugin.output import RunFiles
from perfguard.report.github import annotation, in_github_actions
from perfguard.report.tables import accuracy_lines, load_lines, summary_lines, verdict_notes


def header_line(commit: CommitInfo, environment: Environment, report_dir: Path) -> str:
    """The line ``pytest_report_header`` adds: commit, environment, where reports go."""
    where = commit.short if commit.sha else f"uncommitted ({commit.note})"
    dirty = ", dirty" if commit.dirty else ""
    return (
        f"perfguard: commit {where}{dirty}; environment {environment.fingerprint}; "
        f"reports -> {report_dir}"
    )


def github_annotations(
    results: Sequence[ScenarioResult], locations: Mapping[str, tuple[str, int | None]]
) -> list[str]:
    """Under GitHub Actions, one ``::error`` per failed cell, at its suite line."""
    if not in_github_actions():
        return []
    lines = []
    for result in results:
        if result.status not in (Status.FAILED, Status.ERROR):
            continue
        path, line = locations.get(result.id, (result.suite, None))
        title = f"perfguard: {result.name}"
        lines.append(annotation(path, line, title, result.message or result.status))
    return lines


def write_summary(
    terminalreporter: Any,
    *,
    baseline_how: str,
    results: Sequence[ScenarioResult],
    verdicts: Mapping[str, ScenarioVerdict],
    locations: Mapping[str, tuple[str, int | None]],
    files: RunFiles,
) -> None:
    """The ``perfguard`` section of the terminal summary."""
    terminalreporter.section("perfguard")
    terminalreporter.write_line(f"baseline: {baseline_how}")
    for line in summary_lines(list(results), verdicts):
        terminalreporter.write_line(line)
    loaded = load_lines(list(results))
    if loaded:
        terminalreporter.write_line("under load (latency from the scheduled send time):")
    for line in loaded:
        terminalreporter.write_line(line)
    for line in accuracy_lines(list(results)):
        terminalreporter.write_line(f"accuracy: {line}")
    for line in verdict_notes(verdicts.values()):
        terminalreporter.write_line(line, yellow=True)
    for line in github_annotations(results, locations):
        terminalreporter.write_line(line)
    if files.results is not None:
        terminalreporter.write_line(f"results: {files.results}")
    if files.report is not None:
        terminalreporter.write_line(f"report: {files.report}")
    if files.saved is not None:
        terminalreporter.write_line(f"baseline saved: {files.saved}")
