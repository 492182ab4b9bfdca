"""Seeded latency samples and the measured results built from them, for the verdict rules."""

from __future__ import annotations

import numpy as np

from perfguard.records.figures import summarize
from perfguard.records.results import ScenarioResult

SID = "suites/s.yaml::minilm[ort]"


def lognormal(n: int, seed: int, *, median_ms: float = 3.0, sigma: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (median_ms * 1e6 * rng.lognormal(0.0, sigma, n)).astype(np.int64)


def result(
    samples: np.ndarray | None = None,
    *,
    sid: str = SID,
    canary: float | None = None,
    throughput: float | None = None,
    memory: float | None = None,
    stable: bool = True,
    status: str = "passed",
) -> ScenarioResult:
    arr = np.asarray(samples if samples is not None else lognormal(300, 0), dtype=np.int64)
    return ScenarioResult(
        id=sid,
        suite="suites/s.yaml",
        name="minilm",
        backend="onnxruntime",
        device="cpu",
        precision="fp32",
        status=status,
        latency_ns=summarize(arr),
        throughput=throughput,
        stable=stable,
        stability_ratio=1.0 if stable else 1.3,
        canary_ns=canary,
        peak_memory_mib=memory,
        samples_ns=tuple(int(x) for x in arr),
    )
