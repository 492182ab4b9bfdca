"""The state of one ``pytest --perfguard`` run, registered as a plugin object.

It collects suite files, measures each cell when its item runs, and at the end
writes ``<report-dir>/<commit12>/results.json`` and prints the summary table.
Under pytest-xdist the workers measure and ship their results to the
controller, which alone writes files.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfguard import __version__
from perfguard.errors import BackendUnavailable, PerfguardError
from perfguard.results import CommitInfo, Environment, RunResult, ScenarioResult
from perfguard.runner import RunContext, measure_scenario

if TYPE_CHECKING:
    from perfguard.items import ScenarioItem

STATE_KEY = pytest.StashKey["PerfguardSession"]()
_WORKER_OUTPUT_KEY = "perfguard_results"
_SUITE_SUFFIXES = (".yaml", ".yml")


class PerfguardSession:
    """Holds the run's settings and results; its methods are pytest hooks."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rootdir = Path(config.rootpath)
        self.report_dir = self._path_setting("perfguard_report_dir", "perfguard_report_dir")
        cache = Path(str(config.getini("perfguard_cache_dir")))
        self.ctx = RunContext(
            rootdir=self.rootdir,
            cache_dir=cache if cache.is_absolute() else self.rootdir / cache,
        )
        self.patterns: list[str] = list(config.getini("perfguard_suite_patterns"))
        self.results: dict[str, ScenarioResult] = {}
        self.is_worker = hasattr(config, "workerinput")
        self._explicit = self._explicit_args(config)
        self._commit: CommitInfo | None = None
        self._environment: Environment | None = None
        self.results_path: Path | None = None

    # -- settings ---------------------------------------------------------------
    def _path_setting(self, option: str, ini: str) -> Path:
        value = self.config.getoption(option) or str(self.config.getini(ini))
        path = Path(value)
        return path if path.is_absolute() else self.rootdir / path

    @staticmethod
    def _explicit_args(config: pytest.Config) -> set[Path]:
        base = Path(config.invocation_params.dir)
        found = set()
        for arg in config.args:
            path = Path(arg.split("::", 1)[0])
            found.add((path if path.is_absolute() else base / path).resolve())
        return found

    @property
    def commit(self) -> CommitInfo:
        if self._commit is None:
            from perfguard.gitinfo import commit_info

            self._commit = commit_info(self.rootdir)
        return self._commit

    @property
    def environment(self) -> Environment:
        if self._environment is None:
            from perfguard.env import collect_environment

            self._environment = collect_environment()
        return self._environment

    # -- collection -------------------------------------------------------------
    def is_suite(self, file_path: Path) -> bool:
        if file_path.suffix not in _SUITE_SUFFIXES:
            return False
        if file_path.resolve() in self._explicit:
            return True
        try:
            rel = file_path.resolve().relative_to(self.rootdir.resolve()).as_posix()
        except ValueError:
            rel = file_path.as_posix()
        return any(fnmatch.fnmatch(rel, pattern) for pattern in self.patterns)

    @pytest.hookimpl
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        if not self.is_suite(file_path):
            return None
        from perfguard.items import SuiteFile

        node = SuiteFile.from_parent(parent, path=file_path)
        node.perfguard = self
        return node

    def register_markers(self, tags: Iterable[str]) -> None:
        """Tags become markers; registering them keeps ``--strict-markers`` happy."""
        known = {str(line).split(":", 1)[0].strip() for line in self.config.getini("markers")}
        for tag in tags:
            if tag not in known:
                self.config.addinivalue_line("markers", f"{tag}: perfguard suite tag")
                known.add(tag)

    # -- running ----------------------------------------------------------------
    def run_item(self, item: ScenarioItem) -> None:
        scenario = item.scenario
        try:
            result = measure_scenario(scenario, self.ctx)
        except BackendUnavailable as exc:
            self.record(self._unmeasured(item, "skipped", str(exc)))
            raise
        except PerfguardError as exc:
            self.record(self._unmeasured(item, "failed", str(exc)))
            raise
        except Exception as exc:
            self.record(self._unmeasured(item, "error", f"{type(exc).__name__}: {exc}"))
            raise
        self.record(result)

    def _unmeasured(self, item: ScenarioItem, status: str, message: str) -> ScenarioResult:
        """The record of a cell that produced no figures, so the results file lists it."""
        scenario = item.scenario
        path = item.path
        suite = (
            path.relative_to(self.rootdir).as_posix()
            if path.is_relative_to(self.rootdir)
            else path.as_posix()
        )
        return ScenarioResult(
            id=scenario.scenario_id(self.rootdir),
            suite=suite,
            name=scenario.item_name,
            backend=scenario.backend,
            device=scenario.device,
            precision=scenario.precision,
            status=status,
            message=message,
            threads=scenario.threads,
            tags=scenario.tags,
        )

    def record(self, result: ScenarioResult) -> None:
        self.results[result.id] = result

    # -- xdist --------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        payload = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT_KEY)
        for data in json.loads(payload) if payload else []:
            self.record(ScenarioResult.from_dict(data))

    # -- end of session -----------------------------------------------------------
    def run_result(self) -> RunResult:
        return RunResult(
            commit=self.commit,
            environment=self.environment,
            scenarios=tuple(self.results.values()),
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            perfguard_version=__version__,
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            output = self.config.workeroutput  # type: ignore[attr-defined]
            output[_WORKER_OUTPUT_KEY] = json.dumps([r.to_dict() for r in self.results.values()])
            return
        if not self.results:
            return
        from perfguard.resultsio import write_results

        self.results_path = write_results(self.run_result(), self.report_dir)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        commit = self.commit
        where = commit.short if commit.sha else f"uncommitted ({commit.note})"
        dirty = ", dirty" if commit.dirty else ""
        return [
            f"perfguard: commit {where}{dirty}; environment {self.environment.fingerprint}; "
            f"reports -> {self.report_dir}"
        ]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or not self.results:
            return
        from perfguard.summary import summary_lines

        terminalreporter.section("perfguard")
        for line in summary_lines(list(self.results.values())):
            terminalreporter.write_line(line)
        if self.results_path is not None:
            terminalreporter.write_line(f"results: {self.results_path}")
