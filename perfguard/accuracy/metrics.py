"""Accuracy of a cell's outputs against a reference: pure functions over arrays.

Each output is stacked over the N accuracy samples on axis 0 (``[N, ...]``; at
batch B, ``[N*B, ...]``: each row on axis 0 is a sample). Figures are computed in
float64. Per output, ``c`` the current and ``r`` the reference output:

* Cosine similarity, per sample: ``c.r / (|c| |r|)`` over the flattened sample;
  two all-zero samples count as 1.0, an all-zero sample against a non-zero one
  as 0.0. Reported: ``cosine_mean`` and ``cosine_min`` over the samples.
* KL divergence ``KL(r || c) = sum_i p_i (ln p_i - ln q_i)`` in nats over the
  last axis, ``p`` from the reference, ``q`` from the current output. With
  ``kl_on: logits`` both first become ``softmax(x / temperature)``; with
  ``kl_on: probabilities`` they are taken as given and must be distributions (no
  negative value, each row summing to 1 within 1e-3), else the check refuses to
  run. Then each row is clipped to [1e-12, 1] and divided by its sum, so a zero
  probability cannot make KL infinite. ``[N, T, V]`` gives one KL per row, and
  a sample's KL is the mean of its rows. Reported: ``kl_mean``, ``kl_max``.
* Absolute error ``|c - r|`` per element: ``max_abs_err``, ``mean_abs_err``.
* Relative error ``|c - r| / max(|r|, floor)`` per element, with
  ``floor = 1e-6 * max|r|`` over the whole reference output (1.0 if it is all
  zeros): where the reference is zero or tiny, the error is measured against a
  millionth of the output's scale instead of dividing by (almost) zero.
  ``max_rel_err``, ``mean_rel_err`` over all elements.
* Top-k agreement: a sample agrees when, in every row of its last axis, the SETS
  of indices of the k largest values are equal (order within the set ignored;
  of equal values the lower index ranks first). ``topk_agreement`` is the share
  of samples that agree (``topk`` = k); it needs k values on the last axis.
* NaN/Inf: ``nonfinite_current`` and ``nonfinite_reference`` count the
  non-finite elements of each side. A sample holding NaN/Inf gets a NaN cosine
  and KL and a NaN or infinite error, which fail their gates.
* Integer and bool outputs are compared exactly: ``mismatch_count`` (elements
  that differ), ``mismatch_share`` (that count over all elements), and the
  absolute and relative errors; cosine, KL and top-k do not apply.

Gates: ``cosine_min``, ``cosine_mean_min`` (on ``cosine_mean``), ``kl_max`` (on
``kl_mean``), ``topk_agreement_min``, ``max_abs_err``, ``mean_abs_err``,
``max_rel_err`` and, always, ``nonfinite_max`` (on ``nonfinite_current``). An
integer output fails on any mismatch unless ``max_abs_err`` or ``mean_abs_err``
is set for it. A gate that does not apply to an output (cosine on integers) is
skipped there, and refused when ``per_output`` sets it for that output.

Degenerate references: a floating reference output that holds NaN/Inf, is near zero
(largest |value| below ``DEGENERATE_MAX_ABS``) or constant (``degenerate``) cannot judge
anything: its figures are still computed, but none of its gates is checked except
``nonfinite_max`` on the current side; ``AccuracyReport.inconclusive`` says why and the
fix, and the cell's accuracy is inconclusive rather than passed or failed on noise.

Worst inputs: per figure, up to 5 sample indices furthest from the reference
(lowest cosine; highest KL or per-sample max error; top-k disagreement; most
NaN/Inf or mismatches), worst first, ties by index, exact matches left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from perfguard.core.errors import AccuracyError
from perfguard.core.policy import DEGENERATE_MAX_ABS, DEGENERATE_SPREAD
from perfguard.core.scenario import AccuracySpec, TaskMetricSpec
from perfguard.records.accuracyfigures import (
    DEGENERATE_FIX,
    AccuracyReport,
    Check,
    OutputMetrics,
    TaskMetricFigures,
)

EPS = 1e-12  # probabilities are clipped to [EPS, 1] before KL
DISTRIBUTION_TOL = 1e-3  # |row sum - 1| allowed under kl_on: probabilities
REL_FLOOR = 1e-6  # relative-error floor, as a share of max|reference|
WORST_COUNT = 5
KL_ON = ("probabilities", "logits")
# Samples go in chunks of ~this many elements: [N, T, vocab] is never all float64 at once.
_CHUNK_ELEMENTS = 1 << 21

Array = npt.NDArray[Any]
Floats = npt.NDArray[np.float64]
# gate field, figure in OutputMetrics.values, worst-input ranking, figure >= limit?, label
Gate = tuple[str, str, str, bool, str]
_GATED: tuple[Gate, ...] = (
    ("cosine_min", "cosine_min", "cosine", True, "cosine similarity min"),
    ("cosine_mean_min", "cosine_mean", "cosine", True, "cosine similarity mean"),
    ("kl_max", "kl_mean", "kl", False, "KL divergence mean"),
    ("topk_agreement_min", "topk_agreement", "topk", True, "top-{k} agreement"),
    ("max_abs_err", "max_abs_err", "abs_err", False, "max abs error"),
    ("mean_abs_err", "mean_abs_err", "abs_err", False, "mean abs error"),
    ("max_rel_err", "max_rel_err", "rel_err", False, "max rel error"),
)
_BASELINE: Gate = ("baseline_cosine_min", "cosine_min", "cosine", True, "cosine similarity min")
_NONFINITE: Gate = ("nonfinite_max", "nonfinite_current", "nonfinite", False, "NaN/Inf count")
_EXACT: Gate = ("exact_match", "mismatch_count", "mismatch", False, "mismatched values")


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _is_floating(dtype: np.dtype[Any]) -> bool:
    # ml_dtypes' bfloat16/float8 are not np.floating subclasses but cast to float64.
    return bool(np.issubdtype(dtype, np.floating)) or dtype.name.startswith(("bfloat", "float"))


def _cosine(c: Floats, r: Floats) -> Floats:
    """Per-row cosine of [n, d] arrays."""
    # Scaling each row by its largest magnitude leaves the cosine unchanged but
    # keeps the squares of large values (1e200) from overflowing to inf.
    sc, sr = np.max(np.abs(c), axis=1), np.max(np.abs(r), axis=1)
    cs = c / np.where(sc > 0, sc, 1.0)[:, None]
    rs = r / np.where(sr > 0, sr, 1.0)[:, None]
    dot = np.einsum("ij,ij->i", cs, rs)
    norms = np.sqrt(np.einsum("ij,ij->i", cs, cs) * np.einsum("ij,ij->i", rs, rs))
    cos = np.clip(dot / norms, -1.0, 1.0)  # rounding can overshoot 1 by an ulp
    return np.where((sc == 0) & (sr == 0), 1.0, np.where((sc == 0) | (sr == 0), 0.0, cos))


def _kl(c: Floats, r: Floats, kl_on: str, temperature: float) -> Floats:
    """Per-sample mean over rows of KL(r || c); inputs are [n, rows, classes]."""
    dists = []
    for x in (r, c):
        if kl_on == "logits":  # softmax, shifted by the row max so exp cannot overflow
            x = np.exp(x / temperature - np.max(x / temperature, axis=-1, keepdims=True))
            x = x / np.sum(x, axis=-1, keepdims=True)
        x = np.clip(x, EPS, 1.0)
        dists.append(x / np.sum(x, axis=-1, keepdims=True))
    p, q = dists
    rows = np.sum(p * (np.log(p) - np.log(q)), axis=-1)
    # KL >= 0 exactly; rounding can give -1e-17, which would read as "better than equal".
    return np.asarray(np.maximum(rows, 0.0).mean(axis=1), dtype=np.float64)


def _not_distribution(x: Array, role: str, chunks: Sequence[slice]) -> str | None:
    """Why rows of the last axis are not distributions (rows with NaN/Inf skipped)."""
    for part in chunks:
        rows = x[part].astype(np.float64)
        rows = rows.reshape(rows.shape[0], -1, x.shape[-1])
        finite, sums = np.all(np.isfinite(rows), axis=-1), np.sum(rows, axis=-1)
        negative = finite & np.any(rows < 0, axis=-1)
        off = finite & (np.abs(sums - 1.0) > DISTRIBUTION_TOL)
        for bad, what in ((negative, "a negative value"), (off, "a row summing to {:.6g}")):
            if bad.any():
                s, row = np.argwhere(bad)[0]
                return f"the {role} has {what.format(sums[s, row])} in sample {part.start + s}"
    return None


def _topk_agree(c: Floats, r: Floats, k: int) -> Floats:
    """1.0 per sample whose top-k index sets agree in every row of [n, rows, classes]."""
    # NaN ranks lowest so that the set is defined; the sample's NaN cosine fails anyway.
    c = np.where(np.isnan(c), -np.inf, c)
    if k == 1:  # argmax takes the first of equal values, like the stable sort below
        same = np.argmax(c, axis=-1) == np.argmax(r, axis=-1)
    else:
        top_c = np.sort(np.argsort(-c, axis=-1, kind="stable")[..., :k], axis=-1)
        top_r = np.sort(np.argsort(-r, axis=-1, kind="stable")[..., :k], axis=-1)
        same = np.all(top_c == top_r, axis=-1)
    return np.asarray(np.all(same, axis=1), dtype=np.float64)


def _worst(badness: Floats) -> tuple[int, ...]:
    bad = np.where(np.isnan(badness), np.inf, badness)
    candidates = np.flatnonzero(bad > 0)  # a sample that matches exactly is not "worst"
    order = candidates[np.argsort(-bad[candidates], kind="stable")]
    return tuple(int(i) for i in order[:WORST_COUNT])


def _chunk_figures(
    cc: Array, rc: Array, floor: float, kl_on: str | None, temperature: float, topk: int
) -> dict[str, Floats]:
    """Per-sample figures of one chunk of samples (see ``output_metrics``)."""
    m = cc.shape[0]
    got: dict[str, Floats] = {}
    for side, x in (("current", cc), ("reference", rc)):
        bad = ~np.isfinite(x) if _is_floating(x.dtype) else np.zeros(x.shape, bool)
        got[f"nonfinite_{side}"] = bad.reshape(m, -1).sum(axis=1).astype(np.float64)
    floating = _is_floating(cc.dtype) or _is_floating(rc.dtype)
    if not floating:
        got["mismatch"] = (cc != rc).reshape(m, -1).sum(axis=1).astype(np.float64)
    c, r = cc.astype(np.float64).reshape(m, -1), rc.astype(np.float64).reshape(m, -1)
    diff = np.abs(c - r)
    rel = diff / np.maximum(np.abs(r), floor)
    got["abs_max"], got["abs_sum"] = diff.max(axis=1), diff.sum(axis=1)
    got["rel_max"], got["rel_sum"] = rel.max(axis=1), rel.sum(axis=1)
    if floating:
        got["cosine"] = _cosine(c, r)
        classes = cc.shape[-1] if cc.ndim >= 2 else 0
        c3, r3 = c.reshape(m, -1, classes or 1), r.reshape(m, -1, classes or 1)
        if kl_on is not None and classes:
            got["kl"] = _kl(c3, r3, kl_on, temperature)
        if topk <= classes:
            got["topk"] = _topk_agree(c3, r3, topk)
    return got


def output_metrics(
    name: str,
    current: Array,
    reference: Array,
    *,
    kl_on: str | None = "logits",
    temperature: float = 1.0,
    topk: int = 1,
    kl_strict: bool = True,
) -> OutputMetrics:
    """Every figure of one output. ``kl_on=None`` leaves KL out; so does a
    non-distribution under ``kl_on="probabilities"`` when ``kl_strict`` is False
    (it raises AccuracyError otherwise)."""
    cur, ref = np.asarray(current), np.asarray(reference)
    if cur.shape != ref.shape or cur.ndim == 0 or cur.size == 0:
        raise AccuracyError(
            f"output {name!r} has shape {list(cur.shape)} on the current cell and "
            f"{list(ref.shape)} on the reference",
            expected="the same shape [N, ...] on both, with N >= 1 samples on axis 0",
            fix="compare cells of the same model and inputs, or select outputs with `outputs`",
        )
    if kl_on not in (*KL_ON, None) or not 0 < temperature < math.inf or topk < 1:
        raise AccuracyError(
            f"kl_on {kl_on!r}, temperature {temperature}, topk {topk}",
            expected="kl_on `probabilities` or `logits`, a temperature > 0, topk >= 1",
        )
    n = cur.shape[0]
    step = max(1, _CHUNK_ELEMENTS // (cur.size // n))
    chunks = [slice(start, start + step) for start in range(0, n, step)]
    parts: dict[str, list[Floats]] = {}
    with np.errstate(all="ignore"):  # NaN/Inf are counted, not warned about
        if kl_on == "probabilities" and _is_floating(cur.dtype) and cur.ndim >= 2:
            problem = _not_distribution(ref, "reference", chunks)
            problem = problem or _not_distribution(cur, "current output", chunks)
            if problem and kl_strict:
                raise AccuracyError(
                    f"output {name!r}: KL divergence on probabilities needs every row of "
                    f"the last axis to be a distribution, but {problem}",
                    expected=f"non-negative rows summing to 1 within {DISTRIBUTION_TOL:g}",
                    fix="if the output holds logits or scores, set `kl_on: logits` with a "
                    "`temperature` (1.0 for a plain softmax)",
                )
            kl_on = None if problem else kl_on
        # One relative-error floor for the whole output: 1e-6 of its largest finite |value|.
        mags = (np.abs(ref[part].astype(np.float64)) for part in chunks)
        top = max(float(np.max(np.where(np.isfinite(m), m, 0.0))) for m in mags)
        floor = REL_FLOOR * top if top > 0 else 1.0
        for part in chunks:
            got = _chunk_figures(cur[part], ref[part], floor, kl_on, temperature, topk)
            for key, value in got.items():
                parts.setdefault(key, []).append(value)
    per = {key: np.concatenate(value) for key, value in parts.items()}
    total, worst = float(cur.size), {"nonfinite": _worst(per["nonfinite_current"])}
    values: dict[str, float] = {
        "samples": float(n),
        **{k: float(np.sum(per[k])) for k in per if "nonfinite" in k},
    }
    if "mismatch" in per:
        values["mismatch_count"] = float(np.sum(per["mismatch"]))
        values["mismatch_share"] = values["mismatch_count"] / total
        worst["mismatch"] = _worst(per["mismatch"])
    for kind in ("abs", "rel"):
        values[f"max_{kind}_err"] = float(np.max(per[f"{kind}_max"]))
        values[f"mean_{kind}_err"] = float(np.sum(per[f"{kind}_sum"])) / total
        worst[f"{kind}_err"] = _worst(per[f"{kind}_max"])
    # Per-sample figure, the name of its mean and of its worst extreme, higher is better.
    for key, mean, extreme, high in (
        ("cosine", "cosine_mean", "cosine_min", True),
        ("kl", "kl_mean", "kl_max", False),
        ("topk", "topk_agreement", "", True),
    ):
        if key in per:
            values[mean] = float(np.mean(per[key]))
            if extreme:
                values[extreme] = float(np.min(per[key]) if high else np.max(per[key]))
            worst[key] = _worst(1.0 - per[key] if high else per[key])
    if "topk" in per:
        values["topk"] = float(topk)
    main = worst.get("cosine", worst.get("mismatch", ()))
    return OutputMetrics(name=name, values=values, worst_inputs=main, worst_by_metric=worst)


def _format_pair(value: float, limit: float) -> tuple[str, str]:
    # Enough digits that a value never prints as its limit, nor 0.99999 as "1".
    whole = float(f"{value:.0f}")  # not round(): NaN must not raise
    for digits in range(4, 13):
        v = f"{value:.{digits}g}"
        if (v != f"{limit:.{digits}g}" or value == limit) and (float(v) != whole or value == whole):
            break
    # The limit is what the user wrote: its shortest exact form (0.999999, not "1").
    return v, repr(float(limit)) if limit != int(limit) else f"{limit:g}"


def _check(
    gate: Gate, limit: float, metrics: OutputMetrics, against: str, reference: str, topk: int
) -> Check:
    metric, figure, ranking, at_least, label = gate
    figure_value = metrics.values[figure]
    value = math.nan if figure_value is None else figure_value  # None: read from a file
    passed = math.isfinite(value) and (value >= limit if at_least else value <= limit)
    worst = metrics.worst_by_metric.get(ranking, ())
    if math.isfinite(value):
        v, lim = _format_pair(value, limit)
        op = (">=" if at_least else "<=") if passed else ("<" if at_least else ">")
        head = f"{label.format(k=topk)} {v} {op} {lim}"
    else:
        head = f"{label.format(k=topk)} is {value} (not finite), limit {limit:g}"
    message = f"{head} on output {metrics.name} vs {against}"
    if worst and not passed:
        message += "; worst inputs " + ", ".join(str(i) for i in worst)
    return Check(metric, metrics.name, value, float(limit), passed, reference, worst, message)


def _resolve(key: str, names: Sequence[str], where: str) -> int:
    if key in names:
        return list(names).index(key)
    if key.strip().isdigit() and int(key) < len(names):
        return int(key)
    available = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
    raise AccuracyError(
        f"{where} names output {key!r}, which the model does not have",
        expected=f"an output name or index among: {available}",
        fix=f"use one of those names or indices in `{where}`",
    )


def degenerate(reference: Array) -> str:
    """Why a reference output cannot judge another cell's, or "" when it can.

    A floating output is degenerate when it holds NaN/Inf, when its largest |value| is
    below ``DEGENERATE_MAX_ABS`` (near zero: rounding noise, not a signal), or when it
    is constant: every row of its last axis (the whole output when that axis holds one
    value) spans at most ``DEGENERATE_SPREAD`` of its largest |value|. Cosine, KL,
    top-k and errors against such a reference carry no information (see
    ``perfguard.core.policy`` for the thresholds). Integer and bool outputs never are.
    """
    ref = np.asarray(reference)
    if not _is_floating(ref.dtype) or ref.ndim == 0 or ref.size == 0:
        return ""
    n, width = ref.shape[0], ref.shape[-1] if ref.ndim >= 2 else 1
    step = max(1, _CHUNK_ELEMENTS // max(1, ref.size // n))
    nonfinite, bad_samples, top = 0, [], 0.0
    low, high, rows_constant = math.inf, -math.inf, width > 1
    with np.errstate(all="ignore"):
        for start in range(0, n, step):
            x = ref[start : start + step].astype(np.float64)
            finite = np.isfinite(x)
            if not finite.all():
                nonfinite += int((~finite).sum())
                per_sample = (~finite).reshape(x.shape[0], -1).any(axis=1)
                bad_samples += [start + int(i) for i in np.flatnonzero(per_sample)]
                continue
            top = max(top, float(np.max(np.abs(x))))
            low, high = min(low, float(np.min(x))), max(high, float(np.max(x)))
            if rows_constant:
                rows = x.reshape(-1, width)
                spread = np.max(rows, axis=1) - np.min(rows, axis=1)
                scale = np.max(np.abs(rows), axis=1)
                rows_constant = bool(np.all(spread <= DEGENERATE_SPREAD * scale))
    if nonfinite:
        inputs = ", ".join(str(i) for i in bad_samples[:WORST_COUNT])
        return f"it holds {nonfinite} NaN/Inf values, in inputs {inputs}"
    if top < DEGENERATE_MAX_ABS:
        return f"near zero: its largest |value| is {top:.3g}, below {DEGENERATE_MAX_ABS:g}"
    if ref.size > 1 and high - low <= DEGENERATE_SPREAD * top:
        return f"constant: every value is {high:.6g}"
    if rows_constant:
        return "constant: each row of its last axis holds one value"
    return ""


def compare_outputs(
    current: Sequence[Array],
    reference: Sequence[Array],
    spec: AccuracySpec,
    *,
    reference_name: str,
    output_names: Sequence[str],
    baseline: bool = False,
) -> AccuracyReport:
    """Figures of the selected outputs and each applicable gate as a ``Check``. With
    ``baseline`` (golden outputs; ``reference_name`` = ``baseline <sha>``) only
    ``baseline_cosine_min`` and ``nonfinite_max`` are checked."""
    names = list(output_names) or [str(i) for i in range(len(current))]
    if len(current) != len(reference) or len(names) != len(current):
        raise AccuracyError(
            f"{len(current)} outputs, {len(reference)} on {reference_name}, {len(names)} names",
            expected="the same outputs on both sides, one name each",
        )
    selected = list(dict.fromkeys(_resolve(k, names, "accuracy.outputs") for k in spec.outputs))
    selected = selected or list(range(len(names)))
    # A key names an output by name or by index; a later entry wins.
    overrides = {_resolve(k, names, "accuracy.per_output"): g for k, g in spec.per_output}
    against = reference_name if baseline else f"reference {reference_name}"

    outputs: list[OutputMetrics] = []
    checks: list[Check] = []
    inconclusive: list[str] = []
    for index in selected:
        gates = overrides.get(index, spec.gates)
        why = degenerate(reference[index])
        # Only a gated KL refuses non-distributions: an embedding output next to
        # the probabilities should not stop the run (nor a degenerate reference).
        strict = not baseline and gates.kl_max is not None and not why
        args = (names[index], current[index], reference[index])
        metrics = output_metrics(
            *args, kl_on=spec.kl_on, temperature=spec.temperature, topk=gates.topk, kl_strict=strict
        )
        wanted: list[tuple[Gate, float | None]] = [(_BASELINE, gates.baseline_cosine_min)]
        if why:
            # Nothing measured against it means anything; NaN/Inf on this cell's own
            # side still fails.
            metrics = replace(metrics, degenerate=why)
            inconclusive.append(
                f"accuracy on output {names[index]} not checked: {against} is degenerate "
                f"({why}), so cosine, KL, top-k and errors against it carry no "
                f"information; fix: {DEGENERATE_FIX}"
            )
            wanted = []
        elif not baseline:
            wanted = [(gate, getattr(gates, gate[0])) for gate in _GATED]
            tolerant = gates.max_abs_err is not None or gates.mean_abs_err is not None
            if "mismatch_count" in metrics.values and not tolerant:
                wanted.append((_EXACT, 0.0))  # integers: exact unless a tolerance is set
        outputs.append(metrics)
        wanted.append((_NONFINITE, float(gates.nonfinite_max)))
        for gate, limit in wanted:
            if limit is None:
                continue
            if gate[1] in metrics.values:
                checks.append(_check(gate, limit, metrics, against, reference_name, gates.topk))
            elif index in overrides and limit != getattr(spec.gates, gate[0]):
                array = np.asarray(current[index])
                raise AccuracyError(
                    f"accuracy.per_output sets {gate[0]} for output {names[index]!r} "
                    f"({array.dtype}, shape {list(array.shape)}), where it does not apply",
                    expected="cosine/KL/top-k only on floating outputs with a last axis",
                    fix=f"remove {gate[0]} from that output's gates",
                )
    return AccuracyReport(
        reference_name, tuple(outputs), tuple(checks), None, inconclusive=tuple(inconclusive)
    )


def _call_task(
    fn: Callable[..., Any], outputs: Sequence[Array], labels: Any, function: str, role: str
) -> float:
    views = [np.asarray(raw).view() for raw in outputs]
    for view in views:  # read-only: an in-place edit would corrupt the cached reference
        view.flags.writeable = False
    try:
        result = fn(views, labels)
        return float(result)
    except Exception as exc:
        raise AccuracyError(
            f"task metric {function} raised {type(exc).__name__}: {exc} "
            f"(called on the {role} outputs)",
            expected="fn(outputs, labels) -> float; outputs: arrays stacked over the inputs",
            fix=f"fix {function}",
        ) from exc


def task_metric_check(
    fn: Callable[..., Any],
    current_outputs: Sequence[Array],
    reference_outputs: Sequence[Array] | None,
    labels: Any,
    spec: TaskMetricSpec,
    reference_name: str,
) -> tuple[TaskMetricFigures, Check]:
    """The user's metric on both sides; its drop (``reference - current``, or the
    reverse when lower is better) is checked against ``drop_max``. Without
    reference outputs the check passes with a NaN value."""
    n = int(np.shape(current_outputs[0])[0]) if len(current_outputs) else 0
    count = np.shape(labels)[0] if labels is not None and np.ndim(labels) else 0
    if labels is not None and count != n:
        raise AccuracyError(
            f"task metric {spec.function}: {count} labels for {n} accuracy samples",
            expected=f"{n} labels, one per sample on axis 0 of the outputs",
            fix="give one label per accuracy input (per batch row when batch > 1)",
        )
    current = _call_task(fn, current_outputs, labels, spec.function, "current")
    ref = None
    if reference_outputs is not None:
        ref = _call_task(fn, reference_outputs, labels, spec.function, f"{reference_name}'s")
        if not math.isfinite(ref):
            raise AccuracyError(
                f"task metric {spec.function} is {ref} on the reference {reference_name}",
                expected="a finite number on the reference",
            )
    drop = math.nan if ref is None else (ref - current if spec.higher_is_better else current - ref)
    passed = ref is None or (math.isfinite(drop) and drop <= spec.drop_max)
    what = f"task metric {spec.function}"
    if ref is None:
        message = f"{what} = {current:.6g} on the current outputs; no reference to compare"
    else:
        d, lim = _format_pair(drop, spec.drop_max)
        message = (
            f"{what} drop {d} {'<=' if passed else '>'} {lim} vs reference {reference_name} "
            f"(current {current:.6g}, reference {ref:.6g})"
        )
    figures = TaskMetricFigures(
        function=spec.function,
        current=_finite_or_none(current),
        reference=ref,
        drop=_finite_or_none(drop),
        drop_max=spec.drop_max,
        higher_is_better=spec.higher_is_better,
    )
    check = Check("task_drop", "", drop, spec.drop_max, passed, reference_name, (), message)
    return figures, check
