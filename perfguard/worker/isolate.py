"""Measure one cell in a worker process of its own (``--perfguard-isolate``, ``isolate:``).

The worker (:mod:`perfguard.worker`) opens the cell and measures it exactly as
in-process measurement does (:meth:`perfguard.measure.runner.ScenarioRun.measure`, the
``result`` op: warm-up and timed loop with the machine-speed canary, GPU watch
and peak memory, or the cell's ``load:`` levels; then the output check) and
sends the result back as plain data. The same open worker measures again for a
confirmation round. A model that crashes the process (segfault, out-of-memory
kill, ``os._exit``) or hangs past the timeout fails only its cell, with the exit
status or signal and the tail of the worker's stderr, and the session goes on.
Opening the cell may take ``RunContext.open_timeout_s`` (``--perfguard-open-timeout``);
a worker past it is killed with its process group (whatever the model started).
Accuracy checks, when the cell has them, run in the parent afterwards. ``profile()``
takes the cell's operator profile in the same worker after its measurement
(``perfguard.measure.profiling``), never inside it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from perfguard.core.errors import WorkerTimeout
from perfguard.core.scenario import Scenario
from perfguard.measure.opencell import RunContext
from perfguard.records.opprofile import OperatorProfile
from perfguard.records.results import ScenarioResult
from perfguard.worker.client import WorkerProcess

__all__ = ["IsolatedRun", "measure_timeout_s"]

# An SLO search measures one level per step; its own rules end it, so this only
# bounds a worker that stopped answering altogether.
_SEARCH_LEVELS = 40


def measure_timeout_s(scenario: Scenario) -> float:
    """How long one measurement may take in the worker before it counts as hung.

    Warm-up plus timed loop at their caps, plus a minute; under ``load:`` the load
    runner detects a hung model itself (cap + 5 s), and an SLO search may run
    many levels, each with its own warm-up and timed loop.
    """
    one = scenario.warmup.max_seconds + scenario.measure.max_seconds + 60.0
    load = scenario.load
    return one * _SEARCH_LEVELS if load is not None and load.slo is not None else one


class IsolatedRun:
    """One cell open in a fresh worker; ``measure()`` again for confirmation rounds.

    Raises ``WorkerError`` subclasses (crash, timeout, garbage, a failed request
    carrying the worker's own ``PerfguardError``).
    """

    def __init__(self, scenario: Scenario, ctx: RunContext) -> None:
        self.scenario = scenario
        self._worker = WorkerProcess(cwd=ctx.rootdir, name=f"worker for {scenario.item_name}")
        self._worker.start()
        limit = ctx.worker_open_limit_s
        try:
            self._worker.request(
                "open",
                timeout_s=limit,
                suite=str(scenario.suite),
                cell=scenario.item_name,
                rootdir=str(ctx.rootdir),
                cache_dir=str(ctx.cache_dir),
            )
        except WorkerTimeout as exc:
            self._worker.close()
            raise WorkerTimeout(
                exc.problem,
                expected=f"the model to open within the open timeout ({limit:g} s)",
                fix="find where it hangs in the worker's stacks below; if the model only "
                "needs longer (export, quantization, compilation), raise "
                "--perfguard-open-timeout (ini perfguard_open_timeout)",
                location=scenario.location,
                worker=exc.worker,
                tail=exc.tail,
                tail_label=exc.tail_label,
            ) from None
        except BaseException:
            self._worker.close()
            raise

    def measure(self) -> ScenarioResult:
        reply = self._worker.request("result", timeout_s=measure_timeout_s(self.scenario))
        result = ScenarioResult.from_dict(reply["result"])
        return replace(result, runtime=replace(result.runtime, isolated=True))

    def profile(
        self, requests: int | None = None, trace_path: Path | None = None
    ) -> OperatorProfile:
        """The cell's operator profile, taken in its worker after ``measure()`` (never
        inside it): ``requests`` recorded requests (default ``PROFILE_REQUESTS``), the
        Chrome trace written to ``trace_path`` when given."""
        return self._worker.profile(
            requests, trace_path, timeout_s=measure_timeout_s(self.scenario)
        )

    def close(self) -> None:
        self._worker.close()

    def __enter__(self) -> IsolatedRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
