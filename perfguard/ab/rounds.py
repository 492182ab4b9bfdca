"""Same-run A/B of a cell under ``load:``: rounds of load levels, A's and B's figures paired.

A load level's figure (the corrected P95: latency from each request's *scheduled*
send time, see :mod:`perfguard.measure.levelfigures`) belongs to the whole level, not
to one request, so request pairs cannot carry it. Instead each **round** gives one
figure per side, in one of two ways (the caller's ``play``):

* **interleaved** (a closed loop without batching, both sides in one process:
  :func:`perfguard.measure.loadcell.interleavable`): ONE level of twice the length whose
  clients alternate between A's and B's model request by request, so that both sides'
  requests share the level's streams, scheduler and slow spells; each side's figure
  comes from its own requests.
* **alternating** (:func:`alternating`: open loops, batching, a side per process):
  one short level of the base (A) and one of the working tree (B), back to back on the
  same worker(s). Both get the same arrival schedule (the same seed); a slow spell of
  the machine that lasts a round hits both of its levels and cancels in its ratio, a
  shorter one does not.

Either way the order is drawn per round (:func:`perfguard.ab.paired.pair_orders`:
seeded, every two rounds one A-first and one B-first): which level runs first, or
which side the first client starts on.

The rounds are judged by the sequential rule of request pairs (the looks, bounds and
stops of :func:`perfguard.ab.paired.decide`), on one of two figures (``RoundPlan.interleaved``):

* interleaved rounds: **the percentile pooled over every request of the usable
  rounds** (:func:`perfguard.ab.paired.decide_pooled`), its 99% bounds from a bootstrap
  that draws whole rounds, both sides of each together (a level's requests share its
  slow spells). Every request counts, where one figure per round from some 80 requests
  a side is noisy in a busy machine's tail;
* alternating rounds: **the median of each round's own percentile** (``decide`` with
  ``q=50`` on one figure per round and side). Pooled, a stall that hit one side's level
  and not the other's would follow that side into the pooled tail and raise false
  alarms (``tests/ab/test_ab_pooled.py``); a median of rounds shrugs it off.

Interleaving is what lets the pooled figure be trusted: a stall now hits both sides'
requests alike. On a shared 2-core VM, recorded rounds replayed through both rules
(``benchmarks/ab_load_rules-results.md``) gave both 0 false alarms and 19 of 20 +10%
slowdowns caught on interleaved rounds, and the pooled rule stopped unchanged cells
beside a busy neighbour in 12-14 rounds against the median rule's 20-26. Looks come
every ``check_every`` rounds from ``min_rounds``, until the rule stops or a cap
(``max_rounds``, ``max_seconds``) is reached. Too few usable rounds for a bound is
``undecided`` (the cell's verdict is then ``invalid``, with the reason).

Throughput is judged too when the cell gates ``throughput``: on the requests per
second each round's level achieved (as time per request, so that "higher is worse"
holds for the rule). In an open-loop level that keeps up it equals the asked rate on
both sides; it moves only when one side saturates.

A generative cell's rounds are always whole levels (alternating) and carry each
request's token times (from its scheduled send); every relative gate on a token figure
(:class:`TokenRoundRule`: ``ttft_p95``, ``itl_p95``, ``tpot_p50``, ``tokens_per_s``,
``goodput``...) is judged like the latency: on one figure per round and side (the
level's own percentile, or its output tokens/s and goodput per second, compared as
time per token and per good request so that "higher is worse" holds), the median
round's by the paired rule. The rounds go on until every figure's rule stops. A round
where a side's figure cannot be computed (no good request: goodput 0) leaves that
figure's rule out of the round.

A round in which either side's level is *invalid* (the load generator fell behind
its schedule, or nothing was answered) is dropped from the figures and counted; the
rounds cap counts it. A level with failed requests stops the comparison (the
caller's ``level`` function raises).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from perfguard.ab.paired import StoppingRule, decide, decide_pooled, pair_orders, progress_text
from perfguard.core import progress
from perfguard.core.progress import Throttle
from perfguard.core.stats import percentile
from perfguard.judge.verdict import ABRound, Decision

__all__ = [
    "LOAD_CHECK_EVERY",
    "LOAD_MAX_ROUNDS",
    "LOAD_MAX_SECONDS",
    "LOAD_MIN_ROUNDS",
    "LevelSample",
    "LoadRound",
    "RoundPlan",
    "TokenRoundRule",
    "ab_rounds",
    "alternating",
    "judge_rounds",
    "compared",
    "order_text",
    "pooled",
    "run_rounds",
    "token_values",
]

#: Early stops need at least this many usable rounds; 7 is the fewest for any 99% bound.
LOAD_MIN_ROUNDS = 10
#: Rounds (usable or dropped) after which the final rule decides.
LOAD_MAX_ROUNDS = 40
LOAD_CHECK_EVERY = 2
LOAD_MAX_SECONDS = 120.0


@dataclass(frozen=True)
class LevelSample:
    """One side's short load level: corrected latencies (ns), throughput, its figures
    (``LoadFigures.to_dict()``)."""

    samples_ns: npt.NDArray[np.int64] = field(compare=False)
    throughput: float
    load: Mapping[str, Any] = field(default_factory=dict, compare=False)
    #: A generative level's token times: one row per answered request, ns after its
    #: scheduled send (None for other levels).
    token_ns: npt.NDArray[np.int64] | None = field(default=None, compare=False)

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any]) -> LevelSample:
        """From a worker's ``load_level`` reply."""
        tokens = reply.get("token_ns")
        return cls(
            samples_ns=np.asarray(reply.get("samples_ns") or [], dtype=np.int64),
            throughput=float(reply.get("throughput") or 0.0),
            load=dict(reply.get("load") or {}),
            token_ns=np.asarray(tokens, dtype=np.int64) if tokens is not None else None,
        )

    def token_figure(self, samples: str, q: float) -> float | None:
        """The level's figure for a token rule (:class:`TokenRoundRule`): the ``q``-th
        percentile of its requests' ``request`` (end to end), ``ttft``, ``tpot`` or of
        its pooled ``itl`` gaps, in ns; for ``tokens`` its time per output token (1 /
        output tokens/s) and for ``goodput`` its time per good request (1 / good
        requests/s; a level without a good request counts half of one), in s. None when
        the level has none of it."""
        if samples == "goodput":
            good = self.load.get("goodput")
            count = good.get("good") if isinstance(good, Mapping) else None
            window = self.load.get("duration_s")
            if count is None or not window:
                return None
            # No good request: half of one over the window (a count's continuity
            # correction), so a level that lost all its goodput still compares, as worse
            # than any level with one good request.
            return float(window) / max(float(count), 0.5)
        times = self.token_ns
        if times is None or times.ndim != 2 or times.shape[0] == 0:
            return None
        new_tokens = times.shape[1]
        if samples == "tokens":
            rate = self.throughput * new_tokens
            return 1.0 / rate if rate > 0 else None
        values: npt.NDArray[np.float64]
        if samples == "request":
            values = times[:, -1].astype(np.float64)
        elif samples == "ttft":
            values = times[:, 0].astype(np.float64)
        elif samples == "tpot":
            if new_tokens < 2:
                return None
            values = (times[:, -1] - times[:, 0]) / float(new_tokens - 1)
        elif samples == "itl":
            values = np.diff(times, axis=1).ravel().astype(np.float64)
        else:
            raise ValueError(f"no level figure named {samples!r}")
        return float(percentile(values, q)) if values.size else None

    def figure(self, q: float) -> float:
        """The level's corrected q-th percentile, ns (nearest rank)."""
        return float(percentile(self.samples_ns, q))

    @property
    def invalid(self) -> str | None:
        """Why this level cannot count, None when it can."""
        if self.samples_ns.size == 0:
            return "no request was answered"
        if self.throughput <= 0.0:
            return "no request succeeded"
        why = self.load.get("invalid")
        return str(why) if why else None

    @property
    def failed(self) -> int:
        return int(self.load.get("failed") or 0)


@dataclass(frozen=True)
class LoadRound:
    """Round ``index``: A's and B's level, ``a_first`` when A ran first (an interleaved
    level: when A's requests started client 0)."""

    index: int
    a_first: bool
    a: LevelSample
    b: LevelSample

    @property
    def dropped(self) -> str | None:
        """Why the round does not count (either side invalid), None when it counts."""
        for side, level in (("A", self.a), ("B", self.b)):
            if level.invalid is not None:
                return f"{side}: {level.invalid}"
        return None


@dataclass(frozen=True)
class TokenRoundRule:
    """A generative load cell's gated token figure in A/B rounds: the gate's ``metric``,
    the level figure it reads (``samples``, ``q``: :meth:`LevelSample.token_figure`),
    and the rule judging the median round's (``rule.limit`` is the gate's); ``rate``
    for a figure stated as a rate (tokens/s, goodput), compared as its inverse."""

    metric: str
    samples: str
    q: float
    rule: StoppingRule
    rate: bool = False


@dataclass(frozen=True)
class RoundPlan:
    """What a load cell's A/B asks: the latency percentile ``q`` compared per round,
    the rule for it, the throughput rule (None: throughput not gated), and each
    round's level length (``seconds``; a closed loop also runs ``iterations``
    requests at least)."""

    q: float
    latency: StoppingRule
    throughput: StoppingRule | None
    seconds: float
    iterations: int
    interleaved: bool = False
    tokens: tuple[TokenRoundRule, ...] = ()

    @property
    def max_rounds(self) -> int:
        return self.latency.max_pairs

    @classmethod
    def make(
        cls,
        *,
        q: float,
        limit: float,
        throughput_limit: float | None,
        seconds: float,
        iterations: int,
        seed: int = 0,
        min_rounds: int = LOAD_MIN_ROUNDS,
        max_rounds: int = LOAD_MAX_ROUNDS,
        check_every: int = LOAD_CHECK_EVERY,
        max_seconds: float = LOAD_MAX_SECONDS,
        interleaved: bool = False,
        tokens: tuple[tuple[str, str, float, float, str, bool], ...] = (),
    ) -> RoundPlan:
        """``tokens``: ``(metric, samples, q, limit, label, rate)`` of each gated token
        figure of a generative cell (:class:`TokenRoundRule`)."""

        def rule(lim: float, label: str, percentile: float = 50.0) -> StoppingRule:
            return StoppingRule(
                limit=lim,
                q=percentile,
                min_pairs=min_rounds,
                max_pairs=max_rounds,
                check_every=check_every,
                max_seconds=max_seconds,
                seed=seed,
                unit="rounds",
                label=label,
            )

        return cls(
            q=q,
            latency=(
                rule(limit, f"P{q:g} pooled over rounds", q)
                if interleaved
                else rule(limit, f"median round P{q:g}")
            ),
            throughput=(
                rule(throughput_limit, "median round time per request (1/throughput)")
                if throughput_limit is not None
                else None
            ),
            seconds=seconds,
            iterations=iterations,
            interleaved=interleaved,
            tokens=tuple(
                TokenRoundRule(metric, samples, fq, rule(lim, f"median round {label}"), rate)
                for metric, samples, fq, lim, label, rate in tokens
            ),
        )


def token_values(
    rule: TokenRoundRule, rounds: list[LoadRound]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """A token rule's figure per usable round where both sides have it: (A's, B's)."""
    a: list[float] = []
    b: list[float] = []
    for r in rounds:
        if r.dropped is not None:
            continue
        fa = r.a.token_figure(rule.samples, rule.q)
        fb = r.b.token_figure(rule.samples, rule.q)
        if fa is not None and fb is not None and fa > 0 and fb > 0:
            a.append(fa)
            b.append(fb)
    return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)


def _figures(
    plan: RoundPlan, rounds: list[LoadRound]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], list[float], list[float]]:
    used = [r for r in rounds if r.dropped is None]
    a = np.asarray([r.a.figure(plan.q) for r in used], dtype=np.float64)
    b = np.asarray([r.b.figure(plan.q) for r in used], dtype=np.float64)
    return a, b, [r.a.throughput for r in used], [r.b.throughput for r in used]


def judge_rounds(
    plan: RoundPlan, rounds: list[LoadRound], elapsed_s: float, cap: str | None = None
) -> dict[str, Decision]:
    """The rule's decision on the usable rounds so far: ``{"latency": ..., ["throughput":
    ...]}``. Throughput is compared as time per request (1/throughput): its ratio is
    A's throughput over B's, above 1 when B serves fewer requests per second."""
    a, b, ta, tb = _figures(plan, rounds)
    if plan.interleaved:  # one level both sides share: its requests pooled
        used = [r for r in rounds if r.dropped is None]
        latency = decide_pooled(
            plan.latency,
            [r.a.samples_ns for r in used],
            [r.b.samples_ns for r in used],
            elapsed_s,
            cap=cap,
        )
    else:
        latency = decide(plan.latency, a, b, elapsed_s, cap=cap)
    out = {"latency": latency}
    if plan.throughput is not None:
        inv_a = 1.0 / np.asarray(ta, dtype=np.float64)
        inv_b = 1.0 / np.asarray(tb, dtype=np.float64)
        out["throughput"] = decide(plan.throughput, inv_a, inv_b, elapsed_s, cap=cap)
    for token in plan.tokens:
        ta_, tb_ = token_values(token, rounds)
        capped = cap
        if capped is None and len(rounds) >= plan.max_rounds and ta_.size < plan.max_rounds:
            # Rounds without this figure on a side (no good request) count to the cap.
            capped = f"reached max_rounds={plan.max_rounds}, {ta_.size} with this figure"
        out[token.metric] = decide(token.rule, ta_, tb_, elapsed_s, cap=capped)
    return out


#: One round: ``play(index, a_first)`` -> (A's level, B's level).
Play = Callable[[int, bool], tuple[LevelSample, LevelSample]]


def alternating(level: Callable[[str, int], LevelSample]) -> Play:
    """Rounds of whole levels one after the other: ``level("a" | "b", round)`` for
    each side, the first as the round's order says."""

    def play(index: int, a_first: bool) -> tuple[LevelSample, LevelSample]:
        first = level("a" if a_first else "b", index)
        second = level("b" if a_first else "a", index)
        return (first, second) if a_first else (second, first)

    return play


def run_rounds(
    play: Play,
    plan: RoundPlan,
    *,
    seed: int = 0,
    cell: str = "",
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[LoadRound], dict[str, Decision], float]:
    """Play rounds (``play(round, a_first)``: interleaved levels, or :func:`alternating`
    whole levels) until every judged figure's rule stops or a cap is reached; the
    rounds, the decisions, the seconds.

    Looks come every ``check_every`` usable rounds from ``min_rounds``, and at the
    caps. Progress (step ``A/B load rounds``) is reported between rounds, at most
    every half second, and once at the end.
    """
    orders = pair_orders(plan.max_rounds, seed)
    rule = plan.latency
    rounds: list[LoadRound] = []
    shown = Throttle()
    start = clock()
    while True:
        i = len(rounds)
        a_first = bool(orders[i])
        a, b = play(i, a_first)
        rounds.append(LoadRound(i, a_first, a, b))
        elapsed = clock() - start
        used = sum(1 for r in rounds if r.dropped is None)
        out_of_rounds = len(rounds) >= plan.max_rounds
        at_look = used >= rule.min_pairs and used % rule.check_every == 0
        if at_look or out_of_rounds or elapsed >= rule.max_seconds:
            dropped = len(rounds) - used
            cap = (
                f"reached max_rounds={plan.max_rounds} with {dropped} dropped"
                if out_of_rounds and dropped
                else None
            )
            decisions = judge_rounds(plan, rounds, elapsed, cap)
            done = all(d.stop for d in decisions.values())
            if done or shown.due():
                progress.report(
                    "A/B load rounds",
                    len(rounds),
                    plan.max_rounds,
                    cell=cell,
                    detail=progress_text(decisions["latency"], f"P{plan.q:g}"),
                    final=done,
                )
            if done:  # always at a cap
                return rounds, decisions, elapsed
        elif shown.due():
            progress.report("A/B load rounds", len(rounds), plan.max_rounds, cell=cell)


def ab_rounds(rounds: list[LoadRound], q: float) -> list[ABRound]:
    """The report's per-round figures: one :class:`ABRound` per round with answered
    requests on both sides (``first_pair`` is the round's index, ``pairs`` 1: one pair
    of levels; ``a_p95``/``b_p95`` hold the compared percentile ``q``)."""
    out = []
    for r in rounds:
        if r.a.samples_ns.size == 0 or r.b.samples_ns.size == 0:
            continue
        a_q, b_q = r.a.figure(q), r.b.figure(q)
        out.append(
            ABRound(
                round=r.index,
                first_pair=r.index,
                pairs=1,
                a_p50=r.a.figure(50.0),
                a_p95=a_q,
                b_p50=r.b.figure(50.0),
                b_p95=b_q,
                ratio=b_q / a_q if a_q > 0 else float("inf"),
            )
        )
    return out


def order_text(rounds: list[LoadRound]) -> str:
    """``AB BA BA AB ...``: which side ran first in each round (recorded in the verdict)."""
    return " ".join("AB" if r.a_first else "BA" for r in rounds)


def pooled(rounds: list[LoadRound], side: str) -> npt.NDArray[np.int64]:
    """One side's corrected samples of every usable round, in round order."""
    parts = [(r.a if side == "a" else r.b).samples_ns for r in rounds if r.dropped is None]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def compared(plan: RoundPlan, rounds: list[LoadRound]) -> dict[str, float]:
    """The figures the rule compared, per side: the median (nearest rank) round
    percentile ``a``/``b`` (ns; for interleaved rounds, the percentile of every usable
    round's requests) and the throughput ``ta``/``tb`` whose time per request is the
    median round's (/s). Empty without a usable round."""
    a, b, ta, tb = _figures(plan, rounds)
    if a.size == 0:
        return {}
    if plan.interleaved:
        fa = float(percentile(pooled(rounds, "a"), plan.q))
        fb = float(percentile(pooled(rounds, "b"), plan.q))
    else:
        fa, fb = float(percentile(a, 50.0)), float(percentile(b, 50.0))
    return {
        "a": fa,
        "b": fb,
        "ta": 1.0 / float(percentile(1.0 / np.asarray(ta), 50.0)),
        "tb": 1.0 / float(percentile(1.0 / np.asarray(tb), 50.0)),
    }
