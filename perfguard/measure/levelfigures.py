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

from perfguard.core.scenario import LoadSpec
from perfguard.core.stats import percentile
from perfguard.measure.loadgen import LoadLog
from perfguard.records.figures import LatencySummary, summarize
from perfguard.records.loadfigures import BatchingFigures, LateFigures, LoadFigures

__all__ = ["LevelFigures", "level_figures"]

_NS = 1e9


@dataclass(frozen=True)
class LevelFigures:
    """One measured level: the corrected samples and the ``load`` figures of the result."""

    samples_ns: npt.NDArray[np.int64] = field(compare=False)
    throughput: float
    load: LoadFigures

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
    )
    return LevelFigures(samples_ns=corrected, throughput=throughput, load=load)


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
