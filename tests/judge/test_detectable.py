"""What a gate can see: the smallest regression a comparison could have flagged."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from perfguard.judge.verdict import MetricVerdict, VerdictKind


def _flags(m: MetricVerdict) -> bool:
    """The regression rule: beyond the limit, and the bound nearest 1 beyond 1."""
    lo, hi = m.thresholds()
    assert m.ratio is not None and m.lower is not None and m.upper is not None
    if m.higher_is_worse:
        return m.ratio > hi and m.lower > 1.0
    return m.ratio < lo and m.upper < 1.0


@given(
    ratio=st.floats(0.5, 2.0),
    below=st.floats(1.0001, 1.5),
    above=st.floats(1.0001, 1.5),
    limit=st.floats(0.01, 0.3),
    widen=st.floats(1.0, 5.0),
    higher_is_worse=st.booleans(),
)
def test_detectable_is_the_smallest_change_the_rule_flags(
    ratio: float, below: float, above: float, limit: float, widen: float, higher_is_worse: bool
) -> None:
    """Shift the measured interval so its point sits just above / below the detectable
    change (same spread): the gate's own rule flags the first and not the second."""
    lower, upper = ratio / below, ratio * above
    m = MetricVerdict(
        metric="p95" if higher_is_worse else "throughput",
        verdict=VerdictKind.UNCHANGED,
        message="",
        rule="",
        ratio=ratio,
        lower=lower,
        upper=upper,
        limit=limit,
        effective_limit=limit * widen,
        higher_is_worse=higher_is_worse,
    )
    d = m.detectable
    assert d is not None and d >= m.effective_limit
    assert m.blind == (d > limit * (1 + 1e-9) + 1e-12)
    for factor, expected in ((1.001, True), (0.999, False)):
        target = (1.0 + d) * factor
        point = target if higher_is_worse else 1.0 / target
        shift = point / ratio
        moved = replace(m, ratio=point, lower=lower * shift, upper=upper * shift)
        assert _flags(moved) is expected, (factor, moved)


def test_detectable_without_bounds_is_the_effective_limit_and_none_for_absolute() -> None:
    base = MetricVerdict("p95", VerdictKind.UNCHANGED, "", "", ratio=1.02, limit=0.05)
    assert replace(base, effective_limit=0.05).detectable == 0.05
    assert not replace(base, effective_limit=0.05).blind
    assert replace(base, effective_limit=0.25).blind
    assert replace(base, relative=False, effective_limit=2.0).detectable is None
    assert replace(base, ratio=None).detectable is None
