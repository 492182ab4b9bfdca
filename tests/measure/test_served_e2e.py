"""End to end: served models (``backend: server``) through `pytest --perfguard`, against
llama.cpp's real server started by the suite's command: token figures, the archived and
the same-run A/B gates catching a slower model file, and a server that dies mid-run, is
slow to start or is left behind by a cancelled run; a served embedding model timed,
checked for accuracy against another cell's server and gated the same way.

Each test serves the tiny GGUF model with a seed of its own, so its server processes are
found by their command line (``_servers``) and no other test's are. Slowdowns are large
(the model file of 8 layers for 2) and limits wide: the plumbing is tested, not the
machine.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from perfguard_examples.tinyserver import FORMAT
from tests.helpers.git_repos import SpinRepo
from tests.helpers.processes import gone
from tests.helpers.served import served_suite

INI = "[pytest]\nperfguard_contention_limit = 1.01\n"
DEFAULTS = """\
defaults:
  warmup: {iterations: 20, seconds: 3}  # a server settles over seconds (docs/serving.md)
  measure: {iterations: 100, seconds: SECONDS, max_seconds: 120}
  stability_tolerance: 0.5  # the plumbing is tested, not this shared machine's drift
"""
GATES = 'gate: {itl_p95: "+25%", tpot_p50: "+25%", ttft_p95: "+25%", p95: "+25%"}\n'


def _suite(seed: int, layers: int = 2, *, seconds: float = 1.0, server: str = "") -> str:
    """The tiny model of ``layers`` layers served by llama.cpp, measured ``seconds``
    (``server``: more lines of its ``server:``)."""
    command = (
        f'command: ["{{python}}", -m, perfguard_examples.tinyserver, --layers, "{layers}", '
        f'--hidden, "256", --ffn, "1024", --seed, "{seed}", '
        '--, --port, "{port}", --n_threads, "1", --n_ctx, "512"]\n'
    ) + server
    return served_suite(
        command,
        "generate: {prompt_tokens: 32, new_tokens: 16}\n" + GATES,
        defaults=DEFAULTS.replace("SECONDS", f"{seconds:g}"),
    )


def _servers(seed: int) -> list[int]:
    """The pids of the servers of model seed ``seed`` running now."""
    found = subprocess.run(
        ["pgrep", "-f", f"llama_cpp.server --model .*-s{seed}-"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [int(pid) for pid in found.stdout.split()]


@pytest.fixture
def seed() -> int:
    return random.randrange(10**6, 10**7)


@pytest.fixture
def repo(pytester: pytest.Pytester) -> SpinRepo:
    return SpinRepo(pytester, INI)


def _verdicts(repo: SpinRepo, folder: str = "") -> dict[str, str]:
    sha = repo.git("rev-parse", "HEAD")[:12] + folder
    comparison = json.loads((repo.path / "reports" / sha / "comparison.json").read_text())
    (cell,) = comparison["verdicts"]
    return {m["metric"]: m["verdict"] for m in cell["metrics"]}


def test_a_slower_model_file_fails_the_archived_and_the_ab_gates(repo: SpinRepo, seed: int) -> None:
    base = repo.commit_suite(_suite(seed), "base: 2 layers")
    saved = repo.pytester.runpytest("--perfguard", "--perfguard-save", "-rA")
    saved.assert_outcomes(passed=1)
    results = json.loads(next((repo.path / "reports").glob("*/results.json")).read_text())
    (cell,) = results["scenarios"]
    assert cell["backend"] == "server" and cell["tokens"]["new_tokens"] == 16
    assert cell["runtime"]["served_model"] == f"tiny-v{FORMAT}-l2-h256-f1024-s{seed}-fp32"
    assert "--layers 2" in cell["runtime"]["command"]
    assert not _servers(seed)

    repo.commit_suite(_suite(seed, layers=8), "a model file of 8 layers")
    archived = repo.pytester.runpytest("--perfguard", "-rA")
    archived.assert_outcomes(failed=1)
    archived.stdout.fnmatch_lines([f"*ITL P95 regressed +*vs baseline {base[:7]} (limit +25%)*"])
    got = _verdicts(repo)
    assert got["itl_p95"] == "regression" and got["tpot_p50"] == "regression"

    ab = repo.pytester.runpytest("--perfguard", "-rA", "--perfguard-ab=HEAD~1")
    ab.assert_outcomes(failed=1)
    ab.stdout.fnmatch_lines(["ITL P95 +* vs base * measured in this run, *: regression*"])
    got = _verdicts(repo, "-ab")
    assert got["itl_p95"] == "regression" and got["tpot_p50"] == "regression"
    assert not _servers(seed)


def test_an_exclusive_server_is_ab_compared_one_side_at_a_time(repo: SpinRepo, seed: int) -> None:
    exclusive = "exclusive: true\n"
    base = repo.commit_suite(_suite(seed, server=exclusive), "base: 2 layers")
    repo.commit_suite(_suite(seed, layers=8, server=exclusive), "a model file of 8 layers")
    most: list[int] = [0]
    done = threading.Event()

    def watch() -> None:  # how many of this test's servers run at once
        while not done.is_set():
            most[0] = max(most[0], len(_servers(seed)))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        ab = repo.pytester.runpytest("--perfguard", "-rA", "--perfguard-ab=HEAD~1")
    finally:
        done.set()
        watcher.join()
    assert most[0] == 1, f"{most[0]} servers ran at once"
    ab.assert_outcomes(failed=1)
    ab.stdout.fnmatch_lines(
        [f"*ITL P95 regressed +*vs base {base[:7]} measured in this run, one side at a time*"]
    )
    got = _verdicts(repo, "-ab")
    assert got["itl_p95"] == "regression" and got["tpot_p50"] == "regression"
    sha = repo.git("rev-parse", "HEAD")[:12]
    comparison = json.loads((repo.path / "reports" / f"{sha}-ab" / "comparison.json").read_text())
    (verdict,) = comparison["verdicts"]
    assert any("one side at a time: the server needs its device" in m for m in verdict["messages"])
    # The report's base side is the base measured in this run, not an archived baseline.
    assert verdict["mode"] == "ab" and verdict["ab"]["levels"] == "alone"
    assert verdict["ab"]["samples_a_ns"] and verdict["ab"]["decision"]["verdict"] == "regression"
    assert verdict["ab"]["tokens_a"] is not None
    html = (repo.path / "reports" / f"{sha}-ab" / "report.html").read_text()
    assert "one side at a time, each alone" in html
    assert not _servers(seed)


def test_a_server_that_dies_mid_run_fails_its_cell_with_the_reason(
    pytester: pytest.Pytester, seed: int
) -> None:
    pytester.makeini(INI)
    text = _suite(seed, seconds=30)
    pytester.makefile(".yaml", s=text)
    killed: list[int] = []

    def kill_when_serving() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            pids = _servers(seed)
            if pids:
                time.sleep(3.0)  # ready, prompts cut, measuring
                for pid in pids:
                    killed.append(pid)
                    subprocess.run(["kill", "-9", str(pid)], check=False)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_when_serving)
    killer.start()
    result = pytester.runpytest("--perfguard", "-rA", "s.yaml")
    killer.join()
    assert killed, "the server never started"
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the server of cell `tiny-served*"])
    result.stdout.fnmatch_lines(["*the server exited with signal SIGKILL; the end of its log*"])


def test_a_server_slow_to_start_fails_with_its_log_and_is_stopped(
    pytester: pytest.Pytester, seed: int
) -> None:
    pytester.makeini(INI)
    text = served_suite(
        f'command: ["{{python}}", -c, "print(\'loading {seed}\'); import time; time.sleep(60)", '
        '"{port}"]\nstart_timeout_s: 1\n',
        "generate: {prompt_tokens: 32, new_tokens: 16}\n",
    )
    pytester.makefile(".yaml", s=text)
    started = time.monotonic()
    result = pytester.runpytest("--perfguard", "-rA", "s.yaml")
    assert time.monotonic() - started < 60
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*was not ready after 1 s*it has been stopped*"])
    assert f"loading {seed}" in result.stdout.str()  # the log's tail
    left = subprocess.run(["pgrep", "-f", f"loading {seed}"], capture_output=True, check=False)
    assert not left.stdout.split()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_cancelled_run_leaves_no_server_running(
    pytester: pytest.Pytester, seed: int, signum: int
) -> None:
    pytester.makeini(INI)
    text = _suite(seed, seconds=60)
    pytester.makefile(".yaml", s=text)
    with subprocess.Popen(
        [sys.executable, "-m", "pytest", "--perfguard", "-p", "no:cacheprovider", "s.yaml"],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as run:
        deadline = time.monotonic() + 120
        while not (servers := _servers(seed)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert servers, "the server never started"
        time.sleep(2.0)
        run.send_signal(signum)
        run.wait(60)
    assert all(gone(pid, 15) for pid in servers)
    assert not _servers(seed)


def _embedding_suite(seed: int, layers: int = 2, *, cosine_min: float = 0.99) -> str:
    """The tiny model of ``layers`` layers served with embeddings on, as float32 and as
    8-bit blocks (two cells, two servers); the int8 cell checked against the fp32 one."""
    command = (
        f'command: ["{{python}}", -m, perfguard_examples.tinyserver, --layers, "{layers}", '
        f'--hidden, "256", --ffn, "1024", --seed, "{seed}", --precision, "{{precision}}", '
        '--, --port, "{port}", --n_threads, "1", --n_ctx, "512", --embedding, "True"]\n'
        "api: embeddings\n"
    )
    scenario = (
        'matrix: {precision: [fp32, int8]}\ngate: {p95: "+25%"}\naccuracy:\n'
        "  inputs: {count: 8, function: perfguard_examples.sentences:texts}\n"
        f"  reference: {{precision: fp32}}\n  gate: {{cosine_min: {cosine_min}}}\n"
    )
    return served_suite(
        command,
        scenario,
        # A server's embedding latency drifts more over a run on this shared machine.
        defaults=DEFAULTS.replace("SECONDS", "1").replace("tolerance: 0.5", "tolerance: 0.9"),
        model_yaml="inputs:\n  input: {shape: [1, 32], dtype: text}\n",
    )


def test_a_served_embedding_model_is_timed_checked_and_gated(repo: SpinRepo, seed: int) -> None:
    base = repo.commit_suite(_embedding_suite(seed), "base: 2 layers")
    saved = repo.pytester.runpytest("--perfguard", "--perfguard-save", "-rA")
    saved.assert_outcomes(passed=2)
    results = json.loads(next((repo.path / "reports").glob("*/results.json")).read_text())
    cells = {c["precision"]: c for c in results["scenarios"]}
    assert cells["int8"]["runtime"]["served_model"].endswith(f"-s{seed}-int8")
    assert cells["int8"]["runtime"]["input_tokens"] == [32]
    assert cells["int8"]["runtime"]["api"] == "embeddings"
    accuracy = cells["int8"]["accuracy"]
    assert accuracy["n"] == 8 and accuracy["reference"] == "fp32" and accuracy["passed"]
    (output,) = accuracy["report"]["outputs"]
    assert output["name"] == "embedding"
    assert 0.99 <= output["values"]["cosine_min"] < 1.0  # int8 blocks: close, not equal
    assert not _servers(seed)

    repo.commit_suite(_embedding_suite(seed, layers=16, cosine_min=0.999999), "16 layers")
    archived = repo.pytester.runpytest("--perfguard", "-rA")
    archived.assert_outcomes(failed=2)
    archived.stdout.fnmatch_lines(
        [f"*P95 latency regressed +*vs baseline {base[:7]} (limit +25%)*"] * 2
    )
    archived.stdout.fnmatch_lines(
        ["*cosine similarity min * < 0.999999 on output embedding vs reference fp32*"]
    )
    # The model file changed: its embeddings are checked against the baseline's too.
    archived.stdout.fnmatch_lines(["*cosine similarity min * < 0.999 on output embedding vs *"])
    assert "operator profile" not in archived.stdout.str()  # the server's, out of sight
    comparison = json.loads(
        next(
            (repo.path / "reports").glob(f"{repo.git('rev-parse', 'HEAD')[:12]}/comparison.json")
        ).read_text()
    )
    for cell in comparison["verdicts"]:
        assert {m["metric"]: m["verdict"] for m in cell["metrics"]}["p95"] == "regression"

    ab = repo.pytester.runpytest("--perfguard", "-rA", "--perfguard-ab=HEAD~1")
    ab.assert_outcomes(failed=2)
    ab.stdout.fnmatch_lines(
        ["*P95 latency +* vs base * measured in this run, interleaved, *: regression*"] * 2
    )
    assert not _servers(seed)


def test_the_example_suite_parses_and_names_a_real_server() -> None:
    from perfguard.suite.loader import load_suite

    suite = load_suite(Path(__file__).parents[2] / "examples" / "serving" / "llamacpp.yaml")
    assert [c.item_name for c in suite.scenarios if c.error is None] == [
        "tiny-served[1-p48]",
        "tiny-served[2-p48]",
        "tiny-served-load[p48-c1]",
        "tiny-served-load[p48-c4]",
    ]
    server = suite.scenarios[0].model.server
    assert server is not None and "perfguard_examples.tinyserver" in server.command
    embeddings = load_suite(suite.path.parent / "llamacpp-embeddings.yaml").scenarios
    assert [(c.item_name, c.error) for c in embeddings] == [
        ("tiny-embed[fp32]", None),
        ("tiny-embed[int8]", None),
    ]
    assert embeddings[1].accuracy is not None and embeddings[1].model.inputs[0].dtype == "text"


def test_load_counts_a_servers_cut_streams_as_errors_never_as_fast_requests(
    pytester: pytest.Pytester, seed: int
) -> None:
    """llama-cpp-python's server cuts a running stream when another request arrives
    (its default; 2-4% of requests at 4 streams here: none cut of the ~500 in 4 s has a
    chance below 1e-4); `--interrupt_requests False` queues them instead."""
    pytester.makeini(INI)

    def model(name: str, flags: str) -> str:
        return (
            f'  {name}:\n    server:\n      command: ["{{python}}", -m, '
            f'perfguard_examples.tinyserver, --seed, "{seed}", --, --port, "{{port}}", '
            f'--n_threads, "1", --n_ctx, "512"{flags}]\n'
        )

    scenario = (
        "  - name: {name}\n    model: {name}\n    backend: server\n"
        "    generate: {{prompt_tokens: 32, new_tokens: 16}}\n"
        "    load: {{concurrency: 4, goodput: {{ttft_ms: 1000, tpot_ms: 100}}}}\n"
    )
    text = (
        DEFAULTS.replace("SECONDS", "4")
        + "models:\n"
        + model("cutting", "")
        + model("queueing", ', --interrupt_requests, "False"')
        + "scenarios:\n"
        + scenario.format(name="cutting")
        + scenario.format(name="queueing")
    )
    pytester.makefile(".yaml", s=text)
    result = pytester.runpytest("--perfguard", "-rA", "s.yaml")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*requests (*%) failed under load (4 concurrent clients)*ServerError*"
            "ended the stream after * of 16 tokens*",
        ]
    )
    results = json.loads(next((pytester.path / "reports").glob("*/results.json")).read_text())
    by_name = {c["name"].split("[")[0]: c for c in results["scenarios"]}
    cut, queued = by_name["cutting"], by_name["queueing"]
    assert cut["load"]["failed"] > 0
    assert cut["load"]["goodput"]["good"] <= cut["load"]["requests"] - cut["load"]["failed"]
    # failed requests are not timed: samples are the answered ones only
    assert len(cut["samples_ns"]) == cut["load"]["requests"] - cut["load"]["failed"]
    assert queued["load"]["failed"] == 0 and queued["load"]["goodput"]["share"] == 1.0
    assert not _servers(seed)
