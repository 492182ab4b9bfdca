"""``perfguard merge DIR...``: one run's files from the outputs of its shards.

Each shard of a run (``--perfguard-shard=K/N``) leaves its run folder:
``results.json``, ``comparison.json`` and ``shard.json`` (its index and the plan). The
merge refuses what cannot be one run: shards of different commits, modes or
environments (fingerprints), plans that differ (other cells, other stored costs),
two outputs of one shard, a cell measured twice, a cell the plan gave another shard,
shards judged against different baselines. A shard with no output fails the merged
run: each of its cells is recorded as an error naming the shard and the fix, so
nothing unmeasured passes, and the report and summary say which cells they were.

Verdicts are the shards' own: each shard judged its cells against the same baseline,
as one run would have; the merge does not judge again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfguard.baseline.store import DirectoryStore
from perfguard.core.atomicio import write_text_atomic
from perfguard.core.errors import PerfguardError, ShardError
from perfguard.core.policy import CONTENTION_LIMIT
from perfguard.judge.abside import ab_how
from perfguard.judge.gatekeeper import Gatekeeper, GateSettings
from perfguard.judge.outcome import run_outcome
from perfguard.judge.save import check_can_save
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult, Status
from perfguard.records.resultsfile import RESULTS_FILENAME, read_results
from perfguard.report.comparison import StoredComparison, comparison_path, read_comparison
from perfguard.report.runfolder import TRACES_DIR, run_dir
from perfguard.run.finish import BaseSide, base_side, finish_run
from perfguard.shard.plan import PLAN_FILENAME, ShardPlan, ShardSpec, read_plan

#: How many cell ids a refusal names before "and N more".
_SHOWN = 5
RERUN_FIX = "re-run the failed shard's job (or the whole matrix), then merge again"


@dataclass(frozen=True)
class ShardOutput:
    """One shard's run folder, read."""

    folder: Path
    shard: ShardSpec
    plan: ShardPlan
    run: RunResult
    comparison: StoredComparison
    contention_limit: float | None = None  # the limit the shard judged with


@dataclass(frozen=True)
class MergedRun:
    """The shards as one run: its results and verdicts, what it was compared with
    (``choice``: comparison.json's baseline), the shards found and those missing
    (``{index: its cells}``), and the worst exit status a shard recorded."""

    run: RunResult
    verdicts: dict[str, ScenarioVerdict]
    choice: dict[str, Any]
    plan: ShardPlan
    present: tuple[int, ...]
    missing: dict[int, tuple[str, ...]]
    exit_status: int
    contention_limit: float | None = None  # the shards' (None: not recorded)
    #: Cells a shard that ran left no result for, though its plan lists them.
    lost: dict[int, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def whole(self) -> bool:
        """Whether every planned cell has its shard's result (a merged save needs it)."""
        return not self.missing and not self.lost

    def lines(self) -> list[str]:
        """What the terminal says about the shards."""
        total = self.plan.total
        out = [
            f"merged {len(self.present)} of {total} shards of "
            f"{self.run.commit.short}: {len(self.run.scenarios)} cells"
        ]
        for index, cells in sorted(self.missing.items()):
            out.append(
                f"shard {index}/{total} left no output: its {len(cells)} cells were not "
                f"measured ({_named(cells)}). Fix: {RERUN_FIX}"
            )
        for index, cells in sorted(self.lost.items()):
            out.append(
                f"shard {index}/{total} ran but left no result for {len(cells)} of its planned "
                f"cells ({_named(cells)}). Fix: {RERUN_FIX}"
            )
        return out


def _named(ids: Sequence[str]) -> str:
    more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
    return ", ".join(ids[:_SHOWN]) + more if ids else "none"


# -- finding and reading the shards' outputs ---------------------------------------------


def find_outputs(dirs: Iterable[Path]) -> list[ShardOutput]:
    """Every shard output under ``dirs``: a run folder itself, or any folder above one
    (a downloaded artifact holding ``reports/``). Each DIR must hold exactly one."""
    outputs: list[ShardOutput] = []
    for given in dirs:
        folder = Path(given)
        if not folder.is_dir():
            raise ShardError(
                f"{folder} is not a directory",
                expected="the folder a sharded run wrote (reports/ or reports/<commit12>/)",
                fix="pass each shard's output folder, e.g. `perfguard merge shards/*`",
            )
        plans = sorted(p for p in folder.rglob(PLAN_FILENAME) if not p.is_symlink())
        if not plans:
            raise ShardError(
                f"{folder} holds no shard output (no {PLAN_FILENAME} below it)",
                expected=f"a run folder with {RESULTS_FILENAME} and {PLAN_FILENAME}, "
                "written by `pytest --perfguard --perfguard-shard=K/N`",
                fix="pass the shards' report folders; a run without --perfguard-shard "
                "has nothing to merge",
            )
        if len(plans) > 1:
            raise ShardError(
                f"{folder} holds {len(plans)} shard outputs: "
                + ", ".join(str(p.parent) for p in plans),
                expected="one shard's run folder per DIR",
                fix="pass each run folder on its own (e.g. reports/<commit12>-ab)",
            )
        outputs.append(read_output(plans[0].parent))
    return outputs


def read_output(run_dir: Path) -> ShardOutput:
    """A shard's run folder: its plan, results and comparison."""
    recorded = read_plan(run_dir / PLAN_FILENAME)
    run = read_results(run_dir / RESULTS_FILENAME)
    comparison = read_comparison(comparison_path(run_dir / RESULTS_FILENAME))
    return ShardOutput(
        run_dir, recorded.shard, recorded.plan, run, comparison, recorded.contention_limit
    )


# -- merging ------------------------------------------------------------------------


def _one(outputs: Sequence[ShardOutput], what: str, value: Any, fix: str) -> None:
    """Refuse shards that disagree on ``value(output)``."""
    seen: dict[Any, list[str]] = {}
    for out in outputs:
        seen.setdefault(value(out), []).append(f"shard {out.shard} ({out.folder})")
    if len(seen) > 1:
        found = "; ".join(f"{key!s}: {', '.join(names)}" for key, names in seen.items())
        raise ShardError(
            f"the shards differ in {what}: {found}",
            expected=f"every shard of one run with the same {what}",
            fix=fix,
        )


def merge_outputs(outputs: Sequence[ShardOutput], *, shards: int | None = None) -> MergedRun:
    """The shards as one run; ShardError when they cannot be one (module docstring)."""
    if not outputs:
        raise ShardError("no shard output given", fix="pass the shards' output folders")
    same_run = "merge the outputs of one matrix run of one commit"
    _one(outputs, "commit", lambda o: o.run.commit.sha, same_run)
    _one(outputs, "mode", lambda o: o.run.mode, same_run + " (all A/B, or all plain)")
    _one(outputs, "shard count", lambda o: o.plan.total, same_run)
    _one(
        outputs,
        "environment fingerprint",
        lambda o: o.run.environment.fingerprint,
        "run every shard on identical runners (same GPU model, driver, runtimes); "
        "`perfguard env` shows what goes into the fingerprint",
    )
    _one(
        outputs,
        "plan",
        lambda o: o.plan.digest,
        "give every shard one plan, made once before the shards start "
        "(--perfguard-shard-plan-out in a plan job, --perfguard-shard-plan in each shard: "
        "docs/shards.md), or else the same cells and the same stored baselines: the same "
        "commit, the same suites and -k/-m filters, the same baselines folder",
    )
    _one(
        outputs,
        "contention limit",
        lambda o: o.contention_limit,
        "run every shard with the same --perfguard-contention-limit (or ini key)",
    )
    _one(
        outputs,
        "baseline",
        lambda o: (o.comparison.baseline.get("commit"), o.comparison.baseline.get("how")),
        "give every shard the same baselines (fetch the baselines branch once per run)",
    )
    plan = outputs[0].plan
    if shards is not None and shards != plan.total:
        raise ShardError(
            f"--shards is {shards} but the shards' plan has {plan.total}",
            expected="the N of the matrix's --perfguard-shard=K/N",
            fix=f"pass --shards {plan.total}, or merge the outputs of the {shards}-shard run",
        )
    by_index: dict[int, ShardOutput] = {}
    for out in outputs:
        if out.shard.index in by_index:
            raise ShardError(
                f"two outputs of shard {out.shard}: {by_index[out.shard.index].folder} and "
                f"{out.folder}",
                expected="each shard's output once",
                fix="pass each shard's folder once (a re-run's artifact replaces the old one)",
            )
        by_index[out.shard.index] = out
    results: dict[str, ScenarioResult] = {}
    owner: dict[str, int] = {}
    verdicts: dict[str, ScenarioVerdict] = {}
    for index in sorted(by_index):
        out = by_index[index]
        for result in out.run.scenarios:
            _check_cell(result.id, out, plan, owner)
            owner[result.id] = index
            results[result.id] = result
        for verdict in out.comparison.verdicts:
            if verdict.scenario_id in verdicts:
                raise ShardError(
                    f"{verdict.scenario_id} was judged by shard {owner.get(verdict.scenario_id)}"
                    f" and shard {index}",
                    expected="each cell judged by one shard",
                    fix=RERUN_FIX,
                )
            owner.setdefault(verdict.scenario_id, index)
            verdicts[verdict.scenario_id] = verdict
    missing = {i: plan.cells(i) for i in range(1, plan.total + 1) if i not in by_index}
    lost = {
        i: cells
        for i in sorted(by_index)
        if (cells := tuple(c for c in plan.cells(i) if c not in results))
    }
    first = by_index[min(by_index)]
    reference = {r.id: r for out in outputs for r in out.run.scenarios}
    for index, cells in missing.items():
        for cid in cells:
            results[cid] = _unmeasured(cid, index, plan.total, reference.get(cid))
    for index, cells in lost.items():
        for cid in cells:
            results[cid] = _unmeasured(cid, index, plan.total, None, ran=True)
    planned = set(plan.all_cells)
    ordered = [results[cid] for cid in plan.all_cells if cid in results]
    ordered += [r for cid, r in results.items() if cid not in planned]
    statuses = [o.comparison.exit_status or 0 for o in outputs]
    run = RunResult(
        commit=_commit([o.run.commit for o in outputs]),
        environment=merged_environment([o.run.environment for o in outputs]),
        scenarios=tuple(ordered),
        created_at=max(o.run.created_at for o in outputs),
        perfguard_version=first.run.perfguard_version,
        mode=first.run.mode,
    )
    return MergedRun(
        run=run,
        verdicts=verdicts,
        choice=dict(first.comparison.baseline),
        plan=plan,
        present=tuple(sorted(by_index)),
        missing=missing,
        exit_status=max(statuses, default=0),
        contention_limit=first.contention_limit,
        lost=lost,
    )


def _check_cell(cid: str, out: ShardOutput, plan: ShardPlan, owner: Mapping[str, int]) -> None:
    if cid in owner:
        raise ShardError(
            f"{cid} was measured by shard {owner[cid]} and by shard {out.shard.index} "
            f"({out.folder})",
            expected="each cell measured by exactly one shard",
            fix="run each shard with its own --perfguard-shard=K/N (K = 1..N, each once)",
        )
    planned = plan.shard_of(cid)
    if planned is not None and planned != out.shard.index:
        raise ShardError(
            f"shard {out.shard.index} ({out.folder}) measured {cid}, which the plan gave "
            f"to shard {planned}",
            expected="each shard measuring the cells of its plan",
            fix="run every shard on the same commit with the same baselines and filters",
        )


def _unmeasured(
    cid: str, index: int, total: int, known: ScenarioResult | None, *, ran: bool = False
) -> ScenarioResult:
    """The record of a cell whose shard left no output (``ran``: left no result for it):
    an error, so the run fails."""
    suite, _, name = cid.partition("::")
    return ScenarioResult(
        id=cid,
        suite=suite,
        name=name or cid,
        backend=known.backend if known else "-",
        device=known.device if known else "-",
        precision=known.precision if known else "-",
        status=Status.ERROR,
        message=(
            f"not measured: shard {index}/{total}, which the plan gave this cell, ran but "
            "left no result for it (deselected, or lost by the shard's session). "
            f"Fix: {RERUN_FIX}"
            if ran
            else f"not measured: shard {index}/{total}, which the plan gave this cell, left "
            f"no output (its job failed before writing, or its artifact is missing). "
            f"Fix: {RERUN_FIX}"
        ),
    )


def _commit(commits: Sequence[CommitInfo]) -> CommitInfo:
    first = commits[0]
    return dataclasses.replace(first, dirty=any(c.dirty for c in commits))


def merged_environment(environments: Sequence[Environment]) -> Environment:
    """One environment for shards that share a fingerprint: what all of them recorded
    alike as is, a field that differs (a hostname) as its distinct values in order."""
    first = environments[0]
    keys = dict.fromkeys(k for env in environments for k in env.recorded)
    recorded: dict[str, str] = {}
    for key in keys:
        values = list(
            dict.fromkeys(env.recorded[key] for env in environments if key in env.recorded)
        )
        recorded[key] = values[0] if len(values) == 1 else ", ".join(values)
    return Environment(
        fingerprint=first.fingerprint, comparable=dict(first.comparable), recorded=recorded
    )


# -- what the merged run was compared with -----------------------------------------------


def merged_base_side(
    merged: MergedRun,
    baseline_dir: Path,
    history: Mapping[str, Sequence[tuple[str, ScenarioResult]]],
) -> BaseSide:
    """The base side of the merged run's report (``perfguard.run.finish.base_side``):
    the archived baseline the shards judged against, read from ``baseline_dir`` when it
    is there; for A/B, the base revision's samples of the shards' own runs over it."""
    baseline = None
    sha = merged.choice.get("commit")
    if isinstance(sha, str):
        try:
            baseline = DirectoryStore(baseline_dir).load(merged.run.environment.fingerprint, sha)
        except PerfguardError:
            baseline = None
    ab_base = None
    if merged.run.mode == "ab":
        details = [v.ab for v in merged.verdicts.values() if v.ab is not None]
        ab_base = (
            (details[0].base, ab_how(details[0].base, details[0].base_how))
            if details
            else (merged.choice.get("commit"), str(merged.choice.get("how", "")))
        )
    return base_side(
        merged.choice, baseline, merged.run, merged.verdicts, history=history, ab_base=ab_base
    )


def merged_outcome_status(merged: MergedRun, gate: bool) -> int:
    """The merged run's exit status: 1 when a shard is missing, a shard's pytest failed,
    or a cell failed the gate; else 0."""
    outcome = run_outcome(
        merged.run.scenarios, merged.verdicts.values(), exit_status=merged.exit_status, gate=gate
    )
    return 1 if merged.missing or outcome.failed else 0


# -- the command ----------------------------------------------------------------------


def merge_command(
    dirs: Sequence[Path],
    *,
    out_dir: Path,
    baseline_dir: Path,
    shards: int | None = None,
    save: bool = False,
    save_invalid: bool = False,
    allow_dirty: bool = False,
    gate: bool = True,
    contention_limit: float | None = None,
    rootdir: Path | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Merge the shards under ``dirs`` into ``out_dir``; the gate's exit status (0 or 1).

    ``save`` archives the merged run as one launch of its commit in ``baseline_dir``, by
    the rules of ``pytest --perfguard-save`` (refused when a cell is inconclusive, unless
    ``save_invalid``; a cell measured beside more than ``contention_limit`` of busy
    neighbours is inconclusive: by default the limit the shards judged with); never
    with a shard missing. Raises ShardError (and the readers'
    ResultsError) when the outputs cannot be one run.
    """
    outputs = find_outputs(dirs)
    merged = merge_outputs(outputs, shards=shards)
    dirs_by_shard = {out.shard.index: out.folder for out in outputs}
    for line in merged.lines():
        say(f"perfguard: {line}")
    settings = GateSettings(
        baseline_dir=Path(baseline_dir),
        save=save and merged.whole,
        allow_dirty=allow_dirty,
        gate=gate,
        save_invalid=save_invalid,
        contention_limit=_limit(contention_limit, merged.contention_limit),
    )
    if save:
        refusal = check_can_save(merged.run.commit, save=True, allow_dirty=settings.allow_dirty)
        if refusal:
            raise ShardError(refusal, fix="merge the shards of a clean commit")
        if not merged.whole:
            say("perfguard: baseline NOT saved: a merged save needs every planned cell's result")
    gatekeeper = Gatekeeper(settings, Path(rootdir or Path.cwd()), merged.run.environment)
    try:
        history = {r.id: gatekeeper.archive.history_results(r.id) for r in merged.run.scenarios}
    except PerfguardError as exc:  # an unreadable archive: the report goes without trends
        say(f"perfguard: no history in the report: {exc}")
        history = {}
    status = merged_outcome_status(merged, gate)
    for skipped in gather_traces(
        merged.present, dirs_by_shard, run_dir(Path(out_dir), merged.run.commit, merged.run.mode)
    ):
        say(f"perfguard: trace not copied: {skipped} is not a regular file (a link or folder)")
    finished = finish_run(
        merged.run,
        merged.verdicts,
        report_dir=Path(out_dir),
        judging=settings,
        gatekeeper=gatekeeper,
        base=merged_base_side(merged, Path(baseline_dir), history),
        exit_status=status,
    )
    for line, _failed in finished.files.lines() + finished.save_lines():
        say(line if line.startswith("perfguard: ") else f"perfguard: {line}")
    say(f"perfguard: {finished.outcome.headline()}")
    return 1 if finished.status else 0


def gather_traces(
    present: Sequence[int], folders: Mapping[int, Path], run_folder: Path
) -> list[Path]:
    """Each shard's operator-profile traces into the merged run's ``traces/``, where its
    results' ``profile.trace`` paths point (a cell is measured by one shard only).

    A shard's folder is an artifact from elsewhere: only regular files are copied, never
    what a link points to (a ``leak.json`` linking to a system file would put that
    file's contents in the merged report), and a ``traces/`` that is itself a link is
    not entered. Returns the entries left out, for the caller to name."""
    skipped: list[Path] = []
    for index in present:
        source = folders[index] / TRACES_DIR
        if source.is_symlink():
            skipped.append(source)
            continue
        if not source.is_dir() or source.resolve() == (run_folder / TRACES_DIR).resolve():
            continue
        for trace in sorted(source.glob("*.json")):
            if trace.is_symlink() or not trace.is_file():
                skipped.append(trace)
                continue
            write_text_atomic(run_folder / TRACES_DIR / trace.name, trace.read_text("utf-8"))
    return skipped


def _limit(given: float | None, shards: float | None) -> float:
    """The contention limit of a merged save: the one given, else the shards' own."""
    if given is not None:
        return given
    return CONTENTION_LIMIT if shards is None else shards
