"""End-to-end: what a run checks before it measures, what it says when it collects
nothing, and what it still does when a file cannot be written at the end (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfguard.plugin.upfront import directory_problem
from tests.helpers.git_repos import run_git
from tests.helpers.suites import FAST_DEFAULTS, MLP_MODEL, write_suite

SUITE = (
    FAST_DEFAULTS
    + MLP_MODEL
    + """\
scenarios:
  - name: good
    model: mlp
"""
)


# A save on a busy machine is refused (its cells are inconclusive): saved anyway here.
SAVE = ("--perfguard-save", "--perfguard-save-invalid", "--perfguard-contention-limit=1")


def _lines(result: pytest.RunResult) -> list[str]:
    return (result.stdout.str() + result.stderr.str()).splitlines()


def _assert_refused_up_front(result: pytest.RunResult, *words: str) -> str:
    """Exit 4, one ``ERROR: perfguard:`` line holding ``words``, nothing measured."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    errors = [line for line in _lines(result) if line.startswith("ERROR: perfguard:")]
    assert len(errors) == 1, _lines(result)
    text = "\n".join(_lines(result))
    assert "Traceback" not in text
    assert "PASSED" not in text and "passed" not in text
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


# --- inputs sized before they are made -----------------------------------------------


def test_huge_input_shape_fails_its_cell_in_a_few_lines(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "good", SUITE)
    write_suite(suite_writer, "huge", SUITE.replace("[2, 8]", "[100000, 100000, 8]"))
    result = suite_writer.runpytest("--perfguard", "-rf")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "Unable to allocate" not in out
    assert "Traceback" not in out
    failure = out.split("= FAILURES =", 1)[1].split("= perfguard =", 1)[0]
    shown = [line for line in failure.splitlines() if line.strip("= ")]
    assert len(shown) == 2, failure  # the item's header, the message
    assert "suites/huge.yaml:" in failure
    assert "input 'x' (shape [100000, 100000, 8], float32)" in failure
    assert "298.0 GiB (320000000000 bytes)" in failure
    assert "--perfguard-max-input-mib" in failure
    data = json.loads(next((suite_writer.path / "reports").glob("*/results.json")).read_text())
    status = {s["name"]: s["status"] for s in data["scenarios"]}
    assert list(status.values()).count("failed") == 1


@pytest.mark.parametrize("how", ["option", "ini"])
def test_the_input_size_limit_is_a_setting(suite_writer: pytest.Pytester, how: str) -> None:
    # [64, 8] float32 is 2048 bytes: under the default limit, over 0.001 MiB (1048 bytes).
    write_suite(suite_writer, "s", SUITE.replace("[2, 8]", "[64, 8]"))
    suite_writer.runpytest("--perfguard").assert_outcomes(passed=1)
    if how == "option":
        result = suite_writer.runpytest("--perfguard", "--perfguard-max-input-mib=0.001")
    else:
        suite_writer.makeini("[pytest]\nperfguard_max_input_mib = 0.001\n")
        result = suite_writer.runpytest("--perfguard")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*input 'x'*2048 bytes*over the limit of 1.0 KiB (1048 bytes)*"])


def test_a_bad_input_size_limit_is_a_usage_error(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "s", SUITE)
    result = suite_writer.runpytest("--perfguard", "--perfguard-max-input-mib=0")
    _assert_refused_up_front(result, "max input size", "perfguard_max_input_mib")


# --- nothing silently empty -----------------------------------------------------------


def test_a_folder_of_unmatched_files_says_which_patterns_it_tried(
    suite_writer: pytest.Pytester,
) -> None:
    write_suite(suite_writer, "s", SUITE)
    (suite_writer.path / "suites").rename(suite_writer.path / "mysuites")
    result = suite_writer.runpytest("--perfguard", "mysuites/")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        [
            "perfguard: no suite collected from mysuites/ (given on the command line)*"
            "perfguard_suite_patterns: suites/*.yaml, suites/*.yml, */suites/*.yaml*",
            "perfguard: YAML files found that match no pattern: mysuites/s.yaml",
            "perfguard: Fix: name the suite on the command line (pytest --perfguard "
            'mysuites/s.yaml)*perfguard_suite_patterns = ?"mysuites/?.yaml"?*',
        ]
    )
    # The fix works: the patterns named collect the suite.
    suite_writer.makeini("[pytest]\nperfguard_suite_patterns = mysuites/*.yaml\n")
    suite_writer.runpytest("--perfguard", "mysuites/").assert_outcomes(passed=1)


def test_a_run_with_no_yaml_at_all_points_at_the_suites(suite_writer: pytest.Pytester) -> None:
    result = suite_writer.runpytest("--perfguard")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        ["perfguard: no suite collected from *", "perfguard: Fix: pass the folder*perfguard init*"]
    )


def test_a_named_yaml_that_is_not_a_suite_says_why(suite_writer: pytest.Pytester) -> None:
    (suite_writer.path / "compose.yaml").write_text("services:\n  web: {image: nginx}\n")
    result = suite_writer.runpytest("--perfguard", "compose.yaml")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*compose.yaml:1: unknown key `services`*Fix: *"])
    assert "no suite collected" not in result.stdout.str()


# --- up-front checks ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["/dev/null", "a-file", "a-file/below", "/proc/self"])
def test_an_unusable_report_dir_is_refused_before_measuring(
    suite_writer: pytest.Pytester, where: str
) -> None:
    if not Path(where.split("/below")[0]).exists() and where.startswith("/"):
        pytest.skip(f"{where} does not exist on this platform")
    write_suite(suite_writer, "s", SUITE)
    (suite_writer.path / "a-file").write_text("not a directory\n")
    result = suite_writer.runpytest("--perfguard", f"--perfguard-report-dir={where}")
    line = _assert_refused_up_front(result, "--perfguard-report-dir", "Fix:")
    assert where in line
    assert not (suite_writer.path / "reports").exists()


def test_a_baseline_dir_that_is_not_a_directory_is_refused(
    suite_writer: pytest.Pytester,
) -> None:
    write_suite(suite_writer, "s", SUITE)
    result = suite_writer.runpytest("--perfguard", "--perfguard-baseline-dir=/dev/null")
    _assert_refused_up_front(result, "--perfguard-baseline-dir /dev/null is a device")


def test_the_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "new" / "reports"
    assert directory_problem(target, option="--o", ini="i", write=True) is None
    assert list(tmp_path.iterdir()) == []
    target.mkdir(parents=True)
    assert directory_problem(target, option="--o", ini="i", write=True) is None
    assert list(target.iterdir()) == []
    # Not written to: only its kind is checked.
    (tmp_path / "file").write_text("")
    line = directory_problem(tmp_path / "file" / "x", option="--o", ini="i", write=False)
    assert line is not None and "a regular file, not a directory" in line


def test_a_new_report_dir_is_made_and_holds_no_probe(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "s", SUITE)
    suite_writer.runpytest("--perfguard", "--perfguard-report-dir=new/reports").assert_outcomes(
        passed=1
    )
    assert list((suite_writer.path / "new" / "reports").glob("*/results.json"))
    assert not list((suite_writer.path / "new" / "reports").glob("**/.perfguard-probe-*"))


@pytest.fixture
def saved_repo(suite_writer: pytest.Pytester) -> tuple[pytest.Pytester, Path]:
    """A committed suite with a saved baseline of HEAD; returns the baseline's path."""
    write_suite(suite_writer, "s", SUITE)
    (suite_writer.path / ".gitignore").write_text("reports/\n.perfguard/\n__pycache__/\n")
    run_git(suite_writer.path, "init", "-q", "-b", "main")
    run_git(suite_writer.path, "add", "-A")
    run_git(suite_writer.path, "commit", "-qm", "suite")
    sha = run_git(suite_writer.path, "rev-parse", "HEAD")
    suite_writer.runpytest("--perfguard", *SAVE).assert_outcomes(passed=1)
    (baseline,) = (suite_writer.path / "baselines").glob(f"*/{sha}.json")
    return suite_writer, baseline


@pytest.mark.parametrize("damage", ["truncated", "a directory", "a linked folder"])
def test_save_onto_an_unreadable_head_baseline_is_refused_before_measuring(
    saved_repo: tuple[pytest.Pytester, Path], damage: str
) -> None:
    pytester, baseline = saved_repo
    text = baseline.read_text()
    if damage == "truncated":
        baseline.write_text(text[: len(text) // 2])
    elif damage == "a directory":
        baseline.unlink()
        (baseline / "inside").mkdir(parents=True)
    else:  # the fingerprint folder moved away and linked back: a save would follow it
        folder = baseline.parent
        elsewhere = pytester.path / "elsewhere"
        folder.rename(elsewhere)
        folder.symlink_to(elsewhere, target_is_directory=True)
    reports = sorted(p.stat().st_mtime_ns for p in (pytester.path / "reports").glob("*/*"))
    result = pytester.runpytest("--perfguard", *SAVE, "--perfguard-allow-dirty")
    named = baseline.parent.name if damage == "a linked folder" else baseline.name
    _assert_refused_up_front(result, "--perfguard-save", named, "Fix:")
    # Nothing was measured or written: the reports of the first run are untouched.
    after = sorted(p.stat().st_mtime_ns for p in (pytester.path / "reports").glob("*/*"))
    assert after == reports


# --- a file that cannot be written at the end -----------------------------------------


def test_a_report_that_cannot_be_written_keeps_the_summary_and_the_other_files(
    suite_writer: pytest.Pytester,
) -> None:
    write_suite(suite_writer, "s", SUITE)
    suite_writer.runpytest("--perfguard").assert_outcomes(passed=1)
    (run_dir,) = (suite_writer.path / "reports").glob("*/results.json")
    run_dir = run_dir.parent
    for name in ("results.json", "comparison.json", "summary.md", "report.html"):
        (run_dir / name).unlink()
    # A directory where report.html goes: the write fails at the end of the run.
    (run_dir / "report.html" / "blocker").mkdir(parents=True)
    result = suite_writer.runpytest("--perfguard")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out
    result.stdout.fnmatch_lines(
        [
            "*perfguard*",
            "*good*",
            f"results: {run_dir / 'results.json'}",
            f"perfguard: could not write the report {run_dir / 'report.html'}: *. Fix: *",
            "perfguard: * failed (pytest exit status 1)*",
        ]
    )
    for name in ("results.json", "comparison.json", "summary.md"):
        assert (run_dir / name).is_file(), name
    comparison = json.loads((run_dir / "comparison.json").read_text())
    assert comparison["exit_status"] == 0  # written before the report failed


def test_a_baseline_that_cannot_be_saved_keeps_the_summary_and_the_report(
    saved_repo: tuple[pytest.Pytester, Path],
) -> None:
    pytester, baseline = saved_repo
    # The archive's lock directory is a file: the save fails at the end of the run.
    locks = pytester.path / "baselines" / ".locks"
    for child in locks.iterdir():
        child.unlink()
    locks.rmdir()
    locks.write_text("in the way\n")
    result = pytester.runpytest("--perfguard", *SAVE, "--perfguard-allow-dirty")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out
    result.stdout.fnmatch_lines(
        [
            "results: *results.json",
            "report: *report.html",
            f"perfguard: could not write the baseline of HEAD {baseline}: *",
            "perfguard: * failed (pytest exit status 1)*",
        ]
    )
    run_dir = next((pytester.path / "reports").glob("*/results.json")).parent
    comparison = json.loads((run_dir / "comparison.json").read_text())
    assert comparison["exit_status"] == 1
