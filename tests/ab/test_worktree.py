"""The A/B base revision: resolving it and its throwaway worktree, in tmp_path repos."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from perfguard.ab import worktree
from perfguard.ab.owner import OWNER_FILE, Owner, read_owner
from perfguard.ab.worktree import (
    DIRTY_NOTE,
    WORKTREE_PREFIX,
    BaseRef,
    base_worktree,
    resolve_base,
    sweep_stale_worktrees,
)
from perfguard.core.errors import GitError
from tests.helpers.git_repos import run_git
from tests.helpers.paths import ROOT


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make git ignore the developer's config and any enclosing repository."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)


class Repo:
    """main: c1 (tag v1) -> c2 = HEAD; side: c1 -> c3; origin/main at c1."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        run_git(path, "init", "-q", "-b", "main")
        (path / "model.py").write_text("VERSION = 1\n")
        run_git(path, "add", "model.py")
        run_git(path, "commit", "-q", "-m", "c1")
        self.c1 = run_git(path, "rev-parse", "HEAD")
        run_git(path, "tag", "v1")
        run_git(path, "update-ref", "refs/remotes/origin/main", self.c1)
        run_git(path, "checkout", "-q", "-b", "side")
        (path / "side.txt").write_text("side\n")
        run_git(path, "add", "side.txt")
        run_git(path, "commit", "-q", "-m", "c3")
        self.c3 = run_git(path, "rev-parse", "HEAD")
        run_git(path, "checkout", "-q", "main")
        (path / "model.py").write_text("VERSION = 2\n")
        run_git(path, "commit", "-q", "-am", "c2")
        self.c2 = run_git(path, "rev-parse", "HEAD")

    def worktrees(self) -> list[str]:
        listing = run_git(self.path, "worktree", "list", "--porcelain")
        return [line[9:] for line in listing.splitlines() if line.startswith("worktree ")]


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path / "repo")


@pytest.fixture
def tmp_root(tmp_path: Path) -> Path:
    root = tmp_path / "tmp"
    root.mkdir()
    return root


# --------------------------------------------------------------------------- resolve


def test_resolve_branch_tag_and_short_sha(repo: Repo) -> None:
    assert resolve_base(repo.path, "v1") == BaseRef("v1", repo.c1, "v1 (tag)", False)
    by_sha = resolve_base(repo.path, repo.c1[:8])
    assert (by_sha.sha, by_sha.how) == (repo.c1, f"{repo.c1[:8]} (commit)")
    assert resolve_base(repo.path, "main").how == "main (branch)"
    assert resolve_base(repo.path, "main").sha == repo.c2
    assert resolve_base(repo.path, "origin/main").how == "origin/main (remote branch)"
    assert resolve_base(repo.path, "HEAD~1").sha == repo.c1
    assert resolve_base(repo.path, "HEAD") == BaseRef("HEAD", repo.c2, "HEAD (commit)", False)


def test_resolve_from_a_subdirectory(repo: Repo) -> None:
    sub = repo.path / "pkg"
    sub.mkdir()
    assert resolve_base(sub, "v1").sha == repo.c1


def test_missing_ref_names_the_flag_and_the_fix(repo: Repo) -> None:
    with pytest.raises(GitError) as err:
        resolve_base(repo.path, "nope")
    assert f"`--perfguard-ab=nope`: no branch, tag or commit `nope` in {repo.path}" in str(
        err.value
    )
    assert err.value.fix == "name an existing branch, tag or sha (git branch -a)"


def test_option_like_ref_is_rejected(repo: Repo) -> None:
    with pytest.raises(GitError, match="git branch -a"):
        resolve_base(repo.path, "--all")


def test_ref_that_is_not_an_ancestor_is_an_error(repo: Repo) -> None:
    with pytest.raises(GitError) as err:
        resolve_base(repo.path, "side")
    assert "branch `side`" in err.value.problem
    assert "is not an ancestor of HEAD" in err.value.problem
    assert err.value.fix == "use the merge base: --perfguard-ab=$(git merge-base HEAD side)"


def test_merge_base_is_used_when_asked(repo: Repo) -> None:
    base = resolve_base(repo.path, "side", merge_base_with="HEAD")
    assert base == BaseRef("side", repo.c1, "side (merge base with HEAD)", False)


def test_an_ancestor_is_kept_even_with_merge_base_with(repo: Repo) -> None:
    assert resolve_base(repo.path, "v1", merge_base_with="HEAD").how == "v1 (tag)"


def test_unrelated_history_has_no_merge_base(repo: Repo) -> None:
    run_git(repo.path, "checkout", "-q", "--orphan", "island")
    run_git(repo.path, "commit", "-q", "-m", "island")
    run_git(repo.path, "checkout", "-q", "main")
    with pytest.raises(GitError, match="no common ancestor"):
        resolve_base(repo.path, "island", merge_base_with="HEAD")


def test_dirty_tree_is_flagged_not_refused(repo: Repo) -> None:
    (repo.path / "model.py").write_text("VERSION = 3\n")
    base = resolve_base(repo.path, "v1")
    assert base.dirty
    assert base.sha == repo.c1
    assert "uncommitted changes included" in DIRTY_NOTE


def test_not_a_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitError) as err:
        resolve_base(plain, "main")
    assert "is not inside a git repository" in err.value.problem
    assert err.value.fix is not None and "git checkout" in err.value.fix


def test_repository_without_commits(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    run_git(empty, "init", "-q")
    with pytest.raises(GitError) as err:
        resolve_base(empty, "main")
    assert "no commits yet" in err.value.problem
    assert err.value.fix is not None and "commit" in err.value.fix


# --------------------------------------------------------------------------- worktree


def test_worktree_holds_the_base_commit(repo: Repo, tmp_root: Path) -> None:
    with base_worktree(repo.path, repo.c1, parent=tmp_root) as path:
        assert path.name == "base" and path.parent.name.startswith(WORKTREE_PREFIX)
        assert (path / "model.py").read_text() == "VERSION = 1\n"
        assert run_git(path, "rev-parse", "HEAD") == repo.c1
        assert len(repo.worktrees()) == 2
    assert (repo.path / "model.py").read_text() == "VERSION = 2\n"  # the checkout is untouched
    assert not path.parent.exists()
    assert repo.worktrees() == [str(repo.path)]
    assert list(tmp_root.iterdir()) == []


def test_worktree_removed_on_exception(repo: Repo, tmp_root: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="boom"),
        base_worktree(repo.path, repo.c1, parent=tmp_root),
    ):
        raise RuntimeError("boom")
    assert list(tmp_root.iterdir()) == []
    assert repo.worktrees() == [str(repo.path)]


def test_worktree_removed_on_keyboard_interrupt(repo: Repo, tmp_root: Path) -> None:
    with pytest.raises(KeyboardInterrupt), base_worktree(repo.path, repo.c1, parent=tmp_root):
        raise KeyboardInterrupt
    assert list(tmp_root.iterdir()) == []
    assert repo.worktrees() == [str(repo.path)]


def test_worktree_removed_even_when_the_body_deleted_files(repo: Repo, tmp_root: Path) -> None:
    with base_worktree(repo.path, repo.c1, parent=tmp_root) as path:
        (path / "model.py").unlink()
        (path / "build.log").write_text("untracked output\n")
    assert list(tmp_root.iterdir()) == []
    assert repo.worktrees() == [str(repo.path)]


def test_signal_handlers_are_restored(repo: Repo, tmp_root: Path) -> None:
    before = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)]
    with base_worktree(repo.path, repo.c1, parent=tmp_root):
        during = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)]
        assert all(d is not b for d, b in zip(during, before, strict=True))
    assert [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)] == before


def test_worktree_outside_the_main_thread(repo: Repo, tmp_root: Path) -> None:
    """Signal handlers are main-thread only; elsewhere the worktree still works."""
    seen: list[str] = []

    def body() -> None:
        with base_worktree(repo.path, repo.c1, parent=tmp_root) as path:
            seen.append((path / "model.py").read_text())

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=60)
    assert seen == ["VERSION = 1\n"]
    assert list(tmp_root.iterdir()) == []


def test_bad_sha_is_a_git_error_and_leaves_nothing(repo: Repo, tmp_root: Path) -> None:
    with pytest.raises(GitError), base_worktree(repo.path, "0" * 40, parent=tmp_root):
        pass  # pragma: no cover - never entered
    assert list(tmp_root.iterdir()) == []
    assert repo.worktrees() == [str(repo.path)]


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from perfguard.ab.worktree import base_worktree

    repo, sha, parent = sys.argv[1:4]
    with base_worktree(Path(repo), sha, parent=Path(parent)) as path:
        print(path, flush=True)
        time.sleep(120)
    """
)


def test_worktree_removed_on_sigterm(repo: Repo, tmp_root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(repo.path), repo.c1, str(tmp_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line, child.stderr.read() if child.stderr else ""
        path = Path(line)
        assert (path / "model.py").read_text() == "VERSION = 1\n"
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:  # pragma: no cover - only when the test fails
            child.kill()
            child.wait()
    # Removed, then the process died of SIGTERM, as it would have without perfguard.
    assert child.returncode == -signal.SIGTERM, stderr
    assert "perfguard: SIGTERM: killed 0 worker process group(s) and ran 1 clean-up(s)" in stderr
    assert not path.exists()
    assert list(tmp_root.iterdir()) == []
    assert repo.worktrees() == [str(repo.path)]


# --------------------------------------------------------------------------- sweep


def _leave_behind(repo: Repo, tmp_root: Path, name: str) -> Path:
    """A worktree as a killed run would leave it."""
    path = tmp_root / f"{WORKTREE_PREFIX}{name}" / "base"
    run_git(repo.path, "worktree", "add", "-q", "--detach", str(path), repo.c1)
    return path


def test_sweep_removes_worktrees_whose_directory_is_gone(repo: Repo, tmp_root: Path) -> None:
    path = _leave_behind(repo, tmp_root, "gone")
    run_git(repo.path, "worktree", "lock", "--reason", "initializing", str(path))
    _rmtree(path.parent)
    assert sweep_stale_worktrees(repo.path) == [path]
    assert repo.worktrees() == [str(repo.path)]


def test_sweep_removes_old_worktrees_and_keeps_young_ones(repo: Repo, tmp_root: Path) -> None:
    old = _leave_behind(repo, tmp_root, "old")
    young = _leave_behind(repo, tmp_root, "young")
    day_ago = time.time() - 2 * worktree.STALE_AFTER_S
    os.utime(old.parent, (day_ago, day_ago))
    assert sweep_stale_worktrees(repo.path) == [old]
    assert not old.parent.exists()
    assert young.exists()
    assert repo.worktrees() == [str(repo.path), str(young)]


def test_sweep_keeps_a_young_entry_without_its_directory(repo: Repo, tmp_root: Path) -> None:
    """Another run may be between registering the worktree and creating its directory."""
    path = _leave_behind(repo, tmp_root, "starting")
    _rmtree(path)
    assert sweep_stale_worktrees(repo.path) == []
    assert sweep_stale_worktrees(repo.path, older_than_s=-1.0) == [path]
    assert repo.worktrees() == [str(repo.path)]
    assert not path.parent.exists()


def test_sweep_leaves_other_worktrees_alone(repo: Repo, tmp_path: Path) -> None:
    mine = tmp_path / "my-own-worktree"
    run_git(repo.path, "worktree", "add", "-q", "--detach", str(mine), repo.c1)
    _rmtree(mine)
    assert sweep_stale_worktrees(repo.path, older_than_s=0.0) == []
    assert len(repo.worktrees()) == 2  # the user's own entry: git's business, not ours


def test_base_worktree_sweeps_first(repo: Repo, tmp_root: Path) -> None:
    gone = _leave_behind(repo, tmp_root, "killed")
    _rmtree(gone.parent)
    with base_worktree(repo.path, repo.c1, parent=tmp_root):
        assert len(repo.worktrees()) == 2
    assert repo.worktrees() == [str(repo.path)]


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


# --------------------------------------------------------------------------- owners


def _hold_worktree(repo: Repo, tmp_root: Path) -> tuple[subprocess.Popen[str], Path]:
    """A run in another process, inside ``base_worktree`` (it sleeps there)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(repo.path), repo.c1, str(tmp_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line:  # pragma: no cover - only when the test fails
        child.kill()
        pytest.fail(child.communicate()[1])
    return child, Path(line)


def test_a_worktree_whose_run_was_killed_is_swept_at_once(repo: Repo, tmp_root: Path) -> None:
    """kill -9 runs no clean-up: the owner file tells the next run that nobody owns it."""
    child, path = _hold_worktree(repo, tmp_root)
    owner = read_owner(path.parent)
    assert owner is not None and owner.pid == child.pid and owner.alive() is True
    child.kill()
    child.communicate()
    assert owner.alive() is False
    assert repo.worktrees() == [str(repo.path), str(path)]  # left behind, a minute old
    assert sweep_stale_worktrees(repo.path, temp_root=tmp_root) == [path]
    assert repo.worktrees() == [str(repo.path)]
    assert list(tmp_root.iterdir()) == []


def test_a_live_runs_worktree_is_kept_however_old(repo: Repo, tmp_root: Path) -> None:
    child, path = _hold_worktree(repo, tmp_root)
    try:
        days_ago = time.time() - 3 * worktree.STALE_AFTER_S
        os.utime(path.parent, (days_ago, days_ago))
        assert sweep_stale_worktrees(repo.path, temp_root=tmp_root) == []
        assert (path / "model.py").is_file()
        assert repo.worktrees() == [str(repo.path), str(path)]
    finally:
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=60)
    assert repo.worktrees() == [str(repo.path)]


def _owned(folder: Path, **changes: object) -> Path:
    """``folder`` made, with an owner file: this process's, with ``changes``."""
    folder.mkdir()
    (folder / "base").mkdir()
    data = {**Owner.current().to_dict(), **changes}
    (folder / OWNER_FILE).write_text(json.dumps(data))
    return folder


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_orphan_temp_folders_go_only_when_their_owner_is_gone(repo: Repo, tmp_root: Path) -> None:
    """Folders no worktree holds (a run killed before `git worktree add`, or another
    repository's): removed when their owner is provably gone, else kept."""
    dead = _owned(tmp_root / f"{WORKTREE_PREFIX}dead", pid=_dead_pid())
    reused = _owned(tmp_root / f"{WORKTREE_PREFIX}reused", started="another-boot:1")
    live = _owned(tmp_root / f"{WORKTREE_PREFIX}live")
    elsewhere = _owned(tmp_root / f"{WORKTREE_PREFIX}elsewhere", host="another-host", pid=1)
    unowned = tmp_root / f"{WORKTREE_PREFIX}unowned"
    unowned.mkdir()
    not_ours = _owned(tmp_root / "someone-else", pid=_dead_pid())
    removed = sweep_stale_worktrees(repo.path, temp_root=tmp_root)
    assert sorted(removed) == sorted([dead / "base", reused / "base"])
    assert sorted(tmp_root.iterdir()) == sorted([live, elsewhere, unowned, not_ours])


def test_an_owner_on_another_host_falls_back_to_the_age_rule(repo: Repo, tmp_root: Path) -> None:
    young = _leave_behind(repo, tmp_root, "young")
    old = _leave_behind(repo, tmp_root, "old")
    for path in (young, old):
        data = {**Owner.current().to_dict(), "host": "another-host"}
        (path.parent / OWNER_FILE).write_text(json.dumps(data))
    day_ago = time.time() - 2 * worktree.STALE_AFTER_S
    os.utime(old.parent, (day_ago, day_ago))
    assert sweep_stale_worktrees(repo.path, temp_root=tmp_root) == [old]
    assert repo.worktrees() == [str(repo.path), str(young)]


def test_base_worktree_writes_its_owner(repo: Repo, tmp_root: Path) -> None:
    with base_worktree(repo.path, repo.c1, parent=tmp_root) as path:
        assert read_owner(path.parent) == Owner.current()
        assert Owner.current().alive() is True


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 256 KiB tmpfs: a real full disk (root in a container that allows mounts)."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_temporary_disk_is_named_with_its_free_space(repo: Repo, small_disk: Path) -> None:
    (repo.path / "weights.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    run_git(repo.path, "add", "weights.bin")
    run_git(repo.path, "commit", "-q", "-m", "2 MiB of weights")
    head = run_git(repo.path, "rev-parse", "HEAD")
    with pytest.raises(GitError) as info, base_worktree(repo.path, head, parent=small_disk):
        pass
    text = str(info.value)
    # git alone said "fatal: Could not reset index file to revision ..." or the like.
    assert f"A/B cannot check the base {head[:12]} out in {small_disk}: no space left" in text
    assert "MiB free there" in text and "about 2 MiB of tracked files" in text
    assert "TMPDIR" in text
    assert repo.worktrees() == [str(repo.path)]
    assert list(small_disk.iterdir()) == []


def test_an_unwritable_temporary_folder_is_not_called_full(repo: Repo, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(GitError) as info, base_worktree(repo.path, repo.c1, parent=blocker):
        pass
    assert f"cannot create its base checkout's folder in {blocker}" in str(info.value)
    assert "no space" not in str(info.value)
