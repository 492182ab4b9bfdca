"""Clean process trees, end to end: no worker, no process a model started and no hang
outlives its cell or the session (SIGTERM, Ctrl-C, timeouts, the in-process watchdog).

The models record the pids of their worker and of a helper process they start
(``sleep 300``) in ``suites/pids/``; after the session every one of them must be gone.
Hangs are ``time.sleep(300)``; the limits that stop them are a few seconds, and the
only bounds asserted are generous ones on "it finished" / "it was killed".
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.git_repos import run_git
from tests.helpers.processes import alive, gone
from tests.helpers.suites import FAST_DEFAULTS

ISOLATE = ("--perfguard-isolate", "-p", "no:cacheprovider")
pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc"),
    pytest.mark.slow,  # runs pytest and worker processes
]

MODELS = textwrap.dedent(
    """
    import os
    import subprocess
    import time
    from pathlib import Path

    import torch
    from torch import nn

    PIDS = Path(__file__).parent / "pids"


    def _record(kind, pid):
        PIDS.mkdir(exist_ok=True)
        (PIDS / f"{kind}-{pid}").write_text("")


    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 4)).eval()


    def spawns(hang=False):
        helper = subprocess.Popen(["sleep", "300"])  # a model's helper process
        _record("child", helper.pid)
        _record("worker", os.getpid())
        if hang:
            time.sleep(300)  # the isolated factory hangs here
        return mlp()


    def hangs():
        time.sleep(300)  # the factory hangs here
        return mlp()


    class SlowForward(nn.Module):
        def forward(self, x):
            time.sleep(300)  # the forward hangs here
            return x


    def slow_forward():
        return SlowForward().eval()
    """
)


def _suite(pytester: pytest.Pytester, models: dict[str, str]) -> Path:
    """``suites/s.yaml``: one scenario per entry of ``models`` (name -> factory call)."""
    suites = pytester.path / "suites"
    suites.mkdir()
    (suites / "procmodels.py").write_text(MODELS)
    # The warm-up's cap is added to its watchdog's limit: 1 s, so a hang shows soon.
    warmup = "warmup: {iterations: 2, seconds: 0}"
    assert warmup in FAST_DEFAULTS
    body = FAST_DEFAULTS.replace(warmup, warmup[:-1] + ", max_seconds: 1}") + "models:\n"
    for name, factory in models.items():
        fn, _, kwargs = factory.partition(" ")
        extra = f", kwargs: {{{kwargs}}}" if kwargs else ""
        inputs = "inputs: {x: {shape: [2, 8]}}"
        body += f"  {name}: {{factory: 'procmodels:{fn}'{extra}, {inputs}}}\n"
    body += "scenarios:\n" + "".join(f"  - {{name: {n}, model: {n}}}\n" for n in models)
    (suites / "s.yaml").write_text(body)
    return suites


def _pids(suites: Path, kind: str) -> list[int]:
    folder = suites / "pids"
    if not folder.exists():
        return []
    return [int(p.name.split("-")[1]) for p in folder.iterdir() if p.name.startswith(kind)]


def _kill_leftovers(suites: Path) -> None:
    """Only when a test fails: stop what it started, so nothing outlives the test run."""
    for pid in _pids(suites, "child") + _pids(suites, "worker"):
        if alive(pid):  # pragma: no cover - only when the test fails
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _line_of(marker: str) -> int:
    """The line of ``procmodels.py`` that holds ``marker`` (1-based)."""
    return next(i for i, line in enumerate(MODELS.splitlines(), 1) if marker in line)


# --------------------------------------------------------------------------- in-process


def test_an_in_process_hang_fails_its_cell_with_the_stacks(suite_writer: pytest.Pytester) -> None:
    """Factory and warm-up hangs each fail their own cell at the watchdog; the rest runs."""
    _suite(suite_writer, {"fine": "mlp", "hangs": "hangs", "slow": "slow_forward"})
    # torch imported up front: its first import alone can take seconds on a busy machine,
    # and would count against the first cell's open.
    suite_writer.makeconftest("import torch  # noqa: F401\n")
    result = suite_writer.runpytest(
        "--perfguard", "-v", "--perfguard-baseline=none", "--perfguard-open-timeout=5", timeout=240
    )
    result.assert_outcomes(passed=1, failed=2)
    factory_line = _line_of("# the factory hangs here")
    forward_line = _line_of("# the forward hangs here")
    result.stdout.fnmatch_lines(
        [
            "*::fine PASSED*",
            "*opening the model of hangs was stopped after * s, past its limit of 5 s;"
            f" the main thread was at *procmodels.py:{factory_line} in hangs*"
            "Fix: find where it hangs in the dumped stacks*--perfguard-open-timeout*",
            "*perfguard watchdog: opening the model of hangs has run for 5 s*",
            "*time.sleep(300)  # the factory hangs here*",
            "*the warm-up of slow was stopped after * s, past its limit of 6 s (1 s of "
            "warmup.max_seconds + the open timeout 5 s); the main thread was at "
            f"*procmodels.py:{forward_line} in forward*",
        ],
        consecutive=False,
    )


# --------------------------------------------------------------------------- isolated


def test_isolated_cells_leave_no_process_behind(suite_writer: pytest.Pytester) -> None:
    """A model's helper process dies with its worker, after a pass and after a timeout."""
    suites = _suite(suite_writer, {"fine": "spawns", "hangs": "spawns hang: true"})
    try:
        result = suite_writer.runpytest(
            "--perfguard",
            "-v",
            "--perfguard-baseline=none",
            "--perfguard-isolate",
            # Generous: the worker imports torch while it opens its cell.
            "--perfguard-open-timeout=30",
            timeout=240,
        )
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(
            [
                "*gave no reply to `open` within 30 s; it was killed*"
                "raise --perfguard-open-timeout (ini perfguard_open_timeout)*",
                # The worker's stacks, dumped before the kill, name the line it hung at.
                f"*procmodels.py*, line {_line_of('# the isolated factory hangs')} in spawns*",
            ],
            consecutive=False,
        )
        pids = _pids(suites, "worker") + _pids(suites, "child")
        assert len(pids) == 4
        assert all(gone(pid) for pid in pids)
    finally:
        _kill_leftovers(suites)


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"]
)
def test_a_signal_to_the_session_kills_the_worker_and_its_children(
    suite_writer: pytest.Pytester, signum: int
) -> None:
    """What CI's cancel (SIGTERM), Ctrl-C and an outright kill (``kill -9``, the OOM
    killer: no handler runs) do to an isolated run without A/B. After SIGKILL the busy
    worker ends itself and its children through its lifeline: it used to sleep on."""
    suites = _suite(suite_writer, {"hangs": "spawns hang: true"})
    # SIGINT's handler explicitly: a job started in the background of a shell inherits
    # SIGINT ignored, and Python keeps an ignored SIGINT ignored.
    code = (
        "import signal, sys, pytest; "
        "signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.exit(pytest.main())"
    )
    session = subprocess.Popen(
        [sys.executable, "-c", code, "--perfguard", "--perfguard-baseline=none", *ISOLATE],
        cwd=suite_writer.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        end = time.monotonic() + 180
        while len(_pids(suites, "worker") + _pids(suites, "child")) < 2:
            assert session.poll() is None, session.communicate()[0]
            assert time.monotonic() < end, "the worker never opened its cell"
            time.sleep(0.1)
        (worker,) = _pids(suites, "worker")
        (child,) = _pids(suites, "child")
        session.send_signal(signum)
        output, _ = session.communicate(timeout=120)
        if signum in (signal.SIGTERM, signal.SIGKILL):  # dies of it, as without perfguard
            assert session.returncode == -signum, output
        else:  # pytest's KeyboardInterrupt: "Interrupted", exit status 2
            assert session.returncode == pytest.ExitCode.INTERRUPTED, output
            assert "KeyboardInterrupt" in output
        assert gone(worker)
        assert gone(child)
    finally:
        if session.poll() is None:  # pragma: no cover - only when the test fails
            session.kill()
            session.communicate()
        _kill_leftovers(suites)


# --------------------------------------------------------------------------- the setting


@pytest.mark.parametrize(
    ("args", "ini", "shown"),
    [
        (["--perfguard-open-timeout=0"], "", "0.0"),
        (["--perfguard-open-timeout=nan"], "", "nan"),
        ([], "perfguard_open_timeout = soon\n", "'soon'"),
    ],
)
def test_a_bad_open_timeout_is_a_usage_error(
    pytester: pytest.Pytester, args: list[str], ini: str, shown: str
) -> None:
    pytester.makeini("[pytest]\n" + ini)
    result = pytester.runpytest("--perfguard", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*perfguard: open timeout is {shown}; expected a number of seconds > 0*"
            "Fix: set --perfguard-open-timeout or ini perfguard_open_timeout*"
        ]
    )


# --------------------------------------------------------------------------- xdist + A/B


def test_sigterm_to_the_xdist_controller_alone_leaves_no_worktree(
    suite_writer: pytest.Pytester,
) -> None:
    """``docker stop`` signals the container's first process only: the controller. Its
    xdist workers each hold an A/B base worktree. They used to notice only through
    execnet, which SIGINTs a worker 5 s after its controller went and ends it with
    ``os._exit`` 10 s later, often before its worktree was removed; now the kernel
    sends each SIGTERM as the controller dies, and the worktrees go within a moment
    (4 s allowed, before execnet's own attempt could start)."""
    repo = suite_writer.path
    suites = repo / "suites"
    suites.mkdir()
    (suites / "procmodels.py").write_text(MODELS)
    # The forward sleeps: both workers stay busy in their cell's warm-up.
    body = FAST_DEFAULTS + (
        "models:\n  m: {factory: 'procmodels:slow_forward', inputs: {x: {shape: [2, 8]}}}\n"
        "scenarios:\n  - {name: a, model: m}\n  - {name: b, model: m}\n"
    )
    (suites / "s.yaml").write_text(body)
    (repo / ".gitignore").write_text("reports/\n.perfguard/\n__pycache__/\ntmp/\n")
    run_git(repo, "init", "-q", "-b", "main")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "base")
    run_git(repo, "commit", "-q", "--allow-empty", "-m", "head")
    tmp = repo / "tmp"
    tmp.mkdir()
    log = (repo / "session.log").open("w")
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--perfguard", "-p", "xdist", "-n", "2",
         "--perfguard-ab=HEAD~1", "-p", "no:cacheprovider"],
        cwd=repo,
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip

    def worktrees() -> int:
        return len(run_git(repo, "worktree", "list").splitlines())

    try:
        end = time.monotonic() + 180
        while worktrees() < 3:  # both xdist workers hold a base worktree
            assert session.poll() is None, (repo / "session.log").read_text()
            assert time.monotonic() < end, "the workers never checked the base out"
            time.sleep(0.2)
        session.send_signal(signal.SIGTERM)
        assert session.wait(timeout=120) == -signal.SIGTERM
        end = time.monotonic() + 4
        while worktrees() > 1 or list(tmp.glob("perfguard-ab-*")):
            assert time.monotonic() < end, run_git(repo, "worktree", "list")
            time.sleep(0.1)
    finally:
        if session.poll() is None:  # pragma: no cover - only when the test fails
            session.kill()
            session.wait()
        log.close()
