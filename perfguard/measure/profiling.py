"""Take a cell's operator profile: a pass of its own after the timed loop, never inside it.

``profile_session`` asks the session's runtime for a profiler (the optional
``ProfilingSession`` side of a backend session, ``perfguard.backends.base``), serves
``PROFILE_WARM_REQUESTS`` requests that are not recorded (the profiler's own first-call
costs, a profiling twin's cold start) and then ``requests`` recorded ones, each timed
from the host. The runtime's figures per request become an ``OperatorProfile``: per
node and per op type the **median** over the recorded requests of its self time in
each request (a node absent from a request counts 0 there), so the nodes add up to the
operator time without counting anything twice.

The stored profile is kept compact: the ``PROFILE_MAX_NODES`` nodes with most time are
kept and the rest fold into one ``(other N nodes)`` row (their medians added up), so
that the operator time stays whole. The runtime's Chrome trace is written atomically
to ``trace_path`` when one is given (it opens in Perfetto and ``chrome://tracing``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from perfguard.backends.base import OperatorProfiler, ProfiledRequests, Session
from perfguard.core.atomicio import write_text_atomic
from perfguard.core.errors import CellError
from perfguard.core.scenario import Scenario
from perfguard.records.opprofile import NodeTime, OperatorProfile, OpTypeTime

__all__ = [
    "PROFILE_MAX_NODES",
    "PROFILE_REQUESTS",
    "PROFILE_WARM_REQUESTS",
    "other_node",
    "profile_session",
    "summarize_profile",
]

#: Recorded requests per profile. A median over 10 requests is steady against the odd
#: slow request (it moves only when 5 or more of them are slow), which is what a profile
#: needs: it explains a change, it does not gate one. The pass stays a fraction of the
#: cell's measuring time (benchmarks/profile_cost.py): besides the requests themselves
#: (slower under the profiler) it costs the profiler's start and the parsing of its
#: events, which grows with them (torch: about 1 s per 10,000 events on a laptop core).
PROFILE_REQUESTS = 10
#: Requests served under the profiler before the recorded ones, not recorded: the
#: profiler's first-call costs and (ONNX Runtime) the profiling session's cold start.
#: The model itself is warm already: the pass comes after the cell's measurement.
PROFILE_WARM_REQUESTS = 1
#: Nodes kept in a stored profile, by time; the rest fold into one row. A node row is
#: about 60-120 bytes of JSON, so 200 of them stay well under the 50 KB per cell the
#: stored profile aims at (MiniLM in ONNX Runtime has a few hundred nodes).
PROFILE_MAX_NODES = 200


def other_node(count: int) -> str:
    """The name of the row that holds the ``count`` nodes past ``PROFILE_MAX_NODES``."""
    return f"(other {count} nodes)"


def profile_session(
    scenario: Scenario,
    session: Session,
    prepared: object,
    *,
    requests: int = PROFILE_REQUESTS,
    trace_path: Path | None = None,
) -> OperatorProfile:
    """Profile ``requests`` requests of ``prepared`` with the runtime's own profiler.

    The session is left as it was (profilers off, hooks removed, a profiling twin
    closed) and keeps serving. ``trace_path``: where to write the Chrome trace
    (atomically); the profile's ``trace`` is its file name, which the caller may
    rewrite relative to the report (``traces/<file>.json``). Raises ``CellError``
    when the cell's runtime has no profiler.
    """
    if requests < 1:
        raise ValueError(f"a profile of {requests} requests; expected at least 1")
    start = time.perf_counter_ns()
    profiler = _profiler(scenario, session, prepared)
    request_ns: list[int] = []
    clock = time.perf_counter_ns
    try:
        for _ in range(PROFILE_WARM_REQUESTS):
            profiler.request(record=False)
        for _ in range(requests):
            t0 = clock()
            profiler.request(record=True)
            request_ns.append(clock() - t0)
    except BaseException:
        with contextlib.suppress(Exception):  # the request's error is the one to report
            profiler.finish()
        raise
    recorded = profiler.finish()
    trace = None
    if trace_path is not None and recorded.trace is not None:
        trace_path = Path(trace_path)
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(trace_path, recorded.trace)
        trace = trace_path.name
    profile = summarize_profile(recorded, request_ns, trace=trace)
    wall = time.perf_counter_ns() - start
    return dataclasses.replace(profile, wall_ns=wall)


def _profiler(scenario: Scenario, session: Session, prepared: object) -> OperatorProfiler:
    make = getattr(session, "profiler", None)
    if make is None:
        raise CellError(
            f"the {scenario.backend} backend cannot profile its operators "
            f"({type(session).__name__} has no profiler)",
            expected="a cell on torch, onnxruntime or tensorrt",
            fix="drop `profile: true` (or --perfguard-profile) for this cell",
            location=scenario.location,
        )
    profiler: OperatorProfiler = make(prepared)
    return profiler


def summarize_profile(
    recorded: ProfiledRequests,
    request_ns: Sequence[int],
    *,
    trace: str | None = None,
    max_nodes: int = PROFILE_MAX_NODES,
) -> OperatorProfile:
    """Median per request of each node and op type; the long tail of nodes folded."""
    count = len(recorded.nodes)
    if count < 1 or len(recorded.op_types) != count:
        raise CellError(
            f"the {recorded.profiler} profile holds {count} requests' nodes and "
            f"{len(recorded.op_types)} requests' op types",
            expected=f"{len(request_ns)} recorded requests in both",
            fix="report this as a perfguard bug, with the cell's runtime and version",
        )
    node_ns = _medians(recorded.nodes)
    ranked = sorted(node_ns.items(), key=lambda item: (-item[1], item[0]))
    kept, rest = ranked[:max_nodes], ranked[max_nodes:]
    nodes = [
        NodeTime(name, op, ns, provider)
        for name, ns in kept
        for op, provider in [recorded.node_info.get(name, ("", ""))]
    ]
    if rest:
        nodes.append(NodeTime(other_node(len(rest)), "", sum(ns for _, ns in rest)))
        nodes.sort(key=lambda node: -node.ns)  # stable: ties keep their order
    op_ns = _medians(recorded.op_types)
    op_types = tuple(
        OpTypeTime(op, ns) for op, ns in sorted(op_ns.items(), key=lambda i: (-i[1], i[0]))
    )
    return OperatorProfile(
        profiler=recorded.profiler,
        requests=count,
        total_ns=float(statistics.median(request_ns)) if request_ns else 0.0,
        nodes=tuple(nodes),
        op_types=op_types,
        trace=trace,
    )


def _medians(per_request: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each key's median over the requests; a request without the key counts 0."""
    keys = dict.fromkeys(key for table in per_request for key in table)
    return {
        key: max(0.0, float(statistics.median(t.get(key, 0.0) for t in per_request)))
        for key in keys
    }
