"""A small decoder-only language model with seeded random weights (no download).

Built from a ``transformers`` config, so it runs the library's real attention, KV cache
and generation code: Llama-shaped (RoPE, RMSNorm, SwiGLU, grouped-query attention) or
GPT-2-shaped (learned positions, LayerNorm, GELU). Its tokens mean nothing, and its
timing is that of a real model of its size.

``prefill_spin_us`` / ``decode_spin_us`` plant a slowdown of known size for tests and
benchmarks: a busy-wait of that many microseconds before every forward pass over the
prompt (more than one position) / over one new token.
"""

from __future__ import annotations

import time
from typing import Any

#: The two shapes this factory builds.
KINDS = ("llama", "gpt2")


def build(
    kind: str = "llama",
    seed: int = 0,
    layers: int = 4,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 2048,
    context: int = 1024,
    prefill_spin_us: float = 0.0,
    decode_spin_us: float = 0.0,
) -> Any:
    """The model in eval mode; the same weights for the same seed and shape."""
    import torch

    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}; expected one of {', '.join(KINDS)}")
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if kind == "llama":
            from transformers import LlamaConfig, LlamaForCausalLM

            config = LlamaConfig(
                vocab_size=vocab,
                hidden_size=hidden,
                intermediate_size=hidden * 8 // 3 // 8 * 8,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                num_key_value_heads=kv_heads,
                max_position_embeddings=context,
            )
            model: Any = LlamaForCausalLM(config)
        else:
            from transformers import GPT2Config, GPT2LMHeadModel

            gpt2 = GPT2Config(
                vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=context
            )
            model = GPT2LMHeadModel(gpt2)
    finally:
        torch.random.set_rng_state(state)
    model.eval()
    if prefill_spin_us > 0 or decode_spin_us > 0:
        model.register_forward_pre_hook(
            _planted(prefill_spin_us * 1e3, decode_spin_us * 1e3), with_kwargs=True
        )
    return model


def _planted(prefill_ns: float, decode_ns: float) -> Any:
    def spin(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        wait = prefill_ns if ids is not None and ids.shape[-1] > 1 else decode_ns
        end = time.perf_counter_ns() + wait
        while time.perf_counter_ns() < end:
            pass

    return spin


class ByteTokenizer:
    """Text as its UTF-8 bytes: ids 0-255, inside the example model's vocabulary. The
    model's weights are random, so no tokenizer is its own; this one makes a text set
    (``accuracy.text``) into token ids the same way on every machine."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


def byte_tokenizer() -> ByteTokenizer:
    """The tokenizer ``accuracy.text`` and ``generate.file`` name: ``module:function``."""
    return ByteTokenizer()
