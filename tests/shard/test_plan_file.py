"""The shard plan's stored form, declared once (perfguard.shard.plan on records.declare).

``shard.json`` and the plan file ``--perfguard-shard-plan-out`` writes are record
declarations (``StoredShardFile``, ``PlanFile``, ``ShardPlan``, ``Shard``): any plan the
planner makes is written and read back to the same plan and the same bytes; a mutated
document is read or refused with a ResultsError naming the file and the place (a
ShardError, wrapping it, from ``read_plan_file``), never another exception; the shipped
schemas are the generated ones and accept what perfguard writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfguard
from perfguard.core.errors import ResultsError, ShardError
from perfguard.records.declare import decode, encode
from perfguard.shard.plan import (
    MAX_SHARDS,
    SCHEMAS,
    Cell,
    PlanFile,
    Shard,
    ShardPlan,
    ShardSpec,
    StoredShardFile,
    plan_file_schema,
    plan_shards,
    read_plan,
    read_plan_file,
    schema_text,
    shard_file_schema,
    write_plan,
    write_plan_file,
)
from tests.helpers.strategies import garbage, mutants

SCHEMA_DIR = Path(perfguard.__file__).parent / "schemas"
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

# -- plans --------------------------------------------------------------------------------

ids = st.text(
    st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)
cells = st.lists(
    st.builds(
        Cell,
        id=ids,
        group=st.sampled_from(["m0", "m1", "m2", "m3"]),
        cost_s=st.none() | st.floats(0, 1e4),
        measured=st.booleans(),
        open_s=st.none() | st.floats(0, 10),
    ),
    max_size=25,
    unique_by=lambda c: c.id,
)


@st.composite
def plans(draw: st.DrawFn) -> ShardPlan:
    """A plan the planner makes (over 1..6 shards), or one built by hand from the
    declaration's own ranges (ids and seconds of any kind a file may hold)."""
    if draw(st.booleans()):
        return plan_shards(draw(cells), draw(st.integers(1, 6)), costs_from=draw(st.text()))
    total = draw(st.integers(1, 5))
    shards = tuple(
        Shard(
            index=i,
            cells=tuple(draw(st.lists(ids, max_size=4))),
            expected_s=draw(st.integers(0, 10**6) | st.floats(0, 1e6)),
            other=tuple(draw(st.lists(ids, max_size=2))),
        )
        for i in range(1, total + 1)
    )
    return ShardPlan(
        total=total, shards=shards, costs_from=draw(st.text()), timed=draw(st.booleans())
    )


def _json(data: Any) -> Any:
    return json.loads(json.dumps(data, allow_nan=False))


def _stored(plan: ShardPlan) -> ShardPlan:
    """``plan`` as a reader sees it: its seconds to the millisecond, as written."""
    shards = tuple(Shard(s.index, s.cells, round(s.expected_s, 3), s.other) for s in plan.shards)
    return ShardPlan(total=plan.total, shards=shards, costs_from=plan.costs_from, timed=plan.timed)


# -- round trips ----------------------------------------------------------------------------


@SETTINGS
@given(plan=plans(), limit=st.none() | st.floats(0, 4) | st.integers(0, 4), data=st.data())
def test_any_plan_is_written_and_read_back_to_the_same_plan_and_bytes(
    tmp_path_factory: pytest.TempPathFactory, plan: ShardPlan, limit: float | None, data: Any
) -> None:
    folder = tmp_path_factory.mktemp("plan")
    shard = ShardSpec(data.draw(st.integers(1, plan.total)), plan.total)
    path = write_plan(plan, shard, folder, contention_limit=limit)
    recorded = read_plan(path)
    assert recorded.plan == _stored(plan) and recorded.plan.digest == plan.digest
    assert recorded.shard == shard and recorded.contention_limit == limit
    text = path.read_text(encoding="utf-8")
    again = write_plan(recorded.plan, shard, folder / "again", contention_limit=limit)
    assert again.read_text(encoding="utf-8") == text
    # Key order: the version, this shard, its limit, then the plan.
    assert list(json.loads(text)) == [
        "schema_version",
        "shard",
        "contention_limit",
        "total",
        "digest",
        "costs_from",
        "timed",
        "shards",
    ]
    jsonschema.validate(json.loads(text), shard_file_schema())

    out = write_plan_file(plan, folder / "plan.json")
    followed = read_plan_file(out, source="--perfguard-shard-plan", shard=shard)
    assert followed == recorded.plan
    assert write_plan_file(followed, folder / "again.json").read_bytes() == out.read_bytes()
    assert list(json.loads(out.read_text(encoding="utf-8")))[:2] == ["schema_version", "total"]
    jsonschema.validate(json.loads(out.read_text(encoding="utf-8")), plan_file_schema())
    # What an xdist worker sends: the plan's own keys.
    assert ShardPlan.from_dict(_json(plan.to_dict()), where="a worker") == _stored(plan)


def test_a_plan_as_the_planner_wrote_it_reads_to_the_same_bytes(tmp_path: Path) -> None:
    # Written by the hand-made codec before the declaration (same cells, same numbers).
    text = (
        '{\n "schema_version": 1,\n "shard": 2,\n "contention_limit": null,\n "total": 2,\n'
        ' "digest": "%s",\n "costs_from": "costs from history",\n "timed": true,\n'
        ' "shards": [\n  {\n   "index": 1,\n   "expected_s": 3.0,\n   "cells": [\n'
        '    "c1",\n    "c0"\n   ],\n   "other": []\n  },\n  {\n   "index": 2,\n'
        '   "expected_s": 2.333,\n   "cells": [\n    "c2"\n   ],\n   "other": []\n  }\n ]\n}\n'
    )
    plan = ShardPlan(
        total=2,
        shards=(Shard(1, ("c1", "c0"), 3.0), Shard(2, ("c2",), 2.3333333)),
        costs_from="costs from history",
    )
    path = tmp_path / "shard.json"
    path.write_text(text % plan.digest, encoding="utf-8")
    recorded = read_plan(path)
    assert write_plan(recorded.plan, recorded.shard, tmp_path / "again").read_text() == (
        text % plan.digest
    )
    assert write_plan(plan, ShardSpec(2, 2), tmp_path / "new").read_text() == text % plan.digest


# -- refusals -------------------------------------------------------------------------------


@SETTINGS
@given(plan=plans(), data=st.data())
def test_a_mutated_shard_json_is_read_or_refused_naming_the_file(
    tmp_path_factory: pytest.TempPathFactory, plan: ShardPlan, data: Any
) -> None:
    folder = tmp_path_factory.mktemp("mutant")
    path = write_plan(plan, ShardSpec(plan.total, plan.total), folder, contention_limit=0.5)
    doc = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(data.draw(mutants(doc))), encoding="utf-8")
    try:
        recorded = read_plan(path)
    except ResultsError as exc:
        assert str(path) in str(exc) and exc.expected and exc.fix
        return
    # What was read is a whole plan: shards 1..N, its digest its cells', this shard in it.
    assert [s.index for s in recorded.plan.shards] == list(range(1, recorded.plan.total + 1))
    assert recorded.plan.digest == recorded.plan.assignment_digest()
    assert 1 <= recorded.shard.index <= recorded.plan.total
    assert all(isinstance(c, str) for s in recorded.plan.shards for c in (*s.cells, *s.other))


@SETTINGS
@given(plan=plans(), data=st.data())
def test_a_mutated_plan_file_is_followed_or_refused_with_a_shard_error(
    tmp_path_factory: pytest.TempPathFactory, plan: ShardPlan, data: Any
) -> None:
    folder = tmp_path_factory.mktemp("mutant")
    path = write_plan_file(plan, folder / "plan.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(data.draw(mutants(doc))), encoding="utf-8")
    try:
        read_plan_file(path, source="--perfguard-shard-plan", shard=ShardSpec(1, plan.total))
    except ShardError as exc:
        assert "--perfguard-shard-plan" in str(exc) and str(path) in str(exc) and exc.fix


@SETTINGS
@given(doc=garbage)
def test_garbage_is_refused_with_a_results_error(doc: Any) -> None:
    for cls in (ShardPlan, PlanFile, StoredShardFile):
        with pytest.raises(ResultsError) as info:
            if cls is ShardPlan:
                ShardPlan.from_dict(doc, where="w.json")
            else:
                decode(cls, doc, source="w.json")
        assert "w.json" in str(info.value)


@pytest.mark.parametrize(
    ("change", "found", "expected"),
    [
        (lambda d: d.update(shard=0), "shard plan holds 0 at $.shard", "a number >= 1"),
        (lambda d: d.update(shard=3), "'shard' is 3", "an integer in 1..2"),
        (lambda d: d.update(total=MAX_SHARDS + 1), "at $.total", f"a number <= {MAX_SHARDS}"),
        (lambda d: d.update(contention_limit=-1), "at $.contention_limit", "a number >= 0"),
        (lambda d: d.update(contention_limit="1"), "at $.contention_limit", "number or null"),
        (lambda d: d["shards"][1]["cells"].__setitem__(0, 3), "at $.shards[1].cells[0]", "string"),
        (lambda d: d["shards"][0].update(expected_s=-2), "at $.shards[0].expected_s", ">= 0"),
        (lambda d: d["shards"][0].pop("cells"), "lacks the key 'cells'", "the key 'cells'"),
        (lambda d: d.update(digest="../x"), "at $.digest", "^[0-9a-f]{16}$"),
        (lambda d: d["shards"][0]["cells"].append("x"), "does not match its cells", "as perfguard"),
        (lambda d: d["shards"].reverse(), "the plan lists shards [2, 1]", "shards 1..2, in order"),
    ],
)
def test_a_refusal_names_the_file_the_place_what_was_expected_and_the_fix(
    tmp_path: Path, change: Any, found: str, expected: str
) -> None:
    plan = plan_shards([Cell(f"c{i}", f"g{i}", float(i + 1)) for i in range(4)], 2)
    path = write_plan(plan, ShardSpec(1, 2), tmp_path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ResultsError) as info:
        read_plan(path)
    assert str(info.value).startswith(f"{path}: "), info.value
    assert found in info.value.problem and expected in str(info.value.expected)
    assert info.value.fix == "use the shard's output as it was written, or run the shard again"


def test_an_older_plan_without_a_digest_or_costs_reads_with_their_defaults(tmp_path: Path) -> None:
    plan = plan_shards([Cell(f"c{i}", f"g{i}", float(i + 1)) for i in range(4)], 2)
    doc = encode(PlanFile(plan))
    for key in ("digest", "costs_from", "timed"):
        del doc[key]
    for shard in doc["shards"]:
        del shard["other"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    read = read_plan_file(path, source="x", shard=ShardSpec(1, 2))
    assert read.digest == plan.digest and read.costs_from == "" and read.timed


# -- the schemas ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_shipped_shard_schemas_are_the_generated_ones(name: str) -> None:
    text = (SCHEMA_DIR / name).read_text(encoding="utf-8")
    assert text == schema_text(name), "regenerate: python -m perfguard.shard.plan"
    jsonschema.Draft202012Validator.check_schema(json.loads(text))
