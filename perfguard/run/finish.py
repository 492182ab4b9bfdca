"""A run's finish, once for ``pytest --perfguard`` and ``perfguard merge``.

After the last cell: the verdicts of the base's cells this run did not collect
(``missing_verdicts``), a run made dirty by untracked files among its suites and
models (``untracked_note``), whether a save must be withheld (``save_withheld``), what
the run was compared with (``base_side``), then every file a run leaves
(``finish_run``): ``results.json``, the archived baseline, ``comparison.json``,
``report.html`` + ``summary.md`` (and the index), GitHub's job summary, and any file of
the run mode's own (a shard's plan). It returns the run's exit status, its outcome
(``perfguard.judge.outcome``, the one rule every output follows) and the lines the
terminal shows about the files and the save (``Finished.lines``), which the plugin
and the merge both print.

Only the controller writes files (an xdist worker ships its results instead). Each
file is written on its own: one that cannot be written (a full disk, a directory that
went away) is one line in ``RunFiles.failed`` (the path, the error, the fix) and a
failed run, while the others are still written and the terminal summary still printed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from perfguard.ab.abrun import ABRun
from perfguard.baseline.git import untracked_files
from perfguard.baseline.read import pooled_run
from perfguard.baseline.store import Baseline
from perfguard.core.errors import GitError, PerfguardError
from perfguard.core.scenario import Scenario
from perfguard.judge.abside import base_results
from perfguard.judge.changes import archive_changes
from perfguard.judge.gatekeeper import Gatekeeper, GateSettings
from perfguard.judge.outcome import RunOutcome, run_outcome
from perfguard.judge.save import SAVE_REFUSED_FIX, untracked_refusal
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.models.factory import code_paths
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult
from perfguard.records.resultsfile import results_path, write_results
from perfguard.report import render_markdown, report_files, run_report_dir
from perfguard.report.comparison import comparison_path, write_comparison
from perfguard.report.github import in_github_actions, write_step_summary
from perfguard.report.model import ReportInput
from perfguard.suite.files import SUITE_SUFFIXES
from perfguard.suite.loader import load_suite

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

    def lines(self) -> list[tuple[str, bool]]:
        """(line, is a failure): each file written, then each that could not be."""
        named = (("results", self.results), ("report", self.report))
        lines = [(f"{label}: {path}", False) for label, path in named if path is not None]
        if self.saved is not None:
            lines.append((f"baseline saved: {self.saved}", False))
        return lines + [(line, True) for line in self.failed]


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
    choice: Mapping[str, Any],
    baseline: Baseline | None,
    run: RunResult,
    verdicts: Mapping[str, ScenarioVerdict],
    *,
    history: Mapping[str, Sequence[tuple[str, ScenarioResult]]],
    ab_base: tuple[str | None, str] | None = None,
) -> BaseSide:
    """The base side of ``run``: ``choice`` is how its archived ``baseline`` was chosen
    (comparison.json's ``baseline``; None: no baseline, or not at hand). For a same-run
    A/B run (``ab_base``: the base revision's commit and how it was chosen) it is the
    base revision's figures of this run, over the archived baseline's for the cells A/B
    judged against it (an SLO search, a cell under load on one side only)."""
    results = {r.id: r for r in run.scenarios}
    archived: dict[str, ScenarioResult] = {}
    environment = None
    info = dict(choice)
    if baseline is not None:
        pooled = pooled_run(baseline)
        archived = {r.id: r for r in pooled.scenarios}
        environment = pooled.environment
        if baseline.path is not None:  # where this machine read it
            info["path"] = str(baseline.path)
    if ab_base is not None:
        kept = {sid for sid, v in verdicts.items() if v.mode != "ab" and sid in archived}
        archived = {
            **{sid: archived[sid] for sid in kept},
            **base_results(verdicts, results),
        }
        info = {**info, "commit": ab_base[0], "how": ab_base[1]}
    return BaseSide(
        choice=choice, info=info, results=archived, environment=environment, history=history
    )


def missing_verdicts(
    gatekeeper: Gatekeeper,
    ab: ABRun | None,
    suites: Mapping[Path, tuple[Scenario, ...]],
    collected: set[str],
) -> dict[str, ScenarioVerdict]:
    """``missing`` verdicts for the base's cells of the collected suites this run did
    not collect (``collected``: the ids collected): the base revision's in a same-run
    A/B run (``suites``: the collected suites' cells), else the archived baseline's."""
    if ab is not None:
        return dict(ab.missing_verdicts(suites, collected))
    return gatekeeper.archive.missing({sid.split("::", 1)[0] for sid in collected}, collected)


def untracked_note(
    commit: CommitInfo,
    rootdir: Path,
    results: Iterable[ScenarioResult],
    *,
    exclude: Sequence[Path],
) -> tuple[CommitInfo, str | None]:
    """A run that saw untracked files where its suites and models come from is a dirty
    run (so ``perfguard merge --save`` refuses its shard too), and a save of it is
    withheld with the files named: the commit as recorded, and that refusal (None when
    there are none). ``exclude``: the run's own folders (reports, cache, archive)."""
    if commit.sha is None:
        return commit, None
    untracked: tuple[str, ...]
    try:
        untracked = untracked_files(rootdir, _code_paths(rootdir, results), exclude=exclude)
    except GitError as exc:  # unknown counts as dirty, as in commit_info
        problem: str | None = f"could not list the untracked files: {exc.problem}. Fix: {exc.fix}"
        untracked = ()
    else:
        problem = untracked_refusal(untracked, commit.sha)
    if problem is None:
        return commit, None
    shown = ", ".join(untracked[:3]) + (" ..." if len(untracked) > 3 else "")
    said = f"untracked files: {shown}" if untracked else "untracked files unknown"
    note = "; ".join(n for n in (commit.note, said) if n)
    return replace(commit, dirty=True, note=note), problem


def _code_paths(rootdir: Path, results: Iterable[ScenarioResult]) -> list[Path]:
    """The folders and files the measured cells' suites and models come from (the
    suites read again here: under xdist the controller collected none)."""
    paths: list[Path] = []
    for name in sorted({r.suite for r in results}):
        path = rootdir / name
        paths.append(path)
        if path.suffix not in SUITE_SUFFIXES:
            continue  # a pytest-benchmark test file: its own path
        try:
            suite = load_suite(path)
        except (PerfguardError, OSError):  # the run already said what is wrong
            continue
        # By name: a model's kwargs may hold a mapping, which makes it unhashable.
        for model in {sc.model.name: sc.model for sc in suite.scenarios}.values():
            paths.extend(code_paths(model))
    return paths


def save_withheld(
    judging: GateSettings, *, stopped: str | None, untracked: str | None
) -> str | None:
    """Why ``--perfguard-save`` must save nothing now that every cell has run, with the
    fix; None to save (or when not saving). ``stopped``: how the session stopped before
    running every cell; ``untracked``: ``untracked_note``'s refusal."""
    if not judging.save:
        return None
    if stopped is not None:
        return (
            f"{stopped}; a baseline saved now would lack the cells that did not run. "
            "Fix: run the whole suite to its end (without -x or --maxfail) with "
            "--perfguard-save"
        )
    return None if judging.allow_dirty else untracked


@dataclass(frozen=True)
class Finished:
    """A finished run: the exit status its files record (0 when nothing failed), its
    outcome, the files, and what became of ``--perfguard-save``."""

    status: int
    outcome: RunOutcome
    files: RunFiles
    save_withheld: str | None = None
    save_refused: Mapping[str, str] = field(default_factory=dict)
    save_marked: Mapping[str, str] = field(default_factory=dict)

    def save_lines(self) -> list[tuple[str, bool]]:
        """(line, is a failure): why the save saved nothing, or which cells it marked."""
        return save_lines(self.save_withheld, self.save_refused, self.save_marked)


def save_lines(
    withheld: str | None,
    refused: Mapping[str, str],
    marked: Mapping[str, str],
    *,
    fix: str = SAVE_REFUSED_FIX,
) -> list[tuple[str, bool]]:
    """(line, is a failure): why a save saved nothing (``withheld``, or the ``refused``
    cells and why, then ``fix``), or which cells it ``marked``; for the plugin, the
    merge and ``perfguard baseline save`` alike."""
    lines: list[tuple[str, bool]] = []
    if withheld is not None:
        lines.append((f"perfguard: baseline NOT saved: {withheld}", True))
    for sid, why in refused.items():
        lines.append((f"perfguard: baseline NOT saved: {sid} is inconclusive: {why}", True))
    if refused:
        lines.append((f"perfguard: Fix: {fix}", True))
    for sid, why in marked.items():
        lines.append((f"perfguard: baseline saved with {sid} marked inconclusive: {why}", False))
    return lines


def finish_run(
    run: RunResult,
    verdicts: Mapping[str, ScenarioVerdict],
    *,
    report_dir: Path,
    judging: GateSettings,
    gatekeeper: Gatekeeper,
    base: BaseSide,
    exit_status: int,
    save_withheld: str | None = None,
    files: RunFiles | None = None,
    also: Sequence[tuple[str, Path, Callable[[], object]]] = (),
) -> Finished:
    """Write every file of ``run``, in order (then ``also``'s: what, path, write, a
    run mode's own files), recording each path in ``files`` as it lands.

    ``exit_status`` is pytest's: comparison.json keeps it, so the report index says how
    the run ended, and the report's outcome agrees with it. A refused ``--perfguard-save``
    fails the run (the CI baseline job must not pass leaving the old baseline in
    place), so it is tried first and the exit status the files record is ``Finished.status``. So
    does a file that could not be written (``files.failed``); the others still are.
    ``gatekeeper`` saves the baseline (``judging.save``); ``base`` is what the run was
    compared with. ``save_withheld``: why the save must not happen (the session stopped
    before every cell ran, untracked files lie among the suites and models); a save
    is then refused too, as such a baseline would pass for its commit's whole. The run's
    outcome is judged with the exit status the files record.
    """
    status: int = exit_status
    files = files if files is not None else RunFiles()
    target = results_path(report_dir, run.commit, run.mode)
    files.results = files.attempt("the results", target, lambda: write_results(run, report_dir))
    if judging.save and save_withheld is not None:
        status = status or SAVE_REFUSED_EXIT
    elif judging.save:
        files.saved = files.attempt(
            "the baseline of HEAD",
            gatekeeper.saver.save_target(run),
            lambda: gatekeeper.save(run),
        )
        if gatekeeper.saver.save_refused and not status:
            status = SAVE_REFUSED_EXIT
    if files.failed and not status:
        status = WRITE_FAILED_EXIT
    comparison = comparison_path(target)
    files.attempt(
        "the comparison",
        comparison,
        lambda: write_comparison(
            comparison,
            baseline=base.choice,
            gate=judging.gate,
            verdicts=verdicts.values(),
            exit_status=status,
        ),
    )
    if files.failed and not status:
        status = WRITE_FAILED_EXIT
    report = ReportInput(
        run=run,
        verdicts=tuple(verdicts.values()),
        baseline=base.results,
        baseline_info=base.info,
        baseline_environment=base.environment,
        history=base.history,
        gate=judging.gate,
        exit_status=status,
        changes=archive_changes(base.history, run.commit.sha),
        contention_limit=judging.contention_limit,
    )
    files.report = _write_report(report, report_dir, files)
    if files.failed and not status:
        status = WRITE_FAILED_EXIT
    for what, path, write in also:
        files.attempt(what, path, write)
    if files.failed and not status:
        status = WRITE_FAILED_EXIT
    return Finished(
        status=status,
        outcome=run_outcome(
            run.scenarios, verdicts.values(), exit_status=status, gate=judging.gate
        ),
        files=files,
        save_withheld=save_withheld if judging.save else None,
        save_refused=dict(gatekeeper.saver.save_refused),
        save_marked=dict(gatekeeper.saver.save_marked),
    )


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
