"""Figures of a load level from a hand-made log whose answers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from perfguard.core.scenario import GoodputSpec, LoadSpec
from perfguard.measure.levelfigures import kept_up, level_figures
from perfguard.measure.loadgen import LoadLog

MS = 1_000_000


def log_of(tokens: list[list[int]] | None = None, **columns: list[int]) -> LoadLog:
    n = len(columns["scheduled"])
    return LoadLog(
        scheduled_ns=np.array(columns["scheduled"], dtype=np.int64) * MS,
        sent_ns=np.array([v * MS if v >= 0 else -1 for v in columns["sent"]], dtype=np.int64),
        start_ns=np.array([v * MS if v >= 0 else -1 for v in columns["start"]], dtype=np.int64),
        end_ns=np.array([v * MS if v >= 0 else -1 for v in columns["end"]], dtype=np.int64),
        batch=np.array(columns.get("batch", [1] * n), dtype=np.int32),
        failed=np.array(columns.get("failed", [0] * n), dtype=bool),
        calls=np.zeros((0, 3), dtype=np.int64),
        errors={"RuntimeError: boom": 1} if any(columns.get("failed", [])) else {},
        window_ns=(0, columns["window_end"][0] * MS),
        tokens=tuple(tuple(t * MS for t in row) for row in tokens) if tokens else None,
    )


# Request 0 on time; 1 waits 2 ms in the queue; 2 is sent 5 ms late and fails;
# 3 is never sent (the run ended at 40 ms).
LOG = log_of(
    scheduled=[0, 10, 20, 30],
    sent=[0, 10, 25, -1],
    start=[1, 12, 26, -1],
    end=[3, 14, 28, -1],
    failed=[0, 0, 1, 0],
    window_end=[40],
)
OPEN = LoadSpec(mode="open", level=100.0, arrivals="constant", late_ms=1.0, late_max=0.05)


def test_corrected_latency_runs_from_the_scheduled_time_and_keeps_the_unanswered() -> None:
    figures = level_figures(LOG, OPEN, request_batch=1)
    # Answered and not failed: 3 ms and 4 ms; unanswered request 3: 40 - 30 = 10 ms.
    assert (figures.samples_ns / MS).tolist() == [3, 4, 10]
    uncorrected = figures.load.uncorrected_ns
    assert (
        uncorrected is not None and uncorrected.n == 2 and uncorrected.max == 2 * MS
    )  # model calls: 2 ms each


def test_queue_share_late_requests_rates_and_invalid() -> None:
    load = level_figures(LOG, OPEN, request_batch=1).load
    # Waited before the call: 1 + 2 ms out of 3 + 4 ms of corrected latency.
    assert load.queue_share == pytest.approx(3 / 7)
    # Late: request 2 (5 ms > 1 ms) and request 3 (never sent) -> 2 of 4.
    assert load.late.count == 2 and load.late.share == 0.5
    assert load.late.lag_max_ms == 5.0
    assert load.invalid is not None and "50.0%" in load.invalid
    assert "asked 100/s" in load.invalid
    # 2 good answers x batch 1 in 40 ms; 3 answered (one failed) in 40 ms; 3 sent by 25 ms.
    assert load.throughput == pytest.approx(50.0)
    assert load.rate_achieved == pytest.approx(75.0)
    assert load.rate_sent == pytest.approx(120.0)
    assert (load.completed, load.failed, load.unserved) == (3, 1, 1)
    assert load.errors == {"RuntimeError: boom": 1}


def test_a_lenient_limit_keeps_the_level_valid_and_batch_scales_throughput() -> None:
    lenient = LoadSpec(mode="open", level=100.0, late_ms=10.0, late_max=0.3)
    figures = level_figures(LOG, lenient, request_batch=4)
    # Only the never-sent request is late now: 1 of 4 = 25% <= 30%.
    assert figures.invalid is None
    assert figures.throughput == pytest.approx(4 * 50.0)


def test_closed_loop_has_no_rates_and_is_never_invalid_for_lag() -> None:
    closed = LoadSpec(mode="closed", level=2.0)
    load = level_figures(LOG, closed, 1).load
    assert load.concurrency == 2 and load.rate_asked is None
    assert load.rate_sent is None and load.invalid is None
    assert load.level == "c2"


def test_a_level_that_kept_up_is_not_called_saturated_but_a_backlog_is() -> None:
    # 10 requests 100 ms apart, each answered 300 ms after its time: stable, just slow.
    steady = log_of(
        scheduled=[i * 100 for i in range(10)],
        sent=[i * 100 for i in range(10)],
        start=[i * 100 + 200 for i in range(10)],
        end=[i * 100 + 300 for i in range(10)],
        window_end=[1200],
    )
    assert kept_up(steady) == pytest.approx(1.0)
    # The same arrivals served one per 250 ms: the backlog grows, answers trail off.
    backlog = log_of(
        scheduled=[i * 100 for i in range(10)],
        sent=[i * 100 for i in range(10)],
        start=[i * 250 for i in range(10)],
        end=[i * 250 + 250 for i in range(10)],
        window_end=[2500],
    )
    assert kept_up(backlog) < 0.9


def test_one_side_of_an_interleaved_level_has_the_throughput_of_its_own_latency() -> None:
    # Two clients alternating: side 0 answers in 2 ms, side 1 in 6 ms. Each side got
    # half the requests, so its count says nothing; its throughput is what 2 clients at
    # its own mean latency give (Little's law): 2 / 2 ms = 1000/s and 2 / 6 ms = 333/s.
    sides = [0, 1, 1, 0, 0, 1]
    scheduled = [0, 0, 2, 6, 8, 10]
    service = [2 if s == 0 else 6 for s in sides]
    log = log_of(
        scheduled=scheduled,
        sent=scheduled,
        start=scheduled,
        end=[t + d for t, d in zip(scheduled, service, strict=True)],
        window_end=[16],
    )
    log = LoadLog(**{**log.__dict__, "side": np.array(sides, dtype=np.int8)})
    spec = LoadSpec(mode="closed", level=2)
    fast = level_figures(log.of_side(0), spec, 1, interleaved=True)
    slow = level_figures(log.of_side(1), spec, 1, interleaved=True)
    assert fast.throughput == pytest.approx(1000.0) and slow.throughput == pytest.approx(2 / 0.006)
    assert fast.load.throughput == fast.throughput and fast.load.requests == 3
    assert sorted(slow.samples_ns.tolist()) == [6 * MS] * 3
    # Counted on the shared window instead, both sides would read the same 187.5/s.
    assert level_figures(log.of_side(0), spec, 1).throughput == pytest.approx(3 / 0.016)
    with pytest.raises(ValueError, match="closed loop without batching"):
        level_figures(log.of_side(0), LoadSpec(mode="open", level=100.0), 1, interleaved=True)
    with pytest.raises(ValueError, match="not an interleaved level"):
        LOG.of_side(0)


# A generative open loop, 3 tokens per request: times in ms. TTFT from the scheduled send;
# TPOT = (last - first) / 2.
#   request 0: sched 0,  tokens 5 7 9    -> TTFT 5,  TPOT 2   good
#   request 1: sched 10, tokens 18 20 22 -> TTFT 8,  TPOT 2   good
#   request 2: sched 20, tokens 26 32 38 -> TTFT 6,  TPOT 6   too slow per token
#   request 3: sched 30, tokens 45 47 49 -> TTFT 15, TPOT 2   too slow to start
#   request 4: sched 40, failed (its tokens never count)
#   request 5: sched 45, never answered
TOKEN_LOG = log_of(
    scheduled=[0, 10, 20, 30, 40, 45],
    sent=[0, 10, 20, 30, 40, 45],
    start=[0, 10, 20, 30, 40, -1],
    end=[9, 22, 38, 49, 41, -1],
    failed=[0, 0, 0, 0, 1, 0],
    window_end=[50],
    tokens=[[5, 7, 9], [18, 20, 22], [26, 32, 38], [45, 47, 49], [41], []],
)
GOODPUT = LoadSpec(
    mode="open", level=120.0, arrivals="constant", late_ms=1.0, goodput=GoodputSpec(10, 3)
)


def test_goodput_counts_the_requests_meeting_both_limits() -> None:
    figures = level_figures(TOKEN_LOG, GOODPUT, request_batch=1)
    good = figures.load.goodput
    assert good is not None
    assert (good.good, good.ttft_ms, good.tpot_ms) == (2, 10, 3)
    assert good.per_s == pytest.approx(2 / 0.050)  # 2 good requests in a 50 ms window
    assert good.share == pytest.approx(2 / 6)  # the failed and the unanswered count as not good
    assert figures.token_ns is not None
    # The answered, not failed requests' token times from their scheduled sends.
    assert (figures.token_ns / MS).tolist() == [[5, 7, 9], [8, 10, 12], [6, 12, 18], [15, 17, 19]]


def test_a_level_without_limits_has_no_goodput_and_an_ordinary_one_no_tokens() -> None:
    plain_limits = LoadSpec(mode="open", level=120.0, arrivals="constant", late_ms=1.0)
    assert level_figures(TOKEN_LOG, plain_limits, 1).load.goodput is None
    figures = level_figures(LOG, OPEN, 1)
    assert figures.token_ns is None and figures.load.goodput is None


def test_an_open_loop_that_fell_short_of_its_rate_says_what_it_achieved() -> None:
    # 10 requests asked at 10/s, served one per 250 ms: 4/s, a growing backlog.
    backlog = log_of(
        scheduled=[i * 100 for i in range(10)],
        sent=[i * 100 for i in range(10)],
        start=[i * 250 for i in range(10)],
        end=[i * 250 + 250 for i in range(10)],
        window_end=[2500],
    )
    spec = LoadSpec(mode="open", level=10.0, arrivals="constant", late_ms=1.0)
    load = level_figures(backlog, spec, 1).load
    assert load.shortfall is not None
    assert load.shortfall.startswith("achieved 4/s of the 10/s asked")  # 10 answers in 2.5 s
    assert "overloaded" in load.shortfall
    steady = log_of(
        scheduled=[i * 100 for i in range(10)],
        sent=[i * 100 for i in range(10)],
        start=[i * 100 + 200 for i in range(10)],
        end=[i * 100 + 300 for i in range(10)],
        window_end=[1200],
    )
    assert level_figures(steady, spec, 1).load.shortfall is None
    closed = LoadSpec(mode="closed", level=2.0)
    assert level_figures(backlog, closed, 1).load.shortfall is None
