"""Load generation: closed loop, open loop without coordinated omission, dynamic batching.

Mechanics only: callables in, one timestamp record per request out
(:class:`LoadLog`). :mod:`perfguard.measure.loadcell` connects scenarios and sessions to
it and turns the log into figures (:func:`perfguard.measure.levelfigures.level_figures`).

Every request carries four times (``perf_counter_ns``):

* ``scheduled``: when it was meant to be sent (open loop: fixed in advance
  from the rate; closed loop: when its client sent it);
* ``sent``: when the generator actually handed it to the server;
* ``start``/``end``: the model call that served it (``end`` after the device
  synchronisation).

The corrected latency is ``end - scheduled``: a stall is charged to every
request it delays, including those that could not even be sent. The
uncorrected latency ``end - start`` is what a harness that times only the model
call reports (coordinated omission). ``sent - scheduled`` is the generator's own
lag.

Design points:

* Open loop: the calling thread is the generator. It sleeps until the next
  scheduled time (no spinning: on a machine with few cores a spinning generator takes a
  core from the model) and then hands over every request that is due, so a late
  wake-up delays requests by the overshoot only, never the whole schedule.
  Requests go into one queue served by ``W`` model workers.
* Dynamic batching: a worker takes the oldest queued request, then waits for
  more until it has ``max_batch`` or ``max_wait`` has passed since that request
  was sent (Triton's ``max_queue_delay``), and serves them in one call.
* Closed loop: N client threads call the model directly (no queue, no extra
  hop); with batching they submit to the same server as the open loop and wait
  for their answer.
* Interleaved closed loop (same-run A/B, ``alternate=``): each client holds two
  workers, one per side, and alternates between them request by request, client
  ``k`` starting on side ``(k + first) % 2``; every request records its side. Both
  sides then share one level's streams, its scheduler and its slow spells, which
  is what lets a pairwise comparison of their tails cancel them.
* The GIL switch interval is lowered to 0.5 ms while load runs so a model
  thread running Python code hands the GIL to the generator promptly; the
  garbage collector is off as in :mod:`perfguard.measure.timing`.
* A call that raises fails only its requests (counted per error message);
  workers that do not return by the cap plus a grace period are reported as
  hung instead of hanging the session (threads are daemons).
"""

from __future__ import annotations

import contextlib
import gc
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Batching",
    "LoadLog",
    "Worker",
    "closed_loop",
    "open_loop",
    "schedule",
]

Call = Callable[[], object]
_NS = 1_000_000_000
_SWITCH_INTERVAL_S = 0.0005
_LEAD_NS = 2_000_000  # the first open-loop request is scheduled 2 ms after start
_GRACE_NS = 5 * _NS  # how long past the cap a worker may take to return


@dataclass(frozen=True)
class Worker:
    """One model instance: ``calls[k]`` serves a batch of ``k`` requests.

    A *streaming* worker (a generative cell's) serves one request at a time and its
    ``calls[1]`` takes one argument, ``stamp``: a function to call with no argument
    each time a token is ready; the request keeps a ``perf_counter_ns`` reading per
    call (``LoadLog.tokens``)."""

    calls: Mapping[int, Callable[..., object]]
    synchronize: Callable[[], None] | None = None
    streaming: bool = False


@dataclass(frozen=True)
class Batching:
    """Group queued requests into calls of up to ``max_batch``, waiting up to ``max_wait_ns``."""

    max_batch: int = 1
    max_wait_ns: int = 0


@dataclass(frozen=True)
class LoadLog:
    """Per-request times (ns, ``perf_counter_ns``); ``-1`` where a request was not served.

    ``window_ns`` is (start of the measured window, its end: the last answer or the
    cap). ``calls`` holds one ``(batch size, start, end)`` row per model call.
    ``hung`` counts workers or clients still inside a call after the grace period.
    ``side`` is each request's side in an interleaved level (0 or 1; all 0 otherwise,
    and None in logs built without it). ``tokens`` (streaming workers only, else None)
    holds each request's token times, ns (``perf_counter_ns``), empty where it was not
    served.
    """

    scheduled_ns: npt.NDArray[np.int64] = field(compare=False)
    sent_ns: npt.NDArray[np.int64] = field(compare=False)
    start_ns: npt.NDArray[np.int64] = field(compare=False)
    end_ns: npt.NDArray[np.int64] = field(compare=False)
    batch: npt.NDArray[np.int32] = field(compare=False)
    failed: npt.NDArray[np.bool_] = field(compare=False)
    calls: npt.NDArray[np.int64] = field(compare=False)
    errors: dict[str, int]
    window_ns: tuple[int, int]
    hung: int = 0
    side: npt.NDArray[np.int8] | None = field(default=None, compare=False)
    tokens: tuple[tuple[int, ...], ...] | None = field(default=None, compare=False)

    @property
    def served(self) -> npt.NDArray[np.bool_]:
        return np.asarray(self.end_ns >= 0)

    def of_side(self, side: int) -> LoadLog:
        """The requests of one side of an interleaved closed loop, with the level's
        window; its calls are those requests' own (one per answered request, as in any
        closed loop without batching). Errors and hung clients belong to the level and
        are kept whole (a failed request fails the comparison, whichever side it hit)."""
        if self.side is None:
            raise ValueError("this log has no sides: it was not an interleaved level")
        keep = self.side == side
        served = keep & (self.end_ns >= 0)
        calls = np.stack(
            [self.batch[served].astype(np.int64), self.start_ns[served], self.end_ns[served]],
            axis=1,
        )
        return LoadLog(
            scheduled_ns=self.scheduled_ns[keep],
            sent_ns=self.sent_ns[keep],
            start_ns=self.start_ns[keep],
            end_ns=self.end_ns[keep],
            batch=self.batch[keep],
            failed=self.failed[keep],
            calls=calls.reshape(-1, 3),
            errors=dict(self.errors),
            window_ns=self.window_ns,
            hung=self.hung,
            side=self.side[keep],
            tokens=(
                tuple(t for t, k in zip(self.tokens, keep, strict=True) if k)
                if self.tokens is not None
                else None
            ),
        )

    @property
    def unserved(self) -> int:
        return int(np.count_nonzero(self.end_ns < 0))


class _Request:
    __slots__ = ("batch", "done", "end", "failed", "scheduled", "sent", "side", "start", "tokens")

    def __init__(self, scheduled: int, side: int = 0) -> None:
        self.scheduled = scheduled
        self.side = side
        self.sent = -1
        self.start = -1
        self.end = -1
        self.batch = 0
        self.failed = False
        self.done: threading.Event | None = None
        self.tokens: list[int] = []

    def stamp(self) -> None:
        """One token of this request is ready (a streaming worker's call calls it)."""
        self.tokens.append(time.perf_counter_ns())


class _Errors:
    """Failed calls counted by the first line of their error (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def add(self, exc: BaseException, requests: int) -> None:
        text = str(exc).strip().splitlines()
        key = f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + requests


def schedule(rate: float, count: int, arrivals: str, seed: int = 0) -> npt.NDArray[np.int64]:
    """Send offsets (ns from the start) of ``count`` requests at ``rate`` per second.

    ``constant``: evenly spaced, ``1/rate`` apart, the first at 0. ``poisson``:
    a Poisson process of that rate *conditioned on* ``count`` arrivals in
    ``count / rate`` seconds, i.e. sorted uniform times on that span (seeded).
    Its gaps are exponential as in any Poisson process, but the schedule offers
    exactly the asked rate, so the achieved rate of a short level is not off by
    the ~1/sqrt(count) luck of an unconditioned draw.
    """
    if rate <= 0 or count < 0:
        raise ValueError(f"schedule needs rate > 0 and count >= 0, got {rate}, {count}")
    span = count / rate
    if arrivals == "constant":
        offsets = np.arange(count, dtype=np.float64) / rate
    elif arrivals == "poisson":
        offsets = np.sort(np.random.default_rng(seed).uniform(0.0, span, size=count))
    else:
        raise ValueError(f"arrivals must be 'poisson' or 'constant', got {arrivals!r}")
    return np.round(offsets * _NS).astype(np.int64)


@contextlib.contextmanager
def _load_conditions(gc_generation: int = 2) -> Iterator[None]:
    """GC off (after one collection of generations up to ``gc_generation``: 2, the
    default, is a full one) and a short GIL switch interval; both restored."""
    interval = sys.getswitchinterval()
    gc_was_enabled = gc.isenabled()
    gc.collect(gc_generation)
    gc.disable()
    sys.setswitchinterval(_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        if gc_was_enabled:
            gc.enable()


class _Server:
    """W workers serving one queue, with optional dynamic batching.

    The queue is a ``queue.SimpleQueue`` (C code: ``put`` costs the generator a
    fraction of a microsecond, where a ``threading.Condition`` costs several).
    ``close`` puts one end marker per worker behind the requests; ``abort``
    makes workers stop after their current call.
    """

    def __init__(self, workers: Sequence[Worker], batching: Batching, errors: _Errors) -> None:
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._aborted = False
        self._batching = batching
        self._errors = errors
        self.calls: list[tuple[int, int, int]] = []
        self.submit = self._queue.put
        self._threads = [
            threading.Thread(target=self._serve, args=(w,), name=f"perfguard-worker-{i}")
            for i, w in enumerate(workers)
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    def close(self) -> None:
        """No more requests: workers drain the queue and exit."""
        for _ in self._threads:
            self._queue.put(None)

    def abort(self) -> None:
        """Stop now: workers exit after their current call; queued requests stay unserved."""
        self._aborted = True

    def join(self, deadline_ns: int) -> int:
        """Wait for the workers until ``deadline_ns``; returns how many are still busy."""
        for thread in self._threads:
            thread.join(max(0.0, (deadline_ns - time.perf_counter_ns()) / _NS))
        return sum(thread.is_alive() for thread in self._threads)

    def _take(self) -> tuple[list[_Request], bool]:
        """The next batch (possibly empty) and whether the end marker was seen."""
        clock = time.perf_counter_ns
        get = self._queue.get
        max_batch, max_wait = self._batching.max_batch, self._batching.max_wait_ns
        first = get()
        if first is None or self._aborted:
            return [], True
        batch = [first]
        deadline = first.sent + max_wait
        while len(batch) < max_batch:
            remaining = deadline - clock()
            try:
                nxt = get(timeout=remaining / _NS) if remaining > 0 else get(block=False)
            except queue.Empty:
                break
            if nxt is None:
                return batch, True
            batch.append(nxt)
        return batch, False

    def _serve(self, worker: Worker) -> None:
        clock = time.perf_counter_ns
        calls, sync = worker.calls, worker.synchronize
        done = False
        while not done and not self._aborted:
            batch, done = self._take()
            if not batch or self._aborted:
                continue
            size = len(batch)
            failed = False
            start = clock()
            try:
                if worker.streaming:
                    calls[1](batch[0].stamp)  # one request per call: no batching
                else:
                    calls[size]()
                if sync is not None:
                    sync()
            except Exception as exc:  # the model's error fails these requests only
                failed = True
                self._errors.add(exc, size)
            end = clock()
            self.calls.append((size, start, end))
            for request in batch:
                request.start, request.end, request.batch = start, end, size
                request.failed = failed
                if request.done is not None:
                    request.done.set()


def _log(
    requests: Sequence[_Request],
    calls: Sequence[tuple[int, int, int]],
    errors: _Errors,
    window: tuple[int, int],
    hung: int,
    streaming: bool = False,
) -> LoadLog:
    def column(name: str, dtype: type) -> Any:
        return np.fromiter((getattr(r, name) for r in requests), dtype=dtype, count=len(requests))

    return LoadLog(
        scheduled_ns=column("scheduled", np.int64),
        sent_ns=column("sent", np.int64),
        start_ns=column("start", np.int64),
        end_ns=column("end", np.int64),
        batch=column("batch", np.int32),
        failed=column("failed", np.bool_),
        calls=np.asarray(calls, dtype=np.int64).reshape(-1, 3),
        errors=dict(errors.counts),
        window_ns=window,
        hung=hung,
        side=column("side", np.int8),
        tokens=tuple(tuple(r.tokens) if r.end >= 0 else () for r in requests)
        if streaming
        else None,
    )


def open_loop(
    offsets_ns: npt.ArrayLike,
    workers: Sequence[Worker],
    batching: Batching = Batching(),
    *,
    max_seconds: float = 300.0,
    gc_generation: int = 2,
) -> LoadLog:
    """Send requests at ``offsets_ns`` from now (see :func:`schedule`) whatever happens.

    The generator stops sending at ``max_seconds``; requests not answered by
    then (plus the grace period for calls in flight) stay unserved (``-1``).
    ``gc_generation``: how far the collection before the level goes (a full one,
    2, takes ~0.2 s with torch loaded; same-run A/B's short rounds take 1).
    """
    offsets = np.asarray(offsets_ns, dtype=np.int64)
    streaming = _streaming(workers, batching)
    clock = time.perf_counter_ns
    sleep = time.sleep
    errors = _Errors()
    with _load_conditions(gc_generation):
        server = _Server(workers, batching, errors)
        # Built before the clock starts: making 100k objects takes tens of ms.
        requests = [_Request(int(o)) for o in offsets]
        submit = server.submit
        t0 = clock() + _LEAD_NS
        cap = t0 + int(max_seconds * _NS)
        sent = 0
        for request in requests:
            target = request.scheduled = t0 + request.scheduled
            now = clock()
            if target > now:
                sleep((target - now) / _NS)
                now = clock()
            if now >= cap:
                break
            request.sent = now
            submit(request)
            sent += 1
        for request in requests[sent + 1 :]:  # never sent: the cap came first
            request.scheduled += t0
        server.close()
        busy = server.join(cap)
        if busy:
            server.abort()
            busy = server.join(max(cap, clock()) + _GRACE_NS)
        served = [r.end for r in requests if r.end >= 0]
        window = (t0, max(served) if served and not busy else max(cap, clock()))
    return _log(requests, server.calls, errors, window, busy, streaming)


def _streaming(workers: Sequence[Worker], batching: Batching | None) -> bool:
    """Whether ``workers`` stream tokens: all of them or none, and never batched."""
    kinds = {w.streaming for w in workers}
    if len(kinds) > 1:
        raise ValueError("the workers of one level must all stream tokens, or none")
    streaming = kinds == {True}
    if streaming and batching is not None and batching.max_batch > 1:
        raise ValueError("streaming workers serve one request per call: no batching")
    return streaming


def closed_loop(
    workers: Sequence[Worker],
    *,
    iterations: int,
    seconds: float,
    max_seconds: float = 300.0,
    batching: Batching | None = None,
    server_workers: Sequence[Worker] = (),
    gc_generation: int = 2,
    alternate: Sequence[Worker] = (),
    first: int = 0,
) -> LoadLog:
    """N clients (one per entry of ``workers``), each sending when its last answer came.

    Runs until at least ``iterations`` requests in all and ``seconds`` have
    passed, capped at ``max_seconds``. With ``batching``, the clients submit to a
    server of ``server_workers`` instead of calling their own worker (whose
    ``calls`` are then unused; pass ``Worker({})``). ``gc_generation``: as for
    :func:`open_loop`.

    ``alternate`` (one worker per client, the other side's): an interleaved level.
    Client ``k`` alternates between ``workers[k]`` (side 0) and ``alternate[k]``
    (side 1), request by request, starting on side ``(k + first) % 2``; the log's
    ``side`` says which side served each request. Not with ``batching``.
    """
    if not workers:
        raise ValueError("closed_loop needs at least one client")
    if alternate and (len(alternate) != len(workers) or batching is not None):
        raise ValueError(
            f"an interleaved closed loop needs one alternate worker per client "
            f"({len(workers)}; got {len(alternate)}) and no batching"
        )
    streaming = _streaming([*workers, *alternate], batching)
    clock = time.perf_counter_ns
    errors = _Errors()
    stop = threading.Event()
    start_barrier = threading.Barrier(len(workers) + 1)
    per_client: list[list[_Request]] = [[] for _ in workers]
    with _load_conditions(gc_generation):
        server = _Server(server_workers, batching, errors) if batching is not None else None
        t0 = 0
        cap = 0

        def client(index: int) -> None:
            records = per_client[index]
            append = records.append
            sides = (workers[index], alternate[index]) if alternate else (workers[index],)
            # (call, synchronize) of each side; without ``alternate`` side 0 only.
            served_by = [(w.calls.get(1), w.synchronize) for w in sides]
            side = (index + first) % len(sides)
            flip = len(sides) - 1  # 1: alternate sides, 0: stay on side 0
            is_set = stop.is_set
            start_barrier.wait()
            while not is_set():
                call, sync = served_by[side]
                request = _Request(clock(), side)
                request.sent = request.scheduled
                if server is not None:
                    request.done = threading.Event()
                    server.submit(request)
                    request.done.wait()
                else:
                    request.start = request.scheduled
                    request.batch = 1
                    try:
                        if streaming:
                            call(request.stamp)  # type: ignore[misc]
                        else:
                            call()  # type: ignore[misc]
                        if sync is not None:
                            sync()
                    except Exception as exc:
                        request.failed = True
                        errors.add(exc, 1)
                    request.end = clock()
                append(request)
                side ^= flip  # after the answer: nothing added between the two clocks
                if request.end >= cap:
                    break

        threads = [
            threading.Thread(target=client, args=(i,), name=f"perfguard-client-{i}", daemon=True)
            for i in range(len(workers))
        ]
        for thread in threads:
            thread.start()
        t0 = clock()
        cap = t0 + int(max_seconds * _NS)
        min_end = t0 + int(seconds * _NS)
        start_barrier.wait()
        while True:
            now = clock()
            if now >= cap:
                break
            if now >= min_end and sum(map(len, per_client)) >= iterations:
                break
            wait = (min_end - now) if now < min_end else 2_000_000
            time.sleep(min(wait, cap - now) / _NS)
        stop.set()
        hung = 0
        for thread in threads:
            thread.join(max(0.0, (cap + _GRACE_NS - clock()) / _NS))
            hung += thread.is_alive()
        if server is not None:
            server.close()
            hung += server.join(clock() + _GRACE_NS)
        requests = sorted((r for rs in per_client for r in rs), key=lambda r: r.scheduled)
        served = [r.end for r in requests if r.end >= 0]
        window = (t0, max(served) if served and not hung else clock())
    calls = (
        server.calls
        if server is not None
        else [(1, r.start, r.end) for r in requests if r.end >= 0]
    )
    return _log(requests, calls, errors, window, hung, streaming)
