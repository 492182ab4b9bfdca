"""The timing loop: cold start, warm-up, then every request timed on its own.

Design points (each one is there for measurement quality):

* The first call is timed alone as the *cold start* (lazy initialisation,
  kernel compilation, caches). It counts as a warm-up iteration but is never
  mixed into the steady-state samples.
* Warm-up and the timed loop each run until BOTH their iteration count and
  their minimum seconds are reached, capped by ``max_seconds`` so a slow model
  cannot run forever. At least one request is always timed.
* The garbage collector is disabled while timing, so a collection triggered by
  the harness's own allocations never lands inside a request; one
  ``gc.collect()`` before the timed loop starts it from a clean heap. The
  previous gc state is restored even when ``call`` raises.
* The warm-up runs under the in-process watchdog when the cell's session set a
  limit (``perfguard.measure.watchdog``, ``--perfguard-open-timeout``): a model
  that hangs there fails its cell. The timed loop is not watched (its cap is
  ``measure.max_seconds``, checked between requests).
* The timed loop is as lean as a bare ``perf_counter_ns`` loop: locals for the
  clock and ``list.append``, no extra clock reads (the loop's time checks use the
  ``t1`` just taken), numpy conversion only after the loop, and a separate loop
  body for the GPU case so the CPU path pays no ``synchronize`` check.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from perfguard.core.scenario import LoopSpec
from perfguard.core.stats import is_stable, stability_ratio
from perfguard.measure.watchdog import watch

__all__ = ["Measurement", "measure"]

_NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Measurement:
    """What one scenario's timing produced (all times in nanoseconds).

    ``warmup_iterations`` includes the cold-start call and ``warmup_ns`` is the
    wall time of the whole warm-up including it. ``samples_ns`` holds one
    read-only int64 latency per timed request (warm-up excluded); it takes no
    part in ``==`` (numpy arrays have no single truth value). ``stopped_by_cap``
    says ``measure.max_seconds`` ended the timed loop before its minimums were
    met. ``measure_ns`` is the wall time of the timed loop (first request start
    to last request end), i.e. the samples plus the harness's time between them.
    """

    cold_start_ns: int
    warmup_iterations: int
    warmup_ns: int
    samples_ns: npt.NDArray[np.int64] = field(compare=False)
    stable: bool
    stability_ratio: float
    stopped_by_cap: bool
    measure_ns: int = 0


def _seconds_to_ns(seconds: float) -> int:
    return int(seconds * _NS_PER_S)


def _check_loop(spec: LoopSpec, what: str) -> None:
    if spec.iterations < 0 or spec.seconds < 0 or spec.max_seconds < 0:
        raise ValueError(
            f"{what} loop {spec!r} is invalid; expected iterations, seconds and "
            "max_seconds all >= 0"
        )


def _noop() -> None:
    return None


def warm_up(
    call: Callable[[], object], sync: Callable[[], None], warmup: LoopSpec
) -> tuple[int, int, int]:
    """The cold-start request, then more until BOTH ``warmup.iterations`` and
    ``warmup.seconds`` are reached, up to ``warmup.max_seconds``.

    Returns ``(cold_start_ns, iterations, elapsed_ns)``, the cold start counted as
    the first iteration. Its overhead does not matter (one clock read per
    iteration, which the time checks use). The caller owns the gc state.
    """
    clock = time.perf_counter_ns  # looked up per call, so tests can substitute a fake clock
    start = clock()
    call()
    sync()
    now = clock()
    cold_start_ns = now - start
    iterations = 1
    min_end = start + _seconds_to_ns(warmup.seconds)
    cap_end = start + _seconds_to_ns(warmup.max_seconds)
    while (iterations < warmup.iterations or now < min_end) and now < cap_end:
        call()
        sync()
        now = clock()
        iterations += 1
    return cold_start_ns, iterations, now - start


def measure(
    call: Callable[[], object],
    synchronize: Callable[[], None] | None,
    warmup: LoopSpec,
    measure: LoopSpec,
    stability_tolerance: float = 0.10,
) -> Measurement:
    """Time ``call``: cold start, warm-up, then one sample per timed request.

    ``synchronize`` (for asynchronous devices) is called after ``call`` inside
    the timed region of every request, warm-up included. Exceptions from
    ``call``/``synchronize`` propagate unchanged; the gc state is restored.
    """
    _check_loop(warmup, "warmup")
    _check_loop(measure, "measure")
    # Looked up per call (not at import) so tests can substitute a fake clock.
    clock = time.perf_counter_ns
    sync = synchronize if synchronize is not None else _noop
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # Allowed its own cap on top: only a request hanging past it fails the cell.
        with watch("the warm-up", allowance_s=warmup.max_seconds, allowance="warmup.max_seconds"):
            cold_start_ns, warmup_iterations, warmup_ns = warm_up(call, sync, warmup)

        # --- timed loop
        gc.collect()
        samples: list[int] = []
        append = samples.append
        n_min = max(1, measure.iterations)  # a measurement without samples is useless
        start = clock()
        min_end = start + _seconds_to_ns(measure.seconds)
        cap_end = start + _seconds_to_ns(measure.max_seconds)
        # Keep going past the time minimum only up to the cap.
        time_end = min(min_end, cap_end)
        t1 = start
        if synchronize is None:
            # Phase 1: the iteration count, checking only the cap.
            for _ in range(n_min):
                t0 = clock()
                call()
                t1 = clock()
                append(t1 - t0)
                if t1 >= cap_end:
                    break
            # Phase 2: the time minimum, if the count came first (no-op otherwise).
            if len(samples) >= n_min:
                while t1 < time_end:
                    t0 = clock()
                    call()
                    t1 = clock()
                    append(t1 - t0)
        else:
            for _ in range(n_min):
                t0 = clock()
                call()
                synchronize()
                t1 = clock()
                append(t1 - t0)
                if t1 >= cap_end:
                    break
            if len(samples) >= n_min:
                while t1 < time_end:
                    t0 = clock()
                    call()
                    synchronize()
                    t1 = clock()
                    append(t1 - t0)
        measure_ns = t1 - start
    finally:
        if gc_was_enabled:
            gc.enable()

    stopped_by_cap = len(samples) < n_min or t1 < min_end
    arr = np.asarray(samples, dtype=np.int64)
    arr.flags.writeable = False  # the dataclass is frozen; so are its samples
    return Measurement(
        cold_start_ns=cold_start_ns,
        warmup_iterations=warmup_iterations,
        warmup_ns=warmup_ns,
        samples_ns=arr,
        stable=is_stable(arr, stability_tolerance),
        stability_ratio=stability_ratio(arr),
        stopped_by_cap=stopped_by_cap,
        measure_ns=measure_ns,
    )
