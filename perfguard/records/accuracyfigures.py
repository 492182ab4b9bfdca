"""A cell's accuracy against its reference, as typed records (``ScenarioResult.accuracy``).

:mod:`perfguard.accuracy.metrics` computes the figures (its docstring defines each
one) and :mod:`perfguard.accuracy.checker` gathers them per cell; the plugin and the
reports only read them. ``to_dict`` gives exactly the JSON of ``results.json``:
results files are strict JSON, so a NaN or infinite figure is written as null (and
reads back as None).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = [
    "DEGENERATE_FIX",
    "AccuracyFigures",
    "AccuracyReport",
    "Check",
    "DriftRow",
    "OutputMetrics",
    "PerplexityFigures",
    "TaskMetricFigures",
    "TokenAgreement",
]


#: What a message about a degenerate reference (perfguard.accuracy.metrics.degenerate)
#: tells its reader to do.
DEGENERATE_FIX = (
    "seed or initialise the model so its outputs carry information (load trained "
    "weights, or initialise them with a fixed seed: random-weight models can give "
    "logits of ~1e-9, which int8 rounds to zero), or leave that output out with "
    "`accuracy.outputs`"
)


def _plain(data: Any) -> Any:
    """JSON-ready: tuples as lists, NaN/Inf as None (results.json is strict JSON)."""
    if isinstance(data, dict):
        return {key: _plain(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_plain(value) for value in data]
    return None if isinstance(data, float) and not math.isfinite(data) else data


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


@dataclass(frozen=True)
class OutputMetrics:
    """Figures of one output; ``worst_inputs`` by cosine (floats) or mismatches (integers)."""

    name: str
    values: Mapping[str, float | None]  # NaN in a fresh report, None once read from a file
    worst_inputs: tuple[int, ...]
    # Worst samples per ranking: cosine, kl, abs_err, rel_err, topk, nonfinite, mismatch.
    worst_by_metric: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # Why the reference's side of this output cannot judge anything ("" when it can):
    # its figures are kept, its checks (but NaN/Inf on the current side) are not made.
    degenerate: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "values": _plain(dict(self.values)),
            "worst_inputs": list(self.worst_inputs),
            "worst_by_metric": {k: list(v) for k, v in self.worst_by_metric.items()},
        }
        if self.degenerate:
            out["degenerate"] = self.degenerate
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutputMetrics:
        return cls(
            name=data["name"],
            values=dict(data["values"]),
            worst_inputs=_ints(data["worst_inputs"]),
            worst_by_metric={k: _ints(v) for k, v in data.get("worst_by_metric", {}).items()},
            degenerate=str(data.get("degenerate") or ""),
        )


@dataclass(frozen=True)
class Check:
    """One gate on one output (``output`` is "" for the task metric)."""

    metric: str
    output: str
    value: float | None
    limit: float
    passed: bool
    reference: str
    worst_inputs: tuple[int, ...]
    message: str

    def to_dict(self) -> dict[str, Any]:
        return dict(_plain(asdict(self)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        kwargs = {f.name: data[f.name] for f in fields(cls)}
        kwargs["worst_inputs"] = _ints(kwargs["worst_inputs"])
        return cls(**kwargs)


@dataclass(frozen=True)
class TaskMetricFigures:
    """The user's task metric on both sides and its drop (``reference - current``, or the
    reverse when lower is better), checked against ``drop_max``; ``reference`` and
    ``drop`` are None without a reference cell."""

    function: str
    current: float | None
    reference: float | None
    drop: float | None
    drop_max: float
    higher_is_better: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(_plain(asdict(self)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskMetricFigures:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class TokenAgreement:
    """A generative cell's greedy tokens against its reference's, on the same prompts.

    ``tokens`` were compared (requests x batch rows x new tokens); ``match`` is the share
    equal position by position; ``first_divergence`` holds, per row, the first position
    where the two part (None: equal throughout), and ``identical`` counts the rows equal
    throughout. ``limit`` is ``token_match_min`` (None: not gated)."""

    tokens: int
    match: float
    identical: int
    first_divergence: tuple[int | None, ...]
    limit: float | None
    passed: bool

    @property
    def rows(self) -> int:
        return len(self.first_divergence)

    @property
    def earliest(self) -> int | None:
        """The earliest position where any row parts from the reference's."""
        parted = [p for p in self.first_divergence if p is not None]
        return min(parted) if parted else None

    def to_dict(self) -> dict[str, Any]:
        out = dict(_plain(asdict(self)))
        out["first_divergence"] = list(self.first_divergence)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenAgreement:
        kwargs = {f.name: data[f.name] for f in fields(cls)}
        kwargs["first_divergence"] = tuple(
            None if p is None else int(p) for p in kwargs["first_divergence"]
        )
        return cls(**kwargs)


@dataclass(frozen=True)
class PerplexityFigures:
    """Perplexity on the cell's text set (``accuracy.text``): ``exp`` of the mean negative
    log-likelihood of each next token, over ``texts`` texts of ``tokens`` ids each
    (``tokens - 1`` predictions per text). ``reference`` and ``rise`` (``current /
    reference - 1``) are None without a reference cell; ``limit`` is
    ``perplexity_rise_max``."""

    texts: int
    tokens: int
    current: float
    reference: float | None
    rise: float | None
    limit: float | None
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(_plain(asdict(self)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PerplexityFigures:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class AccuracyReport:
    """Every output's figures and every gate's check against one reference;
    ``inconclusive``: one message per output whose reference is degenerate (its checks
    not made)."""

    reference: str
    outputs: tuple[OutputMetrics, ...]
    checks: tuple[Check, ...]
    task_metric: TaskMetricFigures | None = None
    inconclusive: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed)

    def output(self, name: str) -> OutputMetrics | None:
        return next((o for o in self.outputs if o.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "passed": self.passed,
            "reference": self.reference,
            "outputs": [o.to_dict() for o in self.outputs],
            "checks": [c.to_dict() for c in self.checks],
            "task_metric": self.task_metric.to_dict() if self.task_metric else None,
        }
        if self.inconclusive:
            out["inconclusive"] = list(self.inconclusive)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AccuracyReport:
        task = data.get("task_metric")
        return cls(
            reference=data["reference"],
            outputs=tuple(OutputMetrics.from_dict(o) for o in data.get("outputs", ())),
            checks=tuple(Check.from_dict(c) for c in data.get("checks", ())),
            task_metric=TaskMetricFigures.from_dict(task) if task else None,
            inconclusive=tuple(str(m) for m in data.get("inconclusive") or ()),
        )


@dataclass(frozen=True)
class DriftRow:
    """``cosine_mean`` of one output vs the reference, now and at the baseline commit."""

    output: str
    baseline: float
    current: float
    drop: float
    limit: float | None
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(_plain(asdict(self)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DriftRow:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class AccuracyFigures:
    """A cell's accuracy: against its reference cell (``report``, with the drift of its
    ``cosine_mean`` since the baseline commit), its task metric, and against the golden
    outputs archived with the baseline (``baseline``; ``baseline_skipped`` says why not).
    ``n`` is the number of accuracy inputs; ``failures`` are the one-line messages of
    every failed gate; ``inconclusive`` those of every check not made because its
    reference is degenerate (near zero, constant or NaN/Inf): with no failure, the
    cell's accuracy is inconclusive, neither passed nor failed. A generative cell adds
    its greedy ``tokens`` against the reference's and its text set's ``perplexity``
    (its ``report`` compares the next-token logits, teacher-forced)."""

    n: int
    reference: str | None = None
    report: AccuracyReport | None = None
    drift: tuple[DriftRow, ...] = ()
    task_metric: TaskMetricFigures | None = None
    baseline: AccuracyReport | None = None
    baseline_skipped: str | None = None
    failures: tuple[str, ...] = ()
    inconclusive: tuple[str, ...] = ()
    tokens: TokenAgreement | None = None
    perplexity: PerplexityFigures | None = None

    @property
    def passed(self) -> bool:
        """No check failed (checks not made, ``inconclusive``, do not fail it)."""
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "n": self.n,
            "reference": self.reference,
            "report": self.report.to_dict() if self.report is not None else None,
        }
        if self.drift:
            out["drift"] = [row.to_dict() for row in self.drift]
        if self.task_metric is not None:
            out["task_metric"] = self.task_metric.to_dict()
        if self.tokens is not None:
            out["tokens"] = self.tokens.to_dict()
        if self.perplexity is not None:
            out["perplexity"] = self.perplexity.to_dict()
        if self.baseline is not None:
            out["baseline"] = self.baseline.to_dict()
        elif self.baseline_skipped is not None:
            out["baseline"] = {"skipped": self.baseline_skipped}
        out["failures"] = list(self.failures)
        if self.inconclusive:
            out["inconclusive"] = list(self.inconclusive)
        out["passed"] = self.passed
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AccuracyFigures:
        report, task, base = data.get("report"), data.get("task_metric"), data.get("baseline")
        tokens, ppl = data.get("tokens"), data.get("perplexity")
        skipped = base.get("skipped") if isinstance(base, Mapping) else None
        return cls(
            n=data["n"],
            reference=data.get("reference"),
            report=AccuracyReport.from_dict(report) if report else None,
            drift=tuple(DriftRow.from_dict(row) for row in data.get("drift") or ()),
            task_metric=TaskMetricFigures.from_dict(task) if task else None,
            baseline=AccuracyReport.from_dict(base) if base and skipped is None else None,
            baseline_skipped=skipped,
            failures=tuple(str(f) for f in data.get("failures") or ()),
            inconclusive=tuple(str(m) for m in data.get("inconclusive") or ()),
            tokens=TokenAgreement.from_dict(tokens) if tokens else None,
            perplexity=PerplexityFigures.from_dict(ppl) if ppl else None,
        )
