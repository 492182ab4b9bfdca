"""Results and verdicts from pytest-xdist workers to the controller.

A worker measures and judges its cells, then ships them in ``config.workeroutput``
(JSON strings: execnet carries only plain values); the controller, which alone
writes files, takes them in ``pytest_testnodedown``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, MutableMapping
from typing import Any

from perfguard.core.results import ScenarioResult
from perfguard.judge.verdict import ScenarioVerdict

_RESULTS_KEY = "perfguard_results"
_VERDICTS_KEY = "perfguard_verdicts"


def ship(
    workeroutput: MutableMapping[str, Any],
    results: Iterable[ScenarioResult],
    verdicts: Iterable[ScenarioVerdict],
) -> None:
    """On a worker: put its results and verdicts where the controller will find them."""
    workeroutput[_RESULTS_KEY] = json.dumps([r.to_dict() for r in results])
    workeroutput[_VERDICTS_KEY] = json.dumps([v.to_dict() for v in verdicts])


def receive(node: Any) -> tuple[list[ScenarioResult], list[ScenarioVerdict]]:
    """On the controller: what a finished worker node shipped (nothing if it crashed)."""
    output = getattr(node, "workeroutput", {})
    results = [ScenarioResult.from_dict(d) for d in json.loads(output.get(_RESULTS_KEY) or "[]")]
    verdicts = [ScenarioVerdict.from_dict(d) for d in json.loads(output.get(_VERDICTS_KEY) or "[]")]
    return results, verdicts
