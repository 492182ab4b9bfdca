"""Accuracy of a generative cell: what its greedy tokens and next-token distributions
are against its reference cell's, and its perplexity on a text set.

On the cell's own prompts (``generate:``: every prompt of the set, every row of its
batch), with ``N = new_tokens``:

* **Greedy tokens.** Both cells generate their ``N`` tokens greedily (as timed). The
  share of positions where the two agree is ``match`` and, per row, the first position
  where they part is kept (:class:`~perfguard.records.accuracyfigures.TokenAgreement`);
  gated by ``token_match_min``. Once two rows part, the rest of each continues its own
  text, so ``match`` falls fast after an early split: the first divergence says where.
* **Next-token distributions, teacher-forced.** Both cells score the *reference's*
  sequence (prompt + its ``N`` tokens) in one pass, so that position ``i`` of both sides
  predicts the same token after the same text. The ``N`` rows of logits that predict
  the reference's tokens (one row per request row and position: ``rows x N`` samples)
  are the output ``next_token_logits``, compared by
  :func:`perfguard.accuracy.metrics.compare_outputs` with the existing keys: per-row
  cosine of the logits (``cosine_min``, ``cosine_mean_min``), KL of their softmax
  (``kl_max``), top-k agreement (``topk_agreement_min``; top-1: the greedy choice under
  teacher forcing), absolute and relative errors.
* **Perplexity** on ``accuracy.text`` (texts of a fixed token length, encoded by the
  suite's tokenizer): ``exp`` of the mean negative log-likelihood of each next token,
  on both cells; gated by ``perplexity_rise_max`` (relative rise over the reference's).
* **Against the baseline commit** (without a reference cell too), the logits over the
  prompts themselves (``prompt_logits``: positions that line up on any commit) are the
  golden outputs archived and checked with ``baseline_cosine_min``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from perfguard.backends.base import GenerativeSession
from perfguard.core.scenario import AccuracyText, GenerateSpec, Scenario
from perfguard.models.prompts import make_prompts
from perfguard.records.accuracyfigures import PerplexityFigures, TokenAgreement

__all__ = [
    "NEXT_TOKEN_OUTPUT",
    "PROMPT_OUTPUT",
    "Generated",
    "greedy_tokens",
    "perplexity",
    "perplexity_figures",
    "prompt_logits",
    "teacher_forced",
    "text_set",
    "token_agreement",
]

#: The output name of the teacher-forced next-token logits (the reference comparison).
NEXT_TOKEN_OUTPUT = "next_token_logits"
#: The output name of the logits over the prompts (the golden outputs of a baseline).
PROMPT_OUTPUT = "prompt_logits"

Tokens = npt.NDArray[np.int64]
Logits = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Generated:
    """What a reference cell gives every cell compared with it: its greedy ``tokens``
    (``rows x N``), its own teacher-forced ``logits`` on them (``rows*N x vocab``) and
    its perplexity on the text set (None without one)."""

    tokens: Tokens
    logits: Logits
    perplexity: float | None


def greedy_tokens(session: GenerativeSession, prompts: Sequence[Tokens], new_tokens: int) -> Tokens:
    """Each prompt's greedy tokens, one row per batch row: ``rows x new_tokens``."""
    rows = []
    for p in prompts:
        ids = session.tokens(session.generate(session.prepare(p), new_tokens, _no_stamp))
        # the loader refuses accuracy on a served model, the one kind that gives no ids
        assert ids is not None, "token ids"
        rows.append(ids)
    return np.concatenate(rows, axis=0).astype(np.int64)


def _no_stamp() -> None:
    return None


def teacher_forced(session: GenerativeSession, prompts: Sequence[Tokens], tokens: Tokens) -> Logits:
    """The logits that predict ``tokens`` (``rows x N``, the reference's) after each
    prompt, with the sequence fed whole: ``rows*N x vocab``, row-major by request row."""
    out: list[Logits] = []
    start = 0
    for prompt in prompts:
        batch, length = prompt.shape
        forced = tokens[start : start + batch]
        start += batch
        sequence = np.concatenate([prompt, forced[:, :-1]], axis=1)
        logits = session.logits(sequence)  # batch x (length + N - 1) x vocab
        predicting = logits[:, length - 1 :, :]  # positions that predict forced[:, j]
        out.append(predicting.reshape(-1, predicting.shape[-1]))
    return np.concatenate(out, axis=0).astype(np.float32)


def prompt_logits(session: GenerativeSession, prompts: Sequence[Tokens], rows: int) -> Logits:
    """The first ``rows`` rows of the logits over the prompts themselves (every
    position, request row by row): the same positions on any commit."""
    out: list[Logits] = []
    have = 0
    for prompt in prompts:
        if have >= rows:
            break
        logits = session.logits(prompt)
        flat = logits.reshape(-1, logits.shape[-1])
        out.append(flat[: rows - have])
        have += len(out[-1])
    return np.concatenate(out, axis=0).astype(np.float32)


def token_agreement(current: Tokens, reference: Tokens, limit: float | None) -> TokenAgreement:
    """``current`` against ``reference`` (both ``rows x N``) position by position."""
    if current.shape != reference.shape:
        raise ValueError(f"tokens of shape {current.shape} against {reference.shape}")
    equal = current == reference
    firsts: list[int | None] = []
    for row in equal:
        parted = np.flatnonzero(~row)
        firsts.append(int(parted[0]) if parted.size else None)
    match = float(equal.mean()) if equal.size else 1.0
    return TokenAgreement(
        tokens=int(equal.size),
        match=match,
        identical=sum(1 for f in firsts if f is None),
        first_divergence=tuple(firsts),
        limit=limit,
        passed=limit is None or match >= limit,
    )


def text_set(scenario: Scenario, text: AccuracyText, vocab: int | None) -> list[Tokens]:
    """The text set's token ids, one ``1 x tokens`` array per text (read as a generative
    cell reads its prompts file: the first ``count`` texts long enough)."""
    spec = GenerateSpec(
        prompt_tokens=text.tokens,
        new_tokens=1,
        prompts=text.count,
        file=text.file,
        tokenizer=text.tokenizer,
    )
    return make_prompts(dataclasses.replace(scenario, generate=spec), vocab, "accuracy.text")


def perplexity(session: GenerativeSession, texts: Sequence[Tokens]) -> float:
    """``exp`` of the mean negative log-likelihood of every next token of the texts."""
    total, count = 0.0, 0
    for ids in texts:
        logits = session.logits(ids).astype(np.float64)[:, :-1, :]
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_norm = np.log(np.exp(shifted).sum(axis=-1))
        targets = ids[:, 1:]
        picked = np.take_along_axis(shifted, targets[..., None], axis=-1)[..., 0]
        total += float((log_norm - picked).sum())
        count += int(targets.size)
    return math.exp(total / count) if count else math.nan


def perplexity_figures(
    texts: Sequence[Tokens], current: float, reference: float | None, limit: float | None
) -> PerplexityFigures:
    """The figures of the text set's perplexity, checked against ``perplexity_rise_max``."""
    rise = current / reference - 1.0 if reference else None
    passed = limit is None or rise is None or rise <= limit
    return PerplexityFigures(
        texts=len(texts),
        tokens=int(texts[0].shape[1]) if texts else 0,
        current=current,
        reference=reference,
        rise=rise,
        limit=limit,
        passed=passed,
    )
