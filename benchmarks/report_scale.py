"""How long the HTML report takes, and how big it gets, for a large suite.

Synthetic: 500 scenarios (seeded lognormal latencies, 300 samples each), a
pooled baseline per scenario, and 200 stored commits of history each; about 5%
regress, 5% improve, the rest are unchanged. Times ``render_html`` and writing
the report (``write_report``: report.html, summary.md and the index) and prints
seconds and file sizes. Targets: < 5 s and < 10 MB.

    python benchmarks/report_scale.py [--scenarios 500] [--commits 200] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from perfguard.core.stats import throughput
from perfguard.judge.verdict import MetricVerdict, ScenarioVerdict, VerdictKind
from perfguard.records.figures import summarize
from perfguard.records.results import (
    CommitInfo,
    Environment,
    LatencySummary,
    RunResult,
    ScenarioResult,
)
from perfguard.report import render_html, write_report
from perfguard.report.model import ReportInput
from perfguard.report.render import FULL_PLOT_BUDGET


def _scenario(sid: str, samples: np.ndarray, backend: str) -> ScenarioResult:
    values = tuple(int(v) for v in samples)
    return ScenarioResult(
        id=sid,
        suite="scale",
        name=f"model{hash(sid) % 50}",
        backend=backend,
        device="cpu",
        precision="fp32",
        latency_ns=summarize(values),
        throughput=throughput(values, 1),
        peak_memory_mib=100.0,
        canary_ns=1e6,
        samples_ns=values,
    )


def _history_point(p95_ns: float) -> ScenarioResult:
    # History only needs the summary: stored commits are pooled results.
    lat = LatencySummary(
        300,
        p95_ns / 2,
        p95_ns * 2,
        p95_ns / 1.5,
        1.0,
        p95_ns / 1.4,
        p95_ns / 1.1,
        p95_ns,
        p95_ns * 1.2,
        p95_ns * 1.3,
    )
    return ScenarioResult("h", "scale", "m", "onnxruntime", "cpu", "fp32", latency_ns=lat)


def build(n_scenarios: int, n_commits: int, n_samples: int = 300) -> ReportInput:
    rng = np.random.default_rng(42)
    env = Environment("0123456789ab", {"cpu": "synthetic"}, {})
    current, baseline, verdicts, history = [], {}, [], {}
    shas = [f"{i:040x}" for i in range(1, n_commits + 1)]
    for i in range(n_scenarios):
        sid = f"scale::scenario-{i:03d}[{'torch' if i % 2 else 'onnxruntime'}-cpu-fp32]"
        backend = "torch" if i % 2 else "onnxruntime"
        median = float(rng.uniform(0.5, 20.0)) * 1e6
        kind = (
            VerdictKind.REGRESSION
            if i % 20 == 0
            else VerdictKind.IMPROVEMENT
            if i % 20 == 1
            else VerdictKind.UNCHANGED
        )
        factor = {
            VerdictKind.REGRESSION: 1.2,
            VerdictKind.IMPROVEMENT: 0.8,
            VerdictKind.UNCHANGED: 1.0,
        }[kind]
        base = rng.lognormal(np.log(median), 0.25, n_samples)
        cur = rng.lognormal(np.log(median * factor), 0.25, n_samples)
        current.append(_scenario(sid, cur, backend))
        baseline[sid] = _scenario(sid, base, backend)
        ratio = float(np.percentile(cur, 95) / np.percentile(base, 95))
        metric = MetricVerdict(
            "p95",
            kind,
            f"P95 latency {kind} {ratio - 1:+.1%}",
            "synthetic",
            baseline=float(np.percentile(base, 95)),
            current=float(np.percentile(cur, 95)),
            ratio=ratio,
            ratio_raw=ratio,
            lower=ratio * 0.95,
            upper=ratio * 1.05,
            limit=0.05,
            effective_limit=0.05,
        )
        verdicts.append(ScenarioVerdict(sid, kind, (metric,), shas[-1], messages=(metric.message,)))
        walk = median * 1.6 * np.exp(np.cumsum(rng.normal(0, 0.01, n_commits)))
        history[sid] = [(sha, _history_point(float(v))) for sha, v in zip(shas, walk, strict=True)]
    run = RunResult(
        commit=CommitInfo("f" * 40, "main", False),
        environment=env,
        scenarios=tuple(current),
        created_at="2026-01-01T00:00:00+00:00",
        perfguard_version="bench",
    )
    return ReportInput(
        run=run,
        verdicts=tuple(verdicts),
        baseline=baseline,
        history=history,
        baseline_info={"commit": shas[-1], "how": "synthetic", "env_diff": {}},
        baseline_environment=env,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", type=int, default=500)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    t0 = time.perf_counter()
    inp = build(args.scenarios, args.commits)
    t1 = time.perf_counter()
    html = render_html(inp)
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        t3 = time.perf_counter()
        path = write_report(inp, out)  # renders again, then writes report, summary, index
        t4 = time.perf_counter()
        md_size = path.with_name("summary.md").stat().st_size
        html_size = path.stat().st_size
    print(
        f"scenarios {args.scenarios}, history {args.commits} commits each, "
        f"full matplotlib figures for the first {FULL_PLOT_BUDGET} scenarios"
    )
    print(f"build input     {t1 - t0:6.2f} s")
    print(f"render_html     {t2 - t1:6.2f} s  ({len(html.encode()) / 1e6:.2f} MB)")
    print(
        f"write_report    {t4 - t3:6.2f} s  (report.html {html_size / 1e6:.2f} MB, "
        f"summary.md {md_size / 1e3:.1f} KB)"
    )


if __name__ == "__main__":
    main()
