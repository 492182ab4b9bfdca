"""pytest-xdist workers placed on cores and devices of their own (hooks only).

The controller plans: it cuts its CPU set among the workers (refusing more workers
than cores, exit 4), picks the device list, and hands each worker the plan in its
``workerinput``; under ``--dist load`` (the default of ``-n``) and ``loadgroup`` it
schedules a model's cells onto one worker (``ModelGroups``). Each worker places itself
(``apply``) in ``pytest_configure``, before perfguard's state, numpy or any runtime
is imported, marks every scenario with its model's ``xdist_group``, and ships the
placement it measured under back to the controller, which records it in
``results.json`` (``environment.recorded``).
The logic lives in ``perfguard.machine.placement``; this module is the glue.
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest

from perfguard.core.paths import display_path
from perfguard.core.scenario import Scenario
from perfguard.core.signals import end_with_parent
from perfguard.machine.placement import (
    RUN_PID_ENV,
    Placement,
    cpu_ranges,
    parse_devices,
    partition_cpus,
    place_worker,
    visible_devices,
)
from perfguard.suite.files import SUITE_SUFFIXES
from perfguard.suite.loader import load_suite

__all__ = ["ModelGroups", "apply", "configure", "model_group", "recorded"]

_PLAN_KEY = "perfguard_plan"
_PLACED_KEY = "perfguard_placement"
_RECORDED_KEY = pytest.StashKey[dict[str, str]]()
_DEVICES_NONE = "none"
_DEVICES_AUTO = "auto"
#: The --dist modes perfguard schedules itself, a model's cells on one worker.
_GROUPED = ("load", "loadgroup")


def configure(config: pytest.Config) -> None:
    """Plan (controller) or place (worker); nothing outside a pytest-xdist run."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        # Signalled alone, the controller would leave this worker's A/B worktree behind.
        end_with_parent()
        plan = workerinput.get(_PLAN_KEY)
        if plan is not None:
            config.pluginmanager.register(_Worker(config, plan), "perfguard-xdist-worker")
        return
    count = _worker_count(config)
    if count < 1 or config.getvalue("collectonly"):
        return
    config.pluginmanager.register(_Controller(config, count), "perfguard-xdist-controller")


def recorded(config: pytest.Config) -> dict[str, str]:
    """What the workers measured under, for ``environment.recorded`` (empty: no xdist)."""
    found: dict[str, str] = config.stash.get(_RECORDED_KEY, {})
    return dict(found)


def model_group(scenario: Scenario, rootdir: Path) -> str:
    """The ``xdist_group`` of a scenario cell: its suite file and model."""
    return _group_name(display_path(scenario.suite, rootdir), scenario.model.name)


def _group_name(suite: str, model: str) -> str:
    return f"perfguard:{suite}:{model}"


class ModelGroups:
    """A node id's model group (``model_group``), for the controller's scheduler.

    The controller collects nothing under xdist: it reads the suite files the node ids
    name (once each). None for anything that is not a perfguard cell.
    """

    def __init__(self, rootdir: Path) -> None:
        self.rootdir = Path(rootdir)
        self._models: dict[str, dict[str, str]] = {}

    def __call__(self, nodeid: str) -> str | None:
        if nodeid.rfind("@") > nodeid.rfind("]"):  # xdist's own loadgroup suffix
            nodeid = nodeid[: nodeid.rfind("@")]
        path, sep, name = nodeid.partition("::")
        if not sep or not path.endswith(SUITE_SUFFIXES):
            return None
        if path not in self._models:
            self._models[path] = self._read(path)
        model = self._models[path].get(name)
        return _group_name(path, model) if model is not None else None

    def _read(self, path: str) -> dict[str, str]:
        try:
            suite = load_suite(self.rootdir / path)
        except Exception:  # a broken suite is the workers' to report: its items
            return {}  # are scheduled one by one, and the scheduler never crashes
        return {sc.item_name: sc.model.name for sc in suite.scenarios}


def _model_group_scheduling(config: pytest.Config, log: Any, groups: ModelGroups) -> Any:
    """xdist's loadgroup scheduling, grouping perfguard cells by model.

    xdist's own loadgroup reads the group from a suffix its workers append to node ids,
    which pytest 9 no longer lets it set; the controller reads the groups itself.
    """
    # pytest-xdist is optional: imported only by its own hook, under xdist.
    from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

    class ModelGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return groups(nodeid) or super()._split_scope(nodeid)

    return ModelGroupScheduling(config, log)


def _worker_count(config: pytest.Config) -> int:
    """How many xdist workers this controller starts (0: not distributed)."""
    if str(config.getoption("dist", "no") or "no") == "no":
        return 0
    count = 0
    for spec in config.getoption("tx", None) or ():
        head, star, _ = str(spec).partition("*")
        count += int(head) if star and head.isdigit() else 1
    return count


def _devices(config: pytest.Config) -> tuple[str, ...]:
    raw = config.getoption("perfguard_devices")
    text = str(raw if raw is not None else config.getini("perfguard_devices")).strip()
    if text.lower() == _DEVICES_NONE:
        return ()
    if text.lower() in ("", _DEVICES_AUTO):
        return visible_devices()
    return parse_devices(text)


class _Controller:
    """The controller's half: the plan, its refusal, and the workers' report."""

    def __init__(self, config: pytest.Config, count: int) -> None:
        self.config = config
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        try:
            partition_cpus(cpus, count)
        except ValueError:
            raise pytest.UsageError(
                f"perfguard: {count} pytest-xdist workers but this process may use "
                f"{len(cpus)} core(s) ({cpu_ranges(cpus)}); expected at most one worker "
                "per core: two workers never measure on the same cores. "
                f"Fix: run with -n {len(cpus)} (or fewer), or without -n"
            ) from None
        self.cpus, self.devices, self.count = cpus, _devices(config), count
        self.placed: dict[str, dict[str, Any]] = {}

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[_PLAN_KEY] = {
            "cpus": list(self.cpus),
            "devices": list(self.devices),
            "run_pid": os.getpid(),
        }

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        placed = json.loads(getattr(node, "workeroutput", {}).get(_PLACED_KEY) or "null")
        if not placed:
            return
        self.placed[str(placed["worker"])] = placed
        self.config.stash[_RECORDED_KEY] = {
            "xdist_workers": "; ".join(
                _describe(p) for _, p in sorted(self.placed.items(), key=lambda kv: kv[0])
            ),
        }

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        lines = [
            f"perfguard: {self.count} xdist workers placed: "
            + "; ".join(
                place_worker(f"gw{i}", self.count, self.cpus, self.devices).describe()
                for i in range(self.count)
            )
        ]
        if str(config.getoption("dist")) not in _GROUPED:
            lines.append(
                f"perfguard: --dist {config.getoption('dist')}: a model's cells may be "
                "split between workers (each opens the model); --dist load (the default "
                "of -n) or loadgroup keeps them together"
            )
        return lines

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if str(config.getoption("dist")) not in _GROUPED:
            return None
        return _model_group_scheduling(config, log, ModelGroups(config.rootpath))


def _describe(placed: dict[str, Any]) -> str:
    cpus = cpu_ranges(placed["cpus"])
    device = placed.get("device") or "none"
    return f"{placed['worker']}: cores {cpus}, threads {placed['threads']}, device {device}"


class _Worker:
    """A worker's half: placed at once, groups its cells, reports its placement."""

    def __init__(self, config: pytest.Config, plan: dict[str, Any]) -> None:
        self.config = config
        workerinput = config.workerinput  # type: ignore[attr-defined]
        self.placement = place_worker(
            str(workerinput["workerid"]),
            int(workerinput["workercount"]),
            plan["cpus"],
            tuple(plan["devices"]),
        )
        apply(self.placement, os.environ, run_pid=int(plan["run_pid"]))

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[Any]) -> None:
        # Before xdist's own hook, which appends the group to each node id.
        for item in items:
            scenario = getattr(item, "scenario", None)
            if scenario is not None:
                group = model_group(scenario, config.rootpath)
                item.add_marker(pytest.mark.xdist_group(name=group))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = self.config.workeroutput  # type: ignore[attr-defined]
        output[_PLACED_KEY] = json.dumps(
            {
                "worker": self.placement.worker,
                # What the process really runs on, read back, not the plan.
                "cpus": sorted(os.sched_getaffinity(0)),
                "threads": self.placement.threads,
                "device": os.environ.get("CUDA_VISIBLE_DEVICES") if self.placement.device else None,
            }
        )


def apply(placement: Placement, environ: MutableMapping[str, str], *, run_pid: int) -> None:
    """Place this process: its cores, and the variables its runtimes and children read."""
    os.sched_setaffinity(0, placement.cpus)
    environ.update(placement.environment())
    environ[RUN_PID_ENV] = str(run_pid)
    # Runtimes perfguard does not configure (an older A/B base, BLAS in a model's own
    # code) size their pools from these; a user's own setting wins.
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        environ.setdefault(name, str(placement.threads))
