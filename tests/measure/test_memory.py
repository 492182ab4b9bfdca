"""Peak memory that belongs to its cell: the resettable high-water mark, and a worker
process of its own for a cell that gates ``peak_memory``."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from perfguard.measure.memory import PeakMemory
from perfguard.suite.loader import load_suite
from tests.helpers.git_repos import run_git

STATUS = "Name:\tpython\nVmPeak:\t  900000 kB\nVmHWM:\t  {hwm} kB\nVmRSS:\t  300000 kB\n"


def test_the_figure_is_the_high_water_mark_after_a_reset(tmp_path: Path) -> None:
    status, clear = tmp_path / "status", tmp_path / "clear_refs"
    status.write_text(STATUS.format(hwm=307200))
    clear.write_text("")
    memory = PeakMemory(status, clear)
    memory.start()
    assert clear.read_text() == "5"  # the kernel's "reset the peak RSS" request
    status.write_text(STATUS.format(hwm=409600))
    assert memory.peak_mib() == 400.0


def test_no_reset_no_figure(tmp_path: Path) -> None:
    """Without the reset the high-water mark is the process's since it started, which
    would blame this cell for another's memory: no figure rather than a wrong one."""
    status = tmp_path / "status"
    status.write_text(STATUS.format(hwm=307200))
    memory = PeakMemory(status, tmp_path / "missing" / "clear_refs")
    memory.start()
    assert memory.peak_mib() is None
    clear = tmp_path / "clear_refs"
    clear.write_text("")
    (tmp_path / "status").write_text("Name:\tpython\n")  # no VmHWM line (not Linux-like)
    other = PeakMemory(status, clear)
    other.start()
    assert other.peak_mib() is None


def test_a_section_restarts_the_mark_and_the_cell_keeps_its_peak(tmp_path: Path) -> None:
    """A load level's section starts from the mark's restart; the cell's own peak still
    covers what came before it (the model's open, say)."""
    status, clear = tmp_path / "status", tmp_path / "clear_refs"
    status.write_text(STATUS.format(hwm=512000))
    clear.write_text("")
    memory = PeakMemory(status, clear)
    memory.start()
    assert memory.resident_mib() == 300000 / 1024  # VmRSS, not the mark
    clear.write_text("")
    memory.section()
    assert clear.read_text() == "5"
    status.write_text(STATUS.format(hwm=358400))  # the kernel restarted the mark: lower
    assert memory.section_peak_mib() == 350.0
    assert memory.peak_mib() == 500.0  # the open's peak, before the section
    status.write_text(STATUS.format(hwm=614400))
    assert memory.section_peak_mib() == memory.peak_mib() == 600.0


def test_without_a_reset_a_section_has_no_figure(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text(STATUS.format(hwm=307200))
    memory = PeakMemory(status, tmp_path / "missing" / "clear_refs")
    memory.start()
    memory.section()
    assert memory.section_peak_mib() is None and memory.peak_mib() is None


@pytest.mark.parametrize(
    ("gate", "own", "memory"),
    [
        ('gate: {peak_memory: "+10%"}', True, ("peak_memory",)),
        ('gate: {gpu_mem: "+10%"}', False, ("gpu_mem",)),  # reset per cell: no worker
        ('gate: {p95: "+5%"}', False, ()),
    ],
)
def test_only_a_peak_memory_gate_gets_a_worker_of_its_own(
    tmp_path: Path, gate: str, own: bool, memory: tuple[str, ...]
) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "models:\n  m:\n    factory: mod:build\n    inputs: {x: {shape: [1, 8]}}\n"
        f"scenarios:\n  - name: c\n    model: m\n    {gate}\n"
    )
    (scenario,) = load_suite(suite).scenarios
    assert scenario.own_process is own
    assert tuple(g.metric for g in scenario.memory_gates) == memory


HOGS = textwrap.dedent(
    """
    import torch

    _KEPT = []


    def hog(mib=300):
        # Leaks `mib` MiB of touched memory in the process that builds it.
        _KEPT.append(torch.ones(mib * 262144))
        return torch.nn.Linear(8, 4).eval()


    def small():
        torch.manual_seed(0)
        return torch.nn.Linear(8, 4).eval()
    """
)


def _suite(pytester: pytest.Pytester, gate: str) -> None:
    suites = pytester.path / "suites"
    suites.mkdir(exist_ok=True)
    (suites / "hogs.py").write_text(HOGS)
    (suites / "mem.yaml").write_text(
        textwrap.dedent(
            f"""\
            defaults:
              warmup: {{iterations: 2, seconds: 0}}
              measure: {{iterations: 30, seconds: 0}}
              threads: 1
            models:
              hog:
                factory: hogs:hog
                inputs: {{x: {{shape: [1, 8], dtype: float32}}}}
              small:
                factory: hogs:small
                inputs: {{x: {{shape: [1, 8], dtype: float32}}}}
            scenarios:
              - name: a_hog
                model: hog
              - name: b_small
                model: small
                {gate}
            """
        )
    )


def _peak(pytester: pytest.Pytester, *args: str) -> tuple[float, bool]:
    for old in (pytester.path / "reports").glob("*/results.json"):
        old.unlink()
    result = pytester.runpytest_subprocess(
        "--perfguard", "--perfguard-baseline=none", "-p", "no:randomly", *args, timeout=300
    )
    assert result.ret == 0, result.stdout.str()
    (path,) = (pytester.path / "reports").glob("*/results.json")
    cells = {s["id"]: s for s in json.loads(path.read_text())["scenarios"]}
    cell = cells["suites/mem.yaml::b_small"]
    return float(cell["peak_memory_mib"]), bool(cell["runtime"].get("isolated", False))


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's clear_refs")
def test_a_memory_gated_cell_is_not_moved_by_the_cells_before_it(pytester: pytest.Pytester) -> None:
    """A cell that leaks 300 MiB runs first. A cell gating ``peak_memory`` reads the
    same figure after it as alone (it runs in a worker of its own); the same cell
    without the gate, in the pytest process, carries the leak in its figure."""
    _suite(pytester, 'gate: {peak_memory: "+10%"}')
    alone, isolated = _peak(pytester, "-k", "b_small")
    after, isolated_after = _peak(pytester)
    assert isolated and isolated_after
    assert abs(after - alone) <= 0.02 * alone, (alone, after)
    _suite(pytester, "")
    shared, isolated_shared = _peak(pytester)
    assert not isolated_shared
    assert shared > alone + 200.0, (alone, shared)


GROWN = textwrap.dedent(
    """
    import torch

    _KEPT = []


    def build():
        # Holds MIB MiB of touched memory for as long as the model lives.
        _KEPT.append(torch.ones(MIB * 262144 + 1))
        torch.manual_seed(0)
        return torch.nn.Linear(8, 4).eval()
    """
)

AB_SUITE = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 100, seconds: 0}
  threads: 1
models:
  grown:
    factory: grown:build
    inputs: {x: {shape: [1, 8], dtype: float32}}
scenarios:
  - name: grown
    model: grown
    gate: {peak_memory: "+10%"}
"""


def _commit(repo: Path, mib: int, message: str) -> None:
    (repo / "suites").mkdir(exist_ok=True)
    (repo / "suites" / "grown.py").write_text(GROWN.replace("MIB", str(mib)))
    (repo / "suites" / "s.yaml").write_text(AB_SUITE)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", message)


def _ab(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict, dict]:
    for old in (pytester.path / "reports").glob("*/*.json"):
        old.unlink()
    result = pytester.runpytest_subprocess("--perfguard", "--perfguard-ab=HEAD~1", timeout=600)
    (folder,) = {p.parent for p in (pytester.path / "reports").glob("*/comparison.json")}
    (verdict,) = json.loads((folder / "comparison.json").read_text())["verdicts"]
    (cell,) = json.loads((folder / "results.json").read_text())["scenarios"]
    return result, verdict, cell


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's clear_refs")
def test_same_run_ab_gates_peak_memory_on_both_sides(pytester: pytest.Pytester) -> None:
    """Each side is measured alone in a fresh worker: an unchanged model's memory is
    unchanged (and B's figure is in the results, no longer "-"); a head that holds
    300 MiB more fails the peak_memory gate, while its latency is unchanged."""
    pytester.makeini("[pytest]\n")
    run_git(pytester.path, "init", "-q", "-b", "main")
    (pytester.path / ".gitignore").write_text("reports/\n.perfguard/\n__pycache__/\n")
    _commit(pytester.path, 20, "the model")
    (pytester.path / "suites" / "grown.py").write_text(GROWN.replace("MIB", "20") + "# x\n")
    run_git(pytester.path, "commit", "-qam", "a comment only")

    result, verdict, cell = _ab(pytester)
    assert result.ret == 0, result.stdout.str()
    memory = next(m for m in verdict["metrics"] if m["metric"] == "peak_memory")
    assert memory["verdict"] == "unchanged", memory["message"]
    assert "measured in this run (each side alone in a fresh worker" in memory["message"]
    assert cell["peak_memory_mib"] == pytest.approx(memory["current"])
    assert abs(memory["current"] - memory["baseline"]) <= 0.05 * memory["baseline"]

    (pytester.path / "suites" / "grown.py").write_text(GROWN.replace("MIB", "320"))
    run_git(pytester.path, "commit", "-qam", "holds 300 MiB more")
    result, verdict, cell = _ab(pytester)
    assert result.ret == 1, result.stdout.str()
    assert verdict["verdict"] == "regression"
    memory = next(m for m in verdict["metrics"] if m["metric"] == "peak_memory")
    assert memory["verdict"] == "regression", memory["message"]
    assert memory["current"] - memory["baseline"] > 250.0, memory
    latency = next(m for m in verdict["metrics"] if m["metric"] == "p95")
    assert latency["verdict"] != "regression", latency["message"]
    result.stdout.fnmatch_lines(["*peak memory regressed +*% (* MiB -> * MiB*vs base *"])


STREAMS = textwrap.dedent(
    """
    import time

    import numpy as np
    import torch


    class Holding(torch.nn.Module):
        # Each request holds 48 MiB of touched memory while it is served (as a
        # generative model's KV cache grows with the requests in flight).
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 4)

        def forward(self, x):
            held = np.ones(48 * 2**20, dtype=np.uint8)
            time.sleep(0.02)
            return self.lin(x) + float(held[-1])


    def build():
        # Opening the model passes through 200 MiB more than serving it ever holds.
        scratch = np.ones(200 * 2**20, dtype=np.uint8)
        del scratch
        torch.manual_seed(0)
        return Holding().eval()
    """
)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's clear_refs")
def test_each_load_level_has_its_memory_and_the_report_the_growth_per_stream(
    pytester: pytest.Pytester,
) -> None:
    """Two levels of a model whose every request in flight holds 48 MiB: each level
    records what it held above the idle model, and the report's growth per added
    client (the slope over the levels) is the 48 MiB each stream costs. The model's
    open peaks higher than either level: a level's figure is its own, not the cell's."""
    pytester.makeini("[pytest]\n")
    suites = pytester.path / "suites"
    suites.mkdir()
    (suites / "streams.py").write_text(STREAMS)
    (suites / "load.yaml").write_text(
        textwrap.dedent(
            """\
            defaults:
              warmup: {iterations: 6, seconds: 0}
              measure: {iterations: 90, seconds: 0}
              threads: 1
            models:
              holding:
                factory: streams:build
                inputs: {x: {shape: [1, 8], dtype: float32}}
            scenarios:
              - name: held
                model: holding
                load: {concurrency: [1, 3]}
                gate: {peak_memory: "+50%"}
            """
        )
    )
    result = pytester.runpytest_subprocess("--perfguard", "--perfguard-baseline=none", timeout=600)
    assert result.ret == 0, result.stdout.str()
    (folder,) = {p.parent for p in (pytester.path / "reports").glob("*/results.json")}
    cells = {s["id"]: s for s in json.loads((folder / "results.json").read_text())["scenarios"]}
    memory = {c["load"]["concurrency"]: c["load"]["memory"] for c in cells.values()}
    assert sorted(memory) == [1, 3] and [memory[c]["streams"] for c in (1, 3)] == [1, 3]
    held = {c: m["level_peak_mib"] - m["idle_mib"] for c, m in memory.items()}
    slope = (held[3] - held[1]) / 2
    assert 36.0 <= slope <= 60.0, held  # 48 MiB per request in flight
    assert all(c["runtime"]["isolated"] for c in cells.values())  # each level alone
    for cell in cells.values():  # the open's 200 MiB: in the cell's peak, not the level's
        assert cell["peak_memory_mib"] > cell["load"]["memory"]["level_peak_mib"] + 40.0
    html = next(folder.glob("*.html")).read_text()
    assert re.search(r"host memory \+(\d+\.\d) MiB per added client", html), html[:2000]
    shown = float(re.search(r"host memory \+(\d+\.\d) MiB per added", html).group(1))  # type: ignore[union-attr]
    assert shown == pytest.approx(slope, abs=0.06)
