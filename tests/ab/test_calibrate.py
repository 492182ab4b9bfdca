"""`perfguard calibrate` (perfguard.ab.calibrate): the run schedule, the calibration file
that lets a calibration resume, the cells it takes, and the command end to end on a
real model (A/A and planted runs in same-run A/B workers)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfguard.ab.calibrate import (
    CalibrationPlan,
    calibrate_command,
    select_cells,
    sheet_for,
    why_not_calibrated,
)
from perfguard.cli import main
from perfguard.core.errors import StoreError
from perfguard.judge.calibration import CalibrationFile, CalibrationRun
from perfguard.measure.opencell import RunContext
from perfguard.suite.loader import load_suite
from tests.helpers.served import served_suite

GEN = "generate: {prompt_tokens: 16, new_tokens: 8}\n"

SUITE = """\
defaults:
  warmup: {iterations: 20, seconds: 0.1}
  measure: {iterations: 100, seconds: 0.2}
models:
  convnet:
    factory: perfguard_examples.convnet:build
    inputs:
      image: {shape: [1, 3, 16, 16], dtype: float32}
scenarios:
  - {name: cnn, model: convnet, threads: 1, gate: {p95: "+10%"}}
  - {name: busy, model: convnet, threads: 1, load: {concurrency: 2}}
  - {name: other, model: convnet, threads: 1}
  - {name: trt, model: convnet, backend: tensorrt, device: cuda, precision: fp16}
  - {name: broken, model: missing, threads: 1}
  - {name: gen, model: lm, threads: 1, generate: {prompt_tokens: 8, new_tokens: 4}}
""".replace(
    "scenarios:",
    "  missing: {factory: 'nosuchmodule:build', inputs: {x: {shape: [1]}}}\n"
    "  lm: {factory: 'perfguard_examples.tinylm:build', kwargs: {kind: llama}}\nscenarios:",
)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "suites" / "s.yaml"
    path.parent.mkdir()
    path.write_text(SUITE)
    return path


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    aa=st.integers(0, 6),
    planted=st.integers(0, 4),
    done=st.lists(st.sampled_from([0.0, 0.1, 0.2]), max_size=12),
    seed=st.integers(0, 5),
)
def test_property_a_schedule_makes_each_condition_its_count_less_what_is_kept(
    suite: Path, aa: int, planted: int, done: list[float], seed: int
) -> None:
    cell = load_suite(suite).scenarios[0]
    plan = CalibrationPlan(aa=aa, planted=planted, sizes=(0.2, 0.1), seed=seed)
    kept = [CalibrationRun(p, "unchanged", 1.0, 200, 1.0) for p in done]
    todo = plan.schedule(cell, kept)
    want = Counter({0.0: aa, 0.1: planted, 0.2: planted})
    assert Counter(todo) == want - Counter(done)
    assert plan.schedule(cell, kept) == todo  # the seed fixes the order


def test_default_sizes_are_the_cells_limit_and_twice_it(suite: Path) -> None:
    cnn, _, other, *_ = load_suite(suite).scenarios
    assert CalibrationPlan().sizes_for(cnn) == (0.1, 0.2)
    assert CalibrationPlan().sizes_for(other) == (0.05, 0.1)
    assert CalibrationPlan(sizes=(0.3, 0.02)).sizes_for(cnn) == (0.02, 0.3)


def test_cells_that_cannot_be_calibrated_here_are_passed_over_with_the_fix(
    suite: Path,
) -> None:
    cells = {c.item_name: c for c in select_cells([suite.parent], None)}
    ctx = RunContext(rootdir=suite.parent.parent, cache_dir=suite.parent / ".cache")
    assert why_not_calibrated(cells["cnn"], ctx) is None
    assert why_not_calibrated(cells["busy[c2]"], ctx) is None  # its load requests are planted
    assert why_not_calibrated(cells["gen[p8]"], ctx) is None  # its tokens are planted
    missing = str(why_not_calibrated(cells["trt"], ctx))
    assert missing.startswith("it cannot run here:") and "TensorRT is not installed" in missing
    picked = select_cells([suite], "cnn or busy")
    assert [c.item_name for c in picked] == ["cnn", "busy[c2]"]
    assert select_cells([suite], "not cnn and not busy")[0].item_name == "other"
    with pytest.raises(StoreError, match="is not a keyword expression"):
        select_cells([suite], "cnn and (")


def test_a_calibration_file_keeps_runs_under_the_same_plan_only(
    tmp_path: Path, suite: Path
) -> None:
    cell = load_suite(suite).scenarios[0]
    plan = CalibrationPlan(aa=2, planted=1)
    store = CalibrationFile(tmp_path / "baselines", "abc123")
    runs = [CalibrationRun(0.0, "unchanged", 1.01, 200, 2.0)]
    store.keep("s.yaml::cnn", plan.key(cell), runs, sheet_for("s.yaml::cnn", cell, runs))
    again = CalibrationFile(tmp_path / "baselines", "abc123")
    assert again.runs("s.yaml::cnn", plan.key(cell)) == (runs, False)
    other = CalibrationPlan(aa=2, planted=1, sizes=(0.3,)).key(cell)
    assert again.runs("s.yaml::cnn", other) == ([], True)
    assert again.runs("s.yaml::new", other) == ([], False)
    data = json.loads((tmp_path / "baselines" / "abc123" / "calibration.json").read_text())
    assert data["version"] == 2
    assert data["cells"]["s.yaml::cnn"]["ab"]["sheet"]["false_alarms"]["n"] == 1
    # A file of version 1 (one same-run A/B entry per cell) reads as each cell's `ab` entry.
    data["version"], data["cells"]["s.yaml::cnn"] = 1, data["cells"]["s.yaml::cnn"]["ab"]
    (tmp_path / "baselines" / "abc123" / "calibration.json").write_text(json.dumps(data))
    older = CalibrationFile(tmp_path / "baselines", "abc123")
    assert older.runs("s.yaml::cnn", plan.key(cell)) == (runs, False)
    (tmp_path / "baselines" / "abc123" / "calibration.json").write_text("{not json")
    with pytest.raises(StoreError, match="cannot be read"):
        CalibrationFile(tmp_path / "baselines", "abc123")


def test_calibrate_measures_aa_and_planted_runs_and_resumes(
    suite: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = suite.parent.parent
    monkeypatch.chdir(root)
    argv = ["calibrate", "suites", "-k", "cnn", "--aa", "2", "--planted", "1"]
    status = main([*argv, "--sizes", "1.0"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "1 cell(s), 3 run(s) to make" in out
    assert "estimate: 1 cell/mode(s) not timed yet" in out
    assert "suites/s.yaml::cnn: run 3/3" in out
    (path,) = (root / "baselines").glob("*/calibration.json")
    cell = json.loads(path.read_text())["cells"]["suites/s.yaml::cnn"]["ab"]
    runs = [CalibrationRun.from_dict(r) for r in cell["runs"]]
    assert sorted(r.planted for r in runs) == [0.0, 0.0, 1.0]
    assert all(r.pairs >= 200 and r.seconds > 0 for r in runs)
    # Twice each request's own time on side B: its P95 ratio is near 2 on any machine.
    (doubled,) = [r for r in runs if r.planted == 1.0]
    assert doubled.alarm and doubled.ratio is not None and doubled.ratio > 1.5
    assert cell["sheet"]["caught"][0]["n"] == 1
    # The same command again makes nothing; one more A/A run makes one.
    assert main([*argv, "--sizes", "1.0"]) == 0
    assert "0 run(s) to make (3 kept from before)" in capsys.readouterr().out
    assert main([*argv[:-4], "--aa", "3", "--planted", "1", "--sizes", "1.0"]) == 0
    out = capsys.readouterr().out
    assert "1 run(s) to make (3 kept from before)" in out
    assert "estimate: about 0." in out and "min for the cells with runs kept" in out
    assert main([*argv, "--sizes", "0.5", "--budget", "0"]) == 0
    out = capsys.readouterr().out
    assert "earlier ab runs were made under another plan" in out
    assert "the budget ran out after 0 of 3 runs" in out


def test_a_load_cell_and_the_archived_gate_are_calibrated_with_planted_requests(
    suite: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cell under load in same-run A/B (rounds of load levels, each client's requests
    planted), and both cells in archived mode (each run the cell measured whole in fresh
    workers, judged as against a stored baseline, a regression confirmed)."""
    root = suite.parent.parent
    monkeypatch.chdir(root)
    argv = ["calibrate", "suites", "-k", "cnn or busy", "--aa", "1", "--planted", "1"]
    status = main([*argv, "--sizes", "3.0", "--archived", "--contention-limit", "1"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "2 cell(s), 8 run(s) to make" in out
    assert "suites/s.yaml::busy[c2] (archived): run 2/2" in out
    assert "busy[c2] (same-run A/B, P95 +5%)" in out and "cnn (archived, P95 +10%)" in out
    (path,) = (root / "baselines").glob("*/calibration.json")
    cells = json.loads(path.read_text())["cells"]
    for sid, mode in [("busy[c2]", "ab"), ("busy[c2]", "archived"), ("cnn", "archived")]:
        entry = cells[f"suites/s.yaml::{sid}"][mode]
        assert sorted(r["planted"] for r in entry["runs"]) == [0.0, 3.0]
        assert entry["sheet"]["unit"] == ("runs" if mode == "archived" else "rounds")
    # Four times each request's own time: caught in same-run A/B on any machine (the
    # archived gate's verdicts hang on this machine's noise from run to run: not asserted).
    (planted,) = [r for r in cells["suites/s.yaml::busy[c2]"]["ab"]["runs"] if r["planted"]]
    assert planted["verdict"] == "regression" and planted["ratio"] > 2, planted
    (planted,) = [r for r in cells["suites/s.yaml::cnn"]["archived"]["runs"] if r["planted"]]
    assert planted["ratio"] > 2, planted
    assert "rounds per run" in out and "requests per run" in out


def test_a_generative_cell_is_calibrated_with_every_token_planted(
    suite: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its A/B runs are the gate's token pairs; four times each decoding step's own time
    planted is caught on any machine."""
    pytest.importorskip("transformers")
    monkeypatch.chdir(suite.parent.parent)
    argv = ["calibrate", "suites", "-k", "gen", "--aa", "1", "--planted", "1", "--sizes", "3.0"]
    status = main(argv)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "gen[p8] (same-run A/B, P95 +5%)" in out
    (path,) = (suite.parent.parent / "baselines").glob("*/calibration.json")
    runs = json.loads(path.read_text())["cells"]["suites/s.yaml::gen[p8]"]["ab"]["runs"]
    (planted,) = [r for r in runs if r["planted"]]
    assert planted["verdict"] == "regression" and planted["ratio"] > 2, planted


def test_a_cell_that_fails_is_reported_and_the_others_keep_their_runs(
    suite: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = suite.parent.parent
    monkeypatch.chdir(root)
    status = main(["calibrate", "suites", "-k", "other or broken or trt", "--aa", "1",
                   "--planted", "0"])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 2, out
    assert "passed over: trt: it cannot run here:" in out
    assert "failed: suites/s.yaml::broken: " in out and "nosuchmodule" in out
    assert "suites/s.yaml::other: run 1/1 A/A" in out
    (path,) = (root / "baselines").glob("*/calibration.json")
    cells = json.loads(path.read_text())["cells"]
    assert len(cells["suites/s.yaml::other"]["ab"]["runs"]) == 1
    assert cells["suites/s.yaml::broken"]["ab"]["runs"] == []


def test_a_check_runs_aa_against_the_sheet_flags_drift_and_keeps_its_history(
    suite: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = suite.parent.parent
    monkeypatch.chdir(root)
    assert main(["calibrate", "suites", "-k", "cnn", "--aa", "5", "--planted", "0"]) == 0
    (path,) = (root / "baselines").glob("*/calibration.json")
    data = json.loads(path.read_text())
    # A sheet that claims a runner far quieter than any real one: the check must say so.
    for run in data["cells"]["suites/s.yaml::cnn"]["ab"]["runs"]:
        run["ratio"] = 1.00001
    path.write_text(json.dumps(data))
    capsys.readouterr()
    status = main(["calibrate", "suites", "-k", "cnn or other", "--check", "3"])
    out = capsys.readouterr().out
    assert status == 1, out
    assert "suites/s.yaml::cnn: DRIFTED: A/A noise +-" in out
    assert "not checked: suites/s.yaml::other: it has no sheet on this runner" in out
    (check,) = json.loads(path.read_text())["cells"]["suites/s.yaml::cnn"]["ab"]["checks"]
    assert check["finding"]["drifted"] is True and len(check["runs"]) == 3 and check["at"]
    # A new plan for the cell (other sizes) starts its sheet, and its checks, again.
    assert main(["calibrate", "suites", "-k", "cnn", "--aa", "5", "--planted", "0",
                 "--sizes", "0.5", "--budget", "0"]) == 0  # fmt: skip
    assert json.loads(path.read_text())["cells"]["suites/s.yaml::cnn"]["ab"]["checks"] == []
    assert main(["calibrate", "suites", "--check", "0"]) == 2
    assert "'0' is not a number of runs >= 1" in capsys.readouterr().err


def test_an_exclusive_server_is_calibrated_archived_only(tmp_path: Path) -> None:
    """Same-run A/B would run its two servers at once: passed over, with the fix."""
    path = tmp_path / "suites" / "s.yaml"
    path.parent.mkdir()
    path.write_text(served_suite('command: [serve, --port, "{port}"]\nexclusive: true\n', GEN))
    cells = select_cells([path], None)
    ctx = RunContext(rootdir=tmp_path, cache_dir=tmp_path / ".cache")
    said: list[str] = []
    plan = CalibrationPlan(aa=1, planted=0, budget_s=0)
    plans = [plan, replace(plan, mode="archived")]
    store = CalibrationFile(tmp_path / "baselines", "fp")
    sheets, failed = calibrate_command(cells, ctx, plans, store, write=said.append)
    assert not failed and [s.mode for s in sheets] == ["archived"]
    (passed,) = [line for line in said if line.startswith("passed over in same-run A/B")]
    assert "`server.exclusive`" in passed and "`--archived` calibrates it" in passed
