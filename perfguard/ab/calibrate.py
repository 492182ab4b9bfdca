"""``perfguard calibrate``: what the gate can see on this runner, measured on the user's
own cells (issue 31).

For each selected cell, runs in the gate's mode, same-run A/B: a fresh worker per run
opens the working tree's cell twice (slots ``a`` and ``b``), warms both up and
alternates requests with the same stopping rule as the gate
(:func:`perfguard.ab.abrun.run_pairs`, the cell's latency limit). **A/A** runs leave
both sides as they are; **planted** runs slow side ``b`` by a fraction of each of its
requests' own time (``open``'s ``plant``: :mod:`perfguard.measure.plant`), at sizes
around the cell's limit (its limit and twice it unless the caller names them). The
runs of all conditions come in one order shuffled from the seed, so a calibration cut
short by its budget still samples each condition.

Every run is written at once to the calibration file
(:class:`perfguard.judge.calibration.CalibrationFile`,
``<baseline-dir>/<fingerprint>/calibration.json``, atomically), so a calibration
stopped or out of budget resumes where it ended: a cell's runs are kept while the plan
that made them (mode, gated figure, limit, sizes, seed) is the same, and dropped, with a
line saying so, when it changed. The sheet (:mod:`perfguard.judge.calibration`) is
written beside the runs.

Single-request cells only, for now: a generative cell or one under ``load:`` is passed
over with the reason (planting per token and per load request is not built yet).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfguard.ab.abrun import Slot, latency_gate, run_pairs, warm_up_sides, worker_env
from perfguard.ab.paired import StoppingRule
from perfguard.core.blame import first_line
from perfguard.core.errors import PerfguardError, StoreError
from perfguard.core.policy import LATENCY_QS
from perfguard.core.scenario import Scenario
from perfguard.judge.calibration import (
    CAUGHT_RUNS,
    CalibrationFile,
    CalibrationRun,
    CellSheet,
    Drift,
    drift_of,
    sheet_lines,
    sheet_of,
)
from perfguard.measure.opencell import RunContext, ready_backend
from perfguard.suite.files import SUITE_SUFFIXES
from perfguard.suite.loader import load_suite
from perfguard.worker.client import WorkerProcess

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

    def sizes_for(self, scenario: Scenario) -> tuple[float, ...]:
        if self.sizes:
            return tuple(sorted(self.sizes))
        limit = latency_gate(scenario)[1]
        return (round(limit, 6), round(2 * limit, 6))

    def key(self, scenario: Scenario) -> dict[str, Any]:
        """What a cell's kept runs must share with this plan to count."""
        metric, limit = latency_gate(scenario)
        sizes = list(self.sizes_for(scenario))
        return {"mode": "ab", "metric": metric, "limit": limit, "sizes": sizes, "seed": self.seed}

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
    if scenario.generate is not None:
        return "it generates (planting a slowdown per token is not built yet)"
    if scenario.load is not None:
        return "it is under `load:` (planting a slowdown per load request is not built yet)"
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
) -> int:
    """Make the runs ``todo`` (planted fractions, 0: A/A) of ``scenario`` until
    ``deadline`` (``time.monotonic``), each in a fresh worker; ``on_run`` gets each run as
    it ends. The number of runs made."""
    metric, limit = latency_gate(scenario)
    rule = StoppingRule(limit=limit, q=LATENCY_QS[metric])
    made = 0
    for planted in todo:
        if time.monotonic() >= deadline:
            break
        started = time.monotonic()
        name = f"calibration of {scenario.item_name}"
        with WorkerProcess(cwd=ctx.rootdir, name=name, env=worker_env()) as worker:
            for slot, plant in (("a", None), ("b", planted or None)):
                worker.request(
                    "open",
                    timeout_s=ctx.worker_open_limit_s,
                    slot=slot,
                    suite=str(scenario.suite),
                    cell=scenario.item_name,
                    rootdir=str(ctx.rootdir),
                    cache_dir=str(ctx.cache_dir),
                    plant=plant,
                )
            a, b = Slot(worker, "a"), Slot(worker, "b")
            warm_up_sides(a, b, scenario, ctx)
            _, _, decision, _ = run_pairs(a, b, rule, seed=seed + made, cell=scenario.item_name)
        on_run(
            CalibrationRun(
                planted=planted,
                verdict=decision.verdict.value,
                ratio=decision.ratio,
                pairs=decision.pairs,
                seconds=time.monotonic() - started,
            )
        )
        made += 1
    return made


def sheet_for(sid: str, scenario: Scenario, runs: Sequence[CalibrationRun]) -> CellSheet:
    """The sheet of ``scenario``'s runs (``sid``: its id) under the gate it is calibrated
    for."""
    metric, limit = latency_gate(scenario)
    return sheet_of(sid, "ab", metric, limit, runs, max_pairs=StoppingRule().max_pairs)


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
    plan: CalibrationPlan,
    store: CalibrationFile,
    *,
    fresh: bool = False,
    write: Callable[[str], None] = print,
) -> tuple[list[CellSheet], list[str]]:
    """Calibrate ``cells`` within ``plan.budget_s``, printing progress and each sheet;
    the sheets (also kept in ``store``) and the ids of the cells whose runs failed (a
    model or server error: the other cells go on)."""
    deadline = time.monotonic() + plan.budget_s
    chosen: list[tuple[Scenario, str, dict[str, Any], list[CalibrationRun], list[float]]] = []
    for scenario in cells:
        why = why_not_calibrated(scenario, ctx)
        if why is not None:
            write(f"passed over: {scenario.item_name}: {why}")
            continue
        sid = scenario.scenario_id(ctx.rootdir)
        key = plan.key(scenario)
        kept, dropped = ([], False) if fresh else store.runs(sid, key)
        if dropped:
            write(f"{sid}: its earlier runs were made under another plan; starting again")
        chosen.append((scenario, sid, key, kept, plan.schedule(scenario, kept)))
    total = sum(len(todo) for *_, todo in chosen)
    kept_runs = sum(len(kept) for _, _, _, kept, _ in chosen)
    write(
        f"perfguard calibrate: {len(chosen)} cell(s), {total} run(s) to make"
        + (f" ({kept_runs} kept from before)" if kept_runs else "")
        + f", budget {plan.budget_s:.0f} s; fingerprint {store.fingerprint}"
    )
    sheets: list[CellSheet] = []
    failed: list[str] = []
    progress = _Progress(total, deadline, write)
    for scenario, sid, key, runs, todo in chosen:

        def ran(run: CalibrationRun, scenario: Scenario = scenario, sid: str = sid,
                key: dict[str, Any] = key, runs: list[CalibrationRun] = runs) -> None:  # fmt: skip
            runs.append(run)
            store.keep(sid, key, runs, sheet_for(sid, scenario, runs))
            progress.ran(sid, run)

        progress.start(len(todo))
        try:
            calibrate_cell(
                scenario, ctx, todo, seed=plan.seed + len(runs), deadline=deadline, on_run=ran
            )
        except PerfguardError as exc:  # this cell's model or server: the others go on
            failed.append(sid)
            write(f"failed: {sid}: {first_line(exc)} (its {len(runs)} run(s) so far are kept)")
        sheet = sheet_for(sid, scenario, runs)
        store.keep(sid, key, runs, sheet)
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


def check_command(
    cells: Sequence[Scenario],
    ctx: RunContext,
    store: CalibrationFile,
    *,
    runs: int,
    budget_s: float,
    seed: int = 0,
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
        sheet = store.sheet(sid)
        why = why_not_calibrated(scenario, ctx)
        if why is not None or sheet is None or sheet.noise_per_pair is None:
            if sheet is None and why is None:
                why = "it has no sheet on this runner: run `perfguard calibrate` on it first"
            elif why is None:
                why = f"its sheet has too few A/A runs: calibrate it with --aa {CAUGHT_RUNS}"
            write(f"not checked: {sid}: {why}")
            unchecked.append(sid)
            continue
        made: list[CalibrationRun] = []
        # Seeds of their own: a check never repeats the calibration's pairs.
        first = seed + 1_000_003 * (store.checks(sid) + 1)
        try:
            calibrate_cell(
                scenario, ctx, [0.0] * runs, seed=first, deadline=deadline, on_run=made.append
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
        store.keep_check(sid, drift, made)
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

    def ran(self, sid: str, run: CalibrationRun) -> None:
        self.made += 1
        self._cell_made += 1
        what = "A/A" if run.planted == 0 else f"planted +{run.planted:.0%}"
        ratio = f"ratio {run.ratio:.3f}, " if run.ratio is not None else ""
        left = max(0.0, self.deadline - time.monotonic())
        estimate = run.seconds * (self.total - self.made)
        self.write(
            f"{sid}: run {self._cell_made}/{self._cell_runs} {what}: {run.verdict} "
            f"({ratio}{run.pairs} pairs, {run.seconds:.1f} s); about {estimate:.0f} s of "
            f"runs left, {left:.0f} s of budget"
        )
