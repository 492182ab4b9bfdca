"""Measure one cell under concurrent load: sessions -> workers -> levels -> a result.

A load cell (``Scenario.load`` set) runs through :class:`LoadRunner`, which
:class:`perfguard.measure.runner.ScenarioRun` creates once per cell (confirmation rounds
reuse it):

1. **Workers.** One worker per client (closed loop) or per model instance
   (open loop / batching). ``sessions: shared`` gives every worker the cell's
   one runtime session (ONNX Runtime sessions are thread-safe; torch modules run
   under ``torch.inference_mode`` in each thread); ``per_worker`` opens one more
   session per worker. With batching, each worker has a prepared input for
   every batch of ``k`` requests (the request's inputs repeated ``k`` times
   along axis 0), made before timing. A generative cell's workers all stream from its
   one model (``measure.generation.StreamingRequests``: one request per call, each with
   its own KV cache, each worker its own turn through the prompts); the load generator
   keeps every request's token times.
2. **Warm-up.** Every worker's every batch size is called once (a model that
   cannot take a batch fails here, with the fix), then the same load pattern
   runs for ``warmup.seconds`` (at least ``warmup.iterations`` requests) and is
   discarded.
3. **The level** (:mod:`perfguard.measure.loadgen`), then its figures
   (:mod:`perfguard.measure.levelfigures`) and its host memory (``LevelMemory``: resident
   before the cell's first request, and the high-water mark over the measured level
   alone, restarted after its warm-up). An open-loop level stops at
   ``min(measure.max_seconds, max(3 x its duration, duration + 5 s))``:
   requests still waiting then count as unserved, with the latency they had
   waited (a lower bound).
4. **SLO search** (``slo:``): levels step up by ``factor`` from ``start`` until
   the percentile misses the target (or the level saturates: fewer than 90% of
   the asked rate answered, requests unserved), then ``refine`` bisection
   steps; the best level that met the target is the cell's result.

Stability (``stable``) is judged on the uncorrected samples: the model calls'
own drift shows a host slow spell, while growing queueing delay under load is
the system's behaviour and must be gated, not excused.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from perfguard.backends import Session
from perfguard.core import progress
from perfguard.core.errors import LoadError, PerfguardError, RunInvalid
from perfguard.core.progress import Throttle
from perfguard.core.scenario import LoadSpec, LoopSpec, Scenario
from perfguard.core.stats import stability_ratio
from perfguard.measure.canary import CanaryProbe
from perfguard.measure.generation import GenerativeRequests, StreamingRequests
from perfguard.measure.gpuwatch import GpuWatch
from perfguard.measure.levelfigures import SATURATED, LevelFigures, kept_up, level_figures
from perfguard.measure.loadgen import Batching, LoadLog, Worker, closed_loop, open_loop, schedule
from perfguard.measure.memory import PeakMemory
from perfguard.measure.opencell import RunContext, open_session
from perfguard.measure.plant import Plant
from perfguard.models.inputs import make_inputs
from perfguard.records.figures import RuntimeInfo, summarize
from perfguard.records.loadfigures import (
    LevelMemory,
    LoadFigures,
    ServiceProbe,
    SloSearch,
    SloStep,
)
from perfguard.records.results import ScenarioResult, Status
from perfguard.records.tokenfigures import TokenFigures

__all__ = [
    "LevelRun",
    "LoadCell",
    "LoadRunner",
    "interleavable",
    "measure_load",
]


class LoadCell(Protocol):
    """What a load cell needs of the cell that opened it (``runner.ScenarioRun``)."""

    scenario: Scenario
    ctx: RunContext
    batch: int
    calibration: Sequence[Mapping[str, np.ndarray]] | None
    memory: PeakMemory
    #: A generative cell's requests (its session, prompts and tokens per request); a
    #: cell's runtime session otherwise.
    requests: GenerativeRequests | None
    #: A calibration's planted slowdown in each request (``perfguard.measure.plant``).
    plant: Plant | None

    @property
    def session(self) -> Session: ...

    def peak_memory_mib(self) -> float | None: ...


_PROBE_CALLS = 20
_MAX_STEPS = 30


@dataclasses.dataclass(frozen=True)
class LevelRun:
    """A measured level with what its warm-up took."""

    figures: LevelFigures
    log: LoadLog
    cold_start_ns: int
    warmup_requests: int
    warmup_ns: int
    memory: LevelMemory | None = None


def interleavable(spec: LoadSpec) -> bool:
    """Whether two cells of this load spec can share one level, their requests
    alternating on every stream (:meth:`LoadRunner.measure_interleaved`): a closed loop
    without batching. An open loop's or a batching server's requests share a queue,
    where each side's wait would depend on the other side's service times; those keep
    whole levels per side."""
    return spec.mode == "closed" and spec.batching is None


def _tiled(feeds: Mapping[str, np.ndarray], k: int) -> dict[str, np.ndarray]:
    return {name: np.concatenate([np.asarray(a)] * k, axis=0) for name, a in feeds.items()}


class LoadRunner:
    """Workers, warm-up and levels for one load cell (closed with the ScenarioRun)."""

    def __init__(self, run: LoadCell) -> None:
        self.run = run
        self.scenario: Scenario = run.scenario
        assert self.scenario.load is not None
        self.spec: LoadSpec = self.scenario.load
        self._open_session = open_session
        # A generative cell: every worker streams from the one model, each request with
        # its own KV cache, each worker its own turn through the prompts.
        self._requests = run.requests
        self._streams: dict[int, StreamingRequests] = {}
        self._feeds = make_inputs(self.scenario.model) if run.requests is None else {}
        self._sessions: list[Session] = [run.session] if run.requests is None else []
        self._extra: list[AbstractContextManager[Any]] = []
        self._prepared: dict[tuple[int, int], object] = {}
        self.cold_start_ns: int | None = None
        self.idle_mib: float | None = None  # resident before the cell's first request

    def close(self) -> None:
        while self._extra:
            self._extra.pop().__exit__(None, None, None)

    # -- workers ------------------------------------------------------------------
    def _batch_sizes(self) -> range:
        batching = self.spec.batching
        return range(1, (batching.max_batch if batching else 1) + 1)

    def _session(self, index: int) -> tuple[int, Session]:
        if self.spec.sessions == "shared":
            return 0, self._sessions[0]
        while len(self._sessions) <= index:
            opened = self._open_session(self.scenario, self.run.ctx, self.run.calibration)
            session, _, _ = opened.__enter__()
            self._extra.append(opened)
            self._sessions.append(session)
        return index, self._sessions[index]

    def _worker(self, index: int) -> Worker:
        if self._requests is not None:
            return self._streaming_worker(index)
        slot, session = self._session(index)
        prepared = {}
        for k in self._batch_sizes():
            if (slot, k) not in self._prepared:
                feeds = self._feeds if k == 1 else _tiled(self._feeds, k)
                self._prepared[(slot, k)] = session.prepare(feeds)
                self._first_call(session, self._prepared[(slot, k)], k)
            prepared[k] = self._prepared[(slot, k)]
        # A runtime may give each worker its own device stream (torch on CUDA).
        own = getattr(session, "worker_calls", None)
        if own is not None:
            calls, sync = own(prepared)
        else:
            calls = {k: functools.partial(session.run, p) for k, p in prepared.items()}
            sync = session.synchronize
        plant = self.run.plant
        if plant is not None:  # inside each request, after its own sync; the GIL let go
            calls = {k: plant.wrap(c, sync, yielding=True) for k, c in calls.items()}
            sync = None
        return Worker(calls=calls, synchronize=sync)

    def _streaming_worker(self, index: int) -> Worker:
        """A generative cell's worker ``index``: one request per call, its tokens stamped
        by the load generator; the cell's very first request is its cold start."""
        requests = self._requests
        assert requests is not None
        if index not in self._streams:
            stream = StreamingRequests(
                requests.session,
                requests.prepared,
                requests.new_tokens,
                turn=index,
                plant=self.run.plant,
            )
            self._streams[index] = stream
            if self.cold_start_ns is None:
                t0 = time.perf_counter_ns()
                try:
                    stream(_no_stamp)
                except Exception as exc:
                    raise self._batch_error(1, exc) from exc
                self.cold_start_ns = time.perf_counter_ns() - t0
        return Worker(calls={1: self._streams[index]}, streaming=True)

    def _first_call(self, session: Session, prepared: object, k: int) -> None:
        """Each session's each batch size is called once, alone, before any load; the
        very first such call is the cell's cold start."""
        t0 = time.perf_counter_ns()
        try:
            session.run(prepared)
            if session.synchronize is not None:
                session.synchronize()
        except Exception as exc:
            raise self._batch_error(k, exc) from exc
        if self.cold_start_ns is None:
            self.cold_start_ns = time.perf_counter_ns() - t0

    def _batch_error(self, k: int, exc: Exception) -> PerfguardError:
        sc = self.scenario
        detail = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
        if k == 1:
            return LoadError(
                f"model {sc.model.name!r} failed before the load started: {detail}",
                expected="the model to serve one request",
                fix="run the cell without `load:` to see the model's own error",
                location=sc.location,
            )
        return LoadError(
            f"model {sc.model.name!r} cannot serve a batch of {k} requests (their inputs "
            f"stacked along axis 0) for dynamic batching: {detail}",
            expected="a model whose first input axis is a batch axis of any size",
            fix="give an `onnx:` model a dynamic first axis (torch.onnx.export(..., "
            "dynamic_axes={name: {0: 'batch'}})) — factory models are exported that way "
            "for batching cells — or remove `batching:`",
            location=sc.location,
        )

    # -- levels -------------------------------------------------------------------
    def _open_cap(self, duration_s: float) -> float:
        measure = self.scenario.measure
        return min(measure.max_seconds, max(3 * duration_s, duration_s + 5.0))

    def _pattern(
        self,
        spec: LoadSpec,
        loop: LoopSpec,
        seed_offset: int,
        warmup_floor: int = 0,
        gc_generation: int = 2,
    ) -> LoadLog:
        batching = spec.batching
        batch = (
            Batching(batching.max_batch, int(batching.max_wait_ms * 1e6))
            if batching is not None
            else None
        )
        if spec.mode == "closed":
            clients = int(spec.level)
            if batch is None:
                workers = [self._worker(i) for i in range(clients)]
                return closed_loop(
                    workers,
                    iterations=loop.iterations,
                    seconds=loop.seconds,
                    max_seconds=loop.max_seconds,
                    gc_generation=gc_generation,
                )
            servers = [self._worker(i) for i in range(spec.workers)]
            return closed_loop(
                [Worker({}) for _ in range(clients)],
                iterations=loop.iterations,
                seconds=loop.seconds,
                max_seconds=loop.max_seconds,
                batching=batch,
                server_workers=servers,
                gc_generation=gc_generation,
            )
        servers = [self._worker(i) for i in range(spec.workers)]
        # Open loop: the duration sets the count (``iterations`` only pads the warm-up).
        count = max(1, round(spec.level * loop.seconds), warmup_floor)
        offsets = schedule(spec.level, count, spec.arrivals, spec.seed + seed_offset)
        return open_loop(
            offsets,
            servers,
            batch or Batching(),
            max_seconds=self._open_cap(count / spec.level),
            gc_generation=gc_generation,
        )

    def warm_up(self, spec: LoadSpec) -> tuple[int, int]:
        """The cold start (first call, alone), then ``spec``'s load pattern for the cell's
        warm-up, discarded: ``(requests, ns)`` it took. Raises ``LoadError`` on a hang."""
        warm = self.scenario.warmup
        if self.idle_mib is None:
            self.idle_mib = self.run.memory.resident_mib()
        self._worker(0)  # the cold start, before any warm-up
        t0 = time.perf_counter_ns()
        warm_spec = dataclasses.replace(spec, seed=spec.seed + 7919)
        warm_loop = LoopSpec(
            iterations=max(1, warm.iterations),
            seconds=warm.seconds,
            max_seconds=max(warm.max_seconds, warm.seconds),
        )
        warm_log = self._pattern(warm_spec, warm_loop, 1, warm_loop.iterations)
        warmup_ns = time.perf_counter_ns() - t0
        self._check_hung(warm_log, spec, "warm-up")
        return int(warm_log.scheduled_ns.size), warmup_ns

    def measure_level(
        self, spec: LoadSpec, loop: LoopSpec, seed_offset: int = 0, gc_generation: int = 2
    ) -> tuple[LevelFigures, LoadLog]:
        """One level for ``loop`` (no warm-up): its figures and log. Same-run A/B runs
        short levels of both sides this way, each round with its own ``seed_offset``,
        collecting only the young GC generations before each (``gc_generation=1``:
        a full collection with torch loaded costs more than a short level's gap)."""
        log = self._pattern(spec, loop, seed_offset, gc_generation=gc_generation)
        self._check_hung(log, spec, "measurement")
        return level_figures(log, spec, self.run.batch), log

    def measure_interleaved(
        self,
        other: LoadRunner,
        loop: LoopSpec,
        first: int = 0,
        gc_generation: int = 1,
    ) -> tuple[LevelFigures, LevelFigures]:
        """One level shared with ``other``'s cell (no warm-up): each of the level's
        clients alternates between this cell's worker and ``other``'s, request by
        request, client ``k`` starting on ``(k + first) % 2`` (0: this cell). Each
        side's figures from its own requests (its throughput by Little's law, see
        :func:`perfguard.measure.levelfigures.level_figures`). Same-run A/B's rounds of a
        closed loop without batching (:func:`interleavable`); ``loop`` counts the
        requests of both sides."""
        spec = self.spec
        if not interleavable(spec) or other.spec.level_id != spec.level_id:
            raise ValueError(
                f"cannot interleave {spec.level_id} with {other.spec.level_id}: both must "
                "be the same closed loop without batching"
            )
        clients = int(spec.level)
        log = closed_loop(
            [self._worker(i) for i in range(clients)],
            iterations=loop.iterations,
            seconds=loop.seconds,
            max_seconds=loop.max_seconds,
            gc_generation=gc_generation,
            alternate=[other._worker(i) for i in range(clients)],
            first=first,
        )
        self._check_hung(log, spec, "measurement")
        mine = level_figures(log.of_side(0), spec, self.run.batch, interleaved=True)
        theirs = level_figures(log.of_side(1), spec, other.run.batch, interleaved=True)
        return mine, theirs

    def level(self, spec: LoadSpec) -> LevelRun:
        """Warm up and measure one level (no SLO); raises ``LoadError`` on failures."""
        warm_requests, warmup_ns = self.warm_up(spec)
        self.run.memory.section()
        figures, log = self.measure_level(spec, self.scenario.measure)
        memory = self._level_memory(spec)
        return LevelRun(figures, log, self.cold_start_ns or 0, warm_requests, warmup_ns, memory)

    def _level_memory(self, spec: LoadSpec) -> LevelMemory | None:
        """The measured level's peak above the idle model (None where RSS is not read)."""
        peak = self.run.memory.section_peak_mib()
        if peak is None or self.idle_mib is None:
            return None
        closed = spec.mode == "closed"
        streams = int(spec.level) if closed else spec.workers
        return LevelMemory(idle_mib=self.idle_mib, level_peak_mib=peak, streams=max(1, streams))

    def _check_hung(self, log: LoadLog, spec: LoadSpec, phase: str) -> None:
        if log.hung:
            who = "clients" if spec.mode == "closed" and spec.batching is None else "workers"
            raise LoadError(
                f"{log.hung} {who} of {self.scenario.item_name} were still inside a model "
                f"call 5 s after the {phase} cap (at {spec.level_id}): the model hangs when "
                "called concurrently",
                expected="every model call to return",
                fix="check the model for locks or thread-unsafe state; try "
                "`sessions: per_worker`, or lower the concurrency",
                location=self.scenario.location,
            )

    def service_probe(self) -> ServiceProbe:
        """Median model-call time at batch 1 and at ``max_batch`` on worker 0 (ms), and
        the capacities they imply: the throughput gained by batching."""
        batching = self.spec.batching
        assert batching is not None
        worker = self._worker(0)
        times = {}
        for k in (1, batching.max_batch):
            call, sync = worker.calls[k], worker.synchronize
            samples = []
            for _ in range(_PROBE_CALLS):
                t0 = time.perf_counter_ns()
                call()
                if sync is not None:
                    sync()
                samples.append(time.perf_counter_ns() - t0)
            times[k] = float(np.median(samples)) / 1e6
        per_request = self.run.batch * self.spec.workers
        unbatched = per_request * 1000.0 / times[1] if times[1] > 0 else None
        batched = (
            per_request * batching.max_batch * 1000.0 / times[batching.max_batch]
            if times[batching.max_batch] > 0
            else None
        )
        return ServiceProbe(
            service_ms_batch1=times[1],
            service_ms_max_batch=times[batching.max_batch],
            capacity_unbatched=unbatched,
            capacity_batched=batched,
            gain=batched / unbatched if batched and unbatched else None,
        )

    # -- SLO search ---------------------------------------------------------------
    def search(self) -> tuple[LevelRun, SloSearch]:
        """Step the level up to the SLO's limit; the best level meeting it and the steps."""
        slo = self.spec.slo
        assert slo is not None
        closed = self.spec.mode == "closed"
        steps: list[SloStep] = []
        runs: dict[float, LevelRun] = {}

        unit = "clients" if closed else "/s"
        shown = Throttle()

        def step(level: float) -> bool:
            if shown.due():
                progress.report(
                    "SLO search",
                    len(steps),
                    cell=self.scenario.item_name,
                    detail=f"level {len(steps) + 1}: trying {level:g} {unit}",
                )
            spec = dataclasses.replace(self.spec, slo=None, level=level)
            run = self.level(spec)
            runs[level] = run
            figures = run.figures
            p_ms = figures.percentile_ms(slo.percentile)
            load = figures.load
            saturated = load.unserved > 0 or (not closed and kept_up(run.log) < SATURATED)
            good = load.goodput.share if load.goodput is not None else None
            met = (
                good is not None and good >= slo.goodput_share
                if slo.goodput_share is not None
                else p_ms is not None and slo.target_ms is not None and p_ms <= slo.target_ms
            )
            ok = met and figures.invalid is None and not saturated and load.failed == 0
            steps.append(
                SloStep(
                    level=level,
                    p_ms=p_ms,
                    throughput=figures.throughput,
                    ok=ok,
                    invalid=figures.invalid or ("saturated" if saturated else None),
                    good_share=good if slo.goodput_share is not None else None,
                )
            )
            return ok

        good: float | None = None
        bad: float | None = None
        level = slo.start
        for _ in range(_MAX_STEPS):
            if step(level):
                good = level
                if slo.max_level is not None and level >= slo.max_level:
                    break
                nxt = level * slo.factor
                if slo.max_level is not None:
                    nxt = min(nxt, slo.max_level)
                level = float(max(int(nxt), int(level) + 1)) if closed else nxt
            else:
                bad = level
                break
        for _ in range(slo.refine):
            if good is None or bad is None:
                break
            mid = (good + bad) / 2
            if closed:
                mid = float(int(mid))
                if mid <= good:
                    break
            if step(mid):
                good = mid
            else:
                bad = mid
        best_ok = max((s.level for s in steps if s.ok), default=None)
        progress.report(
            "SLO search",
            len(steps),
            len(steps),
            cell=self.scenario.item_name,
            detail=f"best {best_ok:g} {unit}" if best_ok is not None else "no level met the SLO",
            final=True,
        )
        summary = SloSearch(
            percentile=slo.percentile,
            target_ms=slo.target_ms,
            over="concurrency" if closed else "rate",
            goodput_share=slo.goodput_share,
            steps=tuple(steps),
        )
        passing = [s for s in steps if s.ok]
        if not passing:
            return runs[steps[0].level], summary
        best = max(passing, key=lambda s: s.throughput)
        summary = dataclasses.replace(
            summary, best_level=best.level, best_throughput=best.throughput, best_p_ms=best.p_ms
        )
        return runs[best.level], summary


def _no_stamp() -> None:
    return None


def stable_under_load(log: LoadLog, tolerance: float) -> tuple[bool, float]:
    """Stability of the model calls themselves (uncorrected, in send order)."""
    ok = (log.end_ns >= 0) & ~log.failed
    service = (log.end_ns - log.start_ns)[ok]
    order = np.argsort(log.scheduled_ns[ok])
    service = service[order]
    if service.size < 6:
        return True, 1.0
    ratio = float(stability_ratio(service))
    return abs(ratio - 1.0) <= tolerance, ratio


def measure_load(run: LoadCell, runner: LoadRunner) -> ScenarioResult:
    """One round of a load cell: its level (or SLO search) as a ``ScenarioResult``.

    Raises ``LoadError`` (requests failed, nothing answered, SLO never met) or
    ``RunInvalid`` (the generator fell behind); both carry the figures in
    ``.result`` so the results file keeps them.
    """
    sc = run.scenario
    spec = runner.spec
    session: Any = run.requests.session if run.requests is not None else run.session
    probe = CanaryProbe()
    probe.sample()
    # Telemetry and peak device memory on a GPU; per-request device time is not
    # taken under load (each worker has its own stream).
    with GpuWatch(sc, session, device_timing=False) as watch:
        if spec.slo is not None:
            level_run, slo = runner.search()
        else:
            level_run, slo = runner.level(spec), None
    probe.sample()
    canary = probe.result()
    figures = level_run.figures
    load = figures.load
    if slo is not None:
        load = dataclasses.replace(load, level=spec.level_id, slo=slo)
    if level_run.memory is not None:
        load = dataclasses.replace(load, memory=level_run.memory)
    if spec.batching is not None and load.batching is not None:
        load = load.with_probe(runner.service_probe())
    samples = figures.samples_ns
    if samples.size == 0 and not load.failed:
        raise LoadError(
            f"no request of {sc.item_name} was answered at {spec.level_id} "
            f"({load.failed} failed: {_errors_text(load.errors)})",
            expected="answered requests to time",
            fix="run the cell without `load:` to see the model's own behaviour",
            location=sc.location,
        )
    stable, ratio = stable_under_load(level_run.log, sc.stability_tolerance)
    result = dataclasses.replace(
        ScenarioResult.for_cell(sc, run.ctx.rootdir, batch_size=run.batch),
        latency_ns=summarize(samples) if samples.size else None,
        throughput=figures.throughput,
        cold_start_ns=level_run.cold_start_ns,
        warmup_iterations=level_run.warmup_requests,
        warmup_ns=level_run.warmup_ns,
        stable=stable,
        stability_ratio=ratio,
        runtime=RuntimeInfo(
            backend=dict(session.runtime_info),
            cpu=canary.shares,
            sessions=max(1, len(runner._sessions)),
            gpu=watch.facts(0),
        ),
        canary_ns=canary.median_ns,
        peak_memory_mib=run.peak_memory_mib(),
        load=load,
        samples_ns=tuple(int(s) for s in samples),
        tokens=_level_tokens(sc, figures),
    )
    result = watch.check(result)
    _raise_for(result, load, spec, sc)
    return result


def _level_tokens(sc: Scenario, figures: LevelFigures) -> TokenFigures | None:
    """A generative level's token figures, from each request's scheduled send (None for
    other levels, and for a level that answered nothing)."""
    spec = sc.generate
    if spec is None or figures.token_ns is None or not figures.token_ns.shape[0]:
        return None
    tokens = TokenFigures.of(figures.token_ns, prompt_tokens=spec.prompt_tokens, batch=spec.batch)
    # Requests overlap under load: the level's output rate is its answered requests'
    # tokens over its window, not one stream's.
    return dataclasses.replace(tokens, tokens_per_s=figures.throughput * spec.new_tokens)


def _errors_text(errors: Mapping[str, int]) -> str:
    return "; ".join(f"{count} x {text}" for text, count in errors.items()) or "no error"


def _raise_for(result: ScenarioResult, load: LoadFigures, spec: LoadSpec, sc: Scenario) -> None:
    where = f"{spec.level:g} concurrent clients" if spec.mode == "closed" else f"{spec.level:g}/s"
    problem: PerfguardError | None = None
    if load.failed and load.failed > spec.errors_max * load.requests:
        allowed = (
            f"at most {spec.errors_max:.1%} of them (`errors_max`) failing"
            if spec.errors_max
            else "every request answered without an error"
        )
        problem = LoadError(
            f"{load.failed} of {load.requests} requests ({load.failed / load.requests:.1%}) "
            f"failed under load ({where}): {_errors_text(load.errors)}",
            expected=allowed,
            fix=(
                "see the server's log (.perfguard/servers/): it refused, timed out or cut "
                "requests at this load; raise `load.errors_max` only for errors you accept"
                if sc.model.server is not None
                else "the model may not be safe to call from several threads: use "
                "`sessions: per_worker`, or fix the shared state in the model"
            ),
            location=sc.location,
        )
    elif load.slo is not None and load.slo.best_level is None:
        slo = load.slo
        first = slo.steps[0]
        why = f"; {first.invalid}" if first.invalid else ""
        if slo.goodput_share is not None:
            seen = f"{first.good_share:.0%} good" if first.good_share is not None else "no answer"
            target = f"a good share >= {slo.goodput_share:.0%}"
        else:
            seen = f"{first.p_ms:.2f} ms" if first.p_ms is not None else "no answer"
            target = f"P{slo.percentile:g} <= {slo.target_ms:g} ms"
        problem = LoadError(
            f"no level met {target}: already at the start level {first.level:g} "
            f"({slo.over}) it was {seen}{why}",
            expected=f"{target} at the start level",
            fix="lower `slo.start` (the first listed level), or loosen the target",
            location=sc.location,
        )
    elif load.invalid:
        problem = RunInvalid(
            f"{sc.item_name}: {load.invalid}",
            expected="a load generator that keeps to its schedule",
            fix="re-run on an idle machine, or lower the rate",
            location=sc.location,
        )
    if problem is not None:
        status = Status.SKIPPED if isinstance(problem, RunInvalid) else Status.FAILED
        problem.result = dataclasses.replace(result, status=status, message=str(problem))
        raise problem
