"""What GPU telemetry could not see reaches every output once: the terminal summary,
summary.md and report.html (results.json alone used to hold it).

The telemetry of the "off" cells comes from the real pynvml on this machine where NVML
cannot start (no driver: CI, laptops); elsewhere from a stored result of that shape.
"""

from __future__ import annotations

import sys
from typing import Any

import pynvml as real
import pytest

from perfguard.judge.outcome import run_outcome
from perfguard.machine.telemetry import TelemetrySampler, telemetry_gap
from perfguard.plugin.terminal import write_summary
from perfguard.records.figures import GpuFacts, RuntimeInfo
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult, Status
from perfguard.report import render_html, render_markdown
from perfguard.report.model import ReportInput
from perfguard.report.tables import telemetry_gaps, telemetry_lines
from perfguard.run.finish import RunFiles

DRIVER_NOT_LOADED = (
    "NVML could not start: Driver Not Loaded. Fix: load the NVIDIA kernel module "
    "(`nvidia-smi` must work; reboot after installing the driver)"
)


def off_telemetry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A sampler's result where NVML cannot start: the real pynvml's where it fails here."""
    monkeypatch.setitem(sys.modules, "pynvml", real)
    with TelemetrySampler(0, interval_s=0.001) as sampler:
        pass
    result = sampler.result()
    if result["available"]:  # a machine with a GPU: what a driverless runner stores
        result = {**result, "available": False, "reason": DRIVER_NOT_LOADED}
    return result


def cell(sid: str, telemetry: dict[str, Any] | None, device: str = "cuda") -> ScenarioResult:
    return ScenarioResult(
        id=sid,
        suite="s.yaml",
        name=sid.split("::")[-1],
        backend="torch",
        device=device,
        precision="fp16",
        status=Status.PASSED,
        runtime=RuntimeInfo(gpu=GpuFacts(telemetry) if device != "cpu" else None),
    )


def results(monkeypatch: pytest.MonkeyPatch) -> list[ScenarioResult]:
    off = off_telemetry(monkeypatch)
    blind: dict[str, Any] = {
        "available": True,
        "reason": None,
        "samples": 4,
        "reasons_seen": [],
        "reasons_read": 0,
        "reasons_error": "nvmlDeviceGetCurrentClocksEventReasons: Not Supported. Fix: none here",
    }
    seen = {**blind, "reasons_read": 4, "reasons_error": None}
    return [
        cell("s.yaml::a", off),
        cell("s.yaml::b", off),
        cell("s.yaml::c", blind),
        cell("s.yaml::d", seen),
        cell("s.yaml::cpu", None, device="cpu"),
    ]


def run_input(cells: list[ScenarioResult]) -> ReportInput:
    run = RunResult(
        commit=CommitInfo(sha="a" * 40, branch="main", dirty=False),
        environment=Environment.of({"cpu": "x"}),
        scenarios=tuple(cells),
        created_at="2026-01-02T03:04:05+00:00",
        perfguard_version="0.0.test",
    )
    return ReportInput(run=run)


def test_a_gap_per_cause_with_its_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    cells = results(monkeypatch)
    gpu = cells[0].runtime.gpu
    assert gpu is not None and gpu.telemetry is not None
    off: dict[str, Any] = gpu.telemetry
    gaps = telemetry_gaps(cells)
    assert [ids for _, ids in gaps] == [["s.yaml::a", "s.yaml::b"], ["s.yaml::c"]]
    first, second = (gap for gap, _ in gaps)
    assert first == (
        "GPU telemetry was off, so throttling and other processes on the GPU went "
        f"unchecked: {off['reason']}"
    )
    assert off["reason"].startswith("NVML could not start: ") and ". Fix: " in off["reason"]
    assert second.startswith("GPU throttling could not be seen (no clock-event reasons): ")
    assert "Not Supported. Fix: none here" in second
    assert telemetry_gap(cells[3].runtime.gpu.telemetry) is None  # type: ignore[union-attr]
    assert telemetry_gap(None) is None
    assert telemetry_gap({"available": True, "samples": 3}) is None  # stored before the field


def test_the_terminal_says_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cells = results(monkeypatch)
    written: list[tuple[str, dict[str, Any]]] = []

    class Reporter:
        def section(self, title: str) -> None:
            written.append((f"== {title}", {}))

        def write_line(self, line: str, **markup: Any) -> None:
            written.append((line, markup))

    write_summary(
        Reporter(),
        baseline_how="no baseline",
        results=cells,
        verdicts={},
        locations={},
        files=RunFiles(),
        outcome=run_outcome(cells, []),
    )
    lines = [(line, markup) for line, markup in written if line.startswith("telemetry: ")]
    assert [line for line, _ in lines] == telemetry_lines_prefixed(cells)
    assert len(lines) == 2 and all(markup == {"yellow": True} for _, markup in lines)
    assert lines[0][0].startswith(
        "telemetry: 2 GPU cells (s.yaml::a, s.yaml::b): GPU telemetry was off, so throttling"
    )


def telemetry_lines_prefixed(cells: list[ScenarioResult]) -> list[str]:
    return [f"telemetry: {line}" for line in telemetry_lines(cells)]


def test_summary_md_says_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cells = results(monkeypatch)
    text = render_markdown(run_input(cells))
    assert text.count("**GPU telemetry**") == 1
    assert text.count("GPU telemetry was off, so throttling") == 1
    assert "- 2 GPU cells (`s.yaml::a`, `s.yaml::b`): GPU telemetry was off" in text
    assert "- 1 GPU cell (`s.yaml::c`): GPU throttling could not be seen" in text
    assert "NVML could not start: " in text
    clean = render_markdown(run_input([cells[3], cells[4]]))
    assert "GPU telemetry" not in clean


def test_the_report_says_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cells = results(monkeypatch)
    html = render_html(run_input(cells))
    assert html.count('id="telemetry-banner"') == 1
    assert html.count("GPU telemetry was off, so throttling") == 1
    assert "2 GPU cells (s.yaml::a, s.yaml::b): GPU telemetry was off" in html
    assert "NVML could not start: " in html
    assert 'id="telemetry-banner"' not in render_html(run_input([cells[3], cells[4]]))
