"""End to end: generative cells under load through `pytest --perfguard`.

The example model busy-waits a set time before each prompt pass and decode step
(``tests.helpers.tokens.spin_lm_suite``), and the wait holds the GIL, so concurrent
requests take turns: known costs, with limits 2-3x away from them, so that no verdict
depends on this machine's speed.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.git_repos import SpinRepo
from tests.helpers.tokens import spin_lm_suite

pytest.importorskip("transformers")

INI = "[pytest]\nperfguard_contention_limit = 1.01\n"
# A request is good within 60 ms to its first token and 6 ms per token after it: the base
# model (3 ms prompt pass, 1 ms per token; ~2x per token with two clients) meets both.
CLOSED = "{concurrency: [1, 2], goodput: {ttft_ms: 60, tpot_ms: 6}}"
GATE = '{p95: "+1000%", goodput: "-50%"}'


@pytest.fixture
def repo(pytester: pytest.Pytester) -> SpinRepo:
    return SpinRepo(pytester, INI)


def scenarios(repo: SpinRepo) -> dict[str, dict]:
    sha = repo.git("rev-parse", "HEAD")
    results = json.loads((repo.path / "reports" / sha[:12] / "results.json").read_text())
    return {s["id"].split("::")[1]: s for s in results["scenarios"]}


def verdicts(repo: SpinRepo) -> dict[str, dict]:
    sha = repo.git("rev-parse", "HEAD")
    comparison = json.loads((repo.path / "reports" / sha[:12] / "comparison.json").read_text())
    return {v["scenario_id"].split("::")[1]: v for v in comparison["verdicts"]}


def test_each_level_times_its_tokens_and_a_slower_decode_fails_its_goodput(
    repo: SpinRepo,
) -> None:
    base = repo.commit_suite(spin_lm_suite(3000, 1000, load=CLOSED, gate=GATE), "base")
    saved = repo.pytester.runpytest("--perfguard", "--perfguard-save", "-rA")
    saved.assert_outcomes(passed=2)
    cells = scenarios(repo)
    assert set(cells) == {"gen[p16-c1]", "gen[p16-c2]"}
    for name, cell in cells.items():
        tokens, load = cell["tokens"], cell["load"]
        assert tokens["new_tokens"] == 6 and tokens["requests"] >= 100
        assert load["concurrency"] == int(name[-2])
        good = load["goodput"]
        assert (good["ttft_ms"], good["tpot_ms"]) == (60, 6)
        assert good["share"] > 0.5 and good["per_s"] > 0
        # The level's output rate: its answered requests' tokens over its window.
        assert tokens["tokens_per_s"] == pytest.approx(6 * cell["throughput"])
    c1, c2 = cells["gen[p16-c1]"]["tokens"], cells["gen[p16-c2]"]["tokens"]
    assert c2["tpot_ns"]["p50"] > 1.3 * c1["tpot_ns"]["p50"]  # two clients take turns

    repo.commit_suite(spin_lm_suite(3000, 9000, load=CLOSED, gate=GATE), "decode 9x slower")
    slow = repo.pytester.runpytest("--perfguard", "-rA")
    slow.assert_outcomes(failed=2)
    slow.stdout.fnmatch_lines([f"*goodput regressed -*vs baseline {base[:7]}*"])
    for verdict in verdicts(repo).values():
        (good,) = [m for m in verdict["metrics"] if m["metric"] == "goodput"]
        assert good["verdict"] == "regression" and good["current"] == 0.0


def test_an_open_loop_beyond_the_model_says_what_rate_it_achieved(repo: SpinRepo) -> None:
    # ~8 ms per request, one worker: at most ~125/s served of the 400/s asked.
    load = "{rate: 400, workers: 1, late_ms: 500, late_max: 0.9}"
    repo.commit_suite(spin_lm_suite(3000, 1000, load=load), "base")
    saved = repo.pytester.runpytest("--perfguard", "--perfguard-save", "-rA")
    saved.assert_outcomes(passed=1)
    (cell,) = scenarios(repo).values()
    assert cell["load"]["shortfall"].startswith("achieved ")
    assert "of the 400/s asked" in cell["load"]["shortfall"]
    assert cell["tokens"]["ttft_ns"]["p95"] > 20e6  # queued: TTFT runs from the schedule
    repo.commit_suite(spin_lm_suite(3000, 1000, load=load) + "# unchanged\n", "a comment")
    again = repo.pytester.runpytest("--perfguard", "-rA")
    assert again.ret in (0, 1)  # an overloaded level is gated as measured, whatever it gives
    (verdict,) = verdicts(repo).values()
    assert any("this level fell short of its rate: achieved" in m for m in verdict["messages"])


def test_a_goodput_search_finds_the_most_clients_whose_requests_stay_good(
    repo: SpinRepo,
) -> None:
    # 2 ms of GIL-holding spin per decode step: clients take turns, so TPOT is ~2 ms x
    # clients. Within 3 ms per token: one client's requests are good (a busy host makes a
    # few slow: the share asked is half), two clients' (~4 ms) are not.
    load = (
        "{concurrency: 1, goodput: {ttft_ms: 200, tpot_ms: 3}, "
        "slo: {goodput_share: 0.5, factor: 2, refine: 0, max: 4}}"
    )
    repo.commit_suite(spin_lm_suite(3000, 2000, load=load, gate='{p95: "+1000%"}'), "base")
    run = repo.pytester.runpytest("--perfguard", "-rA")
    run.assert_outcomes(passed=2)
    search = scenarios(repo)["gen[p16-slo]"]["load"]["slo"]
    assert search["goodput_share"] == 0.5 and search["target_ms"] is None
    tried = {step["level"]: step for step in search["steps"]}
    assert sorted(tried) == [1, 2]  # stepped up until the share was missed
    assert tried[1]["ok"] and tried[1]["good_share"] >= 0.5
    assert not tried[2]["ok"] and tried[2]["good_share"] < 0.5
    assert search["best_level"] == 1
    run.stdout.fnmatch_lines(["*SLO good share>=50%: best c1*"])
