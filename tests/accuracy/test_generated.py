"""perfguard.accuracy.generated: token agreement, the teacher-forced rows that line up
with the reference's tokens, and perplexity, on hand-computed cases (a scripted session
whose logits say which token they were computed after)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.accuracy.generated import (
    greedy_tokens,
    perplexity,
    perplexity_figures,
    prompt_logits,
    teacher_forced,
    text_set,
    token_agreement,
)
from perfguard.core.errors import InputError
from perfguard.core.scenario import AccuracyText, GenerateSpec, ModelSpec, Scenario
from tests.helpers.torch_cells import LOCATION

VOCAB = 16


class Scripted:
    """A generative session whose logits at position i are ``ids[:, i]`` in slot 0 and
    ``i`` in slot 1 (so a test sees which token and position a row came from), and whose
    greedy tokens are ``prompt[:, -1] + 1, + 2, ...``."""

    vocab_size = VOCAB
    runtime_info: ClassVar[dict[str, Any]] = {}

    def prepare(self, prompt: np.ndarray) -> np.ndarray:
        return np.asarray(prompt, dtype=np.int64)

    def generate(self, prepared: Any, new_tokens: int, stamp: Callable[[], None]) -> Any:
        last = prepared[:, -1:]
        return last + np.arange(1, new_tokens + 1)[None, :]

    def tokens(self, generated: Any) -> np.ndarray:
        return np.asarray(generated, dtype=np.int64)

    def logits(self, ids: np.ndarray) -> np.ndarray:
        batch, length = ids.shape
        out = np.zeros((batch, length, VOCAB), dtype=np.float32)
        out[:, :, 0] = ids
        out[:, :, 1] = np.arange(length)[None, :]
        return out

    def close(self) -> None:
        return None


def test_token_agreement_counts_matches_and_first_divergences() -> None:
    current = np.array([[1, 2, 3], [4, 5, 6], [7, 0, 0]])
    reference = np.array([[1, 2, 0], [4, 5, 6], [0, 0, 0]])
    got = token_agreement(current, reference, 0.9)
    assert got.tokens == 9 and got.match == pytest.approx(7 / 9)  # 2 + 3 + 2 equal
    assert got.first_divergence == (2, None, 0) and got.identical == 1
    assert got.earliest == 0 and not got.passed
    assert token_agreement(current, reference, 0.75).passed
    assert token_agreement(current, current, None).match == 1.0
    with pytest.raises(ValueError):
        token_agreement(current, reference[:, :2], None)


def test_teacher_forcing_takes_the_rows_that_predict_the_reference_tokens() -> None:
    session = Scripted()
    prompts = [np.array([[10, 11, 12], [20, 21, 22]]), np.array([[30, 31, 32], [40, 41, 42]])]
    reference = np.array([[5, 6, 7, 8], [1, 2, 3, 4], [9, 9, 9, 9], [7, 6, 5, 4]])
    rows = teacher_forced(session, prompts, reference)
    assert rows.shape == (4 * 4, VOCAB)
    # Row j of a request row was computed after token j-1 of the reference (after the
    # prompt's last token for j = 0), at position prompt length - 1 + j.
    after = rows[:, 0].reshape(4, 4)
    assert after.tolist() == [
        [12, 5, 6, 7],
        [22, 1, 2, 3],
        [32, 9, 9, 9],
        [42, 7, 6, 5],
    ]
    assert rows[:, 1].reshape(4, 4).tolist() == [[2, 3, 4, 5]] * 4


def test_greedy_tokens_and_prompt_logits_are_row_by_row() -> None:
    session = Scripted()
    prompts = [np.array([[1, 2], [3, 4]]), np.array([[5, 6], [7, 8]])]
    assert greedy_tokens(session, prompts, 3).tolist() == [
        [3, 4, 5],
        [5, 6, 7],
        [7, 8, 9],
        [9, 10, 11],
    ]
    rows = prompt_logits(session, prompts, 5)  # 2 positions per row: 2.5 rows' worth
    assert rows.shape == (5, VOCAB)
    assert rows[:, 0].tolist() == [1, 2, 3, 4, 5]


class Fixed(Scripted):
    """Logits that give token 1 probability 3/4 of 2 after every token."""

    vocab_size = 2

    def logits(self, ids: np.ndarray) -> np.ndarray:
        out = np.zeros((*ids.shape, 2), dtype=np.float32)
        out[..., 1] = math.log(3.0)
        return out


def test_perplexity_is_the_exponent_of_the_mean_negative_log_likelihood() -> None:
    texts = [np.array([[0, 1, 1]]), np.array([[1, 0, 1]])]
    # Predicted: 1 (3/4), 1 (3/4); 0 (1/4), 1 (3/4).
    nll = -(3 * math.log(0.75) + math.log(0.25)) / 4
    assert perplexity(Fixed(), texts) == pytest.approx(math.exp(nll))


@settings(max_examples=30, deadline=None)
@given(
    vocab=st.integers(2, 50),
    texts=st.lists(st.lists(st.integers(0, 1), min_size=2, max_size=8), min_size=1, max_size=4),
)
def test_uniform_logits_have_the_vocabulary_as_perplexity(
    vocab: int, texts: list[list[int]]
) -> None:
    class Uniform(Scripted):
        def logits(self, ids: np.ndarray) -> np.ndarray:
            return np.full((*ids.shape, vocab), 0.25, dtype=np.float32)

    arrays = [np.array([t]) for t in texts]
    assert perplexity(Uniform(), arrays) == pytest.approx(vocab, rel=1e-9)


def test_perplexity_rise_is_gated_relative_to_the_reference() -> None:
    texts = [np.zeros((1, 8), dtype=np.int64)] * 3
    risen = perplexity_figures(texts, 10.6, 10.0, 0.05)
    assert risen.rise == pytest.approx(0.06) and not risen.passed
    assert (risen.texts, risen.tokens) == (3, 8)
    assert perplexity_figures(texts, 10.4, 10.0, 0.05).passed
    alone = perplexity_figures(texts, 10.4, None, 0.05)
    assert alone.rise is None and alone.passed  # nothing to rise over


def test_a_short_text_set_names_its_own_keys(tmp_path: Path) -> None:
    (tmp_path / "texts.jsonl").write_text('{"prompt": "short"}\n{"prompt": "a longer text"}\n')
    model = ModelSpec(name="lm", location=LOCATION, base_dir=tmp_path, factory="a:b")
    scenario = Scenario(
        suite=tmp_path / "s.yaml",
        name="gen",
        cell_id="p4",
        model=model,
        location=LOCATION,
        generate=GenerateSpec(prompt_tokens=4, new_tokens=2),
    )
    text = AccuracyText(
        tmp_path / "texts.jsonl", "perfguard_examples.tinylm:byte_tokenizer", tokens=8, count=2
    )
    with pytest.raises(InputError) as err:
        text_set(scenario, text, 2048)
    message = str(err.value)
    assert "has 1 prompts of at least 8 tokens (1 shorter ones passed over)" in message
    assert (
        "lower `tokens` or `count` of it" in message and "`prompts`" not in message.split("Fix:")[1]
    )
    texts = text_set(scenario, replace(text, tokens=5, count=2), 2048)
    assert [t.tolist() for t in texts] == [[list(b"short")], [list(b"a lon")]]
