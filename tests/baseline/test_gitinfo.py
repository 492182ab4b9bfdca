"""gitinfo against real throwaway git repositories under tmp_path."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from perfguard.baseline import git as gitinfo
from perfguard.baseline.git import (
    ancestors,
    commit_info,
    is_dirty,
    is_shallow,
    merge_base,
    repo_root,
    resolve,
    untracked_files,
)
from perfguard.core.errors import GitError

SHA_RE = re.compile(r"^[0-9a-f]{40}$")


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make git ignore the developer's config, hooks' variables and CI variables."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    # Never walk up from tmp_path into whatever repository might contain it.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for name in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{name}_NAME", "Perf Guard")
        monkeypatch.setenv(f"GIT_{name}_EMAIL", "perfguard@example.com")
    for var in (
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GITHUB_ACTIONS",
        "GITHUB_HEAD_REF",
        "GITHUB_REF_NAME",
        "GITHUB_REF_TYPE",
    ):
        monkeypatch.delenv(var, raising=False)


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=30
    )
    return proc.stdout.strip()


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    return path


def commit(repo: Path, name: str = "file.txt", text: str | None = None) -> str:
    (repo / name).write_text(text if text is not None else f"{name} {os.urandom(4).hex()}\n")
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"change {name}")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = make_repo(tmp_path / "repo")
    commit(path)
    return path


def test_not_a_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    info = commit_info(plain)
    assert (info.sha, info.branch, info.dirty) == (None, None, False)
    assert info.note == "not a git repository"
    assert info.short == "uncommitted"
    assert repo_root(plain) is None
    with pytest.raises(GitError, match="not inside a git repository"):
        is_dirty(plain)
    with pytest.raises(GitError, match="not inside a git repository"):
        is_shallow(plain)


def test_missing_directory(tmp_path: Path) -> None:
    info = commit_info(tmp_path / "gone")
    assert info.sha is None
    assert info.note is not None and "does not exist" in info.note


def test_git_not_installed(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    info = commit_info(repo)
    assert (info.sha, info.dirty, info.note) == (None, False, "git is not installed")
    assert repo_root(repo) is None
    with pytest.raises(GitError, match="git is not installed") as exc_info:
        resolve(repo, "HEAD")
    assert exc_info.value.fix is not None and "install git" in exc_info.value.fix


def test_repository_without_commits(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "empty")
    info = commit_info(path)
    assert info.sha is None
    assert info.dirty is False
    assert info.note == "repository has no commits yet"
    assert info.branch == "main"  # the unborn branch is still known
    with pytest.raises(GitError, match="no commits yet"):
        resolve(path, "HEAD")
    with pytest.raises(GitError, match="no commits yet"):
        ancestors(path)


def test_one_commit(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    info = commit_info(repo)
    assert info.sha == head and SHA_RE.match(head)
    assert info.branch == "main"
    assert info.dirty is False
    assert info.note is None
    assert info.short == head[:12]
    assert repo_root(repo) == repo.resolve()
    assert resolve(repo, "HEAD") == head
    assert resolve(repo, "main") == head
    assert resolve(repo, head[:8]) == head
    assert is_shallow(repo) is False


def test_from_a_subdirectory(repo: Path) -> None:
    sub = repo / "a" / "b"
    sub.mkdir(parents=True)
    assert repo_root(sub) == repo.resolve()
    assert commit_info(sub).sha == git(repo, "rev-parse", "HEAD")


def test_dirty_tracks_tracked_files_only(repo: Path) -> None:
    (repo / "untracked.txt").write_text("new\n")
    assert is_dirty(repo) is False
    assert commit_info(repo).dirty is False
    (repo / "file.txt").write_text("changed\n")
    assert is_dirty(repo) is True
    assert commit_info(repo).dirty is True
    git(repo, "add", "file.txt")  # staged changes count too
    assert is_dirty(repo) is True


def test_untracked_files_lists_only_what_a_commit_lacks_where_asked(repo: Path) -> None:
    suites = repo / "suites"
    (suites / "tiny").mkdir(parents=True)
    (suites / "tiny.py").write_text("x = 1\n")
    git(repo, "add", "suites/tiny.py")
    git(repo, "commit", "-qm", "tiny")
    (suites / "tiny" / "__init__.py").write_text("x = 2\n")  # shadows tiny.py
    (suites / "__pycache__").mkdir()
    (suites / "__pycache__" / "tiny.cpython-311.pyc").write_bytes(b"\0")
    (suites / "scratch.log").write_text("ignored\n")
    (repo / ".gitignore").write_text("*.log\n")
    (suites / "reports").mkdir()
    (suites / "reports" / "results.json").write_text("{}")
    (repo / "elsewhere.py").write_text("y = 1\n")

    found = untracked_files(repo, [suites], exclude=[suites / "reports"])
    assert found == ("suites/tiny/__init__.py",)
    # Outside the folders asked about, outside the work tree: not looked at.
    assert untracked_files(repo, [repo / "nowhere"]) == ()
    assert untracked_files(repo, [Path("/usr/lib")]) == ()
    assert "elsewhere.py" in untracked_files(repo, [repo])
    # A file asked about by name, tracked or not.
    assert untracked_files(repo, [suites / "tiny.py", repo / "elsewhere.py"]) == ("elsewhere.py",)


def test_branch_name_with_slash(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature/fast-path")
    assert commit_info(repo).branch == "feature/fast-path"


def test_detached_head(repo: Path) -> None:
    head = commit(repo)
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    info = commit_info(repo)
    assert info.branch is None
    assert info.note == "detached HEAD"
    assert info.sha == git(repo, "rev-parse", "HEAD") != head


def test_detached_head_under_github_actions_pull_request(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(repo, "checkout", "-q", "--detach")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_HEAD_REF", "feature/x")
    monkeypatch.setenv("GITHUB_REF_NAME", "17/merge")
    info = commit_info(repo)
    assert info.branch == "feature/x"
    assert info.note is not None and "detached HEAD" in info.note


def test_detached_head_under_github_actions_push(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(repo, "checkout", "-q", "--detach")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_HEAD_REF", "")  # empty on push events
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    monkeypatch.setenv("GITHUB_REF_TYPE", "branch")
    assert commit_info(repo).branch == "main"
    monkeypatch.setenv("GITHUB_REF_NAME", "v1.0")
    monkeypatch.setenv("GITHUB_REF_TYPE", "tag")  # a tag is not a branch
    assert commit_info(repo).branch is None


def test_github_variables_ignored_outside_actions(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(repo, "checkout", "-q", "--detach")
    monkeypatch.setenv("GITHUB_HEAD_REF", "feature/x")
    assert commit_info(repo).branch is None


def test_hook_variables_do_not_redirect_git(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = make_repo(tmp_path / "other")
    commit(other)
    expected = git(repo, "rev-parse", "HEAD")
    # As inside a git hook: these point at another repository than cwd's.
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    assert commit_info(repo).sha == expected
    assert repo_root(repo) == repo.resolve()


def test_shallow_clone(tmp_path: Path) -> None:
    origin = make_repo(tmp_path / "origin")
    first = commit(origin)
    commit(origin)
    last = commit(origin)
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", origin.resolve().as_uri(), str(clone)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert is_shallow(clone) is True
    assert is_shallow(origin) is False
    assert commit_info(clone).sha == last
    # History is cut off: only the tip is there, and callers ask is_shallow why.
    assert ancestors(clone) == [last]
    with pytest.raises(GitError) as exc_info:
        resolve(clone, first)
    assert first in exc_info.value.problem
    assert exc_info.value.fix is not None and "fetch-depth: 0" in exc_info.value.fix


def test_ancestors_first_parent_chain_first(repo: Path) -> None:
    c1 = git(repo, "rev-parse", "HEAD")
    c2 = commit(repo)
    git(repo, "checkout", "-q", "-b", "feature")
    f1 = commit(repo, "feature.txt")
    f2 = commit(repo, "feature.txt")
    git(repo, "checkout", "-q", "main")
    c3 = commit(repo)
    git(repo, "merge", "-q", "--no-ff", "--no-edit", "feature")
    merge = git(repo, "rev-parse", "HEAD")

    history = ancestors(repo)
    assert history[0] == merge
    assert history == [merge, c3, c2, c1, f2, f1]
    assert ancestors(repo, "feature") == [f2, f1, c2, c1]
    assert ancestors(repo, c2) == [c2, c1]
    assert ancestors(repo, limit=3) == [merge, c3, c2]
    assert ancestors(repo, limit=5) == [merge, c3, c2, c1, f2]
    assert ancestors(repo, limit=0) == []


def test_merge_base(repo: Path) -> None:
    base = commit(repo)
    git(repo, "checkout", "-q", "-b", "feature")
    commit(repo, "feature.txt")
    git(repo, "checkout", "-q", "main")
    commit(repo)
    assert merge_base(repo, "main", "feature") == base
    assert merge_base(repo, "feature", "feature") == resolve(repo, "feature")


def test_merge_base_of_unrelated_histories(repo: Path) -> None:
    git(repo, "checkout", "-q", "--orphan", "island")
    commit(repo, "island.txt")
    assert merge_base(repo, "main", "island") is None


def test_resolve_unknown_ref(repo: Path) -> None:
    with pytest.raises(GitError) as exc_info:
        resolve(repo, "no-such-branch")
    err = exc_info.value
    assert "no-such-branch" in err.problem
    assert err.fix is not None and "git fetch" in err.fix
    with pytest.raises(GitError, match="no-such-branch"):
        merge_base(repo, "main", "no-such-branch")
    with pytest.raises(GitError, match="no-such-branch"):
        ancestors(repo, "no-such-branch")


@pytest.mark.parametrize("ref", ["", "--all", "-n"])
def test_resolve_refuses_option_like_refs(repo: Path, ref: str) -> None:
    with pytest.raises(GitError, match="not a valid git ref"):
        resolve(repo, ref)


def test_resolve_a_tree_is_not_a_commit(repo: Path) -> None:
    with pytest.raises(GitError, match=re.escape("HEAD:file.txt")):
        resolve(repo, "HEAD:file.txt")


def test_dubious_ownership_message() -> None:
    proc = subprocess.CompletedProcess(
        ["git", "status"],
        128,
        "",
        "fatal: detected dubious ownership in repository at '/src'\n",
    )
    err = gitinfo.git_error(Path("/src"), ("status",), proc)
    assert err.fix is not None and "safe.directory /src" in err.fix
