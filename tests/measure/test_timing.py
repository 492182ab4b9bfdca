"""perfguard.measure.timing.measure, driven by a fake clock: no real-time assertions."""

from __future__ import annotations

import gc
import types
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from perfguard.core.scenario import LoopSpec
from perfguard.measure import timing

MS = 1_000_000  # ns


class FakeClock:
    """A perf_counter_ns that only moves when a fake request says so."""

    def __init__(self) -> None:
        self.now = 10 * MS  # not zero, so nothing relies on a zero start
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now


class FakeModel:
    """A callable that costs ``cost(i)`` fake ns on its i-th call and logs events."""

    def __init__(self, clock: FakeClock, cost: Callable[[int], int] = lambda i: MS) -> None:
        self.clock = clock
        self.cost = cost
        self.calls = 0
        self.events: list[str] = []
        self.gc_enabled_during_calls: list[bool] = []

    def __call__(self) -> object:
        self.clock.now += self.cost(self.calls)
        self.calls += 1
        self.events.append("call")
        self.gc_enabled_during_calls.append(gc.isenabled())
        return None


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    # Replace the module's view of `time` only; the real time module is untouched.
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter_ns=fake))
    return fake


@pytest.fixture
def gc_enabled() -> Iterator[None]:
    """Run with gc enabled and leave it as we found it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


NO_WARMUP = LoopSpec(iterations=0, seconds=0.0)


def test_iteration_minimum_wins_when_it_takes_longer(clock: FakeClock) -> None:
    model = FakeModel(clock)  # 1 ms per request
    m = timing.measure(model, None, NO_WARMUP, LoopSpec(iterations=500, seconds=0.1))
    assert m.samples_ns.size == 500
    assert not m.stopped_by_cap


def test_time_minimum_wins_when_it_takes_longer(clock: FakeClock) -> None:
    model = FakeModel(clock)
    m = timing.measure(model, None, NO_WARMUP, LoopSpec(iterations=10, seconds=0.1))
    # 100 requests of 1 ms reach 0.1 s; not one more.
    assert m.samples_ns.size == 100
    assert int(m.samples_ns.sum()) >= 100 * MS
    assert m.measure_ns == 100 * MS
    assert not m.stopped_by_cap


def test_samples_are_per_request_latencies(clock: FakeClock) -> None:
    model = FakeModel(clock, cost=lambda i: (i + 1) * MS)
    m = timing.measure(model, None, NO_WARMUP, LoopSpec(iterations=5, seconds=0.0))
    # Call 0 is the cold start; the timed requests are calls 1..5.
    assert m.samples_ns.tolist() == [2 * MS, 3 * MS, 4 * MS, 5 * MS, 6 * MS]
    assert m.samples_ns.dtype == np.int64
    assert not m.samples_ns.flags.writeable


def test_cap_stops_before_the_iteration_count(clock: FakeClock) -> None:
    model = FakeModel(clock)
    spec = LoopSpec(iterations=1000, seconds=0.0, max_seconds=0.05)
    m = timing.measure(model, None, NO_WARMUP, spec)
    assert m.samples_ns.size == 50
    assert m.stopped_by_cap


def test_cap_stops_before_the_time_minimum(clock: FakeClock) -> None:
    model = FakeModel(clock)
    spec = LoopSpec(iterations=5, seconds=1.0, max_seconds=0.02)
    m = timing.measure(model, None, NO_WARMUP, spec)
    assert m.samples_ns.size == 20
    assert m.stopped_by_cap


def test_cap_with_a_slow_model_still_takes_one_sample(clock: FakeClock) -> None:
    model = FakeModel(clock, cost=lambda i: 2000 * MS)  # 2 s per request
    spec = LoopSpec(iterations=100, seconds=0.0, max_seconds=1.0)
    m = timing.measure(model, None, LoopSpec(iterations=3, seconds=0.0, max_seconds=1.0), spec)
    assert m.warmup_iterations == 1  # the cold start alone exceeded the warm-up cap
    assert m.samples_ns.size == 1
    assert m.stopped_by_cap


def test_zero_iterations_still_time_one_request(clock: FakeClock) -> None:
    model = FakeModel(clock)
    m = timing.measure(model, None, NO_WARMUP, LoopSpec(iterations=0, seconds=0.0))
    assert m.samples_ns.size == 1
    assert not m.stopped_by_cap


def test_warmup_honours_iterations_and_seconds(clock: FakeClock) -> None:
    model = FakeModel(clock)
    by_time = timing.measure(model, None, LoopSpec(iterations=5, seconds=0.02), NO_WARMUP)
    assert by_time.warmup_iterations == 20  # 20 x 1 ms reach 0.02 s
    assert by_time.warmup_ns == 20 * MS
    model.calls = 0
    by_count = timing.measure(model, None, LoopSpec(iterations=30, seconds=0.001), NO_WARMUP)
    assert by_count.warmup_iterations == 30


def test_warmup_cap(clock: FakeClock) -> None:
    model = FakeModel(clock)
    spec = LoopSpec(iterations=1000, seconds=0.0, max_seconds=0.01)
    m = timing.measure(model, None, spec, LoopSpec(iterations=3, seconds=0.0))
    assert m.warmup_iterations == 10
    assert model.calls == 10 + 3


def test_cold_start_recorded_apart(clock: FakeClock) -> None:
    model = FakeModel(clock, cost=lambda i: 500 * MS if i == 0 else MS)
    m = timing.measure(
        model, None, LoopSpec(iterations=4, seconds=0.0), LoopSpec(iterations=7, seconds=0.0)
    )
    assert m.cold_start_ns == 500 * MS
    assert m.warmup_iterations == 4  # the cold start counts as warm-up
    assert m.warmup_ns == 503 * MS
    assert m.samples_ns.size == 7  # warm-up excluded
    assert set(m.samples_ns.tolist()) == {MS}
    assert model.calls == 4 + 7


def test_synchronize_inside_timed_region_once_per_request(clock: FakeClock) -> None:
    model = FakeModel(clock)
    syncs = 0

    def synchronize() -> None:
        nonlocal syncs
        syncs += 1
        model.events.append("sync")
        clock.now += 3 * MS  # the GPU work the sync waits for must be timed

    m = timing.measure(
        model, synchronize, LoopSpec(iterations=4, seconds=0.0), LoopSpec(iterations=6, seconds=0.0)
    )
    assert syncs == model.calls == 4 + 6
    assert model.events == ["call", "sync"] * 10
    assert m.samples_ns.tolist() == [4 * MS] * 6
    assert m.cold_start_ns == 4 * MS


def test_synchronize_path_honours_time_and_cap(clock: FakeClock) -> None:
    model = FakeModel(clock)
    m = timing.measure(model, lambda: None, NO_WARMUP, LoopSpec(iterations=2, seconds=0.01))
    assert m.samples_ns.size == 10 and not m.stopped_by_cap
    capped = timing.measure(
        model, lambda: None, NO_WARMUP, LoopSpec(iterations=100, seconds=0.0, max_seconds=0.005)
    )
    assert capped.samples_ns.size == 5 and capped.stopped_by_cap


def test_cpu_path_never_synchronizes(clock: FakeClock) -> None:
    model = FakeModel(clock)
    timing.measure(model, None, LoopSpec(iterations=3, seconds=0.0), LoopSpec(10, 0.0))
    assert "sync" not in model.events


def test_gc_disabled_during_calls_and_restored(
    clock: FakeClock, gc_enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = FakeModel(clock)
    collect_calls: list[int] = []
    real_collect = gc.collect

    def collect(*args: int) -> int:
        collect_calls.append(model.calls)  # how many calls had run when it came
        return real_collect(*args)

    monkeypatch.setattr(gc, "collect", collect)
    timing.measure(
        model, None, LoopSpec(iterations=5, seconds=0.0), LoopSpec(iterations=8, seconds=0.0)
    )
    assert model.gc_enabled_during_calls == [False] * 13
    assert gc.isenabled()
    # Exactly one collection, after the warm-up and before the first timed request.
    assert collect_calls == [5]


def test_gc_left_disabled_if_it_was(clock: FakeClock, gc_enabled: None) -> None:
    gc.disable()
    timing.measure(FakeModel(clock), None, NO_WARMUP, LoopSpec(iterations=3, seconds=0.0))
    assert not gc.isenabled()
    gc.enable()


class Boom(Exception):
    pass


@pytest.mark.parametrize("fail_at", [0, 2, 7])  # cold start, warm-up, timed loop
@pytest.mark.parametrize("with_sync", [False, True])
def test_exceptions_propagate_and_gc_is_restored(
    clock: FakeClock, gc_enabled: None, fail_at: int, with_sync: bool
) -> None:
    error = Boom("model failed")
    count = 0

    def call() -> None:
        nonlocal count
        clock.now += MS
        if count == fail_at:
            raise error
        count += 1

    with pytest.raises(Boom) as info:
        timing.measure(
            call,
            (lambda: None) if with_sync else None,
            LoopSpec(iterations=5, seconds=0.0),
            LoopSpec(iterations=10, seconds=0.0),
        )
    assert info.value is error
    assert gc.isenabled()


def test_synchronize_exception_propagates(clock: FakeClock, gc_enabled: None) -> None:
    def synchronize() -> None:
        raise RuntimeError("CUDA error: device-side assert")

    with pytest.raises(RuntimeError, match="device-side assert"):
        timing.measure(FakeModel(clock), synchronize, NO_WARMUP, LoopSpec(3, 0.0))
    assert gc.isenabled()


def test_stability_reported(clock: FakeClock) -> None:
    steady = timing.measure(FakeModel(clock), None, NO_WARMUP, LoopSpec(60, 0.0))
    assert steady.stable and steady.stability_ratio == 1.0
    drifting = FakeModel(clock, cost=lambda i: MS + i * 20_000)  # +2% per request
    m = timing.measure(drifting, None, NO_WARMUP, LoopSpec(60, 0.0), stability_tolerance=0.1)
    assert not m.stable and m.stability_ratio > 1.1
    lenient = timing.measure(
        FakeModel(clock, cost=lambda i: MS + i * 20_000),
        None,
        NO_WARMUP,
        LoopSpec(60, 0.0),
        stability_tolerance=10.0,
    )
    assert lenient.stable


def test_invalid_loop_spec_raises(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="measure loop"):
        timing.measure(FakeModel(clock), None, NO_WARMUP, LoopSpec(iterations=-1, seconds=0.0))


def test_measurement_equality_ignores_the_sample_array(clock: FakeClock) -> None:
    a = timing.measure(FakeModel(clock), None, NO_WARMUP, LoopSpec(4, 0.0))
    b = timing.measure(FakeModel(clock), None, NO_WARMUP, LoopSpec(4, 0.0))
    assert a == b  # would raise "truth value of an array is ambiguous" otherwise
    hash(a)


def test_real_clock_smoke() -> None:
    # Real perf_counter_ns; asserts only counts and signs, never durations.
    calls = 0

    def call() -> None:
        nonlocal calls
        calls += 1

    m = timing.measure(call, None, LoopSpec(3, 0.0), LoopSpec(iterations=50, seconds=0.0))
    assert m.samples_ns.size == 50
    assert calls == m.warmup_iterations + 50
    assert (m.samples_ns >= 0).all()
    assert m.cold_start_ns >= 0
