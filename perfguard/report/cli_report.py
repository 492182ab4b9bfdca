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

from perfguard.ab.run import base_results
from perfguard.baseline.read import pooled_run, read_baseline_file
from perfguard.core.errors import ResultsError
from perfguard.core.policy import CONFIDENCE, CONTENTION_LIMIT, NORMALISE
from perfguard.core.results import RunResult, ScenarioResult
from perfguard.core.resultsio import read_results, run_dir_name
from perfguard.judge.compare import environment_diff
from perfguard.judge.stored import judge_runs
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.report import write_report_files
from perfguard.report.comparison import comparison_path, read_comparison
from perfguard.report.index import render_index
from perfguard.report.model import ReportInput


def _load_baseline(path: Path) -> tuple[RunResult, dict[str, ScenarioResult], str]:
    """The baseline as one pooled RunResult, its scenarios by id, and a commit sha."""
    run = pooled_run(read_baseline_file(path))
    return run, {s.id: s for s in run.scenarios}, run.commit.sha or ""


def report_command(
    results: Path,
    baseline: Path | None,
    out_dir: Path | None,
    *,
    rootdir: Path | None = None,
    confidence: float = CONFIDENCE,
    normalise: bool = NORMALISE,
    contention_limit: float = CONTENTION_LIMIT,
) -> Path:
    """Render ``report.html``/``summary.md`` for ``results``; return the HTML path.

    Files go to ``out_dir``, else beside ``results``; when that directory is the
    usual ``<report_dir>/<commit12>``, ``<report_dir>/index.html`` is refreshed.

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
        try:
            base_run, base_by_id, _sha = _load_baseline(Path(stored))
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
    )
    dest = Path(out_dir) if out_dir is not None else results.parent
    html_path = write_report_files(inp, dest)
    if dest.name == run_dir_name(run.commit, run.mode):  # the usual reports/<commit12>/
        render_index(dest.parent)
    return html_path
