"""Same-run A/B of served models: each side starts its own server (``server.command``);
two sides that reach the one running server (``server.url``) would compare it with
itself, so such a cell is compared with its archived baseline instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfguard.ab.abrun import ABConfig, ABRun
from perfguard.core.scenario import Scenario
from perfguard.suite.loader import load_suite
from tests.helpers.git_repos import SpinRepo
from tests.helpers.served import llama_server, served_suite

GEN = 'generate: {prompt_tokens: 16, new_tokens: 8}\ngate: {itl_p95: "+50%"}\n'


def cell(folder: Path, server: str) -> Scenario:
    folder.mkdir(exist_ok=True)
    path = folder / "s.yaml"
    path.write_text(served_suite(server, GEN), encoding="utf-8")
    (got,) = load_suite(path).scenarios
    return got


@pytest.mark.parametrize(
    ("head", "base", "same"),
    [
        ("url: http://127.0.0.1:8000\n", "url: http://127.0.0.1:8000\n", True),
        ("url: http://127.0.0.1:8000\n", "url: http://127.0.0.1:8001\n", False),
        ('command: [serve, --port, "{port}"]\n', 'command: [serve, --port, "{port}"]\n', False),
    ],
)
def test_two_sides_on_one_running_server_are_not_ab_compared(
    tmp_path: Path, head: str, base: str, same: bool
) -> None:
    mine, theirs = cell(tmp_path / "head", head), cell(tmp_path / "base", base)
    run = ABRun(tmp_path, ABConfig(ref="HEAD~1"))
    run.base_cells = lambda suite: {theirs.item_name: theirs}  # type: ignore[method-assign]
    why = run.why_not_ab(mine)
    if same:
        assert why is not None and "compare it with itself" in why
        assert "http://127.0.0.1:8000" in why and "`server.command`" in why
    else:
        assert why is None


@pytest.mark.parametrize(
    ("head", "base", "alone"),
    [
        ("exclusive: true\n", "", True),
        ("", "exclusive: true\n", True),  # the base's server needs its device too
        ("", "", False),
    ],
)
def test_an_exclusive_server_on_either_side_is_measured_one_side_at_a_time(
    tmp_path: Path, head: str, base: str, alone: bool
) -> None:
    command = 'command: [serve, --port, "{port}"]\n'
    mine, theirs = cell(tmp_path / "head", command + head), cell(tmp_path / "base", command + base)
    run = ABRun(tmp_path, ABConfig(ref="HEAD~1"))
    run.base_cells = lambda suite: {theirs.item_name: theirs}  # type: ignore[method-assign]
    assert run.compares(mine) and run.one_side_at_a_time(mine) is alone


def test_an_ab_run_against_one_running_server_compares_it_with_the_archive(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    repo = SpinRepo(pytester, "[pytest]\nperfguard_contention_limit = 1.01\n")
    defaults = "defaults:\n  warmup: {iterations: 5, seconds: 0.5}\n  measure: {seconds: 0.5}\n"
    with llama_server(tmp_path) as (base_url, _server):
        text = served_suite(f"url: {base_url}\n", GEN, defaults=defaults)
        repo.commit_suite(text, "base")
        repo.pytester.runpytest("--perfguard", "--perfguard-save").assert_outcomes(passed=1)
        repo.commit_suite(text + "    tags: [served]\n", "head: the same server")
        ab = repo.pytester.runpytest("--perfguard", "-rA", "--perfguard-ab=HEAD~1")
    outcomes = ab.parseoutcomes()  # the verdict itself is timing: not asserted
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1
    sha = repo.git("rev-parse", "HEAD")[:12]
    comparison = json.loads((repo.path / "reports" / f"{sha}-ab" / "comparison.json").read_text())
    (verdict,) = comparison["verdicts"]
    assert verdict["mode"] == "archived" and verdict["ab"] is None
    assert any(
        "compare it with itself: compared with the archived baseline" in m
        for m in verdict["messages"]
    )
