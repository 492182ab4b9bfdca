"""Same-run A/B against a git revision: the base measured again, request by request.

``pytest --perfguard --perfguard-ab=REF`` checks REF out into a temporary git
worktree (:mod:`perfguard.ab.worktree`; for a branch name, the merge base of HEAD
and that branch) and, for every single-request cell, opens cell **A** from the
base revision's code and suite and cell **B** from the working tree's, both in
slots of one worker process (:mod:`perfguard.worker`; a process's own speed
varies from process to process, and only what both sides share cancels). Both
warm up; then the worker alternates one request of each per pair, the order
randomised within each pair, in blocks of pairs (the ``pairs`` op: no pipe round
trip between requests, so neither side pays for the other's bookkeeping), until
the sequential rule of :mod:`perfguard.ab.paired` stops (clear answer, or the
pair/time cap). The verdict is paired: the ratio of the two P95s with a
bootstrap bound over request pairs, so whatever slowed the machine during a pair
slowed both of its requests.

* Both sides run the *current* perfguard harness (the base worker imports
  perfguard from this installation, everything else from the base tree), so a
  harness change never shows up as a model regression.
* The base runs on this interpreter unless ``--perfguard-ab-python`` names
  another (a virtual environment with the base's dependencies); then each side
  has a worker of its own and the parent alternates single ``measure`` requests.
* A cell only in the working tree is ``new`` (with the base suite's load error
  when it did not load); one only in the base is ``missing``.
* A cell under ``load:`` at a fixed level is compared in *rounds*: one short level of
  A and one of B per round, in random order, in the same worker(s) (the ``load_warmup``
  and ``load_level`` ops), judged on each round's corrected P95 by the same rule
  (:mod:`perfguard.ab.rounds`). An SLO search is measured and gated as usual.
* The worktree is removed on every exit path, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import perfguard
from perfguard.ab.paired import (
    StoppingRule,
    conclusion,
    decide,
    pair_orders,
    per_round,
    progress_text,
)
from perfguard.ab.rounds import (
    LevelSample,
    LoadRound,
    RoundPlan,
    TokenRoundRule,
    ab_rounds,
    alternating,
    compared,
    order_text,
    pooled,
    run_rounds,
    token_values,
)
from perfguard.ab.tokenpairs import TokenGate, TokenLooks, TokenPairs, token_gates
from perfguard.ab.worktree import BaseRef, base_worktree, resolve_base
from perfguard.baseline.git import repo_root, run_git
from perfguard.core import progress
from perfguard.core.blame import first_line
from perfguard.core.errors import GitError, LoadError, ProtocolError, SuiteError
from perfguard.core.paths import under_root
from perfguard.core.policy import LATENCY_QS, gate_metric
from perfguard.core.progress import Throttle
from perfguard.core.scenario import Scenario
from perfguard.core.stats import percentile, stability_ratio, throughput
from perfguard.judge.abside import ab_how, ab_label
from perfguard.judge.compare import compare_memory
from perfguard.judge.gatekeeper import Gatekeeper
from perfguard.judge.verdict import (
    ABDetail,
    Decision,
    DecisionKind,
    MetricVerdict,
    ScenarioVerdict,
    VerdictKind,
    worst,
)
from perfguard.measure.generation import token_result
from perfguard.measure.loadcell import interleavable
from perfguard.measure.opencell import RunContext
from perfguard.measure.profiling import PROFILE_REQUESTS
from perfguard.records.figures import RuntimeInfo, summarize
from perfguard.records.loadfigures import LoadFigures
from perfguard.records.opprofile import OperatorProfile
from perfguard.records.results import ScenarioResult
from perfguard.records.tokenfigures import TokenFigures
from perfguard.suite.loader import load_suite
from perfguard.worker.client import OPEN_TIMEOUT_S, WorkerProcess
from perfguard.worker.isolate import measure_timeout_s
from perfguard.worker.protocol import MAIN_SLOT

__all__ = [
    "ABConfig",
    "ABOutcome",
    "ABRun",
    "ProfileWhen",
    "ab_metric",
    "Slot",
    "latency_gate",
    "load_plan",
    "load_round_length",
    "run_load_rounds",
    "run_pairs",
    "side_figures",
    "take_profile",
]

REQUEST_TIMEOUT_S = 60.0
SETTLE_PAIRS = 30  # discarded after warm-up: both processes settle together
#: A load round's level: a fifth of the cell's ``measure.seconds``, within these bounds.
LOAD_ROUND_SECONDS = (0.25, 2.0)
#: An open-loop round lasts for at least this many arrivals (up to 5 s); a closed-loop
#: round runs at least this many requests (or the cell's ``measure.iterations``, if fewer).
LOAD_ROUND_REQUESTS = 50
_ROUND_SEED_OFFSET = 100  # round i's arrival schedule: the cell's seed + 100 + i


def load_round_length(scenario: Scenario) -> tuple[float, int]:
    """``(seconds, iterations)`` of one side's level in one A/B round of a load cell."""
    spec = scenario.load
    assert spec is not None
    measure = scenario.measure
    lo, hi = LOAD_ROUND_SECONDS
    seconds = min(max(measure.seconds / 5.0, lo), hi)
    if spec.mode == "open":
        seconds = max(seconds, min(LOAD_ROUND_REQUESTS / spec.level, 5.0))
    return seconds, max(1, min(measure.iterations, LOAD_ROUND_REQUESTS))


@dataclass(frozen=True)
class ABConfig:
    """What the command line asked for."""

    ref: str
    python: str | None = None  # the base worker's interpreter; None: this one
    seed: int = 0
    #: pytest's ``pythonpath`` ini entries as this run resolved them (absolute, in the
    #: working tree): each side puts them, mapped into its own tree, on ``sys.path``.
    pythonpath: tuple[str, ...] = ()


@dataclass(frozen=True)
class ABOutcome:
    """Paired samples of one cell and the stopping rule's decision."""

    samples_a: np.ndarray = field(compare=False)
    samples_b: np.ndarray = field(compare=False)
    decision: Decision
    elapsed_s: float
    metric: str
    limit: float


class Slot:
    """One side of an A/B comparison: a worker, and the slot its cell is open in."""

    def __init__(self, worker: WorkerProcess, slot: str) -> None:
        self.worker, self.slot = worker, slot

    def request(self, op: str, timeout_s: float | None = None, **fields: Any) -> dict[str, Any]:
        return self.worker.request(op, timeout_s=timeout_s, slot=self.slot, **fields)


def _pair_block(
    a: WorkerProcess | Slot,
    b: WorkerProcess | Slot,
    order: np.ndarray,
    timeout_s: float,
    tokens: bool = False,
) -> tuple[list[Any], list[Any]]:
    """``len(order)`` pairs: in one ``pairs`` request when both cells share a worker
    (no pipe round trip between requests), else one ``measure`` request at a time. Each
    side's request times (ns), or with ``tokens`` (generative cells) each request's
    token times."""
    if isinstance(a, Slot) and isinstance(b, Slot) and a.worker is b.worker:
        reply = a.worker.request(
            "pairs", timeout_s=timeout_s, order=[bool(x) for x in order], slots=[a.slot, b.slot]
        )
        if tokens:
            return list(reply["a_tokens"]), list(reply["b_tokens"])
        return [int(x) for x in reply["a_ns"]], [int(x) for x in reply["b_ns"]]
    key = "tokens" if tokens else "samples_ns"
    a_out: list[Any] = []
    b_out: list[Any] = []
    for a_first in order:
        first, second = (a, b) if a_first else (b, a)
        t_first = first.request("measure", timeout_s=timeout_s, k=1)[key][0]
        t_second = second.request("measure", timeout_s=timeout_s, k=1)[key][0]
        a_out.append(t_first if a_first else t_second)
        b_out.append(t_second if a_first else t_first)
    if not tokens:
        return [int(x) for x in a_out], [int(x) for x in b_out]
    return a_out, b_out


def run_pairs(
    a: WorkerProcess | Slot,
    b: WorkerProcess | Slot,
    rule: StoppingRule,
    *,
    seed: int = 0,
    settle: int = SETTLE_PAIRS,
    timeout_s: float = REQUEST_TIMEOUT_S,
    cell: str = "",
) -> tuple[np.ndarray, np.ndarray, Decision, float]:
    """Alternate single requests between A and B until ``rule`` stops; raw paired samples
    (the loop: :func:`pair_loop`)."""
    a_ns: list[int] = []
    b_ns: list[int] = []
    decisions: list[Decision] = []

    def block(order: np.ndarray, timeout: float, keep: bool) -> int:
        block_a, block_b = _pair_block(a, b, order, timeout)
        if keep:
            a_ns.extend(block_a)
            b_ns.extend(block_b)
        return len(a_ns)

    def look(elapsed: float) -> tuple[bool, str]:
        decision = decide(rule, np.asarray(a_ns, np.int64), np.asarray(b_ns, np.int64), elapsed)
        decisions.append(decision)
        return decision.stop, progress_text(decision)

    elapsed = pair_loop(block, look, rule, seed=seed, settle=settle, timeout_s=timeout_s, cell=cell)
    a_arr, b_arr = np.asarray(a_ns, dtype=np.int64), np.asarray(b_ns, dtype=np.int64)
    return a_arr, b_arr, decisions[-1], elapsed


def pair_loop(
    block: Callable[[np.ndarray, float, bool], int],
    look: Callable[[float], tuple[bool, str]],
    rule: StoppingRule,
    *,
    seed: int = 0,
    settle: int = SETTLE_PAIRS,
    timeout_s: float = REQUEST_TIMEOUT_S,
    cell: str = "",
) -> float:
    """Measure pairs in blocks until ``look`` says stop; the seconds spent measuring.

    ``block(orders, timeout_s, keep)`` measures one pair per order (true: A first),
    keeps them when ``keep`` and returns how many pairs are kept in all; ``look(elapsed)``
    decides on the kept pairs and returns whether to stop (it must at ``rule``'s caps)
    and a progress detail. The first pair (timed alone, so a worker that never answers
    shows within ``timeout_s``) and ``settle`` more are discarded. The rest come in
    blocks that end at the rule's looks (every ``check_every`` pairs from ``min_pairs``),
    cut short so that a block is not planned past ``max_seconds``. ``timeout_s`` bounds
    one request; a block may take ``timeout_s`` plus 20 times its expected time.
    Progress (step ``A/B pairs``) is reported between blocks, at most every half second,
    and once at the end."""
    orders = pair_orders(rule.max_pairs + settle + 1, seed)
    t0 = time.perf_counter()
    block(orders[:1], timeout_s, False)  # the first pair alone: a hung worker shows fast
    per_pair = time.perf_counter() - t0
    if settle:
        t0 = time.perf_counter()
        block(orders[1 : settle + 1], timeout_s + 20 * settle * per_pair, False)
        per_pair = (time.perf_counter() - t0) / settle
    orders = orders[settle + 1 :]
    pairs = 0
    shown = Throttle()
    start = time.perf_counter()
    while True:
        next_look = max(rule.min_pairs, pairs + rule.check_every - pairs % rule.check_every)
        left_s = rule.max_seconds - (time.perf_counter() - start)
        n = max(1, min(next_look, rule.max_pairs) - pairs)
        n = min(n, max(1, math.ceil(left_s / max(per_pair, 1e-9))))
        pairs = block(orders[pairs : pairs + n], timeout_s + 20 * n * per_pair, True)
        elapsed = time.perf_counter() - start
        per_pair = elapsed / pairs
        at_look = pairs >= rule.min_pairs and pairs % rule.check_every == 0
        if at_look or pairs >= rule.max_pairs or elapsed >= rule.max_seconds:
            stop, detail = look(elapsed)
            if stop or shown.due():
                progress.report(
                    "A/B pairs", pairs, rule.max_pairs, cell=cell, detail=detail, final=stop
                )
            if stop:  # always at the pair or time cap
                return elapsed
        elif shown.due():
            progress.report("A/B pairs", pairs, rule.max_pairs, cell=cell)


def run_token_pairs(
    a: WorkerProcess | Slot,
    b: WorkerProcess | Slot,
    gates: Sequence[TokenGate],
    new_tokens: int,
    *,
    seed: int = 0,
    settle: int = SETTLE_PAIRS,
    timeout_s: float = REQUEST_TIMEOUT_S,
    cell: str = "",
) -> tuple[TokenPairs, TokenLooks, float]:
    """Alternate generative requests between A and B until every gate has stopped
    (:mod:`perfguard.ab.tokenpairs`); the pairs' token times, each gate's decision and
    the seconds spent (the loop: :func:`pair_loop`, on the first gate's caps and looks,
    which all gates share)."""
    pairs = TokenPairs(new_tokens)
    looks = TokenLooks(gates)

    def block(order: np.ndarray, timeout: float, keep: bool) -> int:
        a_rows, b_rows = _pair_block(a, b, order, timeout, tokens=True)
        if keep:
            pairs.add(a_rows, b_rows)
        return len(pairs)

    def look(elapsed: float) -> tuple[bool, str]:
        stop, shown = looks.look(pairs, elapsed)
        return stop, progress_text(looks.decisions[shown.metric], shown.label)

    rule = gates[0].rule
    elapsed = pair_loop(block, look, rule, seed=seed, settle=settle, timeout_s=timeout_s, cell=cell)
    return pairs, looks, elapsed


def latency_gate(scenario: Scenario) -> tuple[str, float]:
    """The latency metric A/B judges (``p95`` unless a relative latency gate names
    another) and its relative limit (+5% without a gate)."""
    metric, gate = next(
        ((g.metric, g) for g in scenario.gates if g.metric in LATENCY_QS and g.relative),
        ("p95", None),
    )
    return metric, gate.limit if gate is not None else 0.05


def load_plan(scenario: Scenario, seed: int = 0, interleaved: bool = False) -> RoundPlan:
    """The A/B rounds of a cell under load: its gated latency percentile and limit
    (:func:`latency_gate`), its relative ``throughput`` gate if it has one, and each
    side's level length; ``interleaved`` rounds judge the percentile pooled over their
    requests (:mod:`perfguard.ab.rounds`)."""
    metric, limit = latency_gate(scenario)
    thr_gate = next((g for g in scenario.gates if g.metric == "throughput" and g.relative), None)
    seconds, iterations = load_round_length(scenario)
    return RoundPlan.make(
        q=LATENCY_QS[metric],
        limit=limit,
        throughput_limit=thr_gate.limit if thr_gate is not None else None,
        seconds=seconds,
        iterations=iterations,
        seed=seed,
        interleaved=interleaved and scenario.generate is None,
        tokens=token_round_rules(scenario, metric),
    )


def token_round_rules(
    scenario: Scenario, latency_metric: str
) -> tuple[tuple[str, str, float, float, str, bool], ...]:
    """A generative load cell's gated token figures for its A/B rounds
    (``RoundPlan.make``'s ``tokens``): every relative gate on a token figure but the
    latency rule's own, and a relative ``goodput`` gate."""
    if scenario.generate is None:
        return ()
    out: list[tuple[str, str, float, float, str, bool]] = []
    for gate in token_gates(scenario):
        if gate.metric == latency_metric and gate.samples == "request":
            continue  # the latency rule judges it (corrected end to end)
        out.append(
            (gate.metric, gate.samples, gate.rule.q, gate.rule.limit, gate.rule.label, gate.is_rate)
        )
    good = next((g for g in scenario.gates if g.metric == "goodput" and g.relative), None)
    if good is not None and scenario.load is not None and scenario.load.goodput is not None:
        out.append(("goodput", "goodput", 50.0, good.limit, "time per good request", True))
    return tuple(out)


def run_load_rounds(
    a: Slot,
    b: Slot,
    scenario: Scenario,
    plan: RoundPlan,
    *,
    seed: int = 0,
    base: str = "",
    open_limit_s: float = OPEN_TIMEOUT_S,
) -> tuple[dict[str, dict[str, Any]], list[LoadRound], dict[str, Decision], float]:
    """Both open load cells warmed up (``load_warmup``), then rounds until ``plan``'s
    rules stop: the warm-up replies, the rounds, the decisions, the seconds.

    ``plan.interleaved`` (both slots in one worker, a closed loop without batching:
    :func:`perfguard.measure.loadcell.interleavable`): each round is one ``load_interleaved``
    level of twice the plan's length and requests, A's and B's requests alternating on
    every client; else one ``load_level`` of each side (:func:`alternating`). A level
    with failed requests raises ``LoadError``."""
    interleaved = plan.interleaved
    if interleaved and a.worker is not b.worker:
        raise ValueError("interleaved load rounds need both sides in one worker process")
    level_timeout = REQUEST_TIMEOUT_S + 5.0 * max(2 * plan.seconds, scenario.measure.max_seconds)
    warm = {
        name: side.request("load_warmup", timeout_s=open_limit_s + scenario.warmup.max_seconds)
        for name, side in (("a", a), ("b", b))
    }

    def checked(side: str, index: int, sample: LevelSample) -> LevelSample:
        if sample.failed:
            who = f"the base revision {base}".rstrip() if side == "a" else "the working tree"
            raise _failed_level(scenario, who, index, sample)
        return sample

    def level(side: str, index: int) -> LevelSample:
        reply = (a if side == "a" else b).request(
            "load_level",
            timeout_s=level_timeout,
            seconds=plan.seconds,
            iterations=plan.iterations,
            seed_offset=_ROUND_SEED_OFFSET + index,
        )
        return checked(side, index, LevelSample.from_reply(reply))

    def together(index: int, a_first: bool) -> tuple[LevelSample, LevelSample]:
        reply = a.worker.request(
            "load_interleaved",
            timeout_s=level_timeout,
            slots=[a.slot, b.slot],
            seconds=2 * plan.seconds,
            iterations=2 * plan.iterations,
            first=0 if a_first else 1,
        )
        sides = reply.get("sides")
        if not (isinstance(sides, list) and len(sides) == 2):
            raise ProtocolError(
                f"`load_interleaved` answered sides={sides!r}",
                expected="`sides`: two load level replies, A's then B's",
                fix="run the A/B worker from this perfguard (it speaks the same protocol)",
            )
        return (
            checked("a", index, LevelSample.from_reply(sides[0])),
            checked("b", index, LevelSample.from_reply(sides[1])),
        )

    play = together if interleaved else alternating(level)
    rounds, decisions, elapsed = run_rounds(play, plan, seed=seed, cell=scenario.item_name)
    return warm, rounds, decisions, elapsed


def _failed_level(scenario: Scenario, who: str, index: int, sample: LevelSample) -> LoadError:
    errors = dict(sample.load.get("errors") or {})
    shown = "; ".join(f"{n} x {text}" for text, n in errors.items()) or "no error"
    return LoadError(
        f"{sample.failed} of {sample.load.get('requests')} requests of {who} failed under "
        f"load in A/B round {index + 1} ({scenario.item_name}): {shown}",
        expected="every request answered without an error",
        fix="run the cell without --perfguard-ab to see the model's own errors; "
        "`sessions: per_worker` if the model is not safe to call from several threads",
        location=scenario.location,
    )


#: Asked after an A/B cell's verdict: ``None`` to leave it unprofiled, else where the
#: Chrome traces of its (base, working tree) sides go (a ``None`` path: no trace kept).
ProfileWhen = Callable[[Scenario, ScenarioVerdict], tuple[Path | None, Path | None] | None]


def take_profile(
    take: Callable[[Path | None], OperatorProfile], trace: Path | None
) -> OperatorProfile:
    """``take(trace)``'s profile, naming its Chrome trace as the run's report folder
    knows it (``traces/<file>.json``: ``trace`` lies in a folder of that folder) when the
    profiler wrote it, and its own duration when the profiler did not say.

    A failed profiler leaves no half-written trace behind (and raises)."""
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter_ns()
    try:
        profile = take(trace)
    except BaseException:
        if trace is not None:
            trace.unlink(missing_ok=True)
        raise
    kept = f"{trace.parent.name}/{trace.name}" if trace is not None and trace.is_file() else None
    wall = profile.wall_ns if profile.wall_ns is not None else time.perf_counter_ns() - started
    return dataclasses.replace(profile, trace=kept, wall_ns=wall)


def _profile_slot(side: Slot, trace: Path | None, timeout_s: float) -> OperatorProfile:
    """One side's operator profile, taken by the worker slot its cell is open in."""

    def take(path: Path | None) -> OperatorProfile:
        return side.worker.profile(PROFILE_REQUESTS, path, slot=side.slot, timeout_s=timeout_s)

    return take_profile(take, trace)


def checkouts(repo: Path) -> tuple[Path, ...]:
    """Every checkout of ``repo``'s repository: the main one and each linked worktree
    (what a side's imports must not read from but its own); empty when git cannot say."""
    try:
        proc = run_git(repo, "worktree", "list", "--porcelain")
    except GitError:
        return ()
    if proc.returncode != 0:
        return ()
    paths = [Path(line[9:]) for line in proc.stdout.splitlines() if line.startswith("worktree ")]
    return tuple(p for p in paths if p.is_dir())


def worker_env() -> dict[str, str]:
    """The environment of both A/B workers.

    Two processes take turns on the same cores: an OpenMP runtime that spins
    after each parallel region (the default) would burn the other side's
    request time, unevenly. ``OMP_WAIT_POLICY=PASSIVE`` makes idle threads sleep;
    a value the user set is kept.
    """
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def _bootstrap_command(python: str) -> list[str]:
    """The base worker: this perfguard first on sys.path, then the base tree (its cwd).

    A folder holding only a link to this perfguard package keeps the rest of
    this checkout (the user's current model code) off the base worker's path.
    """
    shim = Path(tempfile.mkdtemp(prefix="perfguard-ab-shim-"))
    (shim / "perfguard").symlink_to(Path(perfguard.__file__).resolve().parent)
    code = (
        "import runpy, sys; "
        f"sys.path.insert(0, {str(shim)!r}); "
        "runpy.run_module('perfguard.worker', run_name='__main__')"
    )
    return [python, "-c", code]


def warm_up_sides(
    a: Slot, b: Slot, scenario: Scenario, ctx: RunContext
) -> dict[str, dict[str, Any]]:
    """Both sides' cold start and warm-up (A first), as a plain run warms its cell up."""
    warm: dict[str, dict[str, Any]] = {}
    for name, side in (("a", a), ("b", b)):
        warm[name] = side.request(
            "warmup",
            timeout_s=ctx.worker_open_limit_s + scenario.warmup.max_seconds,
            iterations=scenario.warmup.iterations,
            seconds=scenario.warmup.seconds,
            max_seconds=scenario.warmup.max_seconds,
        )
    return warm


class ABRun:
    """The session's A/B state: the base worktree, kept for the whole session."""

    def __init__(self, rootdir: Path, config: ABConfig) -> None:
        self.rootdir = rootdir
        self.config = config
        self.base: BaseRef | None = None
        self.worktree: Path | None = None
        self.checkouts: tuple[Path, ...] = ()
        self._stack = contextlib.ExitStack()
        self._suites: dict[Path, dict[str, Scenario] | SuiteError] = {}
        # The base side's operator profile of each profiled A/B cell (the report's base).

    def start(self) -> None:
        """Resolve the base and check it out; raises ``GitError`` with the fix."""
        # A branch HEAD does not descend from (origin/main on a pull request) is
        # replaced by its merge base with HEAD: what this change was built on.
        self.base = resolve_base(self.rootdir, self.config.ref, merge_base_with="HEAD")
        self.worktree = self._stack.enter_context(base_worktree(self.rootdir, self.base.sha))
        self.checkouts = checkouts(self.rootdir)

    def code(self, side: str) -> dict[str, Any]:
        """The ``code`` field of a side's ``open``: its tree, the repository's other
        checkouts (whose paths it maps into its own) and pytest's ``pythonpath``."""
        assert self.worktree is not None and self.base is not None
        if side == "a":
            root, label = self.worktree, f"the base revision {self.base.sha[:7]} (side A)"
        else:
            root, label = repo_root(self.rootdir) or self.rootdir, "the working tree (side B)"
        return {
            "root": str(root),
            "others": [str(p) for p in (*self.checkouts, self.worktree, self.rootdir)],
            "label": label,
            "pythonpath": list(self.config.pythonpath),
        }

    def close(self) -> None:
        self._stack.close()

    @property
    def how(self) -> str:
        """The report's baseline line."""
        assert self.base is not None
        return ab_how(self.base.sha, self.base.how)

    @property
    def label(self) -> str:
        assert self.base is not None
        return ab_label(self.base.sha, self.base.how)

    # -- the base revision's cells --------------------------------------------------
    def _relative(self, suite: Path) -> Path:
        return under_root(suite, self.rootdir) or Path(suite.name)

    def base_cells(self, suite: Path) -> dict[str, Scenario] | SuiteError:
        """The base revision's cells of ``suite`` by item name, or its load error."""
        assert self.worktree is not None
        path = self.worktree / self._relative(suite)
        if path not in self._suites:
            if not path.is_file():
                self._suites[path] = SuiteError(
                    f"{self._relative(suite)} does not exist in the base revision {self.label}"
                )
            else:
                try:
                    cells = load_suite(path).scenarios
                    self._suites[path] = {sc.item_name: sc for sc in cells}
                except SuiteError as exc:
                    self._suites[path] = exc
        return self._suites[path]

    def why_not_in_base(self, scenario: Scenario) -> str | None:
        """None when the base has this cell; else why it is ``new``."""
        cells = self.base_cells(scenario.suite)
        if isinstance(cells, SuiteError):
            return f"the base revision's suite did not load: {cells}"
        if scenario.item_name not in cells:
            return f"the base revision {self.label} has no cell {scenario.item_name}"
        return None

    def missing_verdicts(
        self, suites: Iterable[Path], collected_ids: set[str]
    ) -> list[tuple[str, ScenarioVerdict]]:
        """``missing`` verdicts for the base's cells of ``suites`` this run did not collect."""
        out = []
        for path in suites:
            rel = self._relative(path).as_posix()
            prefix = f"{rel}::"
            collected = {sid[len(prefix) :] for sid in collected_ids if sid.startswith(prefix)}
            for name in self.missing(path, collected):
                out.append((f"{rel}::{name}", self.missing_verdict(f"{rel}::{name}")))
        return out

    def missing(self, suite: Path, collected: set[str]) -> list[str]:
        """Item names of the base's ``suite`` that this run did not collect."""
        cells = self.base_cells(suite)
        return [] if isinstance(cells, SuiteError) else sorted(set(cells) - collected)

    # -- measuring one cell ---------------------------------------------------------
    @contextlib.contextmanager
    def _sides(self, scenario: Scenario, ctx: RunContext) -> Iterator[tuple[Slot, Slot, Any]]:
        """Cells A (base tree) and B (working tree), open; B's open reply last.

        Both in slots of ONE worker when the base runs on this interpreter: a
        process's own speed varies from process to process (``benchmarks/notes.md``)
        and pairing cannot cancel that between two processes; within one, it
        hits both sides alike. Another interpreter (``--perfguard-ab-python``)
        needs a process per side.
        """
        assert self.worktree is not None and self.base is not None
        with contextlib.ExitStack() as stack:
            if self.config.python:
                a = Slot(
                    stack.enter_context(self._side_worker("a", self._side_name("a"))), MAIN_SLOT
                )
                b = Slot(
                    stack.enter_context(self._side_worker("b", self._side_name("b"))), MAIN_SLOT
                )
            else:
                worker = stack.enter_context(self._side_worker("b", "A/B worker"))
                a, b = Slot(worker, "a"), Slot(worker, "b")
            opened: dict[str, Any] = {}
            for side, name in ((a, "a"), (b, "b")):
                opened = self._open(side, name, scenario, ctx)
            yield a, b, opened  # B's open reply: batch, runtime

    def _side_name(self, side: str) -> str:
        assert self.base is not None
        return f"A (base {self.base.sha[:7]})" if side == "a" else "B (working tree)"

    def _side_worker(self, side: str, name: str) -> WorkerProcess:
        """A worker process for ``side``: the base's own interpreter for side A when
        ``--perfguard-ab-python`` names one, else this one (its ``open`` switches the
        imports to the side's tree)."""
        assert self.worktree is not None
        if side == "a" and self.config.python:
            python = self.config.python
            return WorkerProcess(
                python=python,
                cwd=self.worktree,
                name=name,
                command=_bootstrap_command(python),
                env=worker_env(),
            )
        return WorkerProcess(cwd=self.rootdir, name=name, env=worker_env())

    def _open(self, side: Slot, name: str, scenario: Scenario, ctx: RunContext) -> dict[str, Any]:
        """Open ``scenario`` from side ``name``'s tree in ``side``: its reply (batch,
        runtime). Each side's imports read its own tree, whatever the layout (the
        ``code`` switch: perfguard.worker.codetree), and its factory modules are checked
        to come from there (perfguard.models.origin)."""
        assert self.worktree is not None
        root = self.worktree if name == "a" else self.rootdir
        return side.request(
            "open",
            timeout_s=ctx.worker_open_limit_s,
            suite=str(root / self._relative(scenario.suite)),
            cell=scenario.item_name,
            rootdir=str(root),
            cache_dir=str(ctx.cache_dir),
            code=self.code(name),
        )

    # -- memory: each side alone in a worker of its own ----------------------------
    def _memory(
        self,
        scenario: Scenario,
        ctx: RunContext,
        result: ScenarioResult,
        verdict: ScenarioVerdict,
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """Judge the cell's memory gates (``peak_memory``, ``gpu_mem``) in this run.

        The interleaved sides share one process, whose high-water mark cannot tell
        them apart, so each side is measured once more, alone, in a fresh worker (the
        figure a plain run of a memory-gated cell records: open and measurement, from
        the process's start), in an order drawn from the seed; the archived gate's
        rule decides (:func:`perfguard.judge.compare.compare_memory`). B's figures go
        into the result, both sides' into the verdict's metrics."""
        gates = scenario.memory_gates
        if not gates:
            return result, verdict
        assert self.base is not None
        order, measured = self._each_alone(scenario, ctx, "memory")
        a, b = measured["a"], measured["b"]
        against = (
            f"base {self.base.sha[:7]} measured in this run (each side alone in a fresh "
            f"worker, {order[0].upper()} first)"
        )
        metrics = tuple(
            compare_memory(gate, b, a, commit=self.base.sha, against=against) for gate in gates
        )
        result = dataclasses.replace(
            result,
            peak_memory_mib=b.peak_memory_mib,
            gpu_peak_memory_mib=b.gpu_peak_memory_mib,
        )
        if result.load is not None and b.load is not None and b.load.memory is not None:
            # A load level's own memory, from B's measurement alone.
            result = dataclasses.replace(
                result, load=dataclasses.replace(result.load, memory=b.load.memory)
            )
        verdict = dataclasses.replace(
            verdict,
            verdict=worst([verdict.verdict, *(m.verdict for m in metrics)]),
            metrics=(*verdict.metrics, *metrics),
            messages=(*verdict.messages, *(m.message for m in metrics)),
        )
        return result, verdict

    def _each_alone(
        self, scenario: Scenario, ctx: RunContext, purpose: str
    ) -> tuple[tuple[str, str], dict[str, ScenarioResult]]:
        """Each side's whole measurement of ``scenario`` (``ScenarioRun.measure``), alone
        in a fresh worker of its own, one after the other in an order drawn from the seed:
        (that order, the results by side)."""
        rng = np.random.default_rng([self.config.seed, zlib.crc32(scenario.item_name.encode())])
        order = ("a", "b") if rng.random() < 0.5 else ("b", "a")
        measured: dict[str, ScenarioResult] = {}
        for name in order:
            with self._side_worker(name, f"{self._side_name(name)}, {purpose}") as worker:
                side = Slot(worker, MAIN_SLOT)
                self._open(side, name, scenario, ctx)
                reply = side.request("result", timeout_s=measure_timeout_s(scenario))
                measured[name] = ScenarioResult.from_dict(reply["result"])
        return order, measured

    # -- served models whose server needs its device to itself ----------------------
    def one_side_at_a_time(self, scenario: Scenario) -> bool:
        """Whether ``scenario``'s server, on either side, needs its device to itself
        (``server.exclusive``): its sides are measured one after the other, never with
        both servers up (:meth:`measure_each_alone`)."""
        cells = self.base_cells(scenario.suite)
        base = None if isinstance(cells, SuiteError) else cells.get(scenario.item_name)
        servers = (s.model.server for s in (scenario, base) if s is not None)
        return any(server is not None and server.exclusive for server in servers)

    def measure_each_alone(
        self, scenario: Scenario, ctx: RunContext, gatekeeper: Gatekeeper
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """Measure the base's side and the working tree's each alone, one after the other
        (each starts and stops its own server), and judge B against A by the archived
        gate's rules (``Gatekeeper.judge_against``): no pairs, so a drift of
        the machine between the two is not cancelled, and the verdict says so. B's
        result, recording the base it was compared with."""
        assert self.base is not None
        started = time.monotonic()
        order, measured = self._each_alone(scenario, ctx, "alone")
        a, b = measured["a"], measured["b"]
        sha = self.base.sha
        against = f"base {sha[:7]} measured in this run, one side at a time"
        judged = gatekeeper.judge_against(b, a, scenario.gates, commit=sha, against=against)
        first = "the base" if order[0] == "a" else "the working tree"
        reason = (
            "one side at a time: the server needs its device to itself (`server.exclusive`), "
            f"so base {sha[:7]} and the working tree were each measured alone, {first} "
            "first, and judged by the archived gate's rules (no interleaved pairs: a drift "
            "of the machine between the two is not cancelled)"
        )
        if self.base.dirty:
            reason += "; the working tree as it is (uncommitted changes included)"
        # The gated latency figure's decision stands for the A/B record (no pairs).
        metric = next(
            (m for m in judged.metrics if m.metric == latency_gate(scenario)[0]),
            judged.metrics[0] if judged.metrics else None,
        )
        decided = metric is not None and metric.verdict in (
            VerdictKind.REGRESSION, VerdictKind.IMPROVEMENT, VerdictKind.UNCHANGED
        )  # fmt: skip
        decision = Decision(
            stop=True,
            verdict=DecisionKind(metric.verdict.value)
            if decided and metric is not None
            else DecisionKind.UNDECIDED,
            ratio=metric.ratio if metric is not None else None,
            lo=metric.lower if metric is not None else None,
            hi=metric.upper if metric is not None else None,
            pairs=0,
            reason=reason,
        )
        detail = ABDetail(
            base=sha,
            base_how=self.base.how,
            decision=decision,
            elapsed_s=time.monotonic() - started,
            samples_a_ns=a.samples_ns,
            throughput_a=a.throughput if a.load is not None else None,
            load_a=a.load.to_dict() if a.load is not None else None,
            tokens_a=a.tokens,
            levels="alone",
        )
        verdict = dataclasses.replace(
            judged, mode="ab", ab=detail, messages=(*judged.messages, reason)
        )
        result = dataclasses.replace(b, runtime=dataclasses.replace(b.runtime, ab_base=sha))
        return result, verdict

    def compares(self, scenario: Scenario) -> bool:
        """Whether this mode measures ``scenario`` interleaved (else: the archived path,
        and :meth:`outside_ab` says why)."""
        return self.why_not_ab(scenario) is None

    def why_not_ab(self, scenario: Scenario) -> str | None:
        """None when A/B takes ``scenario``; else why it is measured the usual way."""
        missing = self.why_not_in_base(scenario)
        if missing is not None:
            return missing
        cells = self.base_cells(scenario.suite)
        assert not isinstance(cells, SuiteError)
        base_generates = cells[scenario.item_name].generate is not None
        if (scenario.generate is None) != (not base_generates):
            side = "the working tree" if scenario.generate is not None else "the base revision"
            return (
                f"generative only in {side}: compared with the archived baseline, not in "
                "same-run A/B (both sides must be measured the same way)"
            )
        base_server = cells[scenario.item_name].model.server
        head_server = scenario.model.server
        url = head_server.url if head_server is not None else None
        if url is not None and base_server is not None and base_server.url == url:
            return (
                f"both sides call the one server at {url}, so an A/B would compare it with "
                "itself: compared with the archived baseline instead (for an A/B, let "
                "perfguard start each side's server: `server.command`)"
            )
        base_load = cells[scenario.item_name].load
        if scenario.load is not None and scenario.load.slo is not None:
            return (
                "an SLO search: compared with the archived baseline, not in same-run A/B "
                "(which alternates fixed load levels)"
            )
        if (scenario.load is None) != (base_load is None):
            side = "the working tree" if scenario.load is not None else "the base revision"
            return (
                f"under load only in {side}: compared with the archived baseline, not in "
                "same-run A/B (both sides must be measured the same way)"
            )
        return None

    def measure(
        self, scenario: Scenario, ctx: RunContext, profile: ProfileWhen | None = None
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """Measure A and B interleaved; B's figures as the result, the paired verdict.

        Then, when ``profile`` asks for it given the verdict, both sides are profiled in
        the worker slots that measured them (:meth:`_profile_sides`): B's profile goes
        into the result, A's into the verdict's A/B record (``ABDetail.profile_a``)."""
        if scenario.load is not None:
            return self._measure_load(scenario, ctx, profile)
        if scenario.generate is not None:
            return self._measure_tokens(scenario, ctx)
        metric, limit = latency_gate(scenario)
        rule = StoppingRule(limit=limit, q=LATENCY_QS[metric])
        with self._sides(scenario, ctx) as (a, b, opened):
            warm = warm_up_sides(a, b, scenario, ctx)
            a_ns, b_ns, decision, elapsed = run_pairs(
                a, b, rule, seed=self.config.seed, cell=scenario.item_name
            )
            outcome = ABOutcome(a_ns, b_ns, decision, elapsed, metric, limit)
            result = self._result(scenario, ctx, outcome, warm["b"], opened)
            verdict = self._verdict(scenario, ctx, outcome)
            result, verdict = self._profile_sides(scenario, a, b, result, verdict, profile)
        return self._memory(scenario, ctx, result, verdict)

    def _profile_sides(
        self,
        scenario: Scenario,
        a: Slot,
        b: Slot,
        result: ScenarioResult,
        verdict: ScenarioVerdict,
        profile: ProfileWhen | None,
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """Both sides profiled after the verdict, each in the slot that measured it, when
        ``profile`` asks; a side whose profiling fails becomes a note on the verdict
        (which stays what it was), never a failure."""
        traces = profile(scenario, verdict) if profile is not None else None
        if traces is None:
            return result, verdict
        base_trace, trace = traces
        timeout_s = measure_timeout_s(scenario)
        for side, path, name in ((a, base_trace, "base"), (b, trace, "working tree")):
            try:
                taken = _profile_slot(side, path, timeout_s)
            except Exception as exc:  # a profiler's failure must not fail the cell
                note = f"operator profile of the {name} side not taken: {first_line(exc)}"
                verdict = verdict.with_note(note)
                continue
            if side is a and verdict.ab is not None:
                verdict = dataclasses.replace(
                    verdict, ab=dataclasses.replace(verdict.ab, profile_a=taken)
                )
            elif side is b:
                result = dataclasses.replace(result, profile=taken)
        return result, verdict

    def _result(
        self,
        scenario: Scenario,
        ctx: RunContext,
        outcome: ABOutcome,
        warm: dict[str, Any],
        opened: dict[str, Any],
    ) -> ScenarioResult:
        assert self.base is not None
        samples = outcome.samples_b
        batch = int(opened.get("batch", 1) or 1)
        return dataclasses.replace(
            ScenarioResult.for_cell(scenario, ctx.rootdir, batch_size=batch),
            latency_ns=summarize(samples),
            throughput=throughput(samples, batch),
            cold_start_ns=int(warm.get("cold_start_ns", 0)),
            warmup_iterations=int(warm.get("iterations", 0)),
            warmup_ns=int(warm.get("elapsed_ns", 0)),
            stable=True,
            stability_ratio=float(stability_ratio(samples)) if samples.size >= 6 else None,
            runtime=RuntimeInfo(backend=dict(opened.get("runtime") or {}), ab_base=self.base.sha),
            samples_ns=tuple(int(s) for s in samples),
        )

    def _message(
        self,
        label: str,
        pa: str,
        pb: str,
        ratio: float | None,
        bounds: tuple[float, float] | None,
        how: str,
        limit: str,
        d: Decision,
    ) -> str:
        """One A/B figure's line, each figure once: ``P95 latency +8.1% (1.200 ms ->
        1.300 ms; 99% bounds +5.2%..+11.0%) vs base abc1234 measured in this run,
        interleaved, 400 pairs, limit +5%: regression: ...; stopped early``; without a
        ratio (nothing to compare) the change is left out."""
        assert self.base is not None
        change = f" {(ratio - 1.0) * 100:+.1f}%" if ratio is not None else ""
        spread = (
            f"; 99% bounds {(bounds[0] - 1) * 100:+.1f}%..{(bounds[1] - 1) * 100:+.1f}%"
            if bounds is not None
            else ""
        )
        return (
            f"{label}{change} ({pa} -> {pb}{spread}) vs base "
            f"{self.base.sha[:7]} measured in this run, interleaved, {how}, limit {limit}: "
            f"{conclusion(d)}"
        )

    def _verdict(self, scenario: Scenario, ctx: RunContext, outcome: ABOutcome) -> ScenarioVerdict:
        assert self.base is not None
        d = outcome.decision
        q = LATENCY_QS[outcome.metric]
        pa = float(percentile(outcome.samples_a, q))
        pb = float(percentile(outcome.samples_b, q))
        kind = d.verdict.verdict
        name = outcome.metric.upper()
        bounds = (d.lo, d.hi) if d.lo is not None and d.hi is not None else None
        message = self._message(
            f"{name} latency",
            f"{pa / 1e6:.3f} ms",
            f"{pb / 1e6:.3f} ms",
            d.ratio if d.ratio is not None else pb / pa,
            bounds,
            f"{d.pairs} request pairs",
            f"{outcome.limit * 100:+g}%",
            d,
        )
        metric = ab_metric(
            outcome.metric,
            kind,
            message,
            f"same-run A/B: ratio of {name}s beyond the limit and its 99% "
            "paired-bootstrap bound beyond 1",
            values=(pa, pb),
            ratio=d.ratio,
            bounds=(d.lo, d.hi),
            limit=outcome.limit,
            n=(int(outcome.samples_a.size), int(outcome.samples_b.size)),
        )
        notes = []
        if self.base.dirty:
            notes.append("A/B compares the working tree as it is (uncommitted changes included)")
        return ScenarioVerdict(
            scenario_id=scenario.scenario_id(ctx.rootdir),
            verdict=kind,
            metrics=(metric,),
            baseline_commit=self.base.sha,
            messages=(message, *notes),
            mode="ab",
            ab=ABDetail(
                base=self.base.sha,
                base_how=self.base.how,
                decision=d,
                elapsed_s=outcome.elapsed_s,
                rounds=tuple(per_round(outcome.samples_a, outcome.samples_b)),
                samples_a_ns=tuple(int(x) for x in outcome.samples_a),
            ),
        )

    # -- a generative cell: request pairs judged on their token figures ------------
    def _measure_tokens(
        self, scenario: Scenario, ctx: RunContext
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """Warm both sides up, then alternate generative requests between A and B until
        every gated token figure is decided (:mod:`perfguard.ab.tokenpairs`); B's token
        figures as the result, one paired verdict per gated figure."""
        spec = scenario.generate
        assert spec is not None
        gates = token_gates(scenario, seed=self.config.seed)
        with self._sides(scenario, ctx) as (a, b, opened):
            warm = warm_up_sides(a, b, scenario, ctx)
            pairs, looks, elapsed = run_token_pairs(
                a, b, gates, spec.new_tokens, seed=self.config.seed, cell=scenario.item_name
            )
        assert self.base is not None
        runtime = RuntimeInfo(backend=dict(opened.get("runtime") or {}), ab_base=self.base.sha)
        result = dataclasses.replace(
            token_result(scenario, ctx, pairs.times("b"), runtime),
            cold_start_ns=int(warm["b"].get("cold_start_ns", 0)),
            warmup_iterations=int(warm["b"].get("iterations", 0)),
            warmup_ns=int(warm["b"].get("elapsed_ns", 0)),
            stable=True,
        )
        verdict = self._token_verdict(scenario, ctx, pairs, looks, elapsed)
        return self._memory(scenario, ctx, result, verdict)

    def _token_verdict(
        self,
        scenario: Scenario,
        ctx: RunContext,
        pairs: TokenPairs,
        looks: TokenLooks,
        elapsed: float,
    ) -> ScenarioVerdict:
        assert self.base is not None and scenario.generate is not None
        spec = scenario.generate
        per_request = spec.batch * spec.new_tokens
        metrics = []
        for gate in looks.gates:
            d = looks.decisions[gate.metric]
            pa = pairs.figure(gate, "a", per_request)
            pb = pairs.figure(gate, "b", per_request)
            metrics.append(self._token_metric(gate, d, pa, pb))
        a_times = pairs.times("a")
        a_e2e, b_e2e = a_times[:, -1], pairs.times("b")[:, -1]
        return self._ab_verdict(
            scenario,
            ctx,
            metrics,
            [m.message for m in metrics],
            decision=looks.lead(),
            elapsed_s=elapsed,
            rounds=tuple(per_round(a_e2e, b_e2e)),
            samples_a_ns=tuple(int(x) for x in a_e2e),
            tokens_a=TokenFigures.of(a_times, prompt_tokens=spec.prompt_tokens, batch=spec.batch),
        )

    def _ab_verdict(
        self,
        scenario: Scenario,
        ctx: RunContext,
        metrics: Sequence[MetricVerdict],
        messages: list[str],
        **detail: Any,
    ) -> ScenarioVerdict:
        """A same-run A/B verdict: the worst of ``metrics``, ``messages`` (and the note
        when the working tree is dirty), and the A/B record of ``detail`` against the
        base."""
        assert self.base is not None
        if self.base.dirty:
            messages.append("A/B compares the working tree as it is (uncommitted changes included)")
        return ScenarioVerdict(
            scenario_id=scenario.scenario_id(ctx.rootdir),
            verdict=worst(m.verdict for m in metrics),
            metrics=tuple(metrics),
            baseline_commit=self.base.sha,
            messages=tuple(messages),
            mode="ab",
            ab=ABDetail(base=self.base.sha, base_how=self.base.how, **detail),
        )

    def _token_metric(
        self, gate: TokenGate, d: Decision, pa: float | None, pb: float | None
    ) -> MetricVerdict:
        """One gated token figure's verdict and message. Output tokens/s was decided on
        the median request time (A/B); its ratio and bounds are stated inverted (B/A in
        tokens/s, higher is better)."""
        spec = gate_metric(gate.metric)
        assert spec is not None
        ratio, lo, hi = d.ratio, d.lo, d.hi
        limit = gate.rule.limit
        if gate.is_rate:
            ratio = 1.0 / ratio if ratio else None
            lo, hi = (1.0 / hi, 1.0 / lo) if lo and hi else (None, None)

            def shown(x: float | None) -> str:
                return f"{x:.1f} tokens/s" if x is not None else "-"
        else:

            def shown(x: float | None) -> str:
                return f"{x / 1e6:.3f} ms" if x is not None else "-"

        message = self._message(
            spec.label,
            shown(pa),
            shown(pb),
            ratio if ratio is not None else (pb / pa if pa and pb else None),
            (lo, hi) if lo is not None and hi is not None else None,
            f"{d.pairs} request pairs",
            f"{'-' if gate.is_rate else '+'}{limit * 100:g}%",
            d,
        )
        rule = (
            "same-run A/B: ratio of the pairs' median request times beyond the limit and "
            "its 99% paired-bootstrap bound beyond 1, stated as output tokens/s"
            if gate.is_rate
            else f"same-run A/B: ratio of the pairs' {spec.label}s beyond the limit and its "
            "99% bound from a bootstrap drawing whole pairs (every gap of both requests)"
            " beyond 1"
            if gate.samples == "itl"
            else f"same-run A/B: ratio of {spec.label}s beyond the limit and its 99% "
            "paired-bootstrap bound beyond 1"
        )
        return ab_metric(
            gate.metric,
            d.verdict.verdict,
            message,
            rule,
            values=(pa, pb),
            ratio=ratio,
            bounds=(lo, hi),
            limit=limit,
            n=(d.pairs, d.pairs),
            unit=spec.unit,
            higher_is_worse=not gate.is_rate,
        )

    # -- a cell under load: rounds of whole levels ------------------------------------
    def _measure_load(
        self, scenario: Scenario, ctx: RunContext, profile: ProfileWhen | None
    ) -> tuple[ScenarioResult, ScenarioVerdict]:
        """Warm both sides' levels up, then alternate short levels of A and B in rounds
        (:mod:`perfguard.ab.rounds`) until the rule stops; B's pooled figures as the
        result, the paired verdict on the rounds. A profile of a load cell is one
        stream of requests at concurrency 1 on each side (:meth:`_profile_sides`)."""
        plan = load_plan(scenario, self.config.seed, self.interleaves(scenario))
        with self._sides(scenario, ctx) as (a, b, opened):
            warm, rounds, decisions, elapsed = run_load_rounds(
                a,
                b,
                scenario,
                plan,
                seed=self.config.seed,
                base=self.label,
                open_limit_s=ctx.worker_open_limit_s,
            )
            result = self._load_result(scenario, ctx, rounds, warm["b"], opened)
            verdict = self._load_verdict(scenario, ctx, plan, rounds, decisions, elapsed)
            result, verdict = self._profile_sides(scenario, a, b, result, verdict, profile)
        return self._memory(scenario, ctx, result, verdict)

    def interleaves(self, scenario: Scenario) -> bool:
        """Whether a load cell's rounds are interleaved levels (A's and B's requests
        alternating on every client of one level): both sides in one worker (no
        ``--perfguard-ab-python``), and the base's cell and this one the same closed
        loop without batching (:func:`perfguard.measure.loadcell.interleavable`). Else
        whole levels of each side, one after the other."""
        if (
            self.config.python
            or scenario.load is None
            or scenario.generate is not None  # whole levels: streams of one model each
            or not interleavable(scenario.load)
        ):
            return False
        cells = self.base_cells(scenario.suite)
        base = cells.get(scenario.item_name) if isinstance(cells, dict) else None
        return (
            base is not None
            and base.load is not None
            and interleavable(base.load)
            and base.load.level_id == scenario.load.level_id
        )

    def _load_result(
        self,
        scenario: Scenario,
        ctx: RunContext,
        rounds: list[LoadRound],
        warm: dict[str, Any],
        opened: dict[str, Any],
    ) -> ScenarioResult:
        """B's result: its usable rounds' corrected samples pooled, the median round
        throughput, and the ``load`` figures of its last usable round."""
        assert self.base is not None
        samples = pooled(rounds, "b")
        batch = int(opened.get("batch", 1) or 1)
        throughput, load = side_figures(rounds, "b")
        return dataclasses.replace(
            ScenarioResult.for_cell(scenario, ctx.rootdir, batch_size=batch),
            latency_ns=summarize(samples) if samples.size else None,
            throughput=throughput,
            cold_start_ns=int(warm.get("cold_start_ns", 0)),
            warmup_iterations=int(warm.get("iterations", 0)),
            warmup_ns=int(warm.get("elapsed_ns", 0)),
            stable=True,
            runtime=RuntimeInfo(backend=dict(opened.get("runtime") or {}), ab_base=self.base.sha),
            load=LoadFigures.from_dict(load) if load else None,
            samples_ns=tuple(int(s) for s in samples),
            tokens=round_tokens(scenario, rounds, "b"),
        )

    def _load_verdict(
        self,
        scenario: Scenario,
        ctx: RunContext,
        plan: RoundPlan,
        rounds: list[LoadRound],
        decisions: Mapping[str, Decision],
        elapsed: float,
    ) -> ScenarioVerdict:
        assert self.base is not None
        figures = compared(plan, rounds)
        metric, limit = latency_gate(scenario)
        name = metric.upper()
        d = decisions["latency"]
        used = sum(1 for r in rounds if r.dropped is None)
        how = (
            f"{d.pairs} rounds of {2 * plan.seconds:g} s interleaved load levels"
            if plan.interleaved
            else f"{d.pairs} rounds of {plan.seconds:g} s load levels"
        )
        pa, pb = figures.get("a"), figures.get("b")
        bounds = (d.lo, d.hi) if d.lo is not None and d.hi is not None else None
        figure = "pooled over rounds" if plan.interleaved else "median round"
        message = self._message(
            f"{name} latency under load (corrected, {figure})",
            f"{pa / 1e6:.3f} ms" if pa is not None else "-",
            f"{pb / 1e6:.3f} ms" if pb is not None else "-",
            d.ratio,
            bounds,
            how,
            f"{limit * 100:+g}%",
            d,
        )
        metrics = [
            ab_metric(
                metric,
                d.verdict.verdict,
                message,
                (
                    f"same-run A/B under load: ratio of the {name}s of every request of the "
                    "rounds (corrected) beyond the limit and its 99% bound from a bootstrap "
                    "drawing whole rounds beyond 1"
                    if plan.interleaved
                    else f"same-run A/B under load: ratio of the median round {name}s "
                    "(corrected) beyond the limit and its 99% paired-bootstrap bound over "
                    "rounds beyond 1"
                ),
                values=(pa, pb),
                ratio=d.ratio,
                bounds=(d.lo, d.hi),
                limit=limit,
                n=(used, used),
            )
        ]
        messages = [message]
        dt = decisions.get("throughput")
        if dt is not None and plan.throughput is not None:
            # The rule compared time per request (A/B); throughput's ratio is B/A.
            t_ratio = 1.0 / dt.ratio if dt.ratio else None
            t_bounds = (1.0 / dt.hi, 1.0 / dt.lo) if dt.lo and dt.hi else None
            ta, tb = figures.get("ta"), figures.get("tb")
            t_limit = plan.throughput.limit
            t_message = self._message(
                "throughput under load (median round)",
                f"{ta:.1f} /s" if ta is not None else "-",
                f"{tb:.1f} /s" if tb is not None else "-",
                t_ratio,
                t_bounds,
                how,
                f"{-t_limit * 100:+g}%",
                dt,
            )
            messages.append(t_message)
            metrics.append(
                ab_metric(
                    "throughput",
                    dt.verdict.verdict,
                    t_message,
                    "same-run A/B under load: ratio of the median round throughputs "
                    "beyond the limit and its 99% paired-bootstrap bound over rounds beyond 1",
                    values=(ta, tb),
                    ratio=t_ratio,
                    bounds=t_bounds or (None, None),
                    limit=t_limit,
                    n=(used, used),
                    unit="/s",
                    higher_is_worse=False,
                )
            )
        for token in plan.tokens:
            found = self._token_round_metric(token, decisions[token.metric], rounds, how)
            metrics.append(found)
            messages.append(found.message)
        throughput_a, load_a = side_figures(rounds, "a")
        dropped = [r for r in rounds if r.dropped is not None]
        if dropped:
            messages.append(
                f"{len(dropped)} of {len(rounds)} rounds dropped (first: round "
                f"{dropped[0].index + 1}, {dropped[0].dropped})"
            )
        messages.append(f"round order (seed {self.config.seed}): {order_text(rounds)}")
        return self._ab_verdict(
            scenario,
            ctx,
            metrics,
            messages,
            decision=d,
            elapsed_s=elapsed,
            rounds=tuple(ab_rounds(rounds, plan.q)),
            samples_a_ns=tuple(int(x) for x in pooled(rounds, "a")),
            throughput_a=throughput_a,
            load_a=load_a or None,
            levels="interleaved" if plan.interleaved else "alternating",
            tokens_a=round_tokens(scenario, rounds, "a"),
        )

    def _token_round_metric(
        self, token: TokenRoundRule, d: Decision, rounds: list[LoadRound], how: str
    ) -> MetricVerdict:
        """One gated token figure of a generative load cell's rounds: the median round's
        figure per side, compared by the paired rule (a rate as its inverse, stated as
        the rate: output tokens/s, good requests/s)."""
        spec = gate_metric(token.metric)
        assert spec is not None
        a, b = token_values(token, rounds)
        fa = float(percentile(a, 50.0)) if a.size else None
        fb = float(percentile(b, 50.0)) if b.size else None
        ratio, lo, hi = d.ratio, d.lo, d.hi
        if token.rate:  # decided on time per token / per good request: state the rate
            fa, fb = (1.0 / fa if fa else None), (1.0 / fb if fb else None)
            ratio = 1.0 / ratio if ratio else None
            lo, hi = (1.0 / hi, 1.0 / lo) if lo and hi else (None, None)
            unit = "tokens/s" if token.samples == "tokens" else "/s"

            def shown(x: float | None) -> str:
                return f"{x:.1f} {unit}" if x is not None else "-"
        else:

            def shown(x: float | None) -> str:
                return f"{x / 1e6:.3f} ms" if x is not None else "-"

        limit = token.rule.limit
        message = self._message(
            f"{spec.label} under load (median round)",
            shown(fa),
            shown(fb),
            ratio,
            (lo, hi) if lo is not None and hi is not None else None,
            how,
            f"{'-' if token.rate else '+'}{limit * 100:g}%",
            d,
        )
        used = int(a.size)
        return ab_metric(
            token.metric,
            d.verdict.verdict,
            message,
            f"same-run A/B under load: ratio of the median round {spec.label}s beyond the "
            "limit and its 99% paired-bootstrap bound over rounds beyond 1"
            + (" (decided on its inverse, stated as the rate)" if token.rate else ""),
            values=(fa, fb),
            ratio=ratio,
            bounds=(lo, hi),
            limit=limit,
            n=(used, used),
            unit=spec.unit,
            higher_is_worse=not token.rate,
        )

    def outside_ab(self, scenario: Scenario, verdict: ScenarioVerdict) -> ScenarioVerdict:
        """The verdict of a cell this mode did not interleave: ``new`` when the base
        lacks it, else (an SLO search, or a cell under load on one side only)
        ``verdict`` from the archived baseline, saying so."""
        reason = self.why_not_in_base(scenario)
        if reason is not None:
            return self.new_verdict(verdict.scenario_id, reason)
        note = self.why_not_ab(scenario) or "compared with the archived baseline"
        return dataclasses.replace(verdict, messages=(*verdict.messages, note))

    def new_verdict(self, scenario_id: str, why: str) -> ScenarioVerdict:
        return ScenarioVerdict(
            scenario_id=scenario_id, verdict=VerdictKind.NEW, messages=(why,), mode="ab"
        )

    def missing_verdict(self, scenario_id: str) -> ScenarioVerdict:
        message = (
            f"{scenario_id} is in the base revision {self.label} but was not measured in "
            "this run (renamed, deleted or deselected?)"
        )
        return ScenarioVerdict(
            scenario_id=scenario_id, verdict=VerdictKind.MISSING, messages=(message,), mode="ab"
        )


def round_tokens(scenario: Scenario, rounds: list[LoadRound], side: str) -> TokenFigures | None:
    """One side's token figures over the usable rounds of a generative load cell (every
    answered request's token times, from its scheduled send); its output tokens/s the
    median round's. None for other cells."""
    spec = scenario.generate
    if spec is None:
        return None
    levels = [r.a if side == "a" else r.b for r in rounds if r.dropped is None]
    parts = [lv.token_ns for lv in levels if lv.token_ns is not None and lv.token_ns.size]
    if not parts:
        return None
    times = np.concatenate(parts, axis=0)
    figures = TokenFigures.of(times, prompt_tokens=spec.prompt_tokens, batch=spec.batch)
    rate = float(np.median([lv.throughput for lv in levels])) * spec.new_tokens
    return dataclasses.replace(figures, tokens_per_s=rate)


def side_figures(rounds: list[LoadRound], side: str) -> tuple[float, dict[str, Any]]:
    """One side's figures of a load cell's rounds, as its result states them: the median
    round throughput and the ``load`` figures of its last usable round."""
    used = [r for r in rounds if r.dropped is None] or rounds
    levels = [r.a if side == "a" else r.b for r in used]
    if not levels:
        return 0.0, {}
    return float(np.median([level.throughput for level in levels])), dict(levels[-1].load)


def ab_metric(
    metric: str,
    kind: VerdictKind,
    message: str,
    rule: str,
    *,
    values: tuple[float | None, float | None],
    ratio: float | None,
    bounds: tuple[float | None, float | None],
    limit: float,
    n: tuple[int, int],
    unit: str = "ns",
    higher_is_worse: bool = True,
) -> MetricVerdict:
    """One gated figure of a same-run A/B verdict: base and head ``values``, the paired
    ``ratio`` (raw: both sides ran on the same machine at once, nothing to normalise) and
    its bootstrap ``bounds``; the limit is never widened by a noise floor."""
    return MetricVerdict(
        metric=metric,
        verdict=kind,
        message=message,
        rule=rule,
        unit=unit,
        baseline=values[0],
        current=values[1],
        ratio=ratio,
        ratio_raw=ratio,
        lower=bounds[0],
        upper=bounds[1],
        limit=limit,
        higher_is_worse=higher_is_worse,
        effective_limit=limit,
        n_baseline=n[0],
        n_current=n[1],
    )
