"""Greedy generation on ONNX Runtime GenAI: the generative path of ``backend: onnxruntime``.

ONNX Runtime's own generation loop (``onnxruntime_genai``): a model folder its model
builder wrote (``perfguard.backends.ort_genai_build``: the factory's checkpoint built
at fp32, int8 or int4 and cached, or a folder the suite names with ``onnx:``), a
``Generator`` per request with its KV cache. One request is

1. ``append_tokens(prompt)``: the **prefill**, one pass over the prompt filling the
   cache; then ``generate_next_token()`` picks the first token from its logits;
2. ``new_tokens - 1`` more ``generate_next_token()`` calls, each one **decode step**
   over the last token.

After each step ``get_next_tokens()`` copies the step's tokens to the host (as a
streaming server sends them) before ``stamp()``: on a GPU that copy is the step's
synchronisation, the one a streaming runtime makes anyway; no other sync is added.

Exactly ``new_tokens`` tokens, greedy, the way ONNX Runtime GenAI generates a fixed
length: ``min_length = max_length`` = the prompt plus ``new_tokens``, which keeps the
model's end-of-sequence tokens from being chosen (their logits are masked until then,
as transformers' ``min_new_tokens`` does). Its Generator has no way to go on past an
EOS it chose (a finished row is padded; an empty ``eos_token_id`` overlay falls back to
the pad id), so where the model's greedy choice is EOS it takes its next best token:
the same work per request, and the tokens of transformers' greedy ``generate`` with
``min_new_tokens`` (the torch path instead keeps an EOS token and goes on, as vLLM's
``ignore_eos`` does; the two part only at such a position). The sampler gets a fixed
seed (``_SEED``). The generator and its KV cache (one buffer of ``max_length``
positions where the builder chose ``past_present_share_buffer``) are made inside the
request, as a server makes them per request.

Threads: ``threads:`` sets the decoder session's ``intra_op_num_threads``. The Python
bindings hold the GIL in every native call and the C API says it is not thread safe,
so concurrent requests (a load cell's streams) take turns step by step under one lock:
ONNX Runtime GenAI's ``Generator`` does not batch separate requests together.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.backends.onnxruntime_backend import ort_device_index
from perfguard.backends.ort_genai_build import GENAI_CONFIG, builder_identity, genai_model
from perfguard.core.errors import BackendUnavailable, CellError, ModelError
from perfguard.core.scenario import Scenario

__all__ = ["GENAI_INSTALL_HINT", "OrtGenAIGeneration", "OrtGenAIGenerator"]

#: The sampler's seed. Greedy decoding never draws from it, but the default (-1) seeds
#: each ``Generator`` from ``std::random_device``, which took 12-15 ms per request on a
#: 2-core VM (0.01 ms with a fixed seed): a per-request cost no greedy server pays.
_SEED = 0

GENAI_INSTALL_HINT = (
    "pip install onnxruntime-genai (perfguard's `genai` extra; onnxruntime-genai-cuda "
    "on an NVIDIA GPU)"
)


class OrtGenAIGeneration:
    """onnxruntime's generation path (``perfguard.backends.base.GenerativeBackend``)."""

    def open_generative(self, scenario: Scenario, cache_dir: Path) -> OrtGenAIGenerator:
        """The scenario's causal LM as ONNX Runtime GenAI runs it, built if need be."""
        return OrtGenAIGenerator(scenario, cache_dir)


def _import_genai(scenario: Scenario) -> Any:
    if importlib.util.find_spec("onnxruntime_genai") is None:
        raise BackendUnavailable(
            f"cell `{scenario.item_name}` generates on onnxruntime, which runs ONNX Runtime "
            "GenAI; the onnxruntime-genai package is not installed",
            expected="onnxruntime-genai installed beside onnxruntime",
            fix=GENAI_INSTALL_HINT,
            location=scenario.location,
        )
    import onnxruntime_genai as og

    return og


class OrtGenAIGenerator:
    """A model folder loaded by ONNX Runtime GenAI on one device, generating greedily
    (``perfguard.backends.base.GenerativeSession``)."""

    def __init__(self, scenario: Scenario, cache_dir: Path) -> None:
        og = _import_genai(scenario)
        self._og = og
        self._scenario = scenario
        index = ort_device_index(scenario)
        provider = "cpu" if index is None else "cuda"
        if index is not None and not og.is_cuda_available():
            raise CellError(
                f"device {scenario.device!r}: this onnxruntime-genai has no CUDA "
                f"(onnxruntime_genai.is_cuda_available() is False, version {og.__version__})",
                expected="the onnxruntime-genai-cuda package and a visible NVIDIA GPU",
                fix="pip install onnxruntime-genai-cuda in place of onnxruntime-genai, check "
                "CUDA_VISIBLE_DEVICES and the driver, or run this cell with `device: cpu`",
                location=scenario.location,
            )
        build = genai_model(scenario, cache_dir, provider, og)
        self.build = build
        settings = _read_settings(build.folder, scenario)
        spec = scenario.generate
        assert spec is not None, scenario.item_name
        context = settings.get("context_length")
        needed = spec.prompt_tokens + spec.new_tokens
        if isinstance(context, int) and needed > context:
            raise CellError(
                f"cell `{scenario.item_name}` needs {needed} positions ({spec.prompt_tokens} "
                f"prompt + {spec.new_tokens} new tokens); the model's context_length is "
                f"{context}",
                expected=f"prompt_tokens + new_tokens <= {context}",
                fix="use a shorter prompt bucket or fewer new tokens",
                location=scenario.location,
            )
        config = og.Config(str(build.folder))
        if scenario.threads is not None:
            threads = {"session_options": {"intra_op_num_threads": int(scenario.threads)}}
            config.overlay(json.dumps({"model": {"decoder": threads}}))
        config.clear_providers()
        if index is not None:
            config.append_provider("cuda")
            og.set_current_gpu_device_id(index)
        try:
            self._model = og.Model(config)
        except Exception as exc:
            raise ModelError(
                f"ONNX Runtime GenAI could not load {build.folder}: {exc}",
                expected="a model folder the model builder wrote for this device",
                fix="rebuild the folder for this device's provider (-e cpu / -e cuda), or "
                "delete it from the cache to build it again",
                location=scenario.model.location,
            ) from exc
        vocab = settings.get("vocab_size")
        self.vocab_size: int | None = vocab if isinstance(vocab, int) else None
        self._lock = threading.Lock()
        identity = builder_identity(og)
        self.runtime_info: dict[str, Any] = {
            "onnxruntime-genai": identity["onnxruntime-genai"],
            "onnxruntime": identity["onnxruntime"],
            "provider": provider,
            "device": scenario.device if index is not None else "cpu",
            "precision": scenario.precision,
            "threads": scenario.threads if scenario.threads is not None else "default",
            "decoding": "greedy, EOS masked until new_tokens (min_length)",
            "kv_cache": (
                "one buffer of max_length (past_present_share_buffer)"
                if settings.get("past_present_share_buffer")
                else "grows per step"
            ),
            "model_type": str(getattr(self._model, "type", settings.get("type", ""))),
            **build.facts(),
        }
        if isinstance(context, int):
            self.runtime_info["context_length"] = context

    def prepare(self, prompt: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(prompt, dtype=np.int32)

    def generate(self, prepared: Any, new_tokens: int, stamp: Callable[[], None]) -> Any:
        batch, length = prepared.shape
        steps: list[np.ndarray] = []
        lock = self._lock
        with lock:
            generator = self._generator(batch, length + new_tokens, fixed=True)
            generator.append_tokens(prepared)
        for _ in range(new_tokens):
            with lock:
                generator.generate_next_token()
                steps.append(generator.get_next_tokens())
                stamp()
        return steps

    def _generator(self, batch: int, max_length: int, *, fixed: bool) -> Any:
        """A greedy ``Generator`` of ``batch`` rows up to ``max_length`` positions, its
        sampler seeded (``_SEED``); ``fixed``: no end of sequence before then."""
        og = self._og
        params = og.GeneratorParams(self._model)
        options: dict[str, Any] = {"min_length": int(max_length)} if fixed else {}
        params.set_search_options(
            max_length=int(max_length),
            do_sample=False,
            batch_size=int(batch),
            random_seed=_SEED,
            **options,
        )
        return og.Generator(self._model, params)

    def tokens(self, generated: Any) -> np.ndarray:
        return np.stack(list(generated), axis=1).astype(np.int64)

    def logits(self, ids: np.ndarray) -> np.ndarray:
        prepared = self.prepare(ids)
        batch, length = prepared.shape
        with self._lock:
            generator = self._generator(batch, length, fixed=False)
            generator.append_tokens(prepared)
            out = np.asarray(generator.get_output("logits"), dtype=np.float32)
        if out.ndim != 3 or out.shape[:2] != (batch, length):
            raise ModelError(
                f"ONNX Runtime GenAI's model returned logits of shape {out.shape} for "
                f"{batch} x {length} tokens: its graph keeps only the last position",
                expected=f"logits for every position ({batch} x {length} x vocab), as the "
                "model builder writes by default",
                fix="build the folder without `prune_lm_head=true` to check its accuracy",
                location=self._scenario.model.location,
            )
        return out

    def check_unchanged(self) -> None:
        """The model runs in this process: nothing can replace it under the cell."""

    def close(self) -> None:
        self._model = None


def _read_settings(folder: Path, scenario: Scenario) -> dict[str, Any]:
    """What ``genai_config.json`` says about the model: vocabulary, context, KV cache."""
    path = folder / GENAI_CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        model = config["model"]
        search = config.get("search", {})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(
            f"cannot read {path}: {exc}",
            expected=f"the {GENAI_CONFIG} the model builder writes (a `model` section)",
            fix="rebuild the model folder, or delete it from the cache to build it again",
            location=scenario.model.location,
        ) from exc
    return {
        "vocab_size": model.get("vocab_size"),
        "context_length": model.get("context_length"),
        "type": model.get("type"),
        "past_present_share_buffer": bool(search.get("past_present_share_buffer")),
    }
