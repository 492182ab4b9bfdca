"""Shard plans: which of N runners measures which cell, balanced by cost.

A cell's cost is its wall time in the nearest stored run: ``ScenarioResult.wall_ns``,
everything the cell took (model open when it opened the model, warm-up, measurement,
confirmation rounds, A/B pairs, load levels), the median over that baseline's
launches. A file written before ``wall_ns`` existed gives an estimate from its figures
(cold start + warm-up + the timed samples). A cell the baseline lacks costs the median
of the cells it has; with no history at all every cell costs the same, and the order
among equals is a stable hash of the cell id (SHA-256, not Python's salted ``hash``).

The planner is longest-processing-time-first over *units*: the cells of one model are
one unit, so one runner opens the model once. Units go, most costly first, each to the
least-loaded shard (ties: the lowest index); then a unit is moved off the most-loaded
shard, or swapped there for a smaller one, while that lowers the loads. A unit on the
most-loaded shard is split in two only when that lowers the plan's makespan; the half
without the model's opener pays one more model open, estimated from the cells'
openings (wall time outside the timed requests) as the costliest over the median one.
The same cells and costs always give the same plan: every shard of a pull request (and
of its base, in A/B) agrees on who measures what.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from perfguard.baseline.store import Baseline
from perfguard.core.atomicio import read_json, write_json_atomic
from perfguard.core.errors import ResultsError, ShardError
from perfguard.records.declare import Codec, Record, decode, encode, json_schema, spec
from perfguard.records.results import ScenarioResult

#: The environment variable a CI matrix sets instead of ``--perfguard-shard``.
SHARD_ENV = "PERFGUARD_SHARD"
#: The environment variable a CI matrix sets instead of ``--perfguard-shard-plan``.
SHARD_PLAN_ENV = "PERFGUARD_SHARD_PLAN"
#: The plan, written beside a sharded run's ``results.json``.
PLAN_FILENAME = "shard.json"
PLAN_SCHEMA_VERSION = 1
#: More shards than this is a typo, not a runner pool.
MAX_SHARDS = 256
SHARD_FIX = (
    f"give the shard as K/N with 1 <= K <= N <= {MAX_SHARDS}, e.g. --perfguard-shard=2/4 "
    f"(or {SHARD_ENV}=2/4 in a CI matrix)"
)
_EPS_S = 1e-9
_PLAN_FIX = "use the shard's output as it was written, or run the shard again"
#: How a plan fixed before the shards start is made (docs/shards.md, "One plan per run").
PLAN_OUT_COMMAND = (
    "pytest --perfguard --collect-only -q <the shards' paths, -k/-m> "
    "--perfguard-shard=1/N --perfguard-shard-plan-out=plan.json"
)
#: How many test ids a plan mismatch names before "and N more".
_SHOWN_IDS = 5
#: Moves and swaps tried after longest-first, at most (each one lowers the makespan or
#: the number of shards at it; a few hundred units never come near this).
_MAX_REBALANCE_STEPS = 10_000


@dataclass(frozen=True)
class ShardSpec:
    """This run's shard: the ``index``-th (1-based) of ``total``."""

    index: int
    total: int

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"

    @classmethod
    def parse(cls, text: str, *, source: str) -> ShardSpec:
        """``"K/N"`` from ``source`` (the option, ini key or variable that gave it)."""
        head, sep, tail = str(text).strip().partition("/")
        try:
            index, total = int(head), int(tail)
        except ValueError:
            index = total = 0
        if not sep or not 1 <= index <= total <= MAX_SHARDS:
            raise ShardError(
                f"{source} is {text!r}", expected="K/N, the K-th of N shards", fix=SHARD_FIX
            )
        return cls(index, total)


@dataclass(frozen=True)
class Cell:
    """A collected test as the planner sees it.

    ``group``: the cells sharing a model open (the same model in the same suite).
    ``cost_s``: seconds from history; None when unknown (planned at the median).
    ``measured``: False for a plain pytest test, which leaves no result (planned at no
    cost unless one is given). ``open_s``: the part of ``cost_s`` outside the timed
    requests (opening the model when this cell opened it, its runtime session, its
    inputs); the group's costliest opening over its median one is what one more model
    open costs a shard.
    """

    id: str
    group: str
    cost_s: float | None = None
    measured: bool = True
    open_s: float | None = None


#: A shard's expected seconds are stored to the millisecond (the plan keeps them whole).
_EXPECTED_S = Codec(
    encode=lambda seconds: round(seconds, 3),
    decode=lambda value, source, path: value,
    schema={"type": "number", "minimum": 0},
    expected="a number of seconds >= 0",
)


@dataclass(frozen=True)
class Shard(Record):
    """One shard's measured ``cells`` (each leaves a result) and its ``other`` tests
    (plain pytest tests, which leave none), in collection order."""

    SCHEMA_NAME: ClassVar[str] = "shard"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = "One shard of the plan: who measures what."
    KEY_ORDER: ClassVar[tuple[str, ...] | None] = ("index", "expected_s", "cells", "other")

    index: int = field(metadata=spec(minimum=1, maximum=MAX_SHARDS, description="1-based"))
    cells: tuple[str, ...] = field(
        metadata=spec(min_length=1, description="test ids of the measured cells")
    )
    expected_s: float = field(
        metadata=spec(
            codec=_EXPECTED_S, description="seconds the shard is expected to take (to the ms)"
        )
    )
    other: tuple[str, ...] = field(
        default=(),
        metadata=spec(min_length=1, description="test ids of plain pytest tests (no result)"),
    )


@dataclass(frozen=True)
class ShardPlan(Record):
    """Every shard's cells and expected seconds; ``costs_from`` says where costs came
    from (``timed`` is False when nothing was known and every cell counted alike).

    ``digest`` names the assignment (:meth:`assignment_digest`): a plan made here
    computes it; a plan read back keeps the one its file states, which
    :meth:`from_dict` checks against its cells.
    """

    SCHEMA_NAME: ClassVar[str] = "plan"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "Which of N runners measures which cell (perfguard.shard.plan)."
    )
    KEY_ORDER: ClassVar[tuple[str, ...] | None] = (
        "total",
        "digest",
        "costs_from",
        "timed",
        "shards",
    )

    total: int = field(metadata=spec(minimum=1, maximum=MAX_SHARDS))
    shards: tuple[Shard, ...]
    costs_from: str = ""
    timed: bool = True
    digest: str = field(
        default="",
        compare=False,
        metadata=spec(
            pattern="^[0-9a-f]{16}$",
            description="Names the assignment: sha256 of the total and every shard's cells "
            "and other tests (16 hex digits); two runs agree on who measures what iff equal.",
        ),
    )

    def __post_init__(self) -> None:
        if not self.digest:  # made here (a plan read back keeps its stated one)
            object.__setattr__(self, "digest", self.assignment_digest())

    def assignment_digest(self) -> str:
        """The digest of this plan's assignment: two runs agree on who measures what iff
        equal."""
        text = json.dumps([[s.cells, s.other] for s in self.shards], separators=(",", ":"))
        return hashlib.sha256(f"{self.total}:{text}".encode()).hexdigest()[:16]

    @functools.cached_property
    def _owner(self) -> dict[str, int]:
        return {cid: s.index for s in self.shards for cid in (*s.cells, *s.other)}

    def shard_of(self, cell_id: str) -> int | None:
        return self._owner.get(cell_id)

    def cells(self, index: int) -> tuple[str, ...]:
        """Shard ``index``'s measured cells."""
        return self.shards[index - 1].cells

    def items(self, index: int) -> frozenset[str]:
        """Every test id shard ``index`` runs: its cells and its other tests."""
        shard = self.shards[index - 1]
        return frozenset((*shard.cells, *shard.other))

    @property
    def all_cells(self) -> tuple[str, ...]:
        return tuple(cid for s in self.shards for cid in s.cells)

    @property
    def makespan_s(self) -> float:
        return max((s.expected_s for s in self.shards), default=0.0)

    def lines(self, current: int | None = None, *, verbose: bool = False) -> list[str]:
        """The plan as the terminal prints it (``current``: this run's shard)."""
        cells = len(self.all_cells)
        out = [f"shard plan: {cells} cells over {self.total} shards; {self.costs_from}"]
        for shard in self.shards:
            expected = f", {shard.expected_s:.1f} s expected" if self.timed else ""
            mark = "  <- this run" if shard.index == current else ""
            out.append(
                f"  shard {shard.index}/{self.total}: {len(shard.cells)} cells{expected}{mark}"
            )
            if verbose:
                out.extend(f"    {cid}" for cid in shard.cells)
        return out

    # The declaration reads every value; beyond the shape, the shards must be 1..total
    # in order and the stated digest must be the cells' (``check``).
    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        source: str = "<shard plan>",
        path: str = "$",
        what: str = "shard plan",
        fix: str = _PLAN_FIX,
        where: str | None = None,
    ) -> ShardPlan:
        """A plan read back (an xdist worker's, or a plan file's keys); ``where`` (or
        ``source``) names the file for the error."""
        source = source if where is None else where
        plan = decode(cls, data, source=source, path=path, what=what, fix=fix)
        plan.check(where=source)
        return plan

    def check(self, *, where: str) -> None:
        """Refuse (ResultsError) a plan read back whose shards are not 1..total in order,
        or whose stated digest is not its cells'."""
        if [s.index for s in self.shards] != list(range(1, self.total + 1)):
            raise ResultsError(
                f"{where}: the plan lists shards {[s.index for s in self.shards]}",
                expected=f"shards 1..{self.total}, in order",
                fix=_PLAN_FIX,
            )
        computed = self.assignment_digest()
        if self.digest != computed:
            raise ResultsError(
                f"{where}: the plan's digest {self.digest!r} does not match its cells ({computed})",
                expected="the shard.json as perfguard wrote it",
                fix=_PLAN_FIX,
            )


# -- costs ----------------------------------------------------------------------------


def stored_cost_s(result: ScenarioResult) -> float | None:
    """A stored cell's wall time in seconds: ``wall_ns``, or for files written before it
    existed, cold start + warm-up + the timed samples; None when nothing says."""
    if result.wall_ns:
        return result.wall_ns / 1e9
    estimate = (result.cold_start_ns or 0) + result.warmup_ns + sum(result.samples_ns)
    return estimate / 1e9 if estimate > 0 else None


def stored_open_s(result: ScenarioResult) -> float | None:
    """A stored cell's time outside its timed requests (``wall_ns`` less warm-up and
    samples): its opening, and the model's when this cell opened it; None before
    ``wall_ns`` existed."""
    if not result.wall_ns:
        return None
    return max(0, result.wall_ns - result.warmup_ns - sum(result.samples_ns)) / 1e9


@dataclass(frozen=True)
class StoredCost:
    """A cell's cost in the nearest stored run: seconds in all, and outside its timed
    requests (None when the file predates ``wall_ns``)."""

    cost_s: float
    open_s: float | None = None


def stored_costs(baseline: Baseline | None, ids: Iterable[str]) -> dict[str, StoredCost]:
    """The cost of each of ``ids`` the baseline has one for (medians over its launches)."""
    if baseline is None:
        return {}
    costs: dict[str, StoredCost] = {}
    for cid in ids:
        launches = baseline.scenario_launches(cid)
        found = [c for r in launches if (c := stored_cost_s(r)) is not None]
        opens = [o for r in launches if (o := stored_open_s(r)) is not None]
        if found:
            costs[cid] = StoredCost(
                float(statistics.median(found)),
                float(statistics.median(opens)) if opens else None,
            )
    return costs


def with_costs(cells: Sequence[Cell], costs: Mapping[str, StoredCost]) -> list[Cell]:
    """``cells`` with their cost from ``costs`` where they have none yet."""
    return [
        c
        if c.cost_s is not None or c.id not in costs
        else dataclasses.replace(c, cost_s=costs[c.id].cost_s, open_s=costs[c.id].open_s)
        for c in cells
    ]


# -- planning -------------------------------------------------------------------------


def stable_key(text: str) -> str:
    """The order among equals: the same on every machine and Python process."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _Unit:
    key: str
    cells: tuple[str, ...]  # most costly first
    cost_s: float
    open_s: float  # one more model open, paid by a half that lacks the opener


def plan_shards(cells: Sequence[Cell], total: int, *, costs_from: str = "") -> ShardPlan:
    """The plan for ``cells`` (collection order) over ``total`` shards."""
    if total < 1:
        raise ValueError(f"total must be >= 1, not {total}")
    order = {c.id: i for i, c in enumerate(cells)}
    if len(order) != len(cells):
        raise ValueError("cell ids must be unique")
    known = [c.cost_s for c in cells if c.measured and c.cost_s is not None and c.cost_s > 0]
    timed = bool(known)
    fallback = float(statistics.median(known)) if known else 1.0

    def planned(c: Cell) -> float:
        if c.cost_s is not None:
            return max(0.0, c.cost_s)
        return fallback if c.measured else 0.0

    cost = {c.id: planned(c) for c in cells}
    if not costs_from:
        costs_from = (
            "costs from history"
            if timed
            else "no stored run: every cell counted alike, spread by a stable hash of its id"
        )
    groups: dict[str, list[str]] = {}
    for c in cells:
        groups.setdefault(c.group, []).append(c.id)
    opening = {c.id: c.open_s for c in cells}
    units = [
        _unit(key, ids, cost, _model_open_s(ids, cost, opening)) for key, ids in groups.items()
    ]
    loads, placed = _lpt(units, total)
    while True:
        split = _better_split(units, loads, placed, total, cost)
        if split is None:
            break
        units, loads, placed = split
    plain = {c.id for c in cells if not c.measured}
    shards = []
    for i in range(total):
        ids = sorted((cid for u in placed[i] for cid in u.cells), key=order.__getitem__)
        shards.append(
            Shard(
                index=i + 1,
                cells=tuple(cid for cid in ids if cid not in plain),
                expected_s=loads[i],
                other=tuple(cid for cid in ids if cid in plain),
            )
        )
    return ShardPlan(total=total, shards=tuple(shards), costs_from=costs_from, timed=timed)


def _model_open_s(
    ids: Sequence[str], cost: Mapping[str, float], opening: Mapping[str, float | None]
) -> float:
    """What one more open of a group's model costs: its costliest opening over its
    median one (the cell that opened the model paid for it), or without openings on
    record, its costliest cell over its median cell."""
    if len(ids) < 2:
        return 0.0
    opens = [opening[cid] for cid in ids]
    values = [o for o in opens if o is not None]
    if len(values) != len(opens):
        values = [cost[cid] for cid in ids]
    return max(values) - float(statistics.median(values))


def _unit(key: str, ids: Sequence[str], cost: Mapping[str, float], open_s: float) -> _Unit:
    ordered = tuple(sorted(ids, key=lambda cid: (-cost[cid], stable_key(cid))))
    return _Unit(key, ordered, sum(cost[cid] for cid in ordered), open_s)


def _lpt(units: Sequence[_Unit], total: int) -> tuple[list[float], list[list[_Unit]]]:
    """Longest first onto the least-loaded shard, then ``_rebalance``."""
    loads = [0.0] * total
    placed: list[list[_Unit]] = [[] for _ in range(total)]
    for unit in sorted(units, key=_costliest_first):
        target = min(range(total), key=lambda i: (loads[i], i))
        loads[target] += unit.cost_s
        placed[target].append(unit)
    _rebalance(loads, placed)
    return loads, placed


def _rebalance(loads: list[float], placed: list[list[_Unit]]) -> None:
    """Lower the busiest shard's load by moving one of its units to another shard, or
    swapping it for a smaller one there, while that leaves both below the busiest
    load before; in place. Every step lowers the sorted loads, so it ends; the order
    of tries is fixed, so the result is the same on every machine."""
    for _ in range(_MAX_REBALANCE_STEPS):
        busiest = max(range(len(loads)), key=lambda i: (loads[i], -i))
        step = _next_step(busiest, loads, placed)
        if step is None:
            return
        moved, target, back = step
        _shift(moved, busiest, target, loads, placed)
        if back is not None:
            _shift(back, target, busiest, loads, placed)


def _next_step(
    busiest: int, loads: list[float], placed: list[list[_Unit]]
) -> tuple[_Unit, int, _Unit | None] | None:
    """The first move (a unit of ``busiest`` to another shard) or swap (for a smaller
    unit there) that leaves both shards below the busiest load; None if there is none."""
    top = loads[busiest]
    others = sorted((i for i in range(len(loads)) if i != busiest), key=lambda i: (loads[i], i))
    for unit in sorted(placed[busiest], key=_costliest_first):
        for other in others:
            if loads[other] + unit.cost_s < top - _EPS_S:
                return unit, other, None
            for smaller in sorted(placed[other], key=_costliest_first):
                gain = unit.cost_s - smaller.cost_s
                if gain > _EPS_S and loads[other] + gain < top - _EPS_S:
                    return unit, other, smaller
    return None


def _shift(
    unit: _Unit, source: int, target: int, loads: list[float], placed: list[list[_Unit]]
) -> None:
    placed[source].remove(unit)
    placed[target].append(unit)
    loads[source] -= unit.cost_s
    loads[target] += unit.cost_s


def _costliest_first(unit: _Unit) -> tuple[float, str]:
    """The order units are tried in: most costly first, ties by a stable hash."""
    return -unit.cost_s, stable_key(unit.key)


def _halves(unit: _Unit, cost: Mapping[str, float]) -> tuple[_Unit, _Unit]:
    """Two halves of near-equal cost; the half without the opener pays ``open_s``."""
    first: list[str] = []
    second: list[str] = []
    for cid in unit.cells:  # most costly first: the opener lands in ``first``
        (first if sum(cost[c] for c in first) <= sum(cost[c] for c in second) else second).append(
            cid
        )
    a = _unit(unit.key + "/a", first, cost, unit.open_s)
    b = _unit(unit.key + "/b", second, cost, unit.open_s)
    return a, _Unit(b.key, b.cells, b.cost_s + unit.open_s, unit.open_s)


def _better_split(
    units: list[_Unit],
    loads: list[float],
    placed: list[list[_Unit]],
    total: int,
    cost: Mapping[str, float],
) -> tuple[list[_Unit], list[float], list[list[_Unit]]] | None:
    """Split one unit of the most-loaded shard when that lowers the makespan."""
    if total == 1:
        return None
    busiest = max(range(total), key=lambda i: (loads[i], -i))
    makespan = loads[busiest]
    for unit in sorted(placed[busiest], key=_costliest_first):
        if len(unit.cells) < 2:
            continue
        trial = [u for u in units if u is not unit] + list(_halves(unit, cost))
        trial_loads, trial_placed = _lpt(trial, total)
        if max(trial_loads) < makespan - _EPS_S:
            return trial, trial_loads, trial_placed
    return None


# -- the plan file ---------------------------------------------------------------------


def plan_path(run_dir: Path) -> Path:
    return Path(run_dir) / PLAN_FILENAME


_SCHEMA_VERSION = spec(values=(PLAN_SCHEMA_VERSION,))


@dataclass(frozen=True)
class PlanFile(Record):
    """What ``--perfguard-shard-plan-out`` writes: the version, then the plan's keys."""

    SCHEMA_NAME: ClassVar[str] = "plan_file"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "The shard plan a plan job writes (--perfguard-shard-plan-out) for every shard to "
        "follow (--perfguard-shard-plan), by perfguard.shard.plan.write_plan_file. Generated "
        "from the record declarations (perfguard.records.declare), which check every value "
        "when the file is read."
    )
    KEY_ORDER: ClassVar[tuple[str, ...] | None] = ("schema_version", "plan")

    plan: ShardPlan = field(metadata=spec(inline=True))
    schema_version: int = field(default=PLAN_SCHEMA_VERSION, metadata=_SCHEMA_VERSION)


@dataclass(frozen=True)
class StoredShardFile(Record):
    """What ``shard.json`` holds (:class:`ShardFile` once read): the version, which shard
    the run was, its contention limit (null: none), then the plan's keys."""

    SCHEMA_NAME: ClassVar[str] = "shard_file"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "The plan a sharded run followed, written beside its results.json as shard.json by "
        "perfguard.shard.plan.write_plan: which shard the run was, the contention limit it "
        "judged with, and every shard's cells. Generated from the record declarations "
        "(perfguard.records.declare), which check every value when the file is read."
    )
    KEY_ORDER: ClassVar[tuple[str, ...] | None] = (
        "schema_version",
        "shard",
        "contention_limit",
        "plan",
    )

    shard: int = field(metadata=spec(minimum=1, maximum=MAX_SHARDS, description="1-based"))
    plan: ShardPlan = field(metadata=spec(inline=True))
    contention_limit: float | None = field(
        default=None,
        metadata=spec(minimum=0, description="a share of the CPUs; null: no limit"),
    )
    schema_version: int = field(default=PLAN_SCHEMA_VERSION, metadata=_SCHEMA_VERSION)


@dataclass(frozen=True)
class ShardFile:
    """What ``shard.json`` holds: which shard the run was, the plan, and the contention
    limit it judged with (so a merged save refuses exactly what the shard would have)."""

    shard: ShardSpec
    plan: ShardPlan
    contention_limit: float | None = None


def write_plan(
    plan: ShardPlan, shard: ShardSpec, run_dir: Path, *, contention_limit: float | None = None
) -> Path:
    """``shard.json`` beside the shard's results: which shard this run was, and the plan."""
    doc = StoredShardFile(shard=shard.index, plan=plan, contention_limit=contention_limit)
    path = plan_path(run_dir)
    write_json_atomic(path, encode(doc))
    return path


@dataclass(frozen=True)
class FixedPlan:
    """A plan made before the shards started, read from ``path`` (``source``: the option,
    variable or ini key that named it)."""

    path: Path
    source: str
    plan: ShardPlan


def write_plan_file(plan: ShardPlan, path: Path) -> Path:
    """``--perfguard-shard-plan-out``: the whole plan, for every shard of the run to read
    with ``--perfguard-shard-plan`` (atomically: a shard never reads half a plan)."""
    write_json_atomic(Path(path), encode(PlanFile(plan)))
    return Path(path)


def _check_version(data: Any, path: Path, fix: str | None = None) -> None:
    """The version first, so another version's file says so, not "bad value"."""
    if not isinstance(data, dict) or data.get("schema_version") != PLAN_SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else type(data).__name__
        raise ResultsError(
            f"{path}: shard plan schema_version {found!r} is not supported",
            expected=f"schema_version {PLAN_SCHEMA_VERSION}",
            fix=fix,
        )


def read_plan_file(path: Path, *, source: str, shard: ShardSpec) -> ShardPlan:
    """The plan ``--perfguard-shard-plan`` (named by ``source``) gives this run's
    ``shard``: the file ``--perfguard-shard-plan-out`` wrote (a shard's ``shard.json``
    holds the same plan and is read alike). ShardError when it is missing, malformed, or
    made for another number of shards."""
    fix = (
        "pass the plan file the plan job wrote for this run (made with "
        f"`{PLAN_OUT_COMMAND}`), or drop {source} to plan from the archive here"
    )
    try:
        data = read_json(Path(path))
        _check_version(data, path)
        stored = decode(PlanFile, data, source=str(path), what="shard plan", fix=_PLAN_FIX)
        plan = stored.plan
        plan.check(where=str(path))
    except ResultsError as exc:
        problem = f"{exc.location}: {exc.problem}" if exc.location else exc.problem
        raise ShardError(
            f"{source} is {str(path)!r}, and its plan cannot be read: {problem}",
            expected="the shard plan --perfguard-shard-plan-out wrote (JSON)",
            fix=fix,
        ) from exc
    if plan.total != shard.total:
        raise ShardError(
            f"{source} ({path}) plans {plan.total} shards, but this run is shard {shard}",
            expected=f"a plan over {shard.total} shards, as --perfguard-shard={shard} says",
            fix="give every shard the plan made for the same N as its --perfguard-shard "
            f"(or {SHARD_ENV}); make the plan again with `{PLAN_OUT_COMMAND}`",
        )
    return plan


def check_collected(plan: ShardPlan, collected: Sequence[str], *, where: str) -> None:
    """Refuse a plan whose tests are not exactly the ``collected`` ones (ShardError):
    a cell the plan lacks would run on no shard, and a planned one not collected here
    would be lost from the merge (``where``: the plan file, for the message)."""
    planned = {cid for shard in plan.shards for cid in (*shard.cells, *shard.other)}
    found = set(collected)
    unplanned = [cid for cid in dict.fromkeys(collected) if cid not in planned]
    missing = sorted(cid for cid in planned if cid not in found)
    if not unplanned and not missing:
        return
    parts = []
    if unplanned:
        parts.append(f"{_count(unplanned, 'collected test')} not in the plan: {_ids(unplanned)}")
    if missing:
        parts.append(f"{_count(missing, 'planned test')} not collected: {_ids(missing)}")
    raise ShardError(
        f"the shard plan {where} does not match this run's tests: " + "; ".join(parts),
        expected="the tests the plan was made from: the same commit, suites and -k/-m selection",
        fix="the plan was made for another commit, another set of suites or another -k/-m "
        "selection; make it again in the plan job, from the same checkout and with the same "
        f"paths and selection as the shards (`{PLAN_OUT_COMMAND}`)",
    )


def _count(ids: Sequence[str], what: str) -> str:
    return f"{len(ids)} {what}" + ("s" if len(ids) != 1 else "")


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_SHOWN_IDS])
    more = len(ids) - _SHOWN_IDS
    return shown + (f" (and {more} more)" if more > 0 else "")


def read_plan(path: Path) -> ShardFile:
    """This shard, its plan and its contention limit from a ``shard.json``: every value
    checked by the declaration as it is read, then what it cannot say (the shards 1..N,
    the digest, this shard among them)."""
    data = read_json(path)
    _check_version(data, path, fix="merge shards written by the same perfguard version")
    stored = decode(StoredShardFile, data, source=str(path), what="shard plan", fix=_PLAN_FIX)
    plan = stored.plan
    plan.check(where=str(path))
    if stored.shard > plan.total:
        raise ResultsError(
            f"{path}: 'shard' is {stored.shard!r}",
            expected=f"an integer in 1..{plan.total}",
            fix=_PLAN_FIX,
        )
    limit = stored.contention_limit
    return ShardFile(
        ShardSpec(stored.shard, plan.total), plan, None if limit is None else float(limit)
    )


def plan_file_schema() -> dict[str, Any]:
    """The JSON Schema of a plan file (``--perfguard-shard-plan-out``), generated from
    the declarations."""
    return json_schema(PlanFile, title="perfguard shard plan")


def shard_file_schema() -> dict[str, Any]:
    """The JSON Schema of ``shard.json``, generated from the declarations."""
    return json_schema(StoredShardFile, title="perfguard shard.json")


#: The shipped schemas (under ``perfguard/schemas/``) and what generates each.
SCHEMAS = {"shard.schema.json": shard_file_schema, "shardplan.schema.json": plan_file_schema}


def schema_text(name: str) -> str:
    """The schema ``perfguard/schemas/<name>`` holds (1-space indent, final newline).
    Regenerate the files with ``python -m perfguard.shard.plan``."""
    return json.dumps(SCHEMAS[name](), indent=1, ensure_ascii=False) + "\n"


def write_schemas(folder: Path) -> list[Path]:
    """Write every schema of :data:`SCHEMAS` into ``folder``."""
    out = []
    for name in SCHEMAS:
        path = Path(folder) / name
        path.write_text(schema_text(name), encoding="utf-8")
        out.append(path)
    return out


if __name__ == "__main__":  # python -m perfguard.shard.plan: regenerate perfguard/schemas/shard*
    for written in write_schemas(Path(__file__).resolve().parent.parent / "schemas"):
        print(written)
