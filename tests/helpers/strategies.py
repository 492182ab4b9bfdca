"""Hypothesis strategies for stored records."""

from __future__ import annotations

from hypothesis import strategies as st

from perfguard.core.profile import PROFILERS, NodeTime, OperatorProfile, OpTypeTime

names = st.text(max_size=20)


# Profiles store whole nanoseconds, so the strategy draws whole ones (a round trip is exact).
whole_ns = st.integers(0, 10**12).map(float)


profiles = st.builds(
    OperatorProfile,
    profiler=st.sampled_from(PROFILERS),
    requests=st.integers(1, 10**4),
    total_ns=whole_ns,
    nodes=st.lists(
        st.builds(NodeTime, name=names, op_type=names, ns=whole_ns, provider=names), max_size=6
    ).map(tuple),
    op_types=st.lists(st.builds(OpTypeTime, op_type=names, ns=whole_ns), max_size=4).map(tuple),
    trace=st.none() | names,
    wall_ns=st.none() | st.integers(0, 10**12),
)
