"""Run a cell's accuracy checks: its outputs on the accuracy inputs, against a reference.

The reference is another cell of the same scenario (opened on demand and
cached for the session, so every cell that names it is compared with the same
outputs) and/or the golden outputs archived with the baseline commit. The
metrics themselves live in ``perfguard.accuracy.metrics``; this module only gathers
outputs and hands them over.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.accuracy.generated import (
    NEXT_TOKEN_OUTPUT,
    PROMPT_OUTPUT,
    Generated,
    greedy_tokens,
    perplexity,
    perplexity_figures,
    prompt_logits,
    teacher_forced,
    text_set,
    token_agreement,
)
from perfguard.accuracy.metrics import compare_outputs, task_metric_check
from perfguard.backends import Session
from perfguard.backends.base import GenerativeSession
from perfguard.core.blame import blame
from perfguard.core.errors import AccuracyError, InputError, PerfguardError
from perfguard.core.scenario import AccuracySpec, AccuracyText, Scenario
from perfguard.models.factory import import_function
from perfguard.models.inputs import make_accuracy_inputs
from perfguard.models.prompts import make_prompts
from perfguard.records.accuracyfigures import (
    AccuracyFigures,
    AccuracyReport,
    DriftRow,
    TaskMetricFigures,
)
from perfguard.records.arrays import decode_outputs, encode_outputs
from perfguard.records.results import ScenarioResult

Feeds = dict[str, np.ndarray]


def collect_outputs(
    session: Session, feeds_list: Sequence[Mapping[str, np.ndarray]]
) -> list[np.ndarray]:
    """Each output stacked over all accuracy inputs (axis 0 = samples)."""
    per_output: list[list[np.ndarray]] = []
    for feeds in feeds_list:
        outputs = session.to_numpy(session.run(session.prepare(feeds)))
        if not per_output:
            per_output = [[] for _ in outputs]
        for parts, array in zip(per_output, outputs, strict=True):
            parts.append(np.asarray(array))
    return [np.stack(parts) for parts in per_output]


def _model_outputs(
    scenario: Scenario, session: Session, feeds_list: Sequence[Mapping[str, np.ndarray]]
) -> list[np.ndarray]:
    """``collect_outputs``; an exception from the model is its located ``ModelError``."""
    try:
        return collect_outputs(session, feeds_list)
    except PerfguardError:
        raise
    except Exception as exc:
        raise blame(
            exc,
            doing=f"computing its outputs on the accuracy inputs ({cell_label(scenario)})",
            culprit=f"model {scenario.model.name!r}",
            expected="the model to accept the accuracy inputs",
            fix="check `accuracy.inputs` (files or function) against the inputs declared "
            f"under models.{scenario.model.name}.inputs and the model's signature",
            location=scenario.location,
        ) from exc


def output_names(scenario: Scenario, count: int) -> list[str]:
    """Declared output names, then indices for any output the suite did not name."""
    named = list(scenario.model.output_names[:count])
    return named + [str(i) for i in range(len(named), count)]


def cell_label(scenario: Scenario) -> str:
    return scenario.cell_id or scenario.name


def _cell_value(scenario: Scenario, key: str) -> str:
    """A cell's value for a matrix axis or plain key, as the suite spells it."""
    if key == "quantization":
        return scenario.quantization.name
    return str(getattr(scenario, key))


def find_reference(scenario: Scenario, candidates: Sequence[Scenario]) -> Scenario | None:
    """The reference cell named by ``accuracy.reference``; None when it is this cell."""
    spec = scenario.accuracy
    if spec is None or not spec.reference:
        return None
    wanted = dict(spec.reference)
    if all(_cell_value(scenario, k) == v for k, v in wanted.items()):
        return None
    own = {k: v for k, v in scenario.matrix_values if k not in wanted}
    for other in candidates:
        if (
            other.name == scenario.name
            and all(_cell_value(other, k) == v for k, v in wanted.items())
            and all(dict(other.matrix_values).get(k) == v for k, v in own.items())
        ):
            return other
    cells = ", ".join(c.cell_id for c in candidates if c.name == scenario.name) or "none"
    raise AccuracyError(
        "accuracy reference "
        + " ".join(f"{k}={v}" for k, v in sorted(wanted.items()))
        + f" is not a cell of scenario {scenario.name!r}",
        expected=f"one of its cells: {cells}",
        fix="point `accuracy.reference` at a cell of the scenario's matrix",
        location=scenario.location,
    )


def _gates_for(scenario: Scenario, output: str) -> Any:
    spec = scenario.accuracy
    assert spec is not None
    return dict(spec.per_output).get(output, spec.gates)


def figure_drift(
    scenario: Scenario,
    report: AccuracyReport,
    baseline: ScenarioResult | None,
    baseline_commit: str | None,
) -> tuple[list[DriftRow], list[str]]:
    """``cosine_mean`` vs the reference now and at the baseline commit, per output.

    Gated by ``cosine_drift_max``: a change that makes the cell drift further from
    its reference than it was at the baseline fails, even above ``cosine_min``.
    """
    before = baseline.accuracy if baseline is not None else None
    if before is None or before.report is None or before.reference != report.reference:
        return [], []
    rows: list[DriftRow] = []
    failures: list[str] = []
    where = f"baseline {baseline_commit[:7]}" if baseline_commit else "the baseline"
    for output in report.outputs:
        if output.degenerate:  # its cosine against the reference means nothing
            continue
        old = before.report.output(output.name)
        was = old.values.get("cosine_mean") if old is not None else None
        now = output.values.get("cosine_mean")
        if was is None or now is None or not (math.isfinite(was) and math.isfinite(now)):
            continue
        limit = _gates_for(scenario, output.name).cosine_drift_max
        drop = float(was) - float(now)
        passed = limit is None or drop <= limit
        rows.append(
            DriftRow(
                output=output.name, baseline=was, current=now, drop=drop, limit=limit, passed=passed
            )
        )
        if not passed:
            failures.append(
                f"cosine similarity mean on output {output.name} vs reference "
                f"{report.reference} dropped {drop:.4g} since {where} "
                f"({was:.6g} -> {now:.6g}); limit cosine_drift_max {limit:g}"
            )
    return rows, failures


def _reference_failed(reference: Scenario, exc: PerfguardError) -> AccuracyError:
    return AccuracyError(
        f"the accuracy reference cell {cell_label(reference)!r} could not run: {exc}",
        fix="fix the reference cell, or point `accuracy.reference` elsewhere",
        location=reference.location,
    )


@dataclass
class AccuracyChecker:
    """Per-session caches: accuracy inputs per model, reference outputs per cell."""

    open_session: Callable[[Scenario, Sequence[Feeds] | None], Any]
    scenarios_of: Callable[[Path], Sequence[Scenario]]
    #: Opens a generative cell (``perfguard.measure.generation.open_generator``).
    open_generator: Callable[[Scenario], Any] | None = None
    _inputs: dict[tuple[Any, ...], tuple[list[Feeds], np.ndarray | None]] = field(
        default_factory=dict
    )
    _references: dict[str, list[np.ndarray]] = field(default_factory=dict)
    _generated: dict[tuple[str, AccuracyText | None], Generated] = field(default_factory=dict)

    def inputs_for(self, scenario: Scenario) -> tuple[list[Feeds], np.ndarray | None]:
        spec = scenario.accuracy
        if spec is None:
            return [], None
        key = (scenario.model, spec.inputs)
        if key not in self._inputs:
            self._inputs[key] = make_accuracy_inputs(scenario.model, spec.inputs, scenario.location)
        return self._inputs[key]

    def calibration_for(self, scenario: Scenario) -> list[Feeds] | None:
        """Static int8 (ONNX Runtime) and TensorRT int8 calibrate on the accuracy inputs;
        nothing else needs them early."""
        static_ort = scenario.backend == "onnxruntime" and scenario.quantization.mode == "static"
        wants = (
            (static_ort or scenario.backend == "tensorrt")
            and scenario.precision == "int8"
            and scenario.accuracy is not None
        )
        return self.inputs_for(scenario)[0] if wants else None

    def reference_outputs(self, reference: Scenario) -> list[np.ndarray]:
        sid = reference.scenario_id()
        if sid not in self._references:
            feeds, _labels = self.inputs_for(reference)
            try:
                with self.open_session(reference, self.calibration_for(reference)) as opened:
                    session = opened[0]
                    self._references[sid] = _model_outputs(reference, session, feeds)
            except PerfguardError as exc:
                raise _reference_failed(reference, exc) from exc
        return self._references[sid]

    def reference_generation(self, reference: Scenario, text: AccuracyText | None) -> Generated:
        """A generative reference cell's tokens, teacher-forced logits and perplexity,
        made once per session (and text set)."""
        key = (reference.scenario_id(), text)
        if key not in self._generated:
            assert self.open_generator is not None and reference.generate is not None
            try:
                with self.open_generator(reference) as (session, _prepared, _batch):
                    prompts = make_prompts(reference, session.vocab_size)
                    tokens = greedy_tokens(session, prompts, reference.generate.new_tokens)
                    logits = teacher_forced(session, prompts, tokens)
                    texts = text_set(reference, text, session.vocab_size) if text else []
                    ppl = perplexity(session, texts) if texts else None
            except PerfguardError as exc:
                raise _reference_failed(reference, exc) from exc
            self._generated[key] = Generated(tokens, logits, ppl)
        return self._generated[key]

    def check(
        self,
        scenario: Scenario,
        session: Any,
        baseline: ScenarioResult | None,
        baseline_commit: str | None,
    ) -> tuple[AccuracyFigures, dict[str, Any] | None]:
        """The cell's accuracy figures and the golden outputs to archive; ``session`` is
        the cell's open session (its generative session for a ``generate:`` cell)."""
        spec = scenario.accuracy
        assert spec is not None
        if scenario.generate is not None:
            return self._check_generative(scenario, session, baseline, baseline_commit)
        feeds, labels = self.inputs_for(scenario)
        current = _model_outputs(scenario, session, feeds)
        names = output_names(scenario, len(current))
        accuracy = AccuracyFigures(n=len(feeds))
        failures: list[str] = []

        reference = find_reference(scenario, self.scenarios_of(scenario.suite))
        ref_outputs: list[np.ndarray] | None = None
        if reference is not None:
            ref_outputs = self.reference_outputs(reference)
            ref_name = cell_label(reference)
            if len(ref_outputs) != len(current):
                raise AccuracyError(
                    f"reference cell {ref_name!r} returns {len(ref_outputs)} outputs, "
                    f"this cell {len(current)}",
                    expected="the same outputs on both cells",
                    location=scenario.location,
                )
            report = compare_outputs(
                current, ref_outputs, spec, reference_name=ref_name, output_names=names
            )
            failures.extend(check.message for check in report.failures)
            drift, drift_failures = figure_drift(scenario, report, baseline, baseline_commit)
            accuracy = replace(accuracy, reference=ref_name, report=report, drift=tuple(drift))
            failures.extend(drift_failures)

        if spec.task is not None:
            task, failure = self._task_metric(scenario, current, ref_outputs, labels)
            accuracy = replace(accuracy, task_metric=task)
            if failure:
                failures.append(failure)

        golden = baseline.golden_outputs if baseline is not None else None
        return self._finish(scenario, accuracy, failures, names, current, golden, baseline_commit)

    def _finish(
        self,
        scenario: Scenario,
        accuracy: AccuracyFigures,
        failures: list[str],
        names: list[str],
        outputs: list[np.ndarray] | None,
        golden: Mapping[str, Any] | None,
        baseline_commit: str | None,
    ) -> tuple[AccuracyFigures, dict[str, Any] | None]:
        """``accuracy`` checked against the baseline's ``golden`` outputs (when asked and
        archived), its failures and inconclusive checks set, and ``outputs`` (named
        ``names``) to archive as the next baseline's golden outputs."""
        spec = scenario.accuracy
        assert spec is not None
        if spec.against_baseline and golden and outputs is not None:
            against, golden_failures = self._against_golden(
                scenario, outputs, names, golden, baseline_commit
            )
            if isinstance(against, str):
                accuracy = replace(accuracy, baseline_skipped=against)
            else:
                accuracy = replace(accuracy, baseline=against)
            failures.extend(golden_failures)
        # Checks not made because their reference is degenerate: inconclusive, not passed.
        reports = (accuracy.report, accuracy.baseline)
        inconclusive = [m for r in reports if r is not None for m in r.inconclusive]
        accuracy = replace(accuracy, failures=tuple(failures), inconclusive=tuple(inconclusive))
        archived = (
            encode_outputs(names, outputs, spec.golden)
            if spec.golden and outputs is not None
            else None
        )
        return accuracy, archived

    def _check_generative(
        self,
        scenario: Scenario,
        session: GenerativeSession,
        baseline: ScenarioResult | None,
        baseline_commit: str | None,
    ) -> tuple[AccuracyFigures, dict[str, Any] | None]:
        """``check`` of a generative cell (``perfguard.accuracy.generated``)."""
        spec, gen = scenario.accuracy, scenario.generate
        assert spec is not None and gen is not None
        prompts = make_prompts(scenario, session.vocab_size)
        own = greedy_tokens(session, prompts, gen.new_tokens)
        texts = text_set(scenario, spec.text, session.vocab_size) if spec.text else []
        accuracy = AccuracyFigures(n=int(own.shape[0]))
        failures: list[str] = []
        reference = find_reference(scenario, self.scenarios_of(scenario.suite))
        ref_ppl: float | None = None
        if reference is not None:
            ref = self.reference_generation(reference, spec.text)
            ref_name = cell_label(reference)
            if ref.tokens.shape != own.shape:
                raise AccuracyError(
                    f"reference cell {ref_name!r} generated {ref.tokens.shape} tokens "
                    f"(rows x new tokens), this cell {own.shape}",
                    expected="the same prompts and new_tokens on both cells",
                    location=scenario.location,
                )
            tokens = token_agreement(own, ref.tokens, spec.gates.token_match_min)
            current = teacher_forced(session, prompts, ref.tokens)
            report = compare_outputs(
                [current],
                [ref.logits],
                spec,
                reference_name=ref_name,
                output_names=[NEXT_TOKEN_OUTPUT],
            )
            failures.extend(check.message for check in report.failures)
            drift, drift_failures = figure_drift(scenario, report, baseline, baseline_commit)
            failures.extend(drift_failures)
            if not tokens.passed:
                parted = tokens.rows - tokens.identical
                failures.append(
                    f"greedy tokens match {tokens.match:.4g} < {tokens.limit:g} vs reference "
                    f"{ref_name}: {parted} of {tokens.rows} rows part from it, the earliest "
                    f"at token {tokens.earliest}"
                )
            accuracy = replace(
                accuracy, reference=ref_name, report=report, drift=tuple(drift), tokens=tokens
            )
            ref_ppl = ref.perplexity
        if texts:
            figures = perplexity_figures(
                texts, perplexity(session, texts), ref_ppl, spec.gates.perplexity_rise_max
            )
            accuracy = replace(accuracy, perplexity=figures)
            if not figures.passed:
                failures.append(
                    f"perplexity rose {figures.rise:+.2%} ({figures.reference:.6g} -> "
                    f"{figures.current:.6g}) on {figures.texts} texts vs reference "
                    f"{accuracy.reference}; limit perplexity_rise_max {figures.limit:g}"
                )
        golden = baseline.golden_outputs if baseline is not None else None
        # As many rows as a baseline archives (the default's, when this cell archives none).
        wanted = spec.golden or (AccuracySpec.golden if spec.against_baseline and golden else 0)
        own_prompts = prompt_logits(session, prompts, wanted) if wanted else None
        outputs = [own_prompts] if own_prompts is not None else None
        return self._finish(
            scenario, accuracy, failures, [PROMPT_OUTPUT], outputs, golden, baseline_commit
        )

    def _task_metric(
        self,
        scenario: Scenario,
        current: list[np.ndarray],
        reference: list[np.ndarray] | None,
        labels: np.ndarray | None,
    ) -> tuple[TaskMetricFigures, str | None]:
        spec = scenario.accuracy
        assert spec is not None and spec.task is not None
        if labels is None:
            raise InputError(
                f"task metric {spec.task.function} needs labels, but the accuracy inputs have none",
                expected="`accuracy.labels: file.npy`, or an inputs function returning "
                "(inputs, labels)",
                location=scenario.location,
            )
        fn = import_function(spec.task.function, scenario.model.base_dir, scenario.location)
        figures, check = task_metric_check(
            fn, current, reference, labels, spec.task, self._ref_name(scenario)
        )
        return figures, (None if check.passed else check.message)

    def _ref_name(self, scenario: Scenario) -> str:
        reference = find_reference(scenario, self.scenarios_of(scenario.suite))
        return cell_label(reference) if reference is not None else "none"

    def _against_golden(
        self,
        scenario: Scenario,
        current: list[np.ndarray],
        names: list[str],
        golden: Mapping[str, Any],
        baseline_commit: str | None,
    ) -> tuple[AccuracyReport | str, list[str]]:
        """The check against the golden outputs, or why there is none."""
        spec = scenario.accuracy
        assert spec is not None
        stored = decode_outputs(golden, source=f"baseline {baseline_commit or ''}".strip())
        pairs = [(n, c) for n, c in zip(names, current, strict=True) if n in stored]
        if not pairs:
            return "the baseline archived none of these outputs", []
        count = min(min(len(stored[n]) for n, _ in pairs), min(len(c) for _, c in pairs))
        ref_name = f"baseline {baseline_commit[:7]}" if baseline_commit else "baseline"
        report = compare_outputs(
            [c[:count] for _, c in pairs],
            [stored[n][:count] for n, _ in pairs],
            spec,
            reference_name=ref_name,
            output_names=[n for n, _ in pairs],
            baseline=True,
        )
        return report, [check.message for check in report.failures]
