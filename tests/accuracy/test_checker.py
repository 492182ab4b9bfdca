"""The accuracy glue: reference lookup, output stacking and figure drift."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.accuracy.checker import collect_outputs, figure_drift, find_reference
from perfguard.core.errors import AccuracyError, Location
from perfguard.core.scenario import AccuracyGates, AccuracySpec, ModelSpec, Scenario
from perfguard.records.accuracyfigures import AccuracyFigures, AccuracyReport, OutputMetrics
from perfguard.records.results import ScenarioResult

LOC = Location(Path("suites/s.yaml"), 3)
MODEL = ModelSpec(name="m", location=LOC, base_dir=Path())


def cell(backend: str, precision: str, spec: AccuracySpec | None = None) -> Scenario:
    return Scenario(
        suite=Path("suites/s.yaml"),
        name="m",
        cell_id=f"{backend}-{precision}",
        model=MODEL,
        location=LOC,
        backend=backend,
        precision=precision,
        accuracy=spec,
        matrix_values=(("backend", backend), ("precision", precision)),
    )


REF = (("backend", "torch"), ("precision", "fp32"))


def test_find_reference_picks_the_named_cell_and_none_for_itself() -> None:
    spec = AccuracySpec(reference=REF)
    cells = [cell("torch", "fp32", spec), cell("onnxruntime", "fp32", spec)]
    assert find_reference(cells[1], cells) == cells[0]
    assert find_reference(cells[0], cells) is None
    lonely = cell("onnxruntime", "int8", AccuracySpec(reference=(("backend", "tensorrt"),)))
    with pytest.raises(AccuracyError, match="not a cell of scenario 'm'"):
        find_reference(lonely, cells)


class FakeSession:
    """Returns one [2, 3] output per input: the input's value, broadcast."""

    def prepare(self, feeds: dict[str, np.ndarray]) -> Any:
        return feeds["x"]

    def run(self, prepared: Any) -> Any:
        return prepared

    def to_numpy(self, outputs: Any) -> list[np.ndarray]:
        return [np.full((2, 3), float(outputs.ravel()[0]))]


def test_collect_outputs_keeps_axis_zero_for_the_input_index() -> None:
    feeds = [{"x": np.array([[float(i)]])} for i in range(5)]
    (stacked,) = collect_outputs(FakeSession(), feeds)  # type: ignore[arg-type]
    assert stacked.shape == (5, 2, 3)
    assert [float(stacked[i, 0, 0]) for i in range(5)] == [0.0, 1.0, 2.0, 3.0, 4.0]


def _with_cosine(value: float) -> AccuracyReport:
    return AccuracyReport("torch-fp32", (OutputMetrics("emb", {"cosine_mean": value}, ()),), ())


def test_figure_drift_fails_a_drop_beyond_the_limit() -> None:
    scenario = cell(
        "onnxruntime",
        "int8",
        AccuracySpec(reference=REF, gates=AccuracyGates(cosine_drift_max=0.002)),
    )
    base = ScenarioResult(
        id="i",
        suite="s",
        name="m",
        backend="onnxruntime",
        device="cpu",
        precision="int8",
        accuracy=AccuracyFigures(n=1, reference="torch-fp32", report=_with_cosine(0.9933)),
    )
    rows, failures = figure_drift(scenario, _with_cosine(0.9852), base, "a" * 40)
    assert rows[0].drop == pytest.approx(0.0081)
    assert failures == [
        "cosine similarity mean on output emb vs reference torch-fp32 dropped 0.0081 since "
        "baseline aaaaaaa (0.9933 -> 0.9852); limit cosine_drift_max 0.002"
    ]
    _, small = figure_drift(scenario, _with_cosine(0.9925), base, "a" * 40)
    assert small == []
    other_ref = replace(
        base, accuracy=AccuracyFigures(n=1, reference="onnxruntime-fp32", report=_with_cosine(1))
    )
    assert figure_drift(scenario, _with_cosine(0.5), other_ref, None) == ([], [])
    assert figure_drift(scenario, _with_cosine(0.5), None, None) == ([], [])
    # A degenerate reference's cosine means nothing: no drift is measured on it.
    report = _with_cosine(0.0)
    noise = replace(report, outputs=(replace(report.outputs[0], degenerate="near zero"),))
    assert figure_drift(scenario, noise, base, "a" * 40) == ([], [])
