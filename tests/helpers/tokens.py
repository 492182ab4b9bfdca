"""Seeded token times of generative requests, and the results built from them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.core.scenario import GenerateSpec, ModelSpec, Scenario
from perfguard.core.stats import throughput
from perfguard.records.figures import summarize
from perfguard.records.tokenfigures import TokenFigures
from tests.helpers.samples import SID, result
from tests.helpers.torch_cells import LOCATION


def token_times(
    requests: int,
    new_tokens: int,
    seed: int,
    *,
    prefill_ms: float = 4.0,
    decode_ms: float = 1.0,
    sigma: float = 0.05,
    request_sigma: float = 0.0,
) -> np.ndarray:
    """Token arrival times (ns after each request's send), one row per request: a
    lognormal prefill, then lognormal decode steps; ``request_sigma`` gives each request
    a common slowness of its own (tokens of one request then move together)."""
    rng = np.random.default_rng(seed)
    slow = rng.lognormal(0.0, request_sigma, (requests, 1)) if request_sigma else 1.0
    prefill = prefill_ms * 1e6 * rng.lognormal(0.0, sigma, (requests, 1)) * slow
    steps = decode_ms * 1e6 * rng.lognormal(0.0, sigma, (requests, new_tokens - 1)) * slow
    return np.cumsum(np.concatenate([prefill, steps], axis=1), axis=1).astype(np.int64)


def generative_result(times: np.ndarray, *, sid: str = SID, batch: int = 1) -> object:
    """A passed generative cell's result whose token figures are ``times``."""
    tokens = TokenFigures.of(times, prompt_tokens=16, batch=batch)
    e2e = tokens.e2e()
    return replace(
        result(e2e, sid=sid, throughput=throughput(e2e, batch)),
        latency_ns=summarize(e2e),
        samples_ns=tuple(int(x) for x in e2e),
        tokens=tokens,
    )


def spin_lm_suite(
    prefill_us: int,
    decode_us: int,
    *,
    load: str | None = None,
    gate: str = '{p95: "+1000%", ttft_p95: "+50%", itl_p95: "+50%", tpot_p50: "+50%"}',
) -> str:
    """A suite of one generative cell of the example model (``perfguard_examples.tinylm``,
    one layer) that busy-waits ``prefill_us`` before each prompt pass and ``decode_us``
    before each decode step, gated by ``gate`` (default +50% on TTFT, ITL and TPOT), under
    ``load`` when given: figures dominated by known costs, for end-to-end tests of the
    plumbing rather than of the machine."""
    under = f"    load: {load}\n" if load is not None else ""
    return f"""\
defaults:
  threads: 1
  warmup: {{iterations: 3, seconds: 0}}
  measure: {{iterations: 100, seconds: 0.5}}
  stability_tolerance: 0.99
models:
  lm:
    factory: perfguard_examples.tinylm:build
    kwargs:
      layers: 1
      hidden: 32
      heads: 2
      kv_heads: 1
      vocab: 64
      prefill_spin_us: {prefill_us}
      decode_spin_us: {decode_us}
scenarios:
  - name: gen
    model: lm
    generate: {{prompt_tokens: 16, new_tokens: 6}}
    gate: {gate}
{under}"""


#: A small shape of the example model (``perfguard_examples.tinylm``) for backend tests.
SMALL_LM = (("kind", "llama"), ("layers", 2), ("hidden", 64), ("heads", 4), ("vocab", 128))


def lm_cell(
    base: Path,
    kwargs: tuple[tuple[str, object], ...] = SMALL_LM,
    *,
    factory: str | None = "perfguard_examples.tinylm:build",
    onnx: str | None = None,
    generate: GenerateSpec | None = None,
    cell_id: str = "p12",
    **fields: Any,
) -> Scenario:
    """A generative cell of the example model (or another ``factory``, or an ``onnx:``
    folder) in ``base``: 2 prompts of 12 tokens per request, 6 new tokens, unless
    ``generate`` says otherwise; ``fields`` set the rest (backend, device, gpu...)."""
    model = ModelSpec(
        name="lm",
        location=LOCATION,
        base_dir=base,
        factory=factory,
        factory_kwargs=kwargs,
        onnx=onnx,
    )
    return Scenario(
        suite=base / "s.yaml",
        name="gen",
        cell_id=cell_id,
        model=model,
        location=LOCATION,
        generate=generate or GenerateSpec(prompt_tokens=12, new_tokens=6, batch=2),
        **fields,
    )
