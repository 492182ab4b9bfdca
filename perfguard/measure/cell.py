"""One cell's open session and where it keeps its files, shared by the timed loop
(``perfguard.measure.runner``) and load levels (``perfguard.measure.load``); the
result record a cell starts from is ``ScenarioResult.for_cell``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfguard.backends import Session, get_backend
from perfguard.core.errors import BackendUnavailable, CellError
from perfguard.core.scenario import Scenario
from perfguard.measure.gpu import cuda_unavailable
from perfguard.models.inputs import batch_size, make_inputs

__all__ = ["RunContext", "open_session"]


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
