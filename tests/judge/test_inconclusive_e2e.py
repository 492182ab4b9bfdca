"""End-to-end: a busy neighbour makes a cell inconclusive; watch fail, warn, quiet and save.

The neighbour is simulated, deterministically and without a busy loop: the test
project's conftest replaces the one reading of other processes' CPU share
(``perfguard.measure.canary.cpu_shares``, used by the probe beside every measurement)
and the wait's sampler (``perfguard.measure.quiet.sample_foreign_cpu``, so no real
sleeping). The neighbour

* ``quiet``: never there;
* ``stays``: busy throughout, waits included;
* ``leaves``: busy until perfguard first waits for quiet, then gone;
* ``returns``: gone whenever perfguard looks, back whenever it measures.
"""

from __future__ import annotations

import json

import pytest

from perfguard.core.policy import INCONCLUSIVE_ROUNDS, QUIET_WAIT_S
from tests.helpers.gate_repo import Repo

INI = "[pytest]\n"

NEIGHBOUR = """
import pytest

from perfguard.measure import canary, quiet

MODE = {mode!r}
SHARE = 0.5
busy = {{"now": MODE != "quiet"}}


def measured(start, end):
    return (SHARE if busy["now"] or MODE == "returns" else 0.0), 0.0


def waited(seconds):
    if MODE == "leaves":
        busy["now"] = False
    return SHARE if MODE == "stays" else 0.0


_patch = pytest.MonkeyPatch()


def pytest_configure(config):
    _patch.setattr(canary, "cpu_shares", measured)
    _patch.setattr(quiet, "sample_foreign_cpu", waited)


def pytest_unconfigure(config):
    _patch.undo()
"""


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Repo:
    repo = Repo(pytester)
    pytester.makeini(INI)  # the default contention limit (10%)
    # The neighbour's conftest changes between runs; the tree must stay clean to save.
    with (repo.path / ".gitignore").open("a") as ignore:
        ignore.write("conftest.py\n")
    repo.commit(200, "base")
    return repo


def neighbour(repo: Repo, mode: str) -> None:
    repo.pytester.makeconftest(NEIGHBOUR.format(mode=mode))


def saved_baseline(repo: Repo) -> None:
    """Save the base commit's baseline on a quiet machine; HEAD becomes a child of it."""
    neighbour(repo, "quiet")
    repo.run("--perfguard-save").assert_outcomes(passed=1)
    repo.commit(200, "the baseline, committed")


def only_verdict(repo: Repo) -> dict:
    verdicts = repo.comparison()["verdicts"]
    assert len(verdicts) == 1
    return verdicts[0]


def test_warn_passes_the_item_with_a_warning_and_one_note(repo: Repo) -> None:
    saved_baseline(repo)
    neighbour(repo, "stays")
    result = repo.run()  # warn is the default
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*InconclusiveWarning: *suites/s.yaml::spin is inconclusive (invalid), not gated:*"
            f"not re-measured: other processes still used 50% of the CPUs after "
            f"{QUIET_WAIT_S:.0f} s*--perfguard-inconclusive=fail*",
        ]
    )
    verdict = only_verdict(repo)
    assert verdict["verdict"] == "invalid"
    assert sum("re-measured" in m for m in verdict["messages"]) == 1


def test_fail_fails_the_item_with_the_reason_the_rounds_and_the_fix(repo: Repo) -> None:
    saved_baseline(repo)
    neighbour(repo, "returns")
    result = repo.run("--perfguard-inconclusive=fail")
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "suites/s.yaml::spin is inconclusive (invalid), not gated:",
            "  other processes used 50% of the CPUs*",
            f"  re-measured {INCONCLUSIVE_ROUNDS} rounds after waiting 6 s for quiet; still "
            "invalid: other processes used 50% of the CPUs while it was measured (limit 10%)",
            "Fix: re-run on an idle machine*--perfguard-ab*",
        ]
    )
    assert only_verdict(repo)["verdict"] == "invalid"


def test_a_cell_quiet_on_round_2_passes_valid(repo: Repo) -> None:
    saved_baseline(repo)
    neighbour(repo, "leaves")
    result = repo.run("--perfguard-inconclusive=fail")
    result.assert_outcomes(passed=1)
    verdict = only_verdict(repo)
    assert verdict["verdict"] in {"unchanged", "improvement"}
    assert verdict["messages"][-1].startswith("valid on round 2 after waiting 3 s for quiet")
    assert "InconclusiveWarning" not in result.stdout.str()


def test_an_inconclusive_save_is_refused_visibly_and_writes_nothing(repo: Repo) -> None:
    neighbour(repo, "stays")
    result = repo.run("--perfguard-save")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "perfguard: baseline NOT saved: suites/s.yaml::spin is inconclusive: other "
            "processes used 50% of the CPUs while it was measured (limit 10%)",
            "perfguard: Fix: re-run on an idle machine*--perfguard-save-invalid*",
        ]
    )
    assert not (repo.path / "baselines").exists()


def test_save_invalid_saves_with_the_cell_marked(repo: Repo) -> None:
    neighbour(repo, "stays")
    result = repo.run("--perfguard-save", "--perfguard-save-invalid")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["perfguard: baseline saved with suites/s.yaml::spin marked inconclusive: other*"]
    )
    (stored,) = (repo.path / "baselines").glob("*/*.json")
    (cell,) = json.loads(stored.read_text())["launches"][0]["scenarios"]
    assert cell["stable"] is False and "other processes used 50%" in cell["inconclusive"]

    repo.commit(200, "the baseline, committed")
    neighbour(repo, "quiet")
    repo.run().assert_outcomes(passed=1)
    messages = only_verdict(repo)["messages"]
    assert any("measured unstable or on a busy machine" in m for m in messages)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--perfguard-inconclusive=maybe",), "*inconclusive policy is 'maybe'; expected one of*"),
        (("--perfguard-save-invalid",), "*--perfguard-save-invalid was given without*"),
    ],
)
def test_bad_settings_are_usage_errors(repo: Repo, args: tuple[str, ...], message: str) -> None:
    result = repo.run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


RUN_INVALID = """
import pytest

from perfguard.core.errors import RunInvalid
from perfguard.measure.runner import ScenarioRun

_patch = pytest.MonkeyPatch()


def throttled(self):
    raise RunInvalid("spin: the GPU throttled its clocks during the measurement")


def pytest_configure(config):
    _patch.setattr(ScenarioRun, "measure", throttled)


def pytest_unconfigure(config):
    _patch.undo()
"""


def test_a_run_invalid_skip_fails_under_fail(repo: Repo) -> None:
    repo.pytester.makeconftest(RUN_INVALID)
    repo.run().assert_outcomes(skipped=1)
    result = repo.run("--perfguard-inconclusive=fail")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["inconclusive, not gated: spin: the GPU throttled its clocks*Fix: re-run on an idle*"]
    )
    # The results file and the outcome say what pytest said: skipped, then failed.
    (results,) = (repo.pytester.path / "reports").glob("*/results.json")
    (cell,) = json.loads(results.read_text())["scenarios"]
    assert cell["status"] == "failed" and "inconclusive" in cell["message"]
    result.stdout.fnmatch_lines(["perfguard: ❌*"])
