"""Results and verdicts from pytest-xdist workers to the controller.

A worker measures and judges its cells, then ships them in ``config.workeroutput``
(JSON strings: execnet carries only plain values); the controller, which alone
writes files, takes them in ``pytest_testnodedown``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, MutableMapping
from typing import Any

from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import ScenarioResult
from perfguard.shard.plan import ShardPlan

_RESULTS_KEY = "perfguard_results"
_VERDICTS_KEY = "perfguard_verdicts"
_PLAN_KEY = "perfguard_shard_plan"
_ERROR_KEY = "perfguard_usage_error"


def ship(
    workeroutput: MutableMapping[str, Any],
    results: Iterable[ScenarioResult],
    verdicts: Iterable[ScenarioVerdict],
    plan: ShardPlan | None = None,
) -> None:
    """On a worker: put its results and verdicts (and the shard plan every worker made
    alike) where the controller will find them."""
    workeroutput[_RESULTS_KEY] = json.dumps([r.to_dict() for r in results])
    workeroutput[_VERDICTS_KEY] = json.dumps([v.to_dict() for v in verdicts])
    if plan is not None:
        workeroutput[_PLAN_KEY] = json.dumps(plan.to_dict())


def receive(
    node: Any,
) -> tuple[list[ScenarioResult], list[ScenarioVerdict], ShardPlan | None]:
    """On the controller: what a finished worker node shipped (nothing if it crashed)."""
    output = getattr(node, "workeroutput", {})
    results = [ScenarioResult.from_dict(d) for d in json.loads(output.get(_RESULTS_KEY) or "[]")]
    verdicts = [ScenarioVerdict.from_dict(d) for d in json.loads(output.get(_VERDICTS_KEY) or "[]")]
    raw_plan = output.get(_PLAN_KEY)
    plan = ShardPlan.from_dict(json.loads(raw_plan), where="an xdist worker") if raw_plan else None
    return results, verdicts, plan


def ship_usage_error(workeroutput: MutableMapping[str, Any], message: str) -> None:
    """On a worker: a usage error found after start-up (a shard plan that does not fit
    the collected tests). Raised in a worker, it would reach the controller as an
    internal error without its message; the controller says it instead."""
    workeroutput[_ERROR_KEY] = message


def received_usage_error(node: Any) -> str | None:
    """On the controller: the usage error a finished worker shipped, if any."""
    message = getattr(node, "workeroutput", {}).get(_ERROR_KEY)
    return str(message) if message else None
