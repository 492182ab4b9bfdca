"""End-to-end: a decoder's prefill exported by the dynamo exporter and run on ONNX Runtime.

A 2-layer GPT-2 built from its config (random, seeded weights: nothing is downloaded).
Its prefill, ``forward(input_ids)`` with ``use_cache=False``, stops the TorchScript
exporter at ``aten::diff`` (transformers' mask code); the dynamo exporter gets past it,
and ONNX Runtime's logits match torch's. The traced model's failure names the operator
and the exporter option.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.suites import write_suite

pytest.importorskip("transformers")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

GPT2_PREFILL = """
import torch
import transformers


class Prefill(torch.nn.Module):
    '''GPT-2's prefill: one forward pass over the prompt, its logits (no KV cache).'''

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        config = transformers.GPT2Config(
            n_layer=2, n_head=2, n_embd=64, vocab_size=1000, n_positions=128
        )
        self.lm = transformers.GPT2LMHeadModel(config).eval()

    def forward(self, input_ids):
        return self.lm(input_ids=input_ids, use_cache=False).logits


def prefill():
    return Prefill()
"""

SUITE = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 20, seconds: 0}
  threads: 1
models:
  gpt2: &gpt2
    factory: gpt2prefill:prefill
    exporter: dynamo
    inputs:
      input_ids: {shape: [2, 16], dtype: int64, low: 0, high: 1000, seed: 1}
    outputs: [logits]
  gpt2-traced:
    <<: *gpt2
    exporter: torchscript
scenarios:
  - name: gpt2
    model: gpt2
    matrix:
      backend: [torch, onnxruntime]
    accuracy:
      inputs: {count: 4, seed: 5}
      reference: {backend: torch}
      gate: {cosine_min: 0.99999, max_abs_err: 0.001}
  - name: gpt2-traced
    model: gpt2-traced
    backend: onnxruntime
"""


def test_a_gpt2_prefill_exported_by_dynamo_matches_torch_on_onnxruntime(
    suite_writer: pytest.Pytester,
) -> None:
    path = write_suite(suite_writer, "gpt2", SUITE, models=False)
    (path.parent / "gpt2prefill.py").write_text(GPT2_PREFILL)
    result = suite_writer.runpytest("--perfguard", "-rf", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "perfguard: export gpt2: *to ONNX, opset 18, dynamo exporter*",
            "perfguard: export gpt2: *done in *s*",
            "accuracy: suites/gpt2.yaml::gpt2?onnxruntime?: logits: cos mean 1, min 1, *"
            "vs torch [[]ok[]]",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "failed: suites/gpt2.yaml::gpt2-traced: *: exporting factory gpt2prefill:prefill "
            "to ONNX (torchscript exporter, opset 17) stopped at operator `aten::diff`: "
            "Exporting the operator 'aten::diff' to ONNX opset version 17 is not supported; "
            "expected operators the TorchScript exporter translates to ONNX (no opset of it "
            "translates `aten::diff`: another `opset:` does not help). Fix: write "
            "`exporter: dynamo`*",
        ]
    )
    results = json.loads(next((suite_writer.path / "reports").glob("*/results.json")).read_text())
    cells = {s["name"]: s for s in results["scenarios"]}
    ort = cells["gpt2[onnxruntime]"]
    assert ort["accuracy"]["passed"] is True and ort["accuracy"]["n"] == 4
    assert ort["accuracy"]["reference"].startswith("torch")
    cached = list((suite_writer.path / ".perfguard" / "cache").glob("gpt2-*.onnx"))
    assert len(cached) == 1
