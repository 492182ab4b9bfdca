"""What does perfguard's per-token timing cost, against a bare decode loop?

The bare loop is the leanest greedy decode of the same model with the same KV cache:
a prompt pass, then ``new_tokens - 1`` forward passes over the last token, nothing else
(no stamps, no list of steps). perfguard's generative request
(``perfguard.backends.torch_generate.TorchGenerator.generate`` called by
``perfguard.measure.generation.GenerativeRequests``) does the same passes and stamps
every step (one ``perf_counter_ns`` read appended to a list) and keeps each step's tokens.

Both run the example model (``perfguard_examples.tinylm``, Llama-shaped, 4 layers,
width 256, one thread) on the same prompts, alternating request by request (ABBA), so a
slow spell of a shared host hits both.

``--backend onnxruntime`` measures the ONNX Runtime GenAI path
(``perfguard.backends.ort_genai``) the same way at ``--precision`` (int4 by default:
its decode step, ~0.09 ms, is the shortest, so a fixed cost per token weighs most).
Its bare loop makes the same ``Generator`` and calls ``generate_next_token()`` per
token, nothing else; perfguard's request also takes each step's tokens to the host
(``get_next_tokens()``, what a streaming server sends), holds the session's lock per
step and stamps it. The figure is the time per output token after
the first (``(end to end - TTFT) / (new_tokens - 1)``, i.e. TPOT) of each request,
median over requests, and the ratio perfguard / bare. Target: <= 1.02 (2% of TPOT).
This is a report, not a test: it always exits 0.

    python benchmarks/generation_overhead.py --requests 200 --new-tokens 32
    python benchmarks/generation_overhead.py --backend onnxruntime --precision int4
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# Runnable from a checkout without installing.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from perfguard.backends.ort_genai import OrtGenAIGenerator
from perfguard.backends.torch_generate import TorchGenerator
from perfguard.core.errors import Location
from perfguard.core.scenario import GenerateSpec, ModelSpec, Scenario
from perfguard.measure.generation import GenerativeRequests

TARGET = 1.02


def bare_tpot(gen: TorchGenerator, prompt: Any, new_tokens: int) -> float:
    """One request of the bare decode loop; its TPOT in ns."""
    import torch

    model, keyword = gen._module, gen._cache_keyword
    cache = gen._new_cache()
    clock = time.perf_counter_ns
    with torch.inference_mode():
        out = model(input_ids=prompt, use_cache=True, logits_to_keep=1, **{keyword: cache})
        token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        first = clock()
        for _ in range(new_tokens - 1):
            out = model(input_ids=token, use_cache=True, logits_to_keep=1, **{keyword: cache})
            token = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        last = clock()
    return (last - first) / (new_tokens - 1)


def bare_tpot_genai(gen: OrtGenAIGenerator, prompt: Any, new_tokens: int) -> float:
    """One request of ONNX Runtime GenAI's bare loop; its TPOT in ns."""
    og, model = gen._og, gen._model
    batch, length = prompt.shape
    params = og.GeneratorParams(model)
    params.set_search_options(
        max_length=length + new_tokens,
        min_length=length + new_tokens,
        do_sample=False,
        batch_size=batch,
        random_seed=0,
    )
    generator = og.Generator(model, params)
    clock = time.perf_counter_ns
    generator.append_tokens(prompt)
    generator.generate_next_token()
    first = clock()
    for _ in range(new_tokens - 1):
        generator.generate_next_token()
    last = clock()
    return (last - first) / (new_tokens - 1)


def perfguard_tpot(requests: GenerativeRequests) -> float:
    """One request as perfguard times it; its TPOT in ns, from its own stamps."""
    requests()
    _start, stamps = requests.rows[-1]
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per side")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--backend", choices=("torch", "onnxruntime"), default="torch")
    parser.add_argument("--precision", default=None, help="default: fp32 (torch), int4 (ort)")
    args = parser.parse_args()
    precision = args.precision or ("int4" if args.backend == "onnxruntime" else "fp32")

    here = Path(__file__).resolve().parent
    spec = GenerateSpec(prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens)
    model = ModelSpec(
        name="tinyllama",
        location=Location(here / "generation_overhead.py"),
        base_dir=here,
        factory="perfguard_examples.tinylm:build",
        factory_kwargs=(("kind", "llama"),),
    )
    scenario = Scenario(
        suite=here / "generation_overhead.py",
        name="tinyllama",
        cell_id="p64",
        model=model,
        location=model.location,
        threads=1,
        generate=spec,
        backend=args.backend,
        precision=precision,
    )
    gen: TorchGenerator | OrtGenAIGenerator
    if args.backend == "onnxruntime":
        gen = OrtGenAIGenerator(scenario, here.parent / ".perfguard" / "cache")
        bare_one = bare_tpot_genai
    else:
        gen = TorchGenerator(scenario)
        bare_one = bare_tpot  # type: ignore[assignment]
    rng = np.random.default_rng(0)
    prompts = [
        gen.prepare(rng.integers(0, gen.vocab_size or 2, (1, args.prompt_tokens))) for _ in range(8)
    ]
    requests = GenerativeRequests(gen, prompts, args.new_tokens)
    for i in range(10):  # warm-up of both
        bare_one(gen, prompts[i % 8], args.new_tokens)  # type: ignore[arg-type]
        perfguard_tpot(requests)
    bare: list[float] = []
    ours: list[float] = []
    gc.disable()
    try:
        for i in range(args.requests):
            prompt = prompts[i % 8]
            if i % 4 in (0, 3):  # ABBA
                bare.append(bare_one(gen, prompt, args.new_tokens))  # type: ignore[arg-type]
                ours.append(perfguard_tpot(requests))
            else:
                ours.append(perfguard_tpot(requests))
                bare.append(bare_one(gen, prompt, args.new_tokens))  # type: ignore[arg-type]
    finally:
        gc.enable()
        gen.close()
    b, o = statistics.median(bare), statistics.median(ours)
    ratio = o / b
    print(
        f"model tinyllama (4 layers, width 256, 1 thread) on {args.backend} {precision}, "
        f"prompt {args.prompt_tokens}, {args.new_tokens} new tokens, {args.requests} "
        "requests per side, ABBA"
    )
    print("| loop | TPOT median (ms) |")
    print("|---|---|")
    print(f"| bare decode loop | {b / 1e6:.4f} |")
    print(f"| perfguard (a stamp per token) | {o / 1e6:.4f} |")
    verdict = "meets" if ratio <= TARGET else "misses"
    print(
        f"\nratio perfguard / bare: {ratio:.4f} ({(ratio - 1) * 100:+.2f}% of TPOT; "
        f"{(o - b) / 1e3:+.2f} us per token); target <= {TARGET}: {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
