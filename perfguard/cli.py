"""The ``perfguard`` command: compare stored runs, inspect the baseline archive, show history.

Commands read what ``pytest --perfguard`` stored and never run a model (``init`` builds
a factory's model once, to read its inputs; ``bisect`` runs pytest's same-run A/B at
each midpoint; ``calibrate`` measures the selected cells in A/A and planted-slowdown
runs). ``keys`` lists every suite key and ``init`` writes a starter suite. Exit
status: 0 ok, 1 ``compare`` found a regression (``bisect``: found no first bad commit;
``baseline save``: an inconclusive cell refused the save), 2 an error
(``perfguard: error: ...``) or bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfguard.ab.bisect import bisect
from perfguard.ab.calibrate import (
    CalibrationPlan,
    calibrate_command,
    check_command,
    select_cells,
)
from perfguard.baseline import git as gitinfo
from perfguard.baseline.read import pooled_run, read_baseline_file
from perfguard.baseline.store import (
    DEFAULT_ROOT,
    Baseline,
    DirectoryStore,
    MemoryStore,
    StoreProblem,
)
from perfguard.core.atomicio import read_stored_bytes, write_text_atomic
from perfguard.core.errors import (
    GitError,
    Location,
    ModelError,
    PerfguardError,
    ResultsError,
    StoreError,
    SuiteError,
)
from perfguard.core.gitignore import CACHE_DIR, GENERATED, not_ignored
from perfguard.core.paths import under_root
from perfguard.core.policy import CONFIDENCE, CONTENTION_LIMIT, NORMALISE
from perfguard.core.scenario import InputSpec, ModelSpec
from perfguard.core.text import one_line
from perfguard.interop.benchmark_json import export_command
from perfguard.judge import changes
from perfguard.judge.calibration import CalibrationFile
from perfguard.judge.outcome import OUTCOMES, Outcome, cell_outcomes, unique
from perfguard.judge.save import COMMAND_SAVE, Saver, check_can_save, save_refused_fix
from perfguard.judge.stored import judge_runs
from perfguard.judge.verdict import SEVERITY
from perfguard.machine.env import collect_environment
from perfguard.measure.opencell import RunContext
from perfguard.measure.plant import MAX_FRACTION
from perfguard.models.factory import (
    feeds_positionally,
    forward_parameters,
    load_factory,
    on_sys_path,
)
from perfguard.models.inputs import make_inputs
from perfguard.records.results import Environment, RunResult, ScenarioResult
from perfguard.records.resultsfile import read_results
from perfguard.report.cli_report import report_command
from perfguard.run.finish import save_lines
from perfguard.shard.merge import merge_command
from perfguard.shard.plan import PLAN_FILENAME
from perfguard.suite import grammar, starter
from perfguard.suite.files import SUITE_PATTERNS, is_suite_path
from perfguard.suite.loader import load_suite
from perfguard.suite.pretrained import find_pretrained, generation_loop, pretrained_inputs
from perfguard.suite.project import project_libraries
from perfguard.suite.starter import StarterInput

_SHORT_SHA = re.compile(r"[0-9a-fA-F]{4,63}")
Handler = Callable[[argparse.Namespace], int]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Aligned rows: the first ``left`` columns left-aligned, the rest right-aligned."""
    every = [list(headers), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in every) for i in range(len(headers))]
    return [
        "  ".join(
            c.ljust(widths[i]) if i < left else c.rjust(widths[i]) for i, c in enumerate(r)
        ).rstrip()
        for r in every
    ]


def _figures(r: ScenarioResult) -> dict[str, Any]:
    """The figures shown per scenario (latencies in ms), None where not measured."""
    lat = r.latency_ns
    ms = {f"{k}_ms": getattr(lat, k) / 1e6 if lat else None for k in ("p50", "p95", "p99")}
    return {
        "status": r.status,
        "n": lat.n if lat else None,
        **ms,
        "throughput": r.throughput,
        "canary_ns": r.canary_ns,
        "p95_per_canary": lat.p95 / r.canary_ns if lat and r.canary_ns else None,
    }


def _problem(p: StoreProblem) -> str:
    """An unreadable file's path and what is wrong (its message often names the path)."""
    return p.message if str(p.path) in p.message else f"{p.path}: {p.message}"


def _iso(baseline: Baseline) -> str:
    return baseline.created_at.isoformat(timespec="seconds")


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _cells(f: dict[str, Any]) -> list[str]:
    """n, P50, P95, P99 (ms) and throughput of :func:`_figures`, as table cells."""
    lat = [_fmt(f[k], ".3f") for k in ("p50_ms", "p95_ms", "p99_ms")]
    return [_fmt(f["n"], "d"), *lat, _fmt(f["throughput"], ".1f")]


def _this_environment() -> Environment:
    """This machine's environment, with the model libraries that the factories of the
    current directory's suites (by the default suite patterns) import."""
    return collect_environment(libraries=project_libraries(Path.cwd()))


def _fingerprint(store: DirectoryStore, chosen: str | None) -> str:
    """``--fingerprint`` or this machine's; StoreError naming the stored ones if it has none."""
    fp = chosen or _this_environment().fingerprint
    if store.commits(fp):
        return fp
    whose, stored = "" if chosen else " (this machine)", ", ".join(store.fingerprints())
    fix = f"pass --fingerprint with one of: {stored}" if stored else "check --baseline-dir"
    raise StoreError(f"no baselines for environment {fp}{whose} under {store.root}", fix=fix)


def _readable(store: DirectoryStore, fp: str) -> list[Baseline]:
    """The baselines of ``fp`` that can be read, oldest first (``scan()`` lists the rest)."""
    found = []
    for sha in store.commits(fp):
        with contextlib.suppress(ResultsError):
            if (baseline := store.load(fp, sha)) is not None:
                found.append(baseline)
    return sorted(found, key=lambda b: (b.created_at, b.sha))


def _load_run(path: Path) -> RunResult:
    """A results file, or a baseline file pooled per scenario into one run."""
    return pooled_run(read_baseline_file(path))


def _cmd_compare(args: argparse.Namespace) -> int:
    base, current = _load_run(Path(args.base)), _load_run(Path(args.current))
    names = (f"current {args.current}", f"baseline {args.base}")
    verdicts = judge_runs(current, base, names=names, **_judging(args))
    if args.json:
        print(json.dumps([v.to_dict() for v in verdicts], indent=2))
        return 1 if any(v.failed for v in verdicts) else 0
    # A cell that failed or errored in its run says so (not "invalid: scenario failed");
    # every other one its verdict and the verdict's sentences, each once.
    by_id = {c.scenario_id: c for c in cell_outcomes(current.scenarios, verdicts)}
    rows = []
    for v in verdicts:
        cell = by_id.get(v.scenario_id)
        if cell is not None and cell.outcome in (Outcome.FAILED, Outcome.ERROR):
            rows.append((cell.outcome.rank, cell.outcome.value, v.scenario_id, cell.reason))
        else:
            rank = cell.outcome.rank if cell is not None else len(OUTCOMES)
            rows.append((rank, v.verdict.value, v.scenario_id, "; ".join(unique(v.messages))))
    for _rank, word, sid, why in sorted(rows, key=lambda r: (r[0], r[2])):
        print(f"{word:<12} {one_line(sid)}: {one_line(why) or '-'}")
    counts = Counter(word for _rank, word, _sid, _why in rows)
    total = f"{len(rows)} scenario{'s' if len(rows) != 1 else ''}"
    order = [*(k.value for k in SEVERITY), Outcome.FAILED.value, Outcome.ERROR.value]
    parts = [f"{counts[k]} {k}" for k in sorted(counts, key=order.index)]
    print(f"{total}: {', '.join(parts)}" if parts else total)
    return 1 if any(v.failed for v in verdicts) else 0


def _cmd_list(args: argparse.Namespace) -> int:
    store = DirectoryStore(args.baseline_dir)
    every = store.fingerprints()
    fingerprints = [args.fingerprint] if args.fingerprint in every else every
    if args.fingerprint is not None and args.fingerprint not in every:
        fix = f"pass one of: {', '.join(every)}" if every else "check --baseline-dir"
        raise StoreError(
            f"no baselines for environment {args.fingerprint} under {store.root}", fix=fix
        )
    if not fingerprints:
        print(f"no baselines under {store.root}")
    here = _this_environment().fingerprint if fingerprints else ""
    problems = []
    for fp in fingerprints:
        # Headers only: a file's samples are read (and checked) by show, history and runs.
        found, unreadable = store.headers(fp)
        problems += unreadable
        mark = " (this machine)" if fp == here else ""
        print(f"environment {fp}{mark}: {len(found)} baseline{'s' if len(found) != 1 else ''}")
        rows = [
            (
                h.sha[:12],
                h.measured_at.isoformat(timespec="seconds"),
                str(h.launches),
                str(h.scenarios),
            )
            for h in found
        ]
        for line in _table(("commit", "created_at", "launches", "scenarios"), rows, left=2):
            print(f"  {line}")
    if problems:
        print(f"unreadable baseline files ({len(problems)}, left untouched):")
        for p in problems:
            print(f"  {_problem(p)}")
    return 0


def _resolve_ref(ref: str, store: DirectoryStore, fp: str) -> str:
    """A full sha as given, else git's answer in the cwd, else a unique stored sha prefix."""
    if gitinfo.FULL_SHA_RE.fullmatch(ref.lower()):
        return ref.lower()
    try:
        return gitinfo.resolve(Path.cwd(), ref)
    except GitError:
        matches = [s for s in store.commits(fp) if s.startswith(ref.lower())]
        if _SHORT_SHA.fullmatch(ref) and len(matches) == 1:
            return matches[0]
        raise


def _cmd_show(args: argparse.Namespace) -> int:
    store = DirectoryStore(args.baseline_dir)
    fp = _fingerprint(store, args.fingerprint)
    sha = _resolve_ref(args.ref, store, fp)
    baseline = store.load(fp, sha)
    if baseline is None:
        elsewhere = ", ".join(f for f in store.fingerprints() if sha in store.commits(f))
        fix = f"it is stored for {elsewhere} (pass --fingerprint)" if elsewhere else None
        problem = f"no baseline for commit {sha[:12]} in environment {fp} under {store.root}"
        raise StoreError(problem, fix=fix or "see `perfguard baseline list`")
    branch = f" ({baseline.commit.branch})" if baseline.commit.branch else ""
    launches = f"{len(baseline.launches)} launch{'es' if len(baseline.launches) != 1 else ''}"
    print(f"baseline {sha[:12]}{branch}, environment {fp}, {launches}, newest {_iso(baseline)}")
    rows = []
    for sid in baseline.scenario_ids():
        r = baseline.pooled(sid)
        assert r is not None  # every listed id is in some launch
        canary = None if r.canary_ns is None else r.canary_ns / 1e3
        note = r.status if not r.passed else ("UNSTABLE" if not r.stable else "")
        rows.append([sid, *_cells(_figures(r)), _fmt(canary, ".1f"), note])
    headers = ("scenario", "n", "P50 ms", "P95 ms", "P99 ms", "thrpt/s", "canary us", "")
    print("\n".join(_table(headers, rows)))
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    store = DirectoryStore(args.baseline_dir)
    fps = store.fingerprints() if args.all_fingerprints else [_fingerprint(store, args.fingerprint)]
    if not fps:
        print(f"no baselines under {store.root}")
    verb = "would delete" if args.dry_run else "deleted"
    for fp in fps:
        commits, problems = store.commits(fp), store.scan(fp)
        memory = MemoryStore()  # a dry run applies the same rule to a copy of the bytes
        unreadable = {bad.sha for bad in problems}  # never pruned; not read again (size cap)
        for sha in commits if args.dry_run else ():
            if sha not in unreadable:
                memory.files[(fp, sha)] = read_stored_bytes(store.path_for(fp, sha))
        doomed = (memory if args.dry_run else store).prune(fp, args.keep)
        kept = len(commits) - len(problems) - len(doomed)
        print(f"environment {fp}: {verb} {len(doomed)}, kept {kept} (--keep {args.keep})")
        for sha in doomed:
            print(f"  {verb} {store.path_for(fp, sha)}")
        for p in problems:
            print(f"  skipped unreadable {_problem(p)}")
    return 0


def _cmd_save(args: argparse.Namespace) -> int:
    """``baseline save``: archive a run already measured, by ``--perfguard-save``'s rules."""
    path = Path(args.results)
    run = read_results(path)
    if run.mode != "plain":
        raise StoreError(
            f"{path} was measured in same-run A/B (its figures are interleaved with the "
            "base revision's), so it is no baseline for its commit",
            expected="the results.json of a plain `pytest --perfguard` run",
            fix="measure the commit without --perfguard-ab, then save that run",
        )
    if (path.parent / PLAN_FILENAME).exists():
        raise StoreError(
            f"{path} is one shard's results ({PLAN_FILENAME} lies beside it): a baseline "
            "saved from it would lack the other shards' cells",
            expected="the results.json of a whole run",
            fix="merge the shards and save them at once: `perfguard merge DIR... --save`",
        )
    refusal = check_can_save(
        run.commit, save=True, allow_dirty=args.allow_dirty, options=COMMAND_SAVE
    )
    if refusal is not None:
        raise StoreError(f"{path}: {refusal}")
    store = DirectoryStore(args.baseline_dir)
    stored = store.load(run.environment.fingerprint, run.commit.sha or "")
    if stored is not None and any(r.created_at == run.created_at for r in stored.launches):
        raise StoreError(
            f"{path} (measured {run.created_at}) is already a launch of "
            f"{store.path_for(run.environment.fingerprint, run.commit.sha or '')}",
            expected="a run not yet in the archive (saving it again would count it twice)",
            fix="nothing to do; `perfguard baseline show` lists what is stored",
        )
    saver = Saver(
        store, contention_limit=args.contention_limit, save_invalid=args.allow_inconclusive
    )
    saved = saver.save(run)
    if saved is not None:
        print(f"baseline saved: {saved}")
    fix = save_refused_fix(COMMAND_SAVE)
    for line, failed in save_lines(None, saver.save_refused, saver.save_marked, fix=fix):
        print(line, file=sys.stderr if failed else sys.stdout)
    return 0 if saved is not None else 1


def _ancestry(cwd: Path) -> tuple[list[str] | None, str]:
    """HEAD's ancestors (nearest first) in a git checkout, with how the order was chosen."""
    try:
        if gitinfo.repo_root(cwd) is None:
            return None, "by created_at (not in a git checkout)"
        shas = gitinfo.ancestors(cwd, "HEAD", limit=10_000)
    except GitError as exc:
        return None, f"by created_at (git: {exc.problem})"
    return shas, f"by ancestry of HEAD {shas[0][:12]}"


def _cmd_history(args: argparse.Namespace) -> int:
    if args.changes:
        return _history_changes(args)
    if args.scenario_id is None:
        raise StoreError(
            "no SCENARIO_ID given",
            expected="perfguard history SCENARIO_ID, or --changes (every cell)",
            fix="see `perfguard baseline show <commit>` for the stored ids",
        )
    store = DirectoryStore(args.baseline_dir)
    fp = _fingerprint(store, args.fingerprint)
    ancestors, how = _ancestry(Path.cwd())
    entries: list[dict[str, Any]] = []
    for sha, result in store.history(fp, args.scenario_id, ancestors):
        loaded = store.load(fp, sha)
        when = _iso(loaded) if loaded else None
        entries.append({"commit": sha, "created_at": when, **_figures(result)})
    for p in store.problems:
        print(f"perfguard: skipped unreadable {_problem(p)}", file=sys.stderr)
    _known(store, fp, args.scenario_id, bool(entries))
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    print(f"history of {args.scenario_id} in environment {fp}, oldest first, {how}")
    if not entries:
        print("no stored commit that holds it is an ancestor of HEAD")
        return 0
    rows = []
    for e in entries:
        date = (e["created_at"] or "-")[:16].replace("T", " ")
        rows.append([e["commit"][:12], date, *_cells(e), _fmt(e["p95_per_canary"], ".2f")])
    headers = ("commit", "date", "n", "P50 ms", "P95 ms", "P99 ms", "thrpt/s", "P95/canary")
    print("\n".join(_table(headers, rows, left=2)))
    return 0


def _known(store: DirectoryStore, fp: str, sid: str, found: bool) -> None:
    """StoreError when no readable baseline of ``fp`` holds scenario ``sid``."""
    if found or any(sid in b.scenario_ids() for b in _readable(store, fp)):
        return
    raise StoreError(
        f"no baseline of environment {fp} holds scenario {sid!r}",
        expected="an id such as suites/x.yaml::name[cell]",
        fix="see `perfguard baseline show <commit>` for the stored ids",
    )


def _first_parent(cwd: Path) -> tuple[list[str] | None, str]:
    """HEAD's first-parent chain (nearest first) in a git checkout, with how it was read."""
    try:
        if gitinfo.repo_root(cwd) is None:
            return None, "by created_at (not in a git checkout)"
        shas = changes.first_parent(cwd)
    except GitError as exc:
        return None, f"by created_at (git: {exc.problem})"
    return shas, f"first-parent history of HEAD {shas[0][:12]}"


def _history_changes(args: argparse.Namespace) -> int:
    """``history --changes``: the change points of one cell, or of every stored cell."""
    store = DirectoryStore(args.baseline_dir)
    fp = _fingerprint(store, args.fingerprint)
    chain, how = _first_parent(Path.cwd())
    if args.scenario_id is not None:
        sids = [args.scenario_id]
    else:
        sids = list(dict.fromkeys(s for b in _readable(store, fp) for s in b.scenario_ids()))
    found: list[changes.ChangePoint] = []
    scanned = 0
    for sid in sids:
        history = store.history(fp, sid, chain)
        scanned += bool(history)
        found += changes.cell_changes(sid, history)
    for p in dict.fromkeys(_problem(p) for p in store.problems):
        print(f"perfguard: skipped unreadable {p}", file=sys.stderr)
    if args.scenario_id is not None:
        _known(store, fp, args.scenario_id, scanned > 0)
    if args.json:
        print(json.dumps([c.to_dict() for c in found], indent=2))
        return 0
    what = args.scenario_id or f"{len(sids)} cell{'' if len(sids) == 1 else 's'}"
    print(f"change points of {what} in environment {fp}, oldest first, {how}")
    if not found:
        print(f"no change point ({scanned} series scanned; see docs/changes.md)")
        return 0
    rows = [
        [
            c.scenario_id,
            c.label,
            c.commit[:12],
            f"{c.before:.4g} -> {c.after:.4g} {c.unit}".rstrip(),
            f"{c.change * 100:+.1f}%",
            "failed" if c.gated else "passed",
            f"git log {c.previous[:12]}..{c.commit[:12]}",
        ]
        for c in found
    ]
    headers = ("scenario", "metric", "commit", "before -> after", "change", "gate", "range")
    print("\n".join(_table(headers, rows, left=3)))
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    rootdir = Path.cwd()
    cells = select_cells([Path(s) for s in args.suites] or [Path("suites")], args.keyword)
    if not cells:
        print("perfguard calibrate: no cell matched", file=sys.stderr)
        return 2
    plan = CalibrationPlan(
        aa=args.aa,
        planted=args.planted,
        sizes=tuple(args.sizes),
        budget_s=args.budget * 60,
        seed=args.seed,
        contention_limit=args.contention_limit,
    )
    ctx = RunContext(rootdir=rootdir, cache_dir=rootdir / CACHE_DIR)
    store = CalibrationFile(Path(args.baseline_dir), _this_environment().fingerprint)
    if args.check is not None:
        found, unchecked = check_command(
            cells,
            ctx,
            store,
            runs=args.check,
            budget_s=plan.budget_s,
            seed=args.seed,
            contention_limit=args.contention_limit,
        )
        if any(d.drifted for d in found):
            return 1
        return 2 if unchecked else 0
    plans = [plan, dataclasses.replace(plan, mode="archived")] if args.archived else [plan]
    _, failed = calibrate_command(cells, ctx, plans, store, fresh=args.fresh)
    return 2 if failed else 0


def _fractions(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or not all(0 < v <= MAX_FRACTION for v in values):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of slowdowns, e.g. 0.05,0.1 (each in (0, {MAX_FRACTION:g}])"
        )
    return values


def _cmd_env(args: argparse.Namespace) -> int:
    env = _this_environment()
    if args.json:
        print(json.dumps(env.to_dict(), indent=2))
        return 0
    print(f"fingerprint {env.fingerprint}")
    absent = env.recorded.get("gpu_absent")
    if absent:
        print(f"no GPU in the fingerprint: {absent}")
    for title, fields in (("comparable", env.comparable), ("recorded", env.recorded)):
        print(title + (" (must match to compare runs):" if fields is env.comparable else ":"))
        for line in _table(("field", "value"), sorted(fields.items()), left=2)[1:]:
            print(f"  {line}")
    return 0


def _confidence(text: str) -> float:
    value = float(text) if re.fullmatch(r"0?\.\d+", text.strip()) else 0.0
    if not 0.5 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number in (0.5, 1), e.g. 0.99")
    return value


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return int(text)


def _runs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of runs >= 1")
    return int(text)


def _cmd_export(args: argparse.Namespace) -> int:
    written = export_command(Path(args.results), args.format, Path(args.out) if args.out else None)
    print(written if isinstance(written, str) else f"wrote {written}")
    return 0


def _judging(args: argparse.Namespace) -> dict[str, Any]:
    """The judging settings both ``compare`` and ``report --baseline`` take."""
    return {
        "rootdir": Path(args.rootdir) if args.rootdir else Path.cwd(),
        "confidence": args.confidence,
        "normalise": args.normalise,
        "contention_limit": args.contention_limit,
    }


def _judging_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--confidence", type=_confidence, default=CONFIDENCE, help=f"default {CONFIDENCE:g}"
    )
    p.add_argument(
        "--normalise",
        action="store_true",
        default=NORMALISE,
        help="gate on canary-normalised latencies (as pytest --perfguard-normalise)",
    )
    p.add_argument(
        "--contention-limit",
        type=_share,
        default=CONTENTION_LIMIT,
        metavar="SHARE",
        help="share of the CPUs other processes may have used while a run was measured "
        f"before it is invalid (as pytest --perfguard-contention-limit; "
        f"default {CONTENTION_LIMIT:g})",
    )
    p.add_argument("--rootdir", help="where suite files are found, for their gates (default: cwd)")


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share >= 0, e.g. 0.1")
    return value


def _cmd_report(args: argparse.Namespace) -> int:
    html = report_command(
        Path(args.results),
        Path(args.baseline) if args.baseline else None,
        Path(args.out) if args.out else None,
        baseline_dir=Path(args.baseline_dir),
        **_judging(args),
    )
    print(f"wrote {html}")
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    return merge_command(
        [Path(d) for d in args.dirs],
        out_dir=Path(args.out),
        baseline_dir=Path(args.baseline_dir),
        shards=args.shards,
        save=args.save,
        save_invalid=args.save_invalid,
        allow_dirty=args.allow_dirty,
        gate=not args.no_gate,
        contention_limit=args.contention_limit,
    )


def _cmd_bisect(args: argparse.Namespace) -> int:
    try:
        return bisect(
            Path.cwd(),
            args.good,
            args.bad,
            args.cell,
            args.pytest_args,
            allow_dirty=args.allow_dirty,
            echo=lambda line: print(line, flush=True),
        )
    except KeyboardInterrupt:
        print("perfguard: bisect interrupted; its worktree is removed", file=sys.stderr)
        return 130


def _cmd_keys(args: argparse.Namespace) -> int:
    rows = [row for row in grammar.walk() if row.path.startswith(args.prefix)]
    if not rows:
        tops = ", ".join(grammar.SUITE.names)
        raise PerfguardError(
            f"no suite key starts with {args.prefix!r}",
            expected=f"a key path such as `scenarios[].load` (top-level keys: {tops})",
            fix="run `perfguard keys` without a prefix to list every key",
        )
    if args.json:
        print(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
        return 0
    table = [[row.path, row.type, row.default or "-", row.doc] for row in rows]
    print("\n".join(_table(["KEY", "TYPE", "DEFAULT", "MEANING"], table, left=4)))
    return 0


# The first layer of a one-input model says what the input looks like.
_FIRST_LAYER_SHAPES = {"Linear": 1, "Conv1d": 2, "Conv2d": 3, "Conv3d": 4}
_TOKEN_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "position_ids")


def _guess(module: Any, name: str, only: bool) -> StarterInput:
    """A starting spec for input ``name`` of a torch module (a placeholder with a TODO)."""
    import torch

    if name in _TOKEN_INPUTS or name.endswith("_ids"):
        fill = 1 if name == "attention_mask" else 0 if name == "token_type_ids" else None
        note = f"a sequence of {starter.DIM} tokens: check the length"
        return StarterInput(name, (starter.BATCH, starter.DIM), "int64", note, fill=fill)
    leaves = [m for m in module.modules() if not list(m.children())]
    first = leaves[0] if leaves and only else None
    kind = type(first).__name__
    if isinstance(first, torch.nn.Embedding):
        note = f"token ids for its first layer, Embedding({first.num_embeddings}, ...)"
        high = int(first.num_embeddings)
        return StarterInput(name, (starter.BATCH, starter.DIM), "int64", note, low=0, high=high)
    if first is not None and kind in _FIRST_LAYER_SHAPES:
        features = int(getattr(first, "in_features", 0) or getattr(first, "in_channels", 0))
        rest = (starter.DIM,) * (_FIRST_LAYER_SHAPES[kind] - 1)
        shape = (starter.BATCH, features, *rest)
        return StarterInput(name, shape, "float32", f"from its first layer, {kind}")
    note = "TODO: shape and dtype are a guess; set the ones forward() expects"
    return StarterInput(name, (starter.BATCH, starter.DIM), "float32", note)


def _forward_error(module: Any, inputs: Sequence[StarterInput], base_dir: Path) -> str | None:
    """``None`` when ``module`` runs on the starter inputs, else what it raised."""
    import torch

    specs = tuple(InputSpec(i.name, i.shape, i.dtype, i.low, i.high, i.fill) for i in inputs)
    model = ModelSpec("init", Location(Path("--factory")), base_dir, inputs=specs)
    feeds = {k: torch.from_numpy(v) for k, v in make_inputs(model).items()}
    try:
        with torch.no_grad():
            module.eval()
            if feeds_positionally(module, list(feeds)):
                module(*feeds.values())
            else:
                module(**feeds)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
    return None


@dataclasses.dataclass(frozen=True)
class _FactoryStarter:
    """What ``init`` found out about a factory's model."""

    inputs: list[StarterInput]
    note: str  # on the suite's `inputs:` line
    found_in: Path  # where its module was imported from
    torch_only: str | None = None  # why no ONNX Runtime cell is proposed


def _signature_inputs(module: Any, *, generating: bool) -> list[StarterInput]:
    """Inputs from the model's config (a ``transformers`` model) or its forward()."""
    accepted, required, var_kw = forward_parameters(module)
    pretrained = find_pretrained(module)
    if pretrained is not None:
        takes = accepted
        if var_kw or not required:  # a wrapper passing **kwargs on: the model's own names
            takes = [*accepted, *forward_parameters(pretrained)[0]]
        found = pretrained_inputs(pretrained, takes, generating=generating)
        names = {spec.name for spec in found}
        rest = [n for n in required if n not in names]
        if found:
            return found + [_guess(module, n, only=False) for n in rest]
    if not required:
        note = "TODO: forward() names no required input; describe its inputs"
        return [StarterInput("x", (starter.BATCH, starter.DIM), "float32", note)]
    return [_guess(module, n, only=len(required) == 1) for n in required]


def _factory_inputs(factory: str, name: str, cwd: Path, suite_dir: Path) -> _FactoryStarter:
    """Starter inputs from a factory's model (its config or forward() signature), a
    note, where it was found and whether it runs in torch only.

    The module is imported as a run would: from the suite's folder first, then the
    project root (which a run finds only through pytest's ``pythonpath``).
    """
    pattern = grammar.MODEL.key("factory").type
    assert isinstance(pattern, grammar.Scalar) and pattern.pattern is not None
    if not re.fullmatch(pattern.pattern, factory):
        raise ModelError(
            f"--factory {factory!r} is not of the form module:function",
            expected="e.g. `--factory mypackage.models:build` (dotted module, `:`, function)",
            fix="separate the module and the function with `:`",
        )
    spec = ModelSpec(name, Location(Path("--factory")), suite_dir, factory=factory)
    with on_sys_path(str(cwd.resolve())):
        module = load_factory(spec)
    top = factory.split(":")[0].split(".")[0]
    origin = Path(getattr(sys.modules.get(top), "__file__", None) or cwd).resolve()
    found_in = origin.parent.parent if origin.name == "__init__.py" else origin.parent
    torch_only = generation_loop(module)
    inputs = _signature_inputs(module, generating=torch_only is not None)
    if inputs[0].note.startswith("TODO: forward() names no required input"):
        return _FactoryStarter(inputs, "", found_in, torch_only)
    error = _forward_error(module, inputs, cwd)
    if error is not None:
        note = f"TODO: forward() raised {error} on these inputs; fix their shapes and dtypes"
        return _FactoryStarter(inputs, note, found_in, torch_only)
    return _FactoryStarter(inputs, "forward() ran on these inputs", found_in, torch_only)


def _project_path(path: Path, cwd: Path) -> str | None:
    """``path`` relative to ``cwd`` (``.`` for cwd itself), or None when outside it."""
    rel = under_root(path, cwd)
    return None if rel is None else rel.as_posix()


def _cmd_init(args: argparse.Namespace) -> int:
    cwd = Path.cwd()
    if args.onnx is not None:
        onnx_path = Path(args.onnx)
        name = starter.suite_name(args.name or onnx_path.stem)
    else:
        module = args.factory.split(":")[0]
        name = starter.suite_name(args.name or module.rsplit(".", 1)[-1])
    out = Path(args.out) if args.out else Path("suites") / f"{name}.yaml"
    if out.exists() and not args.force:
        raise PerfguardError(
            f"{out} already exists",
            expected="a path with no file yet",
            fix="pass --force to overwrite it, or --out to write another file",
        )
    ini: list[str] = []
    if args.onnx is not None:
        inputs = starter.onnx_inputs(onnx_path)
        source = Path(os.path.relpath(onnx_path.resolve(), out.parent.resolve())).as_posix()
        text = starter.render(
            name, out, inputs, root=cwd, onnx=source, source_note="from the ONNX graph"
        )
    else:
        found = _factory_inputs(args.factory, name, cwd, out.parent.resolve())
        inputs, found_in = found.inputs, found.found_in
        where = _project_path(found_in, cwd)
        installed = {"site-packages", "dist-packages"} & set(found_in.parts)
        if where is not None and not installed and found_in != out.parent.resolve():
            top = args.factory.split(".")[0].split(":")[0]
            ini.append(f'pythonpath = ["{where}"]  # `{top}` is imported from {where}/')
        text = starter.render(
            name,
            out,
            inputs,
            root=cwd,
            factory=args.factory,
            source_note=found.note,
            torch_only=found.torch_only,
        )
    folder = _project_path(out.parent, cwd)
    if folder is not None and not is_suite_path(f"{folder}/{out.name}".removeprefix("./")):
        pattern = "*.yaml" if folder == "." else f"{folder}/*.yaml"
        ini.append(f'perfguard_suite_patterns = ["{pattern}"]  # collect it without naming it')
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, text)
    try:
        load_suite(out)
    except SuiteError:
        out.unlink()  # a starter the loader refuses is perfguard's bug; leave nothing behind
        raise
    print(f"wrote {out} ({len(inputs)} input{'s' if len(inputs) != 1 else ''})")
    todo = sum("TODO" in line for line in text.splitlines())
    if todo:
        print(f"{todo} TODO line{'s' if todo != 1 else ''} to check in {out}")
    if ini:
        print("add to pyproject.toml:\n[tool.pytest.ini_options]")
        print("\n".join(ini))
    else:
        print(f"no pytest settings needed: `pytest --perfguard` collects {SUITE_PATTERNS[0]}")
    print(f"run it: pytest --perfguard {out.as_posix()}")
    if not text.startswith("# yaml-language-server:"):
        print(
            f"editor schema: {starter.SCHEMA_FILE} (not written into {out}: "
            "a path of this machine, and the file is meant to be committed)"
        )
    _offer_gitignore(cwd / ".gitignore", write=args.gitignore)
    return 0


def _offer_gitignore(gitignore: Path, *, write: bool) -> None:
    """Say which of perfguard's generated folders ``gitignore`` leaves out, and the
    lines that ignore them; add them only when asked (``--gitignore``)."""
    missing = not_ignored(gitignore)
    if not missing:
        return
    what = " and ".join(f"{line} ({GENERATED[line]})" for line in missing)
    if write:
        text = gitignore.read_text(encoding="utf-8") if gitignore.exists() else ""
        lead = "\n" if text and not text.endswith("\n") else ""
        lines = "".join(f"{line}\n" for line in missing)
        write_text_atomic(gitignore, f"{text}{lead}# perfguard's generated files\n{lines}")
        print(f"added to {gitignore.name}: {what}")
        return
    found = "does not ignore" if gitignore.exists() else "is missing: git would not ignore"
    print(f"{gitignore.name} {found} {what}; add these lines to it (init --gitignore adds them):")
    print("\n".join(missing))


class _DeprecatedAlias(argparse.Action):
    """An option kept for old scripts: it sets its replacement's value, with a warning."""

    def __init__(self, *args: Any, replacement: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replacement = replacement

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"perfguard: warning: {option_string} is deprecated and will be removed; "
            f"use {self.replacement} (the same value)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def _baseline_dir_option(p: argparse.ArgumentParser, *, legacy: bool = True) -> None:
    """``--baseline-dir``, as every command and pytest's ``--perfguard-baseline-dir`` name
    the archive; ``legacy``: also the ``--dir`` the archive commands took first."""
    p.add_argument(
        "--baseline-dir",
        default=str(DEFAULT_ROOT),
        metavar="DIR",
        help="the baseline archive (default: baselines)",
    )
    if legacy:
        p.add_argument(
            "--dir",
            dest="baseline_dir",
            action=_DeprecatedAlias,
            replacement="--baseline-dir",
            metavar="DIR",
            help="deprecated spelling of --baseline-dir",
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfguard", description="Compare stored perfguard runs and manage baselines."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fp_help = "environment fingerprint (default: this machine's)"

    def command(
        owner: Any, name: str, func: Handler, text: str, store: bool = False, fp: bool = False
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = owner.add_parser(name, help=text, description=text)
        p.set_defaults(func=func)
        if store:
            _baseline_dir_option(p)
        if fp:
            p.add_argument("--fingerprint", help=fp_help)
        return p

    p = command(sub, "compare", _cmd_compare, "compare two results or baseline files")
    p.add_argument("base", metavar="BASE", help="reports/<c>/results.json or a baseline file")
    p.add_argument("current", metavar="CURRENT", help="the run to judge (same kinds of file)")
    _judging_options(p)
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")

    text = "inspect, add to or prune the baseline archive"
    base = sub.add_parser("baseline", help=text, description=text)
    bsub = base.add_subparsers(dest="action", required=True, metavar="ACTION")
    text = "list stored baselines (reads each file's header, not its samples)"
    p = command(bsub, "list", _cmd_list, text, store=True)
    p.add_argument("--fingerprint", help="list only this environment (default: every one)")
    p = command(bsub, "show", _cmd_show, "show one baseline's figures", store=True, fp=True)
    p.add_argument("ref", metavar="REF", help="commit sha or git ref")
    text = "archive a run already measured (reports/<commit>/results.json) as its commit's baseline"
    p = command(bsub, "save", _cmd_save, text)
    p.add_argument("results", metavar="RESULTS", help="reports/<commit12>/results.json")
    p.add_argument(
        "--allow-inconclusive",
        action="store_true",
        help="save with the inconclusive cells marked (as pytest --perfguard-save-invalid)",
    )
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="save a run measured with uncommitted changes (as --perfguard-allow-dirty)",
    )
    p.add_argument(
        "--contention-limit",
        type=_share,
        default=CONTENTION_LIMIT,
        metavar="SHARE",
        help="share of the CPUs other processes may have used while a cell was measured "
        f"before it refuses the save (as pytest --perfguard-contention-limit; "
        f"default {CONTENTION_LIMIT:g})",
    )
    _baseline_dir_option(p, legacy=False)
    p = command(bsub, "prune", _cmd_prune, "delete all but the newest N", store=True)
    p.add_argument("--keep", type=_count, required=True, metavar="N")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--fingerprint", help=fp_help)
    which.add_argument("--all-fingerprints", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="only say what would be deleted")

    p = command(sub, "history", _cmd_history, "one scenario across commits", store=True, fp=True)
    p.add_argument(
        "scenario_id",
        nargs="?",
        metavar="SCENARIO_ID",
        help="e.g. suites/x.yaml::name[cell] (optional with --changes: every cell)",
    )
    p.add_argument(
        "--changes",
        action="store_true",
        help="list change points along HEAD's first-parent history (docs/changes.md)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")

    p = command(sub, "report", _cmd_report, "render the HTML report of a stored run")
    p.add_argument("results", metavar="RESULTS", help="reports/<c>/results.json")
    p.add_argument("--baseline", help="results.json or baseline file to compare with")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write DIR/report.html and DIR/summary.md (default: beside RESULTS)",
    )
    _baseline_dir_option(p, legacy=False)
    _judging_options(p)

    text = "merge the outputs of --perfguard-shard runs into one run's files; exit 1 if it fails"
    p = command(sub, "merge", _cmd_merge, text)
    p.add_argument("dirs", nargs="+", metavar="DIR", help="a shard's output: reports/ or below")
    p.add_argument(
        "--shards", type=_count, metavar="N", help="the matrix's N (default: the plan's)"
    )
    p.add_argument("--out", default="reports", help="report directory (default: reports)")
    p.add_argument("--save", action="store_true", help="archive the merged run as HEAD's baseline")
    p.add_argument(
        "--save-invalid", action="store_true", help="save with inconclusive cells marked"
    )
    p.add_argument("--allow-dirty", action="store_true", help="save a run of a dirty tree")
    _baseline_dir_option(p, legacy=False)
    p.add_argument("--no-gate", action="store_true", help="exit 0 whatever the verdicts")
    p.add_argument(
        "--contention-limit",
        type=_share,
        default=None,
        metavar="SHARE",
        help="a cell measured beside busier neighbours refuses --save (default: the "
        "limit the shards ran with)",
    )

    text = "find the first commit that regressed one cell: git bisect run, same-run A/B"
    p = command(sub, "bisect", _cmd_bisect, text)
    p.add_argument("good", metavar="GOOD", help="a commit without the slowdown")
    p.add_argument("bad", metavar="BAD", help="a later commit with it (descends from GOOD)")
    p.add_argument("--cell", required=True, metavar="ID", help="e.g. suites/x.yaml::name[cell]")
    p.add_argument("--allow-dirty", action="store_true", help="bisect with uncommitted changes")
    p.add_argument(
        "--pytest-args",
        nargs=argparse.REMAINDER,
        default=[],
        metavar="ARG",
        help="last: the rest is passed to each midpoint's pytest run (e.g. -p no:xdist)",
    )

    p = command(sub, "export", _cmd_export, "write results in another tool's format")
    p.add_argument("results", metavar="RESULTS", help="reports/<c>/results.json")
    p.add_argument("--format", required=True, choices=["pytest-benchmark"])
    p.add_argument("-o", "--out", help="file to write (default: stdout)")

    text = (
        "measure what the gate sees on this machine: A/A and planted-slowdown runs of "
        "each cell in same-run A/B, and its calibration sheet"
    )
    p = command(sub, "calibrate", _cmd_calibrate, text, store=True)
    p.add_argument(
        "suites", nargs="*", metavar="SUITES", help="suite files or folders (default: suites)"
    )
    p.add_argument("-k", dest="keyword", metavar="EXPR", help="only cells matching, as pytest -k")
    p.add_argument("--aa", type=_count, default=CalibrationPlan.aa, help="A/A runs per cell")
    p.add_argument(
        "--planted", type=_count, default=CalibrationPlan.planted, help="runs per planted size"
    )
    p.add_argument(
        "--sizes",
        type=_fractions,
        default=(),
        metavar="F,F",
        help="planted slowdowns, e.g. 0.05,0.1 (default: the cell's limit and twice it)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=CalibrationPlan.budget_s / 60,
        metavar="MINUTES",
        help="how long the calibration may run (default 30; a run started goes on to its end)",
    )
    p.add_argument("--seed", type=int, default=0, help="the runs' order and pairs (default 0)")
    p.add_argument("--fresh", action="store_true", help="drop the runs kept from before")
    p.add_argument(
        "--archived",
        action="store_true",
        help="calibrate the archived gate too (each run: the cell measured whole twice, in "
        "fresh workers, judged as against a stored baseline)",
    )
    p.add_argument(
        "--contention-limit",
        type=float,
        default=CONTENTION_LIMIT,
        metavar="F",
        help="the archived gate's contention limit, as the runner's gate sets it "
        f"(--perfguard-contention-limit; default {CONTENTION_LIMIT})",
    )
    p.add_argument(
        "--check",
        type=_runs,
        nargs="?",
        const=10,
        metavar="RUNS",
        help="check the runner against its sheets instead: RUNS A/A runs per calibrated cell "
        "(default 10); exit 1 when its noise drifted",
    )
    p = command(sub, "env", _cmd_env, "this machine's environment fingerprint")
    p.add_argument("--json", action="store_true", help="print it as JSON")

    p = command(sub, "keys", _cmd_keys, "list every suite key: path, type, default, meaning")
    p.add_argument("prefix", nargs="?", default="", metavar="PREFIX", help="e.g. scenarios[].load")
    p.add_argument("--json", action="store_true", help="print the keys as JSON")

    p = command(sub, "init", _cmd_init, "write a commented starter suite for one model")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--factory", metavar="MODULE:FUNCTION", help="a torch model factory")
    source.add_argument("--onnx", metavar="PATH", help="an ONNX file")
    p.add_argument("--name", help="model and scenario name (default: from the module or file)")
    p.add_argument("-o", "--out", help="suite file to write (default: suites/<name>.yaml)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.add_argument(
        "--gitignore",
        action="store_true",
        help="add the lines ignoring perfguard's generated folders (.perfguard/, reports/) "
        "to ./.gitignore (without it, init only prints them)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; 0 ok, 1 regression (compare), 2 error."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    try:
        status: int = args.func(args)
    except (PerfguardError, OSError) as exc:  # str(PerfguardError) is its full message
        print(f"perfguard: error: {exc}", file=sys.stderr)
        return 2
    return status
