"""The base side of a same-run A/B verdict, as the reports and a shard merge read it.

Same-run A/B (:mod:`perfguard.ab.abrun`) stores its base revision's figures in the
verdict (``ABDetail``); :func:`base_results` turns them back into the results a report
shows beside the head's, and :func:`ab_label`/:func:`ab_how` name the base. They live
here, below both the A/B runner and the reports, so a report needs nothing of ``ab/``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from perfguard.core.policy import MetricKind, gate_metric
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.figures import RuntimeInfo, summarize
from perfguard.records.loadfigures import LoadFigures
from perfguard.records.results import ScenarioResult

__all__ = ["ab_how", "ab_label", "base_results"]


def ab_label(base_sha: str, base_how: str) -> str:
    """The base revision as the terminal names it: ``<sha12> (<how it was chosen>)``."""
    return f"{base_sha[:12]} ({base_how})"


def ab_how(base_sha: str, base_how: str) -> str:
    """The report's baseline line of a same-run A/B run (also of merged A/B shards)."""
    return (
        f"same-run A/B: base {ab_label(base_sha, base_how)} measured again in this run, "
        "interleaved request by request with the working tree"
    )


def base_results(
    verdicts: Mapping[str, ScenarioVerdict],
    results: Mapping[str, ScenarioResult],
) -> dict[str, ScenarioResult]:
    """The report's baseline of each A/B cell: its base-revision samples of this run,
    under load the base side's own throughput and load figures (never the head's: a
    verdict stored before them leaves those figures out rather than borrow the head's),
    and the base side's operator profile when it was taken (never the working tree's:
    a base that was not profiled has none), and a generative cell's base-side token
    figures (none when the verdict has none). Its peak memory is side A's own figure
    from the verdict's memory gates, and none without them."""
    out: dict[str, ScenarioResult] = {}
    for sid, verdict in verdicts.items():
        ab = verdict.ab
        samples = ab.samples_a_ns if ab is not None else ()
        current = results.get(sid)
        if verdict.mode != "ab" or ab is None or not samples or current is None:
            continue
        memory = {}
        for m in verdict.metrics:
            spec = gate_metric(m.metric)
            if spec is not None and spec.kind is MetricKind.MEMORY:
                memory[spec.name] = m.baseline
        base = dataclasses.replace(
            current,
            samples_ns=samples,
            latency_ns=summarize(samples),
            runtime=RuntimeInfo(),
            profile=ab.profile_a,
            tokens=ab.tokens_a,
            peak_memory_mib=memory.get("peak_memory"),
            gpu_peak_memory_mib=memory.get("gpu_mem"),
        )
        if current.load is not None:
            base = dataclasses.replace(
                base,
                throughput=ab.throughput_a,
                load=LoadFigures.from_dict(ab.load_a) if ab.load_a else None,
            )
        out[sid] = base
    return out
