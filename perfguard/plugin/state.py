"""The state of one ``pytest --perfguard`` run, registered as a plugin object.

``configure`` registers one ``PerfguardSession`` (and the pytest-benchmark bridge);
its hook methods delegate: settings come from ``perfguard.plugin.settings``, a cell
is measured on the path ``perfguard.run.cell`` chooses, files are written by
``perfguard.run.finish``, the summary printed by ``perfguard.plugin.terminal``.
Under pytest-xdist the workers measure and ship their results to the controller
(``perfguard.plugin.xdist_transport``), which alone writes files.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import time
import warnings
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfguard import __version__
from perfguard.ab.abrun import ABRun
from perfguard.baseline.git import commit_info
from perfguard.core import progress
from perfguard.core.errors import (
    PerfguardError,
    ShardError,
)
from perfguard.core.paths import display_path
from perfguard.core.policy import DEFAULT_GATES
from perfguard.core.scenario import Scenario
from perfguard.core.text import plain
from perfguard.interop.benchmark_bridge import register_bridge
from perfguard.judge.gatekeeper import (
    Gatekeeper,
    failure_message,
)
from perfguard.judge.outcome import run_outcome
from perfguard.judge.save import check_can_save
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.machine.env import collect_environment
from perfguard.measure.opencell import RunContext
from perfguard.measure.quiet import QuietWaiter
from perfguard.models.factory import forget_factory_models
from perfguard.models.inputs import check_input_sizes
from perfguard.plugin import pinning, xdist_transport
from perfguard.plugin.items import ScenarioItem, SuiteFile, junit_properties
from perfguard.plugin.settings import RunSettings
from perfguard.plugin.sharding import check_plan, keep_shard, plan_items
from perfguard.plugin.sheets import RunnerSheets
from perfguard.plugin.terminal import ProgressPrinter, header_line, write_summary
from perfguard.plugin.threads import ThreadWatch
from perfguard.plugin.upfront import first_problem
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult, Status
from perfguard.report.runfolder import RunFolder, run_dir
from perfguard.run.cell import CellMeasurer, ended_by, judged_end
from perfguard.run.finish import (
    WRITE_FAILED_EXIT,
    Finished,
    RunFiles,
    base_side,
    finish_run,
    missing_verdicts,
    save_withheld,
    untracked_note,
)
from perfguard.shard.plan import (
    PLAN_FILENAME,
    ShardPlan,
    ShardSpec,
    plan_path,
    write_plan,
    write_plan_file,
)
from perfguard.suite.files import SUITE_SUFFIXES, is_suite_path
from perfguard.suite.project import project_libraries

STATE_KEY = pytest.StashKey["PerfguardSession"]()
PLUGIN_NAME = "perfguard-session"
_SHOWN_YAML = 5  # YAML files named when no suite was collected


def configure(config: pytest.Config) -> None:
    """Start a ``--perfguard`` run: register its state, and the pytest-benchmark bridge."""
    session = PerfguardSession(config, RunSettings.from_config(config))
    config.stash[STATE_KEY] = session
    config.pluginmanager.register(session, PLUGIN_NAME)
    # pytest-benchmark tests join the same results, comparison and gate.
    register_bridge(config, session.on_benchmark)


def unconfigure(config: pytest.Config) -> None:
    """End the run: the A/B worktree goes however the session ended, and so does the
    factory model kept for the session's cells (its memory, and a stale build in the
    next session of this process)."""
    forget_factory_models()
    session = config.stash.get(STATE_KEY, None)
    if session is not None:
        session.progress.close()
        if session.ab is not None:
            session.ab.close()
        if session.run_folder is not None:
            session.run_folder.release()
        # Threads model code left would hang the interpreter at exit: end without them.
        session.threads.exit_without_them(session.exit_status)
        del config.stash[STATE_KEY]
        config.pluginmanager.unregister(session)


#: What ends a cell without being its failure: the user's Ctrl-C, and pytest's own
#: outcomes (skip, fail, xfail, exit), which pytest reports itself.
_NOT_A_CELL_FAILURE: tuple[type[BaseException], ...] = (
    KeyboardInterrupt,
    pytest.skip.Exception,
    pytest.fail.Exception,
    pytest.xfail.Exception,
    pytest.exit.Exception,
)


class PerfguardSession:
    """Holds the run's results; its methods are pytest hooks that delegate."""

    def __init__(self, config: pytest.Config, settings: RunSettings) -> None:
        self.config = config
        self.settings = settings
        self.rootdir = settings.rootdir
        self.report_dir = settings.report_dir
        self.is_worker = settings.is_worker
        self.ctx = RunContext(
            rootdir=self.rootdir,
            cache_dir=settings.cache_dir,
            open_timeout_s=settings.open_timeout_s,
        )
        self.results: dict[str, ScenarioResult] = {}
        self.verdicts: dict[str, ScenarioVerdict] = {}
        self.collected_ids: set[str] = set()
        self.collected_suites: set[str] = set()
        self.suites: dict[Path, tuple[Scenario, ...]] = {}
        self.locations: dict[str, tuple[str, int | None]] = {}
        self.files = RunFiles()
        # Collection, for the explanation when no suite is collected (nothing_collected).
        self.suite_files = 0
        self.other_yaml: list[Path] = []  # YAML files seen that matched no suite pattern
        #: The run's end (files, exit status, outcome, the save), from sessionfinish.
        self.finished: Finished | None = None
        # --perfguard-shard: who measures what (on an xdist controller, from a worker).
        self.plan: ShardPlan | None = None
        self._plan_out_tried = False  # --perfguard-shard-plan-out: written once,
        self._plan_out: Path | None = None  # here, when the write succeeded
        self._plan_shown = False  # the plan's lines are on the terminal
        # A usage error an xdist worker found after start-up (the controller says it).
        self.usage_error: str | None = None
        self._cell_started: int | None = None  # perf_counter_ns() as the current cell began
        # Non-daemon threads cells leave running (reported; the exit does not wait).
        self.threads = ThreadWatch()
        # This run's claim on its report folder (the controller's, from sessionstart).
        self.run_folder: RunFolder | None = None
        self._session: pytest.Session | None = None
        # Live progress of long steps (export, quantization, A/B pairs) on the terminal.
        self.progress = contextlib.ExitStack()
        self._commit: CommitInfo | None = None
        self._environment: Environment | None = None
        self._gatekeeper: Gatekeeper | None = None
        self.ab = ABRun(self.rootdir, settings.ab) if settings.ab is not None else None
        # This runner's calibration sheets (perfguard calibrate), read when first needed.
        self.sheets = RunnerSheets(
            settings.judging.baseline_dir, lambda: self.environment.fingerprint
        )
        self.measurer = CellMeasurer(
            self.ctx,
            isolate=settings.isolate,
            ab=self.ab,
            gatekeeper=lambda: self.gatekeeper,
            suites=self.suites,
            profile_every=settings.profile,
            # Traces go beside results.json; an xdist worker writes them there too.
            run_folder=lambda: run_dir(
                self.report_dir, self.commit, "ab" if self.ab is not None else "plain"
            ),
        )

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
            settings = self.settings
            libraries = project_libraries(
                settings.rootdir,
                settings.suite_patterns,
                settings.explicit_args,
                tuple(Path(p) for p in settings.pythonpath),
            )
            self._environment = collect_environment(extra, libraries)
        return self._environment

    @property
    def gatekeeper(self) -> Gatekeeper:
        if self._gatekeeper is None:
            judging = self.settings.judging
            self._gatekeeper = Gatekeeper(
                judging,
                self.rootdir,
                self.environment,
                # One budget of waiting for quiet for the whole session.
                quiet=QuietWaiter(judging.contention_limit),
            )
        return self._gatekeeper

    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Refuse a save that cannot be honoured, and resolve the baseline, before
        # minutes of measurement are spent.
        refusal = (
            None
            if self.is_worker
            else check_can_save(
                self.commit,
                save=self.settings.judging.save,
                allow_dirty=self.settings.judging.allow_dirty,
            )
        )
        if refusal is None and self.settings.judging.save and self.ab is not None:
            refusal = (
                "--perfguard-save refused with --perfguard-ab: a same-run A/B run is measured "
                "interleaved with its base, so its figures would skew every later comparison "
                "against the archive; save a plain run (drop --perfguard-ab)"
            )
        if refusal is None and not self.is_worker and not self.config.option.collectonly:
            # The files the run will write, checked before minutes of measurement.
            refusal = first_problem(
                self.settings,
                lambda: self.environment.fingerprint,
                self.commit.sha,
            )
        if refusal:
            raise pytest.UsageError(refusal)
        self._session = session
        if not self.is_worker and not self.config.option.collectonly:
            self._claim_run_folder()
        if not self.is_worker:
            self.progress.enter_context(progress.sink(ProgressPrinter.for_config(self.config)))
        try:
            self.gatekeeper.choice  # noqa: B018 - resolved now so errors surface at start
            if self.ab is not None:
                # Every xdist worker pairs its cells against a base worktree of its own.
                self.ab.start()
        except PerfguardError as exc:
            if self.ab is not None:
                self.ab.close()
            raise pytest.UsageError(f"perfguard: {exc}") from exc

    def _claim_run_folder(self) -> None:
        """One run at a time writes the run folder; under xdist the workers measure
        (and write traces) as soon as they start, so its old files go now."""
        folder = run_dir(self.report_dir, self.commit, "ab" if self.ab is not None else "plain")
        try:
            self.run_folder = RunFolder.claim(folder, also=(PLAN_FILENAME,))
        except OSError as exc:
            raise pytest.UsageError(
                f"perfguard: cannot create the run folder {folder}: "
                f"{exc.strerror or type(exc).__name__}. Fix: make "
                f"{self.report_dir} writable, or choose another with --perfguard-report-dir"
            ) from exc
        except PerfguardError as exc:
            raise pytest.UsageError(f"perfguard: {exc}") from exc
        if _distributed(self.config):
            self.run_folder.clear()

    @property
    def exit_status(self) -> int:
        """pytest's exit status of the session so far."""
        return int(self._session.exitstatus) if self._session is not None else 0

    # -- collection -------------------------------------------------------------
    def is_suite(self, file_path: Path) -> bool:
        if file_path.suffix not in SUITE_SUFFIXES:
            return False
        if file_path.resolve() in self.settings.explicit_args:
            return True
        rel = display_path(file_path, self.rootdir)
        return is_suite_path(rel, self.settings.suite_patterns)

    @pytest.hookimpl
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        if not self.is_suite(file_path):
            if file_path.suffix in SUITE_SUFFIXES:
                self.other_yaml.append(file_path)
            return None
        self.suite_files += 1
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

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if getattr(config, "workerinput", {}).get("workerid", "gw0") == "gw0":
            # Said once per run: here, or by the first of the xdist workers.
            cells = [getattr(item, "scenario", None) for item in items]
            self.sheets.warn_tight(
                ((sc.scenario_id(self.rootdir), sc) for sc in cells if sc is not None),
                "ab" if self.ab is not None else "archived",
            )
        shard = self.settings.shard
        if shard is None:
            return
        fixed = self.settings.shard_plan
        try:
            if fixed is not None:
                # The plan made before the shards started, whatever this runner's archive
                # says; it must be of exactly the tests collected here.
                check_plan(items, fixed, self.rootdir)
                self.plan = fixed.plan
            else:
                baseline = self.gatekeeper.choice.baseline
                self.plan = plan_items(items, shard.total, self.rootdir, baseline)
        except ShardError as exc:
            if not self.is_worker:
                raise pytest.UsageError(f"perfguard: {exc}") from exc
            # Raised in an xdist worker, the error would reach the controller as an
            # internal error without its message: run nothing, and ship it instead.
            self.usage_error = f"perfguard: {exc}"
            config.hook.pytest_deselected(items=list(items))
            items.clear()
            return
        keep_shard(config, items, self.plan, shard)
        if not self.is_worker:
            # This process collected (no xdist, or --collect-only under it): the plan is
            # known now, before anything is measured.
            self._write_plan_out(self.plan, fail=True)

    def _write_plan_out(self, plan: ShardPlan | None, *, fail: bool) -> None:
        """``--perfguard-shard-plan-out``: the whole plan, once per run. ``fail``: a write
        that fails stops the run (a plan job must not pass without its plan); otherwise
        it is reported with the run's other files."""
        out = self.settings.shard_plan_out
        if out is None or plan is None or self._plan_out_tried:
            return
        self._plan_out_tried = True
        if not fail:
            written = self.files.attempt("the shard plan", out, lambda: write_plan_file(plan, out))
            self._plan_out = written
            return
        try:
            self._plan_out = write_plan_file(plan, out)
        except OSError as exc:
            raise pytest.UsageError(
                f"perfguard: cannot write the shard plan to {out} "
                f"(--perfguard-shard-plan-out): {exc.strerror or type(exc).__name__}. "
                f"Fix: make {out.parent} a writable directory with free space"
            ) from exc

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After pytest's "collected N items / M deselected" line, never inside it.
        shard, plan = self.settings.shard, self.plan
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if shard is None or plan is None or reporter is None or self.is_worker:
            return
        self._write_plan_lines(reporter.write_line, shard, plan)

    def _write_plan_lines(self, write: Any, shard: ShardSpec, plan: ShardPlan) -> None:
        self._plan_shown = True
        verbose = self.config.get_verbosity() > 0
        for line in plan.lines(shard.index, verbose=verbose):
            write(f"perfguard: {line}")
        fixed = self.settings.shard_plan
        if fixed is not None:
            where = display_path(fixed.path, self.rootdir)
            write(
                f"perfguard: shard plan {plan.digest} from {where} ({fixed.source}), "
                "made before the shards started"
            )
        if self._plan_out is not None:
            write(f"perfguard: shard plan {plan.digest} written to {self._plan_out}")

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
        # What the cell costs, everything included, however it ends (``record``): the
        # cost a shard plan balances.
        self._cell_started = time.perf_counter_ns()
        if self.run_folder is not None:
            self.run_folder.clear()  # the previous run's report goes as this one measures
        try:
            with self.threads.cell(item.scenario.scenario_id(self.rootdir)):
                self._run_item(item)
        finally:
            self._cell_started = None

    def _run_item(self, item: ScenarioItem) -> None:
        # What the outcome means is run.cell's to decide; here it is recorded and raised.
        fails = self._inconclusive_fails()
        try:
            self._check_input_sizes(item.scenario)
            result, verdict = self.measurer.measure_and_judge(item.scenario)
            note = self.sheets.note(verdict.scenario_id, item.scenario, verdict.mode)
            if note is not None:
                verdict = replace(verdict, calibration=note)
        except _NOT_A_CELL_FAILURE:
            raise
        except BaseException as exc:
            stopped = ended_by(
                exc,
                lambda status, message: self._unmeasured(item, status, message),
                inconclusive_fails=fails,
            )
            self.record(stopped.record)
            if stopped.failure is not None:
                raise stopped.failure from exc
            raise
        self.verdicts[verdict.scenario_id] = verdict
        end = judged_end(
            result,
            verdict,
            gate=self.settings.judging.gate,
            inconclusive_fails=fails,
            base_profile=self.measurer.base_profile,
        )
        self.record(end.record)
        if end.failure is not None:
            raise end.failure
        if end.warning is not None:
            warnings.warn(end.warning, stacklevel=2)

    def _check_input_sizes(self, scenario: Scenario) -> None:
        """Refuse inputs over the size limit, or the memory available, before any is made."""
        check_input_sizes(
            scenario.model,
            scenario.accuracy.inputs if scenario.accuracy is not None else None,
            limit_bytes=self.settings.max_input_bytes,
            limit_setting="--perfguard-max-input-mib / ini perfguard_max_input_mib",
        )

    def _inconclusive_fails(self) -> bool:
        judging = self.settings.judging
        return judging.gate and judging.inconclusive == "fail"

    def on_benchmark(self, item: pytest.Item, result: ScenarioResult) -> None:
        """A pytest-benchmark test finished: record it and gate it like a scenario.

        pytest-benchmark owns that loop, so there is no confirmation round.
        """
        if self.run_folder is not None:
            self.run_folder.clear()
        verdict = self.gatekeeper.judge(result, DEFAULT_GATES)
        self.verdicts[verdict.scenario_id] = verdict
        if verdict.failed and self.settings.judging.gate:
            message = failure_message(verdict)
            self.record(replace(result, status=Status.FAILED, message=message))
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
        return junit_properties(result, self.verdicts.get(sid))

    def _unmeasured(self, item: ScenarioItem, status: Status, message: str) -> ScenarioResult:
        """The record of a cell that produced no figures, so the results file lists it."""
        return ScenarioResult.for_cell(item.scenario, self.rootdir, status=status, message=message)

    def record(self, result: ScenarioResult) -> None:
        # A message may carry a model's or an exception's text: nothing in it may act
        # on the terminal, a CI log or a report that shows it (``plain``).
        if result.message and plain(result.message) != result.message:
            result = replace(result, message=plain(result.message))
        if result.wall_ns is None and self._cell_started is not None:
            result = replace(result, wall_ns=time.perf_counter_ns() - self._cell_started)
        self.results[result.id] = result

    # -- xdist --------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        results, verdicts, plan = xdist_transport.receive(node)
        self.plan = self.plan or plan
        self.usage_error = self.usage_error or xdist_transport.received_usage_error(node)
        for result in results:
            self.record(result)
        for verdict in verdicts:
            self.verdicts[verdict.scenario_id] = verdict

    # -- end of session -----------------------------------------------------------
    def run_result(self) -> RunResult:
        environment = self.environment
        placed = pinning.recorded(self.config)  # pytest-xdist workers' cores and devices
        if placed:
            environment = replace(environment, recorded={**environment.recorded, **placed})
        return RunResult(
            commit=self.commit,
            environment=environment,
            scenarios=tuple(self.results.values()),
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            perfguard_version=__version__,
            mode="ab" if self.ab is not None else "plain",
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            # Every worker collected every suite: their missing verdicts agree.
            self._judge_missing()
            output = self.config.workeroutput  # type: ignore[attr-defined]
            xdist_transport.ship(output, self.results.values(), self.verdicts.values(), self.plan)
            if self.usage_error is not None:
                xdist_transport.ship_usage_error(output, self.usage_error)
            return
        self.progress.close()
        if self.usage_error is not None:
            # As pytest ends a usage error: exit status 4, no files (nothing ran).
            if self.ab is not None:
                self.ab.close()
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        shard, plan = self.settings.shard, self.plan
        if shard is not None and plan is not None:
            # A shard always leaves its files, even with no cell: they tell the merge it
            # ran. More shards than cells leaves one with nothing to run: no failure.
            nothing = not plan.items(shard.index)
            if nothing and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
                session.exitstatus = pytest.ExitCode.OK
                exitstatus = int(pytest.ExitCode.OK)
            # An xdist controller learns the plan from its workers, at their end.
            self._write_plan_out(plan, fail=False)
            if self.config.option.collectonly:
                # Nothing ran: no run files (they would replace a real run's report).
                if self.files.failed and session.exitstatus == pytest.ExitCode.OK:
                    session.exitstatus = pytest.ExitCode(WRITE_FAILED_EXIT)
                return
        elif not self.results:
            if self.ab is not None:
                self.ab.close()
            return
        try:
            self._judge_missing()
        finally:
            if self.ab is not None:
                self.ab.close()  # the base worktree goes on every exit path
        settings, gatekeeper = self.settings, self.gatekeeper
        self._commit, untracked = untracked_note(
            self.commit,
            self.rootdir,
            self.results.values(),
            exclude=(
                settings.report_dir,
                settings.cache_dir,
                settings.judging.baseline_dir,
                self.rootdir / ".pytest_cache",
            ),
        )
        run = self.run_result()
        choice = gatekeeper.choice
        ab_base = (self.ab.base.sha, self.ab.how) if self.ab and self.ab.base else None
        also = []
        if shard is not None and plan is not None:
            folder = run_dir(settings.report_dir, run.commit, run.mode)
            limit = settings.judging.contention_limit
            also.append(
                (
                    "the shard plan",
                    plan_path(folder),
                    lambda: write_plan(plan, shard, folder, contention_limit=limit),
                )
            )
        self.finished = finish_run(
            run,
            self.verdicts,
            report_dir=settings.report_dir,
            judging=settings.judging,
            gatekeeper=gatekeeper,
            base=base_side(
                choice.to_dict(),
                choice.baseline,
                run,
                self.verdicts,
                history={r.id: gatekeeper.archive.history_results(r.id) for r in run.scenarios},
                ab_base=ab_base if self.ab is not None else None,
            ),
            exit_status=int(exitstatus),
            save_withheld=save_withheld(
                settings.judging,
                stopped=stopped_early(session, exitstatus),
                untracked=untracked,
            ),
            files=self.files,
            also=also,
        )
        if self.finished.status and session.exitstatus == pytest.ExitCode.OK:
            # A refused save: the CI baseline job must fail visibly, not leave the old
            # baseline in place (the files written above already say so).
            session.exitstatus = pytest.ExitCode(self.finished.status)

    def _judge_missing(self) -> None:
        """``missing`` verdicts for the base's cells this run did not collect (none on
        an xdist controller, which collects nothing): judged once, by the first shard
        of a sharded run."""
        shard = self.settings.shard
        if shard is not None and shard.index != 1:
            return
        found = missing_verdicts(self.gatekeeper, self.ab, self.suites, self.collected_ids)
        for sid, verdict in found.items():
            self.verdicts.setdefault(sid, verdict)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return [header_line(self.commit, self.environment, self.report_dir)]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
        if self.usage_error is not None:
            terminalreporter.write_line(f"ERROR: {self.usage_error}", red=True, bold=True)
            return
        if not self.suite_files and not self.collected_ids and not _distributed(self.config):
            for line, fix in nothing_collected(self.config, self.settings, self.other_yaml):
                terminalreporter.write_line(f"perfguard: {line}", yellow=True, bold=fix)
        shard = self.settings.shard
        if shard is not None and self.plan is not None and not self._plan_shown:
            # Under xdist the workers planned (and printed nowhere): say it here.
            self._write_plan_lines(terminalreporter.write_line, shard, self.plan)
        if not self.results:
            return
        how = self.gatekeeper.choice.how
        if self.ab is not None and self.ab.base is not None:
            how = f"same-run A/B against {self.ab.label}"
        # Set at sessionfinish with pytest's exit status; judged here without it only
        # when the session ended before its files were written.
        finished = self.finished
        outcome = (
            finished.outcome
            if finished is not None
            else run_outcome(
                self.results.values(), self.verdicts.values(), gate=self.settings.judging.gate
            )
        )
        write_summary(
            terminalreporter,
            baseline_how=how,
            results=list(self.results.values()),
            verdicts=self.verdicts,
            locations=self.locations,
            files=self.files,
            outcome=outcome,
        )
        if finished is not None:
            for line, failed in finished.save_lines():
                terminalreporter.write_line(line, **({"red": True} if failed else {"yellow": True}))
        for line in self.threads.summary_lines():
            terminalreporter.write_line(line, yellow=True)


def stopped_early(session: pytest.Session, exitstatus: int) -> str | None:
    """How the session stopped before running every item (Ctrl-C, -x, --maxfail), or None."""
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        return "the session was interrupted (Ctrl-C or a signal)"
    for reason in (session.shouldfail, session.shouldstop):
        if reason:
            return f"the session stopped early ({reason})"
    return None


def nothing_collected(
    config: pytest.Config, settings: RunSettings, seen_yaml: list[Path]
) -> list[tuple[str, bool]]:
    """Why no suite was collected, and the fix: (line, is the fix) pairs.

    ``seen_yaml``: the YAML files pytest walked past that matched no suite pattern
    (pytest also walks the siblings of the paths given: only those under them count).
    """
    base = Path(config.invocation_params.dir)
    roots = [(base / arg.split("::", 1)[0]).resolve() for arg in config.args]
    other_yaml = [
        display_path(path, settings.rootdir)
        for path in seen_yaml
        if any(path.resolve().is_relative_to(root) for root in roots)
    ]
    source = {
        pytest.Config.ArgsSource.ARGS: "given on the command line",
        pytest.Config.ArgsSource.TESTPATHS: "ini testpaths",
    }.get(config.args_source, "the current directory")
    paths = ", ".join(config.args) or "."
    patterns = ", ".join(settings.suite_patterns) or "(none)"
    lines = [
        (
            f"no suite collected from {paths} ({source}). A YAML file is a suite when it is "
            "named on the command line, or when its path relative to the rootdir "
            f"({settings.rootdir}) matches perfguard_suite_patterns: {patterns}",
            False,
        )
    ]
    if other_yaml:
        shown = ", ".join(other_yaml[:_SHOWN_YAML])
        more = len(other_yaml) - _SHOWN_YAML
        lines.append(
            (
                f"YAML files found that match no pattern: {shown}"
                + (f" (and {more} more)" if more > 0 else ""),
                False,
            )
        )
        first = other_yaml[0]
        folder = first.rsplit("/", 1)[0] if "/" in first else ""
        pattern = f"{folder}/*.yaml" if folder else "*.yaml"
        lines.append(
            (
                f"Fix: name the suite on the command line (pytest --perfguard {first}), move "
                "it to match a pattern (e.g. suites/<name>.yaml), or set "
                f'perfguard_suite_patterns (e.g. perfguard_suite_patterns = ["{pattern}"] '
                "under [tool.pytest.ini_options])",
                True,
            )
        )
    else:
        lines.append(
            (
                "Fix: pass the folder or file that holds your suites (pytest --perfguard "
                "suites/), or write a starter suite with `perfguard init`",
                True,
            )
        )
    return lines


def _distributed(config: pytest.Config) -> bool:
    """A pytest-xdist controller: its workers collect, it sees no file."""
    return str(config.getoption("dist", "no") or "no") != "no"
