"""A generative cell's prompts: token ids of a fixed shape, made reproducibly.

``make_prompts`` gives ``spec.prompts`` arrays of ``batch x prompt_tokens`` int64 token ids,
which the cell's requests use in turn:

* random (no ``file``): drawn uniformly from ``[0, vocab)`` with a generator seeded by
  ``spec.seed``; the same seed, vocabulary and shape give the same prompts on any machine.
* from a JSONL file: one JSON object per line with a ``"prompt"`` string; blank lines are
  skipped. Each prompt is encoded by the suite's tokenizer (``module:function`` returning
  an object whose ``encode(text)`` gives token ids; a Hugging Face tokenizer has one) and
  cut to its first ``prompt_tokens`` ids; prompts shorter than that are passed over (a
  fixed shape is the rule), and too few long enough ones is an error naming the file,
  what it holds and the fix. The rows of a request's batch are consecutive prompts.

A served model's server tokenizes its prompts itself: ``make_text_prompts`` gives its
cell ``spec.prompts`` texts instead (the file's prompts, or seeded random words from
``WORDS``), each long enough to be cut to ``prompt_tokens`` of the server's tokens by
``perfguard.backends.served``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from perfguard.core.errors import InputError, ModelError
from perfguard.core.scenario import GenerateSpec, Scenario
from perfguard.models.factory import import_function

__all__ = ["TEXT_BYTES_PER_TOKEN", "WORDS", "make_prompts", "make_text_prompts", "random_text"]

#: The words random text prompts are drawn from (plain ASCII, one or two tokens each in
#: common tokenizers).
_WORD_TEXT = """the of and to in is was for on that with as by at from his her an which or be are
    this have had not but were all one their there been has when who will more no if out
    so said what up its about into than them can only other new some time could these
    two may then first any like now my over such our man me even most made after also
    did many before must through back years where much your way well down should because
    each just those people how too little state good very make world still own see men
    work long get here between both life being under never day same another know while
    last might us great old year off come since against go came right used take three"""
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())
#: Random text prompts hold this many words per prompt token (enough for any tokenizer
#: whose words are at least a quarter of a token each).
_WORDS_PER_TOKEN = 4
#: What a random text takes per token, at most (its words are at most 7 letters and a
#: space): a ``text`` input's declared size (``perfguard.models.inputs.input_sizes``).
TEXT_BYTES_PER_TOKEN = _WORDS_PER_TOKEN * 8

Prompt = npt.NDArray[np.int64]


def random_text(rng: np.random.Generator, tokens: int) -> str:
    """Seeded random words from ``WORDS``, at least ``tokens`` tokens long in any common
    tokenizer: a served cell's prompt or a served embedding model's input text, which the
    server's own count cuts to length (``perfguard.backends.served``)."""
    return " ".join(rng.choice(np.asarray(WORDS), size=tokens * _WORDS_PER_TOKEN))


#: The suite keys a message names, per section whose texts are read here: the file's
#: key, and the keys that set how many long enough texts are needed.
SECTIONS: dict[str, tuple[str, str]] = {
    "generate": (
        "`file` under the scenario's `generate:`",
        "`prompt_tokens`, `prompts` or `batch`",
    ),
    "accuracy.text": ("`file` of the scenario's `accuracy.text`", "`tokens` or `count` of it"),
}


def make_prompts(scenario: Scenario, vocab: int | None, section: str = "generate") -> list[Prompt]:
    """The cell's prompts: ``prompts`` arrays of shape ``batch x prompt_tokens``.

    ``vocab`` is the model's vocabulary size (None: unknown), used when the suite gives
    none; ids from a tokenizer must lie below it. ``section`` (a key of ``SECTIONS``)
    is the suite section the spec came from, for the messages' fixes."""
    spec = scenario.generate
    assert spec is not None, scenario.item_name
    if spec.file is None:
        return _random(scenario, spec, spec.vocab or vocab)
    rows = _from_file(scenario, spec, spec.file, SECTIONS[section])
    if vocab is not None and (high := max(int(r.max()) for r in rows)) >= vocab:
        raise InputError(
            f"the tokenizer {spec.tokenizer} gives token id {high} for {spec.file}, beyond the "
            f"vocabulary of model {scenario.model.name!r} ({vocab} ids)",
            expected="the tokenizer the model was trained with",
            fix="point `tokenizer` at the model's own tokenizer",
            location=scenario.location,
        )
    return rows


def _random(scenario: Scenario, spec: GenerateSpec, vocab: int | None) -> list[Prompt]:
    if vocab is None:
        raise InputError(
            f"model {scenario.model.name!r} has no `config.vocab_size`, so random prompts "
            "cannot be drawn",
            expected="the vocabulary size, to draw token ids from [0, vocab)",
            fix="add `vocab: N` under the scenario's `generate:`",
            location=scenario.location,
        )
    rng = np.random.default_rng(spec.seed)
    shape = (spec.batch, spec.prompt_tokens)
    return [rng.integers(0, vocab, size=shape, dtype=np.int64) for _ in range(spec.prompts)]


def _from_file(
    scenario: Scenario, spec: GenerateSpec, path: Path, keys: tuple[str, str]
) -> list[Prompt]:
    assert spec.tokenizer is not None
    encode = _encoder(scenario, spec.tokenizer)
    need = spec.prompts * spec.batch
    lines = _lines(scenario, path, keys)
    ids: list[list[int]] = []
    short = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        text = _prompt_text(scenario, path, number, line)
        tokens = _encoded(scenario, spec, encode, text, path, number)
        if len(tokens) < spec.prompt_tokens:
            short += 1
            continue
        ids.append(tokens[: spec.prompt_tokens])
        if len(ids) == need:
            break
    if len(ids) < need:
        raise InputError(
            f"{path} has {len(ids)} prompts of at least {spec.prompt_tokens} tokens "
            f"({short} shorter ones passed over); the cell needs {need} "
            f"({spec.prompts} prompts x batch {spec.batch})",
            expected=f"{need} prompts that encode to >= {spec.prompt_tokens} tokens",
            fix=f"add longer texts to the file, or lower {keys[1]}",
            location=scenario.location,
        )
    rows = np.asarray(ids, dtype=np.int64).reshape(spec.prompts, spec.batch, spec.prompt_tokens)
    return [rows[i] for i in range(spec.prompts)]


def _lines(scenario: Scenario, path: Path, keys: tuple[str, str]) -> list[str]:
    """The lines of the prompts file at ``path`` (``keys``: the suite keys the fix names)."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(
            f"the prompts file {path} cannot be read: {exc.strerror or exc}",
            expected='a JSONL file with one {"prompt": "..."} per line',
            fix=f"check {keys[0]} (relative to the suite's folder)",
            location=scenario.location,
        ) from exc


def _prompt_text(scenario: Scenario, path: Path, number: int, line: str) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}:{number}: not JSON ({exc.msg} at column {exc.colno})",
            expected='one JSON object per line, e.g. {"prompt": "..."}',
            fix=f"fix line {number} of {path.name}",
            location=scenario.location,
        ) from None
    text = record.get("prompt") if isinstance(record, dict) else None
    if not isinstance(text, str):
        raise InputError(
            f'{path}:{number}: no "prompt" string in {line.strip()[:80]}',
            expected='an object with a "prompt" string',
            fix=f'write line {number} of {path.name} as {{"prompt": "..."}}',
            location=scenario.location,
        )
    return text


def _encoder(scenario: Scenario, tokenizer: str) -> Any:
    made = import_function(tokenizer, scenario.model.base_dir, scenario.location)()
    encode = getattr(made, "encode", None)
    if not callable(encode):
        raise ModelError(
            f"tokenizer {tokenizer} returned {type(made).__qualname__}, which has no encode()",
            expected="an object with encode(text) -> list of token ids (a Hugging Face tokenizer)",
            fix=f"return the tokenizer itself from {tokenizer}",
            location=scenario.location,
        )
    return encode


def _encoded(
    scenario: Scenario, spec: GenerateSpec, encode: Any, text: str, path: Path, number: int
) -> list[int]:
    try:
        tokens = [int(t) for t in encode(text)]
    except Exception as exc:
        raise ModelError(
            f"{path}:{number}: tokenizer {spec.tokenizer} failed on this prompt: "
            f"{type(exc).__name__}: {exc}",
            expected="encode(text) to return a list of token ids",
            fix=f"check the prompt on line {number}, or the tokenizer",
            location=scenario.location,
        ) from exc
    if any(t < 0 for t in tokens):
        raise InputError(
            f"{path}:{number}: tokenizer {spec.tokenizer} gave a negative token id",
            expected="token ids >= 0",
            fix="check the tokenizer",
            location=scenario.location,
        )
    return tokens


def make_text_prompts(scenario: Scenario) -> list[str]:
    """A served cell's prompts as texts: ``spec.prompts`` of them (``batch`` is 1), each
    at least ``prompt_tokens`` tokens long in any common tokenizer; the server's own
    count cuts them to length (``perfguard.backends.served``)."""
    spec = scenario.generate
    assert spec is not None, scenario.item_name
    if spec.file is None:
        rng = np.random.default_rng(spec.seed)
        return [random_text(rng, spec.prompt_tokens) for _ in range(spec.prompts)]
    path, keys = spec.file, SECTIONS["generate"]
    lines = _lines(scenario, path, keys)
    texts = [
        _prompt_text(scenario, path, number, line)
        for number, line in enumerate(lines, start=1)
        if line.strip()
    ]
    if len(texts) < spec.prompts:
        raise InputError(
            f"{path} has {len(texts)} prompts; the cell needs {spec.prompts}",
            expected=f"{spec.prompts} prompts of at least {spec.prompt_tokens} tokens",
            fix=f"add texts to the file, or lower {keys[1]}",
            location=scenario.location,
        )
    return texts[: spec.prompts]
