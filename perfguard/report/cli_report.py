"""``perfguard report RESULTS [--baseline FILE] [--out DIR]``: render from stored files.

Nothing is measured: the report is rendered from a ``results.json``, the
``comparison.json`` beside it (verdicts and how the baseline was chosen) and,
with ``--baseline``, a baseline to compare against afresh (a ``results.json``
or a baseline archive file), in which case the verdicts are recomputed as
``perfguard compare`` computes them (``perfguard.judge.stored``: the suites' gates).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfguard.baseline.read import pooled_run, read_baseline_file
from perfguard.baseline.store import DEFAULT_ROOT
from perfguard.core.errors import Location, ResultsError
from perfguard.core.paths import under_root
from perfguard.core.policy import CONFIDENCE, CONTENTION_LIMIT, NORMALISE
from perfguard.judge.abside import base_results
from perfguard.judge.compare import environment_diff
from perfguard.judge.stored import judge_runs
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import RunResult, ScenarioResult
from perfguard.records.resultsfile import read_results, run_dir_name
from perfguard.report import write_report_files
from perfguard.report.comparison import comparison_path, read_comparison
from perfguard.report.index import render_index
from perfguard.report.model import ReportInput


def _load_baseline(path: Path) -> tuple[RunResult, dict[str, ScenarioResult], str]:
    """The baseline as one pooled RunResult, its scenarios by id, and a commit sha."""
    run = pooled_run(read_baseline_file(path))
    return run, {s.id: s for s in run.scenarios}, run.commit.sha or ""


def _run_folders(results: Path, run: RunResult) -> list[Path]:
    """The folders of the run's own files: its folder and, when that is the usual
    ``<report_dir>/<commit12>``, the report directory (an earlier run's results.json
    given to ``--perfguard-baseline``)."""
    folder = results.parent
    if folder.name == run_dir_name(run.commit, run.mode):
        return [folder, folder.parent]
    return [folder]


def _confined(stored: Path, comparison: Path, folders: list[Path], baseline_dir: Path) -> Path:
    """``stored`` (comparison.json's ``baseline.path``) when it lies under the baseline
    archive in use or the run's folders, links followed; ResultsError otherwise.

    comparison.json travels as a CI artifact and may name any file; following it
    anywhere would let a hand-made one make the report read a file of the user's.
    """
    places = [baseline_dir, *folders]
    if any(under_root(stored, place) is not None for place in places):
        return stored
    named = stored.resolve()
    resolved = "" if named == stored else f" (it resolves to {named})"
    raise ResultsError(
        f"its baseline path {str(stored)!r}{resolved} lies outside the baseline archive "
        "and the run's folders; it was not read",
        expected="a baseline file under " + " or ".join(str(p) for p in places),
        fix="name the archive it is in with `perfguard report --baseline-dir DIR`, or "
        "compare with that file afresh with `--baseline FILE`",
        location=Location(comparison),
    )


def report_command(
    results: Path,
    baseline: Path | None,
    out_dir: Path | None,
    *,
    baseline_dir: Path = DEFAULT_ROOT,
    rootdir: Path | None = None,
    confidence: float = CONFIDENCE,
    normalise: bool = NORMALISE,
    contention_limit: float = CONTENTION_LIMIT,
) -> Path:
    """Render ``report.html``/``summary.md`` for ``results``; return the HTML path.

    Files go to ``out_dir``, else beside ``results``; when that directory is the
    usual ``<report_dir>/<commit12>``, ``<report_dir>/index.html`` is refreshed.
    The baseline ``comparison.json`` names is read only from under ``baseline_dir``
    (the archive in use) or the run's folders.

    Raises ResultsError (naming the file and the fix) when an input is missing
    or corrupt.
    """
    results = Path(results)
    run = read_results(results)
    verdicts: tuple[ScenarioVerdict, ...] = ()
    info: dict[str, Any] = {}
    gate = True
    exit_status: int | None = None
    comparison = comparison_path(results)
    if comparison.is_file():
        stored_comparison = read_comparison(comparison)
        verdicts, info, gate, exit_status = (
            stored_comparison.verdicts,
            stored_comparison.baseline,
            stored_comparison.gate,
            stored_comparison.exit_status,
        )
    base_by_id: dict[str, ScenarioResult] = {}
    base_env = None
    stored = info.get("path")
    if baseline is None and isinstance(stored, str) and Path(stored).is_file():
        # The stored comparison's baseline, for the overlaid distributions only.
        where = _confined(Path(stored), comparison, _run_folders(results, run), baseline_dir)
        try:
            base_run, base_by_id, _sha = _load_baseline(where)
            base_env = base_run.environment
        except ResultsError:
            base_by_id = {}
    if baseline is None:
        # A same-run A/B run's base side is in its verdicts (the base revision's samples
        # and, under load, its own figures), as the run's own report showed it.
        current = {r.id: r for r in run.scenarios}
        base_by_id.update(base_results({v.scenario_id: v for v in verdicts}, current))
    if baseline is not None:
        baseline = Path(baseline)
        base_run, base_by_id, sha = _load_baseline(baseline)
        base_env = base_run.environment
        verdicts = tuple(
            judge_runs(
                run,
                base_run,
                rootdir=rootdir if rootdir is not None else Path.cwd(),
                confidence=confidence,
                normalise=normalise,
                contention_limit=contention_limit,
                names=(f"results {results}", f"baseline {baseline}"),
            )
        )
        exit_status = None  # the run's own exit status judged other verdicts
        diff = environment_diff(base_env, run.environment)
        info = {
            "commit": sha or None,
            "how": f"file {baseline}, as asked (verdicts recomputed with the suites' gates)",
            "path": str(baseline),
            "env_diff": {k: list(v) for k, v in diff.items()},
        }
    inp = ReportInput(
        run=run,
        verdicts=verdicts,
        baseline=base_by_id,
        baseline_info=info,
        baseline_environment=base_env,
        gate=gate,
        exit_status=exit_status,
        contention_limit=contention_limit,
    )
    dest = Path(out_dir) if out_dir is not None else results.parent
    html_path = write_report_files(inp, dest)
    if dest.name == run_dir_name(run.commit, run.mode):  # the usual reports/<commit12>/
        render_index(dest.parent)
    return html_path
