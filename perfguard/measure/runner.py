"""Measure one scenario cell: backend -> inputs -> warm-up and timed loop -> result.

``ScenarioRun`` strings the pieces together for one cell (its session stays open for
confirmation rounds); a cell under ``load:`` is handed to ``perfguard.measure.loadcell``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import cast

import numpy as np

from perfguard.backends import Session
from perfguard.backends.base import GenerativeSession
from perfguard.core.blame import blame
from perfguard.core.errors import (
    HostMemoryError,
    InputError,
    ModelError,
    NonFiniteOutputError,
    PerfguardError,
)
from perfguard.core.scenario import Scenario
from perfguard.core.stats import stability_ratio, throughput
from perfguard.measure.canary import CanaryProbe
from perfguard.measure.generation import (
    GenerativeRequests,
    check_generated,
    generation_result,
    open_generator,
)
from perfguard.measure.gpuwatch import GpuWatch, is_out_of_memory
from perfguard.measure.loadcell import LoadRunner, measure_load
from perfguard.measure.memory import PeakMemory
from perfguard.measure.opencell import RunContext, open_session
from perfguard.measure.plant import Plant
from perfguard.measure.timing import Measurement, measure
from perfguard.records.figures import RuntimeInfo, summarize
from perfguard.records.results import ScenarioResult


def run_loop(
    scenario: Scenario,
    session: Session | GenerativeSession,
    prepared: object,
    plant: Plant | None = None,
) -> Measurement:
    """Warm up and time the scenario; a model error becomes a located ``ModelError``.

    ``session`` is a ``Session`` and ``prepared`` its prepared inputs, or a generative
    cell's ``GenerativeSession`` and ``prepared`` its ``GenerativeRequests`` (the call
    timed: each request stamps its own tokens). ``plant``: a slowdown planted in each
    request of a session (a calibration's, :mod:`perfguard.measure.plant`)."""
    call: Callable[[], object]
    sync: Callable[[], None] | None = None
    if isinstance(prepared, GenerativeRequests):
        call = prepared  # a GPU step is synchronised by its tokens' copy to the host
    else:
        plain = cast("Session", session)
        # partial, not a closure: one less Python frame inside every timed request.
        call = functools.partial(plain.run, prepared)
        sync = plain.synchronize
        if plant is not None:  # the wait is inside the request, after its own sync
            call, sync = plant.wrap(call, sync), None
    try:
        return measure(
            call,
            sync,
            scenario.warmup,
            scenario.measure,
            scenario.stability_tolerance,
        )
    except PerfguardError:
        raise
    except Exception as exc:  # the model's, perfguard's own, or out of memory: see blame
        error: PerfguardError
        if is_out_of_memory(exc):
            error = ModelError(
                _oom_message(scenario, session, exc),
                expected=f"the model to fit in the memory of {scenario.device}",
                fix="lower the batch or shapes, free the GPU of other processes, or use fp16/bf16",
                location=scenario.location,
            )
        else:
            error = blame(
                exc,
                doing=f"warming up or timing it on "
                f"{scenario.backend}/{scenario.device}/{scenario.precision}",
                culprit=f"model {scenario.model.name!r}",
                expected="the model to accept the suite's inputs",
                fix="check the input names, shapes and dtypes declared under "
                f"models.{scenario.model.name}.inputs against the model's signature",
                location=scenario.location,
            )
            if not isinstance(error, HostMemoryError):
                raise error from exc
    # Out of memory (device or host) is raised outside the `except` block on purpose:
    # a chained error would keep the failed call's frames, and so its tensors, alive
    # in pytest's report, and the next cell must start with that memory freed.
    raise error


def _oom_message(
    scenario: Scenario, session: Session | GenerativeSession, exc: BaseException
) -> str:
    describe = getattr(session, "describe_oom", None)
    if describe is not None:
        return str(describe(exc))
    return f"device out of memory on {scenario.device}: {_first_line(exc)}"


def check_outputs(scenario: Scenario, outputs: Sequence[np.ndarray]) -> None:
    """Fail when any floating output holds NaN or Inf (a broken model is not fast)."""
    names = scenario.model.output_names
    for index, array in enumerate(outputs):
        if not np.issubdtype(array.dtype, np.floating):
            continue
        bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        if bad:
            label = names[index] if index < len(names) else f"#{index}"
            raise NonFiniteOutputError(
                f"output {label} of model {scenario.model.name!r} holds {bad} NaN/Inf "
                f"value(s) out of {array.size} on {scenario.backend}/{scenario.precision}",
                expected="finite outputs",
                fix="check the model and its inputs' value ranges (e.g. token ids within "
                "the vocabulary); fp16 overflow is a common cause",
                location=scenario.location,
            )


class ScenarioRun:
    """One cell's open session; ``measure()`` can be called again for confirmation rounds.

    The machine-speed canary is sampled in blocks of its own before and after
    each timed loop (never inside a request), so its figure covers the same
    time window as the scenario's samples.
    """

    def __init__(
        self,
        scenario: Scenario,
        ctx: RunContext,
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
        plant: Plant | None = None,
    ) -> None:
        self.scenario = scenario
        self.ctx = ctx
        #: A calibration's planted slowdown in each request (timed loop and load levels).
        self.plant = plant
        self.memory = PeakMemory()
        self.memory.start()
        self.calibration = calibration
        self._load: LoadRunner | None = None
        # A generative cell (`generate:`) has a generator and its requests instead of a
        # session: it only answers measure() (perfguard.measure.generation).
        self.generator: GenerativeSession | None = None
        self.requests: GenerativeRequests | None = None
        if scenario.generate is not None:
            self._opened_generator = open_generator(scenario, ctx)
            self.generator, prompts, self.batch = self._opened_generator.__enter__()
            self.requests = GenerativeRequests(
                self.generator, prompts, scenario.generate.new_tokens, plant=plant
            )
            return
        self._opened = open_session(scenario, ctx, calibration)
        self.session, self.prepared, self.batch = self._opened.__enter__()

    def close(self) -> None:
        try:
            if self._load is not None:
                self._load.close()
        finally:
            if self.generator is not None:
                self._opened_generator.__exit__(None, None, None)
            else:
                self._opened.__exit__(None, None, None)

    def __enter__(self) -> ScenarioRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_final_outputs(self) -> None:
        """One more request after timing: its outputs must be readable and finite."""
        try:
            outputs = self.session.to_numpy(self.session.run(self.prepared))
        except Exception as exc:
            raise ModelError(
                f"reading the outputs of model {self.scenario.model.name!r} failed: "
                f"{_first_line(exc)}",
                expected="tensors, or tuples/dicts of tensors",
                location=self.scenario.location,
            ) from exc
        check_outputs(self.scenario, outputs)

    def check_unchanged(self) -> None:
        """Fail when the runtime changed while the cell was measured: a served model's
        ``url`` server replaced under the run (``check_unchanged`` of its session; a
        runtime in perfguard's own process has none)."""
        runtime = self.generator if self.generator is not None else self.session
        check = getattr(runtime, "check_unchanged", None)
        if check is not None:
            check()

    def peak_memory_mib(self) -> float | None:
        return self.memory.peak_mib()

    def measure(self) -> ScenarioResult:
        if self.scenario.load is not None:
            if self._load is None:
                self._load = LoadRunner(self)
            loaded = measure_load(self, self._load)
            if self.requests is None:
                self.check_final_outputs()
            self.check_unchanged()
            return loaded
        if self.requests is not None:
            return self._measure_generation(self.requests)
        probe = CanaryProbe()
        probe.sample()
        with GpuWatch(self.scenario, self.session) as watch:
            result = run_loop(self.scenario, self.session, self.prepared, self.plant)
        probe.sample()
        canary = probe.result()
        self.check_final_outputs()
        self.check_unchanged()
        runtime = RuntimeInfo(
            backend=dict(self.session.runtime_info),
            cpu=canary.shares,
            gpu=watch.facts(int(result.samples_ns.size)),
        )
        built = build_result(
            self.scenario,
            self.ctx,
            result,
            self.batch,
            runtime,
            canary_ns=canary.median_ns,
            peak_memory_mib=self.memory.peak_mib(),
        )
        return watch.check(built)

    def _measure_generation(self, requests: GenerativeRequests) -> ScenarioResult:
        assert self.generator is not None
        requests.rows.clear()
        probe = CanaryProbe()
        probe.sample()
        timed = run_loop(self.scenario, self.generator, requests)
        probe.sample()
        canary = probe.result()
        check_generated(self.scenario, self.generator, requests.last)
        self.check_unchanged()
        runtime = RuntimeInfo(backend=dict(self.generator.runtime_info), cpu=canary.shares)
        return generation_result(
            self.scenario,
            self.ctx,
            requests,
            timed,
            runtime,
            canary_ns=canary.median_ns,
            peak_memory_mib=self.memory.peak_mib(),
        )


def build_result(
    scenario: Scenario,
    ctx: RunContext,
    result: Measurement,
    batch: int,
    runtime: RuntimeInfo,
    *,
    canary_ns: float | None = None,
    peak_memory_mib: float | None = None,
) -> ScenarioResult:
    samples = np.asarray(result.samples_ns, dtype=np.int64)
    if samples.size == 0:
        raise InputError(
            "the timed loop recorded no samples",
            expected="measure.iterations >= 1",
            location=scenario.location,
        )
    return replace(
        ScenarioResult.for_cell(scenario, ctx.rootdir, batch_size=batch),
        latency_ns=summarize(samples),
        throughput=throughput(samples, batch),
        cold_start_ns=int(result.cold_start_ns),
        warmup_iterations=int(result.warmup_iterations),
        warmup_ns=int(result.warmup_ns),
        stable=bool(result.stable),
        stability_ratio=float(stability_ratio(samples)),
        runtime=runtime,
        canary_ns=canary_ns,
        peak_memory_mib=peak_memory_mib,
        samples_ns=tuple(int(s) for s in samples),
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
