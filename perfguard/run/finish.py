"""The files a run leaves: ``results.json``, ``comparison.json``, the archived baseline,
``report.html`` + ``summary.md`` (and the index), and GitHub's job summary.

Only the controller writes them (an xdist worker ships its results instead). Each file
is written on its own: one that cannot be written (a full disk, a directory that went
away) is one line in ``RunFiles.failed`` (the path, the error, the fix) and a failed
run, while the others are still written and the terminal summary still printed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from perfguard.baseline.read import pooled_run
from perfguard.core.errors import PerfguardError
from perfguard.core.results import CommitInfo, Environment, RunResult, ScenarioResult
from perfguard.core.resultsio import results_path, write_results
from perfguard.judge.abside import base_results
from perfguard.judge.changes import archive_changes
from perfguard.judge.gatekeeper import Gatekeeper, GateSettings
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.report import render_markdown, report_files, run_report_dir
from perfguard.report.comparison import comparison_path, write_comparison
from perfguard.report.github import in_github_actions, write_step_summary
from perfguard.report.model import ReportInput

#: The folder of a run's Chrome traces of profiled cells, in the run's report folder.
TRACES_DIR = "traces"
#: Added to the trace's name of the base side of a same-run A/B cell.
BASE_TRACE_SUFFIX = "-base"

#: pytest's exit status for a run whose ``--perfguard-save`` was refused (tests failed).
SAVE_REFUSED_EXIT = 1
#: pytest's exit status for a run some of whose files could not be written.
WRITE_FAILED_EXIT = 1

T = TypeVar("T")


@dataclass
class RunFiles:
    """What was written so far (the terminal summary names each), and what was not."""

    results: Path | None = None
    saved: Path | None = None
    report: Path | None = None
    # One line per file that could not be written: its path, the error and the fix.
    failed: list[str] = field(default_factory=list)

    def attempt(self, what: str, path: Path, write: Callable[[], T]) -> T | None:
        """``write()`` (which writes ``path``), or None with a line in ``failed`` when the
        file system (or the archive, for a baseline) refused it."""
        try:
            return write()
        except OSError as exc:
            self.failed.append(
                f"perfguard: could not write {what} {path}: "
                f"{exc.strerror or type(exc).__name__}. Fix: make {path.parent} a writable "
                "directory with free space (--perfguard-report-dir and "
                "--perfguard-baseline-dir choose where files go), then run again"
            )
        except PerfguardError as exc:
            self.failed.append(f"perfguard: could not write {what} {path}: {exc}")
        return None


def run_dir(report_dir: Path, commit: CommitInfo, mode: str) -> Path:
    """The run's report folder (``<commit12>``, ``<commit12>-ab``): results.json's."""
    return results_path(report_dir, commit, mode).parent


def trace_paths(run_folder: Path, scenario_id: str) -> tuple[Path, Path]:
    """Where a profiled cell's Chrome trace goes, and its A/B base side's:
    ``traces/<readable name>-<hash>.json`` and ``traces/<readable name>-<hash>-base.json``.

    The readable name is the id made file-safe and cut short, so two ids can share it
    (``m-1`` and ``m[1]``; ``x/s.yaml`` and ``x-s.yaml``; a long common start; a case
    that differs only in case); the hash is of the whole id, so two cells never share a
    file. A cell's own name always ends in the hash's hex digits and a base side's in
    ``BASE_TRACE_SUFFIX``, which is not hex, so neither is the other cell's.
    """
    digest = hashlib.sha256(scenario_id.encode("utf-8", "surrogatepass")).hexdigest()
    readable = _UNSAFE.sub("-", scenario_id).strip("-.")[:_NAME_CHARS].rstrip("-.") or "cell"
    name = f"{readable}-{digest[:_HASH_CHARS]}"
    folder = run_folder / TRACES_DIR
    return folder / f"{name}.json", folder / f"{name}{BASE_TRACE_SUFFIX}.json"


# What the report links as a trace (report.profile): letters, digits, ``_ . -``, no ``..``.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+|\.\.+")
# The readable part stays well under a file name's 255 bytes with the hash and suffix.
_NAME_CHARS = 160
# 64 bits of the id's sha256: no two cells of a run share them by chance.
_HASH_CHARS = 16


@dataclass(frozen=True)
class BaseSide:
    """What a run was compared with: ``choice`` is comparison.json's ``baseline``; the
    rest is what the report shows beside the current figures (``info``: how the base
    was chosen; ``results``: its figures per cell; its environment; each cell's stored
    history on this fingerprint)."""

    choice: Mapping[str, Any]
    info: Mapping[str, Any]
    results: Mapping[str, ScenarioResult]
    environment: Environment | None = None
    history: Mapping[str, Sequence[tuple[str, ScenarioResult]]] = field(default_factory=dict)


def base_side(
    gatekeeper: Gatekeeper,
    verdicts: Mapping[str, ScenarioVerdict],
    run: RunResult,
    *,
    ab: bool = False,
    ab_base: tuple[str | None, str] | None = None,
) -> BaseSide:
    """The base side of ``run``: the archived baseline ``gatekeeper`` chose, or for a
    same-run A/B run (``ab``) the base revision's figures of this run, over the archived
    baseline's for the cells A/B judged against it (an SLO search, a cell under load on
    one side only); ``ab_base`` is that base's (commit, how it was chosen) when known."""
    choice = gatekeeper.choice
    results = {r.id: r for r in run.scenarios}
    baseline: dict[str, ScenarioResult] = {}
    if choice.baseline is not None:
        baseline = {r.id: r for r in pooled_run(choice.baseline).scenarios}
    if ab:
        archived = {sid for sid, v in verdicts.items() if v.mode != "ab" and sid in baseline}
        baseline = {
            **{sid: baseline[sid] for sid in archived},
            **base_results(verdicts, results),
        }
    info = choice.to_dict()
    if ab_base is not None:
        info = {**info, "commit": ab_base[0], "how": ab_base[1]}
    return BaseSide(
        choice=choice.to_dict(),
        info=info,
        results=baseline,
        environment=choice.baseline.launches[-1].environment if choice.baseline else None,
        history={sid: gatekeeper.history_results(sid) for sid in results},
    )


def write_run_files(
    run: RunResult,
    verdicts: Mapping[str, ScenarioVerdict],
    *,
    report_dir: Path,
    judging: GateSettings,
    gatekeeper: Gatekeeper,
    base: BaseSide,
    files: RunFiles,
    exit_status: int | None = None,
    save_withheld: str | None = None,
) -> int | None:
    """Write every file of the run, in order, recording each path in ``files`` as it lands.

    ``exit_status`` is pytest's: comparison.json keeps it, so the report index says how
    the run ended, and the report's outcome agrees with it. A refused ``--perfguard-save``
    fails the run (the CI baseline job must not pass leaving the old baseline in
    place), so it is tried first and the exit status the files record is returned. So
    does a file that could not be written (``files.failed``); the others still are.
    ``gatekeeper`` saves the baseline (``judging.save``); ``base`` is what the run was
    compared with. ``save_withheld``: why the save must not happen (the session stopped
    before every cell ran, untracked files lie among the suites and models); a save
    is then refused too, as such a baseline would pass for its commit's whole.
    """
    target = results_path(report_dir, run.commit, run.mode)
    files.results = files.attempt("the results", target, lambda: write_results(run, report_dir))
    if judging.save and save_withheld is not None:
        exit_status = exit_status or SAVE_REFUSED_EXIT
    elif judging.save:
        files.saved = files.attempt(
            "the baseline of HEAD",
            gatekeeper.save_target(run),
            lambda: gatekeeper.save(run),
        )
        if gatekeeper.save_refused and not exit_status:
            exit_status = SAVE_REFUSED_EXIT
    if files.failed and not exit_status:
        exit_status = WRITE_FAILED_EXIT
    comparison = comparison_path(target)
    files.attempt(
        "the comparison",
        comparison,
        lambda: write_comparison(
            comparison,
            baseline=base.choice,
            gate=judging.gate,
            verdicts=verdicts.values(),
            exit_status=exit_status,
        ),
    )
    if files.failed and not exit_status:
        exit_status = WRITE_FAILED_EXIT
    report = ReportInput(
        run=run,
        verdicts=tuple(verdicts.values()),
        baseline=base.results,
        baseline_info=base.info,
        baseline_environment=base.environment,
        history=base.history,
        gate=judging.gate,
        exit_status=exit_status,
        changes=archive_changes(base.history, run.commit.sha),
    )
    files.report = _write_report(report, report_dir, files)
    if files.failed and not exit_status:
        exit_status = WRITE_FAILED_EXIT
    return exit_status


def _write_report(report: ReportInput, root: Path, files: RunFiles) -> Path | None:
    """report.html + summary.md beside results.json, the index; the job summary on GitHub.

    Returns report.html's path, or None when it could not be written (``files.failed``).
    """
    # Each file on its own: summary.md is worth having when report.html cannot be written.
    html, *others = report_files(report, run_report_dir(report, root), index_of=root)
    written = files.attempt(html.what, html.path, html.write)
    for file in others:
        files.attempt(file.what, file.path, file.write)
    if in_github_actions():
        files.attempt(
            "the GitHub job summary",
            Path(os.environ.get("GITHUB_STEP_SUMMARY") or "$GITHUB_STEP_SUMMARY"),
            lambda: write_step_summary(render_markdown(report)),
        )
    return written
