"""Compare a run with its baseline: one verdict per scenario, and the reasons.

Decision rule for a latency percentile gate (e.g. ``p95``, limit L = 5%)
-----------------------------------------------------------------------
With r = P_cur / P_base (nearest-rank percentiles of the per-request samples)
and [lo, hi] its bootstrap bounds, each one-sided at ``confidence`` (99%):

* **regression** when r > 1 + L_eff AND lo > 1;
* **improvement** when r < 1 / (1 + L_eff) AND hi < 1 (the mirror image in log
  space, so swapping baseline and current turns one into the other);
* **unchanged** otherwise.

Why both conditions. The point estimate beyond the limit says the change is
big enough to matter; the bound above 1 says it is not an artefact of sampling
the tail of *this* run (a P95 rests on the few slowest requests). A bound-only
rule (lo > 1 + L) would need roughly twice the effect to fire, and a
point-only rule (what pytest-benchmark does with the mean) fires on every tail
outlier burst (figures: ``benchmarks/notes.md``).

Noise floor. The bootstrap only knows the noise *within* one run; runs in
separate processes differ more (``benchmarks/notes.md``). ``history`` holds this
scenario's normalised P95 at earlier stored commits of the same machine fingerprint;
its relative spread ``noise_floor`` (std/mean, needs >= ``MIN_HISTORY`` values) widens the limit:
``L_eff = max(L, NOISE_K * noise_floor)`` with ``NOISE_K = 2``. A ratio of two
launches spreads by about sqrt(2) * noise_floor, so a 2x margin puts the limit
~1.4 of those spreads out (~8% per round if normal), and the confirmation
re-measurement (``confirm``, every round must regress) brings that down
further. A gate tighter than the machine can resolve is thus widened, visibly
(both limits are in the verdict), rather than crying wolf.

Machine-speed normalisation. When both sides carry ``canary_ns``, latency
ratios are multiplied by ``canary_base / canary_current`` (each side's samples
divided by its own canary), throughput ratios by the inverse: a host slow spell
that slows model and canary alike cancels out. The raw ratio is kept beside.

Run-level checks override the metrics (figures stay for the report): an
unstable current run, or one measured while other processes used more than the
contention limit of the CPUs (``runtime.foreign_cpu``; the limit is a setting, default
``perfguard.core.policy.CONTENTION_LIMIT``; see ``perfguard.measure.canary``: such
contention slows a multi-threaded runtime 1.5-5x and the canary cannot see it), is
``invalid``; differing environments make it ``incomparable``. An unstable or contended
*baseline* only adds a note.

Sample count. A one-sided order-statistic bound at confidence c on the q-th
percentile exists only when the largest of n samples exceeds it with
probability c: 1 - q**n >= c, i.e. n >= log(1 - c) / log(q). For P95 at 99%
that is 90 samples per run (P99: 459, P50: 7); fewer gives ``invalid``.

Throughput and peak memory (one figure per run) are decided on the point
estimate; memory is never normalised. Absolute limits (``relative: false``, in
ms, /s or MiB) become a relative limit at the baseline's value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from perfguard.core.policy import (
    CONFIDENCE,
    CONTENTION_LIMIT,
    DEFAULT_GATES,
    METRICS,
    MIN_HISTORY,
    NOISE_K,
    NORMALISE,
    REFUSED_METRICS,
    GateMetric,
    GateSpec,
    MetricKind,
    gate_metric,
    limit_unit,
    samples_needed,
)
from perfguard.core.stats import (
    clustered_percentile_ratio_bound,
    noise_floor,
    percentile,
    percentile_ratio_bound,
)
from perfguard.judge.verdict import (
    MetricVerdict,
    ScenarioVerdict,
    VerdictKind,
    baseline_ref,
    confirm,
    describe,
    needs_confirmation,
    worst,
)
from perfguard.records.results import Environment, RunResult, ScenarioResult, Status

__all__ = [
    "compare_memory",
    "compare_runs",
    "compare_scenario",
    "confirm",
    "environment_diff",
    "needs_confirmation",
]


# --------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class _Figure:
    """What one side offers for one gate."""

    value: float | None
    # Latency gates only: the samples the percentile is read from; 2-D for clustered
    # samples (a generative request's inter-token gaps: one row per request).
    samples: np.ndarray | None
    n: int | None


def _figure(result: ScenarioResult, metric: GateMetric) -> _Figure:
    if metric.kind is MetricKind.THROUGHPUT:
        if metric.name == "tokens_per_s":
            tokens = result.tokens
            return _Figure(tokens.tokens_per_s if tokens else None, None, None)
        if metric.name == "goodput":
            good = result.load.goodput if result.load is not None else None
            return _Figure(good.per_s if good is not None else None, None, None)
        return _Figure(result.throughput, None, None)
    if metric.kind is MetricKind.MEMORY:
        if metric.name == "gpu_mem":
            return _Figure(result.gpu_peak_memory_mib, None, None)
        return _Figure(result.peak_memory_mib, None, None)
    assert metric.quantile is not None
    if metric.samples != "request":  # a generative cell's token figures
        if result.tokens is None:
            return _Figure(None, None, None)
        arr = result.tokens.samples(metric.samples)
        if arr.size == 0:
            return _Figure(None, None, None)
        return _Figure(percentile(arr.ravel(), metric.quantile), arr, int(arr.size))
    if result.samples_ns:
        arr = np.asarray(result.samples_ns, dtype=np.float64)
        return _Figure(percentile(arr, metric.quantile), arr, int(arr.size))
    if result.latency_ns is not None:  # summary only: point estimate
        return _Figure(float(getattr(result.latency_ns, metric.name)), None, result.latency_ns.n)
    return _Figure(None, None, None)


# --------------------------------------------------------------------------- metric


def _compare_metric(
    gate: GateSpec,
    current: ScenarioResult,
    baseline: ScenarioResult,
    *,
    commit: str | None,
    confidence: float,
    normalise: bool,
    history: Sequence[float],
    noise_k: float,
    against: str | None = None,
) -> MetricVerdict:
    spec = gate_metric(gate.metric)
    metric = gate.metric.lower()
    name = spec.label if spec is not None else metric
    base_ref = baseline_ref(commit)
    common = MetricVerdict(
        metric=gate.metric,
        verdict=VerdictKind.INVALID,
        message="",
        rule="",
        unit=spec.unit if spec is not None else "",
        confidence=confidence,
        limit=gate.limit,
        relative=gate.relative,
        higher_is_worse=gate.higher_is_worse,
        effective_limit=gate.limit,
        noise_k=noise_k,
        noise_commits=len(history),
    )
    if spec is None:
        why = REFUSED_METRICS.get(metric)
        return replace(
            common,
            verdict=VerdictKind.INVALID,
            rule="unknown metric",
            message=f"gate on `{metric}` refused: {why}"
            if why
            else f"gate on unknown metric {gate.metric!r}; "
            f"use one of {', '.join(m.name for m in METRICS)}",
        )
    kind = spec.kind
    cur, base = _figure(current, spec), _figure(baseline, spec)
    common = replace(
        common, baseline=base.value, current=cur.value, n_baseline=base.n, n_current=cur.n
    )
    if base.value is None or (kind is MetricKind.MEMORY and cur.value is None):
        side = "the baseline" if base.value is None else "this run"
        return replace(
            common,
            verdict=VerdictKind.NEW,
            rule="figure absent",
            message=f"{name} not gated: {side} recorded none; gated once both have it",
        )
    if cur.value is None:
        return replace(
            common,
            verdict=VerdictKind.INVALID,
            rule="figure absent",
            message=f"{name} not gated: this run recorded none although the scenario passed",
        )
    q = spec.quantile
    needed = samples_needed(q, confidence) if q is not None else None
    common = replace(common, samples_needed=needed)
    if needed is not None and min(cur.n or 0, base.n or 0) < needed:
        return replace(
            common,
            verdict=VerdictKind.INVALID,
            rule=f"too few samples: a {confidence:.0%} bound on {metric} needs >= {needed}",
            message=f"{name} not gated: {cur.n or 0} samples in this run, {base.n or 0} in "
            f"{base_ref}; a {confidence:.0%} bound on {metric.upper()} needs >= {needed} per run "
            f"(order statistics: 1 - {(q or 0.0) / 100:g}^n >= {confidence:g}). "
            f"Fix: raise the scenario's measure iterations to >= {needed}",
        )
    if base.value <= 0.0:
        return replace(
            common,
            verdict=VerdictKind.INVALID,
            rule="baseline figure <= 0",
            message=f"{name} not gated: {base_ref} recorded {base.value}; re-record the baseline",
        )

    # --- ratio and its bounds
    ratio_raw = cur.value / base.value
    lower: float | None = None
    upper: float | None = None
    if cur.samples is not None and base.samples is not None:
        try:
            lower, upper = _symmetric_bound(base.samples, cur.samples, spec, confidence)
        except ValueError as exc:  # e.g. a zero-latency sample
            return replace(
                common,
                rule="bound failed",
                message=f"{name} not gated: no confidence bound ({exc})",
            )

    factor = 1.0
    canary_ratio: float | None = None
    if current.canary_ns and baseline.canary_ns and current.canary_ns > 0:
        canary_ratio = baseline.canary_ns / current.canary_ns
    normalised = normalise and kind is not MetricKind.MEMORY and canary_ratio is not None
    if normalised and canary_ratio is not None:
        # Latency scales with slowness; throughput with speed.
        factor = canary_ratio if kind is MetricKind.LATENCY else 1.0 / canary_ratio
    ratio = ratio_raw * factor
    lower = None if lower is None else lower * factor
    upper = None if upper is None else upper * factor

    # --- limits: the gate's, widened by the noise floor when that is wider.
    base_in_gate_unit = base.value * limit_unit(common.unit)[1]
    rel_limit = gate.limit if gate.relative else gate.limit / base_in_gate_unit
    floor: float | None = None
    effective = gate.limit
    if kind is not MetricKind.MEMORY and len(history) >= MIN_HISTORY:
        floor = noise_floor(history)
        if noise_k * floor > rel_limit:
            effective = noise_k * floor * (1.0 if gate.relative else base_in_gate_unit)
    decided = replace(
        common,
        effective_limit=effective,
        ratio=ratio,
        ratio_raw=ratio_raw,
        lower=lower,
        upper=upper,
        normalised=normalised,
        canary_ratio=canary_ratio,
        noise_floor=floor,
    )
    lo, hi = decided.thresholds()
    up = ratio > hi and (lower is None or lower > 1.0)
    down = ratio < lo and (upper is None or upper < 1.0)
    worse, better = (up, down) if gate.higher_is_worse else (down, up)
    decided = replace(
        decided,
        verdict=VerdictKind.REGRESSION
        if worse
        else VerdictKind.IMPROVEMENT
        if better
        else VerdictKind.UNCHANGED,
    )
    rule, message = describe(decided, commit, against)
    return replace(decided, rule=rule, message=message)


def compare_memory(
    gate: GateSpec,
    current: ScenarioResult,
    baseline: ScenarioResult,
    *,
    commit: str | None,
    against: str | None = None,
    confidence: float = CONFIDENCE,
) -> MetricVerdict:
    """One memory gate (``peak_memory``, ``gpu_mem``) decided on two results by the
    archived gate's rule (the point estimate against the limit; memory is never
    normalised nor widened): same-run A/B judges memory with it too, ``against``
    naming its base side in the message."""
    spec = gate_metric(gate.metric)
    if spec is None or spec.kind is not MetricKind.MEMORY:
        raise ValueError(f"compare_memory takes a memory gate, not {gate.metric!r}")
    decided = _compare_metric(
        gate,
        current,
        baseline,
        commit=commit,
        confidence=confidence,
        normalise=False,
        history=(),
        noise_k=NOISE_K,
    )
    if against is None or decided.ratio is None:
        return decided
    rule, message = describe(decided, commit, against)
    return replace(decided, rule=rule, message=message)


def _symmetric_bound(
    base: np.ndarray, current: np.ndarray, metric: GateMetric, confidence: float
) -> tuple[float, float]:
    """Bounds on current/base, each one-sided at ``confidence``.

    The bootstrap interval is two-sided, so it is asked at 2c - 1 (99% one-sided
    = 98% two-sided). It is run both ways round and the union kept: the seeded
    resampling otherwise depends on which run is called the baseline, and a
    verdict must not (swapping the runs must turn a regression into an
    improvement, nothing else). The union is slightly conservative; the two
    bootstraps cost O(n log n) each.
    """
    q = metric.quantile
    assert q is not None, metric.name
    bound = clustered_percentile_ratio_bound if base.ndim == 2 else percentile_ratio_bound
    forward = bound(base, current, q, 2.0 * confidence - 1.0)
    backward = bound(current, base, q, 2.0 * confidence - 1.0)
    return min(forward.lower, 1.0 / backward.upper), max(forward.upper, 1.0 / backward.lower)


# --------------------------------------------------------------------------- scenario


def compare_scenario(
    current: ScenarioResult | None,
    baseline: ScenarioResult | None,
    gates: Sequence[GateSpec],
    *,
    baseline_commit: str | None,
    env_diff: Mapping[str, tuple[str | None, str | None]] | None = None,
    history: Sequence[float] = (),
    confidence: float = CONFIDENCE,
    normalise: bool = NORMALISE,
    noise_k: float = NOISE_K,
    contention_limit: float = CONTENTION_LIMIT,
    against: str | None = None,
) -> ScenarioVerdict:
    """Verdict of one scenario against its baseline result (see the module docstring).

    ``current`` None means the scenario is in the baseline only (``missing``).
    ``env_diff`` maps differing environment fields to (baseline, current); when
    non-empty nothing is gated (``incomparable``), though figures are still
    computed for the report. ``history``: normalised P95s (any one unit) of this
    scenario at earlier stored commits of the same fingerprint. ``contention_limit``: the
    share of all CPUs other processes may use while a run is measured before it is invalid.
    ``against`` names the other side in the messages instead of the baseline commit (the
    A/B base measured in this run, one side at a time).
    """
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}; expected a number in (0.5, 1)")
    if current is None and baseline is None:
        raise ValueError("compare_scenario needs a current or a baseline result")
    diff = dict(env_diff or {})
    base_ref = baseline_ref(baseline_commit)

    def verdict_of(
        kind: VerdictKind, metrics: Sequence[MetricVerdict], *notes: str
    ) -> ScenarioVerdict:
        sid = current.id if current is not None else baseline.id  # type: ignore[union-attr]
        return ScenarioVerdict(
            scenario_id=sid,
            verdict=worst([kind, *(m.verdict for m in metrics)]),
            metrics=tuple(metrics),
            baseline_commit=baseline_commit,
            env_diff=diff if kind == VerdictKind.INCOMPARABLE else {},
            messages=(*notes, *(m.message for m in metrics)),
        )

    if current is None:
        assert baseline is not None
        return verdict_of(
            VerdictKind.MISSING,
            (),
            f"in {base_ref} but not measured in this run (renamed, deleted or "
            "deselected?); if intended, record a new baseline",
        )
    if not current.passed and not _failed_by_a_check(current):
        why = f": {current.message}" if current.message else ""
        return verdict_of(
            VerdictKind.INVALID, (), f"scenario {current.status}{why}; it has no figures to compare"
        )
    if baseline is None or not baseline.passed:
        why = (
            "no baseline for this scenario" + (f" in {base_ref}" if baseline_commit else "")
            if baseline is None
            else f"{base_ref} has no figures for this scenario ({baseline.status})"
        )
        return verdict_of(VerdictKind.NEW, (), f"{why}; it is gated once a baseline includes it")

    metrics = [
        _compare_metric(
            gate,
            current,
            baseline,
            commit=baseline_commit,
            confidence=confidence,
            normalise=normalise,
            history=history,
            noise_k=noise_k,
            against=against,
        )
        for gate in gates
    ]
    # Run-level problems override every metric's decision; the figures stay for the report.
    override: tuple[VerdictKind, str] | None = None
    foreign = _foreign_cpu(current)
    if not current.stable:
        ratio = current.stability_ratio
        drift = f" (median of last third / first third = {ratio:.2f})" if ratio else ""
        override = (
            VerdictKind.INVALID,
            f"this run was unstable{drift}; the host was busy. "
            "Fix: re-run; if it persists, raise warmup",
        )
    elif foreign is not None and foreign > contention_limit:
        override = (
            VerdictKind.INVALID,
            f"other processes used {foreign:.0%} of the CPUs while this run was measured "
            f"(limit {contention_limit:.0%}); a multi-threaded runtime slows several-fold "
            "under such contention and no canary corrects it. Fix: re-run on an idle machine",
        )
    elif diff:
        fields = ", ".join(f"{k}: {b} -> {c}" for k, (b, c) in diff.items())
        override = (
            VerdictKind.INCOMPARABLE,
            f"environment differs from {base_ref} ({fields}); record a baseline on this machine",
        )
    notes = [
        f"{who} fell short of its rate: {figures.shortfall}"
        for who, figures in (("this level", current.load), (f"{base_ref}'s level", baseline.load))
        if figures is not None and figures.shortfall
    ]
    if not baseline.stable or (_foreign_cpu(baseline) or 0.0) > contention_limit:
        # Not invalid: a pooled multi-launch baseline is still the best figure there is.
        notes.append(
            f"{base_ref} was measured unstable or on a busy machine; consider re-recording"
        )
    if override is None:
        return verdict_of(VerdictKind.UNCHANGED, metrics, *notes)
    kind, why = override
    # Each metric's message stands alone (the report shows it per metric); the
    # scenario's messages say the reason once, not again per metric it switched off.
    own = [m.message for m in metrics if m.verdict == VerdictKind.INVALID]
    metrics = [
        m
        if m.verdict == VerdictKind.INVALID
        else replace(m, verdict=kind, rule=why, message=f"{m.label} not gated: {why}")
        for m in metrics
    ]
    return ScenarioVerdict(
        scenario_id=current.id,
        verdict=worst([kind, *(m.verdict for m in metrics)]),
        metrics=tuple(metrics),
        baseline_commit=baseline_commit,
        env_diff=diff if kind == VerdictKind.INCOMPARABLE else {},
        messages=tuple(dict.fromkeys([why, *notes, *own])),
    )


def _failed_by_a_check(result: ScenarioResult) -> bool:
    """A cell the gate or an accuracy check failed: measured, then failed on its figures.

    The plugin judged it on those figures before failing it, so a stored run is judged on
    them too (``perfguard compare`` and ``report`` agree with the run's comparison.json).
    A cell that failed to measure (no figures, or requests that failed under load) is not.
    """
    load_failed = result.load is not None and result.load.failed > 0
    return result.status == Status.FAILED and result.latency_ns is not None and not load_failed


def _foreign_cpu(result: ScenarioResult) -> float | None:
    """Share of all CPUs other processes used while measuring (``CanaryResult.foreign_cpu``).

    The runner stores it as ``runtime.foreign_cpu``; absent on old results.
    """
    return result.runtime.foreign_cpu


def environment_diff(
    baseline: Environment, current: Environment
) -> dict[str, tuple[str | None, str | None]]:
    """Comparable fields that differ, as (baseline, current); empty when comparable."""
    keys = sorted(set(baseline.comparable) | set(current.comparable))
    diff = {
        k: (baseline.comparable.get(k), current.comparable.get(k))
        for k in keys
        if baseline.comparable.get(k) != current.comparable.get(k)
    }
    if not diff and baseline.fingerprint != current.fingerprint:
        # Same recorded fields, different hash (e.g. fields not recorded): still say why.
        diff["fingerprint"] = (baseline.fingerprint, current.fingerprint)
    return diff


def compare_runs(
    current: RunResult,
    baseline: RunResult | None,
    gates_by_id: Mapping[str, Sequence[GateSpec]],
    *,
    baseline_commit: str | None,
    histories: Mapping[str, Sequence[float]] | None = None,
    confidence: float = CONFIDENCE,
    normalise: bool = NORMALISE,
    contention_limit: float = CONTENTION_LIMIT,
) -> list[ScenarioVerdict]:
    """One verdict per scenario of ``current``, then one ``missing`` per baseline-only id.

    Scenarios absent from ``gates_by_id`` get ``DEFAULT_GATES`` (P95, +5%).
    """
    hist = histories or {}
    commit = baseline_commit or (baseline.commit.sha if baseline is not None else None)
    diff = environment_diff(baseline.environment, current.environment) if baseline else {}
    base_by_id = {s.id: s for s in baseline.scenarios} if baseline is not None else {}
    seen = set()
    out: list[ScenarioVerdict] = []
    for scenario in current.scenarios:
        seen.add(scenario.id)
        out.append(
            compare_scenario(
                scenario,
                base_by_id.get(scenario.id),
                gates_by_id.get(scenario.id, DEFAULT_GATES),
                baseline_commit=commit,
                env_diff=diff,
                history=hist.get(scenario.id, ()),
                confidence=confidence,
                normalise=normalise,
                contention_limit=contention_limit,
            )
        )
    for sid, base in base_by_id.items():
        if sid not in seen:
            out.append(
                compare_scenario(
                    None,
                    base,
                    gates_by_id.get(sid, DEFAULT_GATES),
                    baseline_commit=commit,
                )
            )
    return out
