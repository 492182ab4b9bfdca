"""Worker processes (perfguard.worker): the protocol, a real tiny model, every failure mode.

Real workers run ``python -m perfguard.worker`` on a suite written into tmp_path;
the protocol-garbage cases use small fake worker scripts via ``command=``.
No timing assertions: latencies are only checked to be positive.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from perfguard.core.errors import (
    CellNotFound,
    ModelError,
    PerfguardError,
    ProtocolError,
    SuiteError,
    WorkerCrashed,
    WorkerError,
    WorkerRequestFailed,
    WorkerTimeout,
)
from perfguard.core.signals import guarded
from perfguard.measure.opencell import RunContext
from perfguard.measure.profiling import PROFILE_REQUESTS
from perfguard.records.opprofile import OperatorProfile
from perfguard.records.results import ScenarioResult
from perfguard.suite.loader import load_suite
from perfguard.worker import PROTOCOL_VERSION, WorkerProcess, describe_exit
from perfguard.worker.isolate import IsolatedRun
from perfguard.worker.protocol import check_reply, decode, encode, quote
from perfguard.worker.serve import Server
from tests.helpers.models import SLEEPY_MODEL
from tests.helpers.processes import gone
from tests.helpers.suites import FAST_DEFAULTS

MODELS = textwrap.dedent(
    """
    import os
    import signal
    import sys
    import time

    import torch
    from torch import nn


    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


    class Dies(nn.Module):
        def __init__(self, how):
            super().__init__()
            self.how = how

        def forward(self, x):
            sys.stderr.write(f"model about to {self.how}\\n")
            sys.stderr.flush()
            if self.how == "chat":
                print("chatty forward says hi")
                os.write(1, b"native write to fd 1\\n")
            if self.how == "exit":
                os._exit(3)
            if self.how == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            if self.how == "hang":
                time.sleep(3600)
            if self.how == "raise":
                raise RuntimeError("the model broke on purpose")
            return x


    def dies(how):
        if how == "chat":
            print("chatty factory says hi")
        return Dies(how).eval()
    """
)

HOWS = ("chat", "exit", "segv", "hang", "raise")  # a model and a cell of each name
SUITE = (
    FAST_DEFAULTS
    + "models:\n  mlp: {factory: 'wmodels:mlp', inputs: {x: {shape: [2, 8], seed: 1}}}\n"
    + "".join(
        f"  {how}: {{factory: 'wmodels:dies', kwargs: {{how: {how}}}, "
        "inputs: {x: {shape: [2, 8]}}}\n"
        for how in HOWS
    )
    + "scenarios:\n  - {name: mlp, model: mlp, matrix: {precision: [fp32, int8]}}\n"
    + "".join(f"  - {{name: {how}, model: {how}}}\n" for how in HOWS)
)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "wmodels.py").write_text(MODELS)
    path = tmp_path / "s.yaml"
    path.write_text(SUITE)
    return path


def _open(worker: WorkerProcess, suite: Path, cell: str) -> dict[str, Any]:
    return worker.open_cell(suite, cell, suite.parent, suite.parent / ".cache", timeout_s=120)


def _fake(tmp_path: Path, body: str) -> list[str]:
    """A fake worker: ``body`` runs once per request line with ``req`` (a dict) and ``reply``."""
    script = tmp_path / "fake_worker.py"
    script.write_text(
        "import json, os, sys, time\n"
        "def reply(obj):\n"
        "    sys.stdout.write(json.dumps(obj) + '\\n')\n"
        "    sys.stdout.flush()\n"
        "for line in sys.stdin:\n"
        "    req = json.loads(line)\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )
    return [sys.executable, str(script)]


def _assert_gone(worker: WorkerProcess) -> None:
    """Reaped: an exit status is known and no zombie is left behind."""
    assert worker.poll() is not None
    if sys.platform.startswith("linux"):
        assert not Path(f"/proc/{worker.pid}").exists()


# --- a real worker on a real tiny model ------------------------------------------


def test_profile_op_profiles_the_open_cell_and_it_keeps_serving(suite: Path) -> None:
    trace = suite.parent / "traces" / "mlp.json"
    with WorkerProcess(name="P", cwd=suite.parent) as worker:
        _open(worker, suite, "mlp[fp32]")
        measured = worker.measure(k=2)
        profile = worker.profile(3, trace)
        assert isinstance(profile, OperatorProfile) and profile.profiler == "torch.profiler"
        assert profile.requests == 3 and profile.trace == "mlp.json"
        assert {n.name for n in profile.nodes} == {"(model)", "0", "1", "2"}
        assert {n.op_type for n in profile.nodes} == {"Sequential", "Linear", "ReLU"}
        assert "traceEvents" in json.loads(trace.read_text())
        assert len(worker.measure(k=2)) == len(measured) and worker.check()["outputs"] == 1
        assert worker.profile().requests == PROFILE_REQUESTS  # the default, no trace kept
        with pytest.raises(ProtocolError, match="requests=0"):
            worker.profile(0)
        assert worker.profile(1, slot="main").requests == 1


def test_an_isolated_cell_is_profiled_in_its_worker_after_measuring(suite: Path) -> None:
    (scenario,) = [s for s in load_suite(suite).scenarios if s.item_name == "mlp[fp32]"]
    ctx = RunContext(rootdir=suite.parent, cache_dir=suite.parent / ".cache")
    with IsolatedRun(scenario, ctx) as run:
        assert len(run.measure().samples_ns) == 30
        profile = run.profile(2, suite.parent / "mlp.json")
        assert profile.requests == 2 and (suite.parent / "mlp.json").is_file()
        assert len(run.measure().samples_ns) == 30  # measured again after the profile


def test_round_trip_on_a_real_model(suite: Path) -> None:
    with WorkerProcess(name="A", cwd=suite.parent) as worker:
        info = worker.info
        assert info["protocol"] == PROTOCOL_VERSION == 1
        assert info["pid"] == worker.pid
        assert Path(info["cwd"]).resolve() == suite.parent.resolve()
        assert info["python"] == ".".join(map(str, sys.version_info[:3]))
        opened = _open(worker, suite, "mlp[fp32]")
        assert opened["scenario_id"] == "s.yaml::mlp[fp32]"
        assert opened["batch"] == 2
        assert [opened[k] for k in ("backend", "device", "precision")] == ["torch", "cpu", "fp32"]
        assert isinstance(opened["runtime"], dict) and opened["runtime"]["threads"] == 1
        warm = worker.warmup(iterations=3, seconds=0)
        assert warm["iterations"] >= 3
        assert 0 < warm["cold_start_ns"] <= warm["elapsed_ns"]
        samples = worker.measure(k=5)
        assert len(samples) == 5 and all(isinstance(s, int) and s > 0 for s in samples)
        assert len(worker.measure(k=1)) == 1
        loop = worker.loop()
        assert len(loop["samples_ns"]) == 30  # FAST_DEFAULTS: 30 iterations, no minimum time
        assert all(s > 0 for s in loop["samples_ns"])
        assert loop["warmup_iterations"] >= 2 and loop["cold_start_ns"] > 0
        assert isinstance(loop["stable"], bool) and isinstance(loop["stopped_by_cap"], bool)
        assert loop["measure_ns"] >= sum(loop["samples_ns"])
        assert loop["runtime"]["precision"] == "fp32"
        measured = ScenarioResult.from_dict(worker.request("result", timeout_s=120)["result"])
        assert measured.id == "s.yaml::mlp[fp32]" and len(measured.samples_ns) == 30
        assert measured.canary_ns is not None and measured.latency_ns is not None
        assert worker.check()["outputs"] == 1
        assert worker.close_cell()["closed"] is True
        assert worker.close_cell()["closed"] is False
        # another cell in the same worker
        assert _open(worker, suite, "mlp[int8]")["precision"] == "int8"
        assert len(worker.measure(k=2)) == 2
    assert worker.poll() == 0  # `bye` -> exit status 0
    _assert_gone(worker)


def test_pairs_alternate_two_slots_in_one_worker(suite: Path) -> None:
    """``pairs``: one sample per slot per pair, in the order asked; slots stay separate."""
    with WorkerProcess(name="A/B", cwd=suite.parent) as worker:
        for slot, cell in (("a", "mlp[fp32]"), ("b", "hang")):
            worker.request(
                "open", timeout_s=120, slot=slot, suite=str(suite), cell=cell,
                rootdir=str(suite.parent), cache_dir=str(suite.parent / ".cache"),
            )  # fmt: skip
        # Slot b's model would hang: `pairs` over slots a and "main" must not touch it.
        with pytest.raises(ProtocolError, match="no cell is open in slot 'main'"):
            worker.request("pairs", timeout_s=30, order=[True], slots=["a", "main"])
        worker.request(
            "open", timeout_s=120, slot="b", suite=str(suite), cell="mlp[int8]",
            rootdir=str(suite.parent), cache_dir=str(suite.parent / ".cache"),
        )  # fmt: skip
        order = [True, False, False, True, True]
        reply = worker.request("pairs", timeout_s=60, order=order)
        assert len(reply["a_ns"]) == len(reply["b_ns"]) == len(order)
        assert all(isinstance(x, int) and x > 0 for x in reply["a_ns"] + reply["b_ns"])


def test_model_printing_to_stdout_does_not_break_the_protocol(suite: Path) -> None:
    with WorkerProcess(name="chatty") as worker:
        _open(worker, suite, "chat")
        worker.warmup(iterations=2, seconds=0)
        assert len(worker.measure(k=3)) == 3
        assert len(worker.loop()["samples_ns"]) == 30
        tail = worker.stderr_tail()
    assert "chatty forward says hi" in tail
    assert "native write to fd 1" in tail
    assert "chatty factory says hi" in worker.stderr_tail(lines=100_000)


def test_failed_commands_are_replies_and_the_worker_keeps_serving(
    suite: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("models:\n  m: {factory: x:y\nscenarios: []\n")
    with WorkerProcess(name="w") as worker:
        with pytest.raises(ProtocolError, match="no cell is open"):
            worker.measure(k=1)
        with pytest.raises(SuiteError, match=r"broken\.yaml:3: malformed YAML") as bad:
            _open(worker, broken, "m")
        assert "in worker 'w'" in str(bad.value)
        assert bad.value.location is not None and bad.value.location.line == 3
        with pytest.raises(CellNotFound, match=r"no cell 'nope\[x\]'") as missing:
            _open(worker, suite, "nope[x]")
        assert isinstance(missing.value, SuiteError)
        assert "mlp[fp32], mlp[int8], chat, exit" in str(missing.value)
        _open(worker, suite, "raise")
        with pytest.raises(WorkerRequestFailed, match="raised RuntimeError") as failed:
            worker.measure(k=1)
        assert failed.value.remote_type == "RuntimeError"
        assert "the model broke on purpose" in str(failed.value)
        assert "--- traceback of worker 'w'" in str(failed.value)
        assert "in forward" in failed.value.tail
        with pytest.raises(ModelError, match="model 'raise' raised RuntimeError"):
            worker.loop()  # run_loop's own located ModelError
        _open(worker, suite, "mlp[fp32]")
        assert len(worker.measure(k=2)) == 2
    assert worker.poll() == 0


# --- the worker dies, hangs, or the pipe is garbled ------------------------------


@pytest.mark.parametrize(
    ("cell", "status"),
    [("exit", "died with exit status 3"), ("segv", "was killed by signal SIGSEGV (11)")],
)
def test_a_worker_that_dies_is_worker_crashed(suite: Path, cell: str, status: str) -> None:
    with WorkerProcess(name="A") as worker:
        _open(worker, suite, cell)
        with pytest.raises(WorkerCrashed) as crashed:
            worker.warmup(iterations=2, seconds=0, timeout_s=120)
        text = str(crashed.value)
        assert f"worker 'A' (pid {worker.pid}) {status} while answering `warmup`" in text
        assert f"model about to {cell}" in text
        assert "--- stderr of worker 'A'" in text
        _assert_gone(worker)
        with pytest.raises(WorkerCrashed, match="gone after an earlier failure"):
            worker.measure(k=1)  # never hangs
    if cell == "segv":  # faulthandler's dump names the model's frame
        assert "Segmentation fault" in worker.stderr_tail(lines=200)


def test_a_hanging_model_is_a_timeout_and_the_worker_is_killed(suite: Path) -> None:
    worker = WorkerProcess(name="slow")
    with worker:
        _open(worker, suite, "hang")
        with pytest.raises(WorkerTimeout) as timed_out:
            worker.warmup(iterations=2, seconds=0, timeout_s=1.0)
        _assert_gone(worker)
        text = str(timed_out.value)
        assert "gave no reply to `warmup` within 1 s; it was killed" in text
        with pytest.raises(WorkerTimeout, match="gone after an earlier failure"):
            worker.measure(k=1)
    # The worker dumped its stacks (faulthandler on SIGUSR1) before being killed.
    full = worker.stderr_tail(lines=500)
    assert "model about to hang" in full
    assert "in forward" in full


@pytest.mark.parametrize(
    ("body", "error", "fragments"),
    [
        ("time.sleep(3600)", WorkerTimeout, ["gave no reply to `hello` within 0.5 s"]),
        (
            "sys.stderr.write('cannot import this\\n'); sys.exit(5)",
            WorkerCrashed,
            ["died with exit status 5 while starting", "cannot import this"],
        ),
    ],
)
def test_a_worker_that_fails_at_start(
    tmp_path: Path, body: str, error: type[WorkerError], fragments: list[str]
) -> None:
    worker = WorkerProcess(name="B", command=_fake(tmp_path, body), startup_timeout_s=0.5)
    with pytest.raises(error) as failed:
        worker.start()
    assert all(fragment in str(failed.value) for fragment in fragments)
    _assert_gone(worker)
    worker.close()  # idempotent after a failed start


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("print('Loading weights... done')", r"not JSON: 'Loading weights\.\.\. done'"),
        (
            "reply({'v': 2, 'id': req['id'], 'ok': True})",
            r"speaks worker protocol version 2, this perfguard speaks version 1",
        ),
        (
            "reply({'v': 1, 'id': req['id'] + 100, 'ok': True})",
            r"answered request id 101 while request 1 was waiting",
        ),
        ("reply([1, 2])", r"JSON list, not an object"),
        ("reply({'v': 1, 'id': req['id']})", r"without a boolean `ok`"),
        ("print('x' * 5000)", r"not JSON: 'x{200}' \.\.\. \(5000 characters\)"),
        (
            "reply({'v': 1, 'id': req['id'], 'ok': True, 'protocol': 2, 'perfguard': '9.9'})",
            r"runs perfguard '9\.9' and speaks worker protocol 2; this perfguard "
            r"\S+ speaks protocol 1",
        ),
    ],
)
def test_garbage_on_the_pipe_is_a_protocol_error(tmp_path: Path, body: str, match: str) -> None:
    worker = WorkerProcess(name="fake", command=_fake(tmp_path, body))
    with pytest.raises(ProtocolError, match=match) as garbled:
        worker.start()
    assert "worker 'fake'" in str(garbled.value)
    _assert_gone(worker)


def test_close_is_idempotent_and_always_reaps(tmp_path: Path) -> None:
    answers = "reply({'v': 1, 'id': req['id'], 'ok': True, 'protocol': 1})"
    worker = WorkerProcess(name="idle", command=_fake(tmp_path, answers))
    worker.close()  # never started: nothing to do
    worker = WorkerProcess(name="idle", command=_fake(tmp_path, answers))
    worker.start()
    assert worker.request("anything", timeout_s=10)["ok"] is True
    worker.close()
    _assert_gone(worker)
    worker.close()
    with pytest.raises(WorkerError, match="is closed"):
        worker.measure(k=1)
    # A worker that ignores `bye` is killed after the grace period.
    stubborn = _fake(
        tmp_path,
        "if req['op'] == 'bye':\n    time.sleep(3600)\n"
        "reply({'v': 1, 'id': req['id'], 'ok': True, 'protocol': 1})",
    )
    worker = WorkerProcess(name="stubborn", command=stubborn)
    worker.start()
    worker.close(timeout_s=0.5)
    _assert_gone(worker)
    assert worker.poll() == -signal.SIGKILL


# A fake worker whose "model" starts a helper process (`sleep`) when it says hello.
SPAWNS = (
    "if req['op'] == 'hello':\n"
    "    import subprocess\n"
    "    child = subprocess.Popen(['sleep', '300'])\n"
    "if req['op'] == 'hang':\n"
    "    time.sleep(3600)\n"
    "reply({'v': 1, 'id': req['id'], 'ok': True, 'protocol': 1, 'child': child.pid})"
)
SIGNALS = (signal.SIGTERM, signal.SIGINT)
linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


@linux_only
def test_a_worker_leads_a_process_group_killed_whole_on_close(tmp_path: Path) -> None:
    before = [signal.getsignal(s) for s in SIGNALS]
    with WorkerProcess(name="spawner", command=_fake(tmp_path, SPAWNS)) as worker:
        assert worker.pid is not None
        child = worker.info["child"]
        assert os.getpgid(worker.pid) == worker.pid != os.getpgrp()
        assert os.getpgid(child) == worker.pid
        assert guarded() == {worker.pid: "spawner"}
        # Handlers for SIGTERM and SIGINT exist while a worker does (not only in A/B).
        assert all(signal.getsignal(s) is not b for s, b in zip(SIGNALS, before, strict=True))
    _assert_gone(worker)
    assert gone(child)
    assert guarded() == {}
    assert [signal.getsignal(s) for s in SIGNALS] == before


@linux_only
def test_a_timed_out_worker_is_killed_with_its_children(tmp_path: Path) -> None:
    with WorkerProcess(name="hangs", command=_fake(tmp_path, SPAWNS)) as worker:
        child = worker.info["child"]
        with pytest.raises(WorkerTimeout, match=r"gave no reply to `hang` within 0\.5 s"):
            worker.request("hang", timeout_s=0.5)
        _assert_gone(worker)
        assert gone(child)
        assert guarded() == {}


@linux_only
def test_ctrl_c_kills_the_worker_groups_then_interrupts(tmp_path: Path) -> None:
    """In a process group of its own the worker no longer gets the terminal's Ctrl-C."""
    with WorkerProcess(name="spawner", command=_fake(tmp_path, SPAWNS)) as worker:
        assert worker.pid is not None
        child = worker.info["child"]
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert gone(worker.pid)
        assert gone(child)
    _assert_gone(worker)


def test_pythonpath_first_and_cwd_select_the_code_the_worker_runs(tmp_path: Path) -> None:
    """What a same-run A/B needs: a worktree's own perfguard is the one imported."""
    shadow = tmp_path / "worktree"
    (shadow / "perfguard" / "worker").mkdir(parents=True)
    (shadow / "perfguard" / "__init__.py").write_text("__version__ = '0.0.shadow'\n")
    (shadow / "perfguard" / "worker" / "__init__.py").write_text("")
    (shadow / "perfguard" / "worker" / "__main__.py").write_text(
        "import json, os, sys\n"
        "import perfguard\n"
        "for line in sys.stdin:\n"
        "    req = json.loads(line)\n"
        "    out = {'v': 1, 'id': req['id'], 'ok': True, 'protocol': 1,\n"
        "           'perfguard': perfguard.__version__, 'cwd': os.getcwd()}\n"
        "    print(json.dumps(out), flush=True)\n"
        "    if req['op'] == 'bye':\n"
        "        break\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with WorkerProcess(name="base", cwd=elsewhere, pythonpath_first=shadow) as worker:
        assert worker.info["perfguard"] == "0.0.shadow"
        assert Path(worker.info["cwd"]).resolve() == elsewhere.resolve()
    assert worker.poll() == 0


# --- the protocol and the server, in process --------------------------------------


def test_encode_decode_and_quote() -> None:
    line = encode({"v": 1, "id": 3, "ok": True, "text": "a\nb", "path": Path("/x")})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    message = decode(line, who="w")
    assert message["text"] == "a\nb" and message["path"] == "/x"
    check_reply(message, 3, line, "w")
    with pytest.raises(ProtocolError, match="answered request id 3 while request 4"):
        check_reply(message, 4, line, "w")
    assert quote(b"abc\n") == "'abc'"
    assert describe_exit(3) == "exit status 3"
    assert describe_exit(-11) == "killed by signal SIGSEGV (11)"
    assert "out-of-memory" in describe_exit(-9)
    for cls in (WorkerCrashed, WorkerTimeout, ProtocolError):
        assert issubclass(cls, WorkerError) and issubclass(cls, PerfguardError)
    error = WorkerCrashed("it died", worker="A", tail="line 1\nline 2", tail_label="stderr")
    assert str(error).endswith("--- stderr of worker 'A' (last lines) ---\nline 1\nline 2")
    quiet = WorkerCrashed("it died", worker="A", tail="", tail_label="stderr")
    assert "wrote nothing to stderr" in str(quiet)


def _serve(server: Server, request: object) -> dict[str, object]:
    raw = request if isinstance(request, bytes) else json.dumps(request).encode()
    reply = json.loads(server.handle_line(raw))
    assert isinstance(reply, dict) and reply["v"] == 1
    return reply


@pytest.mark.parametrize(
    ("request_line", "fragment"),
    [
        (b"not json\n", "the request is not JSON: 'not json'"),
        ({"v": 1, "id": 1, "op": "pairs", "order": [1, 0]}, "order='[1, 0]'"),
        ({"v": 1, "id": 1, "op": "pairs", "order": []}, "a non-empty list of booleans"),
        ({"v": 1, "id": 1, "op": "pairs", "order": [True], "slots": ["a", "a"]}, "two different"),
        ({"v": 1, "id": 1, "op": "pairs", "order": [True]}, "no cell is open in slot 'a'"),
        ({"v": 2, "id": 1, "op": "hello"}, "protocol version 2"),
        ({"v": 1, "id": 1, "op": "fly"}, "unknown op 'fly'"),
        ({"v": 1, "id": 1, "op": "measure", "k": 1}, "no cell is open"),
        ({"v": 1, "id": 1, "op": "open", "suite": "s.yaml"}, "cell=None"),
        ({"v": 1, "id": 1, "op": "profile"}, "`profile` was sent while no cell is open"),
    ],
)
def test_server_answers_bad_requests_with_errors(request_line: object, fragment: str) -> None:
    server = Server()
    error = _serve(server, request_line)["error"]
    assert isinstance(error, dict) and error["type"] == "ProtocolError"
    assert fragment in error["message"] and isinstance(error["traceback_tail"], str)
    assert _serve(server, {"v": 1, "id": 2, "op": "hello"})["ok"] is True
    bye = _serve(server, {"v": 1, "id": 3, "op": "bye"})
    assert bye == {"v": 1, "id": 3, "ok": True} and server.stop


def test_pairs_credit_each_request_to_its_own_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock that only the models move: a costs 1000 ns, b 5000 ns, in any order."""
    now = [0]
    calls: list[str] = []

    class FakeCell:
        def __init__(self, name: str, cost: int) -> None:
            def call() -> None:
                calls.append(name)
                now[0] += cost

            self.call, self.sync = call, None
            self.generative = False
            self.plant = None

    monkeypatch.setattr("perfguard.worker.serve.time.perf_counter_ns", lambda: now[0])
    server = Server()
    server.cells.update({"a": FakeCell("a", 1000), "b": FakeCell("b", 5000)})  # type: ignore[dict-item]
    order = [True, False, False, True, False]
    reply = _serve(server, {"v": 1, "id": 1, "op": "pairs", "order": order})
    assert reply["ok"] is True
    assert reply["a_ns"] == [1000] * 5 and reply["b_ns"] == [5000] * 5
    assert calls == [c for first in order for c in (("a", "b") if first else ("b", "a"))]


def test_load_ops_run_short_levels_of_a_load_cell(tmp_path: Path) -> None:
    """`load_warmup` and `load_level` (same-run A/B under load), in-process."""
    (tmp_path / "wmodels.py").write_text(MODELS)
    path = tmp_path / "load.yaml"
    path.write_text(
        FAST_DEFAULTS.replace("iterations: 30", "iterations: 100")
        + "models:\n  mlp: {factory: 'wmodels:mlp', inputs: {x: {shape: [2, 8], seed: 1}}}\n"
        + "scenarios:\n  - {name: busy, model: mlp, load: {concurrency: 2}}\n"
        + "  - {name: single, model: mlp}\n"
    )
    server = Server()
    where = {"rootdir": str(tmp_path), "cache_dir": str(tmp_path / ".cache")}
    try:
        for slot, cell in (("a", "busy[c2]"), ("b", "single")):
            opened = _serve(
                server,
                {"v": 1, "id": 1, "op": "open", "slot": slot, "suite": str(path), "cell": cell}
                | where,
            )
            assert opened["ok"] is True, opened
        warm = _serve(server, {"v": 1, "id": 2, "op": "load_warmup", "slot": "a"})
        assert warm["ok"] is True and warm["iterations"] >= 1
        level = {"v": 1, "id": 3, "op": "load_level", "slot": "a", "seconds": 0.05}
        reply = _serve(server, level | {"iterations": 10, "seed_offset": 4})
        assert reply["ok"] is True, reply
        assert len(reply["samples_ns"]) >= 10 and reply["throughput"] > 0
        assert reply["load"]["concurrency"] == 2 and reply["load"]["failed"] == 0
        bad = _serve(server, level | {"iterations": 0, "seed_offset": 4})
        assert bad["ok"] is False and "iterations=0" in bad["error"]["message"]
        single = _serve(server, {"v": 1, "id": 4, "op": "load_warmup", "slot": "b"})
        assert single["ok"] is False and "has no `load:`" in single["error"]["message"]
    finally:
        server.shutdown()


def test_load_interleaved_shares_one_level_between_two_slots(tmp_path: Path) -> None:
    """`load_interleaved`: one level whose clients alternate between two load cells,
    each cell's own requests in its own reply (the slower model's on its side)."""
    (tmp_path / "sleepers.py").write_text(SLEEPY_MODEL)
    path = tmp_path / "load.yaml"
    path.write_text(
        FAST_DEFAULTS.replace("iterations: 30", "iterations: 100")
        + "models:\n"
        + "  fast: {factory: 'sleepers:sleepy', kwargs: {ms: 1}, inputs: {x: {shape: [1, 8]}}}\n"
        + "  slow: {factory: 'sleepers:sleepy', kwargs: {ms: 4}, inputs: {x: {shape: [1, 8]}}}\n"
        + "scenarios:\n  - {name: f, model: fast, load: {concurrency: 2}}\n"
        + "  - {name: s, model: slow, load: {concurrency: 2}}\n"
        + "  - name: o\n    model: fast\n    load: {rate: 100/s}\n"
        + "    measure: {iterations: 100, seconds: 1}\n"
    )
    server = Server()
    where = {"rootdir": str(tmp_path), "cache_dir": str(tmp_path / ".cache")}
    try:
        for slot, cell in (("a", "f[c2]"), ("b", "s[c2]"), ("o", "o[r100]")):
            opened = _serve(
                server,
                {"v": 1, "id": 1, "op": "open", "slot": slot, "suite": str(path), "cell": cell}
                | where,
            )
            assert opened["ok"] is True, opened
        level = {"v": 1, "id": 2, "op": "load_interleaved", "seconds": 0.1, "iterations": 20}
        reply = _serve(server, level | {"first": 1})
        assert reply["ok"] is True, reply
        fast, slow = reply["sides"]
        assert fast["load"]["concurrency"] == 2 == slow["load"]["concurrency"]
        assert len(fast["samples_ns"]) + len(slow["samples_ns"]) >= 20
        assert abs(len(fast["samples_ns"]) - len(slow["samples_ns"])) <= 2
        assert min(slow["samples_ns"]) >= 4_000_000  # a sleep never returns early
        assert sorted(fast["samples_ns"])[len(fast["samples_ns"]) // 2] < min(slow["samples_ns"])
        # Little's law: 2 clients at the slow side's latency can not exceed 2 / 4 ms.
        assert 0 < slow["throughput"] <= 500.0 < fast["throughput"]
        for bad, fragment in (
            ({"first": 2}, "first=2"),
            ({"first": 0, "slots": ["a", "a"]}, "two different slot names"),
            ({"first": 0, "slots": ["a", "o"]}, "cannot interleave c2 with r100"),
        ):
            failed = _serve(server, level | bad)
            assert failed["ok"] is False and fragment in failed["error"]["message"], failed
    finally:
        server.shutdown()


GENERATIVE_SUITE = """\
defaults: {threads: 1, warmup: {iterations: 2, seconds: 0}, measure: {iterations: 6, seconds: 0}}
models:
  lm:
    factory: perfguard_examples.tinylm:build
    kwargs: {layers: 1, hidden: 32, heads: 2, kv_heads: 1, vocab: 64}
scenarios:
  - {name: gen, model: lm, isolate: true, generate: {prompt_tokens: 8, new_tokens: 4}}
"""


def test_an_isolated_generative_cell_is_measured_whole_in_its_worker(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    suite = tmp_path / "g.yaml"
    suite.write_text(GENERATIVE_SUITE)
    (scenario,) = load_suite(suite).scenarios
    ctx = RunContext(rootdir=tmp_path, cache_dir=tmp_path / ".cache")
    with IsolatedRun(scenario, ctx) as run:
        result = run.measure()
    assert result.tokens is not None and result.tokens.requests == 6
    assert result.tokens.new_tokens == 4 and len(result.samples_ns) == 6
    with WorkerProcess(name="G", cwd=tmp_path) as worker:
        opened = _open(worker, suite, "gen[p8]")
        assert opened["runtime"]["kv_cache"] == "DynamicCache"
        with pytest.raises(ProtocolError, match="a generative cell"):
            worker.request("check")


def test_generative_cells_answer_measure_and_pairs_with_token_times(
    tmp_path: Path, suite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What same-run A/B sends a generative cell: `warmup`, then `pairs` (one request of
    each slot per pair, each request's token times) or `measure`."""
    pytest.importorskip("transformers")
    generative = tmp_path / "g.yaml"
    generative.write_text(GENERATIVE_SUITE)
    monkeypatch.syspath_prepend(str(tmp_path))
    where = {"rootdir": str(tmp_path), "cache_dir": str(tmp_path / ".cache")}
    server = Server()
    try:
        for slot in ("a", "b"):
            opened = _serve(
                server,
                {"v": 1, "id": 1, "op": "open", "slot": slot, "suite": str(generative)}
                | {"cell": "gen[p8]"}
                | where,
            )
            assert opened["ok"] is True, opened
            warm = {"v": 1, "id": 2, "op": "warmup", "slot": slot, "iterations": 3}
            assert _serve(server, warm | {"seconds": 0})["ok"] is True
        a, b = (server.cells[s].requests for s in "ab")
        assert a is not None and b is not None
        a.turn += 5  # pairs send one prompt to both sides, whatever each side sent before
        reply = _serve(server, {"v": 1, "id": 3, "op": "pairs", "order": [True, False, True]})
        assert reply["ok"] is True, reply
        assert a.turn == b.turn == 8 + 3 and not a.rows and not b.rows
        for side in "ab":
            rows = reply[f"{side}_tokens"]
            assert len(rows) == 3 and all(len(r) == 4 for r in rows)
            assert all(r[0] > 0 and r == sorted(r) for r in rows)
            # The request's time includes its last token's.
            assert all(t >= r[-1] for t, r in zip(reply[f"{side}_ns"], rows, strict=True))
        measured = _serve(server, {"v": 1, "id": 4, "op": "measure", "slot": "a", "k": 2})
        assert measured["ok"] is True and len(measured["tokens"]) == 2
        assert len(measured["samples_ns"]) == 2
        opened = _serve(
            server,
            {"v": 1, "id": 5, "op": "open", "slot": "b", "suite": str(suite)}
            | {"cell": "mlp[fp32]"}
            | where,
        )
        assert opened["ok"] is True, opened
        mixed = _serve(server, {"v": 1, "id": 6, "op": "pairs", "order": [True]})
        assert mixed["ok"] is False and "beside one that is not" in mixed["error"]["message"]
    finally:
        server.shutdown()


def test_a_planted_slot_waits_its_fraction_inside_each_timed_request(tmp_path: Path) -> None:
    """`open` with `plant` (a calibration's planted slowdown): every request of that slot,
    in `pairs` and `measure`, holds a wait of the fraction of its own time; the other
    slot is untouched; a cell under load takes a plant too (its load levels are planted)."""
    (tmp_path / "wmodels.py").write_text(MODELS)
    path = tmp_path / "p.yaml"
    path.write_text(
        FAST_DEFAULTS.replace("iterations: 30", "iterations: 100")
        + "models:\n  mlp: {factory: 'wmodels:mlp', inputs: {x: {shape: [2, 8], seed: 1}}}\n"
        + "scenarios:\n  - {name: plain, model: mlp}\n"
        + "  - {name: busy, model: mlp, load: {concurrency: 2}}\n"
    )
    where = {"rootdir": str(tmp_path), "cache_dir": str(tmp_path / ".cache")}
    server = Server()
    try:
        for slot, plant in (("a", None), ("b", 0.25)):
            request = {"v": 1, "id": 1, "op": "open", "slot": slot, "suite": str(path)}
            opened = _serve(server, request | {"cell": "plain", "plant": plant} | where)
            assert opened["ok"], opened
        warm = {"v": 1, "id": 2, "op": "warmup", "slot": "b", "iterations": 5, "seconds": 0}
        assert _serve(server, warm)["ok"]
        reply = _serve(server, {"v": 1, "id": 2, "op": "pairs", "order": [True, False] * 10})
        assert "a_planted_ns" not in reply
        planted = reply["b_planted_ns"]
        assert isinstance(planted, list) and len(planted) == 20
        for sample, wait in zip(reply["b_ns"], planted, strict=True):  # type: ignore[call-overload]
            assert wait > 0 and sample >= wait * (1 + 0.25) / 0.25
        measured = _serve(server, {"v": 1, "id": 3, "op": "measure", "k": 5, "slot": "b"})
        assert len(measured["planted_ns"]) == 5  # type: ignore[arg-type]
        loaded = _serve(
            server,
            {"v": 1, "id": 4, "op": "open", "slot": "c", "suite": str(path)}
            | {"cell": "busy[c2]", "plant": 0.1}
            | where,
        )
        assert loaded["ok"], loaded
    finally:
        server.shutdown()
