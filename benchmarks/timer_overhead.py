"""How much does perfguard's timing harness cost per request, against a bare loop?

The floor is the leanest way to time requests one by one in Python::

    t0 = perf_counter_ns(); fn(); t1 = perf_counter_ns(); samples.append(t1 - t0)

around a no-op. ``perfguard.measure.timing.measure`` runs the same no-op (warm-up of one
call). The two alternate within one run (ABBA order), so a slow spell of a
shared host hits both; the table shows the median over repeats of

* wall/req: loop wall time / requests (the harness's ``measure_ns``, which
  excludes its fixed setup: warm-up, gc.collect, numpy conversion), and
* sample p50: median of the recorded samples (what lands inside the timed region).

The target is harness wall/req <= 1.25 x floor wall/req. This is a report, not
a test: it always exits 0.

    python benchmarks/timer_overhead.py --n 200000 --repeats 9
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Runnable from a checkout without installing.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfguard.core.scenario import LoopSpec
from perfguard.measure.timing import measure

TARGET = 1.25


def noop() -> None:
    return None


def floor_loop(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """The bare loop; returns (wall ns per request, median sample ns)."""
    perf_counter_ns = time.perf_counter_ns
    samples: list[int] = []
    append = samples.append
    gc_was_enabled = gc.isenabled()
    gc.disable()  # same conditions as the harness
    try:
        start = perf_counter_ns()
        for _ in range(n):
            t0 = perf_counter_ns()
            fn()
            t1 = perf_counter_ns()
            append(t1 - t0)
        end = perf_counter_ns()
    finally:
        if gc_was_enabled:
            gc.enable()
    return (end - start) / n, float(statistics.median(samples))


def harness_loop(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """perfguard.measure.timing.measure; returns (wall ns per request, median sample ns)."""
    m = measure(
        fn,
        None,
        warmup=LoopSpec(iterations=1, seconds=0.0),
        measure=LoopSpec(iterations=n, seconds=0.0),
    )
    return m.measure_ns / m.samples_ns.size, float(statistics.median(m.samples_ns.tolist()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="requests per loop")
    parser.add_argument("--repeats", type=int, default=9, help="alternating rounds")
    args = parser.parse_args(argv)

    floor_wall: list[float] = []
    floor_p50: list[float] = []
    harn_wall: list[float] = []
    harn_p50: list[float] = []
    ratios: list[float] = []
    # One untimed round of each first, so neither pays for warming the interpreter.
    floor_loop(noop, min(args.n, 10_000))
    harness_loop(noop, min(args.n, 10_000))
    for r in range(args.repeats):
        # ABBA: alternate which goes first so a drift in host speed cancels out.
        order = (floor_loop, harness_loop) if r % 2 == 0 else (harness_loop, floor_loop)
        got: dict[str, tuple[float, float]] = {}
        for fn in order:
            got[fn.__name__] = fn(noop, args.n)
        floor_wall.append(got["floor_loop"][0])
        floor_p50.append(got["floor_loop"][1])
        harn_wall.append(got["harness_loop"][0])
        harn_p50.append(got["harness_loop"][1])
        ratios.append(got["harness_loop"][0] / got["floor_loop"][0])

    med = statistics.median
    print(f"timer overhead: n={args.n} requests x {args.repeats} repeats, no-op callable")
    print(f"{'loop':<22}{'wall/req ns':>12}{'min':>8}{'max':>8}{'sample p50':>12}")
    for name, wall, p50 in (
        ("floor (bare loop)", floor_wall, floor_p50),
        ("timing.measure", harn_wall, harn_p50),
    ):
        print(f"{name:<22}{med(wall):>12.1f}{min(wall):>8.1f}{max(wall):>8.1f}{med(p50):>12.1f}")
    ratio = med(ratios)
    verdict = "within" if ratio <= TARGET else "OVER"
    print(
        f"ratio harness/floor (median of per-round ratios): {ratio:.3f} "
        f"[{min(ratios):.3f}..{max(ratios):.3f}]  target <= {TARGET}: {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
