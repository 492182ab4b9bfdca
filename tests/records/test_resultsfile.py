"""results.json: schema, atomic write, faithful read-back, clear refusals."""

from __future__ import annotations

import copy
import dataclasses
import sys
import tempfile
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfguard.core.atomicio import write_json_atomic
from perfguard.core.errors import ResultsError
from perfguard.records.figures import RESERVED_KEYS, RuntimeInfo
from perfguard.records.opprofile import NodeTime, OperatorProfile
from perfguard.records.results import (
    RUN_MODES,
    SCHEMA_VERSION,
    CommitInfo,
    Environment,
    LatencySummary,
    RunResult,
    ScenarioResult,
)
from perfguard.records.resultsfile import (
    load_schema,
    read_results,
    results_path,
    run_dir_name,
    validate,
    write_results,
)
from tests.helpers.strategies import names, profiles

# No example database: it would be written into the repository checkout.
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

hexdigits = "0123456789abcdef"
figures = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)
optional_figures = st.none() | figures
string_maps = st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=20), max_size=5)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | figures | names
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)

latency_summaries = st.builds(
    LatencySummary,
    n=st.integers(0, 10**6),
    min=figures,
    max=figures,
    mean=figures,
    std=figures,
    p50=figures,
    p90=figures,
    p95=figures,
    p99=figures,
    p999=figures,
)


scenarios = st.builds(
    ScenarioResult,
    id=st.text(min_size=1, max_size=40),
    suite=names,
    name=names,
    backend=st.sampled_from(["torch", "onnxruntime", "tensorrt"]),
    device=st.sampled_from(["cpu", "cuda", "cuda:1"]),
    precision=st.sampled_from(["fp32", "fp16", "bf16", "int8"]),
    status=st.sampled_from(["passed", "failed", "skipped", "error"]),
    message=st.none() | names,
    batch_size=st.integers(1, 4096),
    threads=st.none() | st.integers(0, 256),
    latency_ns=st.none() | latency_summaries,
    throughput=optional_figures,
    cold_start_ns=st.none() | st.integers(0, 10**12),
    warmup_iterations=st.integers(0, 10**5),
    warmup_ns=st.integers(0, 10**12),
    stable=st.booleans(),
    stability_ratio=optional_figures,
    runtime=st.dictionaries(
        names.filter(lambda k: k not in RESERVED_KEYS), json_values, max_size=4
    ).map(lambda d: RuntimeInfo(backend=d)),
    canary_ns=optional_figures,
    peak_memory_mib=optional_figures,
    tags=st.lists(names, max_size=4).map(tuple),
    samples_ns=st.lists(st.integers(0, 10**12), max_size=60).map(tuple),
    profile=st.none() | profiles,
)

commits = st.builds(
    CommitInfo,
    sha=st.none() | st.text(alphabet=hexdigits, min_size=40, max_size=40),
    branch=st.none() | names,
    dirty=st.booleans(),
    note=st.none() | names,
)

# A stored fingerprint is its comparable fields' hash (Environment.check on read).
environments = st.builds(Environment.of, comparable=string_maps, recorded=string_maps)

run_results = st.builds(
    RunResult,
    commit=commits,
    environment=environments,
    scenarios=st.lists(scenarios, max_size=4).map(tuple),
    created_at=st.datetimes(timezones=st.just(timezone.utc)).map(datetime.isoformat),
    perfguard_version=st.sampled_from(["0.1.0", "0.2.0.dev1"]),
    mode=st.sampled_from(RUN_MODES),
)


def a_run(**changes: Any) -> RunResult:
    scenario = ScenarioResult(
        id="suites/x.yaml::mlp[torch]",
        suite="suites/x.yaml",
        name="mlp",
        backend="torch",
        device="cpu",
        precision="fp32",
        latency_ns=LatencySummary(3, 1.0, 3.0, 2.0, 0.8, 2.0, 3.0, 3.0, 3.0, 3.0),
        throughput=500.0,
        samples_ns=(1, 2, 3),
    )
    values: dict[str, Any] = {
        "commit": CommitInfo(sha="ab" * 20, branch="main", dirty=False),
        "environment": Environment.of({"cpu_model": "x"}, {"hostname": "h"}),
        "scenarios": (scenario,),
        "created_at": "2024-05-01T12:00:00+00:00",
        "perfguard_version": "0.1.0",
    }
    values.update(changes)
    return RunResult(**values)


@SETTINGS
@given(run_results)
def test_to_dict_matches_schema(run: RunResult) -> None:
    data = run.to_dict()
    jsonschema.Draft202012Validator(load_schema()).validate(data)
    validate(data)


@SETTINGS
@given(run_results)
def test_write_read_round_trip(run: RunResult) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_results(run, Path(tmp) / "reports")
        assert path == results_path(Path(tmp) / "reports", run.commit, run.mode)
        assert path.parent.name == run_dir_name(run.commit, run.mode)
        assert read_results(path) == run


@SETTINGS
@given(run_results, st.text(min_size=1, max_size=8), st.text(max_size=8))
def test_an_edited_comparable_field_is_refused_on_read(
    run: RunResult, key: str, value: str
) -> None:
    """The fingerprint kept, a comparable field edited: it used to be gated as the same
    environment. Read back, the fingerprint is recomputed from the fields."""
    data = run.to_dict()
    comparable = data["environment"]["comparable"]
    if comparable.get(key) == value:
        value += "x"
    comparable[key] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.json"
        write_json_atomic(path, data)
        with pytest.raises(ResultsError, match="is not the hash of its comparable fields") as info:
            read_results(path)
    assert str(path) in str(info.value) and run.environment.fingerprint in str(info.value)


def test_schema_is_valid_draft_2020_12() -> None:
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema_version"] == {"const": SCHEMA_VERSION}


def test_schema_covers_exactly_the_data_classes() -> None:
    # The schema is closed, so a field added to a data class must be added here too.
    schema = load_schema()
    defs = schema["$defs"]
    assert set(schema["properties"]) == set(a_run(mode="ab").to_dict())
    assert "mode" not in a_run().to_dict()  # a plain run's file is as it always was
    assert set(defs["scenario"]["properties"]) == {f.name for f in fields(ScenarioResult)}
    # wall_ns, profile and tokens are optional: absent from older files, left out while
    # not taken (tokens: a cell that generates nothing).
    optional = {"wall_ns", "profile", "tokens"}
    assert set(defs["scenario"]["required"]) == {f.name for f in fields(ScenarioResult)} - optional
    unmeasured = a_run().scenarios[0]
    assert unmeasured.wall_ns is None and "wall_ns" not in unmeasured.to_dict()
    assert unmeasured.profile is None and "profile" not in unmeasured.to_dict()
    assert set(defs["latency"]["properties"]) == {f.name for f in fields(LatencySummary)}
    assert set(defs["commit"]["properties"]) == {f.name for f in fields(CommitInfo)}


def test_results_path(tmp_path: Path) -> None:
    sha = "0123456789abcdef" * 2 + "01234567"
    assert results_path(tmp_path, CommitInfo(sha, "main", False)) == (
        tmp_path / "0123456789ab" / "results.json"
    )
    assert results_path(tmp_path, CommitInfo(None, None, False)) == (
        tmp_path / "uncommitted" / "results.json"
    )


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d.update(surprise=1), "$"),
        (lambda d: d["scenarios"][0].update(surprise=1), "$.scenarios[0]"),
        (lambda d: d["scenarios"][0].update(status="crashed"), "$.scenarios[0].status"),
        (lambda d: d["scenarios"][0].update(samples_ns=[1, -2]), "$.scenarios[0].samples_ns[1]"),
        (lambda d: d["scenarios"][0].update(batch_size=0), "$.scenarios[0].batch_size"),
        (lambda d: d["commit"].update(sha="HEAD"), "$.commit.sha"),
        (lambda d: d["environment"].update(fingerprint="xyz"), "$.environment.fingerprint"),
        (lambda d: d["scenarios"][0]["latency_ns"].pop("p99"), "$.scenarios[0].latency_ns"),
    ],
)
def test_validate_rejects_drift(mutate: Any, where: str) -> None:
    data = a_run().to_dict()
    validate(data)
    mutate(data)
    with pytest.raises(ResultsError, match="do not match the schema") as exc_info:
        validate(data)
    assert where in str(exc_info.value)


def test_runtime_is_open() -> None:
    data = a_run().to_dict()
    data["scenarios"][0]["runtime"] = {"providers": ["CPUExecutionProvider"], "opt": {"x": 1}}
    validate(data)


def test_write_refuses_invalid_data_and_writes_nothing(tmp_path: Path) -> None:
    run = a_run(scenarios=(ScenarioResult("i", "s", "n", "torch", "cpu", "fp32", batch_size=0),))
    with pytest.raises(ResultsError, match="batch_size"):
        write_results(run, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_validate_is_skipped_without_jsonschema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    validate({"not": "results"})


def test_future_schema_version_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    data = a_run().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    write_json_atomic(path, data)
    with pytest.raises(ResultsError, match="upgrade perfguard") as exc_info:
        read_results(path)
    assert str(path) in str(exc_info.value)


@pytest.mark.parametrize(
    "remove",
    [
        lambda d: d.pop("created_at"),
        lambda d: d.pop("environment"),
        lambda d: d["environment"].pop("fingerprint"),
        lambda d: d["scenarios"][0].pop("id"),
        lambda d: d["scenarios"][0]["latency_ns"].pop("p95"),
    ],
)
def test_missing_field_names_the_file(tmp_path: Path, remove: Any) -> None:
    path = tmp_path / "abc" / "results.json"
    data = copy.deepcopy(a_run().to_dict())
    remove(data)
    write_json_atomic(path, data)
    with pytest.raises(ResultsError) as exc_info:
        read_results(path)
    assert str(path) in str(exc_info.value)


def test_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    write_json_atomic(path, [1, 2])
    with pytest.raises(ResultsError, match="not an object"):
        read_results(path)


def test_corrupt_file_is_reported_and_left_alone(tmp_path: Path) -> None:
    path = write_results(a_run(), tmp_path)
    path.write_text(path.read_text()[:-40])
    before = path.read_bytes()
    with pytest.raises(ResultsError, match="invalid JSON"):
        read_results(path)
    assert path.read_bytes() == before


def test_uncommitted_run_round_trips(tmp_path: Path) -> None:
    run = a_run(commit=CommitInfo(None, None, False, note="not a git repository"))
    path = write_results(run, tmp_path)
    assert path.parent.name == "uncommitted"
    assert read_results(path) == run


def test_a_malformed_profile_names_the_file(tmp_path: Path) -> None:
    profile = OperatorProfile("onnxruntime", 10, 1e6, (NodeTime("/a/Conv", "Conv", 5e5),), ())
    run = a_run()
    run = a_run(scenarios=(dataclasses.replace(run.scenarios[0], profile=profile),))
    data = run.to_dict()
    data["scenarios"][0]["profile"]["nodes"][0] = ["/a/Conv"]  # a row cut short
    path = tmp_path / "results.json"
    write_json_atomic(path, data)
    with pytest.raises(ResultsError, match=f"{path}: a cell's operator profile is malformed"):
        read_results(path)
