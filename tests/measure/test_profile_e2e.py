"""End-to-end: when cells are profiled, where profiles and traces go, and the failure
message that names where the time went, through pytester on real suites.

The model is a small CNN of named blocks; the slowed commit adds one large
convolution (``block2.extra``) to ``block2`` and nothing else, so the profile diff
must name that layer as the top contributor, in the torch cell and in the ONNX
Runtime cell, against a stored baseline and in a same-run A/B run. The slowdown is
several times the model's own time and the limits are wide (+50%), so no figure of
this machine decides a test.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from perfguard.ab.abrun import ab_metric
from perfguard.baseline.read import pooled_run
from perfguard.baseline.store import DirectoryStore
from perfguard.judge.verdict import ScenarioVerdict, VerdictKind
from perfguard.records.opprofile import NodeTime, OperatorProfile, OpTypeTime
from perfguard.report.runfolder import trace_paths
from perfguard.run.cell import regressed_in_time
from tests.helpers.baseline_runs import FP, IDS, make_run, sha_of
from tests.helpers.git_repos import run_git

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

CNN = textwrap.dedent(
    """
    import torch
    from torch import nn

    SLOW = False


    class Block(nn.Module):
        def __init__(self, cin, cout, stride, slow=False):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
            self.relu = nn.ReLU()
            # The planted slowdown: one extra operation in one block.
            self.extra = nn.Conv2d(cout, cout, 9, padding=4) if slow else None

        def forward(self, x):
            x = self.relu(self.conv(x))
            if self.extra is not None:
                x = self.extra(x)
            return x


    class Net(nn.Module):
        def __init__(self, slow):
            super().__init__()
            self.stem = Block(3, 32, 1)
            self.block1 = Block(32, 64, 2)
            self.block2 = Block(64, 64, 1, slow=slow)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

        def forward(self, x):
            return self.head(self.block2(self.block1(self.stem(x))))


    def build():
        torch.manual_seed(0)
        return Net(SLOW).eval()
    """
)

# Enough for the gate's 99% bound on P95 (90 per run).
ITERATIONS = 100


def suite(*, profile: str = "", cells: str = "[torch, onnxruntime]") -> str:
    return f"""\
defaults:
  warmup: {{iterations: 3, seconds: 0}}
  measure: {{iterations: {ITERATIONS}, seconds: 0}}
  threads: 1
  # Plumbing tests: a busy host must not turn a verdict into `invalid` (unstable).
  stability_tolerance: 0.99
  gate: {{p95: "+50%"}}
models:
  cnn:
    factory: cnnmodel:build
    inputs:
      image: {{shape: [1, 3, 64, 64], dtype: float32, seed: 0}}
scenarios:
  - name: cnn
    model: cnn
    matrix:
      backend: {cells}
{profile}"""


# Contention from other processes on a shared host would make verdicts `invalid`; a
# slowdown this large needs no confirmation rounds (they only cost time here).
INI = "[pytest]\nperfguard_contention_limit = 1.01\nperfguard_confirm_rounds = 0\n"


class Repo:
    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.path = pytester.path
        (self.path / "suites").mkdir()
        pytester.makeini(INI)
        (self.path / ".gitignore").write_text(
            "reports/\nbaselines/.lock\n.perfguard/\n__pycache__/\nstdout\nstderr\nrunpytest-*\n"
        )
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        return run_git(self.path, *args)

    def commit(self, *, slow: bool, text: str, message: str) -> str:
        model = CNN.replace("SLOW = False", f"SLOW = {slow}")
        (self.path / "suites" / "cnnmodel.py").write_text(model)
        (self.path / "suites" / "s.yaml").write_text(text)
        self.git("add", "-A")
        self.git("commit", "-qm", message)
        return self.git("rev-parse", "HEAD")

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest("--perfguard", "-rA", *args)

    def run_folder(self, suffix: str = "") -> Path:
        return self.path / "reports" / (self.git("rev-parse", "HEAD")[:12] + suffix)

    def results(self, suffix: str = "") -> dict[str, dict[str, Any]]:
        data = json.loads((self.run_folder(suffix) / "results.json").read_text())
        return {s["name"]: s for s in data["scenarios"]}


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Repo:
    return Repo(pytester)


def where_line(message: str) -> str:
    (line,) = [x for x in message.splitlines() if x.startswith("where the time went:")]
    return line


def test_a_cell_with_profile_true_is_profiled_after_its_measurement(repo: Repo) -> None:
    text = suite(profile="    profile: true\n", cells="[torch]")
    repo.commit(slow=False, text=text + "  - name: plain\n    model: cnn\n", message="cnn")
    repo.run().assert_outcomes(passed=2)
    found = repo.results()
    profiled, plain = found["cnn[torch]"], found["plain"]
    assert "profile" not in plain  # not asked, not regressed: not profiled
    profile = profiled["profile"]
    assert profile["profiler"] == "torch.profiler" and profile["requests"] >= 1
    assert profile["nodes"] and profile["op_types"] and profile["wall_ns"] > 0
    # Profiled after the timed loop, not inside it: the loop's samples are its own.
    assert len(profiled["samples_ns"]) == ITERATIONS == len(plain["samples_ns"])
    assert profiled["latency_ns"]["n"] == ITERATIONS
    own, _base = trace_paths(repo.run_folder(), "suites/s.yaml::cnn[torch]")
    assert profile["trace"] == f"traces/{own.name}"
    trace = json.loads((repo.run_folder() / profile["trace"]).read_text())
    assert trace["traceEvents"]
    assert sorted(p.name for p in (repo.run_folder() / "traces").iterdir()) == [own.name]


def test_cells_whose_ids_read_alike_keep_a_trace_each(repo: Repo) -> None:
    # `m-1` and `m[1]` made one file name, so the second cell's trace replaced the
    # first's and both results pointed at it.
    text = suite(cells="[torch]")
    text += "  - name: m-1\n    model: cnn\n    profile: true\n"
    text += "  - name: m\n    model: cnn\n    matrix:\n      threads: [1]\n    profile: true\n"
    repo.commit(slow=False, text=text, message="two cells whose ids read alike")
    repo.run().assert_outcomes(passed=3)
    found = repo.results()
    traces = {name: found[name]["profile"]["trace"] for name in ("m-1", "m[1]")}
    assert len(set(traces.values())) == 2, traces
    assert sorted(p.name for p in (repo.run_folder() / "traces").iterdir()) == sorted(
        t.removeprefix("traces/") for t in traces.values()
    )


def test_a_planted_slowdown_is_named_by_layer_against_the_stored_profile(repo: Repo) -> None:
    base = repo.commit(slow=False, text=suite(), message="cnn")
    # --perfguard-profile: the saved baseline holds every cell's profile.
    repo.run("--perfguard-save", "--perfguard-profile").assert_outcomes(passed=2)
    stored = json.loads(next((repo.path / "baselines").glob(f"*/{base}.json")).read_text())
    assert "block2/extra" not in json.dumps(stored)
    assert stored["launches"][0]["scenarios"][0]["profile"]["nodes"]
    repo.commit(slow=True, text=suite(), message="an extra convolution in block2")
    # Not asked to profile: the regressed cells are profiled because they regressed.
    result = repo.run()
    result.assert_outcomes(failed=2)
    found = repo.results()
    for cell in ("cnn[torch]", "cnn[onnxruntime]"):
        message = found[cell]["message"]
        assert "P95 latency regressed" in message
        line = where_line(message)
        assert "block2/extra" in line and "(new)" in line, line
        assert "base not profiled" not in line
        assert found[cell]["profile"]["trace"].startswith("traces/")
    # "of it in", or over 100% "of the net change in" (other nodes got faster meanwhile).
    result.stdout.fnmatch_lines(
        ["*where the time went: +* ms per request, *% of * in *block2/extra*"]
    )
    # The terminal summary repeats it per regressed cell, under the perfguard section.
    summary = result.stdout.str().split("= perfguard =")[-1]
    for cell in ("cnn[torch]", "cnn[onnxruntime]"):
        assert f"{cell}: {where_line(found[cell]['message'])}" in summary


def test_a_base_without_a_profile_says_so_and_names_where_the_time_goes(repo: Repo) -> None:
    repo.commit(slow=False, text=suite(cells="[onnxruntime]"), message="cnn")
    repo.run("--perfguard-save").assert_outcomes(passed=1)  # no profile stored
    repo.commit(slow=True, text=suite(cells="[onnxruntime]"), message="slower")
    result = repo.run()
    result.assert_outcomes(failed=1)
    line = where_line(repo.results()["cnn[onnxruntime]"]["message"])
    assert line.startswith("where the time went: base not profiled; ")
    assert "ms per request in operators" in line


def test_a_planted_slowdown_is_named_by_layer_in_same_run_ab(repo: Repo) -> None:
    repo.commit(slow=False, text=suite(), message="cnn")
    repo.commit(slow=True, text=suite(), message="an extra convolution in block2")
    result = repo.run("--perfguard-ab=HEAD~1")
    result.assert_outcomes(failed=2)
    found = repo.results("-ab")
    traces = repo.run_folder("-ab") / "traces"
    for cell in ("cnn[torch]", "cnn[onnxruntime]"):
        message = found[cell]["message"]
        assert "measured in this run, interleaved" in message
        line = where_line(message)
        # Diffed against the base side's profile, taken in its own worker slot.
        assert "block2/extra" in line and "(new)" in line and "base not profiled" not in line
        own, base = trace_paths(traces.parent, f"suites/s.yaml::{cell}")
        assert found[cell]["profile"]["trace"] == f"traces/{own.name}"
        assert json.loads(own.read_text())["traceEvents"]
        assert json.loads(base.read_text())["traceEvents"]


def test_an_isolated_cell_and_a_load_cell_are_profiled_too(repo: Repo) -> None:
    text = suite(profile="    isolate: true\n    profile: true\n", cells="[torch]")
    text += "  - name: loaded\n    model: cnn\n    load: {concurrency: [2]}\n    profile: true\n"
    repo.commit(slow=False, text=text, message="cnn")
    repo.run().assert_outcomes(passed=2)
    found = repo.results()
    isolated = found["cnn[torch]"]
    (loaded,) = [cell for name, cell in found.items() if name.startswith("loaded")]
    assert isolated["runtime"]["isolated"] is True
    # A load cell's profile is one stream of requests at concurrency 1, apart from the load.
    assert loaded["load"]["concurrency"] == 2
    for cell in (isolated, loaded):
        profile = cell["profile"]
        assert profile["nodes"] and (repo.run_folder() / profile["trace"]).is_file()


def test_a_pooled_baseline_keeps_the_most_recent_launchs_profile(tmp_path: Path) -> None:
    def profile(node: str) -> OperatorProfile:
        return OperatorProfile(
            "onnxruntime",
            20,
            1000.0,
            (NodeTime(node, "Conv", 900.0),),
            (OpTypeTime("Conv", 900.0),),
        )

    store = DirectoryStore(tmp_path)
    older, newer = profile("/older/Conv"), profile("/newer/Conv")
    for seed, taken in enumerate((older, newer, None)):  # the newest launch unprofiled
        run = make_run(sha_of(1), seed=seed)
        scenarios = tuple(dataclasses.replace(s, profile=taken) for s in run.scenarios)
        store.save(dataclasses.replace(run, scenarios=scenarios))
    baseline = store.load(FP, sha_of(1))
    assert baseline is not None and len(baseline.launches) == 3
    assert baseline.pooled(IDS[0]).profile == newer  # type: ignore[union-attr]
    assert {s.profile for s in pooled_run(baseline).scenarios} == {newer}


@pytest.mark.parametrize(
    ("metric", "profiled"),
    [
        ("p50", True),
        ("p95", True),
        ("throughput", True),
        ("peak_memory", False),
        ("gpu_mem", False),
    ],
)
def test_a_regression_in_time_is_profiled_without_being_asked(metric: str, profiled: bool) -> None:
    figure = ab_metric(
        metric,
        VerdictKind.REGRESSION,
        f"{metric} regressed",
        "rule",
        values=(1.0, 2.0),
        ratio=2.0,
        bounds=(1.5, 2.5),
        limit=0.05,
        n=(100, 100),
    )
    verdict = ScenarioVerdict("s.yaml::c", VerdictKind.REGRESSION, metrics=(figure,))
    assert regressed_in_time(verdict) is profiled
    passed = dataclasses.replace(figure, verdict=VerdictKind.UNCHANGED)
    assert not regressed_in_time(dataclasses.replace(verdict, metrics=(passed,)))


FAILING_PROFILER = """
import perfguard.run.cell as measurement


def _broken(*args, **kwargs):
    raise RuntimeError("the profiler broke")


measurement.profile_session = _broken
"""


def test_a_failing_profiler_leaves_the_verdict_and_the_item_alone(repo: Repo) -> None:
    repo.pytester.makeconftest(FAILING_PROFILER)
    repo.commit(slow=False, text=suite(cells="[onnxruntime]"), message="cnn")
    result = repo.run("--perfguard-profile")
    result.assert_outcomes(passed=1)
    (cell,) = repo.results().values()
    assert "profile" not in cell and len(cell["samples_ns"]) == ITERATIONS
    (verdict,) = json.loads((repo.run_folder() / "comparison.json").read_text())["verdicts"]
    assert verdict["verdict"] == "new"
    assert "operator profile not taken: the profiler broke" in verdict["messages"]
    assert not (repo.run_folder() / "traces").exists() or not any(
        (repo.run_folder() / "traces").iterdir()
    )


@pytest.mark.parametrize(
    ("where", "value"),
    [("scenario", '"yes"'), ("defaults", "1")],
)
def test_a_profile_key_that_is_not_a_bool_names_file_and_line(
    pytester: pytest.Pytester, where: str, value: str
) -> None:
    pytester.makeini("[pytest]\n")
    text = suite(cells="[onnxruntime]")
    if where == "scenario":
        text += f"    profile: {value}\n"
        line = text.splitlines().index(f"    profile: {value}") + 1
    else:
        text = text.replace("  threads: 1\n", f"  threads: 1\n  profile: {value}\n")
        line = text.splitlines().index(f"  profile: {value}") + 1
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "s.yaml").write_text(text)
    result = pytester.runpytest("--perfguard", "suites/s.yaml")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert f"s.yaml:{line}" in out, out
    assert "`profile`" in out and "true or false" in out and "profile: true" in out


def test_the_ini_key_takes_true_or_false(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nperfguard_profile = sometimes\n")
    result = pytester.runpytest("--perfguard")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*perfguard_profile in *tox.ini is 'sometimes'; expected true or false*"]
    )
