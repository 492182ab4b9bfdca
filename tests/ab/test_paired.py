"""Paired A/B statistics and the sequential stopping rule, on synthetic data only.

The simulated latencies model an interleaved A/B run: every pair shares a
machine component (per-pair jitter plus occasional slow spells lasting several
pairs), and each request adds its own noise. No test measures or asserts time.
"""

from __future__ import annotations

import json
import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.ab.paired import (
    StoppingRule,
    decide,
    pair_orders,
    paired_bootstrap,
    paired_ratio,
    per_round,
)
from perfguard.core.stats import percentile, percentile_ratio_bound
from perfguard.judge.verdict import ABRound, Decision

SETTINGS = settings(deadline=None, max_examples=60)
FloatArray = npt.NDArray[np.float64]

latencies = st.lists(
    st.floats(min_value=1.0, max_value=1e9, allow_nan=False), min_size=1, max_size=150
)
quantiles = st.sampled_from([50.0, 90.0, 95.0, 99.0])


def synth(
    rng: np.random.Generator, n: int, effect: float = 1.0, spells: str = "shared"
) -> tuple[FloatArray, FloatArray]:
    """``n`` pairs of lognormal latencies (ns); B is ``effect`` times slower.

    ``spells``: "shared" (interleaving: a slow spell hits both requests of a
    pair), "b_only" (what two separate runs risk: the spells land on B alone).
    """
    machine = 2e6 * rng.lognormal(0.0, 0.10, n)  # shared per-pair jitter
    spell = np.convolve(rng.random(n) < 0.005, np.ones(8))[:n] > 0  # ~4% of pairs
    slow = np.where(spell, rng.uniform(1.3, 2.0, n), 1.0)
    a = machine * rng.lognormal(0.0, 0.05, n)
    b = machine * effect * rng.lognormal(0.0, 0.05, n)
    if spells == "shared":
        return a * slow, b * slow
    assert spells == "b_only"
    return a, b * slow


def sequential(rule: StoppingRule, a: FloatArray, b: FloatArray) -> Decision:
    """Feed ``check_every`` more pairs at a time to ``decide`` until it stops."""
    n = rule.check_every
    while True:
        decision = decide(rule, a[:n], b[:n], elapsed_s=0.0)
        if decision.stop:
            return decision
        assert n < rule.max_pairs, "decide must stop at max_pairs"
        n += rule.check_every


def verdicts(rule: StoppingRule, reps: int, effect: float, spells: str, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        sequential(rule, *synth(rng, rule.max_pairs, effect, spells)).verdict for _ in range(reps)
    ]


# --------------------------------------------------------------------------- properties


@SETTINGS
@given(latencies, quantiles)
def test_identical_sides_have_ratio_one_inside_bounds(xs: list[float], q: float) -> None:
    a = np.asarray(xs)
    assert paired_ratio(a, a.copy(), q) == 1.0
    lo, hi = paired_bootstrap(a, a.copy(), q, n_boot=200)
    assert lo <= 1.0 <= hi


@SETTINGS
@given(st.data(), quantiles, st.floats(min_value=1e-3, max_value=1e3))
def test_scaling_b_scales_ratio_and_bounds(data: st.DataObject, q: float, c: float) -> None:
    xs = data.draw(latencies)
    ys = data.draw(st.lists(st.floats(1.0, 1e9), min_size=len(xs), max_size=len(xs)))
    a, b = np.asarray(xs), np.asarray(ys)
    lo, hi = paired_bootstrap(a, b, q, n_boot=200, seed=3)
    lo_c, hi_c = paired_bootstrap(a, b * c, q, n_boot=200, seed=3)
    assert paired_ratio(a, b * c, q) == pytest.approx(c * paired_ratio(a, b, q), rel=1e-12)
    assert lo_c == pytest.approx(c * lo, rel=1e-12)
    assert hi_c == pytest.approx(c * hi, rel=1e-12)


def test_scaling_by_a_power_of_two_is_exact() -> None:
    rng = np.random.default_rng(0)
    a, b = synth(rng, 300)
    lo, hi = paired_bootstrap(a, b)
    assert paired_bootstrap(a, 4.0 * b) == (4.0 * lo, 4.0 * hi)
    assert paired_ratio(a, 4.0 * b) == 4.0 * paired_ratio(a, b)


@SETTINGS
@given(st.data(), quantiles)
def test_swapping_sides_inverts_ratio_and_swaps_bounds(data: st.DataObject, q: float) -> None:
    xs = data.draw(latencies)
    ys = data.draw(st.lists(st.floats(1.0, 1e9), min_size=len(xs), max_size=len(xs)))
    a, b = np.asarray(xs), np.asarray(ys)
    lo_ab, hi_ab = paired_bootstrap(a, b, q, n_boot=200, seed=7)
    lo_ba, hi_ba = paired_bootstrap(b, a, q, n_boot=200, seed=7)
    assert paired_ratio(b, a, q) == pytest.approx(1.0 / paired_ratio(a, b, q), rel=1e-12)
    assert hi_ab == pytest.approx(1.0 / lo_ba, rel=1e-12)
    assert lo_ab == pytest.approx(1.0 / hi_ba, rel=1e-12)


@SETTINGS
@given(st.data(), quantiles)
def test_bounds_contain_the_ratio(data: st.DataObject, q: float) -> None:
    xs = data.draw(latencies)
    ys = data.draw(st.lists(st.floats(1.0, 1e9), min_size=len(xs), max_size=len(xs)))
    ratio = paired_ratio(xs, ys, q)
    lo, hi = paired_bootstrap(xs, ys, q, n_boot=200)
    assert lo <= ratio <= hi


def test_ratio_uses_nearest_rank_percentiles() -> None:
    a = np.arange(1.0, 101.0)
    assert paired_ratio(a, 2.0 * a[::-1]) == 2.0  # pairing does not matter to the point
    assert paired_ratio(a, a + 5.0, q=50.0) == percentile(a + 5.0, 50.0) / percentile(a, 50.0)


def test_bootstrap_is_seeded() -> None:
    a, b = synth(np.random.default_rng(1), 400)
    assert paired_bootstrap(a, b, seed=5) == paired_bootstrap(a, b, seed=5)
    assert paired_bootstrap(a, b, seed=5) != paired_bootstrap(a, b, seed=6)


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        ([1.0, 2.0], [1.0], "one A and one B"),
        ([1.0, 0.0], [1.0, 2.0], "> 0"),
        ([1.0, math.nan], [1.0, 2.0], "NaN"),
        ([], [], "empty"),
    ],
)
def test_bad_samples_are_rejected(a: list[float], b: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(a, b)


def test_bad_bootstrap_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1.0], [1.0], confidence=0.4)
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap([1.0], [1.0], n_boot=0)


# --------------------------------------------------------------------------- pairing matters


def test_pairing_narrows_the_bounds_when_the_machine_noise_is_shared() -> None:
    """Documents why A/B interleaves: shared slow spells cancel only in a paired bootstrap.

    Resampling the two sides independently (as for two separate runs) treats a
    spell in A's replicate and none in B's as possible; pairing knows better.
    """
    rng = np.random.default_rng(11)
    paired, independent = [], []
    for _ in range(10):
        a, b = synth(rng, 600)
        lo, hi = paired_bootstrap(a, b, n_boot=1000)
        paired.append(math.log(hi / lo))
        bound = percentile_ratio_bound(a, b, 95.0, 2 * 0.99 - 1, n_boot=1000)
        independent.append(math.log(bound.upper / bound.lower))
    assert np.mean(paired) < np.mean(independent)


def test_slow_spells_on_one_side_only_raise_false_alarms() -> None:
    """A/A where B alone gets the slow spells (what measuring A and B apart risks).

    Not a calibrated rate, just the direction: the same spells that cancel when
    both sides share them produce false regressions when only B has them. (In
    this model it was about 40 of 100 with ``max_pairs=600``.)
    """
    rule = StoppingRule(n_boot=500, max_pairs=600)
    shared = verdicts(rule, 60, 1.0, "shared", seed=5)
    b_only = verdicts(rule, 60, 1.0, "b_only", seed=5)
    assert b_only.count("regression") > shared.count("regression")


# --------------------------------------------------------------------------- decisions


def _at_cap(rule: StoppingRule, a: FloatArray, b: FloatArray) -> Decision:
    return decide(rule, a[: rule.max_pairs], b[: rule.max_pairs], elapsed_s=0.0)


def test_planted_ten_percent_is_a_regression_at_a_five_percent_limit() -> None:
    a, b = synth(np.random.default_rng(2), 600, effect=1.10)
    decision = _at_cap(StoppingRule(limit=0.05, max_pairs=600), a, b)
    assert decision.stop
    assert decision.verdict == "regression", decision.reason
    assert decision.ratio is not None and decision.lo is not None and decision.hi is not None
    assert decision.lo > 1.0 and decision.ratio > 1.05
    assert decision.pairs == 600


def test_planted_ten_percent_is_unchanged_at_a_twenty_percent_limit() -> None:
    a, b = synth(np.random.default_rng(2), 600, effect=1.10)
    decision = _at_cap(StoppingRule(limit=0.20, max_pairs=600), a, b)
    assert decision.stop
    assert decision.verdict == "unchanged", decision.reason


def test_planted_speedup_is_an_improvement() -> None:
    a, b = synth(np.random.default_rng(2), 600, effect=1 / 1.10)
    assert _at_cap(StoppingRule(max_pairs=600), a, b).verdict == "improvement"


def test_clear_regression_stops_early() -> None:
    rule = StoppingRule()  # the defaults: min 200, max 3000, every 100
    a, b = synth(np.random.default_rng(4), rule.max_pairs, effect=1.5)
    decision = sequential(rule, a, b)
    assert decision.verdict == "regression"
    assert decision.pairs < rule.max_pairs
    assert decision.pairs >= rule.min_pairs
    assert "stopped early" in decision.reason


def test_clear_improvement_stops_early() -> None:
    rule = StoppingRule()
    a, b = synth(np.random.default_rng(4), rule.max_pairs, effect=1 / 1.5)
    decision = sequential(rule, a, b)
    assert (decision.verdict, decision.pairs < rule.max_pairs) == ("improvement", True)


def test_quiet_equal_sides_stop_early_as_unchanged() -> None:
    rng = np.random.default_rng(8)
    machine = 1e6 * rng.lognormal(0.0, 0.2, 3000)
    a, b = machine * rng.lognormal(0.0, 0.01, 3000), machine * rng.lognormal(0.0, 0.01, 3000)
    decision = sequential(StoppingRule(), a, b)
    assert decision.verdict == "unchanged"
    assert decision.pairs < 3000
    assert "below the limit; stopped early" in decision.reason


def test_no_early_stop_before_min_pairs() -> None:
    rule = StoppingRule(min_pairs=300)
    a, b = synth(np.random.default_rng(4), 200, effect=1.5)
    decision = decide(rule, a, b, elapsed_s=1.0)
    assert not decision.stop
    assert decision.verdict == "regression"  # provisional
    assert "min_pairs" in decision.reason


def test_straddling_interval_measures_more_then_the_final_rule_decides() -> None:
    rule = StoppingRule(max_pairs=400)
    a, b = synth(np.random.default_rng(3), 400, effect=1.04)
    early = decide(rule, a[:200], b[:200], elapsed_s=1.0)
    assert not early.stop
    assert "straddles" in early.reason
    final = decide(rule, a, b, elapsed_s=2.0)
    assert final.stop
    assert final.verdict in ("regression", "unchanged")
    assert "max_pairs=400" in final.reason


def test_time_cap_applies_the_final_rule() -> None:
    rule = StoppingRule(max_seconds=10.0)
    a, b = synth(np.random.default_rng(3), 150, effect=1.04)
    decision = decide(rule, a, b, elapsed_s=10.5)
    assert decision.stop
    assert decision.verdict != "undecided"
    assert "max_seconds=10" in decision.reason


def test_too_few_pairs_is_undecided() -> None:
    rule = StoppingRule()
    a, b = synth(np.random.default_rng(3), 50)
    waiting = decide(rule, a, b, elapsed_s=1.0)
    assert (waiting.stop, waiting.verdict) == (False, "undecided")
    assert "needs >= 90" in waiting.reason
    capped = decide(rule, a, b, elapsed_s=500.0)
    assert (capped.stop, capped.verdict) == (True, "undecided")
    assert capped.lo is None and capped.ratio is not None
    empty = decide(rule, [], [], elapsed_s=500.0)
    assert (empty.stop, empty.verdict, empty.ratio, empty.pairs) == (True, "undecided", None, 0)


def test_decision_is_plain_data() -> None:
    a, b = synth(np.random.default_rng(3), 300)
    data = decide(StoppingRule(), a, b, elapsed_s=1.0).to_dict()
    assert set(data) == {"stop", "verdict", "ratio", "lo", "hi", "pairs", "reason"}
    assert json.loads(json.dumps(data)) == data
    assert "\n" not in data["reason"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"limit": 0.0}, "limit"),
        ({"q": 100.0}, "q="),
        ({"confidence": 1.0}, "confidence"),
        ({"futility_confidence": 0.5}, "futility_confidence"),
        ({"interim_confidence": 0.95}, "interim_confidence"),
        ({"min_pairs": 500, "max_pairs": 400}, "min_pairs"),
        ({"check_every": 0}, "check_every"),
        ({"max_seconds": 0.0}, "max_seconds"),
    ],
)
def test_invalid_rules_are_rejected(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StoppingRule(**kwargs)  # type: ignore[arg-type]


def test_decide_rejects_unequal_sides() -> None:
    with pytest.raises(ValueError, match="one of each per pair"):
        decide(StoppingRule(), [1.0, 2.0], [1.0], elapsed_s=0.0)


# --------------------------------------------------------------------------- simulation


def test_aa_false_alarms_stay_rare_under_the_sequential_rule() -> None:
    """200 A/A comparisons of up to 600 pairs with shared machine noise: <= 2% alarms.

    With the real looks (every 100 pairs from 200 on), so repeated looking is
    part of what is measured. ``n_boot=500`` keeps the test quick.
    """
    rule = StoppingRule(n_boot=500, max_pairs=600)
    results = verdicts(rule, 200, 1.0, "shared", seed=21)
    alarms = results.count("regression") + results.count("improvement")
    assert alarms <= 4, f"{alarms} false alarms in 200 A/A comparisons"
    assert "undecided" not in results


def test_ten_percent_is_caught_nearly_always() -> None:
    rule = StoppingRule(n_boot=500, max_pairs=600)
    results = verdicts(rule, 20, 1.10, "shared", seed=22)
    assert results.count("regression") >= 18, results


# --------------------------------------------------------------------------- helpers


def test_pair_orders_are_balanced_and_seeded() -> None:
    orders = pair_orders(1000, seed=1)
    assert orders.dtype == np.bool_ and orders.shape == (1000,)
    prefix_a_first = np.cumsum(orders)[1::2]  # after 2, 4, 6, ... pairs
    assert np.array_equal(prefix_a_first, np.arange(1, 501))
    assert np.array_equal(orders, pair_orders(1000, seed=1))
    assert not np.array_equal(orders, pair_orders(1000, seed=2))
    assert 0.3 < np.mean(orders[0::2]) < 0.7  # the first of each block is a coin flip
    assert pair_orders(7, seed=1).shape == (7,)
    assert pair_orders(0, seed=1).shape == (0,)


def test_per_round_reports_each_round() -> None:
    a, b = synth(np.random.default_rng(6), 250, effect=1.1)
    rounds = per_round(a, b, round_size=100)
    assert [r.round for r in rounds] == [0, 1, 2]
    assert [r.pairs for r in rounds] == [100, 100, 50]
    assert [r.first_pair for r in rounds] == [0, 100, 200]
    last = rounds[2]
    assert last.a_p95 == percentile(a[200:], 95.0)
    assert last.b_p50 == percentile(b[200:], 50.0)
    assert last.ratio == last.b_p95 / last.a_p95
    plain = json.loads(json.dumps([r.to_dict() for r in rounds]))
    assert [ABRound.from_dict(r) for r in plain] == rounds
    with pytest.raises(ValueError, match="round_size"):
        per_round(a, b, round_size=0)


def test_the_no_regression_stop_uses_its_own_looser_bound() -> None:
    """Between the 95% and the 99% upper bound: only the looser futility bound stops."""
    found = None
    for seed in range(200):
        a, b = synth(np.random.default_rng(seed), 200, effect=1.0)
        hi95 = paired_bootstrap(a, b, 95.0, 0.95)[1]
        hi99 = paired_bootstrap(a, b, 95.0, 0.99)[1]
        if hi95 < 1.05 <= hi99:
            found = a, b
            break
    assert found is not None, "no sample with the 95% bound below +5% and the 99% above"
    a, b = found
    loose = decide(StoppingRule(), a, b, elapsed_s=1.0)
    assert (loose.stop, loose.verdict) == (True, "unchanged")
    assert "the 95% upper bound" in loose.reason and "stopped early" in loose.reason
    strict = decide(StoppingRule(futility_confidence=0.99), a, b, elapsed_s=1.0)
    assert (strict.stop, strict.verdict) == (False, "unchanged")
    assert "straddles" in strict.reason


@settings(max_examples=30, deadline=None)
@given(effect=st.floats(0.8, 1.3), seed=st.integers(0, 2**16))
def test_an_early_stop_below_the_limit_is_never_a_regression(effect: float, seed: int) -> None:
    a, b = synth(np.random.default_rng(seed), 300, effect=effect)
    decision = decide(StoppingRule(), a, b, elapsed_s=1.0)
    if decision.verdict == "regression":  # only ever with the final rule's conditions
        assert decision.ratio is not None and decision.ratio > 1.05
        assert decision.lo is not None and decision.lo > 1.0
    if decision.stop and "below the limit" in decision.reason:
        assert decision.verdict in ("unchanged", "improvement")
        assert decision.ratio is not None and decision.ratio < 1.05


def test_an_interim_look_stops_at_the_stricter_bound() -> None:
    """Ratio beyond the limit, 99.9% bound above 1, 99% interval not wholly beyond it."""
    rule = StoppingRule(limit=0.02)
    found = None
    for seed in range(200):
        a, b = synth(np.random.default_rng(seed), 300, effect=1.05)
        ratio = paired_ratio(a, b)
        lo99 = paired_bootstrap(a, b, 95.0, 0.99)[0]
        lo999 = paired_bootstrap(a, b, 95.0, 0.999)[0]
        lo_max = paired_bootstrap(a, b, 95.0, 0.99999)[0]  # the smallest replicate
        if ratio > 1.02 and lo999 > 1.0 and lo99 <= 1.02 and lo_max <= 1.0:
            found = a, b
            break
    assert found is not None, "no sample between the two boundaries"
    decision = decide(rule, *found, elapsed_s=1.0)
    assert (decision.stop, decision.verdict) == (True, "regression")
    assert "99.9% lower bound" in decision.reason and "stopped early" in decision.reason
    # At an interim level whose bound (the smallest replicate) is below 1: measure on.
    cautious = decide(StoppingRule(limit=0.02, interim_confidence=0.99999), *found, 1.0)
    assert (cautious.stop, cautious.verdict) == (False, "regression")  # provisional


def test_interim_looks_never_stop_an_aa_comparison_as_a_regression() -> None:
    rule = StoppingRule(limit=0.02, max_pairs=1000)
    assert [v for v in verdicts(rule, 40, 1.0, "shared", seed=21) if v == "regression"] == []
