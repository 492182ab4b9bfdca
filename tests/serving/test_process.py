"""A served model's server process (perfguard.serving.process): started, ready, stopped,
and never left running, with a real llama.cpp server where one is needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfguard.core.errors import ServerError
from perfguard.core.signals import guarded
from perfguard.serving.process import ServerProcess, free_port, log_tail, server_env
from tests.helpers.processes import alive, gone
from tests.helpers.served import llama_server


def _process(tmp_path: Path, args: list[str]) -> ServerProcess:
    return ServerProcess(
        args, cwd=tmp_path, env=server_env({}), log=tmp_path / "server.log", name="the test's"
    )


def test_a_real_server_gets_ready_and_its_whole_group_stops(tmp_path: Path) -> None:
    with llama_server(tmp_path) as (base, proc):
        pid = proc.pid
        assert pid is not None and alive(pid)
        assert pid in guarded()  # killed by perfguard's SIGTERM/SIGINT/exit guard too
    assert gone(pid, 10)
    assert pid not in guarded()
    assert "uvicorn" in (tmp_path / f"server-{base.rsplit(':', 1)[1]}.log").read_text().lower()


def test_a_server_that_exits_at_start_fails_with_its_log_tail(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "llama_cpp.server", "--model", "missing.gguf", "--port"]
    proc = _process(tmp_path, [*args, str(free_port())])
    proc.start()
    with pytest.raises(ServerError) as info:
        proc.wait_ready("http://127.0.0.1:1/v1/models", 60.0)
    message = str(info.value)
    assert "exited with status 1 before it was ready" in message
    assert "missing.gguf" in message  # the server's own words, from the log's tail
    assert "run the command by hand" in message
    proc.stop()


def test_a_server_too_slow_to_start_is_stopped_with_the_reason(tmp_path: Path) -> None:
    proc = _process(
        tmp_path, [sys.executable, "-c", "print('loading...'); import time; time.sleep(60)"]
    )
    proc.start()
    pid = proc.pid
    assert pid is not None
    started = time.monotonic()
    with pytest.raises(ServerError) as info:
        proc.wait_ready(f"http://127.0.0.1:{free_port()}/health", 1.0)
    assert time.monotonic() - started < 10
    message = str(info.value)
    assert "was not ready after 1 s" in message and "it has been stopped" in message
    assert "loading..." in message and "raise `server.start_timeout_s`" in message
    assert gone(pid, 10)


def test_a_command_that_cannot_run_says_so(tmp_path: Path) -> None:
    proc = _process(tmp_path, ["no-such-server-binary", "--port", "1"])
    proc.start()  # the launcher starts; its exec fails and it exits with the reason
    with pytest.raises(ServerError) as info:
        proc.wait_ready("http://127.0.0.1:1/health", 30.0)
    assert "cannot run the server command 'no-such-server-binary'" in str(info.value)
    proc.stop()


def test_a_server_whose_leader_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    proc = _process(tmp_path, [sys.executable, "-c", code])
    proc.start()
    pid = proc.pid
    assert pid is not None
    time.sleep(0.5)
    started = time.monotonic()
    proc.stop(grace_s=0.5)
    assert gone(pid, 5) and time.monotonic() - started < 5


_OWNER = textwrap.dedent(
    """\
    import sys, time
    from pathlib import Path
    from perfguard.serving.process import ServerProcess, server_env
    folder = Path(sys.argv[1])
    proc = ServerProcess(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        cwd=folder, env=server_env({}), log=folder / "s.log", name="owned",
    )
    proc.start()
    print(proc.pid, flush=True)
    time.sleep(120)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_server_never_outlives_perfguard(tmp_path: Path, signum: int) -> None:
    """SIGKILL: the launcher's parent-death signal; SIGTERM/SIGINT: the guard kills it."""
    with subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    ) as owner:
        try:
            assert owner.stdout is not None
            server = int(owner.stdout.readline())
            time.sleep(0.5)
            assert alive(server)
            owner.send_signal(signum)
            owner.wait(10)
            assert gone(server, 10), f"the server outlived perfguard after signal {signum}"
        finally:
            owner.kill()


def test_the_log_tail_keeps_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(50)) + "\n\n")
    tail = log_tail(log, 3)
    assert tail.splitlines() == ["    line 47", "    line 48", "    line 49"]
    (tmp_path / "empty.log").write_text("\n \n")
    assert log_tail(tmp_path / "empty.log") == "    (the server wrote nothing)"
    assert "cannot read the log" in log_tail(tmp_path / "missing.log")
