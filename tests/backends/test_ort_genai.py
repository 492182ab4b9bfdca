"""perfguard.backends.ort_genai and ort_genai_build: the generation path of
``backend: onnxruntime`` through the real onnxruntime-genai package and its model
builder, on a small seeded transformers Llama (perfguard_examples.tinylm)."""

from __future__ import annotations

import threading
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.backends import generative
from perfguard.backends.onnxruntime_backend import OnnxRuntimeBackend
from perfguard.backends.ort_genai import OrtGenAIGenerator
from perfguard.backends.ort_genai_build import (
    GENAI_CONFIG,
    builder_identity,
    checkpoint_key,
    genai_model,
)
from perfguard.core.errors import BackendUnavailable, CellError, ModelError
from perfguard.core.scenario import Scenario
from tests.helpers.tokens import SMALL_LM, lm_cell

og = pytest.importorskip("onnxruntime_genai")
pytest.importorskip("transformers")

SMALL = SMALL_LM


def cell(
    tmp_path: Path,
    kwargs: tuple[tuple[str, object], ...] = SMALL,
    *,
    factory: str | None = "perfguard_examples.tinylm:build",
    **fields: Any,
) -> Scenario:
    return lm_cell(tmp_path, kwargs, factory=factory, backend="onnxruntime", threads=1, **fields)


def open_cell(scenario: Scenario, cache: Path) -> OrtGenAIGenerator:
    maker = generative(OnnxRuntimeBackend())
    assert maker is not None
    gen = maker.open_generative(scenario, cache)
    assert isinstance(gen, OrtGenAIGenerator)
    return gen


def run(gen: OrtGenAIGenerator, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, int]:
    stamps: list[int] = []
    out = gen.generate(gen.prepare(prompt), new_tokens, lambda: stamps.append(1))
    return gen.tokens(out), len(stamps)


@pytest.fixture(scope="module")
def fp32(tmp_path_factory: pytest.TempPathFactory) -> tuple[Scenario, Path]:
    """One fp32 build shared by the tests that only read it (a build takes seconds)."""
    folder = tmp_path_factory.mktemp("genai")
    return cell(folder), folder / "cache"


def greedy(scenario: Scenario, prompt: np.ndarray, new_tokens: int, *, min_new: bool) -> Any:
    """transformers' own greedy generation of the cell's model; ``min_new``: its
    end-of-sequence masked until ``new_tokens`` (``min_new_tokens``), else ignored."""
    import torch

    from perfguard.models.factory import load_factory

    model = load_factory(scenario.model)
    extra: dict[str, Any] = {"min_new_tokens": new_tokens} if min_new else {}
    if not min_new:
        model.generation_config.eos_token_id = None
    with torch.inference_mode():
        out = model.generate(
            torch.from_numpy(prompt),
            attention_mask=torch.ones(prompt.shape, dtype=torch.long),
            do_sample=False,
            max_new_tokens=new_tokens,
            pad_token_id=0,
            **extra,
        )
    return out[:, prompt.shape[1] :].numpy()


def test_the_tokens_are_transformers_greedy_generation(fp32: tuple[Scenario, Path]) -> None:
    scenario, cache = fp32
    gen = open_cell(scenario, cache)
    try:
        prompt = np.random.default_rng(0).integers(0, 128, (2, 12))
        tokens, stamps = run(gen, prompt, 6)
        assert tokens.shape == (2, 6) and tokens.dtype == np.int64 and stamps == 6
        assert tokens.tolist() == greedy(scenario, prompt, 6, min_new=True).tolist()
        assert gen.vocab_size == 128
    finally:
        gen.close()


def test_generation_never_stops_at_the_end_of_sequence(fp32: tuple[Scenario, Path]) -> None:
    """Where the model's greedy choice is its EOS id (2), ONNX Runtime GenAI takes the
    next best token and goes on: every request has all of its tokens."""
    scenario, cache = fp32
    gen = open_cell(scenario, cache)
    try:
        rng = np.random.default_rng(1)
        for _ in range(20):  # prompts until plain greedy decoding would choose EOS
            prompt = rng.integers(0, 128, (1, 12))
            if 2 in greedy(scenario, prompt, 12, min_new=False)[0, :-1]:
                break
        else:
            pytest.skip("no prompt decoded the EOS id (a property of the seeded weights)")
        tokens, stamps = run(gen, prompt, 12)
        assert tokens.shape == (1, 12) and stamps == 12 and 2 not in tokens
    finally:
        gen.close()


def test_a_build_is_cached_and_keyed_on_the_weights_and_precision(
    fp32: tuple[Scenario, Path],
) -> None:
    scenario, cache = fp32
    first = genai_model(scenario, cache, "cpu", og)
    again = genai_model(scenario, cache, "cpu", og)
    assert (first.folder / GENAI_CONFIG).is_file()
    assert again.folder == first.folder and not again.built  # a cache hit
    reseeded = replace(scenario.model, factory_kwargs=(*SMALL, ("seed", 1)))
    other = genai_model(replace(scenario, model=reseeded), cache, "cpu", og)
    assert other.built and other.folder != first.folder and other.key != first.key
    int4 = genai_model(replace(scenario, precision="int4"), cache, "cpu", og)
    assert int4.built and int4.folder.name.startswith("lm-genai-int4-")
    assert int4.facts()["builder_options"] == {"block_size": "32", "accuracy_level": "4"}
    # Nothing half-written is left beside the builds.
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]


def test_the_key_covers_every_checkpoint_byte_and_the_builder(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"vocab_size": 128}')
    (checkpoint / "model.safetensors").write_bytes(b"\0" * 64)
    identity = builder_identity(og)
    assert identity["onnxruntime-genai"] == og.__version__
    key = checkpoint_key(checkpoint, identity)
    assert checkpoint_key(checkpoint, dict(identity)) == key
    newer = types.SimpleNamespace(__version__="99.0", __commit__=og.__commit__)
    assert checkpoint_key(checkpoint, builder_identity(newer)) != key
    assert checkpoint_key(checkpoint, {**identity, "precision": "int4"}) != key
    (checkpoint / "model.safetensors").write_bytes(b"\0" * 63 + b"\1")
    assert checkpoint_key(checkpoint, identity) != key


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_quantized_builds_generate_their_tokens(tmp_path: Path, precision: str) -> None:
    gen = open_cell(cell(tmp_path, precision=precision), tmp_path / "cache")
    try:
        tokens, stamps = run(gen, np.random.default_rng(0).integers(0, 128, (2, 12)), 6)
        assert tokens.shape == (2, 6) and stamps == 6
        info = gen.runtime_info
        assert info["precision"] == info["builder_precision"] == precision
        assert info["onnxruntime-genai"] == og.__version__
        assert info["kv_cache"].startswith("one buffer")  # the builder's CPU choice
        assert info["threads"] == 1 and info["provider"] == "cpu"
        graph = (gen.build.folder / "model.onnx").read_bytes()
        assert b"MatMulNBits" in graph  # the weights really are quantized
    finally:
        gen.close()


def test_concurrent_requests_take_turns_and_keep_their_tokens(
    fp32: tuple[Scenario, Path],
) -> None:
    scenario, cache = fp32
    gen = open_cell(scenario, cache)
    try:
        prompts = [np.random.default_rng(i).integers(0, 128, (2, 12)) for i in range(4)]
        alone = [run(gen, p, 8)[0].tolist() for p in prompts]
        together: dict[int, list[list[int]]] = {}

        def request(i: int) -> None:
            together[i] = run(gen, prompts[i], 8)[0].tolist()

        threads = [threading.Thread(target=request, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [together[i] for i in range(4)] == alone
    finally:
        gen.close()


def test_a_folder_the_suite_names_is_run_as_it_is(
    fp32: tuple[Scenario, Path], tmp_path: Path
) -> None:
    scenario, cache = fp32
    built = genai_model(scenario, cache, "cpu", og).folder
    given = cell(tmp_path, factory=None, onnx=str(built))
    gen = open_cell(given, tmp_path / "unused-cache")
    try:
        assert gen.runtime_info["model_folder"] == str(built)
        assert run(gen, np.zeros((2, 12), dtype=np.int64), 3)[0].shape == (2, 3)
        assert not (tmp_path / "unused-cache").exists()  # nothing was built
    finally:
        gen.close()


def test_a_folder_without_a_genai_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "exported").mkdir()
    (tmp_path / "model.onnx").write_bytes(b"")
    for given, said in (("exported", "without genai_config.json"), ("model.onnx", "a file")):
        with pytest.raises(ModelError) as err:
            open_cell(cell(tmp_path, factory=None, onnx=given), tmp_path)
        assert said in str(err.value) and "onnxruntime_genai.models.builder" in str(err.value)


def test_a_factory_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plainnet.py").write_text(
        "import torch\n\ndef build():\n    return torch.nn.Linear(4, 4)\n"
    )
    with pytest.raises(CellError) as err:
        open_cell(cell(tmp_path, (), factory="plainnet:build"), tmp_path / "cache")
    text = str(err.value)
    assert "Linear without `save_pretrained`" in text and "*ForCausalLM" in text


def test_a_builder_failure_says_what_the_builder_said(tmp_path: Path) -> None:
    (tmp_path / "bertnet.py").write_text(
        "from transformers import BertConfig, BertForMaskedLM\n\n"
        "def build():\n"
        "    return BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=32,\n"
        "        num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)).eval()\n"
    )
    with pytest.raises(ModelError) as err:
        open_cell(cell(tmp_path, (), factory="bertnet:build"), tmp_path / "cache")
    text = str(err.value)
    assert "model builder failed on model 'lm' (BertForMaskedLM, fp32" in text
    assert "is not currently supported" in text and "RuntimeWarning" not in text
    cache = tmp_path / "cache"
    assert not [p for p in cache.iterdir() if not p.name.endswith(".lock")]  # nothing kept


def test_a_request_longer_than_the_context_is_refused(tmp_path: Path) -> None:
    small = cell(tmp_path, (*SMALL, ("context", 16)))
    with pytest.raises(CellError) as err:
        open_cell(small, tmp_path / "cache")
    assert "needs 18 positions" in str(err.value) and "context_length is 16" in str(err.value)


def test_a_gpu_cell_without_the_cuda_package_says_so(tmp_path: Path) -> None:
    if og.is_cuda_available():
        pytest.skip("this onnxruntime-genai has CUDA")
    with pytest.raises(CellError) as err:
        open_cell(cell(tmp_path, device="cuda"), tmp_path / "cache")
    assert "is_cuda_available() is False" in str(err.value)
    assert "onnxruntime-genai-cuda" in str(err.value)


def test_a_missing_package_is_a_skip_with_the_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime_genai" else real(name, *a),
    )
    with pytest.raises(BackendUnavailable) as err:
        open_cell(cell(tmp_path), tmp_path / "cache")
    assert "pip install onnxruntime-genai" in str(err.value)


def test_every_name_the_backend_calls_is_in_the_real_package() -> None:
    """The CPU and CUDA packages share these bindings; a rename in a new release fails
    here, not on a GPU runner."""
    for name in ("Config", "Model", "GeneratorParams", "Generator", "is_cuda_available"):
        assert hasattr(og, name), name
    assert callable(og.set_current_gpu_device_id)
    for name in ("overlay", "clear_providers", "append_provider"):
        assert hasattr(og.Config, name), name
    assert hasattr(og.GeneratorParams, "set_search_options")
    for name in ("append_tokens", "generate_next_token", "get_next_tokens"):
        assert hasattr(og.Generator, name), name


def test_teacher_forced_logits_are_transformers_own(fp32: tuple[Scenario, Path]) -> None:
    """Every position's next-token logits in one pass (the accuracy checks' teacher
    forcing), equal to the transformers model's at fp32."""
    import torch

    from perfguard.models.factory import load_factory

    scenario, cache = fp32
    gen = open_cell(scenario, cache)
    try:
        ids = np.random.default_rng(3).integers(0, 128, (2, 20))
        got = gen.logits(ids)
        assert got.shape == (2, 20, 128) and got.dtype == np.float32
        with torch.inference_mode():
            expected = load_factory(scenario.model)(input_ids=torch.from_numpy(ids)).logits
        assert np.abs(got - expected.numpy()).max() < 1e-4
    finally:
        gen.close()
