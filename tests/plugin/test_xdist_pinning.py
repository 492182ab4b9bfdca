"""Several devices in one box: pytest-xdist workers placed on disjoint cores and a
device each (perfguard.machine.placement, perfguard.plugin.pinning), and the
contention check that counts the run's own workers as its own."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfguard.core.policy import CONTENTION_LIMIT
from perfguard.machine import env, placement
from perfguard.machine.placement import (
    RUN_PID_ENV,
    THREADS_ENV,
    Placement,
    cpu_ranges,
    inherited_threads,
    nvml_index,
    parse_devices,
    partition_cpus,
    place_worker,
    run_cpu_ns,
    run_root_pid,
    visible_devices,
    worker_index,
)
from perfguard.measure import canary
from perfguard.measure.opencell import RunContext
from perfguard.plugin import pinning
from tests.helpers.models import TINY_MODELS

CORES = len(os.sched_getaffinity(0))


@pytest.fixture
def restore_affinity() -> Iterator[set[int]]:
    before = os.sched_getaffinity(0)
    try:
        yield before
    finally:
        os.sched_setaffinity(0, before)


# -- partitioning the cores -------------------------------------------------------------


@given(
    cpus=st.sets(st.integers(min_value=0, max_value=255), min_size=1, max_size=64),
    data=st.data(),
)
def test_partition_is_disjoint_covering_balanced_and_deterministic(
    cpus: set[int], data: st.DataObject
) -> None:
    count = data.draw(st.integers(min_value=1, max_value=len(cpus)))
    slices = partition_cpus(cpus, count)
    assert len(slices) == count
    flat = [c for s in slices for c in s]
    assert len(flat) == len(set(flat)), "two workers share a core"
    assert set(flat) == cpus, "a core is left out"
    assert all(slices), "a worker got no core"
    assert max(map(len, slices)) - min(map(len, slices)) <= 1
    assert flat == sorted(cpus), "slices are contiguous runs of the sorted cores"
    shuffled = data.draw(st.permutations(sorted(cpus)))
    assert partition_cpus(shuffled, count) == slices, "the order given changed the plan"


@given(cpus=st.sets(st.integers(min_value=0, max_value=63), max_size=8), extra=st.integers(1, 4))
def test_more_workers_than_cores_is_refused(cpus: set[int], extra: int) -> None:
    with pytest.raises(ValueError, match="workers need at least"):
        partition_cpus(cpus, len(cpus) + extra)


def test_placement_takes_devices_in_turn() -> None:
    devices = ("0", "1")
    placed = [place_worker(f"gw{i}", 4, range(8), devices) for i in range(4)]
    assert [p.device for p in placed] == ["0", "1", "0", "1"]
    assert [p.cpus for p in placed] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert placed[1].threads == 2
    assert placed[1].environment() == {THREADS_ENV: "2", "CUDA_VISIBLE_DEVICES": "1"}
    assert placed[3].describe() == "gw3: cores 6-7 (2 threads), device 1"
    alone = place_worker("gw0", 2, (4, 9), ())
    assert alone.device is None and "CUDA_VISIBLE_DEVICES" not in alone.environment()
    assert alone.describe() == "gw0: cores 4 (1 thread), no device"


def test_worker_ids_and_core_ranges() -> None:
    assert worker_index("gw12") == 12
    with pytest.raises(ValueError, match="not a pytest-xdist worker id"):
        worker_index("master")
    with pytest.raises(ValueError, match="outside a run of 2"):
        place_worker("gw2", 2, range(4), ())
    assert cpu_ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"


# -- the device list ----------------------------------------------------------------------


def test_device_list_setting_and_visible_devices() -> None:
    assert parse_devices(" 0, 1 ,GPU-abc ") == ("0", "1", "GPU-abc")
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "2,3"}) == ("2", "3")
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "1,-1,2"}) == ("1",)
    # Unset: one per GPU NVML sees (a fake NVML here); none without NVML.
    assert visible_devices({}, gpu_count=lambda: 3) == ("0", "1", "2")
    assert visible_devices({}, gpu_count=lambda: 0) == ()


def test_nvml_count_without_nvml_is_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "load_nvml", lambda: (None, "no pynvml"))
    assert visible_devices({}) == ()


class _FakeNvml(types.ModuleType):
    """Two GPUs: NVML's handles are the physical indexes."""

    def __init__(self, names: tuple[str, ...], uuids: tuple[str, ...] = ()) -> None:
        super().__init__("pynvml")
        self.names, self.uuids, self.inits = names, uuids, 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return self.uuids.index(uuid)

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.names[handle]

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040


def test_nvml_index_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeNvml(("A", "B"), uuids=("GPU-aaa", "GPU-bbb"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert nvml_index(0, {}) == 0
    assert nvml_index(0, {"CUDA_VISIBLE_DEVICES": "1"}) == 1
    assert nvml_index(1, {"CUDA_VISIBLE_DEVICES": "1,0"}) == 0
    assert nvml_index(0, {"CUDA_VISIBLE_DEVICES": "GPU-bbb"}) == 1
    assert nvml_index(0, {"CUDA_VISIBLE_DEVICES": "GPU-unknown"}) == 0
    assert fake.inits == 0, "NVML left initialised"


@pytest.fixture
def no_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.mark.usefixtures("no_smi")
def test_a_worker_on_gpu1_fingerprints_like_one_on_gpu0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(("NVIDIA L4", "NVIDIA L4")))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    on_gpu0 = env.collect_environment()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    on_gpu1 = env.collect_environment()
    assert on_gpu0.comparable["gpu_model"] == "NVIDIA L4"
    assert on_gpu1.fingerprint == on_gpu0.fingerprint, "the index split the fingerprint"


@pytest.mark.usefixtures("no_smi")
def test_a_worker_bound_to_another_model_fingerprints_that_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(("NVIDIA L4", "NVIDIA A100-SXM4-80GB")))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    bound = env.collect_environment()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    other = env.collect_environment()
    assert bound.comparable["gpu_model"] == "NVIDIA A100-SXM4-80GB"
    assert bound.fingerprint != other.fingerprint


@pytest.mark.usefixtures("no_smi")
def test_a_worker_s_share_of_cores_does_not_split_the_fingerprint(
    monkeypatch: pytest.MonkeyPatch, restore_affinity: set[int]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    serial = env.collect_environment()
    os.sched_setaffinity(0, {min(restore_affinity)})
    worker = env.collect_environment()
    assert worker.recorded["cpu_affinity_count"] == "1"
    assert worker.fingerprint == serial.fingerprint


# -- the worker's own setting ----------------------------------------------------------


def test_inherited_settings_parse_strictly() -> None:
    assert inherited_threads({THREADS_ENV: "3"}) == 3
    assert inherited_threads({THREADS_ENV: "0"}) is None
    assert inherited_threads({THREADS_ENV: "x"}) is None
    assert inherited_threads({}) is None
    assert run_root_pid({RUN_PID_ENV: "123"}) == 123
    assert run_root_pid({}) is None


def test_run_context_defaults_threads_to_the_inherited_share(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert RunContext(rootdir=tmp_path, cache_dir=tmp_path).default_threads is None
    monkeypatch.setenv(THREADS_ENV, "2")
    assert RunContext(rootdir=tmp_path, cache_dir=tmp_path).default_threads == 2


def test_apply_pins_this_process_and_sets_its_children_s_variables(
    restore_affinity: set[int],
) -> None:
    cpu = min(restore_affinity)
    environ: dict[str, str] = {"OMP_NUM_THREADS": "7"}
    pinning.apply(Placement("gw0", 0, 1, (cpu,), device="GPU-x"), environ, run_pid=42)
    assert os.sched_getaffinity(0) == {cpu}
    assert environ[THREADS_ENV] == "1"
    assert environ["CUDA_VISIBLE_DEVICES"] == "GPU-x"
    assert environ[RUN_PID_ENV] == "42"
    assert environ["OMP_NUM_THREADS"] == "7", "a user's own setting was overwritten"
    assert environ["MKL_NUM_THREADS"] == "1"


def test_model_groups_read_the_suites_named_by_node_ids(tmp_path: Path) -> None:
    suite = tmp_path / "suites" / "s.yaml"
    suite.parent.mkdir()
    suite.write_text(
        textwrap.dedent(
            """\
            models:
              m: {factory: "x:y", inputs: {x: {shape: [1, 8], dtype: float32}}}
              n: {factory: "x:z", inputs: {x: {shape: [1, 8], dtype: float32}}}
            scenarios:
              - {name: one, model: m, matrix: {backend: [torch, onnxruntime]}}
              - {name: two, model: m}
              - {name: three, model: n}
            """
        )
    )
    groups = pinning.ModelGroups(tmp_path)
    one = groups("suites/s.yaml::one[torch]")
    assert one == "perfguard:suites/s.yaml:m"
    assert groups("suites/s.yaml::one[onnxruntime]") == one
    assert groups("suites/s.yaml::two") == one
    assert groups("suites/s.yaml::two@perfguard:suites/s.yaml:m") == one
    assert groups("suites/s.yaml::three") == "perfguard:suites/s.yaml:n"
    assert groups("tests/test_x.py::test_y") is None
    assert groups("suites/missing.yaml::a") is None


# -- the contention check ------------------------------------------------------------------


def _write_proc(proc: Path, processes: dict[int, tuple[int, int]]) -> None:
    """A fake /proc: pid -> (ppid, utime ticks)."""
    for pid, (ppid, ticks) in processes.items():
        (proc / str(pid)).mkdir(parents=True, exist_ok=True)
        # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
        # cmajflt utime stime ...
        (proc / str(pid) / "stat").write_text(
            f"{pid} (a (b) c) S {ppid} 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0\n"
        )


def test_run_cpu_ns_counts_the_run_tree_only(tmp_path: Path) -> None:
    tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    _write_proc(
        tmp_path,
        {
            10: (1, 5),  # the controller
            11: (10, 100),  # worker gw0 (this process, skipped)
            12: (10, 200),  # worker gw1
            13: (12, 40),  # gw1's isolated worker
            20: (1, 999),  # a neighbour outside the run
        },
    )
    (tmp_path / "self").mkdir()
    assert run_cpu_ns(10, skip=11, proc=tmp_path) == (5 + 200 + 40) * tick
    assert run_cpu_ns(99, skip=11, proc=tmp_path) == 0
    assert run_cpu_ns(10, skip=11, proc=tmp_path / "absent") == 0


def _foreign_share(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    busy_pid_parent: int,
) -> float | None:
    """Other processes' share while a process under ``busy_pid_parent`` burns one CPU
    for one second of a two-CPU machine (all counters faked)."""
    hz = os.sysconf("SC_CLK_TCK")
    proc, stat = tmp_path / "proc", tmp_path / "stat"
    monkeypatch.setattr(canary, "_PROC_STAT", stat)
    monkeypatch.setattr(
        canary, "run_cpu_ns", lambda root, skip: run_cpu_ns(root, skip=skip, proc=proc)
    )
    monkeypatch.setenv(RUN_PID_ENV, "10")
    monkeypatch.setattr(canary.os, "cpu_count", lambda: 2)
    clock = iter([0, 1_000_000_000])
    monkeypatch.setattr(canary.time, "perf_counter_ns", lambda: next(clock))
    monkeypatch.setattr(canary.time, "process_time_ns", lambda: 0)
    snapshots = []
    for busy in (0, hz):  # the busy process's ticks, and the machine's with it
        stat.write_text(f"cpu {1000 + busy} 0 0 5000 0 0 0 0 0 0\n")
        _write_proc(proc, {10: (1, 0), 11: (10, 0), 30: (busy_pid_parent, busy)})
        snapshots.append(canary.cpu_snapshot())
    return canary.cpu_shares(snapshots[0], snapshots[1])[0]


def test_a_busy_sibling_worker_is_no_neighbour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    share = _foreign_share(tmp_path, monkeypatch, busy_pid_parent=10)
    assert share is not None and share <= CONTENTION_LIMIT  # not invalid


def test_a_busy_process_outside_the_run_still_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    share = _foreign_share(tmp_path, monkeypatch, busy_pid_parent=1)
    assert share is not None and share > CONTENTION_LIMIT  # invalid, as before


def test_run_cpu_ns_sees_a_real_busy_grandchild() -> None:
    """On the real /proc: a busy process two levels under a root counts for it."""
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    root = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None
        busy = int(root.stdout.readline())
        first = run_cpu_ns(root.pid, skip=os.getpid())
        deadline = time.monotonic() + 30
        while run_cpu_ns(root.pid, skip=os.getpid()) <= first and time.monotonic() < deadline:
            time.sleep(0.1)
        assert run_cpu_ns(root.pid, skip=os.getpid()) > first
        # Skipping the busy process itself leaves the (idle) root's time alone.
        assert run_cpu_ns(root.pid, skip=busy) < run_cpu_ns(root.pid, skip=os.getpid())
    finally:
        with contextlib.suppress(NameError, ProcessLookupError):
            os.kill(busy, signal.SIGKILL)
        root.kill()
        root.wait()
        if root.stdout is not None:
            root.stdout.close()


# -- end to end under pytest-xdist ------------------------------------------------------

# No `threads:`: each worker gives its cells its share of cores (one each here).
XDIST_SUITE = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 30, seconds: 0}
models:
  a: {factory: "tinymodels:mlp", inputs: {x: {shape: [1, 8], dtype: float32}}}
  b: {factory: "tinymodels:mlp", kwargs: {width: 32}, inputs: {x: {shape: [1, 8], dtype: float32}}}
scenarios:
  - {name: a1, model: a}
  - {name: a2, model: a, measure: {iterations: 20, seconds: 0}}
  - {name: b1, model: b}
  - {name: b2, model: b, measure: {iterations: 20, seconds: 0}}
"""

needs_two_cores = pytest.mark.skipif(CORES < 2, reason="two xdist workers need two cores")


def _suite(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    suites = pytester.path / "suites"
    suites.mkdir()
    (suites / "tinymodels.py").write_text(TINY_MODELS)
    (suites / "s.yaml").write_text(XDIST_SUITE)


def _results(pytester: pytest.Pytester) -> dict[str, Any]:
    found = list((pytester.path / "reports").glob("*/results.json"))
    assert len(found) == 1
    data: dict[str, Any] = json.loads(found[0].read_text())
    return data


def _placements(recorded: str) -> dict[str, tuple[set[int], str]]:
    """``xdist_workers`` of environment.recorded -> {worker: (cores, device)}."""
    out = {}
    for part in recorded.split("; "):
        m = re.fullmatch(r"(gw\d+): cores ([\d,-]+), threads (\d+), device (\S+)", part)
        assert m, part
        cores: set[int] = set()
        for span in m.group(2).split(","):
            lo, _, hi = span.partition("-")
            cores.update(range(int(lo), int(hi or lo) + 1))
        out[m.group(1)] = (cores, m.group(4))
    return out


@needs_two_cores
def test_two_workers_pinned_apart_and_one_report(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest_subprocess(
        "--perfguard", "-p", "xdist", "-n", "2", "-v", "--perfguard-devices=fakeA,fakeB"
    )
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["perfguard: 2 xdist workers placed: gw0: cores *; gw1: cores *"])
    assert "scheduling tests via ModelGroupScheduling" in out
    # The summary and the run's files are written once, by the controller.
    assert out.count("results: ") == 1
    assert len(re.findall(r"^scenario\s+backend", out, re.MULTILINE)) == 1
    data = _results(pytester)
    ids = [s["id"] for s in data["scenarios"]]
    assert sorted(ids) == [f"suites/s.yaml::{n}" for n in ("a1", "a2", "b1", "b2")]
    placed = _placements(data["environment"]["recorded"]["xdist_workers"])
    assert set(placed) == {"gw0", "gw1"}
    (cores0, dev0), (cores1, dev1) = placed["gw0"], placed["gw1"]
    assert cores0 and cores1 and not cores0 & cores1, "two workers measured on one core"
    assert {dev0, dev1} == {"fakeA", "fakeB"}
    # One intra-op thread each: the share of one core (torch reports its own count).
    assert {s["runtime"]["threads"] for s in data["scenarios"]} == {1}
    # A model's cells on one worker.
    ran = re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED suites/s\.yaml::(\w+)", out)
    worker_of = {cell: worker for worker, cell in ran}
    assert len(worker_of) == 4
    assert worker_of["a1"] == worker_of["a2"] and worker_of["b1"] == worker_of["b2"]


@needs_two_cores
def test_isolated_workers_inherit_the_placement(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest_subprocess(
        "--perfguard", "-p", "xdist", "-n", "2", "--perfguard-isolate", "-k", "a1 or b1"
    )
    result.assert_outcomes(passed=2)
    scenarios = _results(pytester)["scenarios"]
    assert all(s["runtime"]["isolated"] for s in scenarios)
    assert {s["runtime"]["threads"] for s in scenarios} == {1}


def test_more_workers_than_cores_is_refused_up_front(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    result = pytester.runpytest_subprocess("--perfguard", "-p", "xdist", "-n", str(CORES + 1))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*{CORES + 1} pytest-xdist workers but this process may use {CORES} core(s)*"
            f"Fix: run with -n {CORES} (or fewer), or without -n"
        ]
    )
    assert not (pytester.path / "reports").exists()
