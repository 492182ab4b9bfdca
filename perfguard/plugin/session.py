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
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfguard import __version__
from perfguard.ab.run import ABConfig, ABRun, base_results
from perfguard.accuracy.run import AccuracyChecker
from perfguard.baseline.git import commit_info
from perfguard.core.atomicio import write_json_atomic
from perfguard.core.errors import AccuracyFailure, BackendUnavailable, GateFailure, PerfguardError
from perfguard.core.policy import DEFAULT_GATES
from perfguard.core.results import CommitInfo, Environment, RunResult, ScenarioResult
from perfguard.core.resultsio import write_results
from perfguard.core.scenario import Scenario
from perfguard.judge.gatekeeper import Gatekeeper, GateSettings, check_can_save, failure_message
from perfguard.judge.verdict import REGRESSION, ScenarioVerdict
from perfguard.machine.env import collect_environment
from perfguard.measure.cell import RunContext, open_session
from perfguard.measure.runner import ScenarioRun
from perfguard.plugin.items import ScenarioItem, SuiteFile
from perfguard.report import render_markdown, write_report
from perfguard.report.github import annotation, in_github_actions, write_step_summary
from perfguard.report.model import ReportInput
from perfguard.report.tables import accuracy_lines, load_lines, summary_lines, verdict_notes
from perfguard.worker.isolate import IsolatedRun

STATE_KEY = pytest.StashKey["PerfguardSession"]()
_WORKER_OUTPUT_KEY = "perfguard_results"
_WORKER_VERDICTS_KEY = "perfguard_verdicts"
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
        self.saved_path: Path | None = None
        self.report_path: Path | None = None
        self.settings = GateSettings(
            baseline=str(
                config.getoption("perfguard_baseline") or config.getini("perfguard_baseline")
            ),
            baseline_dir=self._path_setting("perfguard_baseline_dir", "perfguard_baseline_dir"),
            target_branch=str(
                config.getoption("perfguard_target_branch")
                or config.getini("perfguard_target_branch")
            ),
            save=bool(config.getoption("perfguard_save")),
            allow_dirty=bool(config.getoption("perfguard_allow_dirty")),
            gate=not config.getoption("perfguard_no_gate"),
            confirm_rounds=self._confirm_rounds(config),
            normalise=bool(
                config.getoption("perfguard_normalise") or config.getini("perfguard_normalise")
            ),
            contention_limit=self._contention_limit(config),
        )
        self._gatekeeper: Gatekeeper | None = None
        self.isolate = bool(config.getoption("perfguard_isolate"))
        self.ab: ABRun | None = None
        ab_ref = config.getoption("perfguard_ab")
        if ab_ref:
            self.ab = ABRun(
                self.rootdir,
                ABConfig(ref=str(ab_ref), python=config.getoption("perfguard_ab_python")),
            )
        self.verdicts: dict[str, ScenarioVerdict] = {}
        self.collected_ids: set[str] = set()
        self.collected_suites: set[str] = set()
        self.suites: dict[Path, tuple[Scenario, ...]] = {}
        self.locations: dict[str, tuple[str, int | None]] = {}
        self.accuracy = AccuracyChecker(
            open_session=lambda scenario, calibration: open_session(
                scenario, self.ctx, calibration
            ),
            scenarios_of=lambda path: self.suites.get(Path(path).resolve(), ()),
        )

    # -- settings ---------------------------------------------------------------
    def _path_setting(self, option: str, ini: str) -> Path:
        value = self.config.getoption(option) or str(self.config.getini(ini))
        path = Path(value)
        return path if path.is_absolute() else self.rootdir / path

    @staticmethod
    def _contention_limit(config: pytest.Config) -> float:
        value = config.getoption("perfguard_contention_limit")
        raw = value if value is not None else config.getini("perfguard_contention_limit")
        try:
            limit = float(raw)
        except ValueError:
            limit = -1.0
        if not limit >= 0.0:  # also refuses NaN
            raise pytest.UsageError(
                f"perfguard: contention limit is {raw!r}; expected a share of all CPUs >= 0 "
                "(0.1: other processes may use 10% of the CPUs; 1 or more: never invalid). "
                "Fix: set --perfguard-contention-limit or ini perfguard_contention_limit"
            )
        return limit

    @staticmethod
    def _confirm_rounds(config: pytest.Config) -> int:
        value = config.getoption("perfguard_confirm_rounds")
        raw = value if value is not None else config.getini("perfguard_confirm_rounds")
        try:
            rounds = int(raw)
        except ValueError:
            rounds = -1
        if rounds < 0:
            raise pytest.UsageError(
                f"perfguard_confirm_rounds must be an integer >= 0, given: {raw!r}"
            )
        return rounds

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
            self._commit = commit_info(self.rootdir)
        return self._commit

    @property
    def environment(self) -> Environment:
        if self._environment is None:
            extra: dict[str, str] = {}
            for fields in self.config.hook.pytest_perfguard_environment(config=self.config):
                extra.update({str(k): str(v) for k, v in (fields or {}).items()})
            self._environment = collect_environment(extra)
        return self._environment

    @property
    def gatekeeper(self) -> Gatekeeper:
        if self._gatekeeper is None:
            self._gatekeeper = Gatekeeper(self.settings, self.rootdir, self.environment)
        return self._gatekeeper

    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Refuse a save that cannot be honoured, and resolve the baseline, before
        # minutes of measurement are spent.
        refusal = None if self.is_worker else check_can_save(self.settings, self.commit)
        if refusal:
            raise pytest.UsageError(refusal)
        try:
            self.gatekeeper.choice  # noqa: B018 - resolved now so errors surface at start
            if self.ab is not None and not self.is_worker:
                self.ab.start()
        except PerfguardError as exc:
            if self.ab is not None:
                self.ab.close()
            raise pytest.UsageError(f"perfguard: {exc}") from exc

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
        return SuiteFile.from_parent(parent, path=file_path, runner=self)

    @pytest.hookimpl
    def pytest_itemcollected(self, item: pytest.Item) -> None:
        scenario = getattr(item, "scenario", None)
        if scenario is not None:
            sid = scenario.scenario_id(self.rootdir)
            line = scenario.location.line
        elif "benchmark" in getattr(item, "fixturenames", ()):
            sid = item.nodeid
            line = item.location[1] + 1 if item.location[1] is not None else None
        else:
            return
        self.collected_ids.add(sid)
        self.collected_suites.add(sid.split("::", 1)[0])
        self.locations[sid] = (str(item.path), line)

    def register_suite(self, path: Path, scenarios: tuple[Scenario, ...]) -> None:
        """Remember a suite's cells: accuracy references are looked up among them."""
        self.suites[Path(path).resolve()] = scenarios

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
            result, verdict = self._measure_and_judge(scenario)
        except BackendUnavailable as exc:
            self.record(self._unmeasured(item, "skipped", str(exc)))
            raise
        except PerfguardError as exc:
            # A load cell keeps its figures (failed requests, an invalid run).
            kept = exc.result if isinstance(exc.result, ScenarioResult) else None
            self.record(kept or self._unmeasured(item, "failed", str(exc)))
            raise
        except Exception as exc:
            self.record(self._unmeasured(item, "error", f"{type(exc).__name__}: {exc}"))
            raise
        self.verdicts[verdict.scenario_id] = verdict
        regressed = verdict.verdict == REGRESSION
        accuracy_failures = list((result.accuracy or {}).get("failures", ()))
        if self.settings.gate and (regressed or accuracy_failures):
            lines = ([failure_message(verdict)] if regressed else []) + accuracy_failures
            message = "\n".join(lines)
            self.record(replace(result, status="failed", message=message))
            if regressed:
                raise GateFailure(message)
            raise AccuracyFailure(message)
        self.record(result)

    def _measure_and_judge(self, scenario: Scenario) -> tuple[ScenarioResult, ScenarioVerdict]:
        ab = self.ab
        if ab is not None and scenario.load is None and ab.why_not_in_base(scenario) is None:
            result, verdict = ab.measure(scenario, self.ctx)
            return self._with_accuracy(scenario, result), verdict
        gatekeeper = self.gatekeeper
        if self.isolate or scenario.isolate:
            with IsolatedRun(scenario, self.ctx) as iso:
                measured = iso.measure()
                result, verdict = gatekeeper.judge_confirmed(measured, scenario.gates, iso.measure)
            result = self._with_accuracy(scenario, result)
        else:
            calibration = self.accuracy.calibration_for(scenario)
            with ScenarioRun(scenario, self.ctx, calibration) as run:
                result, verdict = gatekeeper.judge_confirmed(
                    run.measure(), scenario.gates, run.measure
                )
                if scenario.accuracy is not None:
                    result = self._accuracy_of(scenario, run.session, result)
        if ab is not None:  # only in the working tree, or measured under load
            verdict = ab.outside_ab(scenario, verdict)
        return result, verdict

    def _accuracy_of(
        self, scenario: Scenario, session: Any, result: ScenarioResult
    ) -> ScenarioResult:
        """``result`` with the cell's accuracy checked on ``session``."""
        gatekeeper = self.gatekeeper
        accuracy, golden = self.accuracy.check(
            scenario, session, gatekeeper.baseline_result(result.id), gatekeeper.choice.commit
        )
        return replace(result, accuracy=accuracy, golden_outputs=golden)

    def _with_accuracy(self, scenario: Scenario, result: ScenarioResult) -> ScenarioResult:
        """Accuracy of a cell measured out of process: checked here, in a session of its own."""
        if scenario.accuracy is None:
            return result
        calibration = self.accuracy.calibration_for(scenario)
        with open_session(scenario, self.ctx, calibration) as (session, _prepared, _batch):
            return self._accuracy_of(scenario, session, result)

    def on_benchmark(self, item: pytest.Item, result: ScenarioResult) -> None:
        """A pytest-benchmark test finished: record it and gate it like a scenario.

        pytest-benchmark owns that loop, so there is no confirmation round.
        """
        verdict = self.gatekeeper.judge(result, DEFAULT_GATES)
        self.verdicts[verdict.scenario_id] = verdict
        if verdict.verdict == REGRESSION and self.settings.gate:
            message = failure_message(verdict)
            self.record(replace(result, status="failed", message=message))
            # A plain test function: fail it with the reason alone, not a traceback
            # through perfguard's hook.
            pytest.fail(message, pytrace=False)
        self.record(result)

    def item_properties(self, scenario: Scenario) -> list[tuple[str, object]]:
        """(name, value) pairs for JUnit XML: the cell's figures and its verdict."""
        sid = scenario.scenario_id(self.rootdir)
        result = self.results.get(sid)
        if result is None:
            return []
        props: list[tuple[str, object]] = [("perfguard_status", result.status)]
        if result.latency_ns is not None:
            for key in ("p50", "p95", "p99"):
                props.append(
                    (f"perfguard_{key}_ms", round(getattr(result.latency_ns, key) / 1e6, 6))
                )
            props.append(("perfguard_n", result.latency_ns.n))
        if result.throughput is not None:
            props.append(("perfguard_throughput", round(result.throughput, 3)))
        if result.peak_memory_mib is not None:
            props.append(("perfguard_peak_memory_mib", round(result.peak_memory_mib, 1)))
        verdict = self.verdicts.get(sid)
        if verdict is not None:
            props.append(("perfguard_verdict", verdict.verdict))
            p95 = verdict.metric("p95")
            if p95 is not None and p95.change is not None:
                props.append(("perfguard_p95_change_pct", round(p95.change * 100, 2)))
        if result.accuracy:
            props.append(("perfguard_accuracy_passed", bool(result.accuracy.get("passed", True))))
        return props

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
        output = getattr(node, "workeroutput", {})
        for data in json.loads(output.get(_WORKER_OUTPUT_KEY) or "[]"):
            self.record(ScenarioResult.from_dict(data))
        for data in json.loads(output.get(_WORKER_VERDICTS_KEY) or "[]"):
            verdict = ScenarioVerdict.from_dict(data)
            self.verdicts[verdict.scenario_id] = verdict

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
            output[_WORKER_VERDICTS_KEY] = json.dumps([v.to_dict() for v in self.verdicts.values()])
            return
        if not self.results:
            if self.ab is not None:
                self.ab.close()
            return
        gatekeeper = self.gatekeeper
        if self.ab is not None:
            try:
                for sid, verdict in self.ab.missing_verdicts(self.suites, self.collected_ids):
                    self.verdicts.setdefault(sid, verdict)
            finally:
                self.ab.close()  # the base worktree goes on every exit path
        else:
            gatekeeper.missing(self.collected_suites, self.collected_ids)
        self.verdicts.update(
            {k: v for k, v in gatekeeper.verdicts.items() if k not in self.verdicts}
        )
        run = self.run_result()
        self.results_path = write_results(run, self.report_dir)
        write_json_atomic(
            self.results_path.with_name("comparison.json"),
            {
                "schema_version": 1,
                "baseline": gatekeeper.choice.to_dict(),
                "gate": self.settings.gate,
                "verdicts": [v.to_dict() for v in self.verdicts.values()],
            },
        )
        if self.settings.save:
            self.saved_path = gatekeeper.save(run)
        self.report_path = self._write_report(run)

    def _write_report(self, run: RunResult) -> Path:
        """report.html + summary.md beside results.json; the job summary on GitHub."""
        gatekeeper = self.gatekeeper
        choice = gatekeeper.choice
        baseline = {}
        if self.ab is not None:
            baseline = base_results(self.verdicts, self.results)
        elif choice.baseline is not None:
            for sid in choice.baseline.scenario_ids():
                pooled = choice.baseline.pooled(sid)
                if pooled is not None:
                    baseline[sid] = pooled
        report = ReportInput(
            run=run,
            verdicts=tuple(self.verdicts.values()),
            baseline=baseline,
            baseline_info=(
                {**choice.to_dict(), "commit": self.ab.base.sha, "how": self.ab.how}
                if self.ab is not None and self.ab.base is not None
                else choice.to_dict()
            ),
            baseline_environment=(
                choice.baseline.launches[-1].environment if choice.baseline else None
            ),
            history={sid: gatekeeper.history_results(sid) for sid in self.results},
            gate=self.settings.gate,
        )
        path = write_report(report, self.report_dir)
        if in_github_actions():
            write_step_summary(render_markdown(report))
        return path

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        commit = self.commit
        where = commit.short if commit.sha else f"uncommitted ({commit.note})"
        dirty = ", dirty" if commit.dirty else ""
        return [
            f"perfguard: commit {where}{dirty}; environment {self.environment.fingerprint}; "
            f"reports -> {self.report_dir}"
        ]

    def _annotations(self) -> list[str]:
        """Under GitHub Actions, one ``::error`` per failed cell, at its suite line."""
        if not in_github_actions():
            return []
        lines = []
        for result in self.results.values():
            if result.status not in ("failed", "error"):
                continue
            path, line = self.locations.get(result.id, (result.suite, None))
            title = f"perfguard: {result.name}"
            lines.append(annotation(path, line, title, result.message or result.status))
        return lines

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or not self.results:
            return
        terminalreporter.section("perfguard")
        choice = self.gatekeeper.choice
        how = f"same-run A/B against {self.ab.label}" if self.ab and self.ab.base else choice.how
        terminalreporter.write_line(f"baseline: {how}")
        for line in summary_lines(list(self.results.values()), self.verdicts):
            terminalreporter.write_line(line)
        loaded = load_lines(list(self.results.values()))
        if loaded:
            terminalreporter.write_line("under load (latency from the scheduled send time):")
        for line in loaded:
            terminalreporter.write_line(line)
        for line in accuracy_lines(list(self.results.values())):
            terminalreporter.write_line(f"accuracy: {line}")
        for line in verdict_notes(self.verdicts.values()):
            terminalreporter.write_line(line, yellow=True)
        for line in self._annotations():
            terminalreporter.write_line(line)
        if self.results_path is not None:
            terminalreporter.write_line(f"results: {self.results_path}")
        if self.report_path is not None:
            terminalreporter.write_line(f"report: {self.report_path}")
        if self.saved_path is not None:
            terminalreporter.write_line(f"baseline saved: {self.saved_path}")
