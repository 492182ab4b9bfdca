"""``--perfguard-shard=K/N``: plan the collected items over N shards, keep shard K's.

Every item is in exactly one shard: a scenario cell by its cost in the nearest stored
run (cells of one model together), a pytest-benchmark test likewise, any other test at
no cost. The rest are deselected the way ``-k`` deselects (``pytest_deselected``), so
pytest's own summary counts them. With ``--perfguard-shard-plan`` the plan is not made
here but read (made once per run, before the shards started), and must be of exactly
the items collected here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from perfguard.baseline.store import Baseline
from perfguard.core.paths import display_path
from perfguard.shard.plan import (
    Cell,
    FixedPlan,
    ShardPlan,
    ShardSpec,
    check_collected,
    plan_shards,
    stored_costs,
    with_costs,
)


def item_cell(item: pytest.Item, rootdir: Path) -> Cell:
    """How the planner sees ``item``: its result id, its model group, and no cost yet
    (0 for a test that measures nothing)."""
    scenario = getattr(item, "scenario", None)
    if scenario is not None:
        sid = scenario.scenario_id(rootdir)
        return Cell(sid, f"{display_path(scenario.suite, rootdir)}::{scenario.model.name}")
    if "benchmark" in getattr(item, "fixturenames", ()):
        return Cell(item.nodeid, item.nodeid)
    return Cell(item.nodeid, item.nodeid, measured=False)


def plan_items(
    items: Sequence[pytest.Item], total: int, rootdir: Path, baseline: Baseline | None
) -> ShardPlan:
    """The plan for ``items``, costed from ``baseline`` (the nearest stored run)."""
    cells = [item_cell(item, rootdir) for item in items]
    measured = [c.id for c in cells if c.measured]
    costs = stored_costs(baseline, measured)
    if baseline is None or not costs:
        source = "no stored run with costs: every cell counted alike, spread by a stable hash"
    else:
        source = (
            f"costs from the baseline of {baseline.sha[:12]} ({len(costs)} of {len(measured)} "
            "cells; the others at their median)"
        )
    return plan_shards(with_costs(cells, costs), total, costs_from=source)


def check_plan(items: Sequence[pytest.Item], fixed: FixedPlan, rootdir: Path) -> None:
    """ShardError unless ``fixed`` plans exactly ``items``."""
    ids = [item_cell(item, rootdir).id for item in items]
    check_collected(fixed.plan, ids, where=f"{display_path(fixed.path, rootdir)} ({fixed.source})")


def keep_shard(
    config: pytest.Config, items: list[pytest.Item], plan: ShardPlan, shard: ShardSpec
) -> None:
    """Leave in ``items`` only shard ``shard``'s, deselecting the others."""
    rootdir = Path(config.rootpath)
    mine = plan.items(shard.index)
    ours = [item_cell(item, rootdir).id in mine for item in items]
    kept = [item for item, keep in zip(items, ours, strict=True) if keep]
    dropped = [item for item, keep in zip(items, ours, strict=True) if not keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
