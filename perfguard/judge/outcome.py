"""What became of each cell, and of the run: the one answer every output gives.

A cell's *outcome* joins what pytest did with its item (``ScenarioResult.status`` and
``message``, its accuracy figures) and what the comparison decided (its
``ScenarioVerdict``, if any). The terminal summary, ``report.html``, ``summary.md`` and
the report index all read it, so none can say "no regression" over a run whose cells
failed, or leave an errored cell out.

Outcomes, worst first (``OUTCOMES``):

* ``regression``: a gated figure regressed (fails the item unless the gate is off);
* ``accuracy``: an accuracy check failed;
* ``error``: perfguard or the model raised something unexpected;
* ``failed``: the cell failed without figures to judge (did not measure, failed requests);
* ``inconclusive``: the comparison could not be trusted (verdict ``invalid``), or an
  accuracy check could not be made (its reference is degenerate:
  ``AccuracyFigures.inconclusive``), whether that failed the item or passed it with a
  warning;
* ``blind``: a gate that could not have seen a regression of its own limit
  (``MetricVerdict.blind``): it passed, but proves little;
* ``missing``, ``incomparable``, ``new``: nothing was gated;
* ``improvement``, ``skipped``, ``passed``.

A cell's outcome is its worst finding; its other findings among ``regression``,
``accuracy``, ``inconclusive`` and ``blind`` are kept beside it (``CellOutcome.also``),
so that a cell failing an accuracy check whose latency gate was inconclusive says both:
``accuracy failure + inconclusive``. Every output shows them: the outcome column, the
grouped lines, the tables of ``summary.md`` and the counts (``also 1 inconclusive``).

The run *passed* only when no cell failed its item (and pytest exited 0); it is clean
(✅) only when every cell ran, was judged and passed (``passed`` or ``improvement``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfguard.judge.verdict import MetricVerdict, ScenarioVerdict, VerdictKind
from perfguard.records.opprofile import OperatorProfile, diff_profiles
from perfguard.records.results import ScenarioResult, Status, WordEnum

#: How a regressed cell's failure message (its result's ``message``) starts the line
#: that says where the time went; the terminal summary repeats those lines.
PROFILE_LINE = "where the time went: "


def profile_line(base: OperatorProfile | None, current: OperatorProfile) -> str:
    """The line a regressed cell's failure message ends with: where the time went.

    ``where the time went: +0.41 ms per request, 62% of it in MatMul `/.../query```
    (the current profile diffed against the base's); without a base profile, where the
    time goes now: ``where the time went: base not profiled; 0.80 ms per request in
    operators, 35% of it in Conv `...```.
    """
    headline = diff_profiles(base, current).headline()
    if base is None:
        headline = f"base not profiled; {headline}"
    return f"{PROFILE_LINE}{headline}"


class Outcome(WordEnum):
    """What became of one cell; ``OUTCOMES`` ranks them worst first."""

    REGRESSION = "regression"
    ACCURACY = "accuracy"
    ERROR = "error"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    BLIND = "blind"
    MISSING = "missing"
    INCOMPARABLE = "incomparable"
    NEW = "new"
    IMPROVEMENT = "improvement"
    SKIPPED = "skipped"
    PASSED = "passed"

    @property
    def label(self) -> str:
        """How outputs name it: ``accuracy failure``; the rest by their value."""
        return "accuracy failure" if self is Outcome.ACCURACY else self.value

    def counted(self, n: int) -> str:
        """``2 regressions``, ``1 accuracy failure``, ``3 new``, ``4 passed``."""
        plural = self in _PLURAL and n != 1
        return f"{n} {self.label}{'s' if plural else ''}"

    @property
    def rank(self) -> int:
        return OUTCOMES.index(self)

    @property
    def clean(self) -> bool:
        """Ran, was judged and passed."""
        return self in (Outcome.PASSED, Outcome.IMPROVEMENT)


_PLURAL = frozenset({Outcome.REGRESSION, Outcome.ACCURACY, Outcome.ERROR, Outcome.IMPROVEMENT})

#: Worst first.
OUTCOMES: tuple[Outcome, ...] = tuple(Outcome)


def unique(sentences: Iterable[str]) -> list[str]:
    """``sentences`` without empty ones and without repeats, in first-seen order.

    A sentence another one already contains (a failure message that quotes the
    verdict's reason) is a repeat too.
    """
    seen: dict[str, None] = {}
    for sentence in sentences:
        text = sentence.strip()
        if text:
            seen.setdefault(text, None)
    kept = list(seen)
    return [s for s in kept if not any(s != other and s in other for other in kept)]


def blind_note(metric: MetricVerdict, verdict: ScenarioVerdict | None) -> str:
    """``limit +5%, but only >= +23% is detectable here: use --perfguard-ab``.

    The fix depends on the mode: an archived comparison is widened by run-to-run noise,
    which same-run A/B removes; an A/B comparison needs more pairs or a quieter host; a
    server measured one side at a time (``levels: alone``), longer runs or a quieter host.
    """
    seen = metric.detectable
    sign = "+" if metric.higher_is_worse else "-"
    limit = f"{metric.label} limit {sign}{metric.limit * 100:g}%"
    if seen is None or math.isinf(seen):
        what = "no change is detectable here"
    else:
        what = f"only >= {sign}{seen * 100:.0f}% is detectable here"
    mode = verdict.mode if verdict is not None else "archived"
    alone = verdict is not None and verdict.ab is not None and verdict.ab.levels == "alone"
    if alone:
        fix = "measure each side longer (`measure.seconds`) or use a quieter machine"
    elif mode == "ab":
        fix = "run more A/B pairs or use a quieter machine"
    else:
        fix = "use --perfguard-ab (same-run A/B) or a quieter machine"
    return f"{limit}, but {what}: {fix}"


#: The findings a cell can have beside its outcome (``CellOutcome.also``).
ALSO: tuple[Outcome, ...] = (Outcome.ACCURACY, Outcome.INCONCLUSIVE, Outcome.BLIND)


@dataclass(frozen=True)
class AlsoOutcome:
    """A finding of a cell beside its outcome, and the sentences that explain it."""

    outcome: Outcome
    reason: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", Outcome(self.outcome))

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlsoOutcome:
        return cls(Outcome(data["outcome"]), str(data.get("reason", "")))


@dataclass(frozen=True)
class CellOutcome:
    """One cell's outcome and the one line a reviewer should read about it.

    ``failed`` is whether pytest failed the cell's item (status failed or error);
    ``reason`` joins the sentences that explain the outcome, none twice; ``change`` is
    the P95 change decided on (None when not compared); ``detectable``/``limit`` are the
    P95 gate's, for a cell whose gate is ``blind``; ``also`` the cell's other findings,
    each less severe than ``outcome`` (an accuracy failure's inconclusive latency gate).
    """

    scenario_id: str
    outcome: Outcome
    failed: bool
    reason: str = ""
    status: str = ""
    verdict: str = ""
    change: float | None = None
    detectable: float | None = None
    limit: float | None = None
    mode: str = "archived"
    also: tuple[AlsoOutcome, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", Outcome(self.outcome))

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        """The outcome, then each finding beside it."""
        return (self.outcome, *(a.outcome for a in self.also))

    def label(self, *, loud: bool = False) -> str:
        """``accuracy failure + inconclusive``: every finding of the cell, worst first;
        with ``loud``, the outcome upper case when it failed the item (the terminal's)."""
        main = self.outcome.label
        return " + ".join([main.upper() if loud and self.failed else main,
                           *(a.outcome.label for a in self.also)])  # fmt: skip

    def findings(self) -> list[tuple[Outcome, str, bool]]:
        """(outcome, reason, is it the cell's outcome) for the outcome and each beside it."""
        return [
            (self.outcome, self.reason, True),
            *((a.outcome, a.reason, False) for a in self.also),
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario_id": self.scenario_id,
            "outcome": self.outcome.value,
            "failed": self.failed,
            "reason": self.reason,
            "status": self.status,
            "verdict": self.verdict,
            "change": self.change,
            "detectable": self.detectable,
            "limit": self.limit,
            "mode": self.mode,
            "also": [a.to_dict() for a in self.also],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellOutcome:
        kwargs = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        kwargs["also"] = tuple(AlsoOutcome.from_dict(a) for a in data.get("also", ()))
        return cls(**kwargs)


def _blind_metrics(verdict: ScenarioVerdict) -> list[MetricVerdict]:
    if verdict.verdict not in (VerdictKind.UNCHANGED, VerdictKind.IMPROVEMENT):
        return []
    return [m for m in verdict.metrics if m.verdict != VerdictKind.INVALID and m.blind]


def _measured(result: ScenarioResult) -> bool:
    """Figures to judge: latency measured and no request failed under load."""
    load_failed = result.load is not None and result.load.failed > 0
    return result.latency_ns is not None and not load_failed


def _kind_messages(verdict: ScenarioVerdict, kind: VerdictKind) -> list[str]:
    """The metric messages of ``kind``, then the scenario's own notes (each once)."""
    per_metric = {m.message for m in verdict.metrics}
    own = [m.message for m in verdict.metrics if m.verdict == kind]
    notes = [n for n in verdict.messages if n not in per_metric]
    return unique([*own, *notes]) or unique(verdict.messages)


def cell_outcome(
    result: ScenarioResult | None, verdict: ScenarioVerdict | None, *, gate: bool = True
) -> CellOutcome:
    """The outcome of one cell (``result`` None: in the baseline only).

    The cell ``failed`` when its item failed (status failed or error) or, with the gate
    on, when it regressed or failed an accuracy check: the plugin fails those items, and
    a report rendered later from stored files must say the same.
    """
    if result is None and verdict is None:
        raise ValueError("cell_outcome needs a result or a verdict")
    sid = result.id if result is not None else verdict.scenario_id  # type: ignore[union-attr]
    status = result.status if result is not None else None
    failed = status in (Status.FAILED, Status.ERROR)
    kind = verdict.verdict if verdict is not None else None
    message = result.message or "" if result is not None else ""
    p95 = verdict.metric("p95") if verdict is not None else None

    findings = _findings(result, verdict)
    outcome: Outcome
    reasons: list[str]
    if status is Status.ERROR:
        outcome, reasons = Outcome.ERROR, [message or "error"]
    elif Outcome.REGRESSION in findings:
        outcome, reasons = Outcome.REGRESSION, findings[Outcome.REGRESSION]
    elif Outcome.ACCURACY in findings:
        outcome, reasons = Outcome.ACCURACY, findings[Outcome.ACCURACY]
    elif status is Status.SKIPPED:
        outcome, reasons = Outcome.SKIPPED, [message or "skipped"]
    elif status is Status.FAILED and not (
        Outcome.INCONCLUSIVE in findings and result is not None and _measured(result)
    ):
        outcome, reasons = Outcome.FAILED, [message or "failed"]
    elif Outcome.INCONCLUSIVE in findings:
        # Under --perfguard-inconclusive=fail the item's message says it first.
        outcome, reasons = Outcome.INCONCLUSIVE, [message, *findings[Outcome.INCONCLUSIVE]]
    elif Outcome.BLIND in findings:
        outcome, reasons = Outcome.BLIND, findings[Outcome.BLIND]
    elif kind is VerdictKind.MISSING:
        outcome, reasons = Outcome.MISSING, list(verdict.messages)  # type: ignore[union-attr]
    elif kind is VerdictKind.INCOMPARABLE:
        assert verdict is not None
        outcome, reasons = Outcome.INCOMPARABLE, list(verdict.messages)
    elif kind is VerdictKind.NEW or verdict is None:
        outcome = Outcome.NEW
        reasons = list(verdict.messages) if verdict is not None else ["not compared"]
    elif kind is VerdictKind.IMPROVEMENT:
        assert verdict is not None
        outcome, reasons = Outcome.IMPROVEMENT, _kind_messages(verdict, kind)
    else:
        outcome, reasons = Outcome.PASSED, []
    # An errored, skipped or unmeasured cell has nothing else worth saying.
    also: tuple[AlsoOutcome, ...] = ()
    if outcome in (Outcome.REGRESSION, Outcome.ACCURACY, Outcome.INCONCLUSIVE):
        also = tuple(
            AlsoOutcome(o, "; ".join(unique(findings[o])))
            for o in ALSO
            if o in findings and o.rank > outcome.rank
        )
    if gate and outcome in (Outcome.REGRESSION, Outcome.ACCURACY):
        failed = True
    return CellOutcome(
        scenario_id=sid,
        outcome=outcome,
        failed=failed,
        reason="; ".join(unique(reasons)),
        status=status.value if status is not None else "absent",
        verdict=kind.value if kind is not None else "",
        change=p95.change if p95 is not None else None,
        detectable=p95.detectable if p95 is not None else None,
        limit=p95.limit if p95 is not None else None,
        mode=verdict.mode if verdict is not None else "archived",
        also=also,
    )


def _findings(
    result: ScenarioResult | None, verdict: ScenarioVerdict | None
) -> dict[Outcome, list[str]]:
    """What the comparison and the accuracy checks found, whatever the cell's status:
    each finding among ``regression``, ``accuracy``, ``inconclusive`` and ``blind`` with
    the sentences that explain it."""
    found: dict[Outcome, list[str]] = {}
    kind = verdict.verdict if verdict is not None else None
    accuracy = result.accuracy if result is not None else None
    if verdict is not None and kind is VerdictKind.REGRESSION:
        found[Outcome.REGRESSION] = _kind_messages(verdict, kind)
    if accuracy is not None and not accuracy.passed:
        found[Outcome.ACCURACY] = list(accuracy.failures) or ["accuracy check failed"]
    inconclusive: list[str] = []
    if verdict is not None and kind is VerdictKind.INVALID:
        # The scenario's messages say a run-level reason once (its metrics each repeat it).
        inconclusive += verdict.messages
    elif verdict is not None:  # a gate invalid beside another that regressed
        inconclusive += [m.message for m in verdict.metrics if m.verdict is VerdictKind.INVALID]
    if accuracy is not None:
        inconclusive += accuracy.inconclusive
    if inconclusive:
        found[Outcome.INCONCLUSIVE] = inconclusive
    blind = _blind_metrics(verdict) if verdict is not None else []
    if blind:
        assert verdict is not None
        found[Outcome.BLIND] = [blind_note(m, verdict) for m in blind]
    return found


def cell_outcomes(
    results: Iterable[ScenarioResult], verdicts: Iterable[ScenarioVerdict], *, gate: bool = True
) -> list[CellOutcome]:
    """One outcome per cell of ``results`` and per verdict-only id, worst first."""
    by_id = {r.id: r for r in results}
    judged = {v.scenario_id: v for v in verdicts}
    ids = list(dict.fromkeys([*by_id, *judged]))
    cells = [cell_outcome(by_id.get(sid), judged.get(sid), gate=gate) for sid in ids]
    return sorted(cells, key=lambda c: (c.outcome.rank, c.scenario_id))


@dataclass(frozen=True)
class RunOutcome:
    """The run's outcome: its cells worst first, counts per outcome and its headline.

    ``exit_status`` is pytest's (None when not known, e.g. a run stored by an older
    perfguard); a non-zero one fails the run even when no cell explains it (a suite
    that did not load, a plain test that failed).
    """

    cells: tuple[CellOutcome, ...] = ()
    exit_status: int | None = None
    gate: bool = True

    @property
    def counts(self) -> dict[Outcome, int]:
        """Cells per outcome, worst first, outcomes with no cell left out."""
        found = {o: 0 for o in OUTCOMES}
        for cell in self.cells:
            found[cell.outcome] += 1
        return {o: n for o, n in found.items() if n}

    @property
    def also_counts(self) -> dict[Outcome, int]:
        """Cells per finding beside their outcome (``CellOutcome.also``), worst first."""
        found = {o: 0 for o in OUTCOMES}
        for cell in self.cells:
            for also in cell.also:
                found[also.outcome] += 1
        return {o: n for o, n in found.items() if n}

    @property
    def failed(self) -> bool:
        """True when pytest failed: a cell's item failed, or the exit status says so."""
        return any(c.failed for c in self.cells) or bool(self.exit_status)

    @property
    def passed(self) -> bool:
        """True only when every cell ran, was judged and passed (and pytest exited 0)."""
        return not self.failed and bool(self.cells) and all(c.outcome.clean for c in self.cells)

    @property
    def worst(self) -> Outcome | None:
        return self.cells[0].outcome if self.cells else None

    @property
    def state(self) -> str:
        """``failed``, ``warnings`` or ``passed``: the run in one word (the index's column)."""
        return "failed" if self.failed else "passed" if self.passed else "warnings"

    @property
    def symbol(self) -> str:
        return {"failed": "❌", "warnings": "⚠️", "passed": "✅"}[self.state]

    def headline(self) -> str:
        """``❌ regression``, ``⚠️ passed with 2 inconclusive, 4 new``, ``✅ passed``.

        A failed run is named by its worst failing cell (or pytest's exit status when
        no cell failed); a passing one lists what keeps it from clean.
        """
        if self.failed:
            failing = [c.outcome for c in self.cells if c.failed]
            if failing:
                word = min(failing, key=lambda o: o.rank).label
            else:
                word = f"failed (pytest exit status {self.exit_status})"
            gate = "" if self.gate else " (gate off)"
            return f"❌ {word}{gate}"
        if self.passed:
            return "✅ passed"
        if not self.cells:
            return "⚠️ no cells"
        rest = ", ".join(o.counted(n) for o, n in self.counts.items() if not o.clean)
        return f"⚠️ passed with {rest}"

    def counts_line(self) -> str:
        """The counts the headline does not already give, the total, and the findings
        beside the cells' outcomes.

        ``1 regression, 1 error, 7 passed (9 cells)`` under ``❌ regression``;
        ``6 passed (10 cells)`` under ``⚠️ passed with 4 new``;
        ``1 accuracy failure, 3 passed (4 cells; also 1 inconclusive)`` when the cell
        that failed accuracy had an inconclusive latency gate too.
        """
        total = len(self.cells)
        shown = {o: n for o, n in self.counts.items() if self.failed or o.clean}
        parts = ", ".join(o.counted(n) for o, n in shown.items())
        cells = f"{total} cell{'s' if total != 1 else ''}"
        also = ", ".join(o.counted(n) for o, n in self.also_counts.items())
        if also:
            cells += f"; also {also}"
        return f"{parts} ({cells})" if parts else cells

    def summary(self) -> str:
        """The headline and the counts: ``❌ regression: 1 regression, 7 passed (8 cells)``,
        ``⚠️ passed with 1 new (1 cell)``."""
        counts = self.counts_line()
        sep = ": " if counts.endswith(")") else " ("
        return f"{self.headline()}{sep}{counts}" + ("" if sep == ": " else ")")

    def of(self, outcome: Outcome) -> list[CellOutcome]:
        return [c for c in self.cells if c.outcome is outcome]

    def showing(self, outcome: Outcome) -> list[tuple[CellOutcome, str]]:
        """(cell, reason) per cell with the finding ``outcome``: the cells whose outcome
        it is, then those with it beside their outcome (the finding's own reason)."""
        mains = [(c, c.reason) for c in self.of(outcome)]
        beside = [(c, a.reason) for c in self.cells for a in c.also if a.outcome is outcome]
        return [*mains, *beside]

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "headline": self.headline(),
            "exit_status": self.exit_status,
            "gate": self.gate,
            "counts": {o.value: n for o, n in self.counts.items()},
            "cells": [c.to_dict() for c in self.cells],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunOutcome:
        status = data.get("exit_status")
        return cls(
            cells=tuple(CellOutcome.from_dict(c) for c in data.get("cells", ())),
            exit_status=int(status) if status is not None else None,
            gate=bool(data.get("gate", True)),
        )


def run_outcome(
    results: Iterable[ScenarioResult],
    verdicts: Iterable[ScenarioVerdict],
    *,
    exit_status: int | None = None,
    gate: bool = True,
) -> RunOutcome:
    """The outcome of a run from its results and verdicts (see the module docstring)."""
    return RunOutcome(tuple(cell_outcomes(results, verdicts, gate=gate)), exit_status, gate)


def grouped(cells: Sequence[CellOutcome], limit: int = 5) -> list[tuple[Outcome, str, str]]:
    """(outcome, who, reason) per group of cells sharing a finding and a reason: each
    cell's outcome, and each finding beside it (``CellOutcome.also``), worst first.

    ``who`` is ``new: a`` for one cell, ``new (10): a, b, c, d, e and 5 more`` for a
    group, so ten ``new`` cells with the same reason read as one line.
    """
    groups: dict[tuple[Outcome, str], list[str]] = {}
    found = [(o, reason, c.scenario_id) for c in cells for o, reason, _ in c.findings()]
    for outcome, reason, sid in sorted(found, key=lambda f: f[0].rank):
        groups.setdefault((outcome, reason), []).append(sid)
    out = []
    for (outcome, reason), ids in groups.items():
        if len(ids) == 1:
            who = f"{outcome.label}: {ids[0]}"
        else:
            more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
            who = f"{outcome.label} ({len(ids)}): " + ", ".join(ids[:limit]) + more
        out.append((outcome, who, reason))
    return out


__all__ = [
    "ALSO",
    "OUTCOMES",
    "AlsoOutcome",
    "CellOutcome",
    "Outcome",
    "RunOutcome",
    "blind_note",
    "cell_outcome",
    "cell_outcomes",
    "grouped",
    "run_outcome",
    "unique",
]
