"""``perfguard bisect GOOD BAD --cell ID``: the first commit that slowed one cell.

The driver (:func:`bisect`) checks one commit range out into a worktree of its own
(:func:`perfguard.ab.worktree.base_worktree`: a detached checkout in a temporary
directory, removed on every way out, Ctrl-C and SIGTERM included), runs ``git bisect
start BAD GOOD`` there and ``git bisect run`` with this module's step as the test
command, so neither the user's checkout, nor its index, nor a bisect of their own is
ever touched (git keeps a bisect's state per worktree).

Each step (``python -m perfguard.ab.bisect CONFIG``, :func:`run_step`) is a same-run
A/B of the midpoint against GOOD, restricted to the one cell: ``python -m pytest
--perfguard --perfguard-ab=GOOD <cell id>`` in the bisect worktree, exactly the run a
user or CI would make there (their ini, conftest and pythonpath), its verdict read
back from the run's ``comparison.json``. Through pytest, in a process per step, and
not through the A/B API in this process, because the midpoint's model code must be
imported fresh at every commit, a midpoint that crashes its worker or does not import
must cost one skipped step and never the bisect, and ``git bisect run`` needs a
command per step anyway. The step runs the harness of this perfguard installation
(as A/B's base side does), so a change to perfguard inside the range never shows up
as a model regression.

A step's verdict becomes the midpoint's mark: ``regression`` is bad (exit 1),
``unchanged`` or ``improvement`` good (exit 0), and a midpoint that cannot be measured
(no suite file, a suite that does not load, no such cell, a factory that does not
import, a crashed worker, an undecided A/B) is skipped (exit 125, ``git bisect
skip``) with the reason. An error of the step itself exits 128, which stops
``git bisect run`` instead of marking the commit.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import filelock

import perfguard
from perfguard.ab.worktree import base_worktree, is_ancestor
from perfguard.baseline.git import git_error, is_dirty, repo_root, run_git
from perfguard.core.atomicio import read_json
from perfguard.core.errors import GitError, PerfguardError, ResultsError, SuiteError
from perfguard.core.scenario import Scenario
from perfguard.core.signals import on_terminate
from perfguard.core.text import one_line
from perfguard.judge.verdict import ScenarioVerdict, VerdictKind
from perfguard.records.results import RunResult
from perfguard.records.resultsfile import read_results
from perfguard.suite.loader import load_suite

__all__ = [
    "EXIT_ABORT",
    "STEP_EXIT",
    "BisectConfig",
    "Cell",
    "Step",
    "StepOutput",
    "bisect",
    "find_cell",
    "judge_step",
    "harness_env",
    "parse_cell",
    "read_steps",
    "run_step",
    "step_main",
    "wait_for_pytest",
]

#: What ``git bisect run`` reads from a step's exit status.
STEP_EXIT = {"good": 0, "bad": 1, "skip": 125}
#: An exit status of 128 or more stops ``git bisect run`` (a step that broke, not the commit).
EXIT_ABORT = 128
#: Every line a step prints for the driver to show starts with this.
STEP_PREFIX = "perfguard bisect: "
STEPS_FILE = "steps.jsonl"
CONFIG_FILE = "config.json"
#: Held by a step while it runs: after a Ctrl-C the driver waits for it before cleaning up.
STEP_LOCK = "step.lock"
#: How long, after a Ctrl-C, a midpoint's pytest may take to remove its own A/B worktree.
INTERRUPT_GRACE_S = 60.0
#: Lines of the pytest output kept in a skip reason when nothing better says why.
TAIL_LINES = 3
#: How often a step looks at its pytest's output while it runs (seconds).
POLL_S = 1.0
#: A step that has shown nothing for this long says it is still measuring (seconds).
HEARTBEAT_S = 30.0
_FIRST_BAD = re.compile(r"^([0-9a-f]{40}) is the first bad commit", re.MULTILINE)
_GOOD_VERDICTS = (VerdictKind.UNCHANGED, VerdictKind.IMPROVEMENT)


@dataclass(frozen=True)
class Cell:
    """A cell as results.json and ``perfguard history`` name it: ``suite::item``."""

    id: str
    suite: str  # the suite file, relative to pytest's rootdir, POSIX
    item: str  # e.g. ``convnet[torch-cpu-fp32]``


def parse_cell(text: str) -> Cell:
    """``suites/x.yaml::name[cell]`` split at ``::``; PerfguardError when it is not one."""
    suite, sep, item = text.partition("::")
    if not sep or not suite or not item or "::" in item:
        raise PerfguardError(
            f"--cell {text!r} is not a cell id",
            expected="a suite file and an item, as results.json names them: "
            "suites/x.yaml::name[cell]",
            fix="copy the id from `perfguard history`, results.json or pytest -v",
        )
    return Cell(id=text, suite=suite, item=item)


@dataclass(frozen=True)
class Step:
    """One bisect step: the commit, its mark (``good``/``bad``/``skip``) and why.

    ``measured``: an A/B run was started (pytest ran); ``verdict`` is the A/B verdict
    read, if any, and ``why`` its message (the figures: ratio, bounds, pairs, limit)
    or the reason for a skip.
    """

    sha: str
    subject: str
    mark: str
    why: str
    measured: bool
    verdict: str | None = None

    def line(self, number: int) -> str:
        return f"step {number}: {self.sha[:12]} {self.subject!r}: {self.mark} ({self.summary})"

    @property
    def summary(self) -> str:
        """The verdict and its message, or the reason for a skip (which names the verdict)."""
        return f"{self.verdict}: {self.why}" if self.verdict and self.mark != "skip" else self.why

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        return cls(**data)


@dataclass(frozen=True)
class BisectConfig:
    """What every step needs, written once as JSON beside the step log."""

    cell: str
    good: str  # full sha
    rel: str  # pytest's rootdir inside a checkout, relative to its top ("." usually)
    pytest_args: tuple[str, ...]
    work: str  # the driver's scratch directory: step log, per-step reports

    @classmethod
    def read(cls, path: Path) -> BisectConfig:
        data = read_json(path)
        data["pytest_args"] = tuple(data["pytest_args"])
        return cls(**data)


# --------------------------------------------------------------------------- one step


def _unrooted(text: str, rootdir: Path) -> str:
    """``text`` with the bisect worktree's temporary path left out of the paths it names."""
    return text.replace(f"{rootdir}{os.sep}", "")


def find_cell(rootdir: Path, cell: Cell) -> Scenario | str:
    """The cell's scenario in the suite under ``rootdir``, or why there is none."""
    path = rootdir / cell.suite
    if not path.is_file():
        return f"there is no suite file {cell.suite}"
    try:
        suite = load_suite(path)
    except SuiteError as exc:
        return f"its suite does not load: {_unrooted(one_line(str(exc)), rootdir)}"
    for scenario in suite.scenarios:
        if scenario.scenario_id(rootdir) == cell.id:
            return scenario
    names = ", ".join(s.item_name for s in suite.scenarios) or "none"
    return f"{cell.suite} has no cell {cell.item} (its cells: {names})"


def _verdicts(reports: Path) -> list[ScenarioVerdict]:
    found: list[ScenarioVerdict] = []
    for path in sorted(reports.glob("*/comparison.json")):
        data = read_json(path)
        found.extend(ScenarioVerdict.from_dict(v) for v in data.get("verdicts", ()))
    return found


def _results(reports: Path) -> RunResult | None:
    for path in sorted(reports.glob("*/results.json")):
        return read_results(path)
    return None


def _tail(output: str) -> str:
    """The last few non-blank lines of pytest's output, errors first if there are any."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line or "rror:" in line]
    return " | ".join((errors or lines)[-TAIL_LINES:]) or "no output"


def judge_step(
    cell_id: str,
    verdicts: Sequence[ScenarioVerdict],
    results: RunResult | None,
    status: int,
    output: str,
) -> tuple[str, str, ScenarioVerdict | None]:
    """The mark of one A/B run of the cell (good, bad or skip), why, and the verdict used.

    Only a same-run A/B verdict (``mode: ab``) that reached a decision marks the
    commit; anything else is a skip that says what happened: another verdict (e.g.
    ``invalid`` when the pairs were undecided), the cell's failure message (a factory
    that does not import, a crashed worker), or pytest's exit status and last lines.
    """
    verdict = next((v for v in verdicts if v.scenario_id == cell_id), None)
    if verdict is not None:
        why = "; ".join(dict.fromkeys(verdict.messages)) or "no message"
        if verdict.mode == "ab" and verdict.ab is not None:
            if verdict.verdict is VerdictKind.REGRESSION:
                return "bad", why, verdict
            if verdict.verdict in _GOOD_VERDICTS:
                return "good", why, verdict
        return "skip", f"the A/B gave no answer ({verdict.verdict.value}): {why}", verdict
    result = next((r for r in (results.scenarios if results else ()) if r.id == cell_id), None)
    if result is not None:
        message = one_line(result.message or "no message")
        return "skip", f"the cell {result.status.value} before A/B decided: {message}", None
    return (
        "skip",
        f"pytest exited with status {status} without measuring the cell: {_tail(output)}",
        None,
    )


def harness_env() -> dict[str, str]:
    """This environment, with this perfguard installation first on ``PYTHONPATH``: the
    steps and their pytest runs measure with this harness, never with a copy that a
    commit of the range holds."""
    package_root = Path(perfguard.__file__).resolve().parent.parent
    env = dict(os.environ)
    if package_root.name not in ("site-packages", "dist-packages"):  # a source checkout
        paths = (str(package_root), env.get("PYTHONPATH"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def _subject(tree: Path, sha: str) -> str:
    proc = run_git(tree, "log", "-1", "--format=%s", sha)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _head(tree: Path) -> str:
    proc = run_git(tree, "rev-parse", "HEAD")
    if proc.returncode != 0:
        raise git_error(tree, ("rev-parse", "HEAD"), proc)
    return proc.stdout.strip()


class StepOutput:
    """The progress lines of a midpoint's pytest run, read from its log as they come:
    perfguard's lines before the first section of pytest's summary (the export, the
    A/B pairs, a wait for quiet), without the run's header line (its commit)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._read = 0
        self._partial = ""
        self._ended = False  # a section of pytest's summary began: no more progress

    def new_lines(self) -> list[str]:
        """The progress lines written since the last call, without ``perfguard: ``."""
        try:
            with self.log.open("rb") as f:
                f.seek(self._read)
                chunk = f.read()
        except OSError:
            return []
        self._read += len(chunk)
        *lines, self._partial = (self._partial + chunk.decode("utf-8", "replace")).split("\n")
        shown: list[str] = []
        for line in lines:
            if line.startswith("=") and "test session starts" not in line:
                self._ended = True
            elif (
                not self._ended
                and line.startswith("perfguard: ")
                and not line.startswith("perfguard: commit ")
            ):
                shown.append(one_line(line.removeprefix("perfguard: ")))
        return shown


def wait_for_pytest(
    child: Any,
    output: StepOutput,
    echo: Callable[[str], None],
    *,
    sha: str,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = POLL_S,
    heartbeat_s: float = HEARTBEAT_S,
) -> int:
    """``child.wait()``, showing its progress lines as they come, each with the seconds
    since the step began, and a line every ``heartbeat_s`` when it shows none."""
    started = said = clock()

    def show(lines: Sequence[str], now: float) -> None:
        for text in lines:
            echo(f"{STEP_PREFIX}  {now - started:.0f} s: {text}")

    while True:
        try:
            status: int = child.wait(timeout=poll_s)
        except subprocess.TimeoutExpired:
            now, lines = clock(), output.new_lines()
            show(lines, now)
            if lines:
                said = now
            elif now - said >= heartbeat_s:
                echo(f"{STEP_PREFIX}  {now - started:.0f} s: still measuring {sha[:12]}")
                said = now
            continue
        show(output.new_lines(), clock())
        return status


def _say(line: str) -> None:
    print(line, flush=True)


def run_step(tree: Path, config: BisectConfig, echo: Callable[[str], None] = _say) -> Step:
    """A same-run A/B of the commit checked out at ``tree`` against ``config.good``;
    ``echo`` says which commit is measured and shows its progress as it runs."""
    sha = _head(tree)
    subject = _subject(tree, sha)
    cell = parse_cell(config.cell)
    rootdir = (tree / config.rel).resolve()
    found = find_cell(rootdir, cell)
    if isinstance(found, str):
        return Step(sha, subject, "skip", f"cannot be measured here: {found}", measured=False)
    number = len(read_steps(Path(config.work))) + 1
    echo(
        f"{STEP_PREFIX}measuring {sha[:12]} {subject!r} (step {number}): same-run A/B of 1 "
        f"cell, {cell.id}, against GOOD {config.good[:12]}"
    )
    reports = Path(tempfile.mkdtemp(prefix=f"step-{sha[:12]}-", dir=config.work))
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--perfguard",
        f"--perfguard-ab={config.good}",
        f"--perfguard-report-dir={reports}",
        "-p",
        "no:cacheprovider",
        f"--rootdir={rootdir}",
        cell.id,
        *config.pytest_args,
    ]
    env = {k: v for k, v in harness_env().items() if k != "PYTHONSAFEPATH"}
    log = reports / "pytest.log"
    with log.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(
            command, cwd=rootdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
        try:
            status = wait_for_pytest(child, StepOutput(log), echo, sha=sha)
        except KeyboardInterrupt:
            # pytest got the same Ctrl-C: it removes its A/B worktree before it exits.
            try:
                child.wait(timeout=INTERRUPT_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            raise
    output = log.read_text(encoding="utf-8", errors="replace")
    try:
        verdicts, results = _verdicts(reports), _results(reports)
    except (ResultsError, ValueError, KeyError, TypeError) as exc:
        why = f"the run's report files could not be read: {one_line(str(exc))}"
        return Step(sha, subject, "skip", why, measured=True)
    mark, why, verdict = judge_step(cell.id, verdicts, results, status, output)
    why = _unrooted(why, rootdir)
    word = None if verdict is None else verdict.verdict.value
    return Step(sha, subject, mark, why, measured=True, verdict=word)


def _record(work: Path, step: Step) -> int:
    """Append ``step`` to the step log; its number (1-based)."""
    log = work / STEPS_FILE
    with log.open("a", encoding="utf-8") as out:
        out.write(json.dumps(asdict(step)) + "\n")
    return len(log.read_text(encoding="utf-8").splitlines())


def read_steps(work: Path) -> list[Step]:
    log = work / STEPS_FILE
    if not log.exists():
        return []
    return [Step.from_dict(json.loads(line)) for line in log.read_text("utf-8").splitlines()]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def step_main(argv: Sequence[str]) -> int:
    """The command ``git bisect run`` runs at each midpoint: ``CONFIG`` is the config file."""
    # SIGTERM as Ctrl-C: wait for pytest (which got it too) to clean up, then go.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        config = BisectConfig.read(Path(argv[0]))
        with filelock.FileLock(Path(config.work) / STEP_LOCK):
            step = run_step(Path.cwd(), config)
            number = _record(Path(config.work), step)
    except (PerfguardError, OSError, ValueError, KeyError, IndexError) as exc:
        print(f"{STEP_PREFIX}step failed: {one_line(str(exc))}", flush=True)
        return EXIT_ABORT
    except KeyboardInterrupt:
        return EXIT_ABORT + 2  # as a process killed by SIGINT; git bisect run stops
    print(STEP_PREFIX + step.line(number), flush=True)
    return STEP_EXIT[step.mark]


# --------------------------------------------------------------------------- the driver


def _commit(repo: Path, ref: str, what: str) -> str:
    if not ref or ref.startswith("-"):
        raise GitError(f"{what} {ref!r} is not a git ref", fix="name a branch, tag or sha")
    proc = run_git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if proc.returncode != 0:
        raise GitError(
            f"{what}: no branch, tag or commit `{ref}` in {repo}",
            expected="a branch, tag or commit present in this clone",
            fix="name an existing one (git log --oneline)",
        )
    return proc.stdout.strip()


def _git(tree: Path, *args: str) -> str:
    proc = run_git(tree, *args, timeout=600.0)
    if proc.returncode != 0:
        raise git_error(tree, args, proc)
    return proc.stdout


def _check_cell(tree: Path, rel: str, cell: Cell, what: str, sha: str) -> None:
    """The cell must be measurable at GOOD and at BAD, or the bisect cannot start."""
    _git(tree, "checkout", "--quiet", "--detach", sha)
    found = find_cell(tree / rel, cell)
    if isinstance(found, str):
        raise PerfguardError(
            f"--cell {cell.id}: not at {what} {sha[:12]}: {found}",
            expected=f"a cell that exists at both GOOD and BAD (ids relative to pytest's "
            f"rootdir, here {rel})",
            fix="run perfguard bisect from the directory you run pytest in, with an id "
            "from `perfguard history` or results.json",
        )
    if found.load is not None and found.load.slo is not None:
        raise PerfguardError(
            f"--cell {cell.id} is an SLO search (`load.slo`), which same-run A/B does not compare",
            expected="a single-request cell or one under load at a fixed level",
            fix="bisect a fixed-level cell of the same model",
        )


def _wait_for_step(work: Path) -> None:
    """Until the running step (if any) is done: it holds the step lock while it runs."""
    lock = filelock.FileLock(work / STEP_LOCK, timeout=INTERRUPT_GRACE_S + 10)
    with contextlib.suppress(filelock.Timeout), lock:
        pass


def _bisect_run(tree: Path, config_path: Path, work: Path, echo: Callable[[str], None]) -> str:
    """``git bisect run`` of the step; its whole output (step lines echoed as they come).

    git and the steps run in a session of their own, so that a Ctrl-C reaches them
    only through this process, which forwards it (SIGTERM too) and then waits for the
    step, and the step for its pytest, to clean up before the worktree goes.
    """
    env = harness_env()
    # Not the checkout's directory first on sys.path: the step imports this perfguard.
    env["PYTHONSAFEPATH"] = "1"
    step = [sys.executable, "-m", "perfguard.ab.bisect", str(config_path)]
    out: list[str] = []
    proc = subprocess.Popen(
        ["git", "bisect", "run", *step],
        cwd=tree,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )

    def stop(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signum)
        _wait_for_step(work)

    with proc, on_terminate(lambda: stop(signal.SIGTERM)):
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.append(line)
                if line.startswith(STEP_PREFIX):
                    echo(line.rstrip("\n"))
                elif line.startswith("Bisecting:"):
                    echo(STEP_PREFIX + line.strip())
        except KeyboardInterrupt:
            stop(signal.SIGINT)
            raise
    return "".join(out)


def bisect(
    cwd: Path,
    good: str,
    bad: str,
    cell_id: str,
    pytest_args: Sequence[str] = (),
    *,
    allow_dirty: bool = False,
    echo: Callable[[str], None] = print,
) -> int:
    """Find the first commit in GOOD..BAD whose A/B against GOOD regresses the cell.

    Returns 0 when found, 1 when not (every candidate skipped, or BAD shows no
    regression against GOOD). Raises PerfguardError (GitError) before anything is
    measured when GOOD or BAD is unknown, GOOD is not an ancestor of BAD, the tree has
    uncommitted changes (unless ``allow_dirty``) or the cell is not at GOOD or BAD.
    """
    cell = parse_cell(cell_id)
    cwd = Path(cwd).resolve()
    top = repo_root(cwd)
    if top is None:
        raise GitError(
            f"{cwd} is not inside a git repository",
            expected="the project's git checkout, whose history holds GOOD and BAD",
            fix="run perfguard bisect from the checkout you run pytest in",
        )
    rel = cwd.relative_to(top.resolve()).as_posix()
    good_sha, bad_sha = _commit(top, good, "GOOD"), _commit(top, bad, "BAD")
    if good_sha == bad_sha or not is_ancestor(top, good_sha, bad_sha):
        same = good_sha == bad_sha
        raise GitError(
            f"GOOD {good} ({good_sha[:12]}) "
            + ("is the same commit as BAD" if same else f"is not an ancestor of BAD {bad} ")
            + ("" if same else f"({bad_sha[:12]})"),
            expected="GOOD, a commit without the slowdown, that BAD descends from",
            fix="pass an older GOOD (git merge-base GOOD BAD gives a common ancestor)",
        )
    if not allow_dirty and is_dirty(top):
        raise GitError(
            f"the checkout at {top} has uncommitted changes to tracked files",
            expected="a clean tree: bisect measures committed revisions only, so those "
            "changes would be measured at no step",
            fix="commit or stash them (git stash), or pass --allow-dirty",
        )
    count = int(_git(top, "rev-list", "--count", f"{good_sha}..{bad_sha}").strip())
    echo(
        f"{STEP_PREFIX}{count} commits in {good_sha[:12]}..{bad_sha[:12]}; "
        f"cell {cell.id}, each midpoint A/B-measured against GOOD {good_sha[:12]}"
    )
    with base_worktree(top, bad_sha) as tree:
        work = tree.parent / "bisect"
        work.mkdir()
        config = BisectConfig(cell.id, good_sha, rel, tuple(pytest_args), str(work))
        config_path = work / CONFIG_FILE
        config_path.write_text(json.dumps(asdict(config)), encoding="utf-8")
        _check_cell(tree, rel, cell, "BAD", bad_sha)
        _check_cell(tree, rel, cell, "GOOD", good_sha)
        try:
            output = _git(tree, "bisect", "start", bad_sha, good_sha)
            if not _FIRST_BAD.search(output):  # else BAD is the only candidate
                output = _bisect_run(tree, config_path, work, echo)
        finally:
            run_git(tree, "bisect", "reset", new_session=True)
        first = _FIRST_BAD.search(output)
        steps = read_steps(work)
        if first is None:
            return _not_found(output, steps, echo)
        first_sha = first.group(1)
        step = next((s for s in steps if s.sha == first_sha), None)
        if step is None:  # every midpoint was good: BAD itself was never measured
            _git(tree, "checkout", "--quiet", "--detach", bad_sha)
            step = run_step(tree, config, echo)
            echo(STEP_PREFIX + step.line(_record(work, step)))
            steps = read_steps(work)
    runs = sum(s.measured for s in steps)
    skipped = sum(s.mark == "skip" for s in steps)
    tally = f"{runs} A/B run{'s' if runs != 1 else ''}, {skipped} skipped"
    if step.mark != "bad":
        what = "shows no regression" if step.mark == "good" else "could not be measured"
        echo(
            f"{STEP_PREFIX}no first bad commit: BAD {bad_sha[:12]} {what} against GOOD "
            f"{good_sha[:12]} ({step.summary}); {tally}"
        )
        return 1
    echo(f"{STEP_PREFIX}first bad commit: {step.sha} {step.subject!r}")
    echo(f"{STEP_PREFIX}  A/B against GOOD {good_sha[:12]}: {step.summary}")
    echo(f"{STEP_PREFIX}{tally}")
    return 0


def _not_found(output: str, steps: Sequence[Step], echo: Callable[[str], None]) -> int:
    if "only 'skip'ped commits left" in output:
        shas = re.findall(r"^([0-9a-f]{40})$", output, re.MULTILINE)
        echo(
            f"{STEP_PREFIX}no first bad commit: only skipped commits are left; it is one of "
            f"{', '.join(s[:12] for s in shas)}"
        )
        runs = sum(s.measured for s in steps)
        echo(f"{STEP_PREFIX}{runs} A/B runs, {sum(s.mark == 'skip' for s in steps)} skipped")
        return 1
    lines = [line for line in output.splitlines() if line.strip()][-8:]
    raise GitError(
        "git bisect run stopped without naming a first bad commit: " + " | ".join(lines),
        fix="see the step's message above; rerun once it is fixed",
    )


if __name__ == "__main__":
    sys.exit(step_main(sys.argv[1:]))
