"""Same-run A/B of generative cells: which figures are judged and how, on synthetic
token times only (no figure of this machine is asserted).

Each simulated pair shares a machine component (a slowness of the whole pair, as a slow
spell hits both requests of an interleaved pair), and each request adds its own noise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfguard.ab.paired import StoppingRule
from perfguard.ab.tokenpairs import TokenGate, TokenLooks, TokenPairs, judge, token_gates
from perfguard.core.scenario import Scenario
from perfguard.core.stats import percentile, percentile_ratio_bound
from perfguard.judge.verdict import DecisionKind
from perfguard.suite.loader import load_suite
from tests.helpers.tokens import token_times

NEW = 8


def cell(tmp_path: Path, gate: str | None) -> Scenario:
    text = (
        "models:\n  lm: {factory: 'perfguard_examples.tinylm:build'}\n"
        "scenarios:\n  - name: gen\n    model: lm\n"
        "    generate: {prompt_tokens: 16, new_tokens: 8}\n"
    )
    if gate is not None:
        text += f"    gate: {gate}\n"
    path = tmp_path / "s.yaml"
    path.write_text(text)
    (scenario,) = load_suite(path).scenarios
    return scenario


def pairs_of(
    n: int, seed: int, *, decode: float = 1.0, prefill: float = 1.0, spell: float = 0.2
) -> TokenPairs:
    """``n`` pairs; B's decode steps and prompt pass cost ``decode``/``prefill`` times A's.
    Every pair shares a lognormal slowness (sigma ``spell``)."""
    rng = np.random.default_rng(seed)
    shared = rng.lognormal(0.0, spell, (n, 1))
    a = token_times(n, NEW, seed + 1, sigma=0.03) * shared
    b = token_times(n, NEW, seed + 2, sigma=0.03, prefill_ms=4.0 * prefill, decode_ms=decode)
    pairs = TokenPairs(NEW)
    pairs.add(a.astype(np.int64).tolist(), (b * shared).astype(np.int64).tolist())
    return pairs


def test_the_gates_of_a_cell_are_its_relative_latency_and_tokens_gates(tmp_path: Path) -> None:
    gate = '{p95: "+5%", ttft_p95: "+10%", itl_p95: "+5%", tpot_p50: "+5%", '
    gate += 'tokens_per_s: "-3%", itl_p99: "+20ms", throughput: "-5%"}'
    gates = token_gates(cell(tmp_path, gate), seed=7)
    assert [(g.metric, g.samples, g.rule.q, g.rule.limit) for g in gates] == [
        ("p95", "request", 95.0, 0.05),
        ("ttft_p95", "ttft", 95.0, 0.10),
        ("itl_p95", "itl", 95.0, 0.05),
        ("tpot_p50", "tpot", 50.0, 0.05),
        ("tokens_per_s", "tokens", 50.0, 0.03),
    ]  # an absolute limit (itl_p99) and sequences/s (throughput) are not paired figures
    assert {g.rule.seed for g in gates} == {7}
    assert gates[2].label == "ITL P95" and gates[4].is_rate


def test_a_cell_without_such_gates_is_judged_on_end_to_end_p95(tmp_path: Path) -> None:
    (only,) = token_gates(cell(tmp_path, '{peak_memory: "+10%"}'))
    assert (only.metric, only.samples, only.rule.q, only.rule.limit) == ("p95", "request", 95, 0.05)


def test_each_figure_reads_its_own_samples() -> None:
    pairs = TokenPairs(3)
    pairs.add([[10, 30, 60], [20, 50, 90]], [[11, 33, 70], [25, 45, 105]])
    assert pairs.values("a", "ttft").tolist() == [10, 20]
    assert pairs.values("b", "request").tolist() == [70, 105]
    assert pairs.values("a", "tpot").tolist() == [25.0, 35.0]  # (60-10)/2, (90-20)/2
    assert [g.tolist() for g in pairs.gaps("b")] == [[22, 37], [20, 60]]
    with pytest.raises(ValueError, match="expected 3"):
        pairs.add([[1, 2]], [[1, 2]])
    with pytest.raises(ValueError, match="2 requests of A and 1 of B"):
        pairs.add([[1, 2, 3]] * 2, [[1, 2, 3]])


def test_tokens_per_s_is_stated_from_the_median_request(tmp_path: Path) -> None:
    gates = {g.metric: g for g in token_gates(cell(tmp_path, '{tokens_per_s: "-5%"}'))}
    pairs = pairs_of(101, seed=3)
    median_ns = float(percentile(pairs.values("a", "request"), 50.0))
    assert pairs.figure(gates["tokens_per_s"], "a", 8) == pytest.approx(8 / (median_ns / 1e9))


def test_a_decode_slowdown_is_caught_on_itl_and_tpot_and_not_on_ttft(tmp_path: Path) -> None:
    gate = '{ttft_p95: "+5%", itl_p95: "+5%", tpot_p50: "+5%", tokens_per_s: "-5%"}'
    gates = {g.metric: g for g in token_gates(cell(tmp_path, gate))}
    pairs = pairs_of(300, seed=11, decode=1.2)
    kinds = {m: judge(g, pairs, 1.0).verdict for m, g in gates.items()}
    assert kinds == {
        "p95": DecisionKind.REGRESSION,  # the default gate, end to end
        "ttft_p95": DecisionKind.UNCHANGED,
        "itl_p95": DecisionKind.REGRESSION,
        "tpot_p50": DecisionKind.REGRESSION,
        "tokens_per_s": DecisionKind.REGRESSION,  # slower requests: fewer tokens/s
    }
    slow_prefill = pairs_of(300, seed=12, prefill=1.3)
    kinds = {m: judge(g, slow_prefill, 1.0).verdict for m, g in gates.items()}
    assert kinds["ttft_p95"] is DecisionKind.REGRESSION
    assert kinds["itl_p95"] is DecisionKind.UNCHANGED
    assert kinds["tpot_p50"] is DecisionKind.UNCHANGED


def test_itl_bounds_resample_whole_pairs() -> None:
    """Requests slow as a whole (each request's gaps move together): the ITL interval
    must be as wide as that request-level noise, not the narrow one that treating every
    gap as independent gives on the same gaps."""
    n = 200
    a = token_times(n, NEW, 1, sigma=0.01, request_sigma=0.15)
    b = token_times(n, NEW, 2, sigma=0.01, request_sigma=0.15)
    pairs = TokenPairs(NEW)
    pairs.add(a.tolist(), b.tolist())
    clustered = judge(token_gate("itl", StoppingRule(q=95.0, label="ITL P95")), pairs, 1.0)
    loose = percentile_ratio_bound(np.diff(a, axis=1).ravel(), np.diff(b, axis=1).ravel(), 95.0)
    assert clustered.lo is not None and clustered.hi is not None
    assert (clustered.hi - clustered.lo) > 1.5 * (loose.upper - loose.lower)


def token_gate(samples: str, rule: StoppingRule) -> TokenGate:
    return TokenGate(metric=f"{samples}_p95", samples=samples, rule=rule)


def test_a_figure_keeps_the_decision_of_the_look_it_stopped_at(tmp_path: Path) -> None:
    gate = '{ttft_p95: "+5%", itl_p95: "+5%"}'
    gates = token_gates(cell(tmp_path, gate))
    looks = TokenLooks(gates)
    slow = pairs_of(200, seed=21, prefill=2.0, decode=1.0)
    stop, shown = looks.look(slow, 1.0)
    ttft = looks.decisions["ttft_p95"]
    assert ttft.stop and ttft.verdict is DecisionKind.REGRESSION
    # Later pairs that would read otherwise do not reopen a stopped figure.
    later = pairs_of(200, seed=22)
    for i in range(200):
        slow.a.append(later.a[i])
        slow.b.append(later.a[i])
    looks.look(slow, 2.0)
    assert looks.decisions["ttft_p95"] is ttft
    assert looks.lead().verdict is DecisionKind.REGRESSION
    if not stop:
        assert shown.metric == "itl_p95"


def test_every_figure_stops_at_the_cap(tmp_path: Path) -> None:
    gates = token_gates(
        cell(tmp_path, '{ttft_p95: "+5%", itl_p95: "+5%"}'),
        rule=StoppingRule(min_pairs=100, max_pairs=100, check_every=100),
    )
    looks = TokenLooks(gates)
    stop, _ = looks.look(pairs_of(100, seed=31, decode=1.04), 1.0)
    assert stop and all(d.stop for d in looks.decisions.values())
    assert all("max_pairs=100" in d.reason for d in looks.decisions.values())
