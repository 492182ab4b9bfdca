"""Generative cells on a real NVIDIA GPU (marker ``gpu``): run by ``scripts/gpu-check``.

Everywhere else they are skipped with the reason (tests/conftest.py); each also skips,
with its reason, when the runtime it needs is not installed there (a CUDA torch,
onnxruntime-genai-cuda). The same paths on the CPU: tests/backends/test_torch_generate.py
and tests/backends/test_ort_genai.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.core.scenario import GenerateSpec, GpuSpec, Scenario
from tests.helpers.tokens import lm_cell

pytestmark = pytest.mark.gpu

SMALL = (("kind", "llama"), ("layers", 2), ("hidden", 128), ("heads", 4), ("vocab", 256))


def cell(tmp_path: Path, **fields: Any) -> Scenario:
    spec = GenerateSpec(prompt_tokens=16, new_tokens=8, batch=2)
    return lm_cell(tmp_path, SMALL, generate=spec, cell_id="p16", device="cuda:0", **fields)


def run(gen: Any, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, int]:
    stamps: list[int] = []
    out = gen.generate(gen.prepare(prompt), new_tokens, lambda: stamps.append(1))
    return gen.tokens(out), len(stamps)


def cuda_torch() -> Any:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no CUDA device")
    return torch


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_torch_generates_on_the_gpu_with_a_host_copy_per_token(
    tmp_path: Path, precision: str
) -> None:
    cuda_torch()
    from perfguard.backends.torch_generate import TorchGenerator

    gen = TorchGenerator(cell(tmp_path, precision=precision))
    try:
        assert gen.runtime_info["device"] == "cuda:0" and gen.runtime_info["gpu"]
        prompt = np.random.default_rng(0).integers(0, 256, (2, 16))
        tokens, stamps = run(gen, prompt, 8)
        assert tokens.shape == (2, 8) and stamps == 8
        logits = gen.logits(np.concatenate([prompt, tokens[:, :-1]], axis=1))
        assert logits.shape == (2, 23, 256) and logits.dtype == np.float32
        assert np.isfinite(logits).all()
    finally:
        gen.close()


def test_torch_compile_reduce_overhead_gives_the_eager_tokens(tmp_path: Path) -> None:
    """`compile: reduce-overhead`: the static-cache decode loop captured in CUDA graphs
    (torch's graph trees), its tokens the eager loop's."""
    cuda_torch()
    from perfguard.backends.torch_generate import TorchGenerator

    eager = TorchGenerator(cell(tmp_path))
    compiled = TorchGenerator(cell(tmp_path, gpu=GpuSpec(compile_mode="reduce-overhead")))
    try:
        assert compiled.runtime_info["compile_s"] > 0
        assert compiled.runtime_info["kv_cache"] == "StaticCache (24 positions)"
        rng = np.random.default_rng(1)
        for _ in range(3):
            prompt = rng.integers(0, 256, (2, 16))
            assert run(compiled, prompt, 8)[0].tolist() == run(eager, prompt, 8)[0].tolist()
    finally:
        compiled.close()
        eager.close()


def cuda_genai() -> Any:
    og = pytest.importorskip("onnxruntime_genai")
    pytest.importorskip("transformers")
    if not og.is_cuda_available():
        pytest.skip(f"onnxruntime-genai {og.__version__} has no CUDA (onnxruntime-genai-cuda)")
    return og


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int4"])
def test_onnxruntime_genai_generates_on_the_gpu(tmp_path: Path, precision: str) -> None:
    cuda_genai()
    from perfguard.backends.ort_genai import OrtGenAIGenerator

    scenario = cell(tmp_path, backend="onnxruntime", precision=precision)
    gen = OrtGenAIGenerator(scenario, tmp_path / "cache")
    try:
        assert gen.runtime_info["provider"] == "cuda" and gen.runtime_info["device"] == "cuda:0"
        assert gen.runtime_info["builder_precision"] == precision
        prompt = np.random.default_rng(2).integers(0, 256, (2, 16))
        tokens, stamps = run(gen, prompt, 8)
        assert tokens.shape == (2, 8) and stamps == 8
        if precision == "fp32":  # the same tokens as the model in transformers
            from perfguard.backends.torch_generate import TorchGenerator

            reference = TorchGenerator(replace(scenario, backend="torch", device="cpu"))
            try:
                forced = reference.logits(np.concatenate([prompt, tokens[:, :-1]], axis=1))
                agree = forced[:, 15:, :].argmax(axis=-1) == tokens
                assert agree.mean() >= 0.9  # fp32 on two devices: rare near-ties may part
            finally:
                reference.close()
    finally:
        gen.close()
