"""End-to-end: save a baseline, change the model's speed, and watch the gate decide.

The model busy-waits a set number of microseconds per call, so a slowdown can
be injected exactly. Limits are wide (+50%) and slowdowns large (3x), so these
tests check the plumbing (baseline chosen, item failed, message, exit status),
not the machine: no timing assertion can flake on a noisy host.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfguard.records.results import fingerprint
from tests.helpers.gate_repo import CONFTEST, Repo, suite_text


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Repo:
    return Repo(pytester)


def test_save_then_regression_fails_the_item(repo: Repo) -> None:
    base = repo.commit(200, "base")
    saved = repo.run("--perfguard-save")
    saved.assert_outcomes(passed=1)
    stored = list((repo.path / "baselines").glob(f"*/{base}.json"))
    assert len(stored) == 1
    saved.stdout.fnmatch_lines(["*baseline saved:*"])

    repo.commit(600, "make it 3x slower")
    result = repo.run()
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"*P95 latency regressed +*vs baseline {base[:7]} (limit +50%)*",
            "*regression confirmed on re-measurement (3 of 3 rounds)*",
            f"*baseline: nearest ancestor with a baseline: {base[:7]}*",
            "*suites/s.yaml::spin*REGRESSION*",
            "perfguard: ❌ regression: 1 regression (1 cell)",
        ]
    )
    verdicts = repo.comparison()["verdicts"]
    assert [v["verdict"] for v in verdicts] == ["regression"]
    assert repo.comparison()["baseline"]["commit"] == base


def test_unchanged_passes_and_no_gate_never_fails(repo: Repo) -> None:
    repo.commit(200, "base")
    repo.run("--perfguard-save").assert_outcomes(passed=1)
    repo.commit(200, "docs only")
    repo.run().assert_outcomes(passed=1)
    assert repo.comparison()["verdicts"][0]["verdict"] in {"unchanged", "improvement"}

    repo.commit(600, "slower, but not gated")
    result = repo.run("--perfguard-no-gate")
    result.assert_outcomes(passed=1)
    assert repo.comparison()["verdicts"][0]["verdict"] == "regression"
    result.stdout.fnmatch_lines(["*regression: suites/s.yaml::spin*"])


def test_first_run_is_new_and_removed_scenario_is_missing(repo: Repo) -> None:
    repo.commit(200, "base", scenarios="spin,other")
    first = repo.run("--perfguard-save")
    first.assert_outcomes(passed=2)
    # Two cells with the same reason: one grouped line, and the run is not clean.
    first.stdout.fnmatch_lines(
        [
            "new (2): suites/s.yaml::other, suites/s.yaml::spin: no baseline*",
            "*⚠️ passed with 2 new*",
        ]
    )
    repo.commit(200, "drop one", scenarios="spin")
    result = repo.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*missing: suites/s.yaml::other*"])
    kinds = {v["scenario_id"]: v["verdict"] for v in repo.comparison()["verdicts"]}
    assert kinds["suites/s.yaml::other"] == "missing"


def test_save_refused_on_dirty_tree(repo: Repo) -> None:
    repo.commit(200, "base")
    (repo.path / "suites" / "s.yaml").write_text(suite_text(300))
    result = repo.run("--perfguard-save")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*uncommitted changes*--perfguard-allow-dirty*"])
    assert not (repo.path / "baselines").exists()
    repo.run("--perfguard-save", "--perfguard-allow-dirty").assert_outcomes(passed=1)
    assert list((repo.path / "baselines").glob("*/*.json"))


def test_untracked_files_where_the_model_comes_from_refuse_the_save(repo: Repo) -> None:
    """An untracked package beside the tracked factory module shadows it: the run
    measured code no commit has, and used to be archived as the commit's baseline."""
    repo.commit(200, "base")
    package = repo.path / "suites" / "spinmodel"
    package.mkdir()
    (package / "__init__.py").write_text((repo.path / "suites" / "spinmodel.py").read_text())
    result = repo.run("--perfguard-save")
    assert result.ret == 1  # the refused save fails the run; the cell itself passed
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*baseline NOT saved: untracked files under the suites' and factories' folders "
            "(suites/spinmodel/__init__.py)*Fix: commit them*--perfguard-allow-dirty*"
        ]
    )
    assert not list((repo.path / "baselines").rglob("*.json"))
    # The run is dirty in its results, so `perfguard merge --save` refuses its shard too.
    commit = json.loads(next((repo.path / "reports").glob("*/results.json")).read_text())["commit"]
    assert commit["dirty"] is True and "suites/spinmodel/__init__.py" in commit["note"]
    # Ignored, or allowed: saved.
    (repo.path / ".git" / "info" / "exclude").write_text("suites/spinmodel/\n")
    repo.run("--perfguard-save").assert_outcomes(passed=1)
    assert len(list((repo.path / "baselines").rglob("*.json"))) == 1


def test_a_model_whose_kwargs_hold_a_mapping_ends_the_run_normally(repo: Repo) -> None:
    """The untracked-files check reads every suite's models at the end of the run; a
    mapping among a factory's kwargs made them unhashable and the session crashed."""
    text = suite_text(50).replace("kwargs: {us: 50}", "kwargs: {us: 50, extra: {a: 1}}")
    repo.commit_suite(text, "a mapping kwarg")
    result = repo.run()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(failed=1)  # spin() takes no `extra`: the cell fails, reported
    assert next((repo.path / "reports").glob("*/results.json")).is_file()


def test_baseline_none_and_explicit_results_file(repo: Repo) -> None:
    repo.commit(200, "base")
    repo.run().assert_outcomes(passed=1)
    results = next((repo.path / "reports").glob("*/results.json"))
    kept = repo.path / "kept-results.json"
    kept.write_text(results.read_text())

    repo.commit(600, "slower")
    repo.run("--perfguard-baseline=none").assert_outcomes(passed=1)
    assert repo.comparison()["verdicts"][0]["verdict"] == "new"
    result = repo.run(f"--perfguard-baseline={kept}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*P95 latency regressed*"])


def test_baseline_from_another_environment_is_incomparable(repo: Repo) -> None:
    repo.commit(200, "base")
    repo.run().assert_outcomes(passed=1)
    results = next((repo.path / "reports").glob("*/results.json"))
    data = json.loads(results.read_text())
    data["environment"]["comparable"]["cpu_model"] = "Some Other CPU"
    # Another machine's file: its fingerprint is its fields' hash (checked on read).
    data["environment"]["fingerprint"] = fingerprint(data["environment"]["comparable"])
    other = repo.path / "other-machine.json"
    other.write_text(json.dumps(data))
    repo.commit(600, "slower")
    result = repo.run(f"--perfguard-baseline={other}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*incomparable: suites/s.yaml::spin*cpu_model*"])


def test_unknown_ref_is_a_usage_error(repo: Repo) -> None:
    repo.commit(200, "base")
    result = repo.run("--perfguard-baseline=no-such-branch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no-such-branch*"])


def test_corrupt_baseline_is_reported_and_left_alone(repo: Repo) -> None:
    base = repo.commit(200, "base")
    repo.run("--perfguard-save").assert_outcomes(passed=1)
    stored = next((repo.path / "baselines").glob(f"*/{base}.json"))
    stored.write_text(stored.read_text()[:200])
    before = stored.read_bytes()
    repo.commit(200, "next")
    result = repo.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*{Path(stored.name).stem[:7]}*"])
    assert stored.read_bytes() == before


def test_project_hook_adds_comparable_environment_fields(repo: Repo) -> None:
    def conftest(image: str) -> None:
        repo.pytester.makeconftest(
            CONFTEST
            + "\n\ndef pytest_perfguard_environment(config):\n"
            + f"    return {{'image': '{image}'}}\n"
        )

    conftest("v1")
    repo.commit(200, "base")
    repo.run().assert_outcomes(passed=1)
    results = next((repo.path / "reports").glob("*/results.json"))
    data = json.loads(results.read_text())
    assert data["environment"]["comparable"]["image"] == "v1"
    kept = repo.path / "v1-results.json"
    kept.write_text(results.read_text())

    conftest("v2")
    repo.commit(200, "new image")
    result = repo.run(f"--perfguard-baseline={kept}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*incomparable: suites/s.yaml::spin*image*"])


@pytest.mark.parametrize("stop", ["-x", "--maxfail=1"])
def test_a_session_stopped_early_saves_no_baseline(repo: Repo, stop: str) -> None:
    """-x stopped the session after its first failure; the save used to archive a
    baseline of the cells run so far, as if the suite had only those."""
    (repo.path / "suites" / "a.yaml").write_text(suite_text(50, scenarios="first"))
    # Collected between the two suites (a.yaml, test_b.py, u.yaml): fails, and stops.
    (repo.path / "suites" / "test_b.py").write_text("def test_fails():\n    assert False\n")
    (repo.path / "suites" / "u.yaml").write_text(suite_text(50, scenarios="never_run"))
    repo.commit(50, "three files, two suites")
    result = repo.run("--perfguard-save", stop)
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*baseline NOT saved: the session stopped early (*)*Fix: run the whole suite*"]
    )
    assert not list((repo.path / "baselines").rglob("*.json"))
    ran = json.loads(next((repo.path / "reports").glob("*/results.json")).read_text())
    ids = [s["id"] for s in ran["scenarios"]]
    assert "suites/a.yaml::first" in ids and "suites/u.yaml::never_run" not in ids
