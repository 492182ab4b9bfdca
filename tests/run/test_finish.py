"""A run's finish (``perfguard.run.finish``): the lines the plugin and ``perfguard merge``
both print about the files and the save, and when a save is withheld."""

from __future__ import annotations

from pathlib import Path

from perfguard.judge.gatekeeper import GateSettings
from perfguard.judge.outcome import run_outcome
from perfguard.judge.save import SAVE_REFUSED_FIX
from perfguard.run.finish import Finished, RunFiles, save_withheld


def finished(**over: object) -> Finished:
    return Finished(status=0, outcome=run_outcome((), ()), files=RunFiles(), **over)  # type: ignore[arg-type]


def test_marked_cells_refused_cells_and_a_withheld_save_each_get_their_line() -> None:
    lines = finished(
        save_withheld="the session stopped early",
        save_refused={"s::a": "the run was unstable"},
        save_marked={"s::b": "other processes used 40% of the CPUs"},
    ).save_lines()
    assert lines == [
        ("perfguard: baseline NOT saved: the session stopped early", True),
        ("perfguard: baseline NOT saved: s::a is inconclusive: the run was unstable", True),
        (f"perfguard: Fix: {SAVE_REFUSED_FIX}", True),
        (
            "perfguard: baseline saved with s::b marked inconclusive: other processes used "
            "40% of the CPUs",
            False,
        ),
    ]
    assert finished().save_lines() == []


def test_files_written_are_named_and_those_that_failed_are_failures(tmp_path: Path) -> None:
    files = RunFiles(results=tmp_path / "results.json", saved=tmp_path / "b.json")
    files.attempt("the report", tmp_path / "r.html", lambda: (_ for _ in ()).throw(OSError()))
    lines = files.lines()
    assert lines[:2] == [
        (f"results: {tmp_path / 'results.json'}", False),
        (f"baseline saved: {tmp_path / 'b.json'}", False),
    ]
    assert len(lines) == 3 and lines[2][1] and "could not write the report" in lines[2][0]


def test_a_save_is_withheld_when_stopped_early_or_untracked_unless_allowed() -> None:
    save = GateSettings(save=True)
    assert save_withheld(GateSettings(), stopped="stopped", untracked="u") is None
    assert "stopped; a baseline saved now" in str(
        save_withheld(save, stopped="stopped", untracked=None)
    )
    assert save_withheld(save, stopped=None, untracked="untracked files") == "untracked files"
    allowed = GateSettings(save=True, allow_dirty=True)
    assert save_withheld(allowed, stopped=None, untracked="untracked files") is None
