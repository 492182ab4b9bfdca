"""Measure a generative cell: warmed-up greedy generation, timed token by token.

A request sends one prompt batch (``batch x prompt_tokens`` token ids; the cell's
prompts in turn) and generates exactly ``new_tokens`` tokens. The session calls
``stamp()`` once per decoding step, as soon as that step's tokens are on the host; a
stamp is one ``perf_counter_ns`` read appended to a list (about 0.1 us, measured beside
a bare decode loop by ``benchmarks/generation_overhead.py``). The request's own clock
read just before it is handed to the runtime is its send time: each token's time is
its stamp minus that (``perfguard.records.tokenfigures``).

The loop itself is the timing loop of every cell (``perfguard.measure.timing.measure``):
a cold-start request, warm-up until both ``warmup.iterations`` and ``warmup.seconds``
are reached (the first request allocates the KV cache at the full length, and any lazy
initialisation runs then), gc off while timing, then timed requests until both
``measure.iterations`` (requests) and ``measure.seconds`` are reached. The cell's
per-request latency samples are the requests' end-to-end times read from their last
token, on the same clock as the token times; its throughput counts sequences
(``batch`` per request) per second, and ``tokens`` holds the token figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from perfguard.backends import generative
from perfguard.backends.base import GenerativeSession
from perfguard.core.errors import CellError, ModelError
from perfguard.core.scenario import Scenario
from perfguard.core.stats import is_stable, stability_ratio, throughput
from perfguard.measure.opencell import RunContext, ready_backend
from perfguard.measure.plant import Plant
from perfguard.measure.timing import Measurement
from perfguard.measure.watchdog import cell_limit, watch
from perfguard.models.prompts import make_prompts, make_text_prompts
from perfguard.records.figures import RuntimeInfo, summarize
from perfguard.records.results import ScenarioResult
from perfguard.records.tokenfigures import TokenFigures

__all__ = [
    "GenerativeRequests",
    "StreamingRequests",
    "check_generated",
    "generation_result",
    "open_generator",
    "token_result",
]


@contextmanager
def open_generator(
    scenario: Scenario, ctx: RunContext
) -> Iterator[tuple[GenerativeSession, list[Any], int]]:
    """The cell's generative session and its prepared prompts; always closed.

    Yields ``(session, prepared prompts, batch)``, like ``opencell.open_session``."""
    spec = scenario.generate
    assert spec is not None, scenario.item_name
    scenario, backend = ready_backend(scenario, ctx)
    maker = generative(backend)
    if maker is None:
        raise CellError(
            f"backend {scenario.backend!r} has no generation path in perfguard",
            expected="backend `torch` for a generative cell",
            fix="use `backend: torch` for this cell",
            location=scenario.location,
        )
    with cell_limit(ctx.open_timeout_s, cell=scenario.item_name, location=scenario.location):
        with watch("opening the model"):
            session = maker.open_generative(scenario, ctx.cache_dir)
        try:
            with watch("preparing the prompts"):
                prompts: Sequence[Any] = (
                    make_text_prompts(scenario)
                    if scenario.model.server is not None
                    else make_prompts(scenario, session.vocab_size)
                )
                prepared = [session.prepare(p) for p in prompts]
            yield session, prepared, spec.batch
        finally:
            session.close()


@dataclass
class GenerativeRequests:
    """The call the timing loop times: one request per call, the prompts in turn, each
    request's send time and token stamps kept (``rows``: one per call, warm-up too)."""

    session: GenerativeSession
    prepared: list[Any]
    new_tokens: int
    rows: list[tuple[int, list[int]]] = field(default_factory=list)
    last: Any = None  # the last request's tokens, as the runtime returned them
    #: Requests sent so far: request ``turn`` sends prompt ``turn % len(prepared)``. Two
    #: cells compared pair by pair set theirs equal, so a pair sends one prompt to both.
    turn: int = 0
    #: A calibration's slowdown planted in every token (``Plant.stamps``).
    plant: Plant | None = None

    def __call__(self) -> None:
        clock = time.perf_counter_ns
        stamps: list[int] = []
        append = stamps.append

        def stamp() -> None:
            append(clock())

        prompt = self.prepared[self.turn % len(self.prepared)]
        self.turn += 1
        step = stamp if self.plant is None else self.plant.stamps(stamp)
        start = clock()
        self.last = self.session.generate(prompt, self.new_tokens, step)
        self.rows.append((start, stamps))

    def token_times(self, skip: int) -> np.ndarray:
        """Token times (ns after each request's send) of the requests after the first
        ``skip`` kept in ``rows``: one row per request."""
        rows = self.rows[skip:]
        for _start, stamps in rows:
            if len(stamps) != self.new_tokens:
                raise ModelError(
                    f"the generation path stamped {len(stamps)} decoding steps in a request "
                    f"for {self.new_tokens} new tokens",
                    expected="one stamp per generated token",
                    fix="this is a bug in perfguard's generation path: please report it",
                )
        return np.asarray([[t - start for t in stamps] for start, stamps in rows], dtype=np.int64)

    def drain(self) -> np.ndarray:
        """:meth:`token_times` of every request kept since the last drain, then forgets
        them (a worker answering request after request keeps no more than one reply's)."""
        try:
            return self.token_times(0)
        finally:
            self.rows.clear()


@dataclass
class StreamingRequests:
    """One load worker's call (``perfguard.measure.loadgen``'s streaming workers): each
    call is one request, the prompts in turn from ``turn``, each token reported through
    the ``stamp`` the load generator hands in (the generator keeps the times)."""

    session: GenerativeSession
    prepared: list[Any]
    new_tokens: int
    turn: int = 0
    #: A calibration's slowdown planted in every token (``Plant.stamps``; its wait lets
    #: go of the GIL, as the other load workers' threads run beside it).
    plant: Plant | None = None

    def __call__(self, stamp: Callable[[], None]) -> None:
        prompt = self.prepared[self.turn % len(self.prepared)]
        self.turn += 1
        if self.plant is not None:
            stamp = self.plant.stamps(stamp, yielding=True)
        self.session.generate(prompt, self.new_tokens, stamp)


def generation_result(
    scenario: Scenario,
    ctx: RunContext,
    requests: GenerativeRequests,
    timed: Measurement,
    runtime: RuntimeInfo,
    *,
    canary_ns: float | None = None,
    peak_memory_mib: float | None = None,
) -> ScenarioResult:
    """The cell's result from the timing loop's ``timed`` and the requests' stamps."""
    result = token_result(scenario, ctx, requests.token_times(timed.warmup_iterations), runtime)
    return replace(
        result,
        cold_start_ns=int(timed.cold_start_ns),
        warmup_iterations=int(timed.warmup_iterations),
        warmup_ns=int(timed.warmup_ns),
        canary_ns=canary_ns,
        peak_memory_mib=peak_memory_mib,
    )


def token_result(
    scenario: Scenario, ctx: RunContext, times: np.ndarray, runtime: RuntimeInfo
) -> ScenarioResult:
    """A generative cell's result from its timed requests' token times (one row per
    request, ns after its send): its token figures, and its per-request samples,
    latency summary, throughput and stability from the requests' end-to-end times.
    Warm-up, canary and memory figures are the caller's to add."""
    spec = scenario.generate
    assert spec is not None
    tokens = TokenFigures.of(times, prompt_tokens=spec.prompt_tokens, batch=spec.batch)
    e2e = tokens.e2e()
    return replace(
        ScenarioResult.for_cell(scenario, ctx.rootdir, batch_size=spec.batch),
        latency_ns=summarize(e2e),
        throughput=throughput(e2e, spec.batch),
        stable=bool(is_stable(e2e, scenario.stability_tolerance)),
        stability_ratio=float(stability_ratio(e2e)),
        runtime=runtime,
        samples_ns=tuple(int(s) for s in e2e),
        tokens=tokens,
    )


def check_generated(scenario: Scenario, session: GenerativeSession, generated: Any) -> None:
    """The last request's tokens: ``batch x new_tokens`` ids within the vocabulary."""
    spec = scenario.generate
    assert spec is not None
    try:
        ids = session.tokens(generated)
    except Exception as exc:
        raise ModelError(
            f"reading the generated tokens of model {scenario.model.name!r} failed: {exc}",
            expected="token ids from each decoding step",
            location=scenario.location,
        ) from exc
    if ids is None:  # text, not ids: the session checked each request's count
        return
    want = (spec.batch, spec.new_tokens)
    vocab = session.vocab_size
    if ids.shape != want or ids.min() < 0 or (vocab is not None and ids.max() >= vocab):
        raise ModelError(
            f"model {scenario.model.name!r} generated token ids of shape {ids.shape} in "
            f"[{ids.min()}, {ids.max()}]",
            expected=f"shape {want}, ids in [0, {vocab})",
            fix="check that the factory returns a causal LM whose logits' last axis is the "
            "vocabulary",
            location=scenario.location,
        )
