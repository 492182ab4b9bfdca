"""perfguard.ab.rounds on a generative load cell's rounds: each level's token figures
(hand-computed from token times), and the rules that judge them round by round."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perfguard.ab.rounds import LevelSample, LoadRound, RoundPlan, judge_rounds, token_values
from perfguard.judge.verdict import DecisionKind


def level(
    prefill_ms: float, step_ms: float, *, good: int = 10, throughput: float = 5.0
) -> LevelSample:
    """Ten requests of four tokens: the first after ``prefill_ms`` (+ 0..0.9 ms by
    request), then one every ``step_ms``."""
    rows = [[int((prefill_ms + 0.1 * i + k * step_ms) * 1e6) for k in range(4)] for i in range(10)]
    times = np.asarray(rows, dtype=np.int64)
    load: dict[str, Any] = {"goodput": {"good": good}, "duration_s": 2.0}
    return LevelSample(times[:, -1].copy(), throughput, load, token_ns=times)


def test_a_level_figures_each_token_figure_from_its_requests() -> None:
    lv = level(10.0, 2.0, good=4, throughput=5.0)
    assert lv.token_figure("ttft", 50.0) == pytest.approx(10.4e6)  # requests 0..9: +0.4
    assert lv.token_figure("ttft", 100.0) == pytest.approx(10.9e6)
    assert lv.token_figure("tpot", 50.0) == pytest.approx(2.0e6)
    assert lv.token_figure("itl", 95.0) == pytest.approx(2.0e6)
    assert lv.token_figure("request", 50.0) == pytest.approx(16.4e6)
    assert lv.token_figure("tokens", 50.0) == pytest.approx(1 / (5.0 * 4))  # s per token
    assert lv.token_figure("goodput", 50.0) == pytest.approx(2.0 / 4)  # s per good request
    # No good request: half of one over the window, worse than any level with one.
    assert level(10.0, 2.0, good=0).token_figure("goodput", 50.0) == pytest.approx(4.0)
    plain = LevelSample(np.ones(3, dtype=np.int64), 5.0, {})
    assert plain.token_figure("ttft", 50.0) is None and plain.token_figure("goodput", 50.0) is None


def token_plan(*gates: tuple[str, str, float, float, str, bool]) -> RoundPlan:
    return RoundPlan.make(
        q=95.0,
        limit=10.0,  # the end-to-end latency rule never fires here
        throughput_limit=None,
        seconds=0.1,
        iterations=10,
        tokens=gates,
    )


TTFT = ("ttft_p95", "ttft", 95.0, 0.1, "TTFT P95", False)
TPOT = ("tpot_p50", "tpot", 50.0, 0.1, "TPOT P50", False)
GOODPUT = ("goodput", "goodput", 50.0, 0.1, "time per good request", True)


def rounds_of(a: Any, b: Any, n: int = 12) -> list[LoadRound]:
    return [LoadRound(i, i % 2 == 0, a(i), b(i)) for i in range(n)]


def test_a_slower_decode_fails_tpot_and_goodput_not_ttft() -> None:
    p = token_plan(TTFT, TPOT, GOODPUT)
    assert [t.metric for t in p.tokens] == ["ttft_p95", "tpot_p50", "goodput"]
    assert p.tokens[1].rule.label == "median round TPOT P50" and p.tokens[2].rate
    jitter = np.random.default_rng(0).uniform(0.97, 1.03, size=(12, 2))
    rounds = rounds_of(
        lambda i: level(10.0 * jitter[i, 0], 2.0 * jitter[i, 0], good=10),
        lambda i: level(10.0 * jitter[i, 1], 3.0 * jitter[i, 1], good=2),
    )
    decisions = judge_rounds(p, rounds, 1.0)
    assert decisions["tpot_p50"].verdict is DecisionKind.REGRESSION
    assert decisions["tpot_p50"].ratio == pytest.approx(1.5, rel=0.05)
    assert decisions["goodput"].verdict is DecisionKind.REGRESSION
    assert decisions["goodput"].ratio == pytest.approx(5.0)  # 10 good vs 2: time per good
    assert decisions["ttft_p95"].verdict is DecisionKind.UNCHANGED


def test_rounds_without_a_figure_on_a_side_are_left_out_and_the_cap_decides() -> None:
    p = token_plan(TTFT)
    empty = LevelSample(np.ones(5, dtype=np.int64), 5.0, {})  # answered, but no token times
    rounds = rounds_of(
        lambda i: level(10.0, 2.0), lambda i: level(10.0, 2.0) if i < 4 else empty, n=40
    )
    a, b = token_values(p.tokens[0], rounds)
    assert a.size == b.size == 4
    d = judge_rounds(p, rounds, 1.0)["ttft_p95"]
    assert d.stop and "reached max_rounds=40, 4 with this figure" in d.reason
    assert d.verdict is DecisionKind.UNDECIDED  # 4 rounds: too few for a 99% bound
