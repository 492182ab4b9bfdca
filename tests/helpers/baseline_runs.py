"""Stored runs for the baseline archive's tests: deterministic samples, fixed ids."""

from __future__ import annotations

from datetime import datetime, timedelta

from perfguard.records.figures import RuntimeInfo, summarize
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult
from tests.helpers.envs import fp as fingerprint_of
from tests.helpers.envs import stored_env

#: Stored runs' environments, by fingerprint (a stored fingerprint is its fields' hash).
_ENVS = {
    e.fingerprint: e for e in (stored_env("test-cpu", host="box"), stored_env("a"), stored_env("b"))
}


FP = fingerprint_of("test-cpu")


IDS = ("suite::resnet[torch-cpu-fp32]", "suite::bert[torch-cpu-fp32]")


def sha_of(i: int) -> str:
    return f"{i:040x}"


def make_samples(seed: int, n: int = 40, salt: int = 0) -> tuple[int, ...]:
    # Deterministic, unsorted, distinct per seed: order preservation is visible.
    return tuple(
        1_000_000 + ((i * 7919 + seed * 104_729 + salt * 13) % 9973) * 100 for i in range(n)
    )


def make_run(
    sha: str | None,
    *,
    fingerprint: str = FP,
    seed: int = 0,
    ids: tuple[str, ...] = IDS,
    samples: tuple[int, ...] | None = None,
    canary: float | None = None,
    created_at: str | None = None,
) -> RunResult:
    scenarios = []
    for j, sid in enumerate(ids):
        s = samples if samples is not None else make_samples(seed, salt=j)
        scenarios.append(
            ScenarioResult(
                id=sid,
                suite="suite",
                name=sid.split("::")[-1],
                backend="torch",
                device="cpu",
                precision="fp32",
                latency_ns=summarize(s) if s else None,
                throughput=123.5,
                canary_ns=canary if canary is not None else 1000.0 + seed,
                runtime=RuntimeInfo(backend={"threads": 4, "providers": ["cpu"]}),
                tags=("smoke",),
                samples_ns=s,
            )
        )
    stamp = datetime(2024, 1, 1) + timedelta(minutes=seed)
    return RunResult(
        commit=CommitInfo(sha=sha, branch="main", dirty=False),
        environment=_ENVS.get(fingerprint)
        or Environment(fingerprint, {"cpu": "test-cpu"}, {"host": "box"}),
        scenarios=tuple(scenarios),
        created_at=created_at or stamp.isoformat() + "Z",
        perfguard_version=f"0.1.0+seed{seed}",
    )
