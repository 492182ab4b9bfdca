"""Results and verdicts for the report's tests: seeded scenarios, runs, p95 verdicts and
complete load objects."""

from __future__ import annotations

from typing import Any

import numpy as np

from perfguard.core.stats import throughput
from perfguard.judge.verdict import (
    MetricVerdict,
    ScenarioVerdict,
)
from perfguard.records.accuracyfigures import AccuracyFigures
from perfguard.records.figures import RuntimeInfo, summarize
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult

SHA = "a" * 40


BASE_SHA = "b" * 40


def scenario(
    sid: str,
    *,
    seed: int = 0,
    scale_ms: float = 2.0,
    n: int = 200,
    backend: str = "onnxruntime",
    accuracy: dict[str, Any] | None = None,
    canary_ns: float | None = 1e6,
) -> ScenarioResult:
    rng = np.random.default_rng(seed)
    samples = tuple(int(v) for v in rng.lognormal(np.log(scale_ms * 1e6), 0.2, n))
    return ScenarioResult(
        id=sid,
        suite=sid.split("::")[0],
        name="model",
        backend=backend,
        device="cpu",
        precision="fp32",
        latency_ns=summarize(samples),
        throughput=throughput(samples, 1),
        peak_memory_mib=123.4,
        canary_ns=canary_ns,
        cold_start_ns=50_000_000,
        runtime=RuntimeInfo(backend={"providers": "CPUExecutionProvider"}),
        accuracy=AccuracyFigures.from_dict(accuracy) if accuracy is not None else None,
        samples_ns=samples,
    )


def run_of(
    scenarios: list[ScenarioResult],
    sha: str | None = SHA,
    created_at: str = "2026-01-02T03:04:05+00:00",
    cpu: str = "TestCPU",
) -> RunResult:
    return RunResult(
        commit=CommitInfo(sha=sha, branch="feature", dirty=False),
        environment=Environment.of({"cpu": cpu}, {"host": "box"}),
        scenarios=tuple(scenarios),
        created_at=created_at,
        perfguard_version="0.0.test",
    )


def p95_verdict(sid: str, kind: str, ratio: float, message: str) -> ScenarioVerdict:
    metric = MetricVerdict(
        metric="p95",
        verdict=kind,
        message=message,
        rule="test",
        baseline=2e6,
        current=2e6 * ratio,
        ratio=ratio,
        ratio_raw=ratio,
        lower=ratio * 0.97,
        upper=ratio * 1.03,
        limit=0.05,
        effective_limit=0.05,
    )
    return ScenarioVerdict(sid, kind, (metric,), BASE_SHA, messages=(message,))


def load_dict(level: str, **over: Any) -> dict[str, Any]:
    """A complete ``load`` object (every key present), closed loop unless overridden."""
    data: dict[str, Any] = {
        "mode": "closed",
        "level": level,
        "concurrency": None,
        "rate_asked": None,
        "rate_sent": None,
        "rate_achieved": None,
        "arrivals": None,
        "workers": 1,
        "sessions": "shared",
        "requests": 1000,
        "completed": 1000,
        "failed": 0,
        "unserved": 0,
        "duration_s": 5.0,
        "throughput": None,
        "uncorrected_ns": None,
        "queue_share": 0.0,
        "late": {
            "count": 0,
            "share": 0.0,
            "limit_ms": 1.0,
            "max_share": 0.05,
            "lag_p99_ms": 0.1,
            "lag_max_ms": 0.4,
        },
        "errors": {},
        "batching": None,
        "slo": None,
        "invalid": None,
    }
    data.update(over)
    return data
