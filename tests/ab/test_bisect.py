"""``perfguard bisect``: git bisect run over a commit range, a same-run A/B per midpoint.

The end-to-end tests build a 16-commit repository in tmp_path whose model sleeps for
its service time; one commit makes the sleep twenty times longer (a real slowdown,
which the paired A/B must catch even when a busy machine fattens both sides' tails),
under a wide +100% gate, so that unchanged midpoints stop at the first look. No
figure of this machine is asserted.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfguard.ab.bisect import (
    EXIT_ABORT,
    STEP_EXIT,
    BisectConfig,
    StepOutput,
    find_cell,
    judge_step,
    parse_cell,
    run_step,
    wait_for_pytest,
)
from perfguard.cli import main
from perfguard.core.errors import PerfguardError
from perfguard.judge.verdict import ABDetail, Decision, DecisionKind, ScenarioVerdict
from tests.helpers.ab_repo import MODEL  # the sleeping model: its MS is what a commit plants
from tests.helpers.git_repos import run_git

SUITE = """\
defaults:
  warmup: {iterations: 5, seconds: 0}
  measure: {iterations: 50, seconds: 0}
  threads: 1
  gate: {p95: "+100%"}
models:
  sleepy:
    factory: bisectmodel:build
    inputs:
      x: {shape: [1, 8], dtype: float32}
scenarios:
  - name: sleepy
    model: sleepy
"""

CELL = "suites/s.yaml::sleepy"
FAST_MS, SLOW_MS = 2.0, 40.0
PLANTED = 11  # the commit (1-based) that slows the model down


def commit(repo: Path, message: str, *, ms: float, model: str = MODEL, suite: str = SUITE) -> str:
    (repo / "suites").mkdir(exist_ok=True)
    (repo / "suites" / "bisectmodel.py").write_text(model.replace("MS", repr(ms)))
    (repo / "suites" / "s.yaml").write_text(suite)
    with (repo / "NOTES").open("a") as notes:
        notes.write(f"{message}\n")  # every commit changes something
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", message)
    return run_git(repo, "rev-parse", "HEAD")


def new_repo(path: Path) -> Path:
    path.mkdir()
    run_git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text("reports/\n.perfguard/\n__pycache__/\n")
    (path / "pytest.ini").write_text("[pytest]\n")
    return path


def history(path: Path, broken: dict[int, dict[str, str]] | None = None) -> list[str]:
    """16 commits, the PLANTED-th slow; ``broken`` replaces files at some commits."""
    repo = new_repo(path)
    shas = []
    for n in range(1, 17):
        ms = SLOW_MS if n >= PLANTED else FAST_MS
        kwargs = (broken or {}).get(n, {})
        shas.append(commit(repo, f"commit {n}" + (" (broken)" if kwargs else ""), ms=ms, **kwargs))
    return shas


def snapshot(repo: Path) -> dict[str, object]:
    """Everything of the user's checkout that bisect must leave as it was."""
    files = {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return {
        "head": run_git(repo, "rev-parse", "HEAD"),
        "branch": run_git(repo, "symbolic-ref", "HEAD"),
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
        "status": run_git(repo, "status", "--porcelain", "--untracked-files=all"),
        "files": files,
        "worktrees": run_git(repo, "worktree", "list", "--porcelain"),
        "refs": run_git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "bisecting": (repo / ".git" / "BISECT_LOG").exists(),
    }


def run_bisect(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    monkeypatch.chdir(repo)
    status = main(["bisect", *args])
    out, err = capsys.readouterr()
    return status, out, err


def steps(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("perfguard bisect: step ")]


# --------------------------------------------------------------------------- end to end


def test_bisect_finds_the_planted_commit_and_leaves_the_checkout_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    shas = history(repo)
    # The user's own uncommitted work, staged and not: bisect must not touch either.
    (repo / "NOTES").write_text("an unstaged edit\n")
    (repo / "staged.txt").write_text("staged\n")
    run_git(repo, "add", "staged.txt")
    (repo / "untracked.txt").write_text("untracked\n")
    before = snapshot(repo)

    status, out, err = run_bisect(
        repo, monkeypatch, capsys, shas[0], shas[-1], "--cell", CELL, "--allow-dirty"
    )

    assert status == 0, out + err
    planted = shas[PLANTED - 1]
    assert f"perfguard bisect: first bad commit: {planted} 'commit {PLANTED}'" in out
    found = out.split("first bad commit:", 1)[1]
    assert "regression: P95 latency +" in found and "vs base" in found
    done = steps(out)
    assert 1 <= len(done) <= 5, out  # at most 5 A/B runs for 15 candidate commits
    assert all(" skip (" not in line for line in done), out
    # Each step names its commit, its mark and the A/B figures behind it.
    for line in done:
        assert ("': bad (regression: P95" in line) or ("': good (" in line and "P95" in line)
    marks = {line.split()[3]: line for line in done}  # short sha -> line
    for n, sha in enumerate(shas, start=1):
        if sha[:12] in marks:
            assert ("bad (" in marks[sha[:12]]) == (n >= PLANTED), marks[sha[:12]]
    assert f"{len(done)} A/B runs, 0 skipped" in out
    assert snapshot(repo) == before


def test_a_midpoint_that_cannot_be_measured_is_skipped_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # git's first midpoint of 16 linear commits is the 8th: its factory does not
    # import; around it, the cell is renamed away and the suite does not parse.
    broken = {
        7: {"suite": SUITE.replace("name: sleepy", "name: renamed")},
        8: {"model": MODEL + "\ndef oops(:\n"},
        9: {"suite": SUITE.replace("scenarios:", "scenarios: [oops")},
    }
    repo = tmp_path / "repo"
    shas = history(repo, broken)
    before = snapshot(repo)

    status, out, err = run_bisect(repo, monkeypatch, capsys, shas[0], shas[-1], "--cell", CELL)

    assert status == 0, out + err
    assert f"first bad commit: {shas[PLANTED - 1]} 'commit {PLANTED}'" in out
    skipped = [line for line in steps(out) if " skip (" in line]
    assert skipped, out
    reasons = {
        7: "has no cell sleepy (its cells: renamed)",
        8: "suites/s.yaml:7: factory module 'bisectmodel' raised SyntaxError",
        9: "its suite does not load: suites/s.yaml:12: malformed YAML",
    }
    for line in skipped:
        n = next(n for n in broken if shas[n - 1][:12] in line)
        assert reasons[n] in line, line
        assert "perfguard-ab-base-" not in line  # paths as in the user's checkout
    assert any(shas[7][:12] in line for line in skipped), out  # the 8th was tried
    assert f"{len(skipped)} skipped" in out
    assert snapshot(repo) == before


def test_a_range_without_a_regression_finds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every midpoint is good, so git names BAD, which no step measured: it is measured
    # then, shows no regression, and the bisect says so instead of naming it.
    repo = new_repo(tmp_path / "repo")
    good = commit(repo, "commit 1", ms=FAST_MS)
    bad = commit(repo, "commit 2", ms=FAST_MS)
    status, out, err = run_bisect(repo, monkeypatch, capsys, good, bad, "--cell", CELL)
    assert status == 1, out + err
    assert "perfguard bisect: first bad commit:" not in out
    (line,) = steps(out)
    assert f"{bad[:12]} 'commit 2': good (unchanged: P95 latency" in line
    assert (
        f"perfguard bisect: no first bad commit: BAD {bad[:12]} shows no regression "
        f"against GOOD {good[:12]} (unchanged: P95 latency"
    ) in out
    assert "1 A/B run, 0 skipped" in out


def test_pytest_args_reach_each_midpoint_s_pytest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = new_repo(tmp_path / "repo")
    good = commit(repo, "commit 1", ms=FAST_MS)
    bad = commit(repo, "commit 2", ms=FAST_MS)
    args = (good, bad, "--cell", CELL, "--pytest-args", "-p", "no:perfguard")  # pytest without us
    status, out, err = run_bisect(repo, monkeypatch, capsys, *args)
    assert status == 1, out + err
    (line,) = steps(out)
    assert f"{bad[:12]} 'commit 2': skip (pytest exited with status 4 without measuring" in line
    assert "unrecognized arguments: --perfguard" in line
    assert f"no first bad commit: BAD {bad[:12]} could not be measured against GOOD" in out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_a_signal_while_a_midpoint_is_measured_leaves_the_checkout_as_it_was(
    tmp_path: Path, signum: int
) -> None:
    repo = new_repo(tmp_path / "repo")
    good = commit(repo, "fast", ms=FAST_MS)
    for n in range(2, 5):
        bad = commit(repo, f"commit {n}", ms=SLOW_MS)
    before = snapshot(repo)
    command = "import sys; from perfguard.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", command, "bisect", good, bad, "--cell", CELL],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's job is
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # Wait for the midpoint's A/B to check GOOD out: the bisect worktree, the
        # A/B's base worktree, and the user's own.
        deadline = time.monotonic() + 120
        while len(run_git(repo, "worktree", "list").splitlines()) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)  # what Ctrl-C at a terminal does
        else:
            os.kill(proc.pid, signum)  # a CI runner cancelling the job
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if signum == signal.SIGINT:
        assert proc.returncode == 130, out + err
        assert "perfguard: bisect interrupted; its worktree is removed" in err
    else:
        assert proc.returncode == -signal.SIGTERM, out + err
    assert snapshot(repo) == before


# --------------------------------------------------------------------------- usage errors


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = new_repo(tmp_path / "repo")
    shas = [commit(repo, f"commit {n}", ms=FAST_MS) for n in range(1, 4)]
    return repo, shas


def assert_untouched(repo: Path, before: dict[str, object]) -> None:
    assert snapshot(repo) == before  # the bisect worktree is gone too


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            lambda s: [s[2], s[0], "--cell", CELL],
            "error: GOOD * is not an ancestor of BAD *; expected GOOD, a commit without "
            "the slowdown, that BAD descends from*",
        ),
        (lambda s: [s[1], s[1], "--cell", CELL], "error: GOOD * is the same commit as BAD*"),
        (lambda s: ["nope", s[1], "--cell", CELL], "error: GOOD: no branch, tag or commit `nope`*"),
        (
            lambda s: [s[0], s[2], "--cell", "suites/s.yaml::other"],
            "error: --cell suites/s.yaml::other: not at BAD *: suites/s.yaml has no cell "
            "other (its cells: sleepy)*",
        ),
        (
            lambda s: [s[0], s[2], "--cell", "suites/gone.yaml::sleepy"],
            "error: --cell suites/gone.yaml::sleepy: not at BAD *: there is no suite file*",
        ),
        (lambda s: [s[0], s[2], "--cell", "sleepy"], "error: --cell 'sleepy' is not a cell id*"),
    ],
)
def test_usage_errors_stop_before_anything_is_measured(
    small: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: object,
    message: str,
) -> None:
    repo, shas = small
    before = snapshot(repo)
    status, out, err = run_bisect(repo, monkeypatch, capsys, *args(shas))  # type: ignore[operator]
    assert status == 2
    assert "step " not in out
    pytest.LineMatcher(err.splitlines()).fnmatch_lines([f"perfguard: {message}"])
    assert_untouched(repo, before)


def test_a_cell_missing_at_good_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = new_repo(tmp_path / "repo")
    good = commit(repo, "no such cell yet", ms=FAST_MS, suite=SUITE.replace("sleepy\n", "x\n", 1))
    bad = commit(repo, "the cell", ms=FAST_MS)
    before = snapshot(repo)
    status, _, err = run_bisect(repo, monkeypatch, capsys, good, bad, "--cell", CELL)
    assert status == 2
    assert f"--cell {CELL}: not at GOOD {good[:12]}: suites/s.yaml has no cell sleepy" in err
    assert_untouched(repo, before)


def test_a_dirty_tree_is_refused_unless_allowed(
    small: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo, shas = small
    (repo / "NOTES").write_text("edited\n")
    before = snapshot(repo)
    status, _, err = run_bisect(repo, monkeypatch, capsys, shas[0], shas[2], "--cell", CELL)
    assert status == 2
    assert "has uncommitted changes to tracked files" in err
    assert "fix: commit or stash them (git stash), or pass --allow-dirty" in err.lower()
    assert_untouched(repo, before)


def test_outside_a_git_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run_bisect(tmp_path, monkeypatch, capsys, "a", "b", "--cell", CELL)
    assert status == 2
    assert "is not inside a git repository" in err


# --------------------------------------------------------------------------- one step


def verdict(kind: str, mode: str = "ab", decided: bool = True) -> ScenarioVerdict:
    decision = Decision(True, DecisionKind(kind), 1.3, 1.2, 1.4, 200, "why")
    ab = ABDetail("b" * 40, "base", decision, 1.0, (), ()) if decided else None
    sentence = f"P95 latency {kind} vs base"
    word = "invalid" if kind == "undecided" else kind
    return ScenarioVerdict(CELL, word, messages=(sentence,), mode=mode, ab=ab)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "mark"),
    [
        (verdict("regression"), "bad"),
        (verdict("unchanged"), "good"),
        (verdict("improvement"), "good"),
        (verdict("undecided"), "skip"),
        (verdict("regression", mode="archived", decided=False), "skip"),
    ],
)
def test_only_a_decided_ab_verdict_marks_a_commit(given: ScenarioVerdict, mark: str) -> None:
    other = ScenarioVerdict("suites/s.yaml::other", "regression", mode="ab")  # type: ignore[arg-type]
    got, why, used = judge_step(CELL, [other, given], None, 1, "")
    assert (got, used) == (mark, given)
    assert given.messages[0] in why
    if mark == "skip":
        assert f"the A/B gave no answer ({given.verdict.value})" in why


def test_a_run_that_left_no_verdict_is_skipped_with_pytest_s_last_words() -> None:
    output = "collected 0 items\nERROR: not found: suites/s.yaml::sleepy\n\nno tests ran\n"
    mark, why, used = judge_step(CELL, [], None, 4, output)
    assert (mark, used) == ("skip", None)
    assert why == (
        "pytest exited with status 4 without measuring the cell: "
        "ERROR: not found: suites/s.yaml::sleepy"
    )


def test_find_cell_says_why_a_commit_has_no_cell(tmp_path: Path) -> None:
    cell = parse_cell(CELL)
    assert find_cell(tmp_path, cell) == "there is no suite file suites/s.yaml"
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "s.yaml").write_text("scenarios: [oops\n")
    found = find_cell(tmp_path, cell)
    assert isinstance(found, str) and found.startswith("its suite does not load: ")
    assert "s.yaml:1" in found
    (tmp_path / "suites" / "s.yaml").write_text(SUITE)
    found = find_cell(tmp_path, cell)
    assert not isinstance(found, str) and found.item_name == "sleepy"


def test_parse_cell() -> None:
    cell = parse_cell("suites/x.yaml::convnet[torch-cpu-fp32]")
    assert (cell.suite, cell.item) == ("suites/x.yaml", "convnet[torch-cpu-fp32]")
    for bad in ("convnet", "::convnet", "suites/x.yaml::", "a::b::c"):
        with pytest.raises(PerfguardError, match="is not a cell id"):
            parse_cell(bad)


def test_a_step_without_the_cell_skips_without_running_pytest(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    commit(repo, "renamed", ms=FAST_MS, suite=SUITE.replace("name: sleepy", "name: other"))
    work = tmp_path / "work"
    work.mkdir()
    config = BisectConfig(CELL, "0" * 40, ".", (), str(work))
    step = run_step(repo, config)
    assert (step.mark, step.measured) == ("skip", False)
    assert step.why == (
        "cannot be measured here: suites/s.yaml has no cell sleepy (its cells: other)"
    )
    assert not list(work.iterdir())  # no pytest run, no report


def test_a_step_that_breaks_stops_git_bisect_instead_of_marking_the_commit(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "perfguard.ab.bisect", str(tmp_path / "no-config.json")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == EXIT_ABORT and EXIT_ABORT not in STEP_EXIT.values()
    assert proc.stdout.startswith("perfguard bisect: step failed: ")
    assert "no-config.json" in proc.stdout
    assert STEP_EXIT == {"good": 0, "bad": 1, "skip": 125}  # what git bisect run reads


# --------------------------------------------------------------------------- a step's progress


class _Pytest:
    """A midpoint's pytest as ``wait_for_pytest`` sees it: each wait is a poll that
    times out, while the log grows by the next chunk, until the script runs out."""

    def __init__(self, log: Path, chunks: list[str], clock: list[float]) -> None:
        self.log, self.chunks, self.clock = log, chunks, clock

    def wait(self, timeout: float) -> int:
        if not self.chunks:
            return 0
        with self.log.open("a") as out:
            out.write(self.chunks.pop(0))
        self.clock[0] += 10.0  # ten seconds a poll
        raise subprocess.TimeoutExpired("pytest", timeout)


def test_a_step_shows_its_pytest_s_progress_as_it_runs_and_says_when_it_shows_none(
    tmp_path: Path,
) -> None:
    log = tmp_path / "pytest.log"
    log.write_text("")
    chunks = [
        "============ test session starts ============\nperfguard: commit abc; env\n",
        "collected 1 item\n\nsuites/s.yaml \nperfguard: export sleepy: to ONNX, opset 17\n",
        "perfguard: A/B pairs suites/s.yaml::sleepy: 200/2000 (ratio 1.9",  # half a line
        "0)\n",
        "",
        "",
        "",  # thirty seconds of nothing new
        "perfguard: A/B pairs suites/s.yaml::sleepy: 400/2000 (stopped)\n.\n"
        "=========== perfguard ===========\nperfguard: ❌ regression: 1 regression\n",
    ]
    now = [0.0]
    shown: list[str] = []
    status = wait_for_pytest(
        _Pytest(log, chunks, now), StepOutput(log), shown.append, sha="f" * 40,
        clock=lambda: now[0], heartbeat_s=30.0,
    )  # fmt: skip
    assert status == 0
    assert shown == [
        "perfguard bisect:   20 s: export sleepy: to ONNX, opset 17",
        "perfguard bisect:   40 s: A/B pairs suites/s.yaml::sleepy: 200/2000 (ratio 1.90)",
        "perfguard bisect:   70 s: still measuring ffffffffffff",
        "perfguard bisect:   80 s: A/B pairs suites/s.yaml::sleepy: 400/2000 (stopped)",
    ]


@pytest.mark.slow
def test_a_step_says_which_commit_it_measures_before_its_pytest_runs(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    sha = commit(repo, "the midpoint", ms=FAST_MS)
    work = tmp_path / "work"
    work.mkdir()
    shown: list[str] = []
    # GOOD is no commit: the run ends at once, the step is skipped; what it said first counts.
    step = run_step(repo, BisectConfig(CELL, "0" * 40, ".", (), str(work)), shown.append)
    assert step.mark == "skip" and step.measured
    assert shown[0] == (
        f"perfguard bisect: measuring {sha[:12]} 'the midpoint' (step 1): same-run A/B of "
        f"1 cell, {CELL}, against GOOD 000000000000"
    )
