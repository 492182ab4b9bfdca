"""The typed result and verdict records against the files they stand for.

``tests/fixtures/records`` holds ``results.json``, ``comparison.json`` and baseline
files written by the end-to-end suites (load levels, SLO search, batching, accuracy
with golden outputs, same-run A/B, isolated cells, pytest-benchmark tests) *before*
these records replaced the plain dicts. Each must decode into the records and encode
back to the very same bytes; the records themselves round-trip through JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.baseline.fileformat import decode_document, encode_document, encode_launch
from perfguard.core.atomicio import dumps_json
from perfguard.judge.verdict import (
    ABDetail,
    ABRound,
    Decision,
    DecisionKind,
    ScenarioVerdict,
    VerdictKind,
)
from perfguard.records.accuracyfigures import (
    AccuracyFigures,
    AccuracyReport,
    Check,
    DriftRow,
    OutputMetrics,
    PerplexityFigures,
    TaskMetricFigures,
    TokenAgreement,
)
from perfguard.records.figures import (
    RESERVED_KEYS,
    BenchmarkFacts,
    CpuShares,
    GpuFacts,
    LatencySummary,
    RuntimeInfo,
)
from perfguard.records.loadfigures import (
    BatchingFigures,
    GoodputFigures,
    LateFigures,
    LevelMemory,
    LoadFigures,
    ServiceProbe,
    SloSearch,
    SloStep,
)
from perfguard.records.results import RunResult, ScenarioResult, Status
from perfguard.records.resultsfile import validate
from tests.helpers.paths import RECORDS
from tests.helpers.strategies import profiles

FIXTURES = RECORDS
RESULTS = sorted(FIXTURES.glob("*/results.json"))
COMPARISONS = sorted(FIXTURES.glob("*/comparison.json"))
BASELINES = sorted(FIXTURES.glob("baselines/*/*.json"))


def _id(path: Path) -> str:
    return path.parent.name if path.name != path.parent.name else path.stem


def test_the_fixtures_cover_every_record() -> None:
    runs = [RunResult.from_dict(json.loads(p.read_text(encoding="utf-8"))) for p in RESULTS]
    cells = [s for run in runs for s in run.scenarios]
    assert any(s.load is not None and s.load.slo is not None for s in cells)
    assert any(s.load is not None and s.load.batching is not None for s in cells)
    assert any(s.accuracy is not None and s.accuracy.baseline is not None for s in cells)
    assert any(s.golden_outputs for s in cells)
    assert any(s.runtime.benchmark is not None for s in cells)
    assert any(s.runtime.isolated for s in cells)
    assert any(s.runtime.ab_base for s in cells)
    assert {s.status for s in cells} >= {Status.PASSED, Status.FAILED, Status.SKIPPED}
    verdicts = [
        ScenarioVerdict.from_dict(v)
        for p in COMPARISONS
        for v in json.loads(p.read_text(encoding="utf-8"))["verdicts"]
    ]
    assert any(v.ab is not None and v.ab.rounds for v in verdicts)
    assert len(BASELINES) >= 3


@pytest.mark.parametrize("path", RESULTS, ids=_id)
def test_results_files_decode_and_encode_to_the_same_bytes(path: Path) -> None:
    raw = path.read_text(encoding="utf-8")
    run = RunResult.from_dict(json.loads(raw), source=str(path))
    assert dumps_json(run.to_dict()) == raw
    validate(run.to_dict())
    assert RunResult.from_dict(run.to_dict()) == run


@pytest.mark.parametrize("path", COMPARISONS, ids=_id)
def test_comparison_files_decode_and_encode_to_the_same_bytes(path: Path) -> None:
    raw = path.read_text(encoding="utf-8")
    data = json.loads(raw)
    verdicts = [ScenarioVerdict.from_dict(v) for v in data["verdicts"]]
    assert dumps_json({**data, "verdicts": [v.to_dict() for v in verdicts]}) == raw
    assert all(isinstance(v.verdict, VerdictKind) for v in verdicts)


@pytest.mark.parametrize("path", BASELINES, ids=lambda p: p.stem[:12])
def test_baseline_files_decode_and_encode_to_the_same_bytes(path: Path) -> None:
    raw = path.read_bytes()
    commit, launches, _stored = decode_document(raw, path.parent.name, path.stem, path)
    doc = encode_document(path.parent.name, commit, [encode_launch(run) for run in launches])
    # These files predate the summary: the same bytes, with the summary added before
    # the launches.
    stored = json.loads(raw)
    assert dumps_json(stored).encode("utf-8") == raw
    *top, (last, launches_doc) = stored.items()
    assert last == "launches"
    summary = {
        "created_at": max(launch["created_at"] for launch in launches_doc),
        "launches": len(launches_doc),
        "scenarios": len({s["id"] for launch in launches_doc for s in launch["scenarios"]}),
    }
    expected = {**dict(top), "summary": summary, "launches": launches_doc}
    assert dumps_json(doc) == dumps_json(expected)


# --------------------------------------------------------------------------- round trips

finite = st.floats(-1e12, 1e12, allow_nan=False)
maybe = st.none() | finite
count = st.integers(0, 10**9)
words = st.text(min_size=1, max_size=12)
# Stored figures are never negative (the declarations refuse such a value on read).
non_negative = st.floats(0, 1e12)
maybe_nn = st.none() | non_negative
positive = st.integers(1, 10**9)
summaries = st.builds(
    LatencySummary,
    n=count,
    min=non_negative,
    max=non_negative,
    mean=non_negative,
    std=non_negative,
    p50=non_negative,
    p90=non_negative,
    p95=non_negative,
    p99=non_negative,
    p999=non_negative,
)
json_leaf = st.none() | st.booleans() | st.integers(-(2**31), 2**31) | finite | words
json_values = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
    max_leaves=6,
)

loads = st.builds(
    LoadFigures,
    mode=st.sampled_from(["closed", "open"]),
    level=words,
    concurrency=st.none() | positive,
    rate_asked=maybe_nn,
    rate_sent=maybe_nn,
    rate_achieved=maybe_nn,
    arrivals=st.none() | st.sampled_from(["poisson", "constant"]),
    workers=positive,
    sessions=st.sampled_from(["shared", "per_worker"]),
    requests=count,
    completed=count,
    failed=count,
    unserved=count,
    duration_s=non_negative,
    throughput=non_negative,
    uncorrected_ns=st.none() | summaries,
    queue_share=maybe_nn,
    late=st.builds(
        LateFigures, count, non_negative, non_negative, non_negative, maybe_nn, maybe_nn
    ),
    errors=st.dictionaries(words, positive, max_size=3),
    batching=st.none()
    | st.builds(
        BatchingFigures,
        max_batch=positive,
        max_wait_ms=non_negative,
        batches=count,
        mean_batch=maybe_nn,
        sizes=st.dictionaries(st.integers(1, 64).map(str), count, max_size=4),
        wait_ns=st.none() | summaries,
        probe=st.builds(ServiceProbe, maybe_nn, maybe_nn, maybe_nn, maybe_nn, maybe_nn),
    ),
    slo=st.none()
    | st.builds(
        SloSearch,
        percentile=st.floats(0, 100),
        target_ms=maybe_nn,
        over=st.sampled_from(["rate", "concurrency"]),
        steps=st.lists(
            st.builds(
                SloStep,
                non_negative,
                maybe_nn,
                non_negative,
                st.booleans(),
                st.none() | words,
                st.none() | st.floats(0, 1),
            ),
            min_size=1,
            max_size=3,
        ).map(tuple),
        best_level=maybe_nn,
        best_throughput=maybe_nn,
        best_p_ms=maybe_nn,
        goodput_share=st.none() | st.floats(0, 1),
    ),
    invalid=st.none() | words,
    memory=st.none() | st.builds(LevelMemory, non_negative, non_negative, st.integers(1, 10**6)),
    shortfall=st.none() | words,
    goodput=st.none()
    | st.builds(GoodputFigures, non_negative, non_negative, count, non_negative, st.floats(0, 1)),
)

ints = st.lists(st.integers(0, 10**6), max_size=4).map(tuple)
reports = st.builds(
    AccuracyReport,
    reference=words,
    outputs=st.lists(
        st.builds(
            OutputMetrics,
            name=words,
            values=st.dictionaries(words, maybe, max_size=4),
            worst_inputs=ints,
            worst_by_metric=st.dictionaries(words, ints, max_size=3),
        ),
        max_size=2,
    ).map(tuple),
    checks=st.lists(
        st.builds(Check, words, words, maybe, finite, st.booleans(), words, ints, words),
        max_size=2,
    ).map(tuple),
)
tasks = st.builds(TaskMetricFigures, words, maybe, maybe, maybe, finite, st.booleans())
accuracies = st.builds(
    AccuracyFigures,
    n=count,
    reference=st.none() | words,
    report=st.none() | reports,
    drift=st.lists(
        st.builds(DriftRow, words, finite, finite, finite, maybe, st.booleans()), max_size=2
    ).map(tuple),
    task_metric=st.none() | tasks,
    baseline=st.none() | reports,
    failures=st.lists(words, max_size=2).map(tuple),
    tokens=st.none()
    | st.builds(
        TokenAgreement,
        tokens=count,
        match=st.floats(0, 1),
        identical=count,
        first_divergence=st.lists(st.none() | count, max_size=4).map(tuple),
        limit=maybe,
        passed=st.booleans(),
    ),
    perplexity=st.none()
    | st.builds(PerplexityFigures, count, count, finite, maybe, maybe, maybe, st.booleans()),
).filter(lambda a: a.baseline is None or a.baseline_skipped is None)

runtimes = st.builds(
    RuntimeInfo,
    backend=st.dictionaries(
        words.filter(lambda k: k not in RESERVED_KEYS), json_values, max_size=4
    ),
    cpu=st.none() | st.builds(CpuShares, maybe, maybe),
    sessions=st.none() | count,
    gpu=st.none()
    | st.builds(GpuFacts, st.none() | st.dictionaries(words, json_values), st.none() | summaries),
    isolated=st.booleans(),
    ab_base=st.none() | words,
)
bridged = st.builds(
    RuntimeInfo,
    benchmark=st.builds(
        BenchmarkFacts,
        source=st.just("pytest-benchmark"),
        rounds=count,
        iterations=count,
        sample=words,
        group=json_values,
        params=json_values,
        extra_info=json_values,
    ),
)
abs_ = st.builds(
    ABDetail,
    base=words,
    base_how=words,
    decision=st.builds(
        Decision,
        stop=st.booleans(),
        verdict=st.sampled_from(list(DecisionKind)),
        ratio=maybe_nn,
        lo=maybe_nn,
        hi=maybe_nn,
        pairs=count,
        reason=words,
    ),
    elapsed_s=non_negative,
    rounds=st.lists(
        st.builds(ABRound, count, count, count, *[non_negative] * 5),
        max_size=3,
    ).map(tuple),
    samples_a_ns=st.lists(st.integers(0, 10**12), max_size=20).map(tuple),
    throughput_a=maybe_nn,
    load_a=st.none() | st.dictionaries(words, st.integers(0, 100), max_size=3),
    profile_a=st.none() | profiles,
)


def _through_json(data: dict[str, Any]) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(json.dumps(data, allow_nan=False))
    return decoded


@settings(max_examples=60, deadline=None, database=None)
@given(loads)
def test_load_figures_round_trip(load: LoadFigures) -> None:
    assert LoadFigures.from_dict(_through_json(load.to_dict())) == load


@settings(max_examples=60, deadline=None, database=None)
@given(accuracies)
def test_accuracy_figures_round_trip(accuracy: AccuracyFigures) -> None:
    assert AccuracyFigures.from_dict(_through_json(accuracy.to_dict())) == accuracy


@settings(max_examples=60, deadline=None, database=None)
@given(runtimes | bridged)
def test_runtime_info_round_trips_and_keeps_the_backend_facts_first(runtime: RuntimeInfo) -> None:
    data = runtime.to_dict()
    assert RuntimeInfo.from_dict(_through_json(data)) == runtime
    assert list(data)[: len(runtime.backend)] == list(runtime.backend)


@settings(max_examples=60, deadline=None, database=None)
@given(abs_, st.sampled_from(list(VerdictKind)))
def test_ab_detail_round_trips_inside_its_verdict(ab: ABDetail, kind: VerdictKind) -> None:
    verdict = ScenarioVerdict("s.yaml::m", kind, mode="ab", ab=ab)
    assert ScenarioVerdict.from_dict(_through_json(verdict.to_dict())) == verdict


def test_non_finite_accuracy_figures_are_written_as_null() -> None:
    output = OutputMetrics("emb", {"cosine_min": math.nan, "kl_mean": math.inf}, (0,))
    data = output.to_dict()
    assert data["values"] == {"cosine_min": None, "kl_mean": None}
    json.dumps(data, allow_nan=False)


def test_words_stand_for_their_enums() -> None:
    assert ScenarioResult("i", "s", "n", "b", "d", "p", status="skipped").status is Status.SKIPPED
    assert ScenarioVerdict("i", "regression").failed
    assert {VerdictKind.NEW: 1}["new"] == 1 and f"{Status.ERROR}" == "error"
    assert json.dumps([Status.FAILED, VerdictKind.MISSING]) == '["failed", "missing"]'
    assert [k.verdict for k in DecisionKind] == [
        VerdictKind.REGRESSION,
        VerdictKind.IMPROVEMENT,
        VerdictKind.UNCHANGED,
        VerdictKind.INVALID,
    ]
