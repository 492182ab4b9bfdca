"""Measure one cell in a worker process of its own (``--perfguard-isolate``, ``isolate:``).

The worker (:mod:`perfguard.worker`) opens the cell, runs its warm-up and timed
loop exactly as in-process measurement does (:func:`perfguard.runner.run_loop`)
and sends the samples back as plain data; the parent builds the result. A model
that crashes the process (segfault, out-of-memory kill, ``os._exit``) or hangs
past the timeout fails only its cell, with the exit status or signal and the
tail of the worker's stderr, and the session goes on. Accuracy checks, when the
cell has them, run in the parent afterwards.
"""

from __future__ import annotations

import numpy as np

from perfguard.results import ScenarioResult
from perfguard.runner import RunContext, build_result
from perfguard.scenario import Scenario
from perfguard.timing import Measurement

__all__ = ["measure_isolated"]

OPEN_TIMEOUT_S = 600.0  # a first export or quantization can take minutes


def loop_timeout_s(scenario: Scenario) -> float:
    """How long the worker may take for warm-up plus timed loop before it counts as hung."""
    return scenario.warmup.max_seconds + scenario.measure.max_seconds + 60.0


def measure_isolated(scenario: Scenario, ctx: RunContext) -> ScenarioResult:
    """Run the cell's timed loop in a fresh worker process; raises ``WorkerError`` subclasses."""
    from perfguard.worker.client import WorkerProcess

    with WorkerProcess(cwd=ctx.rootdir, name=f"worker for {scenario.item_name}") as worker:
        opened = worker.request(
            "open",
            timeout_s=OPEN_TIMEOUT_S,
            suite=str(scenario.suite),
            cell=scenario.item_name,
            rootdir=str(ctx.rootdir),
            cache_dir=str(ctx.cache_dir),
        )
        loop = worker.request("loop", timeout_s=loop_timeout_s(scenario))
    samples = np.asarray(loop["samples_ns"], dtype=np.int64)
    measurement = Measurement(
        cold_start_ns=int(loop["cold_start_ns"]),
        warmup_iterations=int(loop["warmup_iterations"]),
        warmup_ns=int(loop["warmup_ns"]),
        samples_ns=samples,
        stable=bool(loop["stable"]),
        stability_ratio=float(loop["stability_ratio"]),
        stopped_by_cap=bool(loop["stopped_by_cap"]),
        measure_ns=int(loop.get("measure_ns", 0)),
    )
    runtime = {**dict(loop.get("runtime") or opened.get("runtime") or {}), "isolated": True}
    return build_result(scenario, ctx, measurement, int(opened.get("batch", 1)), runtime)
