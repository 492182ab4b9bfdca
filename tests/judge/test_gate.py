"""The session's gatekeeper: history for noise floors and trends, read from the archive once."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfguard.baseline.store import BaselineStore
from perfguard.judge.gatekeeper import Gatekeeper, GateSettings
from tests.helpers.baseline_runs import FP, IDS, make_run, sha_of


def test_history_reads_each_stored_baseline_once_for_all_scenarios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = GateSettings(baseline="none", baseline_dir=tmp_path / "baselines")
    run = make_run(sha_of(1))
    keeper = Gatekeeper(settings, tmp_path, run.environment)  # tmp_path: not a git checkout
    for i in range(1, 4):
        keeper.archive.store.save(make_run(sha_of(i), seed=i))
    loads: list[str] = []
    real = BaselineStore._try_load

    def counting(self: BaselineStore, fingerprint: str, sha: str) -> object:
        loads.append(sha)
        return real(self, fingerprint, sha)

    monkeypatch.setattr(BaselineStore, "_try_load", counting)
    trends = {sid: keeper.archive.history_results(sid) for sid in IDS}
    assert [sha for sha, _ in trends[IDS[0]]] == [sha_of(1), sha_of(2), sha_of(3)]
    assert [r.id for _, r in trends[IDS[1]]] == [IDS[1]] * 3
    assert sorted(loads) == [sha_of(1), sha_of(2), sha_of(3)]
    assert keeper.archive.store.ordered_baselines(FP)[0].sha == sha_of(1)
