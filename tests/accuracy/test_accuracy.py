"""perfguard.accuracy.metrics: known answers against scipy/numpy, properties, gates and errors."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import distance
from scipy.special import softmax
from scipy.stats import entropy

from perfguard.accuracy import metrics as accuracy
from perfguard.accuracy.metrics import (
    compare_outputs,
    degenerate,
    output_metrics,
    task_metric_check,
)
from perfguard.core.errors import AccuracyError, PerfguardError
from perfguard.core.policy import DEGENERATE_MAX_ABS
from perfguard.core.scenario import AccuracyGates, AccuracySpec, TaskMetricSpec
from perfguard.records.accuracyfigures import DEGENERATE_FIX, AccuracyFigures, AccuracyReport

# No wall-clock deadline (shared CI hosts) and no example database (no files written).
SETTINGS = settings(deadline=None, database=None, max_examples=60)
RNG = np.random.default_rng(1234)


def _clip_renorm(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-12, 1.0)
    return p / p.sum(axis=-1, keepdims=True)


def _spec(**gates: Any) -> AccuracySpec:
    return AccuracySpec(gates=AccuracyGates(**gates))


# --- known answers -----------------------------------------------------------------


def test_cosine_matches_scipy_per_sample() -> None:
    cur = RNG.normal(size=(20, 3, 7)).astype(np.float32)
    ref = cur + RNG.normal(scale=0.3, size=cur.shape).astype(np.float32)
    expected = np.array(
        [
            1.0 - distance.cosine(c.ravel().astype(float), r.ravel().astype(float))
            for c, r in zip(cur, ref, strict=True)
        ]
    )
    m = output_metrics("x", cur, ref)
    assert m.values["cosine_mean"] == pytest.approx(expected.mean(), abs=1e-12)
    assert m.values["cosine_min"] == pytest.approx(expected.min(), abs=1e-12)
    assert m.worst_inputs == tuple(int(i) for i in np.argsort(expected)[:5])
    assert m.worst_by_metric["cosine"] == m.worst_inputs


def test_cosine_of_zero_samples() -> None:
    ref = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 2.0], [1.0, 0.0]])
    cur = np.array([[0.0, 0.0], [3.0, 1.0], [0.0, 0.0], [2.0, 0.0]])
    m = output_metrics("x", cur, ref)
    # both zero -> 1; one zero -> 0 (twice); parallel -> 1
    assert m.values["cosine_min"] == 0.0
    assert m.values["cosine_mean"] == pytest.approx(0.5)
    assert m.worst_inputs == (1, 2)


@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_kl_on_logits_matches_scipy_entropy(temperature: float) -> None:
    ref = RNG.normal(size=(12, 6)) * 3
    cur = ref + RNG.normal(scale=0.5, size=ref.shape)
    p = _clip_renorm(softmax(ref / temperature, axis=-1))
    q = _clip_renorm(softmax(cur / temperature, axis=-1))
    expected = np.array([entropy(pi, qi) for pi, qi in zip(p, q, strict=True)])
    m = output_metrics("logits", cur, ref, kl_on="logits", temperature=temperature)
    assert m.values["kl_mean"] == pytest.approx(expected.mean(), rel=1e-9)
    assert m.values["kl_max"] == pytest.approx(expected.max(), rel=1e-9)
    assert m.worst_by_metric["kl"] == tuple(int(i) for i in np.argsort(-expected)[:5])


def test_kl_on_probabilities_clips_zeros() -> None:
    ref = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    cur = np.array([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5]])
    expected = [entropy(_clip_renorm(r), _clip_renorm(c)) for c, r in zip(cur, ref, strict=True)]
    m = output_metrics("p", cur, ref, kl_on="probabilities")
    assert np.isfinite(m.values["kl_max"])
    assert m.values["kl_max"] == pytest.approx(max(expected), rel=1e-9)
    assert m.values["kl_mean"] == pytest.approx(np.mean(expected), rel=1e-9)
    assert m.worst_by_metric["kl"] == (0,)  # sample 1 is identical


def test_kl_averages_rows_of_a_sample() -> None:
    ref = RNG.normal(size=(4, 3, 5))
    cur = ref + RNG.normal(scale=0.4, size=ref.shape)
    p, q = _clip_renorm(softmax(ref, axis=-1)), _clip_renorm(softmax(cur, axis=-1))
    per_sample = [np.mean([entropy(p[s, t], q[s, t]) for t in range(3)]) for s in range(4)]
    m = output_metrics("tokens", cur, ref)
    assert m.values["kl_mean"] == pytest.approx(np.mean(per_sample), rel=1e-9)
    assert m.values["kl_max"] == pytest.approx(np.max(per_sample), rel=1e-9)


def test_absolute_and_relative_errors() -> None:
    ref = np.array([[0.0, 2.0, -4.0], [1.0, 0.0, 8.0]], dtype=np.float32)
    cur = np.array([[1e-6, 2.5, -4.0], [1.0, 0.1, 6.0]], dtype=np.float32)
    diff = np.abs(cur.astype(np.float64) - ref.astype(np.float64))
    floor = 1e-6 * 8.0
    rel = diff / np.maximum(np.abs(ref.astype(np.float64)), floor)
    m = output_metrics("x", cur, ref)
    assert m.values["max_abs_err"] == pytest.approx(diff.max())
    assert m.values["mean_abs_err"] == pytest.approx(diff.mean())
    assert m.values["max_rel_err"] == pytest.approx(rel.max())
    assert m.values["mean_rel_err"] == pytest.approx(rel.mean())
    # The 0.1 against a reference 0 is measured against 1e-6 * max|ref|, not 0.
    assert m.values["max_rel_err"] == pytest.approx(0.1 / floor, rel=1e-6)
    assert m.worst_by_metric["abs_err"] == (1, 0)
    assert m.worst_by_metric["rel_err"] == (1, 0)


def test_relative_error_against_an_all_zero_reference_is_the_absolute_error() -> None:
    m = output_metrics("x", np.array([[0.5, -0.25]]), np.zeros((1, 2)))
    assert m.values["max_rel_err"] == m.values["max_abs_err"] == 0.5


def test_topk_agreement_by_hand() -> None:
    ref = np.array([[5.0, 4.0, 1.0, 0.0], [5.0, 4.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]])
    cur = np.array([[4.0, 5.0, 1.0, 0.0], [5.0, 1.0, 4.0, 0.0], [0.0, 1.0, 2.0, 3.0]])
    top2 = output_metrics("x", cur, ref, topk=2)
    # sample 0: {0,1} vs {1,0} agree (order ignored); sample 1: {0,1} vs {0,2} do not
    assert top2.values["topk_agreement"] == pytest.approx(2 / 3)
    assert top2.values["topk"] == 2.0
    assert top2.worst_by_metric["topk"] == (1,)
    top1 = output_metrics("x", cur, ref, topk=1)
    assert top1.values["topk_agreement"] == pytest.approx(2 / 3)  # sample 0: 1 vs 0
    assert top1.worst_by_metric["topk"] == (0,)
    # Ties rank the lower index first, the same for k = 1 and k > 1.
    tie = np.array([[1.0, 1.0, 0.0]])
    assert (
        output_metrics("t", tie, np.array([[1.0, 0.5, 0.0]]), topk=1).values["topk_agreement"]
        == 1.0
    )
    assert "topk" not in output_metrics("x", cur, ref, topk=5).values  # k > classes


def test_topk_needs_every_row_of_a_sample_to_agree() -> None:
    ref = np.zeros((2, 2, 3))
    ref[:, :, 0] = 1.0
    cur = ref.copy()
    cur[1, 1] = [0.0, 2.0, 0.0]  # second row of sample 1 disagrees
    assert output_metrics("x", cur, ref).values["topk_agreement"] == 0.5


def test_nonfinite_counted_per_side() -> None:
    ref = np.ones((4, 3))
    ref[2, 0] = np.inf
    cur = np.ones((4, 3))
    cur[1, :2] = np.nan
    cur[3, 2] = -np.inf
    m = output_metrics("x", cur, ref)
    assert m.values["nonfinite_current"] == 3
    assert m.values["nonfinite_reference"] == 1
    assert m.worst_by_metric["nonfinite"] == (1, 3)
    assert np.isnan(m.values["cosine_min"])
    assert m.worst_inputs[:3] == (1, 2, 3)  # non-finite samples rank worst


@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.uint8])
def test_integer_outputs_compare_exactly(dtype: Any) -> None:
    ref = np.arange(24, dtype=dtype).reshape(6, 4)
    cur = ref.copy()
    cur[4, 1] += 1
    cur[4, 2] += 1
    cur[1, 0] += 1
    m = output_metrics("ids", cur, ref)
    assert m.values["mismatch_count"] == 3
    assert m.values["mismatch_share"] == pytest.approx(3 / 24)
    assert m.values["max_abs_err"] == 1.0
    assert m.worst_inputs == (4, 1)
    assert not {"cosine_min", "kl_mean", "topk_agreement"} & set(m.values)


def test_bool_outputs_compare_exactly() -> None:
    ref = np.array([[True, False], [False, False]])
    cur = np.array([[True, True], [False, False]])
    m = output_metrics("mask", cur, ref)
    assert m.values["mismatch_count"] == 1
    assert m.values["max_abs_err"] == 1.0


def test_integer_output_fails_on_mismatch_unless_a_tolerance_is_set() -> None:
    ref = np.arange(10).reshape(5, 2)
    cur = ref.copy()
    cur[3, 1] += 2
    report = compare_outputs(
        [cur], [ref], _spec(cosine_min=0.99), reference_name="r", output_names=["ids"]
    )
    assert [c.metric for c in report.checks] == ["exact_match", "nonfinite_max"]
    failure = report.failures[0]
    assert failure.value == 1 and failure.limit == 0 and failure.worst_inputs == (3,)
    assert failure.message == "mismatched values 1 > 0 on output ids vs reference r; worst inputs 3"
    tolerant = compare_outputs(
        [cur], [ref], _spec(max_abs_err=2.0), reference_name="r", output_names=["ids"]
    )
    assert tolerant.passed
    assert [c.metric for c in tolerant.checks] == ["max_abs_err", "nonfinite_max"]


def test_chunking_gives_the_same_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = RNG.normal(size=(37, 4, 9))
    cur = ref + RNG.normal(scale=0.2, size=ref.shape)
    cur[5, 0, 0] = np.nan
    whole = output_metrics("x", cur, ref, topk=3)
    monkeypatch.setattr(accuracy, "_CHUNK_ELEMENTS", 50)  # 1 sample per chunk
    chunked = output_metrics("x", cur, ref, topk=3)
    assert chunked.worst_by_metric == whole.worst_by_metric
    for key, value in whole.values.items():
        assert chunked.values[key] == pytest.approx(value, rel=1e-12, nan_ok=True), key


# --- properties ----------------------------------------------------------------------

magnitudes = st.floats(min_value=1e-6, max_value=1e6, allow_subnormal=False)
elements = st.one_of(st.just(0.0), magnitudes, magnitudes.map(lambda v: -v))
vectors = st.lists(elements, min_size=1, max_size=40).filter(lambda v: any(v))


@SETTINGS
@given(vectors, st.floats(min_value=1e-3, max_value=1e3))
def test_cosine_of_a_vector_with_itself_and_positive_multiples_is_one(
    values: list[float], scale: float
) -> None:
    x = np.array([values])
    assert output_metrics("x", x, x).values["cosine_min"] == pytest.approx(1.0, abs=1e-6)
    assert output_metrics("x", scale * x, x).values["cosine_min"] == pytest.approx(1.0, abs=1e-6)


def sized_distributions(min_size: int = 2, max_size: int = 12) -> st.SearchStrategy[np.ndarray]:
    """Probability vectors of ``min_size`` to ``max_size`` entries."""
    return (
        st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=min_size, max_size=max_size)
        .filter(lambda v: sum(v) > 1e-3)
        .map(lambda v: np.array(v) / np.sum(v))
    )


distributions = sized_distributions()


@SETTINGS
@given(distributions, st.data())
def test_kl_is_non_negative_and_zero_only_for_equal_distributions(
    p: np.ndarray, data: st.DataObject
) -> None:
    # Drawn at p's length (filtering other lengths out starves hypothesis' health check).
    q = data.draw(sized_distributions(len(p), len(p)), label="q")
    same = output_metrics("p", p[None], p[None], kl_on="probabilities")
    assert same.values["kl_max"] == 0.0
    kl = output_metrics("p", q[None], p[None], kl_on="probabilities").values["kl_max"]
    assert kl >= 0.0
    if np.max(np.abs(_clip_renorm(p) - _clip_renorm(q))) > 1e-6:
        assert kl > 0.0


@SETTINGS
@given(
    # Zeros next to values of a sane scale: the floor is 1e-6 of the largest |ref|, so
    # |cur - ref| / floor stays far from overflow; a 1e-308 scale would overflow honestly.
    st.lists(
        st.one_of(st.just(0.0), st.floats(1e-3, 1e3), st.floats(-1e3, -1e-3)),
        min_size=1,
        max_size=30,
    ),
    st.lists(st.floats(-1e3, 1e3), min_size=30, max_size=30),
)
def test_relative_error_is_finite_with_zeros_in_the_reference(
    ref_values: list[float], cur_values: list[float]
) -> None:
    ref = np.array([ref_values])
    cur = np.array([cur_values[: len(ref_values)]])
    m = output_metrics("x", cur, ref)
    assert np.isfinite(m.values["max_rel_err"]) and np.isfinite(m.values["mean_rel_err"])
    assert m.values["max_rel_err"] >= 0.0


# --- gates and reports -----------------------------------------------------------------


def _degraded(n: int = 10, bad: dict[int, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    ref = RNG.normal(size=(n, 16)).astype(np.float32)
    cur = ref.copy()
    for index, noise in (bad or {}).items():
        cur[index] += noise * RNG.normal(size=16).astype(np.float32)
    return cur, ref


def test_worst_inputs_are_the_right_ones_worst_first() -> None:
    cur, ref = _degraded(bad={7: 3.0, 2: 1.0, 9: 0.3})
    report = compare_outputs(
        [cur],
        [ref],
        _spec(cosine_min=0.99),
        reference_name="torch-fp32",
        output_names=["embedding"],
    )
    (failure,) = report.failures
    assert failure.metric == "cosine_min" and failure.output == "embedding"
    assert failure.worst_inputs[:2] == (7, 2)
    assert set(failure.worst_inputs[:3]) == {7, 2, 9}
    worst = ", ".join(str(i) for i in failure.worst_inputs)
    assert re.fullmatch(
        r"cosine similarity min 0\.\d+ < 0\.99 on output embedding vs reference torch-fp32; "
        rf"worst inputs {worst}",
        failure.message,
    ), failure.message


def test_checks_follow_the_gates_and_none_limits_are_not_checked() -> None:
    cur, ref = _degraded(bad={1: 0.01})
    gates = AccuracyGates(
        cosine_mean_min=0.9,
        kl_max=1.0,
        topk_agreement_min=0.5,
        max_abs_err=1.0,
        mean_abs_err=1.0,
        max_rel_err=1e9,
    )
    report = compare_outputs(
        [cur], [ref], AccuracySpec(gates=gates), reference_name="r", output_names=["o"]
    )
    assert [c.metric for c in report.checks] == [
        "cosine_mean_min", "kl_max", "topk_agreement_min", "max_abs_err", "mean_abs_err",
        "max_rel_err", "nonfinite_max",
    ]  # fmt: skip
    assert report.passed and not report.failures
    # 0.99999... is not rounded up to "1" in the message.
    assert report.checks[0].message.startswith("cosine similarity mean 0.99")
    assert ">= 0.9 on output o vs reference r" in report.checks[0].message
    assert report.checks[2].message.startswith("top-1 agreement 1 >= 0.5")
    assert [
        c.metric
        for c in compare_outputs(
            [cur], [ref], AccuracySpec(), reference_name="r", output_names=["o"]
        ).checks
    ] == ["nonfinite_max"]


def test_per_output_gates_override_by_name_or_index() -> None:
    good, ref_a = _degraded()
    bad, ref_b = _degraded(bad={3: 2.0})
    loose = AccuracyGates(cosine_min=0.1)
    for key in ("logits", "1"):
        spec = AccuracySpec(gates=AccuracyGates(cosine_min=0.99), per_output=((key, loose),))
        report = compare_outputs(
            [good, bad], [ref_a, ref_b], spec, reference_name="r", output_names=["emb", "logits"]
        )
        assert report.passed, report.failures
        limits = {(c.output, c.metric): c.limit for c in report.checks}
        assert limits[("emb", "cosine_min")] == 0.99
        assert limits[("logits", "cosine_min")] == 0.1
    strict = compare_outputs(
        [good, bad],
        [ref_a, ref_b],
        _spec(cosine_min=0.99),
        reference_name="r",
        output_names=["emb", "logits"],
    )
    assert [c.output for c in strict.failures] == ["logits"]


def test_output_selection_by_name_and_index() -> None:
    a, ra = _degraded()
    b, rb = _degraded()
    for key in ("b", "1"):
        spec = AccuracySpec(outputs=(key,))
        report = compare_outputs(
            [a, b], [ra, rb], spec, reference_name="r", output_names=["a", "b"]
        )
        assert [m.name for m in report.outputs] == ["b"]


def test_baseline_mode_checks_only_baseline_cosine_and_nonfinite() -> None:
    cur, ref = _degraded(bad={4: 1.0})
    spec = _spec(cosine_min=0.99, max_abs_err=1e-9, baseline_cosine_min=0.999)
    report = compare_outputs(
        [cur], [ref], spec, reference_name="baseline abc1234", output_names=["emb"], baseline=True
    )
    assert [c.metric for c in report.checks] == ["baseline_cosine_min", "nonfinite_max"]
    (failure,) = report.failures
    assert failure.reference == "baseline abc1234" and failure.limit == 0.999
    assert " < 0.999 on output emb vs baseline abc1234; worst inputs 4" in failure.message


def test_nan_in_current_fails_and_the_report_is_strict_json() -> None:
    cur, ref = _degraded()
    cur[6, 3] = np.nan
    report = compare_outputs(
        [cur], [ref], _spec(cosine_min=0.9), reference_name="r", output_names=["emb"]
    )
    by_metric = {c.metric: c for c in report.failures}
    assert set(by_metric) == {"cosine_min", "nonfinite_max"}
    assert "is nan (not finite)" in by_metric["cosine_min"].message
    assert by_metric["nonfinite_max"].message == (
        "NaN/Inf count 1 > 0 on output emb vs reference r; worst inputs 6"
    )
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["passed"] is False
    assert data["outputs"][0]["values"]["cosine_min"] is None
    assert data["checks"][0]["worst_inputs"] == [6]


def test_kl_on_probabilities_is_left_out_for_ungated_non_distributions() -> None:
    emb, ref = _degraded()  # an embedding next to probabilities: no KL gate, no error
    spec = AccuracySpec(kl_on="probabilities", gates=AccuracyGates(cosine_min=0.9))
    report = compare_outputs([emb], [ref], spec, reference_name="r", output_names=["emb"])
    assert "kl_mean" not in report.outputs[0].values and report.passed


def test_message_digits_separate_value_and_limit() -> None:
    cur, ref = _degraded(bad={0: 0.002})
    value = output_metrics("o", cur, ref).values["cosine_min"]
    limit = float(f"{value:.4g}")
    limit = limit if limit > value else limit + 1e-4
    (failure,) = compare_outputs(
        [cur], [ref], _spec(cosine_min=limit), reference_name="r", output_names=["o"]
    ).failures
    shown_value, shown_limit = re.findall(r"[\d.]+", failure.message)[:2]
    assert shown_value != shown_limit


# --- task metric -------------------------------------------------------------------------


def _accuracy_metric(outputs: list[np.ndarray], labels: np.ndarray) -> float:
    return float(np.mean(outputs[0].argmax(axis=-1) == labels) * 100)


def test_task_metric_drop() -> None:
    labels = np.array([0, 1, 2, 0])
    ref = np.eye(3)[labels]
    cur = ref.copy()
    cur[1] = [1.0, 0.0, 0.0]  # one of four wrong: 75 vs 100
    spec = TaskMetricSpec(function="m:acc", drop_max=10.0)
    figures, check = task_metric_check(_accuracy_metric, [cur], [ref], labels, spec, "fp32")
    assert figures.current == 75.0 and figures.reference == 100.0
    assert figures.drop == 25.0 and not check.passed
    assert check.metric == "task_drop" and check.value == 25.0 and check.limit == 10.0
    assert check.message == (
        "task metric m:acc drop 25 > 10 vs reference fp32 (current 75, reference 100)"
    )
    lower = TaskMetricSpec(function="m:err", higher_is_better=False, drop_max=30.0)
    figures, check = task_metric_check(_accuracy_metric, [cur], [ref], labels, lower, "fp32")
    assert figures.drop == -25.0 and check.passed


def test_task_metric_without_reference_passes_and_is_json() -> None:
    labels = np.array([0, 1])
    figures, check = task_metric_check(
        _accuracy_metric, [np.eye(2)], None, labels, TaskMetricSpec(function="m:acc"), "none"
    )
    assert check.passed and figures.current == 100.0 and figures.drop is None
    json.dumps([figures.to_dict(), check.to_dict()], allow_nan=False)


def test_task_metric_gets_read_only_outputs() -> None:
    def edits(outputs: list[np.ndarray], labels: np.ndarray) -> float:
        outputs[0] += 1
        return 0.0

    ref = np.zeros((2, 2))
    with pytest.raises(AccuracyError, match="task metric m:edits raised ValueError"):
        task_metric_check(edits, [ref], [ref], np.zeros(2), TaskMetricSpec("m:edits"), "r")
    assert not ref.any()


# --- errors ---------------------------------------------------------------------------------


def test_non_distribution_under_kl_probabilities_suggests_logits() -> None:
    ref = np.array([[0.2, 0.8], [0.5, 0.5]])
    negative = np.array([[0.2, 0.8], [1.5, -0.5]])
    spec = AccuracySpec(kl_on="probabilities", gates=AccuracyGates(kl_max=0.1))
    with pytest.raises(AccuracyError) as info:
        compare_outputs([negative], [ref], spec, reference_name="r", output_names=["probs"])
    text = str(info.value)
    assert "negative value" in text and "sample 1" in text and "'probs'" in text
    assert "kl_on: logits" in text and "temperature" in text
    scores = np.array([[1.2, 0.3], [0.5, 0.5]])
    with pytest.raises(AccuracyError, match=r"summing to 1\.5 in sample 0.*kl_on: logits"):
        output_metrics("probs", scores, scores, kl_on="probabilities")


def test_shape_mismatch_names_output_and_both_shapes() -> None:
    with pytest.raises(AccuracyError, match=r"'logits' has shape \[4, 3\].*\[4, 5\]"):
        compare_outputs(
            [np.zeros((4, 3))],
            [np.zeros((4, 5))],
            AccuracySpec(),
            reference_name="r",
            output_names=["logits"],
        )


def test_unknown_output_lists_the_available_ones() -> None:
    a = np.zeros((2, 2))
    for spec in (
        AccuracySpec(outputs=("nope",)),
        AccuracySpec(per_output=(("7", AccuracyGates()),)),
    ):
        with pytest.raises(AccuracyError, match=r"0 \(emb\), 1 \(logits\)"):
            compare_outputs(
                [a, a], [a, a], spec, reference_name="r", output_names=["emb", "logits"]
            )


def test_per_output_gate_that_does_not_apply_is_refused() -> None:
    ids = np.arange(4).reshape(2, 2)
    spec = AccuracySpec(per_output=(("ids", AccuracyGates(cosine_min=0.9)),))
    with pytest.raises(AccuracyError, match="cosine_min for output 'ids'"):
        compare_outputs([ids], [ids], spec, reference_name="r", output_names=["ids"])


def test_wrong_label_count_gives_both_numbers() -> None:
    out = np.zeros((8, 3))
    with pytest.raises(AccuracyError, match="5 labels for 8 accuracy samples"):
        task_metric_check(_accuracy_metric, [out], [out], np.zeros(5), TaskMetricSpec("m:acc"), "r")


def test_task_function_raising_names_function_and_exception() -> None:
    def broken(outputs: list[np.ndarray], labels: np.ndarray) -> float:
        raise KeyError("logits")

    out = np.zeros((2, 3))
    with pytest.raises(AccuracyError, match=r"task metric mod:broken raised KeyError: 'logits'"):
        task_metric_check(broken, [out], [out], np.zeros(2), TaskMetricSpec("mod:broken"), "r")


@pytest.mark.parametrize("kwargs", [{"kl_on": "softmax"}, {"temperature": 0.0}, {"topk": 0}])
def test_bad_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(AccuracyError):
        output_metrics("x", np.ones((2, 2)), np.ones((2, 2)), **kwargs)


def test_errors_are_perfguard_errors() -> None:
    assert issubclass(AccuracyError, PerfguardError)


def test_per_output_merged_with_the_global_gates_is_not_refused() -> None:
    # The suite loader merges per_output over the global gates; a global cosine gate
    # then reaches the integer output's entry unchanged, and is skipped there.
    ids, emb = np.arange(4).reshape(2, 2), np.arange(1.0, 7.0).reshape(2, 3)
    gates = AccuracyGates(cosine_min=0.9)
    spec = AccuracySpec(gates=gates, per_output=(("ids", replace(gates, max_abs_err=1.0)),))
    report = compare_outputs(
        [ids, emb], [ids, emb], spec, reference_name="r", output_names=["ids", "emb"]
    )
    assert [(c.output, c.metric) for c in report.checks] == [
        ("ids", "max_abs_err"), ("ids", "nonfinite_max"),
        ("emb", "cosine_min"), ("emb", "nonfinite_max"),
    ]  # fmt: skip


def test_task_metric_nan_on_current_fails_without_crashing() -> None:
    out = np.zeros((2, 2))
    figures, check = task_metric_check(
        lambda outputs, labels: float(outputs[0].sum()) or np.nan,  # current (zeros): NaN
        [out], [np.ones((2, 2))], None, TaskMetricSpec("m:f"), "r",
    )  # fmt: skip
    assert not check.passed and figures.current is None and "drop nan" in check.message


# --- degenerate references (issue 28) ------------------------------------------------


@st.composite
def informative(draw: st.DrawFn) -> np.ndarray:
    """Outputs that carry information: Gaussian logits [N, C] at a scale from 1e-3 to 1e3
    (C >= 2, so rows vary), as float32 or float64."""
    n, classes = draw(st.integers(1, 8)), draw(st.integers(2, 16))
    scale = draw(st.floats(min_value=1e-3, max_value=1e3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return (scale * rng.normal(size=(n, classes))).astype(dtype)


@SETTINGS
@given(informative(), st.floats(min_value=1e-12, max_value=0.5))
def test_outputs_scaled_below_the_near_zero_threshold_are_degenerate_and_others_never(
    logits: np.ndarray, fraction: float
) -> None:
    assert degenerate(logits) == ""
    # Scaled so their largest |value| is `fraction` of the threshold: near zero.
    tiny = logits * (fraction * DEGENERATE_MAX_ABS / float(np.max(np.abs(logits))))
    assert degenerate(tiny).startswith("near zero: its largest |value| is ")


@SETTINGS
@given(informative(), st.floats(min_value=-1e3, max_value=1e3).filter(lambda v: abs(v) > 1e-3))
def test_constant_outputs_are_degenerate(logits: np.ndarray, value: float) -> None:
    filled = np.full_like(logits, value)
    assert degenerate(filled) == f"constant: every value is {float(filled.flat[0]):.6g}"
    # Each row one value, the rows different: softmax uniform, top-k by index order.
    rows = np.repeat(np.arange(1.0, logits.shape[0] + 1)[:, None] * value, logits.shape[1], 1)
    if logits.shape[0] > 1:
        assert degenerate(rows) == "constant: each row of its last axis holds one value"


def test_degenerate_by_hand() -> None:
    logits = np.array([[2e-9, -1e-9, 5e-10]] * 4, dtype=np.float32)  # random mobilenet
    assert degenerate(logits) == "near zero: its largest |value| is 2e-09, below 1e-06"
    assert degenerate(np.zeros((3, 5))) == "near zero: its largest |value| is 0, below 1e-06"
    nan = np.ones((6, 3)) * np.arange(3)
    nan[2, 1] = nan[4, 0] = np.inf
    assert degenerate(nan) == "it holds 2 NaN/Inf values, in inputs 2, 4"
    # A scalar per input varying across inputs is fine; one value everywhere is not.
    assert degenerate(np.array([0.3, 0.7, 0.1])) == ""
    assert degenerate(np.array([[0.5], [0.5]])) == "constant: every value is 0.5"
    # Integer and bool outputs are compared exactly: never degenerate.
    assert degenerate(np.zeros((4, 3), dtype=np.int64)) == degenerate(np.ones(4, bool)) == ""
    # One varying row is enough to carry information.
    assert degenerate(np.array([[1.0, 1.0], [1.0, 2.0]])) == ""


def test_a_degenerate_reference_is_inconclusive_not_failed_or_passed() -> None:
    """mobilenet_v3_small with random weights: logits ~2e-9 that int8 rounds to zero."""
    rng = np.random.default_rng(0)
    reference = (rng.normal(size=(8, 10)) * 2e-9).astype(np.float32)
    current = np.zeros_like(reference)
    spec = _spec(cosine_min=0.99, topk_agreement_min=0.9, kl_max=0.01, max_abs_err=1.0)
    report = compare_outputs(
        [current], [reference], spec, reference_name="torch-fp32", output_names=["logits"]
    )
    # Before: cosine 0 and top-1 0 failed beside KL 7e-16 and max abs error 2e-9 passing.
    assert [c.metric for c in report.checks] == ["nonfinite_max"] and report.passed
    [output] = report.outputs
    assert output.degenerate.startswith("near zero: its largest |value| is 4.")
    assert output.values["cosine_mean"] == 0.0  # the figures are still kept
    [message] = report.inconclusive
    assert message.startswith(
        "accuracy on output logits not checked: reference torch-fp32 is degenerate (near zero: "
    )
    assert "so cosine, KL, top-k and errors against it carry no information; fix: " in message
    assert message.endswith(DEGENERATE_FIX)
    # Stored and read back (results.json): the reason stays; absent when there is none.
    again = AccuracyReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.inconclusive == report.inconclusive
    assert again.outputs[0].degenerate == output.degenerate
    fine = compare_outputs([current + 1.0], [reference + np.arange(10.0)], spec,
                           reference_name="r", output_names=["logits"])  # fmt: skip
    assert "inconclusive" not in fine.to_dict() and "degenerate" not in fine.outputs[0].to_dict()
    figures = AccuracyFigures(n=8, report=report, inconclusive=report.inconclusive)
    assert AccuracyFigures.from_dict(json.loads(json.dumps(figures.to_dict()))) == figures
    assert "inconclusive" not in AccuracyFigures(n=8).to_dict()


def test_a_degenerate_reference_still_fails_nan_on_the_current_side() -> None:
    reference, current = np.full((4, 3), 0.25), np.ones((4, 3))
    current[1, 2] = np.nan
    for baseline in (False, True):  # the golden outputs' check too
        report = compare_outputs([current], [reference], _spec(), reference_name="r",
                                 output_names=["p"], baseline=baseline)  # fmt: skip
        assert report.inconclusive and [c.metric for c in report.failures] == ["nonfinite_max"]


def test_a_reference_with_nan_is_inconclusive_and_names_the_inputs() -> None:
    """It used to refuse the run (an AccuracyError): a broken reference judges nothing."""
    ref = np.ones((5, 3)) * np.arange(3)
    ref[3, 1] = np.nan
    report = compare_outputs([np.ones((5, 3))], [ref], AccuracySpec(),
                             reference_name="torch-fp32", output_names=["o"])  # fmt: skip
    [message] = report.inconclusive
    assert "reference torch-fp32 is degenerate (it holds 1 NaN/Inf values, in inputs 3)" in message


def test_a_degenerate_reference_with_kl_on_probabilities_is_not_refused() -> None:
    """Zero rows are no distributions; a degenerate reference is inconclusive, not an error."""
    spec = AccuracySpec(gates=AccuracyGates(kl_max=0.1), kl_on="probabilities")
    report = compare_outputs([np.full((2, 4), 0.25)], [np.zeros((2, 4))], spec,
                             reference_name="r", output_names=["p"])  # fmt: skip
    assert report.inconclusive and report.passed
