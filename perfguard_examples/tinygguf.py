"""A small Llama-shaped decoder with seeded random weights, written as a GGUF file that
llama.cpp's server loads (no download): the served model of the example suites and tests.

Its vocabulary is three special tokens (``<unk>``, ``<s>``, ``</s>``), the 128 ASCII bytes
as byte tokens ``<0xNN>`` and ``▁`` (a space, SentencePiece's way): every ASCII text is
one token per character (plus ``<s>``), and every generated token decodes to a whole
character, so a streaming server sends exactly one chunk per token. Its tokens mean
nothing; its timing is that of a real decoder of its size (``layers``, ``hidden``,
``ffn``: a wider ``ffn`` is a slower model file of known shape).

    python -m perfguard_examples.tinygguf OUT.gguf [--layers 2] [--hidden 64] [--ffn 128]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

__all__ = ["EOS", "VOCAB", "write"]

#: The vocabulary's size and its end-of-sequence token (``</s>``).
VOCAB = 3 + 128 + 1
EOS = 2


def write(
    path: Path,
    *,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    context: int = 1024,
    seed: int = 0,
) -> Path:
    """Write the model to ``path`` (atomically: a scratch file renamed into place); the same
    bytes for the same arguments."""
    import gguf

    if hidden % heads or heads % kv_heads:
        raise ValueError(f"hidden {hidden} must split into {heads} heads of {kv_heads} groups")
    rng = np.random.default_rng(seed)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(str(scratch), "llama")
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)  # all float32
    writer.add_tokenizer_model("llama")
    tokens = [b"<unk>", b"<s>", b"</s>", *(f"<0x{i:02X}>".encode() for i in range(128))]
    tokens.append("\u2581".encode())
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * VOCAB)
    # unknown, control x2, byte x128, normal
    writer.add_token_types([2, 3, 3, *([6] * 128), 1])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(EOS)
    writer.add_unk_token_id(0)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    head = hidden // heads
    writer.add_tensor("token_embd.weight", weight(VOCAB, hidden))
    writer.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    writer.add_tensor("output.weight", weight(VOCAB, hidden))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(hidden, hidden))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(kv_heads * head, hidden))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(kv_heads * head, hidden))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(hidden, hidden))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ffn, hidden))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(ffn, hidden))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(hidden, ffn))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        scratch.replace(path)
    finally:
        scratch.unlink(missing_ok=True)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--ffn", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write(args.out, layers=args.layers, hidden=args.hidden, ffn=args.ffn, seed=args.seed)


if __name__ == "__main__":
    main()
