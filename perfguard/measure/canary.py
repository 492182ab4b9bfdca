"""A fixed calibration workload that measures how fast the machine is right now.

Shared CI hosts have slow spells in which *every* workload runs tens of percent
slower for seconds to minutes. Timed next to a scenario, the canary's median
tells how fast the host was during that scenario; the ratio of two runs'
canaries then normalises their latencies (``perfguard.judge.compare``).

Design constraints, and why:

* **Fixed work, fixed sizes.** The canary must do identical work on every run and
  every machine of one fingerprint, so the sizes are constants, not options.
* **Identical in every process.** The canary compares *separate processes*
  (baseline and current run), so its figure must not depend on where the OS
  happened to place its buffers. A working set over L1d, or a copy reaching deep
  into L2 (physically indexed: random page placement overloads some of its sets),
  came out bimodal or spread widely from launch to launch. A 32x32 product (12 KiB:
  L1d is indexed within the page offset, so placement cannot matter) plus a 64 KiB
  copy (128 KiB touched, 1/8 of L2) spread by under 1% (``benchmarks/notes.md``).
* **Single-threaded BLAS, small and cache-resident.** OpenBLAS splits a GEMM
  over threads only above ``m*n*k > 65536 * 4``; 32**3 is far below, so no BLAS
  worker threads wake up to spin beside the model's. Nothing leaves L2, so the
  model's weights stay in L3 and the requests after a canary block are not slowed
  (measurements: ``benchmarks/notes.md``).
* **In blocks of its own.** The canary never runs inside a timed request. The
  runner samples it before and after ``timing.measure`` (``CanaryProbe``), or
  between blocks of requests (``measure_with_canary``), so its estimate covers
  the same time window as the scenario without being part of any sample.

What it cannot see: *other processes* competing for the cores. A
multi-threaded runtime (spinning intra-op threads) then slows several-fold while a
short single-threaded canary does not move (the scheduler gives it an idle core;
its iterations fit inside one time slice; figures in ``benchmarks/notes.md``). So the
probe also watches the machine passively: from ``/proc/stat`` (Linux) it reports the
share of all CPUs that *other* processes used (``foreign_cpu``) and the hypervisor took
(``steal``) between its first and last sample. It costs two file reads and perturbs
nothing; ``perfguard.judge.compare`` turns a measurement made with much foreign CPU
into ``invalid`` (re-run) instead of a regression.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfguard.machine.placement import run_cpu_ns, run_root_pid
from perfguard.records.figures import CpuShares

# 3 x 4 KiB operands: L1-resident wherever the pages land (see above).
MATRIX_SIZE = 32
# Products per iteration (each mostly numpy call overhead, which is CPU speed too;
# timings in benchmarks/notes.md).
MATMULS_PER_ITERATION = 60
# 64 KiB source + 64 KiB destination: beyond L1, 1/8 of L2, never evicts L3.
SWEEP_BYTES = 64 * 1024
SWEEPS_PER_ITERATION = 8
# Default canary iterations per probe sample (a few ms in all).
DEFAULT_ITERATIONS = 30


_PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class CanaryResult:
    """Per-iteration canary times (ns) and their median, the machine-speed figure.

    ``foreign_cpu`` and ``steal`` are fractions of all CPUs' time, over the
    window from the first to the last probe sample, used by other processes and
    taken by the hypervisor; None where ``/proc/stat`` is unavailable or the
    probe was sampled once.
    """

    median_ns: float
    samples_ns: tuple[int, ...]
    foreign_cpu: float | None = None
    steal: float | None = None

    @property
    def shares(self) -> CpuShares:
        """``foreign_cpu`` and ``steal`` as a result's runtime facts record them."""
        return CpuShares(foreign_cpu=self.foreign_cpu, steal=self.steal)

    def to_dict(self) -> dict[str, float | list[int] | None]:
        return {
            "median_ns": self.median_ns,
            "samples_ns": list(self.samples_ns),
            "foreign_cpu": self.foreign_cpu,
            "steal": self.steal,
        }


@dataclass(frozen=True)
class CpuSnapshot:
    """The machine's CPU counters at one instant (``cpu_snapshot``); two give shares."""

    wall_ns: int
    own_ns: int  # CPU time of this process (all threads) and of the rest of its run
    busy_ns: int | None  # CPU time of the whole machine, not idle, not steal
    steal_ns: int | None


def cpu_snapshot() -> CpuSnapshot:
    """Wall clock, this process's CPU time and, on Linux, the machine's busy and steal
    time (``/proc/stat``); ``perfguard.measure.quiet`` reads it too.

    In a pytest-xdist worker (``perfguard.machine.placement``: the run's controller is
    named) the CPU time of the whole run, its other workers and their children
    included, counts as this process's own: a sibling worker measures on cores of its
    own and is no busy neighbour; only processes outside the run are. Elsewhere, this
    process's children (a served model's server, a worker) count as its own.
    """
    wall, own = time.perf_counter_ns(), time.process_time_ns()
    root = run_root_pid()
    # Elsewhere this process's own children count as its own: a served model's server
    # (``perfguard.serving``) does the work being measured, and is no neighbour.
    own += run_cpu_ns(root if root is not None else os.getpid(), skip=os.getpid())
    busy = steal = None
    try:
        # First line: "cpu user nice system idle iowait irq softirq steal guest guest_nice",
        # in clock ticks. guest time is already counted in user, so it is left out.
        fields = [int(v) for v in _PROC_STAT.read_text().split("\n", 1)[0].split()[1:9]]
        tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        user, nice, system, _idle, _iowait, irq, softirq, stolen = fields
        busy = (user + nice + system + irq + softirq) * tick_ns
        steal = stolen * tick_ns
    except (OSError, ValueError, AttributeError):
        pass  # not Linux, or an unexpected format: no passive figures
    return CpuSnapshot(wall, own, busy, steal)


def cpu_shares(start: CpuSnapshot, end: CpuSnapshot) -> tuple[float | None, float | None]:
    """(foreign, steal) as fractions of all CPUs' time between two snapshots.

    The one reading of other processes' share: the probe's, and the wait for quiet's
    (``perfguard.measure.quiet``); (None, None) without ``/proc/stat``.
    """
    capacity = (end.wall_ns - start.wall_ns) * (os.cpu_count() or 1)
    if start.busy_ns is None or end.busy_ns is None or capacity <= 0:
        return None, None
    assert start.steal_ns is not None and end.steal_ns is not None
    own = end.own_ns - start.own_ns
    # Clamped: /proc/stat has 10 ms resolution, so a short window can read below own time.
    foreign = max(0.0, min(1.0, (end.busy_ns - start.busy_ns - own) / capacity))
    steal = max(0.0, min(1.0, (end.steal_ns - start.steal_ns) / capacity))
    return foreign, steal


class CanaryProbe:
    """Holds the canary's buffers and accumulates its timings over a measurement.

    Typical use by a runner::

        probe = CanaryProbe()
        probe.sample()                      # before the scenario's timed loop
        measurement = timing.measure(...)
        probe.sample()                      # after it
        canary_ns = probe.result().median_ns

    The median over all samples (not one block) is the figure: a slow spell that
    starts or ends mid-measurement then weighs in as it did on the scenario.
    """

    def __init__(self, iterations: int = DEFAULT_ITERATIONS) -> None:
        if iterations < 1:
            raise ValueError(f"canary iterations must be >= 1, got {iterations}")
        self.iterations = iterations
        # Fixed seed: identical operands, so identical work, on every run.
        rng = np.random.default_rng(0)
        self._a = rng.standard_normal((MATRIX_SIZE, MATRIX_SIZE), dtype=np.float32)
        self._b = rng.standard_normal((MATRIX_SIZE, MATRIX_SIZE), dtype=np.float32)
        self._out = np.empty((MATRIX_SIZE, MATRIX_SIZE), dtype=np.float32)
        self._src = np.ones(SWEEP_BYTES // 4, dtype=np.float32)
        self._dst = np.empty_like(self._src)
        self._samples: list[int] = []
        self._first: CpuSnapshot | None = None
        self._last: CpuSnapshot | None = None
        # One untimed pass so first-touch page faults and BLAS dispatch set-up
        # are not counted as machine slowness.
        self._iteration()

    def _iteration(self) -> None:
        for _ in range(MATMULS_PER_ITERATION):
            np.matmul(self._a, self._b, out=self._out)
        for _ in range(SWEEPS_PER_ITERATION):
            np.copyto(self._dst, self._src)

    def sample(self, iterations: int | None = None) -> tuple[int, ...]:
        """Run one block of canary iterations; returns and records their times (ns)."""
        count = self.iterations if iterations is None else iterations
        if self._first is None:
            self._first = cpu_snapshot()
        clock = time.perf_counter_ns
        block: list[int] = []
        for _ in range(count):
            start = clock()
            self._iteration()
            block.append(clock() - start)
        self._samples.extend(block)
        self._last = cpu_snapshot()
        return tuple(block)

    @property
    def samples_ns(self) -> tuple[int, ...]:
        return tuple(self._samples)

    def result(self) -> CanaryResult:
        """The median over every block sampled so far (call ``sample`` first)."""
        if not self._samples or self._first is None or self._last is None:
            raise ValueError("CanaryProbe.result() called before any sample()")
        foreign, steal = cpu_shares(self._first, self._last)
        return CanaryResult(
            median_ns=float(np.median(np.asarray(self._samples, dtype=np.float64))),
            samples_ns=tuple(self._samples),
            foreign_cpu=foreign,
            steal=steal,
        )


def run_canary(iterations: int = DEFAULT_ITERATIONS) -> CanaryResult:
    """One stand-alone block of canary iterations."""
    probe = CanaryProbe(iterations)
    probe.sample()
    return probe.result()


def measure_with_canary(
    measure_block: Callable[[int], np.ndarray],
    total: int,
    block: int,
    canary_iterations: int = DEFAULT_ITERATIONS,
) -> tuple[np.ndarray, CanaryResult]:
    """Measure ``total`` requests in blocks of ``block``, the canary between blocks.

    ``measure_block(n)`` must time ``n`` requests and return their latencies (ns).
    The canary runs before the first block, between blocks and after the last,
    so its median covers the scenario's whole time window. Use it for long
    measurements (minutes), where one block before and after would miss a slow
    spell in the middle; for a few seconds ``CanaryProbe`` around one
    ``timing.measure`` call is enough.
    """
    if total < 1 or block < 1:
        raise ValueError(f"total and block must be >= 1, got total={total}, block={block}")
    probe = CanaryProbe(canary_iterations)
    parts: list[np.ndarray] = []
    remaining = total
    probe.sample()
    while remaining > 0:
        n = min(block, remaining)
        parts.append(np.asarray(measure_block(n), dtype=np.int64))
        remaining -= n
        probe.sample()
    return np.concatenate(parts), probe.result()
