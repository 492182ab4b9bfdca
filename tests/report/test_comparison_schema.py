"""comparison.json's JSON Schema, generated from the record declarations it holds."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfguard
from perfguard.core.errors import ResultsError
from perfguard.judge.verdict import MetricVerdict, ScenarioVerdict, VerdictKind
from perfguard.records.declare import decode, encode
from perfguard.report.comparison import (
    StoredComparison,
    comparison_schema,
    comparison_schema_text,
    read_comparison,
    write_comparison,
)
from tests.helpers.paths import RECORDS
from tests.helpers.strategies import garbage, records

SCHEMA_FILE = Path(perfguard.__file__).parent / "schemas" / "comparison.schema.json"


def test_the_shipped_comparison_schema_is_the_generated_one() -> None:
    regenerate = "python -m perfguard.report.comparison > perfguard/schemas/comparison.schema.json"
    assert SCHEMA_FILE.read_text(encoding="utf-8") == comparison_schema_text(), (
        f"regenerate: {regenerate}"
    )


def test_every_recorded_comparison_fits_the_generated_schema() -> None:
    schema = comparison_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    files = sorted(RECORDS.glob("*/comparison.json"))
    assert files
    for path in files:
        jsonschema.validate(json.loads(path.read_text(encoding="utf-8")), schema)


def test_a_bad_value_is_refused_naming_the_file_and_its_place(tmp_path: Path) -> None:
    path = tmp_path / "comparison.json"
    verdict = ScenarioVerdict(
        "s.yaml::m", VerdictKind.UNCHANGED, metrics=(MetricVerdict("p95", "unchanged", "", ""),)
    )
    write_comparison(path, baseline={"commit": None}, gate=True, verdicts=[verdict])
    assert read_comparison(path).verdicts == (verdict,)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["verdicts"][0]["metrics"][0]["noise_commits"] = -1
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ResultsError) as info:
        read_comparison(path)
    message = str(info.value)
    assert f"{path}: comparison file holds -1 at $.verdicts[0].metrics[0].noise_commits" in message
    assert "expected a number >= 0" in message and "Fix:" in message


@settings(max_examples=40, deadline=None, database=None)
@given(records(StoredComparison))
def test_declared_comparisons_round_trip(stored: StoredComparison) -> None:
    encoded = json.loads(json.dumps(encode(stored), allow_nan=False))
    back = decode(StoredComparison, encoded, source="c.json")
    assert back == stored and encode(back) == encoded
    jsonschema.validate(encoded, comparison_schema())


@settings(max_examples=60, deadline=None, database=None)
@given(st.fixed_dictionaries({"verdicts": st.lists(garbage, max_size=2)}) | garbage)
def test_garbage_comparisons_are_refused_with_a_results_error(doc: object) -> None:
    try:
        decode(StoredComparison, doc, source="c.json", what="comparison file")
    except ResultsError as exc:
        assert "c.json" in str(exc) and "$" in str(exc)
