"""End to end: accuracy of generative cells through `pytest --perfguard`, on the example
model (perfguard_examples.tinylm: a real transformers Llama, seeded weights) on torch
and on ONNX Runtime GenAI (its real model builder), against torch fp32.

ONNX Runtime GenAI at fp32 generates the reference's tokens and scores its text set to
float rounding; its int4 build parts from the reference's greedy tokens early (the
random model's top-1 margins are small) and fails `token_match_min` with the place they
part. Then a commit that changes the weights fails every cell's check against the
baseline's golden outputs (the logits over the prompts), though each cell still agrees
with its reference of the same commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.git_repos import SpinRepo

pytest.importorskip("onnxruntime_genai")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

INI = "[pytest]\nperfguard_contention_limit = 1.01\n"
TEXTS = Path(__file__).resolve().parents[2] / "examples" / "generative" / "texts.jsonl"


def suite(seed: int) -> str:
    return f"""\
models:
  lm:
    factory: perfguard_examples.tinylm:build
    kwargs: {{kind: llama, seed: {seed}, layers: 2, hidden: 128}}
scenarios:
  - name: gen
    model: lm
    threads: 1
    generate: {{prompt_tokens: 24, new_tokens: 12, prompts: 4}}
    warmup: {{iterations: 2, seconds: 0.05}}
    measure: {{iterations: 10, seconds: 0.1}}
    matrix:
      backend: [torch, onnxruntime]
      precision: [fp32, int4]
    exclude: [{{backend: torch, precision: int4}}]
    accuracy:
      reference: {{backend: torch, precision: fp32}}
      text: {{file: texts.jsonl, tokenizer: "perfguard_examples.tinylm:byte_tokenizer",
              tokens: 48, count: 4}}
      gate: {{token_match_min: 0.9, kl_max: 0.001, perplexity_rise_max: 0.05}}
"""


def accuracy_of(repo: SpinRepo, sha: str) -> dict[str, Any]:
    results = json.loads((repo.path / "reports" / sha[:12] / "results.json").read_text())
    return {s["id"].split("[")[1].rstrip("]"): s["accuracy"] for s in results["scenarios"]}


def test_generated_tokens_logits_and_perplexity_against_torch_fp32(
    pytester: pytest.Pytester,
) -> None:
    repo = SpinRepo(pytester, INI)
    (repo.path / "suites" / "texts.jsonl").write_text(TEXTS.read_text())
    base = repo.commit_suite(suite(0), "base")
    run = pytester.runpytest("--perfguard", "--perfguard-save", "-rA")
    run.assert_outcomes(passed=2, failed=1)
    run.stdout.fnmatch_lines(
        ["*gen[onnxruntime-int4-p24]*greedy tokens match * < 0.9 vs reference torch-fp32-p24:*"]
    )
    got = accuracy_of(repo, base)
    fp32 = got["onnxruntime-fp32-p24"]
    assert fp32["passed"] and fp32["reference"] == "torch-fp32-p24"
    assert fp32["tokens"]["match"] == 1.0 and set(fp32["tokens"]["first_divergence"]) == {None}
    assert fp32["tokens"]["tokens"] == 4 * 12
    (logits,) = fp32["report"]["outputs"]
    assert logits["name"] == "next_token_logits" and logits["values"]["kl_mean"] < 1e-9
    ppl = fp32["perplexity"]
    assert ppl["texts"] == 4 and ppl["tokens"] == 48 and abs(ppl["rise"]) < 1e-5
    int4 = got["onnxruntime-int4-p24"]
    assert not int4["passed"] and int4["tokens"]["match"] < 0.9
    assert any(p is not None for p in int4["tokens"]["first_divergence"])
    reference = got["torch-fp32-p24"]
    assert "tokens" not in reference  # the reference is compared with none
    assert reference["perplexity"]["reference"] is None

    repo.commit_suite(suite(1), "new weights")
    moved = pytester.runpytest("--perfguard", "-rA")
    moved.assert_outcomes(failed=3)
    moved.stdout.fnmatch_lines(["*prompt_logits*baseline*"])
    after = accuracy_of(repo, repo.git("rev-parse", "HEAD"))
    assert after["onnxruntime-fp32-p24"]["tokens"]["match"] == 1.0  # still its reference's
    assert not after["onnxruntime-fp32-p24"]["baseline"]["passed"]
