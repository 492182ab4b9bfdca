"""Verdicts from synthetic, seeded latency samples: every kind, and the rules behind them."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.core.policy import GateSpec
from perfguard.judge.compare import (
    compare_runs,
    compare_scenario,
    confirm,
    environment_diff,
    needs_confirmation,
    samples_needed,
)
from perfguard.judge.verdict import SEVERITY, MetricVerdict, ScenarioVerdict, worst
from perfguard.records.figures import CpuShares, RuntimeInfo
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult
from tests.helpers.samples import SID, lognormal, result

COMMIT = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
P95 = (GateSpec(metric="p95", limit=0.05),)


def verdict(
    cur: ScenarioResult | None,
    base: ScenarioResult | None,
    gates: tuple[GateSpec, ...] = P95,
    **kw: object,
) -> ScenarioVerdict:
    return compare_scenario(cur, base, gates, baseline_commit=COMMIT, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- kinds


def test_unchanged_between_two_draws_of_one_distribution() -> None:
    v = verdict(result(lognormal(1000, 2)), result(lognormal(1000, 1)))
    assert v.verdict == "unchanged"
    m = v.metrics[0]
    assert m.lower is not None and m.upper is not None and m.lower < 1.0 < m.upper
    assert not v.failed


def test_regression_of_20_percent_names_figure_commit_and_limit() -> None:
    v = verdict(result((lognormal(1000, 2) * 1.2).astype(np.int64)), result(lognormal(1000, 1)))
    assert v.verdict == "regression" and v.failed
    m = v.metrics[0]
    assert m.ratio is not None and 1.15 < m.ratio < 1.25
    assert m.lower is not None and m.lower > 1.0
    msg = m.message
    assert msg.startswith("P95 latency regressed +")
    assert "ms -> " in msg and "1a2b3c4" in msg and "limit +5%" in msg
    assert "99% lower bound" in msg
    assert msg in v.messages
    assert needs_confirmation(v)


def test_the_other_side_is_named_in_place_of_the_baseline_commit() -> None:
    against = "base 1a2b3c4 measured in this run, one side at a time"
    cur, base = result((lognormal(1000, 2) * 1.2).astype(np.int64)), result(lognormal(1000, 1))
    v = verdict(cur, base, against=against)
    assert v.verdict == "regression" and v.baseline_commit == COMMIT
    assert f"vs {against} (limit +5%)" in v.metrics[0].message
    assert "baseline" not in v.metrics[0].message


def test_improvement_of_20_percent() -> None:
    v = verdict(result((lognormal(1000, 2) * 0.8).astype(np.int64)), result(lognormal(1000, 1)))
    assert v.verdict == "improvement"
    assert "improved -" in v.metrics[0].message
    assert not needs_confirmation(v)


def test_three_percent_under_a_five_percent_limit_is_unchanged() -> None:
    v = verdict(result((lognormal(1000, 2) * 1.03).astype(np.int64)), result(lognormal(1000, 1)))
    assert v.verdict == "unchanged"
    assert v.metrics[0].ratio is not None and v.metrics[0].ratio > 1.0


def test_beyond_limit_but_not_significant_is_unchanged() -> None:
    # 100 samples of a very wide distribution: the P95 point is ~+35% by chance
    # alone, but the bound spans 1, so nothing is flagged.
    v = verdict(result(lognormal(100, 2, sigma=0.6)), result(lognormal(100, 1, sigma=0.6)))
    m = v.metrics[0]
    assert m.ratio is not None and m.ratio > 1.05
    assert m.lower is not None and m.lower <= 1.0
    assert m.verdict == "unchanged" and "not significant" in m.message
    assert "not significant" in m.rule


def test_incomparable_lists_the_differing_fields() -> None:
    env_a = Environment("aaa", {"cpu_model": "EPYC", "onnxruntime": "1.32.0"})
    env_b = Environment("bbb", {"cpu_model": "Xeon", "onnxruntime": "1.32.0"})
    base_run = run([result(lognormal(300, 1))], env_a)
    cur_run = run([result(lognormal(300, 2))], env_b)
    (v,) = compare_runs(cur_run, base_run, {}, baseline_commit=COMMIT)
    assert v.verdict == "incomparable"
    assert v.env_diff == {"cpu_model": ("EPYC", "Xeon")}
    assert "cpu_model: EPYC -> Xeon" in v.messages[0]
    assert v.metrics[0].verdict == "incomparable" and v.metrics[0].ratio is not None


def test_environment_diff_with_equal_fields_but_other_fingerprint() -> None:
    assert environment_diff(Environment("a", {"x": "1"}), Environment("a", {"x": "1"})) == {}
    assert environment_diff(Environment("a"), Environment("b")) == {"fingerprint": ("a", "b")}


def test_too_few_samples_is_invalid_and_names_the_needed_count() -> None:
    v = verdict(result(lognormal(40, 2)), result(lognormal(300, 1)))
    assert v.verdict == "invalid"
    m = v.metrics[0]
    assert m.samples_needed == 90
    assert ">= 90" in m.message and "40 samples" in m.message


def test_samples_needed_follows_the_order_statistic_rule() -> None:
    assert samples_needed(95, 0.99) == 90
    assert samples_needed(95, 0.95) == 59
    assert samples_needed(99, 0.99) == 459
    assert samples_needed(50, 0.99) == 7
    for q, c in [(95, 0.99), (90, 0.95), (99.9, 0.9)]:
        n = samples_needed(q, c)
        assert 1 - (q / 100) ** n >= c > 1 - (q / 100) ** (n - 1)


def test_no_baseline_is_new() -> None:
    v = verdict(result(), None)
    assert v.verdict == "new" and "no baseline" in v.messages[0]
    v2 = verdict(result(), result(status="skipped"))
    assert v2.verdict == "new"


def test_missing_row_for_a_baseline_only_scenario() -> None:
    env = Environment("fp", {"cpu_model": "EPYC"})
    base_run = run([result(lognormal(300, 1)), result(lognormal(300, 3), sid="s::gone")], env)
    cur_run = run([result(lognormal(300, 2))], env)
    verdicts = compare_runs(cur_run, base_run, {}, baseline_commit=None)
    assert [v.scenario_id for v in verdicts] == [SID, "s::gone"]
    assert verdicts[1].verdict == "missing"
    assert verdicts[1].baseline_commit == COMMIT  # taken from the baseline run
    assert "not measured in this run" in verdicts[1].messages[0]


def test_failed_or_unstable_current_is_invalid() -> None:
    v = verdict(replace(result(), status="failed", latency_ns=None), result())
    assert v.verdict == "invalid" and "no figures" in v.messages[0]
    errored = verdict(result(status="error"), result())
    assert errored.verdict == "invalid"
    # The gate failed it on its figures (the plugin's comparison.json says regression):
    # a stored run is judged on them too.
    gated = verdict(result(lognormal(300, 2) * 3, status="failed"), result(lognormal(300, 1)))
    assert gated.verdict == "regression"
    u = verdict(result(lognormal(300, 2), stable=False), result(lognormal(300, 1)))
    assert u.verdict == "invalid" and "unstable" in u.messages[0]
    assert u.metrics[0].ratio is not None  # figures kept for the report
    # An unstable baseline is still the best figure there is: compared, with a note.
    ub = verdict(result(lognormal(300, 2)), result(lognormal(300, 1), stable=False))
    assert ub.verdict == "unchanged" and "re-recording" in ub.messages[0]


def test_contended_run_is_invalid_not_a_regression() -> None:
    base = result(lognormal(1000, 1))
    slow = replace(
        result((lognormal(1000, 2) * 2.0).astype(np.int64)),
        runtime=RuntimeInfo(cpu=CpuShares(0.45, 0.0)),
    )
    v = verdict(slow, base)
    assert v.verdict == "invalid" and not v.failed
    assert "other processes used 45% of the CPUs" in v.messages[0]
    assert v.metrics[0].ratio is not None and v.metrics[0].ratio > 1.9
    quiet = replace(slow, runtime=RuntimeInfo(cpu=CpuShares(0.01, 0.0)))
    assert verdict(quiet, base).verdict == "regression"


# --------------------------------------------------------------------------- rules


def test_canary_normalisation_cancels_a_machine_slow_spell() -> None:
    base = result(lognormal(1000, 1), canary=100_000.0)
    slow = result((lognormal(1000, 2) * 1.3).astype(np.int64), canary=130_000.0)
    v = verdict(slow, base, normalise=True)
    m = v.metrics[0]
    assert v.verdict == "unchanged"
    assert m.normalised and m.canary_ratio == pytest.approx(100 / 130)
    assert m.ratio_raw is not None and 1.25 < m.ratio_raw < 1.35
    assert "machine-speed normalised" in m.message and "raw +" in m.message
    raw = verdict(slow, base, normalise=False)
    assert raw.verdict == "regression" and not raw.metrics[0].normalised


def test_noise_floor_widens_the_limit_visibly() -> None:
    base = result(lognormal(1000, 1))
    cur = result((lognormal(1000, 2) * 1.08).astype(np.int64))
    assert verdict(cur, base).verdict == "regression"
    history = [3.0, 3.3, 2.9, 3.2, 2.8]  # CV ~ 6.8% -> limit widened to ~13.6%
    v = verdict(cur, base, history=history)
    m = v.metrics[0]
    assert v.verdict == "unchanged"
    floor = float(np.std(history, ddof=1) / np.mean(history))
    assert m.noise_floor == pytest.approx(floor)
    assert m.effective_limit == pytest.approx(2 * floor)
    assert m.noise_commits == 5 and m.limit == 0.05
    assert "widened to +13.6% by noise floor 6.8% x2 over 5 commits" in m.message
    # Two values are too few to estimate a spread: the gate is not widened.
    short = verdict(cur, base, history=[3.0, 3.5]).metrics[0]
    assert short.noise_floor is None and short.effective_limit == 0.05


def test_absolute_latency_limit_in_ms() -> None:
    base = result(lognormal(1000, 1))  # P95 ~ 3.5 ms
    gate = (GateSpec(metric="p95", limit=0.5, relative=False),)
    small = result((lognormal(1000, 2) * 1.10).astype(np.int64))  # +0.35 ms
    big = result((lognormal(1000, 2) * 1.20).astype(np.int64))  # +0.7 ms
    assert verdict(small, base, gate).verdict == "unchanged"
    v = verdict(big, base, gate)
    assert v.verdict == "regression" and "limit 0.5 ms" in v.metrics[0].message


def test_throughput_lower_is_worse() -> None:
    gate = (GateSpec(metric="throughput", limit=0.05, higher_is_worse=False),)
    base = result(throughput=100.0)
    down = verdict(result(throughput=80.0), base, gate)
    assert down.verdict == "regression" and "throughput regressed -20.0%" in down.messages[0]
    assert down.metrics[0].lower is None  # one figure per run: point estimate
    assert verdict(result(throughput=120.0), base, gate).verdict == "improvement"
    assert verdict(result(throughput=98.0), base, gate).verdict == "unchanged"
    # A slow machine (canary 25% slower) explains a 20% throughput drop.
    slow = verdict(
        result(throughput=80.0, canary=125.0),
        result(throughput=100.0, canary=100.0),
        gate,
        normalise=True,
    )
    assert slow.verdict == "unchanged" and slow.metrics[0].ratio == pytest.approx(1.0)


def test_peak_memory_relative_absolute_and_absent() -> None:
    rel = (GateSpec(metric="peak_memory", limit=0.10),)
    ab = (GateSpec(metric="peak_memory", limit=50.0, relative=False),)
    base = result(memory=100.0, canary=100.0)
    cur = result(memory=120.0, canary=200.0)
    v = verdict(cur, base, rel)
    assert v.verdict == "regression" and not v.metrics[0].normalised  # memory is never scaled
    assert verdict(cur, base, ab).verdict == "unchanged"
    assert verdict(result(memory=200.0), base, ab).verdict == "regression"
    assert verdict(cur, result(), rel).verdict == "new"


def test_unknown_metric_is_invalid() -> None:
    v = verdict(result(), result(), (GateSpec(metric="p42", limit=0.05),))
    assert v.verdict == "invalid" and "unknown metric" in v.messages[0]


def test_confirmation_needs_every_round() -> None:
    reg = verdict(result((lognormal(1000, 2) * 1.2).astype(np.int64)), result(lognormal(1000, 1)))
    ok = verdict(result(lognormal(1000, 2)), result(lognormal(1000, 1)))
    assert confirm([reg]) == reg
    both = confirm([reg, reg, reg])
    assert (
        both.verdict == "regression"
        and "confirmed on re-measurement (3 of 3 rounds)" in both.messages[-1]
    )
    once = confirm([reg, ok, ok])
    assert once.verdict == "unchanged"
    assert once.messages[-1] == "regression not confirmed on re-measurement (1 of 3 rounds)"
    assert confirm([reg, ok, reg]).messages[-1].endswith("(2 of 3 rounds)")
    with pytest.raises(ValueError):
        confirm([])
    with pytest.raises(ValueError):
        confirm([reg, replace(ok, scenario_id="other")])


def test_verdicts_are_plain_serialisable_data() -> None:
    env_a, env_b = Environment("a", {"cpu": "x"}), Environment("b", {"cpu": "y"})
    verdicts = [
        verdict(result((lognormal(300, 2) * 1.2).astype(np.int64), canary=1.0), result(canary=1.1)),
        compare_runs(run([result()], env_b), run([result()], env_a), {}, baseline_commit=COMMIT)[0],
    ]
    for v in verdicts:
        data = json.loads(json.dumps(v.to_dict()))
        assert ScenarioVerdict.from_dict(data) == v
    m = verdicts[0].metrics[0]
    assert MetricVerdict.from_dict(m.to_dict()) == m


def test_severity_order() -> None:
    assert SEVERITY[0] == "regression" and SEVERITY[-1] == "unchanged"
    assert worst(["unchanged", "new", "invalid"]) == "invalid"
    assert worst(["improvement", "missing"]) == "missing"
    assert worst([]) == "unchanged"


# --------------------------------------------------------------------------- properties

effects = st.floats(min_value=0.6, max_value=1.6, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(100, 400),
    sigma=st.floats(0.02, 0.5),
    effect=effects,
    scale=st.integers(2, 1000),
)
def test_scaling_both_sides_never_changes_the_verdict(
    seed: int, n: int, sigma: float, effect: float, scale: int
) -> None:
    base = lognormal(n, seed, sigma=sigma)
    cur = (lognormal(n, seed + 1, sigma=sigma) * effect).astype(np.int64) + 1
    plain = verdict(result(cur), result(base))
    scaled = verdict(result(cur * scale), result(base * scale))
    assert scaled.verdict == plain.verdict


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000), n=st.integers(100, 400), sigma=st.floats(0.02, 0.5), effect=effects
)
def test_swapping_runs_turns_regression_into_improvement(
    seed: int, n: int, sigma: float, effect: float
) -> None:
    base = result(lognormal(n, seed, sigma=sigma))
    cur = result((lognormal(n, seed + 1, sigma=sigma) * effect).astype(np.int64) + 1)
    forward, backward = verdict(cur, base).verdict, verdict(base, cur).verdict
    mirror = {"regression": "improvement", "improvement": "regression", "unchanged": "unchanged"}
    assert backward == mirror[forward]


def run(scenarios: list[ScenarioResult], env: Environment) -> RunResult:
    return RunResult(
        commit=CommitInfo(sha=COMMIT, branch="main", dirty=False),
        environment=env,
        scenarios=tuple(scenarios),
        created_at="2025-01-01T00:00:00Z",
        perfguard_version="0.1.0",
    )
