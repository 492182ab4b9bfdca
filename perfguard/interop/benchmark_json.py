"""Export perfguard results in other tools' formats.

``pytest-benchmark``: the JSON that ``pytest --benchmark-json`` writes (and that
github-action-benchmark's ``pytest`` tool and Bencher ingest). Times are in
**seconds**, as pytest-benchmark writes them; the statistics follow
pytest-benchmark's own definitions (``pytest_benchmark/stats.py``): sample
standard deviation, ``statistics.median``, quartiles by Wikipedia's method 2
(even n: medians of the halves) or method 3 (odd n), Tukey fences at 1.5 IQR,
``ops = rounds / total``. perfguard's own percentiles (nearest rank) go to
``extra_info`` in nanoseconds.

Each perfguard sample is one timed call (a bridged pytest-benchmark test's
sample is already a per-call mean over its round), so ``data`` holds the
samples in seconds and ``iterations`` is 1 for YAML scenarios and the original
count for bridged tests. ``ops`` counts calls per second; with a batch size
above 1, perfguard's samples-per-second figure is ``extra_info.throughput``.
Only scenarios with samples are exported.
"""

from __future__ import annotations

import json
import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfguard.core.atomicio import write_json_atomic
from perfguard.core.errors import ResultsError
from perfguard.records.results import RunResult, ScenarioResult
from perfguard.records.resultsfile import read_results

__all__ = ["FORMATS", "benchmark_stats", "export_command", "to_pytest_benchmark"]

FORMATS: tuple[str, ...] = ("pytest-benchmark",)
# The pytest-benchmark release whose saved-JSON layout this mirrors.
PYTEST_BENCHMARK_FORMAT_VERSION = "5.1.0"


def _quartiles(data: Sequence[float]) -> tuple[float, float]:
    """(q1, q3) of sorted ``data`` exactly as pytest-benchmark's ``Stats.q1``/``q3``."""
    n = len(data)
    if n == 1:
        return data[0], data[0]
    if n % 2:  # method 3
        k, r = n // 4, n % 4
        if r == 1:
            q1 = 0.25 * data[k - 1] + 0.75 * data[k]
            q3 = 0.75 * data[3 * k] + 0.25 * data[3 * k + 1]
        else:
            q1 = 0.75 * data[k] + 0.25 * data[k + 1]
            q3 = 0.25 * data[3 * k + 1] + 0.75 * data[3 * k + 2]
        return q1, q3
    return statistics.median(data[: n // 2]), statistics.median(data[n // 2 :])  # method 2


def benchmark_stats(data: Sequence[float], iterations: int = 1) -> dict[str, Any]:
    """pytest-benchmark's ``stats`` object for per-call times ``data`` (seconds)."""
    if not data:
        raise ValueError("no samples: pytest-benchmark stats need at least one round")
    values = [float(x) for x in data]
    ordered = sorted(values)
    n = len(values)
    total = sum(values)
    mean = statistics.mean(values)
    stddev = statistics.stdev(values) if n > 1 else 0.0
    q1, q3 = _quartiles(ordered)
    iqr = q3 - q1
    if n == 1:
        ld15iqr = hd15iqr = values[0]
    else:
        ld15iqr = ordered[bisect_left(ordered, q1 - 1.5 * iqr)]
        hd15iqr = ordered[bisect_right(ordered, q3 + 1.5 * iqr) - 1]
    lo_sd, hi_sd = mean - stddev, mean + stddev
    stddev_outliers = sum(1 for v in values if v < lo_sd or v > hi_sd)
    lo_iqr, hi_iqr = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    iqr_outliers = sum(1 for v in values if v < lo_iqr or v > hi_iqr)
    return {
        "min": ordered[0],
        "max": ordered[-1],
        "mean": mean,
        "stddev": stddev,
        "rounds": n,
        "median": statistics.median(values),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": iqr_outliers,
        "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}",
        "ld15iqr": ld15iqr,
        "hd15iqr": hd15iqr,
        "ops": n / total if total else 0,
        "total": total,
        "data": values,
        "iterations": iterations,
    }


def _param(name: str) -> str | None:
    """The ``[...]`` parametrize id of a test name, as pytest-benchmark's ``param``."""
    if name.endswith("]") and "[" in name:
        return name[name.index("[") + 1 : -1]
    return None


def _benchmark(scenario: ScenarioResult) -> dict[str, Any]:
    bridged = scenario.runtime.benchmark
    iterations = int(bridged.iterations) if bridged is not None else 1
    summary = scenario.latency_ns
    extra: dict[str, Any] = {}
    if bridged is not None and isinstance(bridged.extra_info, dict):
        extra.update(bridged.extra_info)
    extra.update(
        {
            "perfguard_id": scenario.id,
            "suite": scenario.suite,
            "backend": scenario.backend,
            "device": scenario.device,
            "precision": scenario.precision,
            "batch_size": scenario.batch_size,
            "throughput": scenario.throughput,
            "stable": scenario.stable,
            "status": scenario.status.value,
        }
    )
    if summary is not None:
        extra.update({f"{key}_ns": getattr(summary, key) for key in ("p50", "p90", "p95", "p99")})
    if bridged is not None:
        group = bridged.group
        params = bridged.params
        param = _param(scenario.name)
    else:
        group = scenario.suite or None
        params = {
            "backend": scenario.backend,
            "device": scenario.device,
            "precision": scenario.precision,
            "batch_size": scenario.batch_size,
        }
        param = f"{scenario.backend}-{scenario.device}-{scenario.precision}"
    return {
        "group": group,
        "name": scenario.name,
        "fullname": scenario.id,
        "params": params,
        "param": param,
        "extra_info": extra,
        "options": {
            "disable_gc": False,
            "timer": "perf_counter" if bridged else "perf_counter_ns",
            "min_rounds": len(scenario.samples_ns),
            "max_time": None,
            "min_time": None,
            "precision": None,
            "confidence": None,
            "warmup": scenario.warmup_iterations or False,
        },
        "stats": benchmark_stats([ns / 1e9 for ns in scenario.samples_ns], iterations),
    }


def _machine_info(run: RunResult) -> dict[str, Any]:
    comparable, recorded = run.environment.comparable, run.environment.recorded
    return {
        "node": recorded.get("hostname", ""),
        "processor": comparable.get("cpu_model", ""),
        "machine": comparable.get("machine", ""),
        "python_compiler": "",
        "python_implementation": recorded.get("python_implementation", ""),
        "python_implementation_version": recorded.get("python_full", ""),
        "python_version": recorded.get("python_full", comparable.get("python", "")),
        "python_build": [],
        "release": recorded.get("platform", ""),
        "system": comparable.get("os", ""),
        "cpu": {"brand_raw": comparable.get("cpu_model", ""), "count": comparable.get("cpu_count")},
        "perfguard_fingerprint": run.environment.fingerprint,
    }


def to_pytest_benchmark(run: RunResult) -> dict[str, Any]:
    """``run`` as pytest-benchmark's saved JSON (times in seconds)."""
    commit = run.commit
    return {
        "machine_info": _machine_info(run),
        "commit_info": {
            "id": commit.sha or "unversioned",
            "time": None,
            "author_time": None,
            "dirty": commit.dirty,
            "project": None,
            "branch": commit.branch or "(unknown)",
        },
        "benchmarks": [_benchmark(s) for s in run.scenarios if s.samples_ns],
        "datetime": run.created_at,
        "version": PYTEST_BENCHMARK_FORMAT_VERSION,
        "perfguard_version": run.perfguard_version,
    }


def export_command(results: Path, fmt: str, out: Path | None) -> Path | str:
    """Convert ``results`` (a perfguard results.json) to ``fmt``.

    Writes ``out`` atomically and returns its path, or returns the text (for
    stdout) when ``out`` is None.
    """
    if fmt not in FORMATS:
        raise ResultsError(
            f"unknown export format {fmt!r}",
            expected="one of: " + ", ".join(FORMATS),
            fix="pass --format pytest-benchmark",
        )
    data = to_pytest_benchmark(read_results(Path(results)))
    if out is None:
        return json.dumps(data, indent=4, allow_nan=False)
    write_json_atomic(Path(out), data)
    return Path(out)
