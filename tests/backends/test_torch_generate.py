"""perfguard.backends.torch_generate: greedy generation through a real transformers causal
LM's forward and KV cache (perfguard_examples.tinylm, seeded random weights)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.backends import generative
from perfguard.backends.torch_backend import TorchBackend
from perfguard.backends.torch_generate import TorchGenerator
from perfguard.core.errors import CellError, ModelError
from perfguard.core.scenario import GpuSpec, Scenario
from tests.helpers.tokens import SMALL_LM, lm_cell

pytest.importorskip("transformers")

SMALL = SMALL_LM


def cell(tmp_path: Path, kwargs: tuple[tuple[str, object], ...] = SMALL, **fields: Any) -> Scenario:
    return lm_cell(tmp_path, kwargs, threads=1, **fields)


def run(gen: TorchGenerator, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, int]:
    stamps: list[int] = []
    out = gen.generate(gen.prepare(prompt), new_tokens, lambda: stamps.append(1))
    return gen.tokens(out), len(stamps)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_the_tokens_are_transformers_own_greedy_generation(tmp_path: Path, kind: str) -> None:
    import torch

    kwargs = (("kind", kind), *SMALL[1:])
    gen = generative(TorchBackend()).open_generative(cell(tmp_path, kwargs), tmp_path)  # type: ignore[union-attr]
    assert isinstance(gen, TorchGenerator)
    try:
        prompt = np.random.default_rng(0).integers(0, 128, (2, 12))
        tokens, stamps = run(gen, prompt, 6)
        assert tokens.shape == (2, 6) and stamps == 6
        model = gen._module
        # No end of sequence: the model's EOS id is one more token (perfguard never
        # stops early), and min_new_tokens would forbid it instead.
        model.generation_config.eos_token_id = None
        with torch.inference_mode():
            expected = model.generate(
                torch.from_numpy(prompt),
                attention_mask=torch.ones(2, 12, dtype=torch.long),
                do_sample=False,
                max_new_tokens=6,
                pad_token_id=0,
            )[:, 12:]
        assert tokens.tolist() == expected.tolist()
    finally:
        gen.close()


def test_runtime_facts_name_the_cache_and_versions(tmp_path: Path) -> None:
    import transformers

    gen = TorchGenerator(cell(tmp_path))
    try:
        info = gen.runtime_info
        assert info["kv_cache"] == "DynamicCache" and info["decoding"] == "greedy"
        assert info["transformers"] == transformers.__version__
        assert info["threads"] == 1 and info["precision"] == "fp32"
        assert gen.vocab_size == 128
    finally:
        gen.close()


def test_int8_quantizes_the_linear_layers_and_still_generates(tmp_path: Path) -> None:
    gen = TorchGenerator(cell(tmp_path, precision="int8"))
    try:
        applied = gen.runtime_info["quantization"]["applied"]
        assert sum(applied["quantized"].values()) > 0
        tokens, stamps = run(gen, np.zeros((2, 12), dtype=np.int64), 4)
        assert tokens.shape == (2, 4) and stamps == 4
    finally:
        gen.close()


def test_one_new_token_is_the_prefill_alone(tmp_path: Path) -> None:
    gen = TorchGenerator(cell(tmp_path))
    try:
        tokens, stamps = run(gen, np.ones((2, 12), dtype=np.int64), 1)
        assert tokens.shape == (2, 1) and stamps == 1
    finally:
        gen.close()


NO_CACHE = """\
import torch


class Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, input_ids):
        return self.emb(input_ids)


def build():
    return Plain()
"""


def test_a_model_without_a_kv_cache_is_refused_with_what_it_needs(tmp_path: Path) -> None:
    (tmp_path / "plainlm.py").write_text(NO_CACHE)
    sc = cell(tmp_path)
    sc = replace(sc, model=replace(sc.model, factory="plainlm:build", factory_kwargs=()))
    with pytest.raises(ModelError) as info:
        TorchGenerator(sc)
    message = str(info.value)
    assert "takes no KV cache (neither `cache` nor `past_key_values`)" in message
    assert "*ForCausalLM" in message


def test_cuda_graph_is_refused_on_a_gpu_generative_cell_with_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before anything touches the device (so the rule is checked here on a CPU
    machine, the device parsed as `cuda`)."""
    import torch

    from perfguard.backends import torch_generate

    monkeypatch.setattr(torch_generate, "parse_torch_device", lambda sc: torch.device("cuda"))
    with pytest.raises(CellError) as err:
        TorchGenerator(cell(tmp_path, device="cuda", gpu=GpuSpec(cuda_graph=True)))
    assert "replace `cuda_graph: true` with `compile: reduce-overhead`" in str(err.value)


def test_teacher_forced_logits_predict_the_greedy_tokens(tmp_path: Path) -> None:
    """``logits`` scores a whole sequence in one pass: fed the prompt and its own greedy
    tokens, the argmax at each position is the next greedy token (the same positions the
    accuracy checks compare)."""
    gen = generative(TorchBackend()).open_generative(cell(tmp_path), tmp_path)  # type: ignore[union-attr]
    assert isinstance(gen, TorchGenerator)
    try:
        prompt = np.random.default_rng(4).integers(0, 128, (2, 12))
        tokens, _ = run(gen, prompt, 6)
        logits = gen.logits(np.concatenate([prompt, tokens[:, :-1]], axis=1))
        assert logits.shape == (2, 17, 128) and logits.dtype == np.float32
        assert logits[:, 11:, :].argmax(axis=-1).tolist() == tokens.tolist()
    finally:
        gen.close()


@pytest.mark.slow
def test_a_compiled_cell_generates_the_eager_tokens_over_a_static_cache(tmp_path: Path) -> None:
    """``gpu: {compile: default}`` (acting on the CPU as on the torch backend): the
    module compiled while the cell opens, over a StaticCache of the request's length,
    zeroed per request; its tokens are the eager loop's, request after request."""
    eager = generative(TorchBackend()).open_generative(cell(tmp_path), tmp_path)  # type: ignore[union-attr]
    compiled_cell = cell(tmp_path, gpu=GpuSpec(compile_mode="default"))
    compiled = generative(TorchBackend()).open_generative(compiled_cell, tmp_path)  # type: ignore[union-attr]
    try:
        info = compiled.runtime_info
        assert info["compile_mode"] == "default" and info["compile_s"] > 0
        assert info["kv_cache"] == "StaticCache (18 positions)"
        rng = np.random.default_rng(5)
        for _ in range(3):  # the static cache is reset between requests
            prompt = rng.integers(0, 128, (2, 12))
            assert run(compiled, prompt, 6)[0].tolist() == run(eager, prompt, 6)[0].tolist()
    finally:
        compiled.close()
        eager.close()


def test_a_compiled_cell_under_load_is_refused(tmp_path: Path) -> None:
    from perfguard.core.scenario import LoadSpec

    loaded = cell(tmp_path, gpu=GpuSpec(compile_mode="default"), load=LoadSpec("closed", 2.0))
    with pytest.raises(CellError) as err:
        TorchGenerator(loaded)
    assert "under `load:`" in str(err.value) and "one static KV cache" in str(err.value)
