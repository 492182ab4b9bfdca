"""One cell's open session and where it keeps its files, shared by the timed loop
(``perfguard.measure.runner``) and load levels (``perfguard.measure.loadcell``); the
result record a cell starts from is ``ScenarioResult.for_cell``.

With ``RunContext.open_timeout_s`` set, opening the model (``backend.open`` and
``prepare``) and the warm-up of the timed loop run under the in-process watchdog
(``perfguard.measure.watchdog``): past the limit the stacks are dumped and the cell
fails instead of hanging the session."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from perfguard.backends import Backend, Session, get_backend
from perfguard.core.errors import BackendUnavailable, CellError
from perfguard.core.policy import OPEN_TIMEOUT_S
from perfguard.core.scenario import Scenario
from perfguard.machine.placement import inherited_threads
from perfguard.measure.gpuwatch import cuda_unavailable
from perfguard.measure.watchdog import cell_limit, watch
from perfguard.models.inputs import batch_size, make_inputs

__all__ = ["RunContext", "open_session", "ready_backend"]


@dataclass(frozen=True)
class RunContext:
    """Where a session keeps its derived files and how it names scenarios.

    ``open_timeout_s``: how long opening a cell's model, and its warm-up, may take
    (``--perfguard-open-timeout``): the in-process watchdog's limit and an isolated
    worker's ``open`` timeout. ``None``: no in-process watchdog (a worker process, whose
    parent holds the timeout) and the default for isolated workers.

    ``default_threads``: the intra-op threads of a cell whose scenario does not set
    ``threads:``; by default a placed pytest-xdist worker's share of cores (and its
    isolated or A/B workers', which inherit it), else None: the runtime's own default.
    """

    rootdir: Path
    cache_dir: Path
    open_timeout_s: float | None = None
    default_threads: int | None = field(default_factory=inherited_threads)

    @property
    def worker_open_limit_s(self) -> float:
        """How long a worker's ``open`` (and, on top of the scenario's own warm-up
        allowance, its warm-up) may take: the setting, else the default."""
        return OPEN_TIMEOUT_S if self.open_timeout_s is None else self.open_timeout_s


def ready_backend(scenario: Scenario, ctx: RunContext) -> tuple[Scenario, Backend]:
    """The cell as it runs (the context's default threads where it sets none) and its
    backend, ready: an unsupported cell, a missing runtime or CUDA raise here."""
    if scenario.error:
        raise CellError(scenario.error)
    if scenario.threads is None and ctx.default_threads is not None:
        scenario = replace(scenario, threads=ctx.default_threads)
    backend = get_backend(scenario.backend)
    reason = backend.unavailable_reason() or cuda_unavailable(scenario)
    if reason:
        raise BackendUnavailable(reason, location=scenario.location)
    return scenario, backend


@contextmanager
def open_session(
    scenario: Scenario,
    ctx: RunContext,
    calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
) -> Iterator[tuple[Session, object, int]]:
    """Open the scenario's backend session with its prepared inputs; always closed.

    ``calibration`` feeds (the accuracy inputs) are only needed by static int8.
    """
    scenario, backend = ready_backend(scenario, ctx)
    feeds = make_inputs(scenario.model)
    # Opening, preparing and (perfguard.measure.timing) the warm-up are watched.
    with cell_limit(ctx.open_timeout_s, cell=scenario.item_name, location=scenario.location):
        with watch("opening the model"):
            if calibration is not None:
                session = backend.open(scenario, feeds, ctx.cache_dir, calibration=calibration)
            else:
                session = backend.open(scenario, feeds, ctx.cache_dir)
        try:
            with watch("preparing the inputs"):
                prepared = session.prepare(feeds)
            yield session, prepared, batch_size(feeds)
        finally:
            session.close()
