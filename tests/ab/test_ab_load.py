"""Same-run A/B of cells under ``load:``: rounds of whole levels (perfguard.ab.rounds).

Unit tests drive :func:`run_rounds`/:func:`judge_rounds` with synthetic levels (no
machine figure); the end-to-end tests run a load cell under ``--perfguard-ab``
against a base commit through pytester, with a model that sleeps for its service
time (the slower commit sleeps three times as long).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.ab.abrun import ABConfig, ABRun, Slot, load_round_length, run_load_rounds
from perfguard.ab.paired import StoppingRule, conclusion, decide
from perfguard.ab.rounds import (
    LevelSample,
    LoadRound,
    RoundPlan,
    ab_rounds,
    alternating,
    compared,
    judge_rounds,
    order_text,
    pooled,
    run_rounds,
)
from perfguard.ab.worktree import BaseRef
from perfguard.core import progress
from perfguard.core.errors import PerfguardError
from perfguard.core.scenario import Scenario
from perfguard.judge.verdict import DecisionKind, VerdictKind
from perfguard.measure.opencell import RunContext
from perfguard.suite.loader import load_suite
from tests.helpers.ab_repo import commit, comparison
from tests.helpers.git_repos import run_git
from tests.helpers.processes import busy_neighbour


def sample(p95_ms: float, n: int = 60, throughput: float = 100.0, **load: Any) -> LevelSample:
    """A level whose corrected samples have roughly the given P95 (ms)."""
    base = np.linspace(0.5, 1.0, n) * p95_ms * 1e6
    return LevelSample(np.asarray(base, dtype=np.int64), throughput, load)


def plan(**kw: Any) -> RoundPlan:
    args: dict[str, Any] = dict(
        q=95.0, limit=0.05, throughput_limit=None, seconds=0.1, iterations=10, n_boot=200
    )
    args.update(kw)
    n_boot = args.pop("n_boot")
    made = RoundPlan.make(**args)
    latency = StoppingRule(**{**made.latency.__dict__, "n_boot": n_boot})
    return dataclasses.replace(made, latency=latency)


def fake_levels(
    factor: float, noise: float, seed: int = 0, calls: list[tuple[str, int]] | None = None
):
    """level(side, round): B is ``factor`` times A; each round shares one machine-speed
    draw (what pairing cancels) plus a little independent noise per side."""
    rng = np.random.default_rng(seed)
    speed: dict[int, float] = {}

    def level(side: str, i: int) -> LevelSample:
        if calls is not None:
            calls.append((side, i))
        if i not in speed:
            speed[i] = float(rng.lognormal(0.0, 0.3))
        own = float(rng.lognormal(0.0, noise))
        ms = 2.0 * speed[i] * own * (factor if side == "b" else 1.0)
        return sample(ms, throughput=100.0 / (speed[i] * own * (factor if side == "b" else 1.0)))

    return level


def test_rounds_alternate_with_a_balanced_recorded_order_and_the_same_schedule() -> None:
    calls: list[tuple[str, int]] = []
    rounds, decisions, _ = run_rounds(
        alternating(fake_levels(1.0, 0.01, calls=calls)), plan(), seed=3
    )
    # Each round runs both sides once, back to back, the round index shared.
    assert [i for _, i in calls] == [r.index for r in rounds for _ in (0, 1)]
    assert all({calls[2 * k][0], calls[2 * k + 1][0]} == {"a", "b"} for k in range(len(rounds)))
    firsts = [r.a_first for r in rounds]
    assert [calls[2 * k][0] == "a" for k in range(len(rounds))] == firsts
    assert abs(sum(firsts) - len(firsts) / 2) <= 1  # balanced in blocks of two
    assert order_text(rounds).split() == ["AB" if f else "BA" for f in firsts]
    again, _, _ = run_rounds(alternating(fake_levels(1.0, 0.01)), plan(), seed=3)
    assert [r.a_first for r in again] == firsts  # seeded
    assert decisions["latency"].stop


def test_a_three_times_slower_side_is_a_regression_that_stops_at_the_first_look() -> None:
    p = plan()
    rounds, decisions, _ = run_rounds(alternating(fake_levels(3.0, 0.05)), p, seed=1)
    d = decisions["latency"]
    assert d.verdict is DecisionKind.REGRESSION and d.stop
    assert len(rounds) == p.latency.min_pairs  # the whole interval is beyond the limit
    assert d.ratio is not None and d.ratio > 2.5
    assert "rounds" in d.reason and "median round P95" in d.reason


def test_unchanged_levels_under_shared_slow_spells_are_not_a_regression() -> None:
    for seed in range(5):
        _, decisions, _ = run_rounds(
            alternating(fake_levels(1.0, 0.02, seed=seed)), plan(), seed=seed
        )
        assert decisions["latency"].verdict is not DecisionKind.REGRESSION


def test_throughput_is_judged_as_time_per_request_when_gated() -> None:
    p = plan(throughput_limit=0.10)
    assert p.throughput is not None and p.throughput.unit == "rounds"
    rounds = [
        LoadRound(i, i % 2 == 0, sample(2.0, throughput=100.0), sample(2.0, throughput=50.0))
        for i in range(12)
    ]
    decisions = judge_rounds(p, rounds, 1.0)
    assert decisions["throughput"].verdict is DecisionKind.REGRESSION
    assert decisions["throughput"].ratio == pytest.approx(2.0)  # A's throughput / B's
    assert decisions["latency"].verdict is DecisionKind.UNCHANGED
    figures = compared(p, rounds)
    assert figures["ta"] == pytest.approx(100.0) and figures["tb"] == pytest.approx(50.0)


def test_invalid_rounds_are_dropped_counted_and_the_round_cap_decides() -> None:
    p = plan(max_rounds=12, min_rounds=8)
    bad = {"invalid": "the load generator fell behind"}

    def level(side: str, i: int) -> LevelSample:
        return sample(2.0, **(bad if side == "b" and i % 2 else {}))

    rounds, decisions, _ = run_rounds(alternating(level), p)
    assert len(rounds) == 12
    assert sum(r.dropped is not None for r in rounds) == 6
    assert all(r.dropped == "B: the load generator fell behind" for r in rounds if r.dropped)
    d = decisions["latency"]
    assert d.stop and d.pairs == 6
    # 6 usable rounds: fewer than the 7 any 99% bound needs -> undecided, saying why.
    assert d.verdict is DecisionKind.UNDECIDED
    assert "reached max_rounds=12 with 6 dropped" in d.reason and "needs >= 7" in d.reason
    assert pooled(rounds, "a").size == 6 * 60


def test_a_level_with_nothing_answered_cannot_count() -> None:
    empty = LevelSample(np.zeros(0, dtype=np.int64), 0.0, {})
    assert empty.invalid == "no request was answered"
    assert LoadRound(0, True, sample(1.0), empty).dropped == "B: no request was answered"
    assert ab_rounds([LoadRound(0, True, sample(1.0), empty)], 95.0) == []


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(0.5, 20.0), min_size=7, max_size=20),
    st.floats(0.5, 3.0),
)
def test_round_ratio_is_the_median_round_figure_ratio_and_bounds_contain_it(
    p95s: list[float], factor: float
) -> None:
    p = plan()
    rounds = [
        LoadRound(i, i % 2 == 0, sample(ms), sample(ms * factor)) for i, ms in enumerate(p95s)
    ]
    d = judge_rounds(p, rounds, 0.0)["latency"]
    figures = compared(p, rounds)
    assert d.ratio == pytest.approx(figures["b"] / figures["a"])
    assert d.lo is not None and d.hi is not None and d.lo <= d.ratio <= d.hi
    per = ab_rounds(rounds, 95.0)
    assert [r.round for r in per] == list(range(len(p95s)))
    assert all(r.ratio == pytest.approx(r.b_p95 / r.a_p95) for r in per)


def test_rounds_report_progress_between_rounds_and_a_final_event() -> None:
    events: list[progress.ProgressEvent] = []
    with progress.sink(events.append):
        rounds, _, _ = run_rounds(alternating(fake_levels(3.0, 0.05)), plan(), cell="m[c2]")
    assert events and events[-1].final and events[-1].step == "A/B load rounds"
    assert events[-1].done == len(rounds) and events[-1].cell == "m[c2]"
    assert "99% lower bound" in events[-1].detail
    assert sum(e.final for e in events) == 1


def test_decide_with_a_caller_cap_uses_the_final_rule_and_names_the_cap() -> None:
    rule = StoppingRule(limit=0.05, q=50.0, min_pairs=10, max_pairs=40, unit="rounds", n_boot=200)
    a = np.full(8, 2.0)
    d = decide(rule, a, a * 1.5, 1.0, cap="reached max_rounds=40 with 32 dropped")
    assert d.stop and d.verdict is DecisionKind.REGRESSION
    assert "reached max_rounds=40 with 32 dropped" in d.reason
    assert conclusion(d).startswith("regression")
    assert "B/A" not in conclusion(d)  # the figures are left to the message


def test_round_length_follows_the_cell(tmp_path: Path) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text(
        """\
defaults:
  measure: {iterations: 100, seconds: 5}
models:
  m: {factory: "x:y", inputs: {x: {shape: [1], dtype: float32}}}
scenarios:
  - {name: c, model: m, load: {concurrency: 2}}
  - {name: r, model: m, load: {rate: "20/s"}}
"""
    )
    closed, slow = load_suite(suite).scenarios
    assert load_round_length(closed) == (1.0, 50)  # a fifth of 5 s; 50 requests at least
    assert load_round_length(slow)[0] == 2.5  # 50 arrivals at 20/s


# --------------------------------------------------------------------------- end to end

LOAD_SUITE = """\
defaults:
  warmup: {iterations: 5, seconds: 0.1}
  measure: {iterations: 100, seconds: 0.5}
  threads: 1
models:
  sleepy:
    factory: abmodel:build
    inputs:
      x: {shape: [1, 8], dtype: float32}
scenarios:
  - name: busy
    model: sleepy
    load: {concurrency: 2}
"""


@pytest.fixture
def repo(suite_writer: pytest.Pytester) -> pytest.Pytester:
    run_git(suite_writer.path, "init", "-q", "-b", "main")
    (suite_writer.path / ".gitignore").write_text("reports/\n.perfguard/\n__pycache__/\n")
    return suite_writer


def test_a_load_cell_three_times_slower_is_an_ab_regression(repo: pytest.Pytester) -> None:
    base = commit(repo.path, 2.0, "fast model", suite=LOAD_SUITE)
    commit(repo.path, 6.0, "three times slower", suite=LOAD_SUITE)
    result = repo.runpytest("--perfguard", "-v", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*P95 latency under load (corrected, pooled over rounds) +*"
            f"vs base {base[:7]} *rounds of 0.5 s interleaved load levels*"
        ]
    )
    (verdict,) = comparison(repo.path)["verdicts"]
    assert verdict["mode"] == "ab" and verdict["verdict"] == "regression"
    assert "B/A" not in verdict["messages"][0] and verdict["messages"][0].count("99%") == 1
    ab = verdict["ab"]
    assert ab["base"] == base and ab["decision"]["ratio"] > 1.5
    assert "rounds" in ab["decision"]["reason"]
    assert ab["rounds"] and all(r["ratio"] > 1.0 for r in ab["rounds"])
    assert any(m.startswith("round order (seed 0): ") for m in verdict["messages"])
    # A closed loop without batching: each round one level, both sides' requests
    # alternating on its clients (a whole level per side would be "0.25 s load levels").
    assert ab["levels"] == "interleaved"
    assert "rounds of 0.5 s interleaved load levels" in verdict["messages"][0]
    (html,) = (repo.path / "reports").glob("*/report.html")
    assert "A&#39;s and B&#39;s requests alternating" in html.read_text()
    (path,) = (repo.path / "reports").glob("*/results.json")
    (cell,) = json.loads(path.read_text())["scenarios"]
    assert cell["load"]["concurrency"] == 2 and cell["runtime"]["ab_base"] == base


def test_an_unchanged_load_cell_passes_in_ab_and_an_slo_cell_stays_archived(
    repo: pytest.Pytester,
) -> None:
    # A wide limit: an unchanged cell then stops at the first look ("no regression"),
    # which keeps this test short; the rule itself is the same at any limit.
    wide = LOAD_SUITE.replace("  threads: 1\n", '  threads: 1\n  gate: {p95: "+30%"}\n')
    slo = wide + (
        "  - name: search\n    model: sleepy\n"
        "    load: {concurrency: 1, slo: {p95_ms: 50, factor: 2, max: 2}}\n"
        "  - name: poisson\n    model: sleepy\n    load: {rate: 100/s}\n"
        "    measure: {iterations: 100, seconds: 1}\n"
    )
    commit(repo.path, 2.0, "model", suite=slo)
    commit(repo.path, 2.0, "same model", suite=slo + "# a comment\n")
    result = repo.runpytest("--perfguard", "-v", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(passed=4)
    verdicts = {v["scenario_id"]: v for v in comparison(repo.path)["verdicts"]}
    busy = verdicts["suites/s.yaml::busy[c2]"]
    assert busy["mode"] == "ab" and busy["verdict"] in ("unchanged", "improvement")
    assert busy["ab"]["levels"] == "interleaved"
    # An open loop's requests share a queue: whole levels of each side, one after the other.
    poisson = verdicts["suites/s.yaml::poisson[r100]"]
    assert poisson["mode"] == "ab" and poisson["ab"]["levels"] == "alternating"
    assert "rounds of 0.5 s load levels" in poisson["messages"][0]
    assert verdicts["suites/s.yaml::search[c1]"]["mode"] == "ab"  # a fixed level
    search = verdicts["suites/s.yaml::search[slo]"]
    assert search["mode"] != "ab"
    assert any("an SLO search: compared with the archived" in m for m in search["messages"])


BUSY_SUITE = """\
defaults:
  warmup: {iterations: 5, seconds: 0.1}
  measure: {iterations: 100, seconds: 0.5}
  threads: 1
models:
  steady: {factory: "abmodel:sleepy", kwargs: {ms: 2.0}, inputs: {x: {shape: [1, 8]}}}
  changed: {factory: "abmodel:sleepy", kwargs: {ms: MS}, inputs: {x: {shape: [1, 8]}}}
scenarios:
  - {name: steady, model: steady, load: {concurrency: 2}}
  - {name: changed, model: changed, load: {concurrency: 2}}
"""


def test_beside_a_busy_neighbour_the_load_gate_passes_the_unchanged_cell_and_fails_the_slow(
    repo: pytest.Pytester,
) -> None:
    """A CI runner's normal state: another process spinning on a core. At the default
    +5% limit the unchanged closed-loop cell is not flagged, and the one three times
    slower is, each judged on interleaved rounds."""
    commit(repo.path, 2.0, "base", suite=BUSY_SUITE.replace("MS", "2.0"))
    commit(repo.path, 2.0, "changed is 3x slower", suite=BUSY_SUITE.replace("MS", "6.0"))
    with busy_neighbour():
        result = repo.runpytest("--perfguard", "-v", "--perfguard-ab=HEAD~1")
    result.assert_outcomes(passed=1, failed=1)
    verdicts = {v["scenario_id"]: v for v in comparison(repo.path)["verdicts"]}
    steady, changed = verdicts["suites/s.yaml::steady[c2]"], verdicts["suites/s.yaml::changed[c2]"]
    assert steady["verdict"] in ("unchanged", "improvement"), steady["messages"]
    assert changed["verdict"] == "regression" and changed["ab"]["decision"]["ratio"] > 1.5
    assert steady["ab"]["levels"] == changed["ab"]["levels"] == "interleaved"


# --------------------------------------------------------------------------- the verdict


def ab_run(tmp_path: Path) -> ABRun:
    run = ABRun(tmp_path, ABConfig(ref="HEAD~1", seed=5))
    run.base = BaseRef(ref="HEAD~1", sha="abc1234" + "0" * 33, how="HEAD~1", dirty=False)
    return run


def load_cell(tmp_path: Path, gate: str = "") -> Scenario:
    path = tmp_path / "s.yaml"
    path.write_text(
        "defaults:\n  measure: {iterations: 100, seconds: 2}\n"
        + (f"  gate: {gate}\n" if gate else "")
        + 'models:\n  m: {factory: "x:y", inputs: {x: {shape: [1], dtype: float32}}}\n'
        + "scenarios:\n  - {name: c, model: m, load: {concurrency: 2}}\n"
    )
    return load_suite(path).scenarios[0]


def test_the_load_verdict_states_each_figure_once_and_records_the_order(
    tmp_path: Path,
) -> None:
    run, cell = ab_run(tmp_path), load_cell(tmp_path, '{p95: "+5%", throughput: "-10%"}')
    p = plan(throughput_limit=0.10)
    rounds = [
        LoadRound(i, i % 2 == 0, sample(2.0, throughput=100.0), sample(3.0, throughput=99.0))
        for i in range(12)
    ]
    rounds.append(LoadRound(12, True, sample(2.0), sample(3.0, invalid="fell behind")))
    decisions = judge_rounds(p, rounds, 3.0)
    verdict = run._load_verdict(cell, RunContext(tmp_path, tmp_path), p, rounds, decisions, 3.0)
    assert verdict.mode == "ab" and verdict.verdict is VerdictKind.REGRESSION
    latency, thr = verdict.metrics
    assert latency.verdict is VerdictKind.REGRESSION and thr.verdict is VerdictKind.UNCHANGED
    assert thr.unit == "/s" and not thr.higher_is_worse
    assert thr.ratio == pytest.approx(0.99) and latency.ratio == pytest.approx(1.5)
    first = verdict.messages[0]
    assert first.startswith("P95 latency under load (corrected, median round) +50.0% (")
    assert "vs base abc1234 measured in this run, interleaved, 12 rounds" in first
    assert "B/A" not in first and first.count("99% bounds") == 1
    assert verdict.messages[1].startswith("throughput under load (median round) -1.0% (")
    assert "1 of 13 rounds dropped (first: round 13, B: fell behind)" in verdict.messages
    assert f"round order (seed 5): {order_text(rounds)}" in verdict.messages
    assert verdict.ab is not None and len(verdict.ab.rounds) == 13


def test_interleaved_rounds_are_judged_on_the_percentile_pooled_over_their_requests(
    tmp_path: Path,
) -> None:
    """Round P95s of 2 ms against 3 ms, but every round's requests pooled: what the
    pooled rule compares (and what the message and figures say) is the P95 of all
    requests of each side, here 2.0 ms against 3.0 ms."""
    run, cell = ab_run(tmp_path), load_cell(tmp_path)
    p = RoundPlan.make(
        q=95.0, limit=0.05, throughput_limit=None, seconds=0.1, iterations=10, interleaved=True
    )
    assert p.latency.q == 95.0 and p.latency.label == "P95 pooled over rounds"
    rounds = [LoadRound(i, i % 2 == 0, sample(2.0), sample(3.0)) for i in range(12)]
    decisions = judge_rounds(p, rounds, 3.0)
    d = decisions["latency"]
    assert d.verdict is DecisionKind.REGRESSION and d.ratio == pytest.approx(1.5, rel=0.02)
    assert "P95 pooled over rounds" in d.reason
    figures = compared(p, rounds)
    pooled_a = np.concatenate([r.a.samples_ns for r in rounds])
    assert figures["a"] == pytest.approx(float(np.sort(pooled_a)[int(np.ceil(0.95 * 720)) - 1]))
    verdict = run._load_verdict(cell, RunContext(tmp_path, tmp_path), p, rounds, decisions, 3.0)
    first = verdict.messages[0]
    assert first.startswith("P95 latency under load (corrected, pooled over rounds) +50.")
    assert "12 rounds of 0.2 s interleaved load levels" in first
    assert verdict.ab is not None and verdict.ab.levels == "interleaved"
    assert "drawing whole rounds" in verdict.metrics[0].rule


def test_no_usable_round_is_an_invalid_verdict_without_a_made_up_change(tmp_path: Path) -> None:
    run, cell = ab_run(tmp_path), load_cell(tmp_path)
    p = plan(max_rounds=10, min_rounds=8)
    rounds = [LoadRound(i, True, sample(2.0, invalid="x"), sample(2.0)) for i in range(10)]
    decisions = judge_rounds(p, rounds, 1.0, cap="reached max_rounds=10 with 10 dropped")
    verdict = run._load_verdict(cell, RunContext(tmp_path, tmp_path), p, rounds, decisions, 1.0)
    assert verdict.verdict is VerdictKind.INVALID
    message = verdict.messages[0]
    assert message.startswith("P95 latency under load (corrected, median round) (- -> -)")
    assert "reached max_rounds=10 with 10 dropped with only 0 rounds" in message


def load_cells(tmp_path: Path, load: str, name: str = "s.yaml") -> dict[str, Scenario]:
    path = tmp_path / name
    path.write_text(
        "defaults:\n  measure: {iterations: 100, seconds: 2}\n"
        + 'models:\n  m: {factory: "x:y", inputs: {x: {shape: [1], dtype: float32}}}\n'
        + f"scenarios:\n  - {{name: c, model: m, load: {load}}}\n"
    )
    return {sc.item_name: sc for sc in load_suite(path).scenarios}


@pytest.mark.parametrize(
    ("head", "base", "python", "expected"),
    [
        ("{concurrency: 2}", "{concurrency: 2}", None, True),
        ("{concurrency: 2, sessions: per_worker}", "{concurrency: 2}", None, True),
        # Two processes cannot share a level's clients.
        ("{concurrency: 2}", "{concurrency: 2}", "/usr/bin/python3", False),
        # A shared queue: each side's wait would hang on the other side's service.
        ("{rate: 100/s}", "{rate: 100/s}", None, False),
        (
            "{concurrency: 2, batching: {max_batch: 2, max_wait_ms: 2}}",
            "{concurrency: 2}",
            None,
            False,
        ),
        (
            "{concurrency: 2}",
            "{concurrency: 2, batching: {max_batch: 2, max_wait_ms: 2}}",
            None,
            False,
        ),
    ],
)
def test_which_load_cells_run_interleaved_levels(
    tmp_path: Path, head: str, base: str, python: str | None, expected: bool
) -> None:
    (cell,) = load_cells(tmp_path, head).values()
    run = ABRun(tmp_path, ABConfig(ref="HEAD~1", python=python))
    (tmp_path / "base").mkdir()
    (base_cell,) = load_cells(tmp_path / "base", base).values()
    run.base_cells = lambda suite: {cell.item_name: base_cell}  # type: ignore[method-assign]
    assert run.interleaves(cell) is expected


def test_a_base_cell_missing_or_at_another_level_is_not_interleaved(tmp_path: Path) -> None:
    (cell,) = load_cells(tmp_path, "{concurrency: 2}").values()
    run = ABRun(tmp_path, ABConfig(ref="HEAD~1"))
    run.base_cells = lambda suite: {}  # type: ignore[method-assign]
    assert not run.interleaves(cell)
    (tmp_path / "base").mkdir()
    (other,) = load_cells(tmp_path / "base", "{concurrency: 4}").values()
    run.base_cells = lambda suite: {cell.item_name: other}  # type: ignore[method-assign]
    assert not run.interleaves(cell)


def test_interleaved_rounds_need_both_sides_in_one_worker(tmp_path: Path) -> None:
    (cell,) = load_cells(tmp_path, "{concurrency: 2}").values()
    one, two = object(), object()
    with pytest.raises(ValueError, match="both sides in one worker"):
        run_load_rounds(
            Slot(one, "a"),  # type: ignore[arg-type]
            Slot(two, "b"),  # type: ignore[arg-type]
            cell,
            plan(interleaved=True),
        )


class FakeWorker:
    """A worker that answers `load_warmup` and `load_interleaved` from a script."""

    def __init__(self, sides: Any) -> None:
        self.sides = sides
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def request(self, op: str, timeout_s: float | None = None, **fields: Any) -> dict[str, Any]:
        self.sent.append((op, fields))
        if op == "load_warmup":
            return {"cold_start_ns": 1, "iterations": 5, "elapsed_ns": 10}
        return {"sides": self.sides(len(self.sent))}


def level_reply(ms: float, failed: int = 0) -> dict[str, Any]:
    errors = {"RuntimeError: boom": failed} if failed else {}
    samples = (np.linspace(0.5, 1.0, 60) * ms * 1e6).astype(int).tolist()
    return {
        "samples_ns": samples,
        "throughput": 100.0,
        "load": {"failed": failed, "requests": 60, "errors": errors},
    }


def test_interleaved_rounds_ask_one_shared_level_per_round_of_twice_the_length(
    tmp_path: Path,
) -> None:
    (cell,) = load_cells(tmp_path, "{concurrency: 2}").values()
    worker = FakeWorker(lambda n: [level_reply(2.0), level_reply(3.0)])
    p = plan(interleaved=True)
    _warm, rounds, decisions, _ = run_load_rounds(
        Slot(worker, "a"),  # type: ignore[arg-type]
        Slot(worker, "b"),  # type: ignore[arg-type]
        cell,
        p,
        seed=3,
    )
    asked = [fields for op, fields in worker.sent if op == "load_interleaved"]
    assert len(asked) == len(rounds) >= p.latency.min_pairs
    assert all(f["slots"] == ["a", "b"] for f in asked)
    assert all(f["seconds"] == 2 * p.seconds and f["iterations"] == 2 * p.iterations for f in asked)
    # The round's order says which side client 0 starts on (0: A).
    assert [f["first"] for f in asked] == [0 if r.a_first else 1 for r in rounds]
    assert decisions["latency"].verdict is DecisionKind.REGRESSION


@pytest.mark.parametrize(
    ("sides", "error", "fragment"),
    [
        ([level_reply(2.0), level_reply(2.0, failed=3)], "LoadError", "of the working tree"),
        ([level_reply(2.0, failed=3), level_reply(2.0)], "LoadError", "of the base revision"),
        ([level_reply(2.0)], "ProtocolError", "expected `sides`: two load level replies"),
    ],
)
def test_a_failed_or_malformed_interleaved_level_names_its_side(
    tmp_path: Path, sides: list[dict[str, Any]], error: str, fragment: str
) -> None:
    (cell,) = load_cells(tmp_path, "{concurrency: 2}").values()
    worker = FakeWorker(lambda n: sides)
    with pytest.raises(PerfguardError) as raised:
        run_load_rounds(
            Slot(worker, "a"),  # type: ignore[arg-type]
            Slot(worker, "b"),  # type: ignore[arg-type]
            cell,
            plan(interleaved=True),
            base="abc1234",
        )
    assert type(raised.value).__name__ == error and fragment in str(raised.value)
