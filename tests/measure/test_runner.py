"""The cell runner (perfguard.measure.runner): a runtime outside perfguard's process is
read again after its timed loop, whatever the cell measures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfguard.backends.served import ServedEmbeddings
from perfguard.core.errors import Location, ServerError
from perfguard.core.scenario import LoopSpec, ServerSpec
from perfguard.measure.opencell import RunContext
from perfguard.measure.runner import ScenarioRun
from tests.helpers.served import EMBEDDING_FLAGS, embedding_scenario, llama_server


def test_a_served_embedding_cell_checks_its_server_after_the_timed_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def replaced(session: ServedEmbeddings) -> None:
        calls.append(len(session.runtime_info))
        raise ServerError("the server changed while the cell was measured (test)")

    monkeypatch.setattr(ServedEmbeddings, "check_unchanged", replaced)
    with llama_server(tmp_path, server=EMBEDDING_FLAGS) as (base, _server):
        spec = ServerSpec(Location(tmp_path / "suite.yaml", 4), url=base, api="embeddings")
        scenario = dataclasses.replace(
            embedding_scenario(tmp_path, server=spec),
            warmup=LoopSpec(2, 0.0),
            measure=LoopSpec(5, 0.0),
        )
        ctx = RunContext(rootdir=tmp_path, cache_dir=tmp_path / "cache")
        with ScenarioRun(scenario, ctx) as run, pytest.raises(ServerError, match="changed"):
            run.measure()
    assert calls, "the runner never read the server again"
