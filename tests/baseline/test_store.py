"""The baseline archive: format, pooling, agreement of the twins, concurrency, git selection."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from perfguard.baseline import fileformat
from perfguard.baseline.store import (
    LOCK_STEP,
    Baseline,
    BaselineStore,
    DirectoryStore,
    MemoryStore,
    select_auto_baseline,
)
from perfguard.core import progress
from perfguard.core.errors import GitError, ResultsError, StoreError
from perfguard.records.arrays import SAMPLES_ENCODING as ENCODING
from perfguard.records.figures import summarize
from perfguard.records.loadfigures import LoadFigures
from perfguard.records.tokenfigures import TokenFigures, pooled_tokens
from tests.helpers.baseline_runs import FP, IDS, make_run, make_samples, sha_of
from tests.helpers.envs import fp as fingerprint_of
from tests.helpers.paths import RECORDS
from tests.helpers.results import load_dict
from tests.helpers.tokens import token_times

# -- format and round trip ------------------------------------------------------------


def test_round_trip_preserves_everything_and_the_file_is_readable(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "baselines")
    run = make_run(sha_of(1), samples=(5, 3, 2**62, 0, 3, 7))
    path = store.save(run)
    assert path == tmp_path / "baselines" / FP / f"{sha_of(1)}.json"
    loaded = store.load(FP, sha_of(1))
    assert loaded is not None
    assert loaded.launches == (run,)
    assert loaded.launches[0].scenarios[0].samples_ns == (5, 3, 2**62, 0, 3, 7)
    assert loaded.path == path and loaded.commit == run.commit and loaded.fingerprint == FP
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert (doc["schema_version"], doc["kind"], doc["fingerprint"]) == (1, "perfguard-baseline", FP)
    scenario = doc["launches"][0]["scenarios"][0]
    assert scenario["samples_ns"]["encoding"] == ENCODING and scenario["samples_ns"]["n"] == 6
    assert scenario["latency_ns"]["p95"] == run.scenarios[0].latency_ns.p95  # type: ignore[union-attr]
    # Locks are kept out of the reviewed tree, in a folder that ignores itself.
    assert sorted(p.name for p in (tmp_path / "baselines" / FP).iterdir()) == [path.name]
    assert (tmp_path / "baselines" / ".locks" / ".gitignore").read_text() == "*\n"
    assert store.commits(FP) == [sha_of(1)] and store.fingerprints() == [FP]


def test_launches_pool_and_the_oldest_are_dropped() -> None:
    store = MemoryStore(max_launches=3)
    for seed in range(5):
        store.save(make_run(sha_of(1), seed=seed))
    baseline = store.load(FP, sha_of(1))
    assert baseline is not None
    assert [r.perfguard_version for r in baseline.launches] == [
        "0.1.0+seed2",
        "0.1.0+seed3",
        "0.1.0+seed4",
    ]
    assert baseline.scenario_ids() == list(IDS)
    pooled = baseline.pooled(IDS[0])
    assert pooled is not None and pooled.latency_ns is not None
    expected = make_samples(2) + make_samples(3) + make_samples(4)
    assert pooled.samples_ns == expected
    assert pooled.latency_ns == summarize(expected)
    assert pooled.canary_ns == 1003.0  # median of 1002, 1003, 1004
    assert len(baseline.scenario_launches(IDS[0])) == 3
    assert baseline.pooled("suite::gone") is None


def test_replace_starts_afresh(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    store.save(make_run(sha_of(1), seed=1))
    store.save(make_run(sha_of(1), seed=2))
    store.save(make_run(sha_of(1), seed=3), replace=True)
    baseline = store.load(FP, sha_of(1))
    assert baseline is not None and [r.perfguard_version for r in baseline.launches] == [
        "0.1.0+seed3"
    ]


def test_pooling_skips_launches_without_samples() -> None:
    store = MemoryStore()
    store.save(make_run(sha_of(1), seed=1))
    skipped = make_run(sha_of(1), seed=2, samples=())
    skipped = dataclasses.replace(
        skipped,
        scenarios=tuple(
            dataclasses.replace(s, status="skipped", message="no GPU") for s in skipped.scenarios
        ),
    )
    store.save(skipped)
    baseline = store.load(FP, sha_of(1))
    assert baseline is not None
    pooled = baseline.pooled(IDS[0])
    assert pooled is not None and pooled.samples_ns == make_samples(1)
    only_skipped = MemoryStore()
    only_skipped.save(skipped)
    loaded = only_skipped.load(FP, sha_of(1))
    assert loaded is not None and loaded.pooled(IDS[0]) == skipped.scenarios[0]


def test_save_refuses_a_run_without_a_commit_and_bad_names() -> None:
    store = MemoryStore()
    with pytest.raises(StoreError, match="commit first, or run inside a git checkout"):
        store.save(make_run(None))
    with pytest.raises(StoreError, match="full commit sha"):
        store.save(make_run("abc123"))
    with pytest.raises(StoreError, match="fingerprint"):
        store.save(make_run(sha_of(1), fingerprint="../escape"))
    with pytest.raises(StoreError, match="full commit sha"):
        store.load(FP, "HEAD")
    assert store.fingerprints() == []


def test_nonexistent_root_reads_empty_and_is_never_created(tmp_path: Path) -> None:
    root = tmp_path / "nowhere"
    store = DirectoryStore(root)
    assert store.load(FP, sha_of(1)) is None
    assert store.commits(FP) == [] and store.fingerprints() == [] and store.scan() == []
    assert store.delete(FP, sha_of(1)) is False
    assert store.nearest_ancestor(FP, [sha_of(1)]) is None
    assert store.history(FP, IDS[0]) == [] and store.prune(FP, 0) == []
    assert not root.exists()
    store.save(make_run(sha_of(1)))
    assert store.commits(FP) == [sha_of(1)]


# -- unreadable files -----------------------------------------------------------------


def _with_sample_count(text: str, n: int) -> str:
    doc = json.loads(text)
    doc["launches"][0]["scenarios"][0]["samples_ns"]["n"] = n
    return json.dumps(doc, indent=1)


@pytest.mark.parametrize(
    "damage", ["truncate", "garbage", "empty", "wrong-n", "wrong-sha", "edited-environment"]
)
def test_corrupt_files_are_reported_by_path_and_left_untouched(tmp_path: Path, damage: str) -> None:
    store = DirectoryStore(tmp_path)
    path = store.save(make_run(sha_of(1)))
    assert path is not None
    store.save(make_run(sha_of(2)))
    text = path.read_text(encoding="utf-8")
    damaged = {
        "truncate": text[: len(text) // 2],
        "garbage": "\x00\x01 not json",
        "empty": "",
        "wrong-n": _with_sample_count(text, 41),
        "wrong-sha": text.replace(sha_of(1), sha_of(9)),
        # Its fingerprint kept, a comparable field edited: it was gated as comparable.
        "edited-environment": text.replace('"cpu": "test-cpu"', '"cpu": "other-cpu"'),
    }[damage]
    assert damaged != text
    path.write_text(damaged, encoding="utf-8")
    before = path.read_bytes()

    with pytest.raises(ResultsError) as info:
        store.load(FP, sha_of(1))
    assert str(path) in str(info.value) and "move the file away" in str(info.value)
    if damage == "edited-environment":
        assert "is not the hash of its comparable fields" in str(info.value)
    if damage == "truncate":
        assert info.value.location is not None and info.value.location.line is not None
    problems = store.scan()
    assert [(p.sha, p.path) for p in problems] == [(sha_of(1), path)]
    # Helpers skip it, noting the problem, and fall through to the next readable one.
    assert store.nearest_ancestor(FP, [sha_of(1), sha_of(2)]).sha == sha_of(2)  # type: ignore[union-attr]
    assert store.problems and store.problems[-1].path == path
    assert [sha for sha, _ in store.history(FP, IDS[0])] == [sha_of(2)]
    assert store.prune(FP, 0) == [sha_of(2)]
    for replace in (False, True):
        with pytest.raises(ResultsError, match="move the file away"):
            store.save(make_run(sha_of(1), seed=5), replace=replace)
    assert path.read_bytes() == before
    assert store.commits(FP) == [sha_of(1)]


@pytest.mark.parametrize(
    ("version", "hint"), [(2, "upgrade"), (0, "re-save"), (None, "re-save"), ("1", "re-save")]
)
def test_other_schema_versions_are_refused_not_misread(
    tmp_path: Path, version: object, hint: str
) -> None:
    store = DirectoryStore(tmp_path)
    path = store.save(make_run(sha_of(1)))
    assert path is not None
    doc = json.loads(path.read_text(encoding="utf-8"))
    if version is None:
        del doc["schema_version"]
    else:
        doc["schema_version"] = version
    path.write_text(json.dumps(doc), encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(ResultsError, match=hint) as info:
        store.load(FP, sha_of(1))
    assert str(path) in str(info.value)
    with pytest.raises(ResultsError, match=hint):
        store.save(make_run(sha_of(1)))
    assert path.read_bytes() == before


def test_memory_store_reports_corruption_too() -> None:
    store = MemoryStore()
    store.save(make_run(sha_of(1)))
    store.files[(FP, sha_of(1))] = store.files[(FP, sha_of(1))][:100]
    with pytest.raises(ResultsError, match=f"memory:{FP}/{sha_of(1)}.json"):
        store.load(FP, sha_of(1))
    assert len(store.scan(FP)) == 1


# -- processes ------------------------------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import dataclasses, json, sys, time
    from pathlib import Path
    from perfguard.records.results import RunResult
    from perfguard.baseline.store import DirectoryStore

    root, run_file, go_file, worker = sys.argv[1:]
    run = RunResult.from_dict(json.loads(Path(run_file).read_text()))
    store = DirectoryStore(root, max_launches=100)
    deadline = time.monotonic() + 20
    while not Path(go_file).exists() and time.monotonic() < deadline:
        time.sleep(0.002)
    for k in range(3):
        store.save(dataclasses.replace(run, perfguard_version=f"w{worker}-{k}"))
    """
)


def test_concurrent_writers_lose_no_launch(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(make_run(sha_of(7)).to_dict()), encoding="utf-8")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(root), str(run_file), str(go), str(w)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(4)
    ]
    time.sleep(0.5)  # let them import, then release them together
    go.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    baseline = DirectoryStore(root).load(FP, sha_of(7))
    assert baseline is not None
    versions = sorted(r.perfguard_version for r in baseline.launches)
    assert versions == sorted(f"w{w}-{k}" for w in range(4) for k in range(3))
    # Each worker's own launches stay in its order.
    for w in range(4):
        mine = [r.perfguard_version for r in baseline.launches if r.perfguard_version[1] == str(w)]
        assert mine == [f"w{w}-{k}" for k in range(3)]


_KILLER = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from perfguard.records.results import RunResult
    from perfguard.baseline.store import DirectoryStore

    root, run_file, target = sys.argv[1:]
    run = RunResult.from_dict(json.loads(Path(run_file).read_text()))
    setattr(os, target, lambda *args, **kwargs: os._exit(1))  # die mid-save
    DirectoryStore(root).save(run)
    os._exit(0)
    """
)


@pytest.mark.parametrize("target", ["fsync", "replace"])
def test_a_kill_during_a_write_leaves_the_old_file_whole(tmp_path: Path, target: str) -> None:
    root = tmp_path / "baselines"
    store = DirectoryStore(root)
    path = store.save(make_run(sha_of(3), seed=1))
    assert path is not None
    before = path.read_bytes()
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(make_run(sha_of(3), seed=2).to_dict()), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-c", _KILLER, str(root), str(run_file), target],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr  # it died where we made it die
    assert path.read_bytes() == before
    baseline = store.load(FP, sha_of(3))
    assert baseline is not None and len(baseline.launches) == 1
    assert store.commits(FP) == [sha_of(3)]  # a leftover temporary file is not a baseline
    store.save(make_run(sha_of(3), seed=3))  # and the dead writer's lock is gone
    assert len(store.load(FP, sha_of(3)).launches) == 2  # type: ignore[union-attr]


# -- the twins agree ------------------------------------------------------------------

FPS = (fingerprint_of("a"), fingerprint_of("b"))
SHAS = (sha_of(1), sha_of(2), sha_of(3))


class StoreAgreement(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="perfguard-store-"))
        self.disk = DirectoryStore(self.tmp / "baselines", max_launches=3)
        self.memory = MemoryStore(max_launches=3)
        self.model: dict[tuple[str, str], list[str]] = {}  # launch tags, oldest first
        self.counter = 0

    @rule(
        fp=st.sampled_from(FPS),
        sha=st.sampled_from(SHAS),
        samples=st.lists(st.integers(0, 2**40), min_size=1, max_size=20).map(tuple),
        replace=st.booleans(),
    )
    def save(self, fp: str, sha: str, samples: tuple[int, ...], replace: bool) -> None:
        self.counter += 1
        run = make_run(sha, fingerprint=fp, seed=self.counter, samples=samples, ids=IDS[:1])
        self.disk.save(run, replace=replace)
        self.memory.save(run, replace=replace)
        kept = [] if replace else self.model.get((fp, sha), [])
        self.model[(fp, sha)] = [*kept, run.perfguard_version][-3:]

    @rule(fp=st.sampled_from(FPS), sha=st.sampled_from(SHAS))
    def delete(self, fp: str, sha: str) -> None:
        expected = (fp, sha) in self.model
        assert self.disk.delete(fp, sha) == self.memory.delete(fp, sha) == expected
        self.model.pop((fp, sha), None)

    @rule(fp=st.sampled_from(FPS), sha=st.sampled_from(SHAS))
    def load(self, fp: str, sha: str) -> None:
        disk, memory = self.disk.load(fp, sha), self.memory.load(fp, sha)
        if (fp, sha) not in self.model:
            assert disk is None and memory is None
            return
        assert disk is not None and memory is not None
        assert (disk.commit, disk.launches) == (memory.commit, memory.launches)
        assert [r.perfguard_version for r in disk.launches] == self.model[(fp, sha)]
        assert disk.path is not None and disk.path.read_bytes() == self.memory.files[(fp, sha)]

    @invariant()
    def listings_agree(self) -> None:
        expected_fps = sorted({fp for fp, _ in self.model})
        assert self.disk.fingerprints() == self.memory.fingerprints() == expected_fps
        for fp in FPS:
            expected = sorted(sha for f, sha in self.model if f == fp)
            assert self.disk.commits(fp) == self.memory.commits(fp) == expected

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


TestStoreAgreement = StoreAgreement.TestCase
TestStoreAgreement.settings = settings(
    max_examples=50, stateful_step_count=12, deadline=None, database=None
)


# -- history, prune, nearest ancestor -------------------------------------------------


def _fill(store: BaselineStore, seeds: dict[int, int]) -> None:
    """Save one baseline per sha index, measured at minute ``seed``."""
    for index, seed in seeds.items():
        store.save(make_run(sha_of(index), seed=seed))


def test_history_orders_by_time_or_by_ancestry() -> None:
    store = MemoryStore()
    _fill(store, {1: 30, 2: 10, 3: 20})
    assert [sha for sha, _ in store.history(FP, IDS[0])] == [sha_of(2), sha_of(3), sha_of(1)]
    # Ancestors come nearest first; history is oldest first and restricted to them.
    ancestry = [sha_of(9), sha_of(1), sha_of(3)]
    history = store.history(FP, IDS[0], ancestry)
    assert [sha for sha, _ in history] == [sha_of(3), sha_of(1)]
    assert history[0][1].samples_ns == make_samples(20)
    assert store.history(FP, "suite::gone") == []


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    _fill(store, {1: 40, 2: 10, 3: 30, 4: 20})
    assert store.prune(FP, 2) == [sha_of(2), sha_of(4)]
    assert store.commits(FP) == [sha_of(1), sha_of(3)]
    assert store.prune(FP, 5) == []
    with pytest.raises(ValueError, match="keep"):
        store.prune(FP, -1)


def test_nearest_ancestor_takes_the_first_listed() -> None:
    store = MemoryStore()
    _fill(store, {2: 1, 4: 2})
    found = store.nearest_ancestor(FP, [sha_of(1), sha_of(4), sha_of(2)])
    assert isinstance(found, Baseline) and found.sha == sha_of(4)
    assert store.nearest_ancestor(FP, [sha_of(1)]) is None
    assert store.nearest_ancestor("fp-other", [sha_of(4)]) is None


# -- automatic selection on real git repositories -------------------------------------


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
    )
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "commit", "--allow-empty", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def new_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def save_at(store: BaselineStore, *shas: str) -> None:
    for sha in shas:
        store.save(make_run(sha))


def test_auto_linear_history_skips_head(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    c = [commit(repo, f"c{i}") for i in range(4)]
    store = MemoryStore()
    save_at(store, c[3])  # HEAD's own baseline is not a comparison point
    assert select_auto_baseline(store, FP, repo)[0] is None
    save_at(store, c[1])
    found, why = select_auto_baseline(store, FP, repo)
    assert found is not None and found.sha == c[1]
    assert why == f"nearest ancestor with a baseline: {c[1][:7]} (2 commits back)"


def test_auto_feature_branch_prefers_the_merge_base(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    m1, m2 = commit(repo, "m1"), commit(repo, "m2")
    git(repo, "checkout", "-q", "-b", "feature")
    f1, f2 = commit(repo, "f1"), commit(repo, "f2")
    git(repo, "checkout", "-q", "main")
    m3 = commit(repo, "m3")
    git(repo, "checkout", "-q", "feature")
    store = MemoryStore()
    save_at(store, m1, f1, m3)  # m3 is on main but not below HEAD: never chosen
    found, why = select_auto_baseline(store, FP, repo)
    assert found is not None and found.sha == m1, why
    assert "3 commits back" in why and "below the merge-base with main" in why
    save_at(store, m2)
    found, why = select_auto_baseline(store, FP, repo)
    assert found is not None and found.sha == m2
    assert why.endswith("(2 commits back, merge-base with main)")
    store.delete(FP, m1)
    store.delete(FP, m2)
    found, why = select_auto_baseline(store, FP, repo)
    assert found is not None and found.sha == f1 and "on this branch" in why
    assert f2 == git(repo, "rev-parse", "HEAD")

    # A CI clone often has only origin/main; that counts as the target branch too.
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", f"file://{repo}", str(clone))
    git(clone, "checkout", "-q", "-b", "topic", "origin/feature")
    assert git(clone, "branch", "--list", "main") == ""  # the clone's default was feature
    save_at(store, m1)
    found, why = select_auto_baseline(store, FP, clone)
    assert found is not None and found.sha == m1 and "merge-base with origin/main" in why


def test_auto_detached_head(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    c = [commit(repo, f"c{i}") for i in range(4)]
    git(repo, "checkout", "-q", "--detach", c[2])
    store = MemoryStore()
    save_at(store, c[1], c[3])
    found, why = select_auto_baseline(store, FP, repo)
    assert found is not None and found.sha == c[1] and "1 commit back" in why


def test_auto_without_commits_or_outside_git(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    assert select_auto_baseline(MemoryStore(), FP, repo) == (None, "repository has no commits yet")
    plain = tmp_path / "plain"
    plain.mkdir()
    found, why = select_auto_baseline(MemoryStore(), FP, plain)
    assert found is None and "not inside a git checkout" in why
    commit(repo, "first")
    found, why = select_auto_baseline(MemoryStore(), FP, repo)
    assert found is None and "no parent commit" in why


def test_auto_shallow_clone_says_how_to_fetch_history(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    c = [commit(repo, f"c{i}") for i in range(3)]
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    store = MemoryStore()
    save_at(store, c[0])
    found, why = select_auto_baseline(store, FP, clone, environ={})
    assert found is None
    assert "shallow clone" in why and "fetch-depth: 0" in why
    # In CI the same is a failure: every cell would pass as `new`.
    for ci in ({"CI": "true"}, {"GITHUB_ACTIONS": "true"}):
        with pytest.raises(GitError, match="a shallow clone in CI found no baseline") as info:
            select_auto_baseline(store, FP, clone, environ=ci)
        assert "fetch-depth: 0" in str(info.value.fix)


def test_auto_notes_a_skipped_unreadable_baseline(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    c = [commit(repo, f"c{i}") for i in range(3)]
    store = DirectoryStore(tmp_path / "baselines")
    save_at(store, c[0], c[1])
    broken = tmp_path / "baselines" / FP / f"{c[1]}.json"
    broken.write_text("{", encoding="utf-8")
    found, why = select_auto_baseline(store, FP, repo)
    assert found is not None and found.sha == c[0]
    assert "2 commits back" in why and str(broken) in why
    assert broken.read_text(encoding="utf-8") == "{"


def test_pooled_load_cells_keep_the_launches_own_throughput() -> None:
    # Under load, throughput is answered requests per wall second: it cannot be
    # recomputed from latencies (4 clients of 10 ms give 400/s, not 1/10 ms).
    store = MemoryStore()
    for seed, rate in ((0, 380.0), (1, 400.0), (2, 390.0)):
        run = make_run(sha_of(1), seed=seed)
        scenarios = tuple(
            dataclasses.replace(s, throughput=rate, load=LoadFigures.from_dict(load_dict("c4")))
            for s in run.scenarios
        )
        store.save(dataclasses.replace(run, scenarios=scenarios))
    baseline = store.load(FP, sha_of(1))
    assert baseline is not None
    pooled = baseline.pooled(IDS[0])
    assert pooled is not None
    assert pooled.throughput == 390.0  # the median launch
    plain = MemoryStore()
    plain.save(make_run(sha_of(1)))
    loaded = plain.load(FP, sha_of(1))
    assert loaded is not None
    other = loaded.pooled(IDS[0])
    assert other is not None and other.throughput != 123.5  # recomputed from samples


def test_pooled_generative_cells_pool_every_launchs_token_times() -> None:
    # A baseline of three launches gates ITL on all their requests, not the newest's.
    store = MemoryStore()
    times = [token_times(20, 6, seed) for seed in range(3)]
    for t in times:
        run = make_run(sha_of(1))
        scenarios = tuple(
            dataclasses.replace(s, tokens=TokenFigures.of(t, prompt_tokens=4, batch=1))
            for s in run.scenarios
        )
        store.save(dataclasses.replace(run, scenarios=scenarios))
    baseline = store.load(FP, sha_of(1))
    assert baseline is not None
    pooled = baseline.pooled(IDS[0])
    assert pooled is not None and pooled.tokens is not None
    assert pooled.tokens.requests == 60
    assert pooled.tokens.times().tolist() == np.concatenate(times).tolist()
    # a launch of another shape (its suite changed between launches) is left out
    assert (
        pooled_tokens(
            [
                TokenFigures.of(times[0][:, :3], prompt_tokens=4, batch=1),
                TokenFigures.of(times[1], prompt_tokens=4, batch=1),
            ]
        ).requests
        == 20
    )  # type: ignore[union-attr]


# -- headers: what `perfguard baseline list` reads -------------------------------------

RECORDED = sorted((RECORDS / "baselines").glob("*/*.json"))


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_a_header_says_what_the_whole_file_says(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read one byte at a time too, so every boundary (inside a key, a number, a UTF-8
    # character) is crossed; recorded files predate the summary and are read whole.
    monkeypatch.setattr(fileformat, "_HEADER_CHUNK", chunk)
    store = DirectoryStore(tmp_path / "baselines")
    run = make_run(sha_of(1), seed=3)
    branchy = dataclasses.replace(run.commit, branch="fé-ü/" + "x" * 5000)
    store.save(dataclasses.replace(run, commit=branchy))
    store.save(make_run(sha_of(1), seed=9, ids=IDS[:1]))
    store.save(make_run(sha_of(2), seed=1, ids=IDS[1:]))
    copies = tmp_path / "recorded"
    for path in RECORDED:
        (copies / path.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, copies / path.parent.name / path.name)
    for root in (store.root, copies):
        archive = DirectoryStore(root)
        for fp in archive.fingerprints():
            headers, problems = archive.headers(fp)
            assert problems == []
            loaded = [archive.load(fp, h.sha) for h in headers]
            assert [(h.sha, h.measured_at, h.launches, h.scenarios) for h in headers] == [
                (b.sha, b.created_at, len(b.launches), len(b.scenario_ids()))
                for b in loaded
                if b is not None
            ]
            assert [h.commit for h in headers] == [b.commit for b in loaded if b is not None]


def test_a_header_is_read_without_the_samples(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "baselines")
    path = store.save(make_run(sha_of(1), samples=tuple(range(1, 200_000))))
    assert path is not None
    text = path.read_text(encoding="utf-8")
    cut = text.index('"launches": [') + len('"launches": [') + 10
    path.write_text(text[:cut], encoding="utf-8")  # the launches cut short
    (header,), problems = store.headers(FP)
    assert problems == []
    assert (header.sha, header.launches, header.scenarios) == (sha_of(1), 1, len(IDS))
    with pytest.raises(ResultsError, match="corrupt or truncated"):
        store.load(FP, sha_of(1))  # the whole file is still checked where it is used


def test_a_summary_its_launches_contradict_is_refused(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "baselines")
    path = store.save(make_run(sha_of(1)))
    assert path is not None
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["summary"]["launches"] = 3
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ResultsError, match=r"summary .* does not match its launches"):
        store.load(FP, sha_of(1))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"schema_version": 1, "kind": "perfguard-baseline", "fing', "invalid JSON"),
        ('{"schema_version": 1 "kind"', "expected one of ',}'"),
        ('{"schema_version": 1, "kind": "perfguard-baseline"}', "lacks the key 'fingerprint'"),
        ("[1, 2]", "expected one of '{'"),
    ],
)
def test_a_broken_header_is_a_problem_not_a_crash(tmp_path: Path, text: str, why: str) -> None:
    store = DirectoryStore(tmp_path / "baselines")
    path = store.path_for(FP, sha_of(1))
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    headers, (problem,) = store.headers(FP)
    assert headers == []
    assert "corrupt or truncated" in problem.message and why in problem.message


def test_auto_counts_commits_back_along_the_shortest_path_over_parents(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    base = commit(repo, "base")
    git(repo, "checkout", "-q", "-b", "feature")
    f1, f2 = commit(repo, "f1"), commit(repo, "f2")
    git(repo, "checkout", "-q", "main")
    m = [commit(repo, f"m{i}") for i in range(3)]
    git(repo, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    merge = git(repo, "rev-parse", "HEAD")
    store = MemoryStore()
    save_at(store, f1)  # HEAD -> f2 (its 2nd parent) -> f1
    found, why = select_auto_baseline(store, FP, repo)
    assert found is not None and found.sha == f1
    assert why == f"nearest ancestor with a baseline: {f1[:7]} (2 commits back, via the 2nd parent)"
    save_at(store, m[1])  # along first parents now: nearer in git's listing
    found, why = select_auto_baseline(store, FP, repo)
    assert found is not None and found.sha == m[1] and why.endswith("(2 commits back)")

    # A merge below HEAD: the turn names that merge.
    commit(repo, "after")
    store = MemoryStore()
    save_at(store, f2)
    found, why = select_auto_baseline(store, FP, repo)
    assert found is not None and found.sha == f2
    assert why.endswith(f"(2 commits back, via the 2nd parent of {merge[:7]})")
    assert base not in why


_HOLDER = """
import sys, time
from pathlib import Path
from perfguard.baseline.store import DirectoryStore
root, fp, sha, ready = sys.argv[1:]
with DirectoryStore(root)._locked(fp, sha):
    Path(ready).write_text("held")
    time.sleep(60)
"""


@pytest.mark.parametrize("listening", [True, False], ids=["progress-sink", "stderr"])
def test_a_saver_waiting_for_the_lock_says_who_holds_it_and_for_how_long(
    tmp_path: Path, listening: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    root, ready = tmp_path / "baselines", tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(root), FP, sha_of(1), str(ready)], env=env
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the holder never took the lock"
        store = DirectoryStore(root, lock_timeout_s=2.0, lock_report_s=0.5)
        events: list[progress.ProgressEvent] = []
        with (
            progress.sink(events.append) if listening else contextlib.nullcontext(),
            pytest.raises(StoreError) as raised,
        ):
            store.save(make_run(sha_of(1)))
    finally:
        holder.kill()
        holder.wait()
    who = f"pid {holder.pid} on "
    assert who in raised.value.message and "for over 2 s" in raised.value.message
    if listening:
        lines = [e.line() for e in events]
    else:
        lines = [ln.removeprefix("perfguard: ") for ln in capsys.readouterr().err.splitlines()]
    assert len(lines) >= 3, lines  # at once, then every lock_report_s
    assert all(line.startswith(f"{LOCK_STEP} {sha_of(1)[:12]}: ") for line in lines)
    assert all(f"/2 (held by {who}" in line for line in lines)
    waited = [int(line.split(": ")[1].split("/")[0]) for line in lines]
    assert waited[0] == 0 and waited == sorted(waited) and waited[-1] >= 1
