"""Greedy generation on torch: a causal LM's own decode loop with its KV cache.

The factory returns a causal language model with the Hugging Face calling convention
(``transformers``' ``*ForCausalLM``, or any module alike): ``forward(input_ids=..., <cache>=...,
use_cache=True)`` returns an object with ``logits`` (``batch x positions x vocab``), and
the cache object it is handed is updated in place. One request is

1. the **prefill**: one forward pass over the whole prompt, filling the cache; the
   argmax of the last position's logits is the first token;
2. ``new_tokens - 1`` **decode steps**: one forward pass over the last token with the
   cache; the argmax is the next token. Generation never stops early (no EOS check), so
   every request does the same work.

After each step its tokens are taken to the host (``.cpu()``, as a streaming server
sends them) before ``stamp()``; on a GPU that copy is the step's synchronisation, the
one a streaming runtime makes anyway, and no other sync is added. On the CPU the
tokens are already there.

The cache: a fresh ``transformers.DynamicCache`` per request (the one ``generate()``
uses by default) handed as ``cache=`` (transformers >= 5) or ``past_key_values=`` (the
older name), whichever ``forward`` takes; ``logits_to_keep=1`` where ``forward`` takes it
(the prefill then computes the vocabulary projection for the last position only, as
``generate()`` does). A module without ``transformers`` conventions that takes neither
cache name is refused with what it needs.

Precision as on the torch backend: fp16/bf16 cast the module, int8 is dynamic
quantization of its ``nn.Linear`` layers (CPU).

``gpu: {compile: MODE}`` (on the CPU too, as on the torch backend) compiles the module
with ``torch.compile`` and gives it a ``transformers.StaticCache`` of exactly
``prompt_tokens + new_tokens`` positions, kept by the session and reset (zeroed) at the
start of each request, as transformers' compiled ``generate`` does: the shapes stay
fixed, so the prompt pass and the decode step are compiled once each. The compilation
happens while the cell opens, on one request of the cell's shape
(``runtime_info["compile_s"]``). On a GPU ``compile: reduce-overhead`` captures both in
CUDA graphs (torch's own graph trees); ``gpu: {cuda_graph: true}`` is refused on a
generative cell with that fix (its capture of one whole call cannot hold a growing
decode loop). A compiled cell under ``load:`` is refused: its streams would share one
static cache and one set of graphs. Compiled, the loop runs under ``torch.no_grad``
(the static cache is zeroed in place between requests, which inference-mode tensors
refuse).
"""

from __future__ import annotations

import importlib.util
import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perfguard.backends.torch_backend import TorchThreads, parse_torch_device, precision_dtype
from perfguard.backends.torch_cuda import compile_module
from perfguard.core.errors import CellError, ModelError
from perfguard.core.scenario import GenerateSpec, Scenario
from perfguard.models.factory import load_factory
from perfguard.models.quantize import quantize_torch_int8, torch_quant_facts

if TYPE_CHECKING:
    import torch

__all__ = ["TorchGeneration", "TorchGenerator"]

#: The keyword a causal LM's forward takes its KV cache by: transformers 5 names it
#: ``cache``, transformers 4 ``past_key_values``.
CACHE_KEYWORDS: tuple[str, ...] = ("cache", "past_key_values")


class TorchGeneration:
    """torch's generation path (``perfguard.backends.base.GenerativeBackend``)."""

    def open_generative(self, scenario: Scenario, cache_dir: Path) -> TorchGenerator:
        """The scenario's causal LM, generating greedily with its KV cache."""
        return TorchGenerator(scenario)


class TorchGenerator:
    """A factory's causal LM on one device at one precision, generating greedily
    (``perfguard.backends.base.GenerativeSession``)."""

    def __init__(self, scenario: Scenario) -> None:
        import torch

        self._scenario = scenario
        if scenario.model.factory is None:
            raise CellError(
                f"model {scenario.model.name!r} is an ONNX file; generation on torch needs "
                "a `factory:`",
                expected="`factory: module:function` returning a causal language model",
                fix="give the model a factory returning e.g. a transformers *ForCausalLM",
                location=scenario.location,
            )
        self.device = parse_torch_device(scenario)
        spec = scenario.generate
        assert spec is not None, scenario.item_name
        compiled = scenario.gpu.compile_mode is not None
        if self.device.type == "cuda" and scenario.gpu.cuda_graph:
            raise CellError(
                "`gpu: {cuda_graph: true}` on a generative cell: one captured call cannot "
                "hold a prompt pass and a decode loop over a growing KV cache",
                expected="`compile: reduce-overhead`, which captures the prompt pass and the "
                "decode step in CUDA graphs over a static KV cache",
                fix="replace `cuda_graph: true` with `compile: reduce-overhead` in `gpu:`",
                location=scenario.location,
            )
        if compiled and scenario.load is not None:
            raise CellError(
                "`gpu: {compile}` on a generative cell under `load:`: its concurrent "
                "streams would share one static KV cache and one set of compiled graphs",
                expected="`compile` on a generative cell without `load:`",
                fix="measure the compiled model in a scenario without `load:`, or remove "
                "`compile` from this one",
                location=scenario.location,
            )
        if scenario.precision == "int8" and self.device.type != "cpu":
            raise CellError(
                f"precision int8 on {scenario.device} is not supported by the torch backend",
                expected="int8 (dynamic quantization of nn.Linear) on device cpu",
                fix="run int8 with `device: cpu`, or use fp16/bf16 on the GPU",
                location=scenario.location,
            )
        self.dtype = precision_dtype(scenario.precision)
        self._threads = TorchThreads(scenario.threads)
        try:
            self._module = self._build(scenario)
            config = getattr(self._module, "config", None)
            self._config = config
            vocab = getattr(config, "vocab_size", None)
            self.vocab_size: int | None = int(vocab) if isinstance(vocab, int) else None
            self._cache_keyword, self._keep_last = _forward_keywords(self._module, scenario)
            self._call: Any = self._module
            self._grad: Callable[[], Any] = torch.inference_mode
            if compiled:
                self._call = compile_module(torch, self._module, scenario)
                self._grad = torch.no_grad
                self._new_cache = _static_cache(config, spec, scenario)
            else:
                self._new_cache = _cache_factory(config)
            self.runtime_info: dict[str, Any] = {
                "torch": torch.__version__,
                "device": str(self.device),
                "dtype": str(self.dtype).removeprefix("torch."),
                "precision": scenario.precision,
                "threads": torch.get_num_threads(),
                "decoding": "greedy",
                "kv_cache": self._cache_name(),
            }
            attention = getattr(config, "_attn_implementation", None)
            if isinstance(attention, str):
                self.runtime_info["attention"] = attention
            if importlib.util.find_spec("transformers") is not None:
                import transformers

                self.runtime_info["transformers"] = transformers.__version__
            if scenario.precision == "int8":
                applied = torch_quant_facts(self._module)
                self.runtime_info["quantization"] = {"applied": applied.to_dict()}
            if self.device.type == "cuda":
                self.runtime_info["cuda"] = torch.version.cuda
                self.runtime_info["gpu"] = torch.cuda.get_device_name(self.device)
            if compiled:
                self.runtime_info["compile_mode"] = scenario.gpu.compile_mode
                self.runtime_info["kv_cache"] = (
                    f"StaticCache ({spec.prompt_tokens + spec.new_tokens} positions)"
                )
                self.runtime_info["compile_s"] = self._compile(scenario, spec)
        except BaseException:
            self._threads.restore()
            raise

    def _compile(self, scenario: Scenario, spec: GenerateSpec) -> float:
        """Compile the prompt pass and the decode step on one request of the cell's
        shape; the seconds it took."""
        import torch

        prompt = np.zeros((spec.batch, spec.prompt_tokens), dtype=np.int64)
        started = time.perf_counter()
        try:
            self.generate(self.prepare(prompt), spec.new_tokens, lambda: None)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        except Exception as exc:
            raise CellError(
                f"torch.compile(mode={scenario.gpu.compile_mode!r}) of model "
                f"{scenario.model.name!r} failed on its first request: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                expected="a causal LM torch.compile can compile with a StaticCache",
                fix="drop `compile:` from this cell's `gpu:`, or use another mode",
                location=scenario.location,
            ) from exc
        return round(time.perf_counter() - started, 3)

    def _build(self, scenario: Scenario) -> torch.nn.Module:
        module = load_factory(scenario.model)
        module.eval()
        if scenario.precision == "int8":
            module = quantize_torch_int8(module, scenario.model.name, scenario.location)
        elif scenario.precision in ("fp16", "bf16"):
            module = module.to(self.dtype)
        return module.to(self.device)

    def _cache_name(self) -> str:
        made = self._new_cache()
        return "none (the model keeps its own)" if made is None else type(made).__name__

    def prepare(self, prompt: np.ndarray) -> torch.Tensor:
        import torch

        return torch.from_numpy(np.array(prompt, dtype=np.int64, copy=True, order="C")).to(
            self.device
        )

    def generate(self, prepared: Any, new_tokens: int, stamp: Callable[[], None]) -> Any:
        model = self._call
        # One keyword set per request (its own cache), not rebuilt at every step.
        kwargs: dict[str, Any] = {"use_cache": True, self._cache_keyword: self._new_cache()}
        if self._keep_last:
            kwargs["logits_to_keep"] = 1
        on_host = self.device.type != "cpu"
        steps: list[Any] = []
        with self._grad():
            out = model(input_ids=prepared, **kwargs)
            token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
            steps.append(token.cpu() if on_host else token)
            stamp()
            for _ in range(new_tokens - 1):
                out = model(input_ids=token, **kwargs)
                token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
                steps.append(token.cpu() if on_host else token)
                stamp()
        return steps

    def tokens(self, generated: Any) -> np.ndarray:
        import torch

        return torch.cat(list(generated), dim=1).numpy().astype(np.int64)

    def logits(self, ids: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            out = self._module(input_ids=self.prepare(ids), use_cache=False)
            return np.asarray(out.logits.float().cpu().numpy(), dtype=np.float32)

    def check_unchanged(self) -> None:
        """The model runs in this process: nothing can replace it under the cell."""

    def close(self) -> None:
        import torch

        if getattr(self, "_module", None) is not None:
            del self._module
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self._threads.restore()


def _forward_keywords(module: torch.nn.Module, scenario: Scenario) -> tuple[str, bool]:
    """The keyword ``forward`` takes its cache by, and whether it takes ``logits_to_keep``."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    keyword = next((k for k in CACHE_KEYWORDS if k in params), None)
    if keyword is None:
        raise ModelError(
            f"the forward of model {scenario.model.name!r} "
            f"({type(module).__qualname__}) takes no KV cache (neither "
            f"{' nor '.join(f'`{k}`' for k in CACHE_KEYWORDS)})",
            expected="a causal language model with the transformers calling convention: "
            "forward(input_ids=..., cache=..., use_cache=True) -> an object with `logits`",
            fix="return the *ForCausalLM model itself from the factory (not a wrapper "
            "whose forward hides the cache)",
            location=scenario.location,
        )
    return keyword, "logits_to_keep" in params


def _static_cache(config: object, spec: GenerateSpec, scenario: Scenario) -> Callable[[], Any]:
    """One ``transformers.StaticCache`` of the request's full length, zeroed per request."""
    if importlib.util.find_spec("transformers") is None or config is None:
        raise CellError(
            f"`gpu: {{compile}}` on generative cell `{scenario.item_name}` needs "
            "transformers' StaticCache and the model's config",
            expected="a transformers causal LM, with transformers installed",
            fix="pip install transformers, or remove `compile` from this cell's `gpu:`",
            location=scenario.location,
        )
    from transformers import StaticCache

    cache = StaticCache(config=config, max_cache_len=spec.prompt_tokens + spec.new_tokens)  # type: ignore[arg-type]

    def fresh() -> Any:
        cache.reset()  # type: ignore[no-untyped-call]
        return cache

    return fresh


def _cache_factory(config: object) -> Callable[[], Any]:
    """A fresh KV cache per request: transformers' ``DynamicCache`` for the model's
    config (None where transformers is not installed: the model then makes its own)."""
    if importlib.util.find_spec("transformers") is None:
        return lambda: None
    from transformers import DynamicCache

    params = inspect.signature(DynamicCache.__init__).parameters
    if "config" in params and config is not None:
        return lambda: DynamicCache(config=config)  # type: ignore[arg-type]
    return DynamicCache
