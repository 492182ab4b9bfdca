"""One run at a time per report folder, and no report left looking current by a run
that died (perfguard.report.runfolder; the plugin claims the folder at session start).
Threads that model code leaves do not hang the session (perfguard.plugin.threads)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from perfguard.plugin.threads import ThreadWatch
from perfguard.report.runfolder import (
    HOLDER_FILENAME,
    RUN_FILES,
    TRACES_DIR,
    RunFolder,
    RunFolderBusy,
)

# -- the claim, on its own --------------------------------------------------------
from tests.helpers.git_repos import run_git
from tests.helpers.suites import FAST_DEFAULTS, write_suite


def test_a_claimed_folder_refuses_a_second_claim_naming_the_holder(tmp_path: Path) -> None:
    folder = tmp_path / "reports" / "abc"
    first = RunFolder.claim(folder)
    with pytest.raises(RunFolderBusy) as info:
        RunFolder.claim(folder)
    message = str(info.value)
    assert f"process {os.getpid()}" in message and "--perfguard-report-dir" in message
    first.release()
    assert not (folder / HOLDER_FILENAME).exists()
    RunFolder.claim(folder).release()  # free again once released


def test_clear_removes_the_previous_runs_files_and_nothing_else(tmp_path: Path) -> None:
    folder = tmp_path / "reports" / "abc"
    folder.mkdir(parents=True)
    for name in (*RUN_FILES, "shard.json", "notes.txt"):
        (folder / name).write_text("old\n")
    (folder / TRACES_DIR).mkdir()
    (folder / TRACES_DIR / "m-0123.json").write_text("{}")
    claim = RunFolder.claim(folder, also=("shard.json",))
    claim.clear()
    left = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    assert left == ["notes.txt"]
    claim.release()


def test_a_leftover_thread_is_found_with_its_cell_and_a_pool_worker_is_not() -> None:
    watch = ThreadWatch()
    stop = threading.Event()
    with watch.cell("s.yaml::m[torch]"):
        left = threading.Thread(target=stop.wait, name="model-poller")
        left.start()
        done = threading.Thread(target=lambda: None)
        done.start()
        done.join()
    try:
        (found,) = watch.still_running()
        assert (found.name, found.cell) == ("model-poller", "s.yaml::m[torch]")
        assert any(
            "'model-poller', started by s.yaml::m[torch]" in line for line in watch.summary_lines()
        )
    finally:
        stop.set()
        left.join()
    assert watch.still_running() == [] and watch.summary_lines() == []
    assert watch.exit_without_them(0) is False  # nothing left: a normal exit


# -- end to end ---------------------------------------------------------------------

MODELS = """\
import os
import threading
import time

import torch
from torch import nn


def mlp():
    torch.manual_seed(0)
    return nn.Linear(8, 4).eval()


def leaves_a_thread():
    threading.Thread(target=time.sleep, args=(3600,), name="weights-prefetch").start()
    return mlp()


def dies():
    os._exit(3)
"""


def _suite(pytester: pytest.Pytester, factory: str) -> None:
    (pytester.path / "suites").mkdir(exist_ok=True)
    (pytester.path / "suites" / "models.py").write_text(MODELS)
    write_suite(
        pytester,
        "s",
        FAST_DEFAULTS + f"models:\n  m:\n    factory: models:{factory}\n    inputs:\n"
        "      x: {shape: [1, 8]}\nscenarios:\n  - name: m\n    model: m\n",
        models=False,
    )


def _repo(pytester: pytest.Pytester) -> str:
    run_git(pytester.path, "init", "-q")
    run_git(pytester.path, "add", "-A")
    run_git(pytester.path, "commit", "-qm", "suite")
    return run_git(pytester.path, "rev-parse", "HEAD")


def test_a_thread_left_by_model_code_is_named_and_does_not_hang_the_session(
    suite_writer: pytest.Pytester,
) -> None:
    _suite(suite_writer, "leaves_a_thread")
    # A failing test beside it: the exit status pytest chose is the one the process ends with.
    suite_writer.makepyfile(test_other="def test_fails():\n    assert False\n")
    # Before: the session printed its summary and then waited for the thread for an hour.
    result = suite_writer.runpytest_subprocess("--perfguard", timeout=300)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "model code left 1 thread(s) running" in out
    assert "thread 'weights-prefetch', started by suites/s.yaml::m" in out
    assert "Fix: stop and join the thread" in out


def test_a_second_run_on_the_same_commit_is_refused_while_one_runs(
    suite_writer: pytest.Pytester,
) -> None:
    _suite(suite_writer, "mlp")
    sha = _repo(suite_writer)
    holder = RunFolder.claim(suite_writer.path / "reports" / sha[:12])
    try:
        result = suite_writer.runpytest("--perfguard")
    finally:
        holder.release()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*another run is writing *{sha[:12]} (process {os.getpid()} on *Fix: wait for*"]
    )
    assert not (suite_writer.path / "reports" / sha[:12] / "results.json").exists()
    suite_writer.runpytest("--perfguard").assert_outcomes(passed=1)  # free once released


def test_a_run_that_dies_while_measuring_leaves_no_report_that_looks_current(
    suite_writer: pytest.Pytester,
) -> None:
    _suite(suite_writer, "mlp")
    sha = _repo(suite_writer)
    suite_writer.runpytest("--perfguard").assert_outcomes(passed=1)
    folder = suite_writer.path / "reports" / sha[:12]
    assert (folder / "report.html").is_file()
    # The same commit again (a dirty tree keeps the sha): model code ends the process.
    models = suite_writer.path / "suites" / "s.yaml"
    models.write_text(models.read_text().replace("models:mlp", "models:dies"))
    result = suite_writer.runpytest_subprocess("--perfguard", timeout=300)
    assert result.ret == 3
    # Before: the first run's results.json, comparison.json and report.html stayed.
    assert not any((folder / name).exists() for name in RUN_FILES)
    index = (suite_writer.path / "reports" / "index.html").read_text()
    assert f"{sha[:12]}/report.html" not in index
