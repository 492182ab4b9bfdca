"""Same-run A/B of a cell under ``load:``: rounds of whole load levels, A and B alternated.

A load level's figure (the corrected P95: latency from each request's *scheduled*
send time, see :mod:`perfguard.measure.loadstats`) belongs to the whole level, not
to one request, so request pairs cannot carry it. Instead each **round** runs one
short level of the base (A) and one of the working tree (B), back to back on the
same worker(s), in an order drawn per round (:func:`perfguard.ab.stats.pair_orders`:
seeded, every two rounds one A-first and one B-first). Both sides of a round get the
same arrival schedule (the same seed). A slow spell of the machine that lasts a
round hits both of its levels, so it cancels in the round's ratio.

Each round gives one figure per side; the rounds are judged by the same sequential
rule as request pairs (:func:`perfguard.ab.stats.decide`) with ``q=50``: the ratio
of the two sides' median round figure, its 99% bounds from the paired bootstrap over
rounds, interim looks every ``check_every`` rounds from ``min_rounds``, until the rule
stops or a cap (``max_rounds``, ``max_seconds``) is reached. Too few usable rounds
for a bound is ``undecided`` (the cell's verdict is then ``invalid``, with the reason).

Throughput is judged too when the cell gates ``throughput``: on the requests per
second each round's level achieved (as time per request, so that "higher is worse"
holds for the rule). In an open-loop level that keeps up it equals the asked rate on
both sides; it moves only when one side saturates.

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

from perfguard.ab.stats import StoppingRule, decide, pair_orders, progress_text
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
    "ab_rounds",
    "judge_rounds",
    "medians",
    "order_text",
    "pooled",
    "run_rounds",
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

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any]) -> LevelSample:
        """From a worker's ``load_level`` reply."""
        return cls(
            samples_ns=np.asarray(reply.get("samples_ns") or [], dtype=np.int64),
            throughput=float(reply.get("throughput") or 0.0),
            load=dict(reply.get("load") or {}),
        )

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
    """Round ``index``: A's and B's level, ``a_first`` when A ran first."""

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
    ) -> RoundPlan:
        def rule(lim: float, label: str) -> StoppingRule:
            return StoppingRule(
                limit=lim,
                q=50.0,
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
            latency=rule(limit, f"median round P{q:g}"),
            throughput=(
                rule(throughput_limit, "median round time per request (1/throughput)")
                if throughput_limit is not None
                else None
            ),
            seconds=seconds,
            iterations=iterations,
        )


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
    out = {"latency": decide(plan.latency, a, b, elapsed_s, cap=cap)}
    if plan.throughput is not None:
        inv_a = 1.0 / np.asarray(ta, dtype=np.float64)
        inv_b = 1.0 / np.asarray(tb, dtype=np.float64)
        out["throughput"] = decide(plan.throughput, inv_a, inv_b, elapsed_s, cap=cap)
    return out


def run_rounds(
    level: Callable[[str, int], LevelSample],
    plan: RoundPlan,
    *,
    seed: int = 0,
    cell: str = "",
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[LoadRound], dict[str, Decision], float]:
    """Alternate whole levels of A and B (``level("a" | "b", round)``) until every judged
    figure's rule stops or a cap is reached; the rounds, the decisions, the seconds.

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
        first = level("a" if a_first else "b", i)
        second = level("b" if a_first else "a", i)
        a, b = (first, second) if a_first else (second, first)
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


def medians(plan: RoundPlan, rounds: list[LoadRound]) -> dict[str, float]:
    """The figures the rule compared, per side: the median (nearest rank) round
    percentile ``a``/``b`` (ns) and the throughput ``ta``/``tb`` whose time per request
    is the median round's (/s). Empty without a usable round."""
    a, b, ta, tb = _figures(plan, rounds)
    if a.size == 0:
        return {}
    return {
        "a": float(percentile(a, 50.0)),
        "b": float(percentile(b, 50.0)),
        "ta": 1.0 / float(percentile(1.0 / np.asarray(ta), 50.0)),
        "tb": 1.0 / float(percentile(1.0 / np.asarray(tb), 50.0)),
    }
