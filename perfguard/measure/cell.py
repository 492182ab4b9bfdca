"""One cell's session and the result record it starts from, shared by the timed loop
(``perfguard.measure.runner``) and load levels (``perfguard.measure.load``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfguard.backends import Session, get_backend
from perfguard.core.errors import BackendUnavailable, CellError
from perfguard.core.results import ScenarioResult
from perfguard.core.scenario import Scenario
from perfguard.measure.gpu import cuda_unavailable
from perfguard.models.inputs import batch_size, make_inputs

__all__ = ["RunContext", "base_result", "open_session"]


@dataclass(frozen=True)
class RunContext:
    """Where a session keeps its derived files and how it names scenarios."""

    rootdir: Path
    cache_dir: Path


@contextmanager
def open_session(
    scenario: Scenario,
    ctx: RunContext,
    calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
) -> Iterator[tuple[Session, object, int]]:
    """Open the scenario's backend session with its prepared inputs; always closed.

    ``calibration`` feeds (the accuracy inputs) are only needed by static int8.
    """
    if scenario.error:
        raise CellError(scenario.error)
    backend = get_backend(scenario.backend)
    reason = backend.unavailable_reason() or cuda_unavailable(scenario)
    if reason:
        raise BackendUnavailable(reason, location=scenario.location)
    feeds = make_inputs(scenario.model)
    if calibration is not None:
        session = backend.open(scenario, feeds, ctx.cache_dir, calibration=calibration)
    else:
        session = backend.open(scenario, feeds, ctx.cache_dir)
    try:
        yield session, session.prepare(feeds), batch_size(feeds)
    finally:
        session.close()


def base_result(scenario: Scenario, ctx: RunContext, batch: int) -> ScenarioResult:
    """A passed result naming the cell, before any figure is filled in."""
    return ScenarioResult(
        id=scenario.scenario_id(ctx.rootdir),
        suite=_relative(scenario.suite, ctx.rootdir),
        name=scenario.item_name,
        backend=scenario.backend,
        device=scenario.device,
        precision=scenario.precision,
        status="passed",
        batch_size=batch,
        threads=scenario.threads,
        tags=scenario.tags,
    )


def _relative(path: Path, rootdir: Path) -> str:
    try:
        return path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return path.as_posix()
