"""perfguard.records.tokenfigures: the token figures of a generative cell, read from the
raw token times, and their stored form."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from perfguard.core.errors import ResultsError
from perfguard.records.results import ScenarioResult
from perfguard.records.tokenfigures import TokenFigures
from tests.helpers.tokens import generative_result, token_times

# Two requests of three tokens, times in ns after each request's send.
TIMES = np.array([[10, 15, 25], [20, 22, 30]])


def test_figures_of_a_hand_computed_case() -> None:
    f = TokenFigures.of(TIMES, prompt_tokens=8, batch=2)
    assert f.requests == 2 and f.new_tokens == 3
    assert f.ttft().tolist() == [10, 20]
    assert f.e2e().tolist() == [25, 30]
    assert f.itl().tolist() == [[5, 10], [2, 8]]
    assert f.tpot().tolist() == [7.5, 5.0]  # (25 - 10) / 2, (30 - 20) / 2
    # 2 requests x batch 2 x 3 tokens over 55 ns of requests
    assert f.tokens_per_s == pytest.approx(12 / 55e-9)
    assert f.prefill_share == pytest.approx(30 / 55)
    assert f.ttft_ns.p50 == 10 and f.ttft_ns.max == 20
    assert f.itl_ns is not None and f.itl_ns.n == 4 and f.itl_ns.max == 10
    assert f.tpot_ns is not None and f.tpot_ns.min == 5.0


def test_one_token_has_no_gaps() -> None:
    f = TokenFigures.of([[7], [9]], prompt_tokens=4, batch=1)
    assert f.itl_ns is None and f.tpot_ns is None
    assert f.itl().shape == (2, 0) and f.tpot().size == 0
    assert f.samples("ttft").tolist() == [7.0, 9.0]


def test_samples_by_name() -> None:
    f = TokenFigures.of(TIMES, prompt_tokens=8, batch=1)
    assert f.samples("itl").shape == (2, 2)
    assert f.samples("tpot").tolist() == [7.5, 5.0]
    with pytest.raises(ValueError, match="no token samples named 'e2e'"):
        f.samples("e2e")


@pytest.mark.parametrize(
    ("times", "match"),
    [([[10, 5, 20]], "goes backwards"), ([1, 2, 3], "requests x new_tokens"), ([[]], "both >= 1")],
)
def test_inconsistent_times_are_refused(times: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TokenFigures.of(times, prompt_tokens=1, batch=1)


def test_a_stored_record_whose_times_do_not_fit_is_refused() -> None:
    stored = generative_result(token_times(5, 4, 0)).to_dict()
    stored["tokens"]["token_ns"] = stored["tokens"]["token_ns"][:-1]
    with pytest.raises(ValueError, match="not requests x new_tokens"):
        ScenarioResult.from_dict(stored)


def test_a_stored_record_whose_times_go_backwards_is_refused() -> None:
    stored = generative_result(token_times(5, 4, 0)).to_dict()
    stored["tokens"]["token_ns"][2] = 0
    with pytest.raises((ValueError, ResultsError), match="backwards"):
        ScenarioResult.from_dict(stored)


def test_a_result_without_tokens_stores_no_key() -> None:
    generative = generative_result(token_times(5, 4, 0))
    assert "tokens" in json.loads(json.dumps(generative.to_dict()))
    # a plain cell's result is as it always was (older files encode to their own bytes)
    assert "tokens" not in replace(generative, tokens=None).to_dict()


_TIMES = hnp.arrays(
    np.int64,
    st.tuples(st.integers(1, 6), st.integers(1, 6)),
    elements=st.integers(0, 10**9),
).map(lambda a: np.cumsum(a, axis=1))


@settings(max_examples=60, deadline=None)
@given(times=_TIMES, batch=st.integers(1, 8))
def test_round_trip_and_definitions(times: np.ndarray, batch: int) -> None:
    f = TokenFigures.of(times, prompt_tokens=3, batch=batch)
    back = TokenFigures.from_dict(json.loads(json.dumps(f.to_dict())))
    assert back == f
    assert np.array_equal(back.times(), times)
    # TTFT + every gap = end to end, per request
    assert np.array_equal(f.ttft() + f.itl().sum(axis=1), f.e2e())
    if f.new_tokens > 1:
        assert np.allclose(f.tpot() * (f.new_tokens - 1), f.e2e() - f.ttft())
    assert 0.0 <= f.prefill_share <= 1.0
