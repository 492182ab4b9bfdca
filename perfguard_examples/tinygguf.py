"""A small Llama-shaped decoder with seeded random weights, written as a GGUF file that
llama.cpp's server loads (no download): the served model of the example suites and tests.

Its vocabulary is three special tokens (``<unk>``, ``<s>``, ``</s>``), the 128 ASCII bytes
as byte tokens ``<0xNN>`` and ``▁`` (a space, SentencePiece's way): every ASCII text is
one token per character (plus ``<s>``), and every generated token decodes to a whole
character, so a streaming server sends exactly one chunk per token. Its tokens mean
nothing; its timing is that of a real decoder of its size (``layers``, ``hidden``,
``ffn``: a wider ``ffn`` is a slower model file of known shape).

``precision`` stores its matrices as float32 (``fp32``), float16 (``fp16``) or llama.cpp's
8-bit blocks (``int8``: Q8_0, quantized by the ``gguf`` package); norms stay float32. Its
pooling is the mean of the tokens' last hidden states, so a server started with
embeddings on (llama-cpp-python: ``--embedding True``) returns one vector per text.

    python -m perfguard_examples.tinygguf OUT.gguf [--layers 2] [--hidden 64] [--ffn 128]
        [--precision fp32|fp16|int8]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

__all__ = ["EOS", "PRECISIONS", "VOCAB", "write"]

#: The vocabulary's size and its end-of-sequence token (``</s>``).
VOCAB = 3 + 128 + 1
EOS = 2
#: How ``precision`` stores the matrices: (the file type llama.cpp reads, the tensor type).
PRECISIONS = {"fp32": (0, "F32"), "fp16": (1, "F16"), "int8": (7, "Q8_0")}


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
    precision: str = "fp32",
) -> Path:
    """Write the model to ``path`` (atomically: a scratch file renamed into place); the same
    bytes for the same arguments."""
    import gguf
    from gguf.quants import quantize

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    file_type, stored = PRECISIONS[precision]
    qtype = gguf.GGMLQuantizationType[stored]
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
    writer.add_file_type(file_type)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
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

    def matrix(name: str, *shape: int) -> None:
        values = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        if stored == "F32":
            writer.add_tensor(name, values)
        elif stored == "F16":
            writer.add_tensor(name, values.astype(np.float16))
        else:
            writer.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(hidden, np.float32))

    head = hidden // heads
    matrix("token_embd.weight", VOCAB, hidden)
    norm("output_norm.weight")
    matrix("output.weight", VOCAB, hidden)
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", hidden, hidden)
        matrix(f"blk.{i}.attn_k.weight", kv_heads * head, hidden)
        matrix(f"blk.{i}.attn_v.weight", kv_heads * head, hidden)
        matrix(f"blk.{i}.attn_output.weight", hidden, hidden)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        matrix(f"blk.{i}.ffn_up.weight", ffn, hidden)
        matrix(f"blk.{i}.ffn_down.weight", hidden, ffn)
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
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32")
    args = parser.parse_args(argv)
    write(
        args.out, layers=args.layers, hidden=args.hidden, ffn=args.ffn, seed=args.seed,
        precision=args.precision,
    )  # fmt: skip


if __name__ == "__main__":
    main()
