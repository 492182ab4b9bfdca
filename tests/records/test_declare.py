"""Stored records declared once (perfguard.records.declare): codecs and schema from one place.

Every declared record round-trips (encode, JSON, decode, encode: the same document);
a mutated or garbage document is refused with a ResultsError naming the file and the
place, never another exception; the shipped results schema holds exactly the
``$defs`` generated from the declarations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfguard
from perfguard.core.errors import ResultsError
from perfguard.records.declare import Record, decode, encode, json_schema, schema_defs, spec
from perfguard.records.figures import LatencySummary
from perfguard.records.loadfigures import (
    BatchingFigures,
    LateFigures,
    LevelMemory,
    LoadFigures,
    SloSearch,
    SloStep,
)
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult
from perfguard.records.resultsfile import results_schema_text
from tests.helpers.strategies import garbage, json_places, mutants, records

SCHEMA_FILE = Path(perfguard.__file__).parent / "schemas" / "results.schema.json"
DECLARED = [LatencySummary, LateFigures, SloStep, SloSearch, LevelMemory, BatchingFigures]
DECLARED += [LoadFigures, CommitInfo, Environment, ScenarioResult, RunResult]
SOURCE = "baselines/abc/def.json"


def _json(data: Any) -> Any:
    return json.loads(json.dumps(data, allow_nan=False))


# --------------------------------------------------------------------------- the schema


def test_the_shipped_results_schema_is_the_generated_one() -> None:
    regenerate = "python -m perfguard.records.resultsfile > perfguard/schemas/results.schema.json"
    text = SCHEMA_FILE.read_text(encoding="utf-8")
    assert text == results_schema_text(), f"regenerate: {regenerate}"


def test_the_generated_defs_are_valid_draft_2020_12() -> None:
    for cls in DECLARED:
        jsonschema.Draft202012Validator.check_schema(json_schema(cls, title=cls.__name__))
    assert set(schema_defs(RunResult)) >= {"latency", "load", "batching", "slo", "scenario"}


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("cls", DECLARED, ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None, database=None)
@given(data=st.data())
def test_declared_records_round_trip(cls: type[Record], data: st.DataObject) -> None:
    record = data.draw(records(cls))
    encoded = _json(encode(record))
    back = decode(cls, encoded, source=SOURCE)
    assert back == record
    assert json.dumps(encode(back)) == json.dumps(encoded)
    # What perfguard writes, its own generated schema accepts.
    jsonschema.validate(encoded, json_schema(cls, title="t"))


# --------------------------------------------------------------------------- refusals


def _decode_or_refuse(cls: type[Record], doc: Any) -> None:
    try:
        decode(cls, doc, source=SOURCE)
    except ResultsError as exc:
        assert SOURCE in str(exc) and "$" in str(exc) and exc.fix


@pytest.mark.parametrize("cls", DECLARED, ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None, database=None)
@given(data=st.data())
def test_mutated_records_are_read_or_refused_with_a_results_error(
    cls: type[Record], data: st.DataObject
) -> None:
    doc = _json(encode(data.draw(records(cls))))
    if not [p for p in json_places(doc) if p]:
        return
    mutated = data.draw(mutants(doc, ("replace", "delete")))
    _decode_or_refuse(cls, mutated)


@pytest.mark.parametrize("cls", DECLARED, ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None, database=None)
@given(doc=garbage)
def test_garbage_documents_are_refused_with_a_results_error(cls: type[Record], doc: Any) -> None:
    _decode_or_refuse(cls, doc)


def test_a_refusal_names_the_file_the_place_and_what_was_expected() -> None:
    doc = _json(encode(LevelMemory(idle_mib=1.0, level_peak_mib=2.0, streams=2)))
    doc["streams"] = 0
    with pytest.raises(ResultsError) as info:
        decode(LevelMemory, doc, source=SOURCE, path="$.scenarios[3].load.memory")
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: stored record holds 0 at $.scenarios[3].load.memory")
    assert "expected a number >= 1" in message and "Fix:" in message
    del doc["streams"]
    with pytest.raises(ResultsError, match=r"lacks the key 'streams' at \$; expected"):
        decode(LevelMemory, doc, source=SOURCE)
    with pytest.raises(ResultsError, match=r"holds true at \$.idle_mib; expected number"):
        decode(LevelMemory, {**doc, "idle_mib": True, "streams": 1}, source=SOURCE)


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class _Inner(Record):
    SCHEMA_NAME: ClassVar[str] = "inner"

    a: int | None = None


@dataclass(frozen=True)
class _Outer(Record):
    SCHEMA_NAME: ClassVar[str] = "outer"

    name: str = field(metadata=spec(key="title"))
    skipped: int | None = field(default=None, metadata=spec(omit="none"))
    level: int = field(default=1, metadata=spec(omit="default", minimum=1))
    inner: _Inner = field(default_factory=_Inner, metadata=spec(inline=True))
    ratio: float = 0.5


def test_keys_omission_and_inline_records() -> None:
    assert encode(_Outer("x")) == {"title": "x", "a": None, "ratio": 0.5}
    assert encode(_Outer("x", skipped=3, level=2, inner=_Inner(4))) == {
        "title": "x",
        "skipped": 3,
        "level": 2,
        "a": 4,
        "ratio": 0.5,
    }
    assert decode(_Outer, {"title": "x", "a": 4}) == _Outer("x", inner=_Inner(4))
    # A whole number stays as the file holds it, so it encodes to the same bytes.
    assert encode(decode(_Outer, {"title": "x", "ratio": 1}))["ratio"] == 1
    schema = json_schema(_Outer, title="outer")
    assert schema["required"] == ["title", "a", "ratio"]
    assert schema["properties"]["level"] == {"type": "integer", "minimum": 1}
    assert schema["properties"]["skipped"] == {"type": "integer"}
