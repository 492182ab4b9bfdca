"""Every git question perfguard asks, answered by the ``git`` program itself.

We shell out rather than read ``.git`` by hand because worktrees, packed refs,
shallow clones, SHA-256 repositories and ``safe.directory`` all behave exactly
as the user's own git says they do. Each call runs with ``cwd=`` (never a global
``chdir``), a fixed locale so messages can be recognised, no terminal prompt
(a CI job must fail, not hang, on a credential request) and a timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from perfguard.core.errors import GitError
from perfguard.records.results import CommitInfo

# A full commit id, lower case: 40 hex digits (SHA-1) or 64 (SHA-256 repositories).
FULL_SHA_RE = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")

#: Seconds one git command may take; local queries take milliseconds, so this
#: only ever trips on a hung filesystem or a misconfigured hook.
GIT_TIMEOUT_S = 30.0

SHALLOW_FIX = (
    "fetch full history (actions/checkout with `fetch-depth: 0`, or `git fetch --unshallow`)"
)

# Variables that point git at a repository other than the one ``cwd`` is in.
# They are set inside git hooks (``GIT_DIR``, ``GIT_INDEX_FILE``), and would make
# ``cwd=`` meaningless, so they are dropped: the directory asked about decides.
_REPO_LOCATING_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_LOCATING_VARS}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"  # stable, English messages that git_error() can recognise
    env["LANGUAGE"] = "C"
    # `git status` otherwise refreshes the index and takes index.lock, which can
    # collide with the user's own git command running at the same time.
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


def run_git(
    cwd: Path, *args: str, timeout: float = GIT_TIMEOUT_S, new_session: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``git *args`` in ``cwd``; raise GitError only when git could not run at all.

    ``new_session``: git runs in a session of its own, so a Ctrl-C at the terminal
    interrupts perfguard (which then stops git itself), never a cleanup command
    half way (the A/B worktree's commands).
    """
    if not Path(cwd).is_dir():
        raise GitError(
            f"directory {cwd} does not exist",
            expected="an existing directory inside a git checkout",
            fix="run perfguard from the project checkout",
        )
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=_git_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",  # branch names are bytes to git; never crash on them
            check=False,
            timeout=timeout,
            start_new_session=new_session,
        )
    except FileNotFoundError as exc:
        raise GitError(
            "git is not installed (no `git` on PATH)",
            expected="the git command-line tool",
            fix="install git, or put it on PATH, so perfguard can tell which commit it measured",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise GitError(
            f"`git {' '.join(args)}` did not finish within {timeout:.0f} s in {cwd}",
            fix="check for a hung network filesystem or a slow git hook",
        ) from exc
    except OSError as exc:
        raise GitError(f"could not run git in {cwd}: {exc}") from exc


def git_error(cwd: Path, args: tuple[str, ...], proc: subprocess.CompletedProcess[str]) -> GitError:
    """Turn a failed git command into a GitError that says how to fix it."""
    stderr = proc.stderr.strip()
    if "not a git repository" in stderr:
        return GitError(
            f"{cwd} is not inside a git repository",
            expected="a directory inside a git checkout",
            fix="run perfguard from the project checkout (or `git init` and commit)",
        )
    if "dubious ownership" in stderr:
        # Common in CI containers where the checkout belongs to another user.
        return GitError(
            f"git refuses to read the repository at {cwd} because another user owns it",
            expected="a repository owned by the current user or listed as safe",
            fix=f"run `git config --global --add safe.directory {cwd}`",
        )
    detail = stderr.splitlines()[-1] if stderr else f"exit status {proc.returncode}"
    return GitError(f"`git {' '.join(args)}` failed in {cwd}: {detail}")


def _ok(cwd: Path, *args: str) -> str:
    """Run git and return its stripped stdout, or raise an explained GitError."""
    proc = run_git(cwd, *args)
    if proc.returncode != 0:
        raise git_error(cwd, args, proc)
    return proc.stdout.strip()


def repo_root(cwd: Path) -> Path | None:
    """Top directory of the work tree containing ``cwd``.

    ``None`` outside a git checkout and when git is not installed (perfguard then
    runs without git); any other git failure raises GitError.
    """
    try:
        proc = run_git(cwd, "rev-parse", "--show-toplevel")
    except GitError:
        if not Path(cwd).is_dir():
            raise
        return None  # git is not installed
    if proc.returncode != 0:
        if "not a git repository" in proc.stderr:
            return None
        raise git_error(cwd, ("rev-parse", "--show-toplevel"), proc)
    out = proc.stdout.strip()
    return Path(out) if out else None  # empty inside a bare repository


def is_shallow(cwd: Path) -> bool:
    """Whether the clone is shallow (history cut off, as `actions/checkout` does by default)."""
    out = _ok(cwd, "rev-parse", "--is-shallow-repository")
    if out in ("true", "false"):
        return out == "true"
    # git < 2.15 echoes the unknown option back; the marker file tells instead.
    shallow_file = _ok(cwd, "rev-parse", "--git-path", "shallow")
    return (Path(cwd) / shallow_file).is_file()


def has_commits(cwd: Path) -> bool:
    return run_git(cwd, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").returncode == 0


def resolve(cwd: Path, ref: str) -> str:
    """Full sha of the commit ``ref`` names (branch, tag, sha, ``HEAD~2``, ...)."""
    if not ref or ref.startswith("-"):
        # A leading dash would be read as an option by git.
        raise GitError(
            f"{ref!r} is not a valid git ref",
            expected="a branch, tag or commit sha",
            fix="pass a ref such as `main`, `origin/main` or a commit sha",
        )
    proc = run_git(cwd, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if proc.returncode == 0:
        return proc.stdout.strip()
    if proc.stderr.strip():  # --quiet silences only "unknown ref"; this is worse
        raise git_error(cwd, ("rev-parse", "--verify", ref), proc)
    if not has_commits(cwd):
        raise GitError(
            f"cannot resolve {ref!r}: the repository at {cwd} has no commits yet",
            expected="at least one commit",
            fix="commit your work first",
        )
    if is_shallow(cwd):
        fix = f"{SHALLOW_FIX}; a shallow clone may lack {ref!r}"
    else:
        fix = f"check the spelling, or fetch it (e.g. `git fetch origin {ref}`)"
    raise GitError(
        f"git does not know the ref {ref!r} in {cwd}",
        expected="a branch, tag or commit present in this clone",
        fix=fix,
    )


def merge_base(cwd: Path, a: str, b: str) -> str | None:
    """Best common ancestor of ``a`` and ``b``; ``None`` when their histories never meet.

    In a shallow clone ``None`` may only mean the meeting point was cut off:
    callers should check ``is_shallow`` before saying so.
    """
    sha_a, sha_b = resolve(cwd, a), resolve(cwd, b)
    proc = run_git(cwd, "merge-base", sha_a, sha_b)
    if proc.returncode == 0:
        return proc.stdout.strip() or None
    if proc.returncode == 1 and not proc.stderr.strip():
        return None  # git's way of saying "no common ancestor"
    raise git_error(cwd, ("merge-base", a, b), proc)


def ancestors(cwd: Path, rev: str = "HEAD", limit: int = 200) -> list[str]:
    """Up to ``limit`` commits reachable from ``rev``, nearest first, ``rev`` itself first.

    The first-parent chain comes first (on a main branch those are the commits
    CI measured), then the commits that merges brought in, in topological order.
    A shallow clone returns only what it has; callers use ``is_shallow`` to
    explain a short list.
    """
    if limit <= 0:
        return []
    sha = resolve(cwd, rev)
    first_parent = _ok(cwd, "rev-list", "--first-parent", f"--max-count={limit}", sha).split()
    if len(first_parent) >= limit:
        return first_parent[:limit]
    result = list(first_parent)
    seen = set(first_parent)
    for commit in _ok(cwd, "rev-list", "--topo-order", f"--max-count={limit}", sha).split():
        if len(result) >= limit:
            break
        if commit not in seen:
            seen.add(commit)
            result.append(commit)
    return result


def parent_path(cwd: Path, descendant: str, ancestor: str) -> list[tuple[str, int]] | None:
    """The shortest way from ``descendant`` back to ``ancestor`` over parent links: one
    ``(commit, parent number)`` per step (1: the first parent), preferring first
    parents among paths of one length; ``[]`` when they are the same commit, None when
    ``ancestor`` is not one (or this clone lacks the commits between them)."""
    if descendant == ancestor:
        return []
    # Only the commits on some path between the two: --ancestry-path bounds the walk.
    listing = run_git(cwd, "rev-list", "--parents", "--ancestry-path", f"{ancestor}..{descendant}")
    if listing.returncode != 0:
        return None
    parents = {}
    for line in listing.stdout.split("\n"):
        if line.strip():
            commit, *its = line.split()
            parents[commit] = its
    came_from: dict[str, tuple[str, int]] = {}
    frontier = [descendant]
    while frontier and ancestor not in came_from:
        following = []
        for commit in frontier:
            for number, parent in enumerate(parents.get(commit, ()), start=1):
                if parent not in came_from and parent != descendant:
                    came_from[parent] = (commit, number)
                    following.append(parent)
        frontier = following
    if ancestor not in came_from:
        return None
    steps, here = [], ancestor
    while here != descendant:
        here, number = came_from[here]
        steps.append((here, number))
    return steps[::-1]


def is_dirty(cwd: Path) -> bool:
    """Whether tracked files differ from HEAD (untracked files do not count)."""
    return bool(_ok(cwd, "status", "--porcelain", "--untracked-files=no"))


#: Never a run's input: what Python writes beside the modules it imports.
_BYTECODE = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.py[co]")


def untracked_files(
    cwd: Path, paths: Iterable[Path], *, exclude: Iterable[Path] = ()
) -> tuple[str, ...]:
    """Untracked, not ignored files at or under ``paths`` (folders or files), as paths
    relative to the work tree's top, sorted, leaving out Python's bytecode and the
    ``exclude`` folders (the run's own outputs: reports, baselines, caches). Paths
    outside the work tree (site-packages, another checkout) are not looked at; none
    inside gives ``()`` without running git.

    Such a file is in no commit yet can change what a run measures (an untracked
    ``suites/tiny/__init__.py`` shadows the tracked ``suites/tiny.py``), so a run that
    saw one does not describe its commit.
    """
    top = repo_root(cwd)
    if top is None:
        return ()
    top = top.resolve()

    def spec(path: Path, magic: str) -> str | None:
        try:
            rel = Path(path).resolve().relative_to(top)
        except ValueError:
            return None
        return f":({magic})" + (rel.as_posix() if rel.parts else ".")

    inside = [s for s in (spec(p, "literal") for p in paths) if s]
    if not inside:
        return ()
    inside += [s for s in (spec(p, "exclude,literal") for p in exclude) if s]
    inside += _BYTECODE
    listing = _ok(
        top, "ls-files", "--others", "--exclude-standard", "-z", "--", *dict.fromkeys(inside)
    )
    return tuple(sorted({name for name in listing.split("\0") if name}))


def _ci_branch(environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The branch GitHub Actions built, for a checkout that is a detached HEAD.

    ``actions/checkout`` detaches HEAD on pull requests (at the merge commit) and
    on tags. ``GITHUB_HEAD_REF`` is the PR's source branch (empty on pushes);
    ``GITHUB_REF_NAME`` is the pushed branch, but a tag name or ``123/merge`` in
    other events, so it is used only when the ref is a branch and not a PR.
    """
    if environ.get("GITHUB_ACTIONS") != "true":
        return None, None
    head_ref = environ.get("GITHUB_HEAD_REF", "")
    if head_ref:
        return head_ref, "GITHUB_HEAD_REF"
    ref_name = environ.get("GITHUB_REF_NAME", "")
    if ref_name and environ.get("GITHUB_REF_TYPE", "branch") == "branch":
        return ref_name, "GITHUB_REF_NAME"
    return None, None


def commit_info(cwd: Path) -> CommitInfo:
    """The commit a run is measured at. Never raises: problems go into ``note``."""
    try:
        proc = run_git(cwd, "rev-parse", "--git-dir")
    except GitError as exc:
        note = "git is not installed" if "not installed" in exc.problem else exc.problem
        return CommitInfo(sha=None, branch=None, dirty=False, note=note)
    if proc.returncode != 0:
        err = git_error(cwd, ("rev-parse", "--git-dir"), proc)
        note = "not a git repository" if "not inside a git" in err.problem else err.message
        return CommitInfo(sha=None, branch=None, dirty=False, note=note)

    try:
        branch_proc = run_git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD")
        branch = branch_proc.stdout.strip() if branch_proc.returncode == 0 else None
        head = run_git(cwd, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        if head.returncode != 0:
            return CommitInfo(
                sha=None, branch=branch, dirty=False, note="repository has no commits yet"
            )
        sha = head.stdout.strip()
        notes: list[str] = []
        if branch is None:
            ci_branch, source = _ci_branch(os.environ)
            branch = ci_branch
            notes.append(f"detached HEAD (branch from {source})" if source else "detached HEAD")
        try:
            dirty = is_dirty(cwd)
        except GitError as exc:
            # Unknown counts as dirty so that such a run is never kept as a
            # baseline for a commit it may not represent.
            dirty = True
            notes.append(f"could not tell whether the tree is dirty: {exc.problem}")
        return CommitInfo(sha=sha, branch=branch, dirty=dirty, note="; ".join(notes) or None)
    except GitError as exc:
        return CommitInfo(sha=None, branch=None, dirty=False, note=exc.problem)
