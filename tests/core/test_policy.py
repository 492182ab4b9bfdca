"""The judging policy is one table that every consumer reads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfguard.core import policy
from perfguard.core.policy import METRICS, GateSpec, MetricKind, gate_metric, samples_needed
from perfguard.judge.compare import compare_scenario
from perfguard.records.figures import summarize
from perfguard.records.loadfigures import GoodputFigures, LateFigures, LoadFigures
from perfguard.records.results import LatencySummary, RunResult, ScenarioResult
from perfguard.records.tokenfigures import TokenFigures
from perfguard.suite.loader import load_suite


def test_every_latency_metric_is_a_field_of_the_latency_summary() -> None:
    # A request percentile by its own name (p95); a token percentile by its suffix in
    # the summary of its samples (itl_p95: TokenFigures.itl_ns.p95).
    fields = set(LatencySummary.__dataclass_fields__)
    for m in METRICS:
        if m.kind is MetricKind.LATENCY:
            assert m.quantile is not None
            if m.samples == "request":
                assert m.name in fields, m.name
            else:
                prefix, _, field = m.name.partition("_")
                assert prefix == m.samples and field in fields, m.name
                assert f"{m.samples}_ns" in TokenFigures.__dataclass_fields__


def test_names_and_aliases_resolve_to_one_entry() -> None:
    seen: set[str] = set()
    for m in METRICS:
        for name in (m.name, *m.aliases):
            assert name not in seen
            seen.add(name)
            assert gate_metric(name) is m
            assert gate_metric(name.upper()) is m
    assert gate_metric("mean") is None
    assert "mean" in policy.REFUSED_METRICS


@pytest.mark.parametrize("metric", [m.name for m in METRICS])
def test_every_metric_is_accepted_by_the_loader_and_decided_by_the_comparison(
    tmp_path: Path, metric: str
) -> None:
    """A gate the loader accepts is one the comparison can decide (not `invalid`)."""
    spec = gate_metric(metric)
    assert spec is not None
    generative = metric in policy.GENERATIVE_METRICS
    generate = "    generate: {prompt_tokens: 8, new_tokens: 16}\n" if generative else ""
    if metric == "goodput":  # a generative level with goodput limits
        generate += "    load: {concurrency: 2, goodput: {ttft_ms: 200, tpot_ms: 20}}\n"
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "models:\n  m:\n    factory: mod:build\n    inputs:\n      x: {shape: [1, 4]}\n"
        f"scenarios:\n  - name: s\n    model: m\n{generate}"
        f'    gate: {{{metric}: "{spec.examples[0]}"}}\n'
    )
    gates = {g.metric: g for g in load_suite(suite).scenarios[0].gates}
    gate = gates[metric]
    assert gate.higher_is_worse == spec.higher_is_worse
    rng = np.random.default_rng(0)
    n = samples_needed(spec.quantile) + 50 if spec.quantile is not None else 500
    samples = tuple(int(x) for x in rng.integers(1_000_000, 1_100_000, size=n))

    def result() -> ScenarioResult:
        return ScenarioResult(
            id="s.yaml::s",
            suite="s.yaml",
            name="s",
            backend="torch",
            device="cpu",
            precision="fp32",
            status="passed",
            latency_ns=summarize(samples),
            throughput=1000.0,
            peak_memory_mib=100.0,
            gpu_peak_memory_mib=100.0,
            samples_ns=samples,
            # a generative cell's: every request 16 tokens, one every ~1 ms
            tokens=TokenFigures.of(
                np.cumsum(rng.integers(1_000_000, 1_100_000, size=(n, 16)), axis=1),
                prompt_tokens=8,
                batch=1,
            )
            if generative
            else None,
        )

    def measured() -> ScenarioResult:
        r = result()
        if metric != "goodput":
            return r
        # The level's goodput: every request within the limits, in a 1 s window.
        good = GoodputFigures(ttft_ms=200, tpot_ms=20, good=n, per_s=float(n), share=1.0)
        return dataclasses.replace(r, load=closed_level(n, good))

    verdict = compare_scenario(measured(), measured(), (gate,), baseline_commit="a" * 40)
    assert [m.verdict for m in verdict.metrics] == ["unchanged"], verdict.messages


def test_unknown_or_refused_metric_is_invalid_with_the_reason() -> None:
    r = ScenarioResult(
        id="x", suite="x", name="x", backend="torch", device="cpu", precision="fp32",
        status="passed", latency_ns=summarize([1, 2, 3]), samples_ns=(1, 2, 3),
    )  # fmt: skip
    verdict = compare_scenario(r, r, (GateSpec("mean", 0.05),), baseline_commit=None)
    assert verdict.verdict == "invalid"
    assert "p50" in verdict.messages[0] and "p95" in verdict.messages[0]


@given(st.sampled_from([50.0, 90.0, 95.0, 99.0, 99.9]), st.floats(0.5, 0.999))
def test_samples_needed_is_the_fewest_that_give_the_bound(q: float, confidence: float) -> None:
    n = samples_needed(q, confidence)
    p = q / 100
    assert 1 - p**n >= confidence - 1e-12
    assert n == 1 or 1 - p ** (n - 1) < confidence


def test_default_gate_is_p95_plus_five_percent() -> None:
    assert (GateSpec("p95", 0.05),) == policy.DEFAULT_GATES
    assert RunResult.__name__  # the records module imports cleanly beside the policy


def closed_level(requests: int, goodput: GoodputFigures) -> LoadFigures:
    """A closed-loop level of 2 clients, all ``requests`` answered in 1 s."""
    return LoadFigures(
        mode="closed", level="c2", concurrency=2, rate_asked=None, rate_sent=None,
        rate_achieved=None, arrivals=None, workers=1, sessions="shared", requests=requests,
        completed=requests, failed=0, unserved=0, duration_s=1.0, throughput=float(requests),
        uncorrected_ns=None, queue_share=None,
        late=LateFigures(count=0, share=0.0, limit_ms=1.0, max_share=0.05, lag_p99_ms=None,
                         lag_max_ms=None),
        errors={}, goodput=goodput,
    )  # fmt: skip
