"""Properties of the operator-profile record and its diff (``perfguard.records.opprofile``)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfguard.core.errors import ResultsError
from perfguard.records.opprofile import (
    Contribution,
    NodeTime,
    OperatorProfile,
    OpTypeTime,
    diff_profiles,
    layer_of,
)

OP_TYPES = ("MatMul", "Conv", "Add", "Gemm", "aten::addmm")
segments = st.text(alphabet="abcxyz.0123_", min_size=1, max_size=6)
names = st.lists(segments, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))
#: Integer nanoseconds, as a stored profile holds them (sums stay exact in floats).
times = st.integers(min_value=0, max_value=10**9)


def profile_of(nodes: Sequence[NodeTime], trace: str | None = None) -> OperatorProfile:
    ops: dict[str, float] = {}
    for node in nodes:
        ops[node.op_type] = ops.get(node.op_type, 0.0) + node.ns
    return OperatorProfile(
        profiler="onnxruntime",
        requests=20,
        total_ns=sum(n.ns for n in nodes) + 1000,
        nodes=tuple(sorted(nodes, key=lambda n: -n.ns)),
        op_types=tuple(OpTypeTime(op, ns) for op, ns in ops.items()),
        trace=trace,
    )


@st.composite
def pairs(draw: st.DrawFn) -> tuple[OperatorProfile, OperatorProfile]:
    """A base and a current profile over one pool of nodes: some on both sides, some
    on one side only (node names are unique within a profile, as a profiler's are)."""
    pool = draw(st.lists(names, min_size=1, max_size=12, unique=True))
    sides: list[list[NodeTime]] = [[], []]
    for name in pool:
        op = draw(st.sampled_from(OP_TYPES))
        where = draw(st.sampled_from(("both", "base", "current")))
        for index, side in enumerate(("base", "current")):
            if where in ("both", side):
                sides[index].append(NodeTime(name, op, float(draw(times)), "CPU"))
    return profile_of(sides[0]), profile_of(sides[1])


def shares_sum_to_one(rows: Sequence[Contribution]) -> None:
    total = math.fsum(c.share for c in rows)
    scale = max(1.0, math.fsum(abs(c.share) for c in rows))
    assert total == pytest.approx(1.0, abs=1e-9 * scale)


@given(pairs())
def test_shares_of_the_change_sum_to_one(pair: tuple[OperatorProfile, OperatorProfile]) -> None:
    base, current = pair
    diff = diff_profiles(base, current)
    assert diff.change_ns == current.operator_ns - base.operator_ns
    if diff.change_ns:
        shares_sum_to_one(diff.nodes)
        shares_sum_to_one(diff.op_types)
    else:
        assert all(c.share == 0 for c in diff.nodes)


@given(pairs())
def test_a_node_on_one_side_only_is_marked(pair: tuple[OperatorProfile, OperatorProfile]) -> None:
    base, current = pair
    before = {n.name: n.ns for n in base.nodes}
    now = {n.name: n.ns for n in current.nodes}
    diff = diff_profiles(base, current)
    assert {c.key for c in diff.nodes} == set(before) | set(now)
    for c in diff.nodes:
        expected = "both" if c.key in before and c.key in now else None
        expected = expected or ("base only" if c.key in before else "current only")
        assert c.side == expected
        assert c.base_ns == before.get(c.key)
        assert c.current_ns == now.get(c.key)
        assert c.delta_ns == now.get(c.key, 0.0) - before.get(c.key, 0.0)


@given(pairs())
def test_contributions_are_sorted_in_the_direction_of_the_change(
    pair: tuple[OperatorProfile, OperatorProfile],
) -> None:
    base, current = pair
    diff = diff_profiles(base, current)
    for rows in (diff.nodes, diff.op_types):
        deltas = [c.delta_ns for c in rows]
        if diff.change_ns is not None and diff.change_ns < 0:
            assert deltas == sorted(deltas)  # most time saved first
        else:
            assert deltas == sorted(deltas, reverse=True)  # most time added first


@given(pairs())
def test_the_headline_names_the_top_contributor(
    pair: tuple[OperatorProfile, OperatorProfile],
) -> None:
    base, current = pair
    diff = diff_profiles(base, current)
    assert diff.top is not None and diff.top is diff.nodes[0]
    top = diff.top_layer
    assert top is not None and top is diff.layers[0]
    # Layers add their nodes up: every node's layer is one, and nothing is lost.
    layer_keys = {c.key for c in diff.layers}
    assert {layer_of(c.key, current.profiler) for c in diff.nodes} == layer_keys
    assert sum(c.delta_ns for c in diff.layers) == pytest.approx(
        sum(c.delta_ns for c in diff.nodes), abs=1e-3
    )
    line = diff.headline()
    assert f"`{top.key}`" in line
    if diff.change_ns:
        if round(top.share * 100) > 100:  # the others offset part of it: said so
            assert f"{top.share:.0%} of the net change in {top.op_type}" in line
            assert "the other nodes got " in line
        else:
            assert f"{top.share:.0%} of it in {top.op_type}" in line
        # The top layer is the one that moved most in the direction of the change.
        moved = [c.delta_ns * (1 if diff.change_ns > 0 else -1) for c in diff.layers]
        assert moved[0] == max(moved)
        assert line.startswith("+" if diff.change_ns > 0 else "-")


@given(pairs())
def test_without_a_base_the_diff_ranks_where_the_time_goes(
    pair: tuple[OperatorProfile, OperatorProfile],
) -> None:
    _, current = pair
    diff = diff_profiles(None, current)
    assert diff.change_ns is None and diff.base_ns is None
    assert all(c.side == "current only" and c.base_ns is None for c in diff.nodes)
    assert [c.current_ns for c in diff.nodes] == sorted((n.ns for n in current.nodes), reverse=True)
    if current.operator_ns:
        shares_sum_to_one(diff.nodes)
        assert "ms per request in operators" in diff.headline()


@given(pairs(), st.none() | st.just("traces/cell.json"), st.none() | st.integers(0, 10**12))
def test_to_dict_from_dict_round_trip_through_json(
    pair: tuple[OperatorProfile, OperatorProfile], trace: str | None, wall: int | None
) -> None:
    _, current = pair
    profile = OperatorProfile(
        profiler=current.profiler,
        requests=current.requests,
        total_ns=current.total_ns,
        nodes=current.nodes,
        op_types=current.op_types,
        trace=trace,
        wall_ns=wall,
    )
    text = json.dumps(profile.to_dict())
    again = OperatorProfile.from_dict(json.loads(text))
    assert again == profile
    assert json.dumps(again.to_dict()) == text


@pytest.mark.parametrize(
    "broken",
    [
        {"profiler": "onnxruntime", "requests": 3, "total_ns": 1, "nodes": [["a"]], "op_types": []},
        {"profiler": "onnxruntime", "requests": 3, "nodes": [], "op_types": []},
        {"profiler": "gprof", "requests": 3, "total_ns": 1, "nodes": [], "op_types": []},
    ],
)
def test_a_malformed_profile_is_a_results_error_naming_the_file(broken: dict[str, object]) -> None:
    with pytest.raises(ResultsError, match=r"results\.json: a cell's operator profile"):
        OperatorProfile.from_dict(broken, source="results.json")


def test_node_path_levels() -> None:
    assert NodeTime("/encoder/layer.3/MatMul", "MatMul", 1.0).path == (
        "encoder",
        "layer.3",
        "MatMul",
    )
    assert NodeTime("layer2/0/conv2", "Conv", 1.0).path == ("layer2", "0", "conv2")
