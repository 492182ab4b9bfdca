"""Same-run A/B of a generative cell: request pairs judged on their token figures.

A generative cell is compared the way every other cell is (:mod:`perfguard.ab.paired`):
pairs of requests, one to the base (A) and one to the working tree (B), back to back
in one worker, in seeded random order. Both requests of a pair send the same prompt,
and each keeps its token times (:mod:`perfguard.records.tokenfigures`), so a pair gives
one paired observation of every token figure at once.

Which figures are judged: every relative gate of the cell on a latency figure (end to
end ``p*``, ``ttft_*``, ``itl_*``, ``tpot_*``) and on ``tokens_per_s``; a cell with none
of these is judged on end-to-end P95 at +5%, as any cell. Each figure has a stopping rule
of its own (its percentile, its limit) and is decided by the paired rule at every look:

* one value per request (end to end, TTFT, TPOT): pair ``i``'s two requests are pair
  ``i``'s two samples, bounded by the paired bootstrap (:func:`~perfguard.ab.paired.decide`);
* ITL: every gap of a side's requests pooled, the ratio of the two pooled percentiles,
  its bounds from a cluster bootstrap that draws whole pairs, both requests' gaps
  together (:func:`~perfguard.ab.paired.decide_pooled`, each pair a "round"): the gaps of
  one request share its slow spells and are never treated as independent;
* output tokens/s: every request has one shape, so a side's tokens/s is the tokens of a
  request over its request time; it is judged on the median request time (q = 50,
  paired), and stated as tokens/s, B over A.

A figure's decision is kept from the first look at which its own rule stops (a
sequential rule is only valid so: looking again after it stopped would be another
chance for noise to cross the line); the pairs go on until every figure has stopped, or
the caps, where the final rule decides those still open. Each figure's false-alarm rate
is the paired rule's; a cell gated on four figures has up to four such chances.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from perfguard.ab.paired import StoppingRule, decide, decide_pooled
from perfguard.core.policy import MetricKind, gate_metric
from perfguard.core.scenario import Scenario
from perfguard.core.stats import percentile
from perfguard.judge.verdict import SEVERITY, Decision

__all__ = ["TokenGate", "TokenLooks", "TokenPairs", "token_gates"]

#: The figure judged when a generative cell has no relative gate A/B can judge.
_DEFAULT = ("p95", 0.05)


@dataclass(frozen=True)
class TokenGate:
    """One figure a generative cell's pairs are judged on: the gate's ``metric`` (a
    name of ``core.policy.METRICS``), the ``samples`` it reads (``request``, ``ttft``,
    ``itl``, ``tpot``, or ``tokens`` for output tokens/s) and its stopping rule."""

    metric: str
    samples: str
    rule: StoppingRule

    @property
    def label(self) -> str:
        return self.rule.name

    @property
    def is_rate(self) -> bool:
        """Output tokens/s: judged on request time, stated inverted (higher is better)."""
        return self.samples == "tokens"


def token_gates(
    scenario: Scenario, *, seed: int = 0, rule: StoppingRule | None = None
) -> tuple[TokenGate, ...]:
    """The figures a generative cell's A/B judges, in the order its gates list them.

    ``rule`` gives the caps and the looks (its ``limit``, ``q`` and ``label`` are each
    figure's own); the default is :class:`StoppingRule`'s."""
    base = rule or StoppingRule()
    gates: list[TokenGate] = []
    for gate in scenario.gates:
        spec = gate_metric(gate.metric)
        if spec is None or not gate.relative:
            continue
        if spec.kind is MetricKind.LATENCY and spec.quantile is not None:
            samples, q = spec.samples, spec.quantile
        elif spec.name == "tokens_per_s":
            samples, q = "tokens", 50.0
        else:
            continue
        if any(g.metric == spec.name for g in gates):
            continue
        gates.append(_gate(base, spec.name, samples, q, gate.limit, spec.label, seed))
    if not gates:
        spec = gate_metric(_DEFAULT[0])
        assert spec is not None and spec.quantile is not None
        gates.append(
            _gate(base, spec.name, "request", spec.quantile, _DEFAULT[1], spec.label, seed)
        )
    return tuple(gates)


def _gate(
    base: StoppingRule, metric: str, samples: str, q: float, limit: float, label: str, seed: int
) -> TokenGate:
    label = "time per request (median), for output tokens/s" if samples == "tokens" else label
    rule = replace(base, limit=limit, q=q, seed=seed, label=label)
    return TokenGate(metric=metric, samples=samples, rule=rule)


@dataclass
class TokenPairs:
    """The token times of the pairs so far: ``a[i]`` and ``b[i]`` are pair ``i``'s two
    requests' token times (ns after each was sent, ``new_tokens`` each)."""

    new_tokens: int
    a: list[npt.NDArray[np.int64]] = field(default_factory=list)
    b: list[npt.NDArray[np.int64]] = field(default_factory=list)
    _stacked: dict[str, npt.NDArray[np.int64]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __len__(self) -> int:
        return len(self.a)

    def add(self, a_rows: Sequence[Sequence[int]], b_rows: Sequence[Sequence[int]]) -> None:
        """Pairs from a reply: one row of token times per request, as many of each side."""
        if len(a_rows) != len(b_rows):
            raise ValueError(f"{len(a_rows)} requests of A and {len(b_rows)} of B in one block")
        for side, rows in ((self.a, a_rows), (self.b, b_rows)):
            for row in rows:
                times = np.asarray(row, dtype=np.int64)
                if times.shape != (self.new_tokens,):
                    raise ValueError(
                        f"a request has {times.size} token times; expected {self.new_tokens}"
                    )
                side.append(times)
        self._stacked.clear()

    def times(self, side: str) -> npt.NDArray[np.int64]:
        """One side's token times: one row per pair (stacked once per block of pairs,
        not at every look of every gate)."""
        if side not in self._stacked:
            rows = self.a if side == "a" else self.b
            stacked = np.vstack(rows) if rows else np.zeros((0, self.new_tokens), np.int64)
            self._stacked[side] = stacked
        return self._stacked[side]

    def values(self, side: str, samples: str) -> npt.NDArray[np.float64]:
        """One value per request of ``side``: its end to end (``request``, ``tokens``),
        TTFT or TPOT; ``itl`` is :meth:`gaps`."""
        times = self.times(side).astype(np.float64)
        if samples in ("request", "tokens"):
            return times[:, -1]
        if samples == "ttft":
            return times[:, 0]
        if samples == "tpot":
            if self.new_tokens < 2:
                return np.zeros(0)
            return (times[:, -1] - times[:, 0]) / float(self.new_tokens - 1)
        raise ValueError(f"no per-request value named {samples!r}")

    def gaps(self, side: str) -> list[npt.NDArray[np.float64]]:
        """Each request's inter-token gaps, one array per pair."""
        rows = self.a if side == "a" else self.b
        return [np.diff(r).astype(np.float64) for r in rows]

    def figure(self, gate: TokenGate, side: str, tokens_per_request: int) -> float | None:
        """The figure ``gate`` judges, of one side, as a report states it: the percentile
        in ns, or output tokens/s (``tokens_per_request`` over the median request)."""
        if not self.a:
            return None
        if gate.samples == "itl":
            gaps = self.gaps(side)
            pooled = np.concatenate(gaps) if gaps else np.zeros(0)
            return float(percentile(pooled, gate.rule.q)) if pooled.size else None
        values = self.values(side, gate.samples)
        if not values.size:
            return None
        value = float(percentile(values, gate.rule.q))
        if gate.is_rate:
            return tokens_per_request / (value / 1e9) if value > 0 else None
        return value


def judge(gate: TokenGate, pairs: TokenPairs, elapsed_s: float) -> Decision:
    """``gate``'s paired decision on the pairs so far (module docstring)."""
    if gate.samples == "itl":
        return decide_pooled(gate.rule, pairs.gaps("a"), pairs.gaps("b"), elapsed_s)
    a, b = pairs.values("a", gate.samples), pairs.values("b", gate.samples)
    return decide(gate.rule, a, b, elapsed_s)


class TokenLooks:
    """The gates' decisions look by look; each kept from the look its rule stopped."""

    def __init__(self, gates: Sequence[TokenGate]) -> None:
        if not gates:
            raise ValueError("a generative cell's A/B needs at least one gated figure")
        self.gates = tuple(gates)
        self.decisions: dict[str, Decision] = {}

    @property
    def open(self) -> list[TokenGate]:
        """The gates still measuring (not stopped at an earlier look)."""
        return [g for g in self.gates if not self._stopped(g)]

    def _stopped(self, gate: TokenGate) -> bool:
        d = self.decisions.get(gate.metric)
        return d is not None and d.stop

    def look(self, pairs: TokenPairs, elapsed_s: float) -> tuple[bool, TokenGate]:
        """Decide every open gate; whether all have stopped now, and the gate to show
        while measuring (the first still open, else the first)."""
        for gate in self.open:
            self.decisions[gate.metric] = judge(gate, pairs, elapsed_s)
        still = self.open
        return not still, still[0] if still else self.gates[0]

    def lead(self) -> Decision:
        """The cell's headline decision: the one whose verdict ranks worst in
        :data:`~perfguard.judge.verdict.SEVERITY`, the first gate on a tie."""
        found = [self.decisions[g.metric] for g in self.gates if g.metric in self.decisions]
        return min(found, key=lambda d: SEVERITY.index(d.verdict.verdict))
