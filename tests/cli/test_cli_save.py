"""``perfguard baseline save``: archiving a run already measured, by ``--perfguard-save``'s
rules, run through ``main()`` on results files written as a run writes them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfguard.baseline.store import INCONCLUSIVE_KEY, DirectoryStore
from perfguard.cli import main
from perfguard.core.atomicio import read_json
from perfguard.records.results import CommitInfo, RunResult
from perfguard.records.resultsfile import write_results
from tests.helpers.results import SHA, run_of, scenario

CALM = "suites/s.yaml::calm"
DRIFT = "suites/s.yaml::drift"


def measured(tmp_path: Path, *, drifting: bool = False, dirty: bool = False) -> Path:
    """A run's results.json under reports/<commit12>/, one cell drifting when asked."""
    cells = [scenario(CALM, seed=1)]
    if drifting:
        cells.append(replace(scenario(DRIFT, seed=2), stable=False, stability_ratio=1.4))
    run = run_of(cells)
    if dirty:
        run = replace(run, commit=CommitInfo(sha=SHA, branch="feature", dirty=True))
    return write_results(run, tmp_path / "reports")


def save(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    status = main(["baseline", "save", *(str(a) for a in argv)])
    out, err = capsys.readouterr()
    return status, out, err


def stored(root: Path, run: RunResult) -> Path:
    return DirectoryStore(root).path_for(run.environment.fingerprint, SHA)


def test_saves_a_measured_run_and_prints_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results, root = measured(tmp_path), tmp_path / "archive"
    status, out, err = save(capsys, results, "--baseline-dir", root)
    target = stored(root, run_of([]))
    assert status == 0, err
    assert out == f"baseline saved: {target}\n" and err == ""
    baseline = DirectoryStore(root).load(run_of([]).environment.fingerprint, SHA)
    assert baseline is not None and baseline.scenario_ids() == [CALM]
    # The same file again would count its samples twice: refused, the archive unchanged.
    status, out, err = save(capsys, results, "--baseline-dir", root)
    assert status == 2 and out == ""
    assert f"{results} (measured " in err and "already a launch of" in err
    again = DirectoryStore(root).load(run_of([]).environment.fingerprint, SHA)
    assert again is not None and len(again.launches) == 1


def test_refuses_an_inconclusive_cell_naming_it_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results, root = measured(tmp_path, drifting=True), tmp_path / "archive"
    status, out, err = save(capsys, results, "--baseline-dir", root)
    assert status == 1 and out == ""
    assert err.splitlines() == [
        f"perfguard: baseline NOT saved: {DRIFT} is inconclusive: the run was unstable "
        "(median of last third / first third = 1.40)",
        "perfguard: Fix: re-run on an idle machine, raise --contention-limit if this machine "
        "is never quieter, or pass --allow-inconclusive to save with those cells marked",
    ]
    assert not stored(root, run_of([])).exists()


def test_allow_inconclusive_saves_with_the_cells_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results, root = measured(tmp_path, drifting=True), tmp_path / "archive"
    status, out, err = save(capsys, results, "--baseline-dir", root, "--allow-inconclusive")
    target = stored(root, run_of([]))
    assert status == 0, err
    assert out.splitlines() == [
        f"baseline saved: {target}",
        f"perfguard: baseline saved with {DRIFT} marked inconclusive: the run was unstable "
        "(median of last third / first third = 1.40)",
    ]
    cells = {c["id"]: c for c in read_json(target)["launches"][0]["scenarios"]}
    assert INCONCLUSIVE_KEY in cells[DRIFT] and INCONCLUSIVE_KEY not in cells[CALM]


def test_refuses_a_dirty_run_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results, root = measured(tmp_path, dirty=True), tmp_path / "archive"
    status, out, err = save(capsys, results, "--baseline-dir", root)
    assert status == 2 and out == ""
    assert err.startswith(f"perfguard: error: {results}: perfguard baseline save refused: ")
    assert "uncommitted changes" in err and "or pass --allow-dirty" in err
    assert not stored(root, run_of([])).exists()
    status, out, err = save(capsys, results, "--baseline-dir", root, "--allow-dirty")
    assert status == 0 and out.startswith("baseline saved: ")


def test_refuses_a_same_run_ab_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = write_results(replace(run_of([scenario(CALM)]), mode="ab"), tmp_path / "reports")
    status, out, err = save(capsys, results, "--baseline-dir", tmp_path / "archive")
    assert status == 2 and out == ""
    assert "same-run A/B" in err and "without --perfguard-ab" in err
    assert not (tmp_path / "archive").exists()
