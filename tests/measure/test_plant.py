"""A planted slowdown (perfguard.measure.plant): each request waits a stated fraction of
its own time inside the request, on a quiet machine and beside a busy neighbour."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfguard.measure.plant import MAX_FRACTION, Plant, spin_until
from tests.helpers.processes import busy_neighbour


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
