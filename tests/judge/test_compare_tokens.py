"""Verdicts on a generative cell's token figures (TTFT, ITL, TPOT, tokens/s) from seeded
token times: a decode slowdown moves ITL and TPOT and not TTFT, a prefill slowdown the
converse, and each message names the token figure."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from perfguard.core.policy import GENERATIVE_METRICS, GateSpec, gate_metric
from perfguard.core.stats import percentile_ratio_bound
from perfguard.judge.compare import compare_scenario
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import ScenarioResult
from tests.helpers.samples import lognormal, result
from tests.helpers.tokens import generative_result, token_times

COMMIT = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
TOKEN_GATES = tuple(
    GateSpec(name, 0.05, higher_is_worse=name != "tokens_per_s")
    for name in ("ttft_p95", "itl_p95", "tpot_p50", "tokens_per_s")
)


def judged(cur: ScenarioResult, base: ScenarioResult) -> dict[str, str]:
    v: ScenarioVerdict = compare_scenario(cur, base, TOKEN_GATES, baseline_commit=COMMIT)
    return {m.metric: m.verdict for m in v.metrics}


def times(seed: int, **kw: float) -> object:
    return token_times(120, 24, seed, request_sigma=0.03, **kw)


BASE = generative_result(times(0))  # type: ignore[arg-type]


def test_unchanged_requests_change_nothing() -> None:
    verdicts = judged(generative_result(times(1)), BASE)  # type: ignore[arg-type]
    assert set(verdicts.values()) == {"unchanged"}


def test_a_slower_decode_regresses_itl_tpot_and_tokens_per_s_not_ttft() -> None:
    verdicts = judged(generative_result(times(1, decode_ms=1.2)), BASE)  # type: ignore[arg-type]
    assert verdicts == {
        "ttft_p95": "unchanged",
        "itl_p95": "regression",
        "tpot_p50": "regression",
        "tokens_per_s": "regression",
    }


def test_a_slower_prefill_regresses_ttft_not_itl_or_tpot() -> None:
    verdicts = judged(generative_result(times(1, prefill_ms=5.0)), BASE)  # type: ignore[arg-type]
    assert verdicts["ttft_p95"] == "regression"
    assert verdicts["itl_p95"] == "unchanged" and verdicts["tpot_p50"] == "unchanged"


def test_the_message_names_the_token_figure_and_its_bound() -> None:
    cur = generative_result(times(1, decode_ms=1.2))
    v = compare_scenario(cur, BASE, (GateSpec("itl_p95", 0.05),), baseline_commit=COMMIT)  # type: ignore[arg-type]
    message = v.metrics[0].message
    assert message.startswith("ITL P95 regressed +")
    assert "ms -> " in message and "99% lower bound" in message and "limit +5%" in message


def test_itl_bounds_resample_whole_requests() -> None:
    # Requests that differ as a whole (request_sigma) make the gaps of one request
    # alike: the verdict's bound resamples request by request, and is far wider than
    # a bound that resampled the gaps one by one would be.
    base = token_times(60, 24, 3, request_sigma=0.3)
    cur = token_times(60, 24, 4, request_sigma=0.3)
    gate = (GateSpec("itl_p95", 0.05),)
    m = compare_scenario(
        generative_result(cur),
        generative_result(base),
        gate,
        baseline_commit=COMMIT,  # type: ignore[arg-type]
    ).metrics[0]
    assert m.lower is not None and m.upper is not None
    gaps = [np.diff(t, axis=1).ravel() for t in (base, cur)]
    naive = percentile_ratio_bound(gaps[0], gaps[1], 95.0, 0.98)
    assert m.upper - m.lower > 2 * (naive.upper - naive.lower)


@pytest.mark.parametrize("name", sorted(GENERATIVE_METRICS))
def test_a_token_gate_without_token_figures_is_not_judged(name: str) -> None:
    metric = gate_metric(name)
    assert metric is not None
    gate = (GateSpec(name, 0.05, higher_is_worse=metric.higher_is_worse),)
    plain = result(lognormal(300, 0))
    v = compare_scenario(plain, plain, gate, baseline_commit=COMMIT)
    assert v.metrics[0].verdict == "new" and "recorded none" in v.metrics[0].message
    # a baseline from before the cell generated: judged once both have the figure
    gen = generative_result(times(1))
    v = compare_scenario(gen, replace(gen, tokens=None), gate, baseline_commit=COMMIT)  # type: ignore[arg-type]
    assert v.metrics[0].verdict == "new"


def test_too_few_requests_for_a_ttft_bound_is_invalid() -> None:
    few = generative_result(token_times(20, 8, 0))
    v = compare_scenario(few, few, (GateSpec("ttft_p95", 0.05),), baseline_commit=COMMIT)  # type: ignore[arg-type]
    assert v.metrics[0].verdict == "invalid"
    assert "needs >= 90" in v.metrics[0].message
