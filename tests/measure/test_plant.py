"""A planted slowdown (perfguard.measure.plant): each request waits a stated fraction of
its own time inside the request, on a quiet machine and beside a busy neighbour."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfguard.core.scenario import Scenario
from perfguard.measure.loadcell import LoadRunner
from perfguard.measure.opencell import RunContext
from perfguard.measure.plant import MAX_FRACTION, Plant, spin_until
from perfguard.measure.runner import ScenarioRun, run_loop
from perfguard.suite.loader import load_suite
from tests.helpers.models import TINY_MODELS
from tests.helpers.processes import busy_neighbour
from tests.helpers.suites import MLP_MODEL


def _timed_requests(plant: Plant, work_ns: int, n: int) -> list[tuple[int, int]]:
    """(the request's own time, the planted request's whole time) of ``n`` requests."""
    own: list[int] = []

    def request() -> None:
        start = time.perf_counter_ns()
        spin_until(start + work_ns)
        own.append(time.perf_counter_ns() - start)

    planted = plant.wrap(request, lambda: None)
    whole = []
    for _ in range(n):
        start = time.perf_counter_ns()
        planted()
        whole.append(time.perf_counter_ns() - start)
    return list(zip(own, whole, strict=True))


@pytest.mark.parametrize("busy", [False, True], ids=["quiet", "busy"])
@pytest.mark.parametrize("fraction", [0.02, 0.1, 0.5])
def test_every_planted_request_waits_its_fraction_of_its_own_time(
    busy: bool, fraction: float
) -> None:
    plant = Plant(fraction)
    if busy:
        with busy_neighbour():
            timed = _timed_requests(plant, 200_000, 200)
    else:
        timed = _timed_requests(plant, 200_000, 200)
    spun = plant.take()
    assert len(spun) == 200 and plant.take() == []
    for (own, whole), wait in zip(timed, spun, strict=True):
        # The wait is the fraction of what the request took as the plant timed it (which
        # holds the request's own time), and it lies inside the request's whole time.
        assert wait >= int(own * fraction)
        assert whole >= own + wait


def test_the_sync_is_part_of_the_request_the_fraction_is_of() -> None:
    plant = Plant(1.0)
    planted = plant.wrap(lambda: None, lambda: spin_until(time.perf_counter_ns() + 300_000))
    planted()
    (wait,) = plant.take()
    assert wait >= 300_000  # the device wait (sync) counts as the request's own time


@given(st.one_of(st.floats(max_value=0.0), st.floats(min_value=MAX_FRACTION, exclude_min=True)))
def test_a_plant_outside_its_range_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match="fraction in"):
        Plant(fraction)


# --- a plant inside a whole cell: its timed loop and its load levels -------------------

PLANTED_SUITE = (
    """\
defaults:
  warmup: {iterations: 5, seconds: 0}
  measure: {iterations: 100, seconds: 0}
  threads: 1
"""
    + MLP_MODEL
    + """\
scenarios:
  - {name: plain, model: mlp}
  - {name: busy, model: mlp, load: {concurrency: 2}}
"""
)


def _cells(tmp_path: Path) -> dict[str, Scenario]:
    (tmp_path / "tinymodels.py").write_text(TINY_MODELS)
    (tmp_path / "s.yaml").write_text(PLANTED_SUITE)
    return {sc.item_name: sc for sc in load_suite(tmp_path / "s.yaml").scenarios}


def test_a_cells_own_timed_loop_holds_its_plant_in_every_sample(tmp_path: Path) -> None:
    """The worker's `result` (a whole measurement, as an archived calibration makes it):
    every timed sample holds a wait of the fraction of its own time."""
    plant = Plant(0.25)
    ctx = RunContext(tmp_path, tmp_path / "cache")
    with ScenarioRun(_cells(tmp_path)["plain"], ctx, plant=plant) as run:
        measured = run_loop(run.scenario, run.session, run.prepared, plant)
    samples = [int(s) for s in measured.samples_ns]
    waits = plant.take()[-len(samples) :]  # the warm-up's come first
    assert len(waits) == len(samples) == 100
    for sample, wait in zip(samples, waits, strict=True):
        assert wait > 0 and sample >= wait * (1 + 0.25) / 0.25


def test_a_load_cells_clients_make_planted_requests(tmp_path: Path) -> None:
    plant = Plant(0.5)
    ctx = RunContext(tmp_path, tmp_path / "cache")
    with ScenarioRun(_cells(tmp_path)["busy[c2]"], ctx, plant=plant) as run:
        worker = LoadRunner(run)._worker(1)  # a client of its own (its own session)
        assert worker.synchronize is None  # the sync is inside the planted request
        plant.take()  # the session's first call, made alone before any load
        for _ in range(20):
            worker.calls[1]()
    waits = plant.take()
    assert len(waits) == 20 and all(w > 0 for w in waits)


def _turns_beside(spin: Callable[[], None]) -> int:
    """How many turns another thread gets while ``spin`` runs."""
    turns = 0
    stop = threading.Event()

    def tick() -> None:
        nonlocal turns
        while not stop.is_set():
            turns += 1
            time.sleep(0)

    other = threading.Thread(target=tick)
    other.start()
    try:
        spin()
    finally:
        stop.set()
        other.join()
    return turns


def test_a_yielding_wait_lets_the_other_clients_threads_run() -> None:
    """A load cell's clients are threads of one process: a planted wait that held the
    GIL would stall the others (Python hands it over every 5 ms only)."""
    held = _turns_beside(lambda: spin_until(time.perf_counter_ns() + 50_000_000))
    shared = _turns_beside(lambda: spin_until(time.perf_counter_ns() + 50_000_000, yielding=True))
    assert shared > 3 * max(held, 1)  # measured here: 700-770 against 9-87


@pytest.mark.parametrize("yielding", [False, True])
def test_a_generation_is_planted_per_token(yielding: bool) -> None:
    """Each decoding step waits the fraction of its own time before its token is
    stamped: the first from the request's start, the others from the previous stamp."""
    plant = Plant(0.5)
    steps_ns = [2_000_000, 300_000, 600_000, 300_000]
    stamps: list[int] = []
    start = time.perf_counter_ns()
    stamp = plant.stamps(lambda: stamps.append(time.perf_counter_ns()), yielding=yielding)
    for own in steps_ns:  # a generation loop: compute a step, stamp its token
        spin_until(time.perf_counter_ns() + own)
        stamp()
    waits = plant.take()
    assert len(waits) == len(stamps) == len(steps_ns)
    previous = start
    for own, wait, at in zip(steps_ns, waits, stamps, strict=True):
        assert wait >= own * 0.5  # the fraction of at least the step's own time
        assert at - previous >= own + wait  # and the token is stamped after the wait
        previous = at
