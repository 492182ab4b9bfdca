"""Shards: the cost-balanced plan (perfguard.shard.plan) and ``perfguard merge``.

End to end: three shards of a real suite reproduce exactly the cells of one unsharded
run, their merge gives the verdicts one run gives on the same measurements, and a
missing shard fails the merge naming its cells.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.cli import main as cli_main
from perfguard.core.atomicio import write_json_atomic
from perfguard.core.errors import ResultsError, ShardError
from perfguard.core.policy import DEFAULT_GATES
from perfguard.judge.compare import compare_scenario
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult
from perfguard.report.comparison import StoredComparison
from perfguard.report.runfolder import TRACES_DIR
from perfguard.shard.merge import (
    ShardOutput,
    gather_traces,
    merge_outputs,
    merged_environment,
    merged_outcome_status,
)
from perfguard.shard.plan import (
    Cell,
    ShardPlan,
    ShardSpec,
    check_collected,
    plan_shards,
    read_plan,
    read_plan_file,
    stored_cost_s,
    write_plan,
    write_plan_file,
)
from tests.helpers.git_repos import SpinRepo

# -- the plan ----------------------------------------------------------------------------

_cells = st.lists(
    st.tuples(
        st.integers(0, 6),  # model group
        st.one_of(st.none(), st.floats(0.01, 500.0)),  # cost from history, or unknown
        st.booleans(),  # a measured cell, or a plain test
    ),
    min_size=0,
    max_size=60,
).map(
    lambda rows: [
        Cell(f"suites/s.yaml::c{i}", f"m{g}", cost, measured)
        for i, (g, cost, measured) in enumerate(rows)
    ]
)


@settings(max_examples=200, deadline=None)
@given(cells=_cells, total=st.integers(1, 9))
def test_every_cell_lands_in_exactly_one_shard(cells: list[Cell], total: int) -> None:
    plan = plan_shards(cells, total)
    assert plan.total == total and len(plan.shards) == total
    ids = [cid for index in range(1, total + 1) for cid in plan.items(index)]
    assert sorted(ids) == sorted(c.id for c in cells)  # none lost, none doubled
    measured = {c.id for c in cells if c.measured}
    assert set(plan.all_cells) == measured
    for cell in cells:
        assert cell.id in plan.items(plan.shard_of(cell.id) or 0)


@settings(max_examples=200, deadline=None)
@given(cells=_cells, total=st.integers(1, 9))
def test_the_same_inputs_give_the_same_plan(cells: list[Cell], total: int) -> None:
    first, again = plan_shards(cells, total), plan_shards(list(cells), total)
    assert first == again and first.digest == again.digest
    # Who measures what does not depend on the order the cells were collected in.
    backwards = plan_shards(cells[::-1], total)
    assert {c.id: backwards.shard_of(c.id) for c in cells} == {
        c.id: first.shard_of(c.id) for c in cells
    }


@settings(max_examples=200, deadline=None)
@given(cells=_cells, total=st.integers(1, 9))
def test_the_makespan_is_within_the_greedy_bound(cells: list[Cell], total: int) -> None:
    """Least-loaded-first never ends more than one unit above the average load; a unit
    is at most a whole model group (splits only ever lower the makespan)."""
    plan = plan_shards(cells, total)
    known = [c.cost_s for c in cells if c.measured and c.cost_s]
    fallback = statistics.median(known) if known else 1.0

    def cost(c: Cell) -> float:
        return c.cost_s if c.cost_s is not None else (fallback if c.measured else 0.0)

    groups: dict[str, float] = {}
    for c in cells:
        groups[c.group] = groups.get(c.group, 0.0) + cost(c)
    total_cost = sum(groups.values())
    assert sum(s.expected_s for s in plan.shards) >= total_cost - 1e-6
    assert plan.makespan_s <= total_cost / total + max(groups.values(), default=0.0) + 1e-6


def test_a_model_s_cells_stay_together_unless_splitting_helps() -> None:
    # Two models of equal cost over two shards: each shard opens one model.
    cells = [Cell(f"a{i}", "A", 10.0) for i in range(3)] + [
        Cell(f"b{i}", "B", 10.0) for i in range(3)
    ]
    plan = plan_shards(cells, 2)
    assert {plan.shard_of(f"a{i}") for i in range(3)} != {plan.shard_of(f"b{i}") for i in range(3)}
    assert len({plan.shard_of(f"a{i}") for i in range(3)}) == 1
    # One big model over two shards: split, and the half without the opener pays an open.
    big = [Cell("big0", "A", 40.0)] + [Cell(f"big{i}", "A", 10.0) for i in range(1, 7)]
    split = plan_shards(big, 2)
    assert all(s.cells for s in split.shards)
    unsplit_makespan = sum(c.cost_s or 0 for c in big)
    assert split.makespan_s < unsplit_makespan
    assert sum(s.expected_s for s in split.shards) > unsplit_makespan  # one more open


def test_a_split_pays_the_model_open_its_openings_show() -> None:
    # The first cell opened the model (21 s outside its timed requests, the others 1 s):
    # one more open costs the other half 20 s, whatever the timed parts cost.
    big = [Cell("big0", "A", 60.0, open_s=21.0)] + [
        Cell(f"big{i}", "A", 30.0, open_s=1.0) for i in range(1, 7)
    ]
    plan = plan_shards(big, 2)
    assert all(s.cells for s in plan.shards)
    assert sum(s.expected_s for s in plan.shards) == pytest.approx(60.0 + 6 * 30.0 + 20.0)


def test_without_history_cells_spread_evenly_by_a_stable_hash() -> None:
    cells = [Cell(f"suites/s.yaml::c{i}", f"c{i}") for i in range(10)]
    plan = plan_shards(cells, 3)
    assert not plan.timed
    assert sorted(len(s.cells) for s in plan.shards) == [3, 3, 4]
    assert "stable hash" in plan.costs_from


def test_stored_cost_prefers_wall_time_and_estimates_older_files() -> None:
    base = ScenarioResult(
        id="s", suite="s", name="s", backend="torch", device="cpu", precision="fp32"
    )
    assert stored_cost_s(base) is None
    old = ScenarioResult(**{**base.__dict__, "warmup_ns": 10**9, "samples_ns": (10**9,) * 2})
    assert stored_cost_s(old) == pytest.approx(3.0)
    new = ScenarioResult(**{**old.__dict__, "wall_ns": 5 * 10**9})
    assert stored_cost_s(new) == pytest.approx(5.0)


@pytest.mark.parametrize("text", ["", "3", "0/2", "3/2", "a/b", "1/0", "1/100000", "-1/2"])
def test_a_bad_shard_is_refused_with_the_fix(text: str) -> None:
    with pytest.raises(ShardError) as err:
        ShardSpec.parse(text, source="--perfguard-shard")
    assert "--perfguard-shard is" in str(err.value) and "K/N" in str(err.value)


def test_the_plan_file_round_trips_and_refuses_tampering(tmp_path: Path) -> None:
    plan = plan_shards([Cell(f"c{i}", f"g{i % 2}", float(i + 1)) for i in range(5)], 2)
    path = write_plan(plan, ShardSpec(2, 2), tmp_path)
    recorded = read_plan(path)
    assert recorded.shard == ShardSpec(2, 2) and recorded.plan == plan
    assert recorded.plan.digest == plan.digest and recorded.contention_limit is None
    write_plan(plan, ShardSpec(1, 2), tmp_path, contention_limit=0.25)
    assert read_plan(path).contention_limit == 0.25
    data = json.loads(path.read_text())
    data["shards"][0]["cells"].append("smuggled")
    write_json_atomic(path, data)
    with pytest.raises(ResultsError, match="digest"):
        read_plan(path)
    data["shards"] = data["shards"][:1]
    write_json_atomic(path, data)
    with pytest.raises(ResultsError, match=r"shard\.json.*expected shards 1\.\.2"):
        read_plan(path)


def test_a_plan_that_does_not_fit_the_collected_tests_names_them(tmp_path: Path) -> None:
    plan = plan_shards([Cell(f"suites/s.yaml::c{i}", "m") for i in range(3)], 2)
    check_collected(plan, [f"suites/s.yaml::c{i}" for i in (2, 0, 1)], where="p.json")
    extra = [f"suites/s.yaml::x{i}" for i in range(8)]
    with pytest.raises(ShardError) as err:
        check_collected(plan, ["suites/s.yaml::c0", *extra], where="p.json")
    text = str(err.value)
    assert text.startswith(
        "the shard plan p.json does not match this run's tests: 8 collected tests not in "
        "the plan: suites/s.yaml::x0, suites/s.yaml::x1, suites/s.yaml::x2, "
        "suites/s.yaml::x3, suites/s.yaml::x4 (and 3 more); 2 planned tests not collected: "
        "suites/s.yaml::c1, suites/s.yaml::c2; expected"
    ), text
    assert "Fix: the plan was made for another commit" in text
    # The file round-trips; a shard's shard.json holds the same plan and reads alike.
    path = write_plan_file(plan, tmp_path / "deep" / "plan.json")
    spec = ShardSpec(1, 2)
    assert read_plan_file(path, source="--perfguard-shard-plan", shard=spec).digest == plan.digest
    shard_json = write_plan(plan, ShardSpec(2, 2), tmp_path / "run")
    assert read_plan_file(shard_json, source="x", shard=spec).digest == plan.digest
    with pytest.raises(ShardError, match=r"plans 2 shards, but this run is shard 1/3"):
        read_plan_file(path, source="x", shard=ShardSpec(1, 3))
    assert not list((tmp_path / "deep").glob(".*.tmp"))  # written atomically


def test_plan_lines_name_each_shard_and_this_run() -> None:
    plan = plan_shards([Cell(f"c{i}", f"g{i}", float(i + 1)) for i in range(4)], 2)
    lines = plan.lines(current=2, verbose=True)
    assert lines[0].startswith("shard plan: 4 cells over 2 shards")
    assert any("shard 2/2" in line and "<- this run" in line for line in lines)
    assert sum(line.startswith("    c") for line in lines) == 4
    assert ShardPlan.from_dict(plan.to_dict(), where="x") == plan


# -- end to end: shards of a real suite, merged ------------------------------------------

# Plumbing tests: the CI host is busy, so contention must not refuse a save; the merge
# takes the shards' limit (1.01) from their shard.json.
INI = "[pytest]\nperfguard_contention_limit = 1.01\n"
PLAIN_TESTS = "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n"


def suite_text(us_a: int, us_b: int) -> str:
    body = f"""\
defaults:
  warmup: {{iterations: 5, seconds: 0}}
  measure: {{iterations: 300, seconds: 0}}
  threads: 1
  stability_tolerance: 0.99
  gate: {{p95: "+50%"}}
models:
  a:
    factory: spinmodel:spin
    kwargs: {{us: {us_a}}}
    inputs:
      x: {{shape: [1, 4]}}
  b:
    factory: spinmodel:spin
    kwargs: {{us: {us_b}}}
    inputs:
      x: {{shape: [1, 4]}}
scenarios:
"""
    for model in "ab":
        for i in range(3):
            body += f"  - name: {model}{i}\n    model: {model}\n"
    return body


class Repo(SpinRepo):
    def __init__(self, pytester: pytest.Pytester) -> None:
        super().__init__(pytester, INI, ignore="shard-*/\nmerged/\npartial/\nm2/\n")
        (self.path / "test_plain.py").write_text(PLAIN_TESTS)

    def commit(self, us_a: int, us_b: int, message: str) -> str:
        return self.commit_suite(suite_text(us_a, us_b), message)

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest("--perfguard", "-p", "no:cacheprovider", *args)

    def shard(self, index: int, total: int, monkeypatch: pytest.MonkeyPatch) -> pytest.RunResult:
        # As a CI matrix gives it: through the environment.
        monkeypatch.setenv("PERFGUARD_SHARD", f"{index}/{total}")
        try:
            return self.run(f"--perfguard-report-dir=shard-{index}", "suites/", "test_plain.py")
        finally:
            monkeypatch.delenv("PERFGUARD_SHARD")

    def merge(self, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
        capsys.readouterr()
        status = cli_main(["merge", *args])
        out = capsys.readouterr()
        return status, out.out + out.err


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture
def repo(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Repo:
    monkeypatch.chdir(pytester.path)
    monkeypatch.delenv("PERFGUARD_SHARD", raising=False)
    return Repo(pytester)


def test_three_shards_merge_into_the_unsharded_run(
    repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = repo.commit(150, 150, "base")
    repo.run("--perfguard-save", "suites/").assert_outcomes(passed=6)
    head = repo.commit(150, 450, "model b 3x slower")

    whole = repo.run("suites/", "test_plain.py")
    whole.assert_outcomes(passed=5, failed=3)
    whole_ids = {
        s["id"] for s in _json(repo.path / "reports" / head[:12] / "results.json")["scenarios"]
    }

    outcomes = []
    for index in (1, 2, 3):
        result = repo.shard(index, 3, monkeypatch)
        result.stdout.fnmatch_lines(
            [
                "perfguard: shard plan: 6 cells over 3 shards; costs from the baseline of *",
                f"perfguard:   shard {index}/3: * cells, * s expected  <- this run",
            ]
        )
        outcomes.append(result.parseoutcomes())
        run_dir = repo.path / f"shard-{index}" / head[:12]
        assert (run_dir / "shard.json").is_file() and (run_dir / "results.json").is_file()
    # Every test ran in exactly one shard; pytest counts the others as deselected.
    assert sum(o.get("passed", 0) + o.get("failed", 0) for o in outcomes) == 8
    assert all(
        o.get("deselected", 0) == 8 - o.get("passed", 0) - o.get("failed", 0) for o in outcomes
    )

    status, out = repo.merge(
        "shard-1", "shard-2", "shard-3", "--shards", "3", "--out", "merged", capsys=capsys
    )
    assert status == 1, out  # the regression of model b fails the merged gate
    assert "merged 3 of 3 shards" in out and "regression" in out
    merged_dir = repo.path / "merged" / head[:12]
    merged = _json(merged_dir / "results.json")
    ids = [s["id"] for s in merged["scenarios"]]
    assert sorted(ids) == sorted(whole_ids) and len(ids) == len(set(ids)) == 6
    # Every cell's cost is recorded, the failed ones' too: the next plan balances them.
    assert all(s["wall_ns"] > 0 for s in merged["scenarios"])
    comparison = _json(merged_dir / "comparison.json")
    assert comparison["exit_status"] == 1 and comparison["baseline"]["commit"] == base
    merged_verdicts = {v["scenario_id"]: v["verdict"] for v in comparison["verdicts"]}
    assert set(merged_verdicts) == whole_ids
    assert (merged_dir / "report.html").is_file() and (merged_dir / "summary.md").is_file()

    # One run's judgement of the same measurements: perfguard compare on the merged
    # results against the stored baseline gives every cell the same verdict.
    baseline_file = next((repo.path / "baselines").glob(f"*/{base}.json"))
    capsys.readouterr()
    assert (
        cli_main(
            [
                "compare",
                str(baseline_file),
                str(merged_dir / "results.json"),
                "--rootdir",
                str(repo.path),
                "--contention-limit",
                "1.01",
                "--json",
            ]
        )
        == 1
    )
    judged = {v["scenario_id"]: v["verdict"] for v in json.loads(capsys.readouterr().out)}
    assert judged == merged_verdicts
    assert {sid for sid, v in judged.items() if v == "regression"} == {
        f"suites/s.yaml::b{i}" for i in range(3)
    }

    # A missing shard fails the merge, naming the shard and each of its cells.
    plan = _json(repo.path / "shard-2" / head[:12] / "shard.json")
    lost = plan["shards"][2]["cells"]
    status, out = repo.merge("shard-1", "shard-2", "--out", "partial", capsys=capsys)
    assert status == 1
    assert "shard 3/3 left no output" in out
    partial = _json(repo.path / "partial" / head[:12] / "results.json")
    errors = {s["id"]: s for s in partial["scenarios"] if s["status"] == "error"}
    assert set(errors) == set(lost)
    assert all("shard 3/3" in s["message"] for s in errors.values())
    summary = (repo.path / "partial" / head[:12] / "summary.md").read_text()
    assert all(cid in summary for cid in lost)

    # Overlap and other commits are refused (exit 2), with what was found.
    status, out = repo.merge("shard-1", "shard-1", capsys=capsys)
    assert status == 2 and "two outputs of shard 1/3" in out
    status, out = repo.merge("shard-1", "reports", capsys=capsys)
    assert status == 2 and "holds no shard output" in out


def test_merged_save_writes_one_launch_of_every_shard(
    repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    head = repo.commit(150, 150, "base")
    for index in (1, 2):
        repo.shard(index, 2, monkeypatch)
    status, out = repo.merge("shard-1", "shard-2", "--save", "--out", "merged", capsys=capsys)
    assert status == 0, out
    saved = list((repo.path / "baselines").glob(f"*/{head}.json"))
    assert len(saved) == 1, out
    doc = _json(saved[0])
    assert len(doc["launches"]) == 1
    assert len(doc["launches"][0]["scenarios"]) == 6
    # Every shard's wall times reach the archive: the next plan is costed from them.
    assert all(s["wall_ns"] > 0 for s in doc["launches"][0]["scenarios"])
    # With a shard missing, nothing is saved.
    status, out = repo.merge("shard-1", "--shards", "2", "--save", "--out", "m2", capsys=capsys)
    assert status == 1 and "baseline NOT saved" in out
    # Nor with a shard that ran but lost a planned cell from its results (its shard.json
    # still lists it): the merge used to report one cell fewer and save.
    (results,) = (repo.path / "shard-2").rglob("results.json")
    doc = _json(results)
    lost = doc["scenarios"].pop()["id"]
    results.write_text(json.dumps(doc))
    for old in (repo.path / "baselines").rglob("*.json"):
        old.unlink()
    status, out = repo.merge("shard-1", "shard-2", "--save", "--out", "m3", capsys=capsys)
    assert status == 1, out
    assert "ran but left no result for 1 of its planned cells" in out and lost in out
    assert "baseline NOT saved" in out
    assert not list((repo.path / "baselines").rglob(f"{head}.json"))


def test_the_merged_run_holds_every_shards_traces(
    repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo.commit(150, 150, "base")
    monkeypatch.setenv("PERFGUARD_SHARD", "1/2")
    repo.run("--perfguard-report-dir=shard-1", "--perfguard-profile", "suites/")
    monkeypatch.setenv("PERFGUARD_SHARD", "2/2")
    repo.run("--perfguard-report-dir=shard-2", "--perfguard-profile", "suites/")
    monkeypatch.delenv("PERFGUARD_SHARD")
    status, out = repo.merge("shard-1", "shard-2", "--out", "merged", capsys=capsys)
    assert status == 0, out
    (results,) = (repo.path / "merged").glob("*/results.json")
    scenarios = _json(results)["scenarios"]
    assert len(scenarios) == 6
    for scenario in scenarios:  # each trace where its results point, from its shard
        trace = results.parent / scenario["profile"]["trace"]
        assert "traceEvents" in _json(trace), scenario["id"]


def test_more_shards_than_cells_leaves_empty_shards_that_pass(
    repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    head = repo.commit(150, 150, "base")
    monkeypatch.setenv("PERFGUARD_SHARD", "4/4")
    # One cell over four shards: shard 4 has nothing to run, and still leaves its files.
    result = repo.run("--perfguard-report-dir=shard-4", "suites/s.yaml::a0")
    assert result.ret == 0
    assert (repo.path / "shard-4" / head[:12] / "shard.json").is_file()


def test_a_bad_shard_setting_stops_the_run_before_measuring(
    repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo.commit(150, 150, "base")
    monkeypatch.setenv("PERFGUARD_SHARD", "3/2")
    result = repo.run("suites/")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*$PERFGUARD_SHARD is '3/2'*K/N*"])
    # The command line wins over the environment.
    result = repo.run("suites/", "--perfguard-shard=1/1", "--collect-only", "-q")
    assert result.ret == 0


def test_environments_sharing_a_fingerprint_merge() -> None:
    one = Environment("fp", {"gpu": "H100"}, {"hostname": "r1", "driver": "550"})
    two = Environment("fp", {"gpu": "H100"}, {"hostname": "r2", "driver": "550"})
    env = merged_environment([one, two])
    assert env.fingerprint == "fp" and env.recorded == {"hostname": "r1, r2", "driver": "550"}


# -- merge refusals, on outputs built in memory --------------------------------------------

_SHA = "a" * 40


def _result(cid: str) -> ScenarioResult:
    return ScenarioResult(
        id=cid,
        suite="suites/s.yaml",
        name=cid.split("::")[-1],
        backend="torch",
        device="cpu",
        precision="fp32",
        samples_ns=(1000, 1100, 1200),
    )


def _output(
    plan: ShardPlan,
    index: int,
    *,
    sha: str = _SHA,
    fingerprint: str = "fp",
    mode: str = "plain",
    cells: tuple[str, ...] | None = None,
    baseline: str | None = "b" * 40,
    contention_limit: float | None = 0.1,
) -> ShardOutput:
    ids = plan.cells(index) if cells is None else cells
    run = RunResult(
        CommitInfo(sha, "main", False),
        Environment(fingerprint, {"cpu": "x"}, {"hostname": f"runner-{index}"}),
        tuple(_result(cid) for cid in ids),
        f"2026-12-01T00:00:0{index}+00:00",
        "0",
        mode=mode,
    )
    verdicts = tuple(
        compare_scenario(r, r, DEFAULT_GATES, baseline_commit=baseline) for r in run.scenarios
    )
    comparison = StoredComparison(verdicts, {"commit": baseline, "how": "nearest"}, True, 0)
    spec = ShardSpec(index, plan.total)
    return ShardOutput(Path(f"shard-{index}"), spec, plan, run, comparison, contention_limit)


def _plan(n: int = 6, total: int = 3) -> ShardPlan:
    return plan_shards(
        [Cell(f"suites/s.yaml::c{i}", f"g{i}", float(i + 1)) for i in range(n)], total
    )


@pytest.mark.parametrize(
    ("change", "found"),
    [
        ({"sha": "c" * 40}, "the shards differ in commit"),
        ({"mode": "ab"}, "the shards differ in mode"),
        ({"fingerprint": "other"}, "the shards differ in environment fingerprint"),
        ({"baseline": "d" * 40}, "the shards differ in baseline"),
        ({"contention_limit": 0.5}, "the shards differ in contention limit"),
    ],
)
def test_shards_of_different_runs_are_refused(change: dict, found: str) -> None:
    plan = _plan()
    outputs = [_output(plan, 1), _output(plan, 2, **change), _output(plan, 3)]
    with pytest.raises(ShardError, match=found) as err:
        merge_outputs(outputs)
    assert "shard 2/3 (shard-2)" in str(err.value) and "Fix:" in str(err.value)


def test_shards_of_different_plans_cells_twice_or_misplaced_are_refused() -> None:
    plan, other = _plan(), _plan(n=7)
    with pytest.raises(ShardError, match="differ in plan"):
        merge_outputs([_output(plan, 1), _output(other, 2)])
    twice = plan.cells(1)[0]
    with pytest.raises(ShardError, match=r"measured by shard 1 and by shard 2"):
        merge_outputs([_output(plan, 1), _output(plan, 2, cells=(*plan.cells(2), twice))])
    with pytest.raises(ShardError, match=r"which the plan gave to shard 1"):
        merge_outputs([_output(plan, 2, cells=(*plan.cells(2), twice)), _output(plan, 3)])
    with pytest.raises(ShardError, match="--shards is 4 but the shards' plan has 3"):
        merge_outputs([_output(plan, 1)], shards=4)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 30), total=st.integers(1, 6), data=st.data())
def test_merging_any_subset_of_shards_accounts_for_every_cell(
    n: int, total: int, data: st.DataObject
) -> None:
    plan = _plan(n, total)
    present = data.draw(st.sets(st.integers(1, total), min_size=1))
    merged = merge_outputs([_output(plan, i) for i in sorted(present)])
    ids = [r.id for r in merged.run.scenarios]
    assert sorted(ids) == sorted(plan.all_cells)  # every cell once: measured, or an error
    assert set(merged.missing) == set(range(1, total + 1)) - present
    for result in merged.run.scenarios:
        missing = plan.shard_of(result.id) not in present
        assert (result.status.value == "error") == missing
    assert set(merged.verdicts) == {cid for i in present for cid in plan.cells(i)}
    assert merged_outcome_status(merged, gate=True) == (1 if merged.missing else 0)
    assert merged.run.environment.recorded["hostname"] == ", ".join(
        f"runner-{i}" for i in sorted(present)
    )


def test_a_cell_a_present_shard_left_out_is_an_error_and_the_merge_not_whole() -> None:
    plan = _plan()
    dropped = plan.cells(2)[0]
    kept = tuple(c for c in plan.cells(2) if c != dropped)
    merged = merge_outputs([_output(plan, 1), _output(plan, 2, cells=kept), _output(plan, 3)])
    assert merged.lost == {2: (dropped,)} and not merged.missing and not merged.whole
    (record,) = [r for r in merged.run.scenarios if r.id == dropped]
    assert record.status.value == "error" and "ran but left no result" in (record.message or "")
    assert merged_outcome_status(merged, gate=True) == 1
    assert merge_outputs([_output(plan, i) for i in (1, 2, 3)]).whole


def test_a_shard_under_xdist_writes_its_plan_once(
    repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = repo.commit(150, 150, "base")
    monkeypatch.setenv("PERFGUARD_SHARD", "1/2")
    result = repo.run("-p", "xdist", "-n", "2", "--perfguard-report-dir=shard-1", "suites/")
    assert result.ret == 0, result.stdout.str()
    # The workers planned; the controller prints the plan once, in its summary.
    assert result.stdout.str().count("perfguard: shard plan: 6 cells over 2 shards") == 1
    run_dir = repo.path / "shard-1" / head[:12]
    plan = _json(run_dir / "shard.json")
    measured = [s["id"] for s in _json(run_dir / "results.json")["scenarios"]]
    assert sorted(measured) == sorted(plan["shards"][0]["cells"]) and plan["shard"] == 1


def test_merge_copies_regular_trace_files_only(tmp_path: Path) -> None:
    # A shard's folder is a downloaded artifact: a trace that links to a file outside it
    # must not carry that file's contents into the merged report.
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not a trace", "utf-8")
    shard = tmp_path / "shard-1"
    traces = shard / TRACES_DIR
    traces.mkdir(parents=True)
    (traces / "cell.json").write_text('{"traceEvents": []}', "utf-8")
    (traces / "leak.json").symlink_to(secret)
    (traces / "dir.json").mkdir()
    linked = tmp_path / "shard-2"
    linked.mkdir()
    (linked / TRACES_DIR).symlink_to(secret.parent, target_is_directory=True)
    (secret.parent / "other.json").write_text("{}", "utf-8")
    run_folder = tmp_path / "merged" / "abc"
    skipped = gather_traces([1, 2], {1: shard, 2: linked}, run_folder)
    copied = sorted(p.name for p in (run_folder / TRACES_DIR).iterdir())
    assert copied == ["cell.json"]
    assert sorted(p.name for p in skipped) == ["dir.json", "leak.json", TRACES_DIR]


# -- one plan per run: --perfguard-shard-plan-out, then --perfguard-shard-plan ------------

PLAN_JOB = ("--collect-only", "-q", "--perfguard-shard=1/2", "--perfguard-shard-plan-out=plan.json")


def _digest(folder: Path) -> str:
    (path,) = folder.rglob("shard.json")
    return str(_json(path)["digest"])


def _second_launch_of(repo: Repo, sha: str, us_a: int, us_b: int) -> None:
    """A second launch of ``sha``'s baseline lands in the archive, measured with other
    costs (as when its baseline job is re-run on a runner in another state)."""
    branch = repo.git("rev-parse", "--abbrev-ref", "HEAD")
    repo.git("checkout", "-q", sha)
    (repo.path / "suites" / "s.yaml").write_text(suite_text(us_a, us_b))
    result = repo.run("--perfguard-save", "--perfguard-allow-dirty", "suites/")
    assert result.ret == 0, result.stdout.str()
    repo.git("checkout", "-q", "--", "suites/s.yaml")
    repo.git("checkout", "-q", branch)


def test_a_plan_made_before_the_shards_keeps_them_agreeing_as_the_archive_changes(
    repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = repo.commit(150, 150, "parent")
    repo.run("--perfguard-save", "suites/").assert_outcomes(passed=6)
    (repo.path / "README.md").write_text("docs\n")
    repo.git("add", "README.md")
    repo.git("commit", "-qm", "docs")
    head = repo.git("rev-parse", "HEAD")

    # The plan job: collection only, costed from the archive as it is now.
    made = repo.run(*PLAN_JOB, "suites/", "test_plain.py")
    assert made.ret == 0, made.stdout.str()
    plan = _json(repo.path / "plan.json")
    made.stdout.fnmatch_lines([f"perfguard: shard plan {plan['digest']} written to *plan.json"])
    assert plan["total"] == 2 and plan["schema_version"] == 1
    # A collection-only run leaves no run files: they would replace a real run's report.
    assert not (repo.path / "reports" / head[:12]).exists()

    # Shard 1 runs, each way: following the plan, and planning on its own (the old way).
    monkeypatch.setenv("PERFGUARD_SHARD_PLAN", "plan.json")
    first = repo.shard(1, 2, monkeypatch)
    first.stdout.fnmatch_lines(
        [f"perfguard: shard plan {plan['digest']} from plan.json ($PERFGUARD_SHARD_PLAN)*"]
    )
    monkeypatch.delenv("PERFGUARD_SHARD_PLAN")
    monkeypatch.setenv("PERFGUARD_SHARD", "1/2")
    repo.run("--perfguard-report-dir=old-1", "suites/", "test_plain.py")
    # The archive changes before shard 2 starts: the parent's baseline gains a launch in
    # which model b cost 20 times as much, so shard 2's own plan differs.
    _second_launch_of(repo, parent, 150, 3000)
    monkeypatch.setenv("PERFGUARD_SHARD", "2/2")
    repo.run("--perfguard-report-dir=old-2", "suites/", "test_plain.py")
    monkeypatch.delenv("PERFGUARD_SHARD")
    monkeypatch.setenv("PERFGUARD_SHARD_PLAN", "plan.json")
    repo.shard(2, 2, monkeypatch)
    monkeypatch.delenv("PERFGUARD_SHARD_PLAN")

    # Planning on their own, the shards disagree, and the commit's baseline is lost.
    assert _digest(repo.path / "old-1") != _digest(repo.path / "old-2")
    status, out = repo.merge("old-1", "old-2", "--save", "--out", "m-old", capsys=capsys)
    assert status == 2 and "the shards differ in plan" in out, out
    assert not list((repo.path / "baselines").glob(f"*/{head}.json"))
    # Following the plan, both carry its digest, and the merged save goes through.
    assert _digest(repo.path / "shard-1") == _digest(repo.path / "shard-2") == plan["digest"]
    status, out = repo.merge("shard-1", "shard-2", "--save", "--out", "merged", capsys=capsys)
    assert status == 0, out
    (saved,) = (repo.path / "baselines").glob(f"*/{head}.json")
    (launch,) = _json(saved)["launches"]
    assert len(launch["scenarios"]) == 6


MISMATCH = "ERROR: perfguard: the shard plan plan.json (--perfguard-shard-plan) does not match "


@pytest.mark.parametrize(
    ("plan_args", "shard_args", "found"),
    [
        # A cell collected here that the plan lacks would run on no shard.
        (("-k", "not a0"), (), "1 collected test not in the plan: suites/s.yaml::a0;"),
        # A planned cell not collected here would be lost from the merge.
        (
            (),
            ("-k", "not a0 and not b1"),
            "2 planned tests not collected: suites/s.yaml::a0, suites/s.yaml::b1;",
        ),
    ],
)
def test_a_plan_of_other_tests_is_refused_before_measuring(
    repo: Repo, plan_args: tuple[str, ...], shard_args: tuple[str, ...], found: str
) -> None:
    repo.commit(150, 150, "base")
    assert repo.run(*PLAN_JOB, "suites/", *plan_args).ret == 0
    result = repo.run(
        "--perfguard-shard=1/2", "--perfguard-shard-plan=plan.json", "suites/", *shard_args
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"{MISMATCH}this run's tests: {found} expected the tests the plan was made from*"
            "Fix: the plan was made for another commit, another set of suites or another "
            "-k/-m selection; make it again in the plan job*"
        ]
    )
    assert not list(repo.path.rglob("results.json"))  # nothing measured, nothing written


def test_a_plan_for_other_shards_or_unreadable_is_refused(
    repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo.commit(150, 150, "base")
    assert repo.run(*PLAN_JOB, "suites/").ret == 0
    result = repo.run("--perfguard-shard=2/3", "--perfguard-shard-plan=plan.json", "suites/")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: perfguard: --perfguard-shard-plan (*plan.json) plans 2 shards, but this run "
            "is shard 2/3; expected a plan over 3 shards*Fix: *"
        ]
    )
    # A missing file is an error, never a silent fallback to planning here.
    monkeypatch.setenv("PERFGUARD_SHARD_PLAN", "missing.json")
    result = repo.run("--perfguard-shard=1/2", "suites/")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: perfguard: $PERFGUARD_SHARD_PLAN is '*missing.json', and its plan cannot be "
            "read: *not found*Fix: pass the plan file the plan job wrote*"
        ]
    )
    # The command line wins over the variable.
    result = repo.run(
        "--perfguard-shard=1/2",
        "--perfguard-shard-plan=plan.json",
        "--collect-only",
        "-q",
        "suites/",
    )
    assert result.ret == 0, result.stderr.str()
    monkeypatch.delenv("PERFGUARD_SHARD_PLAN")
    # A file that is not a plan, or one edited by hand.
    (repo.path / "bad.json").write_text("{")
    plan = _json(repo.path / "plan.json")
    plan["shards"][0]["cells"].pop()
    (repo.path / "edited.json").write_text(json.dumps(plan))
    for name, why in (
        ("bad.json", "*bad.json:1: invalid JSON*"),
        ("edited.json", "*digest*does not match*"),
    ):
        result = repo.run("--perfguard-shard=1/2", f"--perfguard-shard-plan={name}", "suites/")
        assert result.ret == pytest.ExitCode.USAGE_ERROR, name
        result.stderr.fnmatch_lines([f"ERROR: perfguard: --perfguard-shard-plan is '*{name}'{why}"])
    # The plan needs the shard; a run makes the plan or follows one, not both.
    result = repo.run("--perfguard-shard-plan=plan.json", "suites/")
    result.stderr.fnmatch_lines(["*--perfguard-shard-plan was given without a shard*"])
    result = repo.run(
        "--perfguard-shard=1/2",
        "--perfguard-shard-plan=plan.json",
        "--perfguard-shard-plan-out=again.json",
        "suites/",
    )
    result.stderr.fnmatch_lines(["*a run either makes the plan (the plan job) or follows one*"])


def test_the_plan_is_written_and_followed_under_xdist(
    repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = repo.commit(150, 150, "base")
    xdist = ("-p", "xdist", "-n", "2")
    # Collection only: xdist starts no workers, and the run writes the plan itself.
    assert repo.run(*xdist, *PLAN_JOB, "suites/").ret == 0
    collected = _json(repo.path / "plan.json")
    # A measuring run: the workers plan, the controller writes the plan once.
    result = repo.run(
        *xdist, "--perfguard-shard=2/2", "--perfguard-shard-plan-out=measured.json", "suites/"
    )
    assert result.ret == 0, result.stdout.str()
    assert _json(repo.path / "measured.json")["digest"] == collected["digest"]
    # Each worker follows the plan; shard.json is that plan.
    result = repo.run(
        *xdist,
        "--perfguard-shard=1/2",
        "--perfguard-shard-plan=plan.json",
        "--perfguard-report-dir=shard-1",
        "suites/",
    )
    assert result.ret == 0, result.stdout.str()
    assert result.stdout.str().count(f"perfguard: shard plan {collected['digest']} from") == 1
    assert _digest(repo.path / "shard-1") == collected["digest"]
    measured = [
        s["id"] for s in _json(repo.path / "shard-1" / head[:12] / "results.json")["scenarios"]
    ]
    assert sorted(measured) == sorted(collected["shards"][0]["cells"])
    # A plan that does not fit, found in the workers, is the controller's usage error.
    result = repo.run(
        *xdist,
        "--perfguard-shard=1/2",
        "--perfguard-shard-plan=plan.json",
        "suites/",
        "-k",
        "not b0",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stdout.fnmatch_lines(
        [f"{MISMATCH}this run's tests: 1 planned test not collected: suites/s.yaml::b0;*"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
