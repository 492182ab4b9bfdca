"""End-to-end: `--perfguard-ab=REF` on a temporary git repository, through pytester.

The model sleeps for its service time (time.sleep never returns early), and the
second commit doubles it: a real, large slowdown that the paired comparison
must catch, while an unchanged model must pass. No figure of this machine is
asserted.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.helpers.ab_repo import SUITE, commit, comparison
from tests.helpers.git_repos import run_git


@pytest.fixture
def repo(suite_writer: pytest.Pytester) -> pytest.Pytester:
    run_git(suite_writer.path, "init", "-q", "-b", "main")
    (suite_writer.path / ".gitignore").write_text("reports/\n.perfguard/\n__pycache__/\n")
    return suite_writer


def worktrees(path: Path) -> list[str]:
    return [line for line in run_git(path, "worktree", "list").splitlines() if line]


def test_a_commit_that_slows_the_model_fails_the_same_run_ab(repo: pytest.Pytester) -> None:
    base = commit(repo.path, 2.0, "fast model")
    commit(repo.path, 4.0, "slower model")
    result = repo.runpytest("--perfguard", "-v", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*suites/s.yaml::sleepy FAILED*",
            f"*P95 latency +*% (* ms -> * ms; 99% bounds +*%..+*%) vs base {base[:7]} "
            "measured in this run, interleaved, * request pairs, limit +5%: regression*",
        ]
    )
    (verdict,) = comparison(repo.path)["verdicts"]
    assert verdict["mode"] == "ab" and verdict["verdict"] == "regression"
    # Each figure once: the ratio and its bounds are not repeated from the rule's reason.
    message = verdict["messages"][0]
    assert "B/A" not in message and message.count("99%") == 1
    ab = verdict["ab"]
    assert ab["base"] == base
    assert ab["decision"]["ratio"] > 1.5  # 4 ms vs 2 ms of sleep per request
    assert ab["decision"]["lo"] > 1.05
    assert ab["rounds"] and ab["rounds"][0]["ratio"] > 1.0
    assert len(worktrees(repo.path)) == 1  # the base worktree is gone


def test_an_unchanged_model_passes_and_a_new_cell_is_new(repo: pytest.Pytester) -> None:
    commit(repo.path, 2.0, "model")
    extra = SUITE + "  - name: added\n    model: sleepy\n"
    commit(repo.path, 2.0, "a second scenario, same model", suite=extra)
    with (repo.path / ".gitignore").open("a") as ignore:
        ignore.write("# an uncommitted change\n")
    result = repo.runpytest("--perfguard", "-v", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(passed=2)
    verdicts = {v["scenario_id"]: v for v in comparison(repo.path)["verdicts"]}
    same = verdicts["suites/s.yaml::sleepy"]
    assert same["mode"] == "ab" and same["verdict"] in ("unchanged", "improvement")
    assert any("working tree as it is" in m for m in same["messages"])
    added = verdicts["suites/s.yaml::added"]
    assert added["verdict"] == "new" and "has no cell added" in added["messages"][0]
    assert len(worktrees(repo.path)) == 1


def test_new_cells_keep_isolation(repo: pytest.Pytester) -> None:
    # Cells under `load:` in A/B: tests/ab/test_ab_load.py.
    commit(repo.path, 2.0, "one scenario")
    added = SUITE + "  - name: added\n    model: sleepy\n    isolate: true\n"
    commit(repo.path, 2.0, "an isolated scenario", suite=added)
    result = repo.runpytest("--perfguard", "-v", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(passed=2)
    verdicts = {v["scenario_id"]: v for v in comparison(repo.path)["verdicts"]}
    assert verdicts["suites/s.yaml::sleepy"]["mode"] == "ab"
    assert verdicts["suites/s.yaml::added"]["verdict"] == "new"
    (path,) = (repo.path / "reports").glob("*/results.json")
    found = {s["id"]: s for s in json.loads(path.read_text())["scenarios"]}
    assert found["suites/s.yaml::added"]["runtime"].get("isolated") is True


def test_a_cell_only_in_the_base_is_missing(repo: pytest.Pytester) -> None:
    commit(repo.path, 2.0, "two scenarios", suite=SUITE + "  - name: gone\n    model: sleepy\n")
    commit(repo.path, 2.0, "one removed")
    result = repo.runpytest("--perfguard", "-v", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(passed=1)
    verdicts = {v["scenario_id"]: v for v in comparison(repo.path)["verdicts"]}
    assert verdicts["suites/s.yaml::gone"]["verdict"] == "missing"


def test_a_ref_that_does_not_exist_stops_before_measuring(repo: pytest.Pytester) -> None:
    commit(repo.path, 2.0, "model")
    result = repo.runpytest("--perfguard", "--perfguard-ab=no-such-branch")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*no-such-branch*"])
    assert len(worktrees(repo.path)) == 1


def test_a_base_suite_that_does_not_load_makes_its_cells_new(repo: pytest.Pytester) -> None:
    commit(repo.path, 2.0, "broken suite", suite=SUITE.replace("scenarios:", "scenarios: [oops"))
    commit(repo.path, 2.0, "fixed suite")
    result = repo.runpytest("--perfguard", "-v", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(passed=1)
    (verdict,) = comparison(repo.path)["verdicts"]
    assert verdict["verdict"] == "new"
    assert "base revision's suite did not load" in verdict["messages"][0]
    assert "malformed YAML" in verdict["messages"][0]


ISOLATED = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 30, seconds: 0}
  threads: 1
models:
  fine:
    factory: crashmodel:fine
    inputs:
      x: {shape: [1, 8], dtype: float32}
  crash:
    factory: crashmodel:crash
    inputs:
      x: {shape: [1, 8], dtype: float32}
scenarios:
  - name: crash
    model: crash
    isolate: true
  - name: fine
    model: fine
    isolate: true
"""

CRASH = textwrap.dedent(
    """
    import os
    import sys

    import torch
    from torch import nn


    class Crash(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 4)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls > 3:
                print("native library gave up", file=sys.stderr, flush=True)
                os._exit(3)
            return self.lin(x)


    def crash():
        return Crash().eval()


    def fine():
        torch.manual_seed(0)
        return nn.Linear(8, 4).eval()
    """
)


def test_an_isolated_cell_that_crashes_fails_alone(suite_writer: pytest.Pytester) -> None:
    suites = suite_writer.path / "suites"
    suites.mkdir()
    (suites / "crashmodel.py").write_text(CRASH)
    (suites / "s.yaml").write_text(ISOLATED)
    result = suite_writer.runpytest("--perfguard", "-v", "--perfguard-baseline=none")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*::crash FAILED*",
            "*::fine PASSED*",
            "*exit status 3*",
            "*native library gave up*",
        ],
        consecutive=False,
    )
    (path,) = (suite_writer.path / "reports").glob("*/results.json")
    found = {s["name"]: s for s in json.loads(path.read_text())["scenarios"]}
    assert found["fine"]["runtime"]["isolated"] is True
    assert found["crash"]["status"] == "failed"


def test_another_interpreter_for_the_base_runs_a_process_per_side(repo: pytest.Pytester) -> None:
    import sys

    base = commit(repo.path, 2.0, "fast model")
    commit(repo.path, 4.0, "slower model")
    result = repo.runpytest(
        "--perfguard", "-v", "--perfguard-ab=HEAD~1", f"--perfguard-ab-python={sys.executable}"
    )
    result.assert_outcomes(failed=1)
    (verdict,) = comparison(repo.path)["verdicts"]
    assert verdict["mode"] == "ab" and verdict["ab"]["base"] == base
    assert verdict["verdict"] == "regression"  # the base worker ran the base's 2 ms model
    assert len(worktrees(repo.path)) == 1


def test_an_isolated_cell_is_measured_as_in_process(suite_writer: pytest.Pytester) -> None:
    """Under ``--perfguard-isolate`` a load cell runs its load levels and a plain cell
    carries the canary and peak memory: the worker measures what the parent would."""
    suites = suite_writer.path / "suites"
    suites.mkdir()
    (suites / "crashmodel.py").write_text(CRASH)
    (suites / "s.yaml").write_text(
        ISOLATED.split("scenarios:")[0]
        + "scenarios:\n  - name: fine\n    model: fine\n"
        + "  - name: busy\n    model: fine\n"
        + "    load: {concurrency: [2]}\n    measure: {iterations: 120, seconds: 0}\n"
    )
    result = suite_writer.runpytest(
        "--perfguard", "-v", "--perfguard-baseline=none", "--perfguard-isolate"
    )
    result.assert_outcomes(passed=2)
    (path,) = (suite_writer.path / "reports").glob("*/results.json")
    found = {s["id"].split("::")[-1]: s for s in json.loads(path.read_text())["scenarios"]}
    assert set(found) == {"fine", "busy[c2]"}
    assert all(s["runtime"]["isolated"] is True for s in found.values())
    assert found["busy[c2]"]["load"]["mode"] == "closed"
    assert found["busy[c2]"]["load"]["concurrency"] == 2
    assert found["fine"]["load"] is None
    assert found["fine"]["canary_ns"] is not None and found["fine"]["canary_ns"] > 0
    assert "foreign_cpu" in found["fine"]["runtime"]


def test_an_ab_run_lands_beside_the_plain_run_of_its_commit_and_is_never_saved(
    repo: pytest.Pytester,
) -> None:
    head = commit(repo.path, 1.0, "model")
    repo.runpytest("--perfguard").assert_outcomes(passed=1)
    plain = repo.path / "reports" / head[:12]
    plain_report = (plain / "report.html").read_text()
    repo.runpytest("--perfguard", "--perfguard-ab=HEAD").assert_outcomes(passed=1)
    ab = repo.path / "reports" / f"{head[:12]}-ab"
    assert json.loads((ab / "results.json").read_text())["mode"] == "ab"
    assert (ab / "report.html").is_file() and (ab / "summary.md").is_file()
    assert "mode" not in json.loads((plain / "results.json").read_text())
    assert (plain / "report.html").read_text() == plain_report  # not overwritten
    refused = repo.runpytest("--perfguard", "--perfguard-ab=HEAD", "--perfguard-save")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--perfguard-save refused with --perfguard-ab*"])
    assert not (repo.path / "baselines").exists()


def test_ab_under_xdist_each_worker_pairs_its_own_cells(repo: pytest.Pytester) -> None:
    two_models = (
        SUITE.replace(
            "scenarios:\n",
            "  other:\n    factory: abmodel:build\n    inputs:\n"
            "      x: {shape: [1, 8], dtype: float32}\nscenarios:\n",
        )
        + "  - name: second\n    model: other\n"
    )
    commit(repo.path, 2.0, "base", suite=two_models + "  - name: gone\n    model: sleepy\n")
    commit(repo.path, 4.0, "both models slower, one scenario removed", suite=two_models)
    result = repo.runpytest("--perfguard", "-p", "xdist", "-n", "2", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(failed=2)
    verdicts = {v["scenario_id"]: v for v in comparison(repo.path)["verdicts"]}
    for sid in ("suites/s.yaml::sleepy", "suites/s.yaml::second"):
        assert verdicts[sid]["mode"] == "ab" and verdicts[sid]["verdict"] == "regression"
    # Cells gone since the base are judged under xdist too.
    assert verdicts["suites/s.yaml::gone"]["verdict"] == "missing"
    assert len(worktrees(repo.path)) == 1  # every worker's base worktree is gone


# A model whose head commit changes only what forward runs: same class, same weights,
# same repr. The export cache once keyed on those alone, so the head reused the base's
# ONNX graph and an ONNX Runtime cell compared the base with itself.
LOOPED = textwrap.dedent(
    """
    import torch
    from torch import nn

    ROUNDS = RR


    class Looped(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(64, 64)

        def forward(self, x):
            y = x
            for _ in range(ROUNDS):
                y = torch.tanh(self.lin(y))
            return y


    def build():
        torch.manual_seed(0)
        return Looped().eval()
    """
)

LOOPED_SUITE = """\
defaults:
  warmup: {iterations: 5, seconds: 0}
  measure: {iterations: 100, seconds: 0}
  threads: 1
models:
  looped:
    factory: loopmodel:build
    inputs:
      x: {shape: [1, 64], dtype: float32}
scenarios:
  - name: m
    model: looped
    matrix:
      backend: [torch, onnxruntime]
"""


def write_looped(repo: Path, rounds: int) -> None:
    (repo / "suites").mkdir(exist_ok=True)
    (repo / "suites" / "loopmodel.py").write_text(LOOPED.replace("RR", str(rounds)))
    (repo / "suites" / "s.yaml").write_text(LOOPED_SUITE)


def test_a_forward_change_without_new_weights_fails_an_onnxruntime_cell(
    repo: pytest.Pytester,
) -> None:
    write_looped(repo.path, 1)
    run_git(repo.path, "add", "-A")
    run_git(repo.path, "commit", "-qm", "one round")
    write_looped(repo.path, 300)
    run_git(repo.path, "commit", "-qam", "300 rounds, no new parameters")
    result = repo.runpytest("--perfguard", "-v", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(failed=2)
    verdicts = {v["scenario_id"]: v for v in comparison(repo.path)["verdicts"]}
    for backend in ("torch", "onnxruntime"):
        verdict = verdicts[f"suites/s.yaml::m[{backend}]"]
        assert verdict["mode"] == "ab" and verdict["verdict"] == "regression", verdict
        assert verdict["ab"]["decision"]["lo"] > 2  # 300 rounds against one
    # Each side exported its own graph: two files in the cache, one per side.
    cached = sorted((repo.path / ".perfguard" / "cache").glob("*.onnx"))
    assert len(cached) == 2, cached


def test_a_plain_rerun_after_editing_forward_runs_the_new_graph(
    suite_writer: pytest.Pytester,
) -> None:
    def onnx_cell() -> dict:
        (path,) = (suite_writer.path / "reports").glob("*/results.json")
        cells = json.loads(path.read_text())["scenarios"]
        (cell,) = [c for c in cells if c["id"].endswith("[onnxruntime]")]
        return cell

    write_looped(suite_writer.path, 1)
    suite_writer.runpytest("--perfguard", "--perfguard-baseline=none").assert_outcomes(passed=2)
    before = onnx_cell()["runtime"]["cache_key"]
    write_looped(suite_writer.path, 300)  # edited, not committed: the next run measures it
    suite_writer.runpytest("--perfguard", "--perfguard-baseline=none").assert_outcomes(passed=2)
    after = onnx_cell()["runtime"]["cache_key"]
    assert before != after
    (exported,) = (suite_writer.path / ".perfguard" / "cache").glob(f"*-{after}.onnx")
    import onnx

    ops = [node.op_type for node in onnx.load(str(exported)).graph.node]
    assert ops.count("Tanh") == 300
