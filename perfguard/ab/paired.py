"""Same-run A/B statistics: paired percentile ratios and a sequential stopping rule.

Design
------
In A/B mode perfguard measures the base revision (worker A) and the candidate
(worker B) in the same job, one request each per *pair*, back to back. Whatever
slows the machine during a pair (a slow spell, a noisy neighbour, a frequency
drop) slows both requests of that pair, so it cancels in the comparison instead
of landing on one side only, as it does between two separate runs.

Order within a pair. The request served second may profit (warm caches) or
suffer (thermal build-up) from the first. The *caller* randomises the order
with ``pair_orders(n, seed)``: pairs come in blocks of two, one A-first and one
B-first in random order, so every even prefix of the schedule is exactly
balanced (each look sees as many A-first as B-first pairs) while no pair's
order can be told from the pair before it. Seeded, hence reproducible.

Statistic. With a[i], b[i] the latencies of pair i, the figure is
``ratio = P_q(b) / P_q(a)`` with perfguard's nearest-rank percentile (see
``perfguard.core.stats``). Its bounds come from a *paired* bootstrap: each replicate
draws n pair indices with replacement and takes both a[i] and b[i] of every
drawn pair, so a slow spell drawn into a replicate raises both percentiles
together. Resampling the sides independently (``percentile_ratio_bound``)
would ignore that and give needlessly wide bounds. ``lo`` is the
(1 - confidence) nearest-rank percentile of the replicate ratios and ``hi`` the
mirrored order statistic from the top, each a one-sided bound at
``confidence``; the mirroring makes ``hi(a, b) == 1 / lo(b, a)`` up to rounding.

Decision rule (limit L, e.g. 0.05; U = 1 + L, D = 1 / (1 + L))
------------------------------------------------------------------
*Final rule*, the same as the archived-baseline gate in ``perfguard.judge.compare``:

* **regression** when ratio > U AND lo > 1;
* **improvement** when ratio < D AND hi < 1 (the mirror image in log space);
* **unchanged** otherwise.

*Sequential rule.* ``decide`` is called after every ``check_every`` pairs.
Looking repeatedly and stopping at the first look where the final rule fires
would inflate false alarms: each look is another chance for noise to cross the
line. So a look before the cap stops only when the answer is clear enough that
no later look could plausibly reverse it, i.e. when the whole interval lies on
one side of the decision lines:

* stop **regression** when lo > U (the whole interval beyond the limit), or
  when the final rule fires at the stricter ``interim_confidence`` (99.9%):
  ratio > U and the 99.9% lower bound above 1 (a Haybittle-Peto boundary:
  interim looks at a very strict level, the last one at the nominal level, so
  the looks together cost next to nothing in false alarms);
* stop **improvement** when hi < D, or the mirror image at 99.9%;
* stop **no regression** when the upper bound at ``futility_confidence``
  (95%, looser than the 99% of the other two) is below U: a gate only asks
  whether B is slower beyond the limit, so a difference that makes B look
  faster need not be measured out to the cap; the verdict is then the final
  rule's (``unchanged``, or ``improvement``). This stop can only *miss* a
  regression, never raise a false one, so it may be looser: an unchanged cell
  stops after fewer pairs, and a change of twice the limit still almost never
  has its 95% upper bound below the limit.

Each of these implies the final rule's verdict on the same data. The ones that
matter for false alarms are the first two: with no real change, stopping early
on a "regression" needs the ratio beyond the limit AND a 99.9% lower bound above
1 (or a 99% bound above the whole limit), far rarer at each look than the final
rule's own error, so the extra looks add next to nothing to the false-alarm
rate. The price is on the other side: a change just under the limit is flagged
about as often as the final rule alone would flag it, and one just past it may
stop early as "unchanged"; so close to the limit any rule is a coin flip.
Otherwise measuring goes on until ``max_pairs`` pairs or ``max_seconds``
seconds; there the final rule decides. Early stops need at least ``min_pairs``
pairs (a P95 interval on fewer is too rough to trust).

On synthetic pairs (``tests/ab/test_paired.py``'s lognormal with shared per-pair
jitter and slow spells; not real-machine figures) the defaults gave 0/100 false
alarms in A/A at +5% (median 300 pairs) and 0/100 at +2% (1000); +10% was caught
50/50 at +5% (median 200 pairs) and +5% 50/50 at +2% (median 800). With the
spells on B alone, as two separate runs risk, the same A/A data gave 47/100
false regressions. Real-machine figures: ``benchmarks/verdicts-ab-results.md``.

Rounds instead of pairs. A cell under ``load:`` is compared in *rounds*: each round
gives each side one level's requests (one level both sides share, or one short level
of each; see :mod:`perfguard.ab.rounds`), order randomised as for pairs. Rounds of
whole levels one after the other are judged on one figure per side and round (its
corrected P95), by the same rule with ``q=50`` (the ratio of the two sides' median
round figure, bounded by the same paired bootstrap over rounds) and
``unit="rounds"``; ``samples_needed(50, 0.99)`` = 7 rounds for any bound.

*Pooled rounds* (``decide_pooled``), the rule of interleaved rounds (one level both
sides share): the ratio of the two sides' percentile over every request of the rounds
so far, its bounds from a *cluster* bootstrap (each replicate draws whole rounds with
replacement and takes both sides of every drawn round, with all their requests, since
the requests of one level share its slow spells). A replicate is never built: its
percentile is read off each side's pooled sorted samples weighted by how often each
round was drawn. On rounds of whole levels one after the other it is not used: where
a stall hits one side's level now and then (``tests/ab/test_ab_pooled.py``) it raises
false alarms the median rule does not (a pooled P95 follows how many stalled levels
each side drew). In an interleaved level a stall hits both sides alike; replayed on
recorded interleaved rounds (``benchmarks/ab_load_rules-results.md``) it matched the
median rule's false alarms and detection and stopped unchanged cells beside a busy
neighbour sooner.

"undecided" is only ever the verdict when there are too few pairs for any
bound: fewer than ``samples_needed(q, confidence)`` (90 for P95 at 99%; see
``perfguard.judge.compare``), e.g. when ``max_seconds`` ran out first. A Decision
that does not stop carries the verdict the final rule would give now,
provisional.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perfguard.core.policy import (
    CONFIDENCE,
    FUTILITY_CONFIDENCE,
    INTERIM_CONFIDENCE,
    samples_needed,
)
from perfguard.core.stats import as_samples, check_q, percentiles, rank_index
from perfguard.judge.verdict import ABRound, Decision, DecisionKind

__all__ = [
    "StoppingRule",
    "conclusion",
    "progress_text",
    "POOLED_ROUNDS_NEEDED",
    "decide",
    "decide_pooled",
    "pair_orders",
    "paired_bootstrap",
    "paired_ratio",
    "per_round",
    "pooled_bootstrap",
]

FloatArray = npt.NDArray[np.float64]

# Bootstrap replicates are drawn in row blocks of at most this many indices, so
# 2000 replicates of 3000 pairs never hold more than a few tens of MB at once.
_BLOCK_ELEMENTS = 1 << 21


def _pairs(a_ns: npt.ArrayLike, b_ns: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Both sides as float arrays; ValueError unless equally long, finite and > 0."""
    a = as_samples(a_ns, "a_ns")
    b = as_samples(b_ns, "b_ns")
    if a.size != b.size:
        raise ValueError(
            f"a_ns has {a.size} samples and b_ns {b.size}; "
            "paired statistics need exactly one A and one B sample per pair"
        )
    if float(a.min()) <= 0.0 or float(b.min()) <= 0.0:
        raise ValueError("latency samples must be > 0 for a ratio of percentiles")
    return a, b


def paired_ratio(a_ns: npt.ArrayLike, b_ns: npt.ArrayLike, q: float = 95.0) -> float:
    """P_q(B) / P_q(A), nearest-rank percentiles of the pairs' two sides."""
    a, b = _pairs(a_ns, b_ns)
    qf = check_q(q)
    return percentiles(b, (qf,))[qf] / percentiles(a, (qf,))[qf]


def _ranks(x: FloatArray) -> tuple[npt.NDArray[np.intp], FloatArray]:
    """Rank of each sample (ties broken by position) and the samples sorted."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(x.size, dtype=np.intp)
    ranks[order] = np.arange(x.size)
    return ranks, x[order]


def paired_bootstrap(
    a_ns: npt.ArrayLike,
    b_ns: npt.ArrayLike,
    q: float = 95.0,
    confidence: float = CONFIDENCE,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """One-sided bounds (lo, hi) of P_q(B) / P_q(A), each at ``confidence``.

    Pair indices are resampled jointly (see the module docstring). The k-th
    order statistic of a replicate is found on integer ranks (``np.partition``
    per row) and mapped back to the sorted samples. The bounds are widened to
    contain the plain ratio if the replicates sit entirely on one side of it.
    """
    point, ratios = _replicates(a_ns, b_ns, q, n_boot, seed)
    return _bounds(point, ratios, confidence)


def _bounds(point: float, ratios: FloatArray, confidence: float) -> tuple[float, float]:
    conf = float(confidence)
    if not 0.5 < conf < 1.0:
        raise ValueError(f"confidence={confidence!r} is invalid; expected a number in (0.5, 1)")
    j = rank_index(ratios.size, 100.0 * (1.0 - conf))
    lo, hi = float(ratios[j]), float(ratios[ratios.size - 1 - j])
    return min(lo, point), max(hi, point)


def _replicates(
    a_ns: npt.ArrayLike, b_ns: npt.ArrayLike, q: float, n_boot: int, seed: int
) -> tuple[float, FloatArray]:
    """The plain ratio and the sorted ratios of ``n_boot`` paired bootstrap replicates."""
    a, b = _pairs(a_ns, b_ns)
    qf = check_q(q)
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot} is invalid; expected an integer >= 1")
    n = a.size
    k = rank_index(n, qf)
    rank_a, sorted_a = _ranks(a)
    rank_b, sorted_b = _ranks(b)
    point = float(sorted_b[k] / sorted_a[k])

    rng = np.random.default_rng(seed)
    itype = np.int32 if n < 2**31 else np.int64
    ranks_a, ranks_b = rank_a.astype(itype), rank_b.astype(itype)
    ratios = np.empty(n_boot, dtype=np.float64)
    rows = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, n_boot, rows):
        m = min(rows, n_boot - start)
        idx = rng.integers(0, n, size=(m, n), dtype=itype)
        ka = np.partition(ranks_a[idx], k, axis=1)[:, k]
        kb = np.partition(ranks_b[idx], k, axis=1)[:, k]
        ratios[start : start + m] = sorted_b[kb] / sorted_a[ka]
    ratios.sort()
    return point, ratios


#: Fewest rounds for a cluster bootstrap over rounds to give any 99% bound: as for the
#: median of the rounds' figures (``samples_needed(50, 0.99)`` = 7).
POOLED_ROUNDS_NEEDED = samples_needed(50.0, CONFIDENCE)


def _pooled_sorted(
    rounds: Sequence[FloatArray],
) -> tuple[FloatArray, npt.NDArray[np.intp], npt.NDArray[np.int64]]:
    """One side's samples of every round, sorted; each sample's round; each round's size."""
    sizes = np.asarray([r.size for r in rounds], dtype=np.int64)
    values = np.concatenate(rounds) if rounds else np.zeros(0)
    labels = np.repeat(np.arange(len(rounds)), sizes)
    order = np.argsort(values, kind="stable")
    return values[order], labels[order], sizes


def _pooled_ratio(a: Sequence[FloatArray], b: Sequence[FloatArray], q: float) -> float:
    pa = float(np.sort(np.concatenate(a))[rank_index(sum(x.size for x in a), q)])
    pb = float(np.sort(np.concatenate(b))[rank_index(sum(x.size for x in b), q)])
    return pb / pa


def _weighted_percentile(
    side: tuple[FloatArray, npt.NDArray[np.intp], npt.NDArray[np.int64]],
    weights: npt.NDArray[np.int64],
    q: float,
) -> FloatArray:
    """Row r: the nearest-rank q-th percentile of the pooled samples with round i counted
    ``weights[r, i]`` times (a cluster bootstrap replicate), without building it.

    Counted from the top: the percentile is the highest sample with at least
    ``need = total - rank`` weighted samples at or above it. A high percentile lies in
    the top few samples, so each row is first searched in a window of four times its
    expected tail, and only rows whose answer lies deeper are searched in full."""
    values, labels, sizes = side
    n = values.size
    totals = weights @ sizes
    need = totals - np.asarray([rank_index(int(t), q) for t in totals], dtype=np.int64)
    out = np.empty(weights.shape[0], dtype=np.float64)
    tail = min(n, max(64, 4 * math.ceil(n * (1.0 - q / 100.0))))
    todo = np.arange(weights.shape[0])
    for window in (tail, n):
        if todo.size == 0:
            break
        first = n - window
        rows = max(1, _BLOCK_ELEMENTS // max(1, window))
        left = []
        for start in range(0, todo.size, rows):
            sel = todo[start : start + rows]
            w = weights[sel][:, labels[first:]]
            above = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]  # weighted count at or above
            found = above >= need[sel, None]
            count = found.sum(axis=1)
            ok = (count > 0) & (found[:, 0] | (window == n))
            out[sel[ok]] = values[first + count[ok] - 1]
            left.append(sel[~ok])
        todo = np.concatenate(left) if left else todo[:0]
    return out


def _pooled_replicates(
    a: Sequence[FloatArray], b: Sequence[FloatArray], q: float, n_boot: int, seed: int
) -> tuple[float, FloatArray]:
    """The pooled ratio and the sorted ratios of ``n_boot`` cluster bootstrap replicates."""
    qf = check_q(q)
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot} is invalid; expected an integer >= 1")
    n = len(a)
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(np.int64)
    ratios = _weighted_percentile(_pooled_sorted(b), weights, qf) / _weighted_percentile(
        _pooled_sorted(a), weights, qf
    )
    ratios.sort()
    return _pooled_ratio(a, b, qf), ratios


def pooled_bootstrap(
    a_rounds: Sequence[npt.ArrayLike],
    b_rounds: Sequence[npt.ArrayLike],
    q: float = 95.0,
    confidence: float = CONFIDENCE,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """One-sided bounds (lo, hi) of P_q(pooled B) / P_q(pooled A), each at ``confidence``,
    from a bootstrap that draws whole rounds with replacement, both sides of a drawn
    round together (a cluster bootstrap: every request counts, and the requests of one
    round, which share its slow spells, are never treated as independent)."""
    a = [as_samples(x, "a_rounds") for x in a_rounds]
    b = [as_samples(x, "b_rounds") for x in b_rounds]
    if len(a) != len(b) or not a:
        raise ValueError(f"{len(a)} rounds of A and {len(b)} of B; expected as many, >= 1")
    point, ratios = _pooled_replicates(a, b, q, n_boot, seed)
    return _bounds(point, ratios, confidence)


def pair_orders(n: int, seed: int) -> npt.NDArray[np.bool_]:
    """Whether A is served first in each of ``n`` pairs (True) or B (False).

    Blocks of two pairs hold one of each order, in random (seeded) order; an odd
    last pair is a coin flip. Every even-length prefix is exactly balanced.
    """
    if n < 0:
        raise ValueError(f"n={n} is invalid; expected an integer >= 0")
    rng = np.random.default_rng(seed)
    first = rng.random((n + 1) // 2) < 0.5
    orders = np.empty(n, dtype=np.bool_)
    orders[0::2] = first
    orders[1::2] = ~first[: n // 2]
    return orders


def per_round(a_ns: npt.ArrayLike, b_ns: npt.ArrayLike, round_size: int = 100) -> list[ABRound]:
    """Figures of each consecutive ``round_size`` pairs (the last round may be short).

    Each :class:`~perfguard.judge.verdict.ABRound` holds ``round`` (0-based),
    ``first_pair``, ``pairs``, ``a_p50``, ``a_p95``, ``b_p50``, ``b_p95`` (nearest
    rank, in the samples' unit) and ``ratio`` (``b_p95 / a_p95``). For the report: a
    drift or a slow spell shows as one round out of line, on both sides if pairing
    did its job.
    """
    if round_size < 1:
        raise ValueError(f"round_size={round_size} is invalid; expected an integer >= 1")
    a, b = _pairs(a_ns, b_ns)
    rounds: list[ABRound] = []
    for i, start in enumerate(range(0, a.size, round_size)):
        pa = percentiles(a[start : start + round_size], (50.0, 95.0))
        pb = percentiles(b[start : start + round_size], (50.0, 95.0))
        rounds.append(
            ABRound(
                round=i,
                first_pair=start,
                pairs=min(round_size, a.size - start),
                a_p50=pa[50.0],
                a_p95=pa[95.0],
                b_p50=pb[50.0],
                b_p95=pb[95.0],
                ratio=pb[95.0] / pa[95.0],
            )
        )
    return rounds


# --------------------------------------------------------------------------- stopping


@dataclass(frozen=True)
class StoppingRule:
    """When an interleaved A/B measurement may stop; see the module docstring.

    ``limit`` is relative (0.05 = +5% on the q-th percentile). The caller
    measures ``check_every`` more pairs between calls of ``decide`` (``decide``
    itself looks whenever it is called). ``n_boot`` and ``seed`` configure the
    paired bootstrap at each look.
    """

    limit: float = 0.05
    q: float = 95.0
    confidence: float = CONFIDENCE
    futility_confidence: float = FUTILITY_CONFIDENCE
    interim_confidence: float = INTERIM_CONFIDENCE
    min_pairs: int = 200
    max_pairs: int = 3000
    check_every: int = 100
    max_seconds: float = 120.0
    n_boot: int = 2000
    seed: int = 0
    #: What one paired observation is: ``pairs`` of requests, or ``rounds`` of whole
    #: load levels (each round's per-side figure is then one "sample").
    unit: str = "pairs"
    #: The name of the compared figure in the reason; empty: ``P<q>``.
    label: str = ""

    def __post_init__(self) -> None:
        problems = []
        if not (math.isfinite(self.limit) and self.limit > 0.0):
            problems.append(f"limit={self.limit!r} must be a relative limit > 0 (0.05 = +5%)")
        if not (math.isfinite(self.q) and 0.0 < self.q < 100.0):
            problems.append(f"q={self.q!r} must be in (0, 100)")
        if not 0.5 < self.confidence < 1.0:
            problems.append(f"confidence={self.confidence!r} must be in (0.5, 1)")
        if not self.confidence <= self.interim_confidence < 1.0:
            problems.append(
                f"interim_confidence={self.interim_confidence!r} must be in "
                f"[confidence, 1) = [{self.confidence!r}, 1)"
            )
        if not 0.5 < self.futility_confidence < 1.0:
            problems.append(f"futility_confidence={self.futility_confidence!r} must be in (0.5, 1)")
        if not 1 <= self.min_pairs <= self.max_pairs:
            problems.append(
                f"min_pairs={self.min_pairs} and max_pairs={self.max_pairs} "
                "must satisfy 1 <= min_pairs <= max_pairs"
            )
        if self.check_every < 1:
            problems.append(f"check_every={self.check_every} must be >= 1")
        if not self.max_seconds > 0.0:
            problems.append(f"max_seconds={self.max_seconds!r} must be > 0")
        if self.n_boot < 1:
            problems.append(f"n_boot={self.n_boot} must be >= 1")
        if not self.unit:
            problems.append("unit must name what is paired, e.g. 'pairs' or 'rounds'")
        if problems:
            raise ValueError("invalid StoppingRule: " + "; ".join(problems))

    @property
    def pairs_needed(self) -> int:
        """Fewest pairs for any bound on the q-th percentile at ``confidence``."""
        return samples_needed(self.q, self.confidence)

    @property
    def name(self) -> str:
        """The compared figure as the reason names it (``P95``, or ``label``)."""
        return self.label or f"P{self.q:g}"


def progress_text(decision: Decision, label: str = "") -> str:
    """``ratio 1.043, 99% lower bound +1.2%``: the figures so far, for a progress line
    (``label`` first, e.g. ``P95``)."""
    d = decision
    if d.ratio is None:
        return ""
    head = f"{label} ratio" if label else "ratio"
    if d.lo is None:
        return f"{head} {d.ratio:.3f}"
    return f"{head} {d.ratio:.3f}, 99% lower bound {_pct(d.lo)}"


def conclusion(decision: Decision) -> str:
    """``decision.reason`` without its leading figures: what was concluded and why it
    stopped (``regression: ...; stopped early``), for a message that states the
    figures itself. A reason without figures (too few pairs) is returned whole."""
    if decision.lo is None or ": " not in decision.reason:
        return decision.reason
    return decision.reason.split(": ", 1)[1]


def _pct(x: float) -> str:
    return f"{(x - 1.0) * 100.0:+.1f}%"


def _final(rule: StoppingRule, ratio: float, lo: float, hi: float) -> DecisionKind:
    up = 1.0 + rule.limit
    if ratio > up and lo > 1.0:
        return DecisionKind.REGRESSION
    if ratio < 1.0 / up and hi < 1.0:
        return DecisionKind.IMPROVEMENT
    return DecisionKind.UNCHANGED


def decide(
    rule: StoppingRule,
    a_ns: npt.ArrayLike,
    b_ns: npt.ArrayLike,
    elapsed_s: float,
    *,
    cap: str | None = None,
) -> Decision:
    """Whether to stop measuring after the pairs so far, and the verdict.

    ``a_ns[i]`` and ``b_ns[i]`` are pair i's two latencies (or round i's two
    figures); ``elapsed_s`` is the time spent measuring so far. ``cap`` says why the
    caller can measure no more although the rule's own caps are not reached (e.g.
    load rounds dropped until the round cap): the final rule then decides, and the
    reason names it. See the module docstring for the rule.
    """
    a = np.asarray(a_ns, dtype=np.float64).reshape(-1)
    b = np.asarray(b_ns, dtype=np.float64).reshape(-1)
    n = int(a.size)
    if b.size != n:
        raise ValueError(f"a_ns has {n} samples and b_ns {b.size}; expected one of each per pair")
    needed = rule.pairs_needed
    if n < needed:
        few = f"a {rule.confidence:.0%} bound on {rule.name} needs >= {needed}"
        return _too_few(rule, n, paired_ratio(a, b, rule.q) if n else None, few, elapsed_s, cap)
    ratio, replicates = _replicates(a, b, rule.q, rule.n_boot, rule.seed)
    return _sequential(rule, n, ratio, replicates, elapsed_s, cap)


def decide_pooled(
    rule: StoppingRule,
    a_rounds: Sequence[npt.ArrayLike],
    b_rounds: Sequence[npt.ArrayLike],
    elapsed_s: float,
    *,
    cap: str | None = None,
) -> Decision:
    """:func:`decide` for rounds judged on their pooled samples (see "Pooled rounds" in
    the module docstring): ``a_rounds[i]``/``b_rounds[i]`` are round i's samples of
    each side; the figure is ``P_q`` of B's pooled samples over A's, its bounds from
    the cluster bootstrap over rounds (:func:`pooled_bootstrap`)."""
    if len(a_rounds) != len(b_rounds):
        raise ValueError(
            f"{len(a_rounds)} rounds of A and {len(b_rounds)} of B; expected one of each per round"
        )
    n = len(a_rounds)
    a = [as_samples(x, "a_rounds") for x in a_rounds]
    b = [as_samples(x, "b_rounds") for x in b_rounds]
    pooled_n = min(sum(x.size for x in a), sum(x.size for x in b)) if n else 0
    needed, needed_samples = POOLED_ROUNDS_NEEDED, samples_needed(rule.q, rule.confidence)
    if n < needed or pooled_n < needed_samples:
        few = (
            f"a {rule.confidence:.0%} bound on {rule.name} needs >= {needed} rounds "
            f"and >= {needed_samples} requests a side (has {pooled_n})"
        )
        point = _pooled_ratio(a, b, rule.q) if pooled_n else None
        return _too_few(rule, n, point, few, elapsed_s, cap)
    ratio, replicates = _pooled_replicates(a, b, rule.q, rule.n_boot, rule.seed)
    return _sequential(rule, n, ratio, replicates, elapsed_s, cap)


def _cap(rule: StoppingRule, n: int, elapsed_s: float, cap: str | None) -> str | None:
    """Why measuring must stop now (a cap reached), None while it may go on."""
    if n >= rule.max_pairs:
        return f"reached max_{rule.unit}={rule.max_pairs}"
    if elapsed_s >= rule.max_seconds:
        return f"reached max_seconds={rule.max_seconds:g}"
    return cap


def _too_few(
    rule: StoppingRule,
    n: int,
    ratio: float | None,
    few: str,
    elapsed_s: float,
    cap: str | None,
) -> Decision:
    why = f"{n} {rule.unit}; {few}"
    reached = _cap(rule, n, elapsed_s, cap)
    if reached is not None:
        return Decision(
            True, DecisionKind.UNDECIDED, ratio, None, None, n, f"{reached} with only {why}"
        )
    return Decision(False, DecisionKind.UNDECIDED, ratio, None, None, n, f"measuring more: {why}")


def _sequential(
    rule: StoppingRule,
    n: int,
    ratio: float,
    replicates: FloatArray,
    elapsed_s: float,
    cap: str | None,
) -> Decision:
    """The sequential rule on a figure and its sorted bootstrap replicates."""
    reached = _cap(rule, n, elapsed_s, cap)
    unit = rule.unit
    lo, hi = _bounds(ratio, replicates, rule.confidence)
    final = _final(rule, ratio, lo, hi)
    up, down = 1.0 + rule.limit, 1.0 / (1.0 + rule.limit)
    figures = (
        f"{rule.name} B/A {ratio:.3f} ({_pct(ratio)}; {rule.confidence:.0%} bounds "
        f"{_pct(lo)}..{_pct(hi)}) over {n} {unit}, limit {_pct(up)}"
    )
    if reached is not None:
        return Decision(True, final, ratio, lo, hi, n, f"{figures}: {final}, {reached}")
    if n >= rule.min_pairs:  # the callers saw to n >= the fewest for any bound
        strict_lo, strict_hi = _bounds(ratio, replicates, rule.interim_confidence)
        if lo > up or (ratio > up and strict_lo > 1.0):
            why = (
                "regression: the whole interval is beyond the limit; stopped early"
                if lo > up
                else f"regression: beyond the limit, and its {rule.interim_confidence:.1%} "
                f"lower bound ({_pct(strict_lo)}) is above +0%; stopped early"
            )
            return Decision(True, DecisionKind.REGRESSION, ratio, lo, hi, n, f"{figures}: {why}")
        if hi < down or (ratio < down and strict_hi < 1.0):
            why = (
                "improvement: the whole interval is beyond the limit; stopped early"
                if hi < down
                else f"improvement: beyond the limit, and its {rule.interim_confidence:.1%} "
                f"upper bound ({_pct(strict_hi)}) is below +0%; stopped early"
            )
            return Decision(True, DecisionKind.IMPROVEMENT, ratio, lo, hi, n, f"{figures}: {why}")
        futile_hi = _bounds(ratio, replicates, rule.futility_confidence)[1]
        if futile_hi < up:
            # A gate asks one question: is B slower than A beyond the limit? Once the
            # interval sits below the limit the answer is no, whatever more pairs would
            # say about a speed-up; the final rule names the verdict. Stopping here can
            # only miss a regression, never raise a false one, so its bound is the
            # looser `futility_confidence` (95%): fewer pairs for an unchanged cell.
            why = (
                f"no regression: the {rule.futility_confidence:.0%} upper bound "
                f"{_pct(futile_hi)} is below the limit; stopped early"
            )
            return Decision(True, final, ratio, lo, hi, n, f"{figures}: {why}")
        more = "the interval straddles a limit"
    else:
        more = f"fewer than min_{unit}={rule.min_pairs}"
    why = f"provisionally {final}, measuring more ({more})"
    return Decision(False, final, ratio, lo, hi, n, f"{figures}: {why}")
