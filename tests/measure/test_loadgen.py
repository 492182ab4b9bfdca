"""The load generator's mechanics against fake models of known service time.

No test asserts how fast this machine is. Fakes sleep (``time.sleep`` releases
the GIL and never returns early), which gives hard physical bounds: N clients
that each sleep S per call cannot exceed N/S requests per second, and a request
that waited for a 300 ms stall has a corrected latency of at least the part of
the stall it sat through. The lower bounds used are several times looser than
anything a slow host produces.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.core.scenario import BatchingSpec, LoadSpec
from perfguard.core.stats import percentile
from perfguard.measure import loadgen
from perfguard.measure.levelfigures import level_figures
from perfguard.measure.loadgen import Batching, Worker, closed_loop, open_loop, schedule


def sleeper(seconds: float) -> Callable[[], None]:
    def call() -> None:
        time.sleep(seconds)

    return call


def worker(call: Callable[[], object], sizes: range = range(1, 2)) -> Worker:
    return Worker(calls={k: call for k in sizes})


# -- schedules ------------------------------------------------------------------------
def test_constant_schedule_is_evenly_spaced() -> None:
    offsets = schedule(200.0, 5, "constant")
    assert offsets.tolist() == [0, 5_000_000, 10_000_000, 15_000_000, 20_000_000]


def test_poisson_schedule_is_seeded_and_has_the_asked_mean_gap() -> None:
    a = schedule(1000.0, 20_000, "poisson", seed=3)
    assert np.array_equal(a, schedule(1000.0, 20_000, "poisson", seed=3))
    assert not np.array_equal(a, schedule(1000.0, 20_000, "poisson", seed=4))
    gaps = np.diff(a) / 1e9
    assert gaps.mean() == pytest.approx(1e-3, rel=0.03)  # 20k gaps: SE 0.7%
    # Exponential gaps: the standard deviation equals the mean, and about
    # 1 - 1/e of the gaps are shorter than the mean (a constant schedule: none).
    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.05)
    assert np.mean(gaps < gaps.mean()) == pytest.approx(1 - np.exp(-1), abs=0.02)


@settings(max_examples=50, deadline=None)
@given(
    rate=st.floats(0.5, 1e6),
    count=st.integers(0, 500),
    arrivals=st.sampled_from(["poisson", "constant"]),
    seed=st.integers(0, 2**31),
)
def test_schedules_fit_the_asked_span_and_never_go_back(
    rate: float, count: int, arrivals: str, seed: int
) -> None:
    offsets = schedule(rate, count, arrivals, seed)
    assert offsets.size == count
    if count:
        assert offsets[0] >= 0
        assert offsets[-1] <= round(count / rate * 1e9)  # exactly the asked rate on average
        assert np.all(np.diff(offsets) >= 0)
    if arrivals == "constant" and count:
        assert offsets[0] == 0


def test_schedule_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        schedule(0.0, 10, "constant")
    with pytest.raises(ValueError, match="arrivals"):
        schedule(10.0, 10, "bursty")


# -- closed loop ------------------------------------------------------------------------
def closed_throughput(clients: int, service: float) -> float:
    log = closed_loop(
        [worker(sleeper(service)) for _ in range(clients)],
        iterations=8 * clients,
        seconds=0.3,
        max_seconds=5,
    )
    assert not log.errors and log.hung == 0 and log.unserved == 0
    t0, t1 = log.window_ns
    return int(np.count_nonzero(log.end_ns >= 0)) / ((t1 - t0) / 1e9)


def test_closed_loop_throughput_is_clients_over_service_time() -> None:
    service = 0.01
    one = closed_throughput(1, service)
    four = closed_throughput(4, service)
    # Physical bound: each client sleeps >= 10 ms per request.
    assert four <= 4 / service * 1.01
    assert one <= 1 / service * 1.01
    # The clients really run concurrently: a serialised loop would give ratio 1.
    assert four / one > 2.5
    assert four > 0.5 * 4 / service


def test_closed_loop_runs_until_count_and_time_and_stops_at_the_cap() -> None:
    log = closed_loop([worker(sleeper(0.001))] * 2, iterations=50, seconds=0.2, max_seconds=5)
    assert log.scheduled_ns.size >= 50
    assert log.window_ns[1] - log.window_ns[0] >= 0.2e9
    capped = closed_loop([worker(sleeper(0.05))], iterations=10_000, seconds=0, max_seconds=0.3)
    assert capped.scheduled_ns.size < 100  # stopped by the cap, not the count
    assert capped.window_ns[1] - capped.window_ns[0] < 3e9


def test_errors_under_load_are_counted_per_request_not_a_hang() -> None:
    calls = iter(range(1_000_000))
    lock = threading.Lock()

    def flaky() -> None:
        with lock:
            n = next(calls)
        time.sleep(0.001)
        if n % 3 == 0:
            raise RuntimeError(f"shared state corrupted at call {n}\nsecond line")

    log = closed_loop([worker(flaky)] * 3, iterations=60, seconds=0.1, max_seconds=5)
    failed = int(np.count_nonzero(log.failed))
    assert failed > 0 and failed < log.scheduled_ns.size
    assert sum(log.errors.values()) == failed
    # Counted by the first line of the message; each message names its own call.
    assert all(key.startswith("RuntimeError: shared state corrupted") for key in log.errors)
    assert not any("second line" in key for key in log.errors)


def test_a_hung_model_is_reported_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loadgen, "_GRACE_NS", 200_000_000)
    never = threading.Event()
    started = time.perf_counter()
    log = closed_loop(
        [worker(never.wait), worker(sleeper(0.001))],
        iterations=1,
        seconds=0.1,
        max_seconds=0.3,
    )
    never.set()  # release the daemon thread
    assert log.hung == 1
    assert time.perf_counter() - started < 30  # returned: not stuck forever


# -- open loop --------------------------------------------------------------------------
def test_open_loop_sends_on_schedule_whatever_the_model_does() -> None:
    offsets = schedule(100.0, 40, "constant")
    log = open_loop(offsets, [worker(sleeper(0.002))], max_seconds=10)
    assert log.unserved == 0 and not log.errors
    # Scheduled times keep the asked spacing; requests are never sent early.
    assert np.array_equal(np.diff(log.scheduled_ns), np.diff(offsets))
    assert np.all(log.sent_ns >= log.scheduled_ns)
    assert np.all(log.start_ns >= log.sent_ns)
    assert np.all(log.end_ns >= log.start_ns + 2_000_000)


def test_a_planted_stall_shows_in_the_corrected_tail_and_is_missing_uncorrected() -> None:
    count = iter(range(1_000_000))

    def model() -> None:
        time.sleep(0.3 if next(count) == 100 else 0.001)

    rate, n = 200.0, 400
    log = open_loop(schedule(rate, n, "constant"), [worker(model)], max_seconds=30)
    spec = LoadSpec(mode="open", level=rate, arrivals="constant", late_ms=50, late_max=0.5)
    figures = level_figures(log, spec, request_batch=1)
    corrected = figures.samples_ns
    uncorrected = (log.end_ns - log.start_ns)[log.end_ns >= 0]
    # The 300 ms call delays the ~60 requests scheduled during it: every one of them
    # waits, so the corrected P95 (20th slowest of 400) sees the stall ...
    assert percentile(corrected, 95) > 0.1e9
    # ... while the model calls themselves are 1 ms except the one stalled call.
    assert percentile(uncorrected, 95) < 0.05e9
    assert figures.load.uncorrected_ns is not None
    assert figures.load.uncorrected_ns.p95 == percentile(uncorrected, 95)
    assert figures.load.queue_share is not None and figures.load.queue_share > 0.5


def test_unanswered_requests_count_with_the_time_they_waited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loadgen, "_GRACE_NS", 100_000_000)
    # 20 requests at 100/s against a model taking 200 ms: the 0.5 s cap answers ~3.
    log = open_loop(schedule(100.0, 20, "constant"), [worker(sleeper(0.2))], max_seconds=0.5)
    assert 0 < log.unserved < 20
    spec = LoadSpec(mode="open", level=100.0, arrivals="constant", late_max=1.0 - 1e-9)
    figures = level_figures(log, spec, 1)
    assert figures.samples_ns.size == 20  # censored requests are kept, not dropped
    assert figures.load.unserved == log.unserved


# -- dynamic batching ----------------------------------------------------------------
def test_batcher_fills_batches_up_to_max_batch() -> None:
    offsets = np.array([0] + [1_000_000] * 9, dtype=np.int64)  # 1 request, then 9 at 1 ms
    sizes = range(1, 5)
    log = open_loop(
        offsets,
        [worker(sleeper(0.03), sizes)],
        Batching(max_batch=4, max_wait_ns=200_000_000),
        max_seconds=10,
    )
    assert sorted(log.calls[:, 0].tolist(), reverse=True) == [4, 4, 2]
    assert int(log.batch.sum()) == 4 * 4 + 4 * 4 + 2 * 2  # each request knows its batch
    # Every request of a batch shares its call's start and end.
    for size, start, end in log.calls.tolist():
        members = (log.start_ns == start) & (log.end_ns == end)
        assert int(np.count_nonzero(members)) == size


def test_a_lone_request_waits_max_wait_for_company() -> None:
    offsets = np.array([0, 400_000_000], dtype=np.int64)
    log = open_loop(
        offsets,
        [worker(sleeper(0.001), range(1, 5))],
        Batching(max_batch=4, max_wait_ns=30_000_000),
        max_seconds=10,
    )
    assert log.batch.tolist() == [1, 1]
    waited = log.start_ns - log.sent_ns
    assert waited[0] >= 30_000_000  # held back for max_wait ...
    assert waited[0] < 400_000_000  # ... but not until the next request came


def test_closed_loop_clients_can_share_a_batching_server() -> None:
    log = closed_loop(
        [Worker({}) for _ in range(4)],
        iterations=40,
        seconds=0.1,
        max_seconds=5,
        batching=Batching(max_batch=4, max_wait_ns=5_000_000),
        server_workers=[worker(sleeper(0.005), range(1, 5))],
    )
    assert log.unserved == 0 and log.hung == 0
    assert log.calls[:, 0].max() > 1  # four waiting clients get batched together
    assert log.calls[:, 0].max() <= 4
    spec = LoadSpec(mode="closed", level=4, batching=BatchingSpec(4, 5.0))
    figures = level_figures(log, spec, 1)
    batching = figures.load.batching
    assert batching is not None and batching.batches == log.calls.shape[0]
    assert sum(int(k) * v for k, v in batching.sizes.items()) == log.scheduled_ns.size


# -- interleaved closed loop (same-run A/B of a load cell) ------------------------------
def test_an_interleaved_closed_loop_alternates_each_client_between_the_two_sides() -> None:
    served: list[tuple[str, int]] = []
    lock = threading.Lock()

    def tagged(name: str, seconds: float) -> Callable[[], None]:
        def call() -> None:
            with lock:
                served.append((name, threading.get_ident()))
            time.sleep(seconds)

        return call

    clients = 3
    log = closed_loop(
        [worker(tagged("a", 0.002)) for _ in range(clients)],
        iterations=60,
        seconds=0.1,
        max_seconds=5,
        alternate=[worker(tagged("b", 0.006)) for _ in range(clients)],
        first=1,
    )
    assert log.side is not None and not log.errors and log.unserved == 0
    # Each client thread alternates strictly, client k starting on side (k + first) % 2.
    by_thread: dict[int, list[str]] = {}
    for name, ident in served:
        by_thread.setdefault(ident, []).append(name)
    assert len(by_thread) == clients
    starts = sorted(sides[0] for sides in by_thread.values())
    assert starts == ["a", "b", "b"]  # clients 0 and 2 start on side 1 (b), client 1 on a
    for sides in by_thread.values():
        assert all(x != y for x, y in itertools.pairwise(sides))
    # The log's sides are the calls' sides: side 1 (b) sleeps 6 ms, side 0 (a) 2 ms.
    a, b = log.of_side(0), log.of_side(1)
    assert a.scheduled_ns.size + b.scheduled_ns.size == log.scheduled_ns.size
    assert abs(a.scheduled_ns.size - b.scheduled_ns.size) <= clients
    assert int(np.min(b.end_ns - b.start_ns)) >= 6_000_000  # sleep never returns early
    assert int(np.median(a.end_ns - a.start_ns)) < int(np.min(b.end_ns - b.start_ns))
    # A side's calls are its own answered requests, on the level's window.
    assert a.calls.shape == (a.scheduled_ns.size, 3) and a.window_ns == log.window_ns
    assert set(a.side.tolist()) == {0} and set(b.side.tolist()) == {1}


def test_an_ordinary_closed_loop_is_all_side_zero_and_an_interleaved_one_needs_pairs() -> None:
    log = closed_loop([worker(sleeper(0.001))] * 2, iterations=10, seconds=0.02, max_seconds=5)
    assert log.side is not None and set(log.side.tolist()) == {0}
    assert log.of_side(1).scheduled_ns.size == 0
    with pytest.raises(ValueError, match="one alternate worker per client"):
        closed_loop(
            [worker(sleeper(0.001))] * 2,
            iterations=1,
            seconds=0,
            alternate=[worker(sleeper(0.001))],
        )
    with pytest.raises(ValueError, match="no batching"):
        closed_loop(
            [Worker({})],
            iterations=1,
            seconds=0,
            batching=Batching(2, 0),
            server_workers=[worker(sleeper(0.001), range(1, 3))],
            alternate=[Worker({})],
        )


# -- streaming workers (generative cells) -------------------------------------------
def streamer(tokens: int, gap_s: float) -> Callable[[Callable[[], None]], None]:
    """A fake generative request: ``tokens`` tokens, ``gap_s`` of sleep before each."""

    def call(stamp: Callable[[], None]) -> None:
        for _ in range(tokens):
            time.sleep(gap_s)
            stamp()

    return call


def test_streaming_workers_keep_each_request_s_token_times() -> None:
    workers = [Worker(calls={1: streamer(3, 0.002)}, streaming=True) for _ in range(2)]
    log = closed_loop(workers, iterations=10, seconds=0.0)
    assert log.tokens is not None and len(log.tokens) == log.scheduled_ns.size >= 10
    for scheduled, end, times in zip(log.scheduled_ns, log.end_ns, log.tokens, strict=True):
        assert len(times) == 3 and list(times) == sorted(times)
        assert scheduled + 3 * 2_000_000 <= times[-1] <= end  # a sleep never returns early
    opened = open_loop(
        schedule(100.0, 8, "constant"), [Worker(calls={1: streamer(2, 0.001)}, streaming=True)]
    )
    assert opened.tokens is not None and [len(t) for t in opened.tokens] == [2] * 8
    spec = LoadSpec(mode="open", level=100.0, arrivals="constant", late_ms=50.0)
    figures = level_figures(opened, spec, 1)
    assert figures.token_ns is not None and figures.token_ns.shape == (8, 2)
    assert (figures.token_ns[:, 0] >= 1_000_000).all()  # from the scheduled send
    # An ordinary level keeps no token times.
    assert closed_loop([worker(sleeper(0.001))], iterations=3, seconds=0.0).tokens is None


def test_streaming_workers_are_never_batched_nor_mixed_with_ordinary_ones() -> None:
    stream = Worker(calls={1: streamer(1, 0.0)}, streaming=True)
    with pytest.raises(ValueError, match="all stream tokens, or none"):
        closed_loop([stream, worker(sleeper(0.0))], iterations=2, seconds=0.0)
    with pytest.raises(ValueError, match="no batching"):
        open_loop(schedule(10.0, 2, "constant"), [stream], Batching(max_batch=4))
