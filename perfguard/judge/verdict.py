"""Verdicts as plain, serialisable data: what a comparison decided, and why.

``perfguard.judge.compare`` decides them; this module holds them, words them
(``describe``) and combines re-measurement rounds (``confirm``). The plugin,
the terminal summary and the HTML report only read them. Every figure a
reviewer needs to trust (or distrust) a verdict is kept beside it: both values,
the raw and the machine-speed normalised ratio, the confidence bounds, the
limit before and after noise-floor widening, and the rule that decided.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from perfguard.core.policy import gate_metric, limit_unit
from perfguard.judge.calibration import CalibrationNote
from perfguard.records.declare import Codec, Record, spec
from perfguard.records.opprofile import PROFILE_CODEC, OperatorProfile
from perfguard.records.results import WordEnum
from perfguard.records.tokenfigures import TokenFigures


class VerdictKind(WordEnum):
    """What a comparison decided for one figure or one scenario; ``SEVERITY`` ranks them."""

    REGRESSION = "regression"
    INVALID = "invalid"
    INCOMPARABLE = "incomparable"
    MISSING = "missing"
    NEW = "new"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"

    @property
    def failed(self) -> bool:
        """True for the one kind that fails the pull request."""
        return self is VerdictKind.REGRESSION


#: Worst first. A scenario's verdict is the worst of its metrics' verdicts:
#:
#: * ``regression`` first: it is the one verdict that fails the pull request.
#: * ``invalid`` next: the figures cannot be trusted (too few samples, unstable
#:   or contended run, scenario did not pass), so a regression could hide
#:   behind it; someone must act (re-run, raise iterations, fix the scenario).
#: * ``incomparable``: measured on another machine/runtime, so nothing is gated;
#:   louder than ``missing``/``new`` because *every* scenario loses its gate.
#: * ``missing``: a gated scenario vanished (renamed or deleted), worth a look.
#: * ``new``: nothing to compare with yet; normal for added scenarios.
#: * ``improvement`` before ``unchanged``: worth reporting (refresh the baseline).
SEVERITY: tuple[VerdictKind, ...] = tuple(VerdictKind)


def worst(kinds: Iterable[VerdictKind]) -> VerdictKind:
    """The most severe verdict kind among ``kinds`` (``unchanged`` when empty)."""
    ranked = [SEVERITY.index(VerdictKind(k)) for k in kinds]
    return SEVERITY[min(ranked)] if ranked else VerdictKind.UNCHANGED


class DecisionKind(WordEnum):
    """What same-run A/B's stopping rule (``perfguard.ab.paired.decide``) concluded.

    The verdict kinds it can reach, plus ``undecided`` (too few pairs for a bound);
    :attr:`verdict` is the scenario verdict each one gives.
    """

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    UNDECIDED = "undecided"

    @property
    def verdict(self) -> VerdictKind:
        """``undecided`` is ``invalid`` (no trustworthy answer); the rest map by name."""
        if self is DecisionKind.UNDECIDED:
            return VerdictKind.INVALID
        return VerdictKind(self.value)


_NON_NEGATIVE = spec(minimum=0)
_SHA = spec(pattern="^([0-9a-f]{40}|[0-9a-f]{64})$")


@dataclass(frozen=True)
class Decision(Record):
    """What the A/B stopping rule concluded at one look; ``ratio``/``lo``/``hi`` are None
    without pairs."""

    SCHEMA_NAME: ClassVar[str] = "decision"

    stop: bool
    verdict: DecisionKind
    ratio: float | None = field(metadata=_NON_NEGATIVE)
    lo: float | None = field(metadata=_NON_NEGATIVE)
    hi: float | None = field(metadata=_NON_NEGATIVE)
    pairs: int = field(metadata=_NON_NEGATIVE)
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", DecisionKind(self.verdict))


@dataclass(frozen=True)
class ABRound(Record):
    """Figures of one round of consecutive A/B pairs (nearest rank, in ns): a drift or a
    slow spell shows as one round out of line, on both sides if pairing did its job."""

    SCHEMA_NAME: ClassVar[str] = "round"

    round: int = field(metadata=_NON_NEGATIVE)
    first_pair: int = field(metadata=_NON_NEGATIVE)
    pairs: int = field(metadata=_NON_NEGATIVE)
    a_p50: float = field(metadata=_NON_NEGATIVE)
    a_p95: float = field(metadata=_NON_NEGATIVE)
    b_p50: float = field(metadata=_NON_NEGATIVE)
    b_p95: float = field(metadata=_NON_NEGATIVE)
    ratio: float = field(metadata=_NON_NEGATIVE)  # b_p95 / a_p95


@dataclass(frozen=True)
class ABDetail(Record):
    """The paired figures behind a same-run A/B verdict (``ScenarioVerdict.ab``): the base
    commit and how it was chosen, the stopping rule's decision, the time spent, the
    per-round figures and the base side's raw samples (the report's baseline). A cell
    under load also keeps the base side's median round throughput (``throughput_a``)
    and the load figures of its last usable round (``load_a``, ``LoadFigures.to_dict()``):
    the report's base side of the cell, built as the head's result is; both absent
    (and out of the JSON) for other cells and in files written before them. A profiled
    cell keeps the base side's operator profile (``profile_a``), taken in the worker
    that measured it: what the working tree's profile is diffed against; absent (and
    out of the JSON) when the base side was not profiled. A cell under load says how its
    rounds ran (``levels``): ``interleaved`` (one level per round, A's and B's requests
    alternating on every client) or ``alternating`` (a whole level of each side, one
    after the other); ``alone`` is a cell whose server needs its device to itself, each
    side's whole measurement alone, one after the other (no rounds, no pairs: the
    decision is the archived rule's on the gated latency figure); absent for request
    pairs and in files written before it. A
    generative cell keeps the base side's token figures (``tokens_a``), read from the
    same pairs as the head's; absent for other cells."""

    SCHEMA_NAME: ClassVar[str] = "ab"

    base: str
    base_how: str
    decision: Decision
    elapsed_s: float = field(metadata=_NON_NEGATIVE)
    rounds: tuple[ABRound, ...] = ()
    samples_a_ns: tuple[int, ...] = field(default=(), metadata=_NON_NEGATIVE)
    throughput_a: float | None = field(default=None, metadata=spec(omit="none", minimum=0))
    load_a: Mapping[str, Any] | None = field(default=None, metadata=spec(omit="none"))
    profile_a: OperatorProfile | None = field(
        default=None, metadata=spec(omit="none", codec=PROFILE_CODEC)
    )
    levels: str | None = field(
        default=None,
        metadata=spec(
            omit="none",
            values=("interleaved", "alternating", "alone"),
            description="How a cell under load ran its rounds: one level per round whose "
            "clients alternate between A's and B's requests (interleaved), or a whole level "
            "of each side, one after the other (alternating); or how any cell whose server "
            "needs its device to itself ran: each side's whole measurement alone, one "
            "after the other, judged by the archived gate's rules (alone); absent for "
            "request pairs and in files written before it.",
        ),
    )
    tokens_a: TokenFigures | None = field(default=None, metadata=spec(omit="none"))


@dataclass(frozen=True)
class MetricVerdict(Record):
    """One gated figure of one scenario, compared against the baseline.

    Units: ``unit`` is ``ns`` for latency percentiles, ``/s`` for throughput and
    ``MiB`` for peak memory; ``baseline``/``current`` are raw (as measured).
    ``ratio`` is current/baseline as decided on (machine-speed normalised when
    ``normalised``); ``ratio_raw`` is the un-normalised one, always shown beside.
    ``lower``/``upper`` bound ``ratio`` one-sidedly at ``confidence`` each (None
    for figures without per-request samples). ``canary_ratio`` is
    baseline canary / current canary, the factor applied to latency ratios.
    ``limit`` is the gate as configured (a fraction when ``relative``, else an
    amount in the metric's gate unit: ms, /s or MiB); ``effective_limit`` is in
    the same terms after widening to ``noise_k * noise_floor``. ``noise_floor``
    is the relative spread of the scenario's normalised P95 over
    ``noise_commits`` stored commits (None when too few to estimate, and for
    memory); it widens latency and throughput gates. ``samples_needed`` is the
    order-statistic minimum per run for a percentile gate.
    """

    SCHEMA_NAME: ClassVar[str] = "metric"

    metric: str
    verdict: VerdictKind
    message: str
    rule: str
    unit: str = "ns"
    baseline: float | None = field(default=None, metadata=_NON_NEGATIVE)
    current: float | None = field(default=None, metadata=_NON_NEGATIVE)
    ratio: float | None = field(default=None, metadata=_NON_NEGATIVE)
    ratio_raw: float | None = field(default=None, metadata=_NON_NEGATIVE)
    lower: float | None = field(default=None, metadata=_NON_NEGATIVE)
    upper: float | None = field(default=None, metadata=_NON_NEGATIVE)
    confidence: float = field(default=0.99, metadata=spec(minimum=0, maximum=1))
    normalised: bool = False
    canary_ratio: float | None = field(default=None, metadata=_NON_NEGATIVE)
    limit: float = 0.0
    relative: bool = True
    higher_is_worse: bool = True
    effective_limit: float = 0.0
    noise_floor: float | None = field(default=None, metadata=_NON_NEGATIVE)
    noise_commits: int = field(default=0, metadata=_NON_NEGATIVE)
    noise_k: float = field(default=0.0, metadata=_NON_NEGATIVE)
    n_baseline: int | None = field(default=None, metadata=_NON_NEGATIVE)
    n_current: int | None = field(default=None, metadata=_NON_NEGATIVE)
    samples_needed: int | None = field(default=None, metadata=_NON_NEGATIVE)

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", VerdictKind(self.verdict))

    @property
    def change(self) -> float | None:
        """Relative change decided on (``ratio - 1``), e.g. 0.124 for +12.4%."""
        return None if self.ratio is None else self.ratio - 1.0

    def thresholds(self) -> tuple[float, float]:
        """(lo, hi) on ``ratio``: above hi it went up, below lo down, beyond the limit.

        Relative limits are symmetric in log space (1 + L and 1 / (1 + L)), so
        swapping the two runs mirrors the verdict; absolute ones are baseline
        +- L, as a ratio.
        """
        if self.relative:
            return 1.0 / (1.0 + self.effective_limit), 1.0 + self.effective_limit
        base = (self.baseline or 0.0) * limit_unit(self.unit)[1]
        if base <= 0.0:
            return 0.0, math.inf
        step = self.effective_limit / base
        return 1.0 - step, 1.0 + step

    @property
    def detectable(self) -> float | None:
        """The smallest relative regression this comparison could have flagged.

        A regression needs the ratio beyond the (noise-widened) limit *and* its lower
        bound above 1. With the spread this run had (``ratio / lower``), a true change
        ``d`` shows with its bound near ``(1 + d) * lower / ratio``, so the gate can
        see ``max(effective limit, ratio / lower - 1)``: e.g. 0.23 when a +5% gate
        widened by the noise floor, or a wide A/B bootstrap interval, sees only +23%.
        Only latency and throughput gates with a relative limit have one (None else);
        without per-request bounds it is the effective limit.
        """
        if not self.relative or self.ratio is None or self.ratio <= 0.0:
            return None
        if self.lower is None or self.upper is None:
            return self.effective_limit
        bound = self.lower if self.higher_is_worse else 1.0 / self.upper
        ratio = self.ratio if self.higher_is_worse else 1.0 / self.ratio
        if bound <= 0.0:
            return math.inf
        return max(self.effective_limit, ratio / bound - 1.0)

    @property
    def blind(self) -> bool:
        """True when the gate could not have seen a regression of its own limit."""
        seen = self.detectable
        return seen is not None and seen > self.limit * (1.0 + 1e-9) + 1e-12

    @property
    def label(self) -> str:
        """How messages name the metric: ``P95 latency``, ``throughput``, ``peak memory``."""
        return metric_name(self.metric)


#: ``{baseline, current}`` of one differing environment field (``[baseline, current]`` in
#: a baseline choice).
PAIR_SCHEMA: dict[str, Any] = {
    "type": ["object", "array"],
    "description": "{baseline, current} in a verdict, [baseline, current] in the baseline choice",
    "properties": {
        "baseline": {"type": ["string", "null"]},
        "current": {"type": ["string", "null"]},
    },
    "items": {"type": ["string", "null"]},
}


def _env_diff(value: Any) -> dict[str, tuple[str | None, str | None]]:
    return {str(k): (v.get("baseline"), v.get("current")) for k, v in value.items()}


# Hand-written: a pair is a tuple in the record and a {baseline, current} object in JSON.
ENV_DIFF_CODEC = Codec(
    encode=lambda diff: {k: {"baseline": b, "current": c} for k, (b, c) in diff.items()},
    decode=lambda value, source, path: _env_diff(value),
    schema={"type": "object", "additionalProperties": PAIR_SCHEMA},
    expected="an object of {baseline, current} pairs",
)


@dataclass(frozen=True)
class ScenarioVerdict(Record):
    """All gates of one scenario: the worst metric verdict, and why.

    ``env_diff`` maps each differing environment field to (baseline, current);
    it is non-empty only for ``incomparable``. ``messages`` are one-line,
    reviewer-actionable sentences: scenario-level ones first, then one per
    metric, then notes added later (e.g. by confirmation re-measurement).
    """

    SCHEMA_NAME: ClassVar[str] = "verdict"

    scenario_id: str = field(metadata=spec(min_length=1))
    verdict: VerdictKind
    metrics: tuple[MetricVerdict, ...] = ()
    baseline_commit: str | None = field(default=None, metadata=_SHA)
    env_diff: dict[str, tuple[str | None, str | None]] = field(
        default_factory=dict, metadata=spec(codec=ENV_DIFF_CODEC)
    )
    messages: tuple[str, ...] = ()
    # "archived": against a stored baseline; "ab": the base revision measured again
    # in this run, interleaved request by request (``ab`` then holds the paired figures).
    mode: str = field(default="archived", metadata=spec(values=("archived", "ab")))
    ab: ABDetail | None = None
    # What this runner's calibration sheet says of the cell's gate (perfguard calibrate);
    # absent without a sheet, and in files written before it.
    calibration: CalibrationNote | None = field(default=None, metadata=spec(omit="none"))

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", VerdictKind(self.verdict))

    @property
    def failed(self) -> bool:
        """True when this verdict should fail the pull request."""
        return self.verdict.failed

    def metric(self, name: str) -> MetricVerdict | None:
        """The verdict of the gate on ``name`` (first one), if any."""
        return next((m for m in self.metrics if m.metric == name), None)

    def with_note(self, note: str) -> ScenarioVerdict:
        return replace(self, messages=(*self.messages, note))


# --------------------------------------------------------------------------- confirmation


def needs_confirmation(verdict: ScenarioVerdict) -> bool:
    """True when the plugin should re-measure before failing: a suspected regression."""
    return verdict.failed


def confirm(verdicts: Sequence[ScenarioVerdict]) -> ScenarioVerdict:
    """Combine the first verdict and its re-measurement rounds of one scenario.

    A regression stands only when *every* round regressed: a slow spell or a
    tail burst rarely repeats in the next round, a real slowdown always does.
    Otherwise the last non-regression round's verdict is returned, noted.
    """
    if not verdicts:
        raise ValueError("confirm() needs at least one verdict")
    ids = {v.scenario_id for v in verdicts}
    if len(ids) != 1:
        raise ValueError(f"confirm() got verdicts of several scenarios: {sorted(ids)}")
    total = len(verdicts)
    if total == 1:
        return verdicts[0]
    regressed = sum(v.failed for v in verdicts)
    if regressed == total:
        last = verdicts[-1]
        if total == 1:
            return last
        return last.with_note(f"regression confirmed on re-measurement ({total} of {total} rounds)")
    chosen = [v for v in verdicts if not v.failed][-1]
    return chosen.with_note(
        f"regression not confirmed on re-measurement ({regressed} of {total} rounds)"
    )


# --------------------------------------------------------------------------- wording


def metric_name(metric: str) -> str:
    """``p95`` -> ``P95 latency``; ``throughput``; ``peak memory`` (the policy's labels)."""
    spec = gate_metric(metric)
    return spec.label if spec is not None else metric.lower()


def format_value(unit: str, value: float) -> str:
    if unit == "ns":
        for scale, name in ((1e9, "s"), (1e6, "ms")):
            if value >= scale:
                return f"{value / scale:.2f} {name}"
        return f"{value / 1e3:.1f} us" if value >= 1e3 else f"{value:.0f} ns"
    if unit == "/s":
        return f"{value:.1f}/s"
    return f"{value:.1f} {unit}".rstrip()


def pct(ratio: float) -> str:
    """A ratio as a signed change: 1.124 -> ``+12.4%``."""
    return f"{(ratio - 1.0) * 100:+.1f}%"


def baseline_ref(commit: str | None) -> str:
    return f"baseline {commit[:7]}" if commit else "the baseline"


def describe(
    m: MetricVerdict, baseline_commit: str | None, against: str | None = None
) -> tuple[str, str]:
    """(rule, message) for a decided comparison (``ratio`` and both values set).

    The message is one line a reviewer can act on: the change as decided, the
    raw figures, the bound that made it significant, the baseline commit and
    the limit, e.g. ``P95 latency regressed +12.4% (3.21 ms -> 3.61 ms; 99%
    lower bound +9.8%) vs baseline 1a2b3c4 (limit +5%)``. ``against`` names the
    other side instead of the baseline commit (same-run A/B: ``base 1a2b3c4
    measured in this run``).
    """
    if m.ratio is None or m.baseline is None or m.current is None:
        raise ValueError("describe() needs a decided MetricVerdict (ratio and values set)")
    lo, hi = m.thresholds()
    conf = f"{m.confidence:.0%}"
    rule = _rule(m.ratio, m.lower, m.upper, lo, hi, conf, m.higher_is_worse)

    change = pct(m.ratio) + (" machine-speed normalised" if m.normalised else "")
    detail = f"{format_value(m.unit, m.baseline)} -> {format_value(m.unit, m.current)}"
    if m.normalised and m.ratio_raw is not None:
        detail = f"raw {pct(m.ratio_raw)}: {detail}"
    if m.lower is None or m.upper is None:
        detail += "; point estimate, no per-request samples"
    elif m.verdict in (VerdictKind.REGRESSION, VerdictKind.IMPROVEMENT):
        # The bound that made it significant: the one nearest to 1.
        use_lower = m.verdict.failed == m.higher_is_worse
        which, value = ("lower", m.lower) if use_lower else ("upper", m.upper)
        detail += f"; {conf} {which} bound {pct(value)}"
    else:
        detail += f"; {conf} bounds {pct(m.lower)}..{pct(m.upper)}"

    sign = "+" if m.higher_is_worse else "-"
    gate_unit = limit_unit(m.unit)[0]
    limit = f"limit {sign}{m.limit * 100:g}%" if m.relative else f"limit {m.limit:g} {gate_unit}"
    if m.noise_floor is not None and m.effective_limit > m.limit:
        eff = (
            f"{sign}{m.effective_limit:.1%}"
            if m.relative
            else f"{m.effective_limit:.3g} {gate_unit}"
        )
        limit += (
            f", widened to {eff} by noise floor {m.noise_floor:.1%} x{m.noise_k:g} "
            f"over {m.noise_commits} commits"
        )
    verb = {VerdictKind.REGRESSION: "regressed", VerdictKind.IMPROVEMENT: "improved"}.get(
        m.verdict, "unchanged"
    )
    message = (
        f"{metric_name(m.metric)} {verb} {change} ({detail}) "
        f"vs {against or baseline_ref(baseline_commit)} ({limit})"
    )
    if m.verdict == VerdictKind.UNCHANGED and not lo <= m.ratio <= hi:
        message += "; beyond the limit but not significant"
    elif m.verdict == VerdictKind.IMPROVEMENT:
        message += "; record a new baseline to lock it in"
    if m.verdict != VerdictKind.REGRESSION and m.blind:
        message += f"; {detectable_note(m)}"
    return rule, message


def detectable_note(m: MetricVerdict) -> str:
    """``only >= +23% was detectable`` (the gate's blind spot), or ``no change was ...``."""
    seen = m.detectable
    if seen is None or math.isinf(seen):
        return "no change was detectable"
    sign = "+" if m.higher_is_worse else "-"
    return f"only >= {sign}{seen * 100:.0f}% was detectable"


def _rule(
    ratio: float,
    lower: float | None,
    upper: float | None,
    lo: float,
    hi: float,
    conf: str,
    higher_is_worse: bool,
) -> str:
    if ratio > hi:
        if lower is None:
            return f"ratio {ratio:.3f} > {hi:.3f} (point estimate only)"
        sig = "> 1" if lower > 1.0 else "<= 1: not significant"
        return f"ratio {ratio:.3f} > {hi:.3f} and {conf} lower bound {lower:.3f} {sig}"
    if ratio < lo:
        if upper is None:
            return f"ratio {ratio:.3f} < {lo:.3f} (point estimate only)"
        sig = "< 1" if upper < 1.0 else ">= 1: not significant"
        return f"ratio {ratio:.3f} < {lo:.3f} and {conf} upper bound {upper:.3f} {sig}"
    direction = "higher is worse" if higher_is_worse else "lower is worse"
    return f"ratio {ratio:.3f} within [{lo:.3f}, {hi:.3f}] ({direction})"
