"""Figures of one load level from its :class:`~perfguard.measure.loadgen.LoadLog`.

* **Corrected latency** (the gated one): ``end - scheduled`` per answered
  request. A request that was never answered (the run hit its cap, or the
  generator never sent it) counts with ``window end - scheduled``: a lower
  bound of its latency, so percentiles are never flattered by dropping the
  requests a stall hurt most. Failed requests are counted, not timed.
* **Uncorrected latency**: ``end - start``, the model call alone, as a harness
  that does not correct for coordinated omission reports it.
* **Queue share**: the share of all corrected latency spent before the model
  call began (generator lag + waiting in the queue or for a batch to fill).
* **Late**: requests dispatched more than ``LoadSpec.late_limit_ms()`` after
  their scheduled time, or never dispatched. More than ``late_max`` of them marks the level
  ``invalid``: the generator, not the model, fell behind.
* **Rates**: asked (the schedule), sent (requests handed over per second of the
  sending span) and achieved (requests answered per second of the window).
* **Kept up** (open loop): answered rate over asked rate (:func:`kept_up`); under 90%
  the level is overloaded and its ``shortfall`` says what it achieved: its figures are
  an overloaded level's, not the asked rate's.
* **Token times** (a generative level, whose workers stream): each answered request's
  token times from its *scheduled* send (so TTFT is corrected as the latency is), one row
  per request; **goodput** (with ``goodput:`` limits): the requests whose TTFT and TPOT
  both meet them, per second of the window.
* **Throughput**: answered, non-failed requests x the request's batch per
  second of the window. For one side of an interleaved closed loop (same-run A/B,
  ``interleaved=True``) the alternation fixes each side's share of the requests, so
  its count says nothing; its throughput is then that of the level's clients at this
  side's own mean latency (Little's law: clients x batch / mean latency), which is
  what a closed loop of that side alone gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from perfguard.core.scenario import GoodputSpec, LoadSpec
from perfguard.core.stats import percentile
from perfguard.measure.loadgen import LoadLog
from perfguard.records.figures import LatencySummary, summarize
from perfguard.records.loadfigures import (
    BatchingFigures,
    GoodputFigures,
    LateFigures,
    LoadFigures,
)

__all__ = ["LevelFigures", "kept_up", "level_figures"]

_NS = 1e9
#: An open-loop level answering under this share of the asked rate is overloaded.
SATURATED = 0.9


@dataclass(frozen=True)
class LevelFigures:
    """One measured level: the corrected samples and the ``load`` figures of the result."""

    samples_ns: npt.NDArray[np.int64] = field(compare=False)
    throughput: float
    load: LoadFigures
    #: A generative level's token times from each answered request's scheduled send
    #: (one row per request, in send order); None for other levels.
    token_ns: npt.NDArray[np.int64] | None = field(default=None, compare=False)

    @property
    def invalid(self) -> str | None:
        return self.load.invalid

    def percentile_ms(self, q: float) -> float | None:
        if self.samples_ns.size == 0:
            return None
        return float(percentile(self.samples_ns, q)) / 1e6


def _summary(values: npt.NDArray[np.int64]) -> LatencySummary | None:
    return summarize(values) if values.size else None


def level_figures(
    log: LoadLog, spec: LoadSpec, request_batch: int, *, interleaved: bool = False
) -> LevelFigures:
    """Turn a level's log into its figures (see the module docstring); ``interleaved``:
    the log is one side of an interleaved closed loop (:meth:`LoadLog.of_side`)."""
    t0, t_end = log.window_ns
    answered = log.end_ns >= 0
    ok = answered & ~log.failed
    unanswered = ~answered
    corrected = np.concatenate(
        [
            (log.end_ns - log.scheduled_ns)[ok],
            np.maximum(t_end - log.scheduled_ns[unanswered], 0),
        ]
    ).astype(np.int64)
    order = np.argsort(np.concatenate([log.scheduled_ns[ok], log.scheduled_ns[unanswered]]))
    corrected = corrected[order]  # in send order, for the stability check
    uncorrected = (log.end_ns - log.start_ns)[ok].astype(np.int64)
    waited = (log.start_ns - log.scheduled_ns)[ok]
    total = float(np.sum(corrected[: int(np.count_nonzero(ok))])) if ok.any() else 0.0
    queue_share = float(np.sum(waited) / total) if total > 0 else None

    sent = log.sent_ns >= 0
    lag = (log.sent_ns - log.scheduled_ns)[sent]
    late_ms = spec.late_limit_ms()
    late_ns = int(late_ms * 1e6)
    late = int(np.count_nonzero(lag > late_ns)) + int(np.count_nonzero(~sent))
    n = int(log.scheduled_ns.size)
    late_share = late / n if n else 0.0

    window_s = max(t_end - t0, 1) / _NS
    completed = int(np.count_nonzero(answered))
    failed = int(np.count_nonzero(answered & log.failed))
    if interleaved:
        if spec.mode != "closed" or spec.batching is not None:
            raise ValueError("only a closed loop without batching is interleaved")
        served_ns = (log.end_ns - log.scheduled_ns)[ok]
        mean_s = float(np.mean(served_ns)) / _NS if served_ns.size else 0.0
        throughput = int(spec.level) * request_batch / mean_s if mean_s > 0 else 0.0
    else:
        throughput = int(np.count_nonzero(ok)) * request_batch / window_s
    open_loop = spec.mode == "open"
    rate_sent = None
    if open_loop and sent.any():
        span = (int(log.sent_ns[sent].max()) - t0) / _NS
        rate_sent = float(np.count_nonzero(sent)) / span if span > 0 else None

    token_ns = _token_times(log, ok) if log.tokens is not None else None
    goodput = None
    if spec.goodput is not None and token_ns is not None:
        goodput = _goodput(spec.goodput, token_ns, n, window_s)
    shortfall = None
    achieved_share = kept_up(log) if open_loop else 1.0
    if achieved_share < SATURATED:
        shortfall = (
            f"achieved {completed / window_s:.3g}/s of the {spec.level:g}/s asked "
            f"({achieved_share:.0%}): the level is overloaded, requests queued up; its "
            "figures are those of an overloaded level, not of the rate asked"
        )
    invalid = None
    if open_loop and late_share > spec.late_max:
        sent_text = f"{rate_sent:.0f}/s" if rate_sent is not None else "nothing"
        invalid = (
            f"the load generator fell behind: {late} of {n} requests ({late_share:.1%}) were "
            f"sent more than {late_ms:g} ms after their scheduled time (limit "
            f"{spec.late_max:.0%}); asked {spec.level:g}/s, sent {sent_text}. This machine "
            "cannot generate that rate: lower `rate`, or raise `late_ms`/`late_max`"
        )
    load = LoadFigures(
        mode=spec.mode,
        level=spec.level_id,
        concurrency=int(spec.level) if spec.mode == "closed" else None,
        rate_asked=float(spec.level) if open_loop else None,
        rate_sent=rate_sent,
        rate_achieved=completed / window_s if open_loop else None,
        arrivals=spec.arrivals if open_loop else None,
        workers=spec.workers,
        sessions=spec.sessions,
        requests=n,
        completed=completed,
        failed=failed,
        unserved=int(np.count_nonzero(unanswered)),
        duration_s=window_s,
        throughput=throughput,
        uncorrected_ns=_summary(uncorrected),
        queue_share=queue_share,
        late=LateFigures(
            count=late,
            share=late_share,
            limit_ms=late_ms,
            max_share=spec.late_max,
            lag_p99_ms=float(percentile(lag, 99)) / 1e6 if lag.size else None,
            lag_max_ms=float(lag.max()) / 1e6 if lag.size else None,
        ),
        errors=dict(log.errors),
        batching=_batching(log, spec, ok) if spec.batching is not None else None,
        slo=None,
        invalid=invalid,
        shortfall=shortfall,
        goodput=goodput,
    )
    return LevelFigures(samples_ns=corrected, throughput=throughput, load=load, token_ns=token_ns)


def _token_times(log: LoadLog, ok: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """The answered requests' token times from their scheduled sends, in send order."""
    assert log.tokens is not None
    index = np.flatnonzero(ok)
    index = index[np.argsort(log.scheduled_ns[index], kind="stable")]
    rows = [log.tokens[i] for i in index]
    width = {len(r) for r in rows}
    if len(width) > 1 or 0 in width:
        raise ValueError(
            f"answered requests streamed {sorted(width)} tokens; expected the same number, >= 1"
        )
    if not rows:
        return np.zeros((0, 1), dtype=np.int64)
    return np.asarray(rows, dtype=np.int64) - log.scheduled_ns[index][:, None]


def _goodput(
    limits: GoodputSpec, token_ns: npt.NDArray[np.int64], requests: int, window_s: float
) -> GoodputFigures:
    """Requests meeting both limits (failed and unserved ones never do), per second."""
    good = 0
    if token_ns.size:
        ttft = token_ns[:, 0]
        steps = max(token_ns.shape[1] - 1, 1)
        tpot = (token_ns[:, -1] - token_ns[:, 0]) / steps
        good = int(
            np.count_nonzero((ttft <= limits.ttft_ms * 1e6) & (tpot <= limits.tpot_ms * 1e6))
        )
    return GoodputFigures(
        ttft_ms=limits.ttft_ms,
        tpot_ms=limits.tpot_ms,
        good=good,
        per_s=good / window_s if window_s > 0 else 0.0,
        share=good / requests if requests else 0.0,
    )


def kept_up(log: LoadLog) -> float:
    """Answered rate / scheduled rate of an open-loop level, 1.0 when it kept up.

    The window from the first scheduled time to the last answer always includes
    the last request's own latency; taking one median latency off it keeps a
    short level with long (but stable) latencies from looking overloaded, while
    a growing backlog still stretches the window far past the schedule.
    """
    answered = log.end_ns >= 0
    if not answered.any() or log.scheduled_ns.size < 2:
        return 0.0 if not answered.any() else 1.0
    first, last = int(log.scheduled_ns.min()), int(log.scheduled_ns.max())
    typical = float(np.median((log.end_ns - log.scheduled_ns)[answered]))
    window = max(float(log.end_ns[answered].max()) - first - typical, float(last - first), 1.0)
    scheduled_rate = (log.scheduled_ns.size - 1) / max(last - first, 1)
    return float(np.count_nonzero(answered) - 1) / window / scheduled_rate


def _batching(log: LoadLog, spec: LoadSpec, ok: npt.NDArray[np.bool_]) -> BatchingFigures:
    assert spec.batching is not None
    sizes = log.calls[:, 0] if log.calls.size else np.zeros(0, dtype=np.int64)
    values, counts = np.unique(sizes, return_counts=True)
    waits = (log.start_ns - log.sent_ns)[ok].astype(np.int64)
    # The service probe is filled in by perfguard.measure.loadcell after the level ran.
    return BatchingFigures(
        max_batch=spec.batching.max_batch,
        max_wait_ms=spec.batching.max_wait_ms,
        batches=int(sizes.size),
        mean_batch=float(sizes.mean()) if sizes.size else None,
        sizes={str(int(v)): int(c) for v, c in zip(values, counts, strict=True)},
        wait_ns=_summary(waits),
    )
