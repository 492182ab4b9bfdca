"""The token-level figures of a generative cell (``ScenarioResult.tokens``).

A generative request sends ``batch`` prompts of ``prompt_tokens`` tokens and receives
``new_tokens`` tokens per prompt, one decoding step at a time; every step of a request
gets a timestamp, in ns after the request was sent (``token_ns``, request-major: the raw
samples, kept). Everything else is read from them:

* **TTFT** (time to first token): the first step's timestamp. It covers the prefill,
  the pass over the whole prompt. Under load every time runs from the request's
  *scheduled* send (queueing included, coordinated omission corrected).
* **ITL** (inter-token latency): each gap between two consecutive steps of a request,
  ``new_tokens - 1`` per request. Gaps of one request are not independent (a slow request
  tends to be slow throughout), so their bounds resample whole requests
  (``perfguard.core.stats.clustered_percentile_ratio_bound``).
* **TPOT** (time per output token): ``(end to end - TTFT) / (new_tokens - 1)``, one per
  request: the mean decode step of that request.
* **End to end**: the last step's timestamp; the cell's per-request latency samples
  (``ScenarioResult.samples_ns``) are these.
* **Output tokens/s**: ``batch * new_tokens`` tokens per request over the requests' summed
  end-to-end time (requests run one at a time); under load, the level's answered requests'
  tokens over its window (requests overlap).
* **Prefill share**: the requests' summed TTFT over their summed end to end: how much of
  the time went to the prompt, the rest to decoding.

Percentiles are nearest rank, as every latency figure of perfguard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from perfguard.records.declare import Record, spec
from perfguard.records.figures import LatencySummary, summarize

__all__ = ["TokenFigures", "pooled_tokens"]

_POSITIVE = spec(minimum=1)
_NON_NEGATIVE = spec(minimum=0)


@dataclass(frozen=True)
class TokenFigures(Record):
    """Per-token timing of a generative cell's timed requests (module docstring)."""

    SCHEMA_NAME: ClassVar[str] = "tokens"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "Token-level timing of a generative cell (perfguard.records.tokenfigures): each "
        "request's token arrival times and the TTFT, ITL and TPOT summaries read from them."
    )

    prompt_tokens: int = field(metadata=_POSITIVE)
    new_tokens: int = field(metadata=_POSITIVE)
    batch: int = field(metadata=_POSITIVE)
    requests: int = field(metadata=_POSITIVE)
    token_ns: tuple[int, ...] = field(
        metadata=spec(
            minimum=0,
            description="each request's token arrival times in ns after it was sent, "
            "request-major: request i's token j at i * new_tokens + j",
        )
    )
    ttft_ns: LatencySummary
    itl_ns: LatencySummary | None = field(
        metadata=spec(description="null when a request generates one token")
    )
    tpot_ns: LatencySummary | None = field(
        metadata=spec(description="null when a request generates one token")
    )
    tokens_per_s: float = field(metadata=_NON_NEGATIVE)
    prefill_share: float = field(metadata=spec(minimum=0, maximum=1))

    def __post_init__(self) -> None:
        if len(self.token_ns) != self.requests * self.new_tokens:
            raise ValueError(
                f"token_ns holds {len(self.token_ns)} times, not requests x new_tokens = "
                f"{self.requests} x {self.new_tokens}"
            )
        times = self.times()
        if times.size and np.any(np.diff(times, axis=1) < 0):
            raise ValueError("token_ns goes backwards within a request")

    # ------------------------------------------------------------------ raw samples

    def times(self) -> npt.NDArray[np.int64]:
        """Token arrival times, ns: one row per request, one column per token."""
        return np.asarray(self.token_ns, dtype=np.int64).reshape(self.requests, self.new_tokens)

    def ttft(self) -> npt.NDArray[np.int64]:
        """Each request's time to first token, ns."""
        return self.times()[:, 0]

    def e2e(self) -> npt.NDArray[np.int64]:
        """Each request's end-to-end time, ns."""
        return self.times()[:, -1]

    def itl(self) -> npt.NDArray[np.int64]:
        """Each request's gaps between consecutive tokens, ns (requests x new_tokens - 1)."""
        return np.diff(self.times(), axis=1)

    def tpot(self) -> npt.NDArray[np.float64]:
        """Each request's time per output token after the first, ns (empty for one token)."""
        if self.new_tokens < 2:
            return np.empty(0, dtype=np.float64)
        times = self.times()
        return (times[:, -1] - times[:, 0]) / float(self.new_tokens - 1)

    def samples(self, which: str) -> npt.NDArray[np.float64]:
        """One of ``core.policy.SAMPLE_SETS`` but ``request``: ``ttft`` and ``tpot`` one
        value per request, ``itl`` one row of gaps per request (2-D)."""
        if which == "ttft":
            return self.ttft().astype(np.float64)
        if which == "tpot":
            return self.tpot()
        if which == "itl":
            return self.itl().astype(np.float64)
        raise ValueError(f"no token samples named {which!r}; expected ttft, itl or tpot")

    # ------------------------------------------------------------------ making one

    @classmethod
    def of(cls, times_ns: npt.ArrayLike, *, prompt_tokens: int, batch: int) -> TokenFigures:
        """The figures of requests whose token times (ns after each was sent, one row per
        request) are ``times_ns``."""
        times = np.asarray(times_ns, dtype=np.int64)
        if times.ndim != 2 or times.shape[0] < 1 or times.shape[1] < 1:
            raise ValueError(
                f"token times of shape {times.shape}; expected requests x new_tokens, both >= 1"
            )
        requests, new_tokens = times.shape
        e2e = times[:, -1].astype(np.float64)
        total = float(e2e.sum())
        many = new_tokens > 1
        return cls(
            prompt_tokens=int(prompt_tokens),
            new_tokens=int(new_tokens),
            batch=int(batch),
            requests=int(requests),
            token_ns=tuple(int(t) for t in times.ravel()),
            ttft_ns=summarize(times[:, 0]),
            itl_ns=summarize(np.diff(times, axis=1).ravel()) if many else None,
            tpot_ns=summarize((times[:, -1] - times[:, 0]) / (new_tokens - 1)) if many else None,
            tokens_per_s=batch * new_tokens * requests / (total / 1e9) if total > 0 else 0.0,
            prefill_share=float(times[:, 0].sum() / total) if total > 0 else 0.0,
        )


def pooled_tokens(figures: Sequence[TokenFigures]) -> TokenFigures | None:
    """The token figures of several launches of one cell as one (a baseline pools its
    launches): every request of those with the newest's shape (prompt, new tokens,
    batch), oldest first; None for none."""
    if not figures:
        return None
    newest = figures[-1]
    same = [
        f
        for f in figures
        if (f.prompt_tokens, f.new_tokens, f.batch)
        == (newest.prompt_tokens, newest.new_tokens, newest.batch)
    ]
    if len(same) == 1:
        return newest
    times = np.concatenate([f.times() for f in same], axis=0)
    return TokenFigures.of(times, prompt_tokens=newest.prompt_tokens, batch=newest.batch)
