"""perfguard.models.prompts: a generative cell's prompts, random or from a JSONL file,
always of the cell's fixed shape."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfguard.core.errors import InputError, ModelError
from perfguard.core.scenario import GenerateSpec, Scenario
from perfguard.models.prompts import make_prompts
from tests.helpers.torch_cells import scenario as torch_scenario

TOKENIZER = '''\
class Words:
    """One id per word: its length times 10 plus its first letter's place."""

    def encode(self, text):
        return [len(w) * 10 + (ord(w[0]) % 10) for w in text.split()]


def make():
    return Words()


def broken():
    return object()
'''


def cell(tmp_path: Path, **generate: object) -> Scenario:
    spec = GenerateSpec(**{"prompt_tokens": 4, "new_tokens": 2, **generate})  # type: ignore[arg-type]
    return replace(torch_scenario(tmp_path), generate=spec)


def test_random_prompts_are_reproducible_and_shaped(tmp_path: Path) -> None:
    sc = cell(tmp_path, prompt_tokens=6, batch=3, prompts=5, seed=11)
    one, two = make_prompts(sc, vocab=50), make_prompts(sc, vocab=50)
    assert len(one) == 5 and all(p.shape == (3, 6) and p.dtype == np.int64 for p in one)
    assert all(np.array_equal(a, b) for a, b in zip(one, two, strict=True))
    assert all(p.min() >= 0 and p.max() < 50 for p in one)
    other = make_prompts(replace(sc, generate=replace(sc.generate, seed=12)), vocab=50)  # type: ignore[type-var]
    assert not np.array_equal(one[0], other[0])


def test_the_suite_vocab_wins_and_none_at_all_is_an_error(tmp_path: Path) -> None:
    small = make_prompts(cell(tmp_path, vocab=3, prompts=20), vocab=50_000)
    assert max(int(p.max()) for p in small) < 3
    with pytest.raises(InputError, match=r"no `config\.vocab_size`") as info:
        make_prompts(cell(tmp_path), vocab=None)
    assert "add `vocab: N`" in str(info.value)


def _file(tmp_path: Path, lines: list[str]) -> Path:
    (tmp_path / "tok.py").write_text(TOKENIZER)
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_file_prompts_are_encoded_cut_and_short_ones_passed_over(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        [
            json.dumps({"prompt": "a bb ccc dddd eeeee"}),
            json.dumps({"prompt": "too short"}),
            "",
            json.dumps({"prompt": "x yy zzz ww v"}),
        ],
    )
    sc = cell(tmp_path, file=path, tokenizer="tok:make", prompts=1, batch=2)
    (prompt,) = make_prompts(sc, vocab=100)
    assert prompt.tolist() == [[17, 28, 39, 40], [10, 21, 32, 29]]


def test_too_few_long_prompts_say_how_many(tmp_path: Path) -> None:
    path = _file(tmp_path, [json.dumps({"prompt": "a b c d"}), json.dumps({"prompt": "a b"})])
    with pytest.raises(InputError) as info:
        make_prompts(cell(tmp_path, file=path, tokenizer="tok:make", prompts=2), vocab=100)
    message = str(info.value)
    assert "has 1 prompts of at least 4 tokens (1 shorter ones passed over)" in message
    assert "the cell needs 2" in message and "lower `prompt_tokens`" in message


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("{not json", "p.jsonl:2: not JSON"),
        (json.dumps({"text": "a b c d"}), 'p.jsonl:2: no "prompt"'),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, line: str, found: str) -> None:
    path = _file(tmp_path, [json.dumps({"prompt": "a b c d"}), line])
    with pytest.raises(InputError, match=found):
        make_prompts(cell(tmp_path, file=path, tokenizer="tok:make", prompts=2), vocab=100)


def test_ids_beyond_the_vocabulary_and_a_tokenizer_without_encode(tmp_path: Path) -> None:
    path = _file(tmp_path, [json.dumps({"prompt": "aaaaaaaaaa b c d"})])
    with pytest.raises(InputError, match=r"token id 107 .* beyond the vocabulary"):
        make_prompts(cell(tmp_path, file=path, tokenizer="tok:make", prompts=1), vocab=100)
    with pytest.raises(ModelError, match="has no encode"):
        make_prompts(cell(tmp_path, file=path, tokenizer="tok:broken", prompts=1), vocab=100)
