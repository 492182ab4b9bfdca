"""``perfguard calibrate``: what the gate can see on this runner, measured on the user's
own cells (issue 31).

For each selected cell, runs in the gate's mode. **Same-run A/B** (the default): a
fresh worker per run opens the working tree's cell twice (slots ``a`` and ``b``), warms
both up and alternates requests with the same stopping rule as the gate
(:func:`perfguard.ab.abrun.run_pairs`, the cell's latency limit), or, for a cell under
``load:``, rounds of load levels (:func:`perfguard.ab.abrun.run_load_rounds`).
**Archived** (on request): the cell measured whole (the worker's ``result``) in a fresh
worker as the baseline and again in another as the run to judge, judged as the archived
gate judges (``compare_scenario``, ``Rounds``: an inconclusive run re-measured after
waiting for quiet, a regression confirmed). **A/A** runs leave both sides as they are;
**planted** runs slow side ``b`` (the judged run) by a fraction of each of its
requests' own time (``open``'s ``plant``: :mod:`perfguard.measure.plant`; every load
client's requests too), at sizes around the cell's limit (its limit and twice it unless
the caller names them). The runs of all conditions come in one order shuffled from the
seed, so a calibration cut short by its budget still samples each condition.

Every run is written at once to the calibration file
(:class:`perfguard.judge.calibration.CalibrationFile`,
``<baseline-dir>/<fingerprint>/calibration.json``, atomically), so a calibration
stopped or out of budget resumes where it ended: a cell's runs are kept while the plan
that made them (mode, gated figure, limit, sizes, seed) is the same, and dropped, with a
line saying so, when it changed. The sheet (:mod:`perfguard.judge.calibration`) is
written beside the runs. ``check_command`` (``--check``) makes a few A/A runs of each
calibrated cell and checks them against its sheets.

A generative cell's slowdown is planted per token (TTFT, every ITL and the whole
request grow by the fraction); its A/B runs are the gate's token pairs, and its sheet
counts the decision on the gated latency figure.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfguard.ab.abrun import (
    Slot,
    latency_gate,
    load_plan,
    run_load_rounds,
    run_pairs,
    run_token_pairs,
    warm_up_sides,
    worker_env,
)
from perfguard.ab.paired import StoppingRule
from perfguard.ab.tokenpairs import token_gates
from perfguard.core.blame import first_line
from perfguard.core.errors import PerfguardError, StoreError
from perfguard.core.policy import (
    CONFIRM_ROUNDS,
    CONTENTION_LIMIT,
    DEFAULT_GATES,
    LATENCY_QS,
    GateSpec,
)
from perfguard.core.scenario import Scenario
from perfguard.judge.calibration import (
    CAUGHT_RUNS,
    MODES,
    CalibrationFile,
    CalibrationRun,
    CellSheet,
    Drift,
    drift_of,
    sheet_lines,
    sheet_of,
)
from perfguard.judge.compare import compare_scenario
from perfguard.judge.remeasure import Rounds, RoundSettings
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.measure.loadcell import interleavable
from perfguard.measure.opencell import RunContext, ready_backend
from perfguard.measure.quiet import QuietWaiter
from perfguard.records.results import ScenarioResult
from perfguard.suite.files import SUITE_SUFFIXES
from perfguard.suite.loader import load_suite
from perfguard.worker.client import WorkerProcess
from perfguard.worker.isolate import measure_timeout_s
from perfguard.worker.protocol import MAIN_SLOT

__all__ = [
    "CalibrationPlan",
    "calibrate_cell",
    "calibrate_command",
    "check_command",
    "select_cells",
    "sheet_for",
    "why_not_calibrated",
]


@dataclass(frozen=True)
class CalibrationPlan:
    """How many runs of each condition, the planted sizes (empty: the cell's limit and
    twice it), the time budget of the whole calibration and the seed."""

    aa: int = 20
    planted: int = 10
    sizes: tuple[float, ...] = ()
    budget_s: float = 1800.0
    seed: int = 0
    #: The gate mode calibrated: ``ab`` (same-run A/B) or ``archived``.
    mode: str = "ab"
    #: The archived gate's contention limit (``--perfguard-contention-limit``): set it
    #: as the runner's gate sets it.
    contention_limit: float = CONTENTION_LIMIT

    def sizes_for(self, scenario: Scenario) -> tuple[float, ...]:
        if self.sizes:
            return tuple(sorted(self.sizes))
        limit = latency_gate(scenario)[1]
        return (round(limit, 6), round(2 * limit, 6))

    def key(self, scenario: Scenario) -> dict[str, Any]:
        """What a cell's kept runs must share with this plan to count."""
        metric, limit = latency_gate(scenario)
        sizes = list(self.sizes_for(scenario))
        return {
            "mode": self.mode,
            "metric": metric,
            "limit": limit,
            "sizes": sizes,
            "seed": self.seed,
        }

    def schedule(self, scenario: Scenario, done: Sequence[CalibrationRun]) -> list[float]:
        """The planted fraction of each run still to make (0: A/A), in the seeded order;
        the runs already ``done`` are taken out of it, condition by condition."""
        conditions = [0.0] * self.aa + [s for s in self.sizes_for(scenario)] * self.planted
        random.Random(self.seed).shuffle(conditions)
        left = Counter(r.planted for r in done)
        todo = []
        for planted in conditions:
            if left[planted] > 0:
                left[planted] -= 1
            else:
                todo.append(planted)
        return todo


def why_not_calibrated(scenario: Scenario, ctx: RunContext) -> str | None:
    """None when ``scenario`` can be calibrated here; else why it is passed over (a cell
    the suite refused, or whose runtime this machine lacks, with the fix)."""
    try:
        ready_backend(scenario, ctx)
    except PerfguardError as exc:
        return f"it cannot run here: {first_line(exc)}"
    return None


def calibrate_cell(
    scenario: Scenario,
    ctx: RunContext,
    todo: Sequence[float],
    *,
    seed: int,
    deadline: float,
    on_run: Callable[[CalibrationRun], None],
    mode: str = "ab",
    contention_limit: float = CONTENTION_LIMIT,
) -> int:
    """Make the runs ``todo`` (planted fractions, 0: A/A) of ``scenario`` in gate
    ``mode`` until ``deadline`` (``time.monotonic``), each in fresh workers; ``on_run``
    gets each run as it ends. The number of runs made."""
    made = 0
    for planted in todo:
        if time.monotonic() >= deadline:
            break
        started = time.monotonic()
        run_seed = seed + made
        if mode == "archived":
            verdict, ratio, count = _archived_run(
                scenario, ctx, planted, run_seed, contention_limit
            )
        else:
            verdict, ratio, count = _ab_run(scenario, ctx, planted, run_seed)
        on_run(CalibrationRun(planted, verdict, ratio, count, time.monotonic() - started))
        made += 1
    return made


def _open(worker: WorkerProcess, slot: str, scenario: Scenario, ctx: RunContext,
          plant: float | None) -> Slot:  # fmt: skip
    worker.request(
        "open",
        timeout_s=ctx.worker_open_limit_s,
        slot=slot,
        suite=str(scenario.suite),
        cell=scenario.item_name,
        rootdir=str(ctx.rootdir),
        cache_dir=str(ctx.cache_dir),
        plant=plant or None,
    )
    return Slot(worker, slot)


def _ab_run(
    scenario: Scenario, ctx: RunContext, planted: float, seed: int
) -> tuple[str, float | None, int]:
    """One same-run A/B run in a fresh worker: the working tree's cell opened twice,
    side B planted; request pairs with the gate's stopping rule, or, for a cell under
    load, rounds of load levels (``run_load_rounds``). (verdict, ratio, pairs or
    rounds)."""
    name = f"calibration of {scenario.item_name}"
    with WorkerProcess(cwd=ctx.rootdir, name=name, env=worker_env()) as worker:
        a = _open(worker, "a", scenario, ctx, None)
        b = _open(worker, "b", scenario, ctx, planted)
        if scenario.generate is not None and scenario.load is None:
            # The gate's own token pairs, every gated token figure decided; the sheet
            # counts the gated latency figure's decision (each token planted).
            gates = token_gates(scenario, seed=seed)
            warm_up_sides(a, b, scenario, ctx)
            _, looks, _ = run_token_pairs(
                a, b, gates, scenario.generate.new_tokens, seed=seed, cell=scenario.item_name
            )
            metric = latency_gate(scenario)[0]
            decision = looks.decisions.get(metric) or next(iter(looks.decisions.values()))
        elif scenario.load is not None:
            interleaved = interleavable(scenario.load)
            plan = load_plan(scenario, seed, interleaved)
            *_, decisions, _ = run_load_rounds(
                a, b, scenario, plan, seed=seed, open_limit_s=ctx.worker_open_limit_s
            )
            decision = decisions["latency"]
        else:
            metric, limit = latency_gate(scenario)
            rule = StoppingRule(limit=limit, q=LATENCY_QS[metric])
            warm_up_sides(a, b, scenario, ctx)
            _, _, decision, _ = run_pairs(a, b, rule, seed=seed, cell=scenario.item_name)
    return decision.verdict.value, decision.ratio, decision.pairs


def _archived_run(
    scenario: Scenario, ctx: RunContext, planted: float, seed: int, contention_limit: float
) -> tuple[str, float | None, int]:
    """One archived run: the cell measured whole (its own warm-up, timed loop or load
    levels: the worker's ``result``) in a fresh worker as the baseline, and again,
    planted, in another as the run to judge, in an order drawn from the seed; judged
    as the archived gate judges (``compare_scenario`` with the policy's confidence,
    normalisation and contention limit), an inconclusive run measured again after
    waiting for quiet and a regression confirmed on re-measurement, as the gate's
    ``Rounds`` do. (verdict, gated ratio, requests of the judged run)."""

    def measured(plant: float | None) -> ScenarioResult:
        name = f"calibration of {scenario.item_name}, archived"
        with WorkerProcess(cwd=ctx.rootdir, name=name, env=worker_env()) as worker:
            side = _open(worker, MAIN_SLOT, scenario, ctx, plant)
            reply = side.request("result", timeout_s=measure_timeout_s(scenario))
        return ScenarioResult.from_dict(reply["result"])

    if random.Random(seed).random() < 0.5:
        base, first = measured(None), measured(planted)
    else:
        first = measured(planted)
        base = measured(None)

    def judge(current: ScenarioResult, gates: Sequence[GateSpec]) -> ScenarioVerdict:
        return compare_scenario(
            current,
            base,
            gates,
            baseline_commit=None,
            contention_limit=contention_limit,
            against="the calibration's baseline",
        )

    rounds = Rounds(
        judge,
        RoundSettings(
            gate=True, save=False, confirm_rounds=CONFIRM_ROUNDS, contention_limit=contention_limit
        ),
        QuietWaiter(contention_limit),
    )
    gates = scenario.gates or DEFAULT_GATES
    chosen, verdict = rounds.judge_confirmed(first, gates, lambda: measured(planted))
    metric = verdict.metric(latency_gate(scenario)[0])
    samples = chosen.latency_ns.n if chosen.latency_ns is not None else 0
    return verdict.verdict.value, metric.ratio if metric is not None else None, samples


def sheet_for(
    sid: str, scenario: Scenario, runs: Sequence[CalibrationRun], mode: str = "ab"
) -> CellSheet:
    """The sheet of ``scenario``'s runs (``sid``: its id) in gate ``mode`` under the gate
    it is calibrated for: pairs of requests capped as the stopping rule caps them, rounds
    of load levels as the round plan does, or whole runs (archived)."""
    metric, limit = latency_gate(scenario)
    if mode == "archived":
        return sheet_of(sid, mode, metric, limit, runs, unit="runs")
    if scenario.load is not None:
        cap = load_plan(scenario).max_rounds
        return sheet_of(sid, mode, metric, limit, runs, max_pairs=cap, unit="rounds")
    return sheet_of(sid, mode, metric, limit, runs, max_pairs=StoppingRule().max_pairs)


# --- the command -----------------------------------------------------------------------


def select_cells(suites: Sequence[Path], keyword: str | None) -> list[Scenario]:
    """The cells of the suite files ``suites`` (files, or folders: every ``.yaml``/``.yml``
    file in them, at any depth) whose item names match ``keyword``, a pytest ``-k``
    expression (case-insensitive substrings joined by ``and``, ``or``, ``not``)."""
    match = _keyword(keyword)
    files: list[Path] = []
    for given in suites:
        if given.is_dir():
            files += sorted(
                p for p in given.rglob("*") if p.is_file() and p.suffix in SUITE_SUFFIXES
            )
        elif given.is_file():
            files.append(given)
        else:
            raise StoreError(
                f"{given} is neither a suite file nor a folder",
                expected="suite files (suites/*.yaml) or folders holding them",
                fix="pass the suites to calibrate, e.g. `perfguard calibrate suites/`",
            )
    cells = [sc for path in files for sc in load_suite(path).scenarios]
    return [sc for sc in cells if match(sc.item_name)]


def _keyword(expression: str | None) -> Callable[[str], bool]:
    if not expression:
        return lambda name: True
    from _pytest.mark.expression import Expression

    try:
        compiled = Expression.compile(expression)
    except SyntaxError as exc:
        raise StoreError(
            f"-k {expression!r} is not a keyword expression ({exc.msg})",
            expected="names joined by and, or, not, as pytest's -k takes them",
            fix="e.g. -k 'convnet and not int8'",
        ) from exc

    def matches(name: str) -> bool:
        def word(text: str, /, **_: str | int | bool | None) -> bool:
            return text.lower() in name.lower()

        return compiled.evaluate(word)

    return matches


def calibrate_command(
    cells: Sequence[Scenario],
    ctx: RunContext,
    plans: Sequence[CalibrationPlan],
    store: CalibrationFile,
    *,
    fresh: bool = False,
    write: Callable[[str], None] = print,
) -> tuple[list[CellSheet], list[str]]:
    """Calibrate ``cells`` in the mode of each of ``plans`` within the first plan's
    budget, printing progress and each sheet; the sheets (also kept in ``store``) and
    the ids of the cells whose runs failed (a model or server error: the other cells go
    on)."""
    budget_s = plans[0].budget_s
    deadline = time.monotonic() + budget_s
    chosen: list[_Job] = []
    for scenario in cells:
        why = why_not_calibrated(scenario, ctx)
        if why is not None:
            write(f"passed over: {scenario.item_name}: {why}")
            continue
        sid = scenario.scenario_id(ctx.rootdir)
        for plan in plans:
            server = scenario.model.server
            if plan.mode == "ab" and server is not None and server.exclusive:
                write(
                    f"passed over in same-run A/B: {sid}: its server needs its device to "
                    "itself (`server.exclusive`), so two sides cannot run at once; "
                    "`--archived` calibrates it one measurement at a time"
                )
                continue
            key = plan.key(scenario)
            kept, dropped = ([], False) if fresh else store.runs(sid, key)
            if dropped:
                write(
                    f"{sid}: its earlier {plan.mode} runs were made under another plan; "
                    "starting again"
                )
            chosen.append(_Job(scenario, sid, plan, key, kept, plan.schedule(scenario, kept)))
    total = sum(len(job.todo) for job in chosen)
    kept_runs = sum(len(job.runs) for job in chosen)
    cells_chosen = len({job.sid for job in chosen})
    write(
        f"perfguard calibrate: {cells_chosen} cell(s), {total} run(s) to make"
        + (f" ({kept_runs} kept from before)" if kept_runs else "")
        + f", budget {budget_s:.0f} s; fingerprint {store.fingerprint}"
    )
    if total:
        write(_estimate(chosen, budget_s))
    sheets: list[CellSheet] = []
    failed: list[str] = []
    progress = _Progress(total, deadline, write)
    for job in chosen:
        progress.start(len(job.todo))
        try:
            calibrate_cell(
                job.scenario,
                ctx,
                job.todo,
                seed=job.plan.seed + len(job.runs),
                deadline=deadline,
                on_run=lambda run, job=job: job.ran(run, store, progress),  # type: ignore[misc]
                mode=job.plan.mode,
                contention_limit=job.plan.contention_limit,
            )
        except PerfguardError as exc:  # this cell's model or server: the others go on
            failed.append(job.sid)
            write(
                f"failed: {job.sid}: {first_line(exc)} (its {len(job.runs)} run(s) so far are kept)"
            )
        sheet = job.sheet()
        store.keep(job.sid, job.key, job.runs, sheet)
        sheets.append(sheet)
        for line in sheet_lines(sheet):
            write(line)
    if progress.made < total and not failed:
        write(
            f"the budget ran out after {progress.made} of {total} runs: run the same "
            "command again to go on (the runs made are kept)"
        )
    write(f"calibration: {store.path}")
    return sheets, failed


def _estimate(jobs: Sequence[_Job], budget_s: float) -> str:
    """What the runs to make will take, from each job's kept runs (a job without any is
    timed by its first run: the progress lines say)."""
    timed = [job for job in jobs if job.runs and job.todo]
    seconds = sum(statistics.median(r.seconds for r in job.runs) * len(job.todo) for job in timed)
    untimed = sum(1 for job in jobs if job.todo and not job.runs)
    parts = []
    if timed:
        parts.append(f"about {seconds / 60:.1f} min for the cells with runs kept")
    if untimed:
        parts.append(f"{untimed} cell/mode(s) not timed yet (their first run's line says)")
    over = " (over the budget: run again to go on)" if seconds > budget_s else ""
    return "estimate: " + "; ".join(parts) + over


@dataclass
class _Job:
    """One cell's calibration in one mode: its plan, kept runs and the runs to make."""

    scenario: Scenario
    sid: str
    plan: CalibrationPlan
    key: dict[str, Any]
    runs: list[CalibrationRun]
    todo: list[float]

    def sheet(self) -> CellSheet:
        return sheet_for(self.sid, self.scenario, self.runs, self.plan.mode)

    def ran(self, run: CalibrationRun, store: CalibrationFile, progress: _Progress) -> None:
        self.runs.append(run)
        sheet = self.sheet()
        store.keep(self.sid, self.key, self.runs, sheet)
        label = self.sid if self.plan.mode == "ab" else f"{self.sid} (archived)"
        progress.ran(label, run, "requests" if sheet.unit == "runs" else sheet.unit)


def check_command(
    cells: Sequence[Scenario],
    ctx: RunContext,
    store: CalibrationFile,
    *,
    runs: int,
    budget_s: float,
    seed: int = 0,
    contention_limit: float = CONTENTION_LIMIT,
    write: Callable[[str], None] = print,
) -> tuple[list[Drift], list[str]]:
    """``perfguard calibrate --check``: ``runs`` A/A runs of each calibrated cell, checked
    against its sheet (:func:`perfguard.judge.calibration.drift_of`) and kept in its
    history. The findings, and the ids of the cells that could not be checked (no sheet,
    too few A/A runs in it, or runs that failed)."""
    deadline = time.monotonic() + budget_s
    found: list[Drift] = []
    unchecked: list[str] = []
    for scenario in cells:
        sid = scenario.scenario_id(ctx.rootdir)
        why = why_not_calibrated(scenario, ctx)
        sheets = [
            sheet
            for sheet in (store.sheet(sid, mode) for mode in MODES)
            if sheet is not None and sheet.noise_per_pair is not None
        ]
        if why is None and not sheets:
            calibrated = any(store.sheet(sid, mode) is not None for mode in MODES)
            why = (
                f"its sheet has too few A/A runs: calibrate it with --aa {CAUGHT_RUNS}"
                if calibrated
                else "it has no sheet on this runner: run `perfguard calibrate` on it first"
            )
        if why is not None:
            write(f"not checked: {sid}: {why}")
            unchecked.append(sid)
            continue
        for sheet in sheets:
            made: list[CalibrationRun] = []
            # Seeds of their own: a check never repeats the calibration's pairs.
            first = seed + 1_000_003 * (store.checks(sid, sheet.mode) + 1)
            try:
                calibrate_cell(
                    scenario,
                    ctx,
                    [0.0] * runs,
                    seed=first,
                    deadline=deadline,
                    on_run=made.append,
                    mode=sheet.mode,
                    contention_limit=contention_limit,
                )
            except PerfguardError as exc:
                write(f"not checked: {sid}: its runs failed: {first_line(exc)}")
                unchecked.append(sid)
                continue
            drift = drift_of(sheet, made)
            if drift is None:
                write(f"not checked: {sid}: the budget ran out before its first run")
                unchecked.append(sid)
                continue
            store.keep_check(sid, sheet.mode, drift, made)
            found.append(drift)
            write(drift.text())
    write(f"calibration: {store.path}")
    return found, unchecked


class _Progress:
    """One line per run: what it found, what it cost, and the time left."""

    def __init__(self, total: int, deadline: float, write: Callable[[str], None]) -> None:
        self.total, self.deadline, self.write = total, deadline, write
        self.made = 0
        self._cell_runs = 0
        self._cell_made = 0

    def start(self, runs: int) -> None:
        self._cell_runs, self._cell_made = runs, 0

    def ran(self, sid: str, run: CalibrationRun, unit: str) -> None:
        self.made += 1
        self._cell_made += 1
        what = "A/A" if run.planted == 0 else f"planted +{run.planted:.0%}"
        ratio = f"ratio {run.ratio:.3f}, " if run.ratio is not None else ""
        left = max(0.0, self.deadline - time.monotonic())
        estimate = run.seconds * (self.total - self.made)
        self.write(
            f"{sid}: run {self._cell_made}/{self._cell_runs} {what}: {run.verdict} "
            f"({ratio}{run.pairs} {unit}, {run.seconds:.1f} s); about {estimate:.0f} s of "
            f"runs left, {left:.0f} s of budget"
        )
