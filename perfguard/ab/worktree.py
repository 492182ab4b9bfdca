"""The base revision for same-run A/B: which commit it is, and a checkout of it.

``resolve_base`` turns ``--perfguard-ab=REF`` into a commit. The base must be
an ancestor of HEAD (what this change was built on), or A/B would also measure
every unrelated commit between the two; for a branch such as ``origin/main``
the caller passes ``merge_base_with="HEAD"`` and gets the merge base instead.
The candidate side is the working tree as it is: a dirty tree is no error, it
only sets ``BaseRef.dirty`` so the caller can say so (``DIRTY_NOTE``).

``base_worktree`` checks the base out with ``git worktree add --detach`` into
a fresh temporary directory (``WORKTREE_PREFIX``), so the user's checkout is
never touched, and removes it on every way out: normal exit, an exception,
Ctrl-C, and SIGTERM (what CI sends on cancel): while the worktree exists,
SIGTERM kills the workers' process groups, removes it and then ends the process
as SIGTERM would have (``perfguard.core.signals``, shared with the workers).
Only the main thread can install signal handlers; elsewhere SIGTERM keeps its
default and a killed run leaves a worktree behind.
A worktree left by a run that was killed outright (SIGKILL, power loss) is
swept by the next run: each temporary directory holds an owner file (pid,
start time, host: :mod:`perfguard.ab.owner`), and ``sweep_stale_worktrees``
removes those of perfguard whose owner is gone, whose temporary directory is
gone, or, where the owner cannot be judged (another host, no owner file), that
are older than a day; never a live run's.

Submodules are checked out in the base worktree from the user's checkout, without
the network (:mod:`perfguard.ab.submodules`); Git LFS files are, through the user's
own git config.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from perfguard.ab.owner import read_owner, write_owner
from perfguard.ab.submodules import drop_submodules, init_submodules
from perfguard.baseline.git import (
    SHALLOW_FIX,
    git_error,
    has_commits,
    is_dirty,
    is_shallow,
    merge_base,
    resolve,
    run_git,
)
from perfguard.core.errors import GitError
from perfguard.core.signals import deferred_signals, on_terminate

__all__ = [
    "DIRTY_NOTE",
    "STALE_AFTER_S",
    "WORKTREE_PREFIX",
    "BaseRef",
    "base_worktree",
    "is_ancestor",
    "resolve_base",
    "sweep_stale_worktrees",
]

log = logging.getLogger(__name__)

WORKTREE_PREFIX = "perfguard-ab-base-"
STALE_AFTER_S = 24 * 3600.0
#: Checking out a large repository can take far longer than a git query.
CHECKOUT_TIMEOUT_S = 600.0
DIRTY_NOTE = "A/B compares the working tree as it is (uncommitted changes included)"
REF_FIX = "name an existing branch, tag or sha (git branch -a)"


@dataclass(frozen=True)
class BaseRef:
    """The base side of an A/B run: ``ref`` as given, the commit ``sha`` measured,
    ``how`` it was chosen (e.g. "origin/main (merge base with HEAD)") and whether
    the working tree (the candidate side) has uncommitted changes."""

    ref: str
    sha: str
    how: str
    dirty: bool


# --------------------------------------------------------------------------- resolve


def _kind(root: Path, ref: str) -> str:
    if ref == "HEAD" or ref.startswith(("HEAD~", "HEAD^", "HEAD@")):
        return "commit"  # --symbolic-full-name would name the checked-out branch
    full = run_git(root, "rev-parse", "--symbolic-full-name", ref).stdout.strip()
    for prefix, kind in (("refs/heads/", "branch"), ("refs/tags/", "tag")):
        if full.startswith(prefix):
            return kind
    return "remote branch" if full.startswith("refs/remotes/") else "commit"


def is_ancestor(root: Path, ancestor: str, descendant: str) -> bool:
    """Whether ``ancestor`` is an ancestor of (or is) ``descendant`` in ``root``; GitError
    when git cannot tell (an unknown commit, a broken repository)."""
    args = ("merge-base", "--is-ancestor", ancestor, descendant)
    proc = run_git(root, *args)
    if proc.returncode in (0, 1) and not proc.stderr.strip():
        return proc.returncode == 0
    raise git_error(root, args, proc)


def _shallow_hint(root: Path, fix: str) -> str:
    return f"{fix}; {SHALLOW_FIX}" if is_shallow(root) else fix


def resolve_base(repo: Path, ref: str, *, merge_base_with: str | None = None) -> BaseRef:
    """The commit ``--perfguard-ab=REF`` names, checked to be an ancestor of HEAD.

    With ``merge_base_with`` (normally "HEAD"), a REF that is not an ancestor of
    HEAD is replaced by its merge base with that revision. Raises GitError, with
    the fix, outside a git repository, without commits, for an unknown REF or
    one that HEAD does not descend from.
    """
    flag = f"`--perfguard-ab={ref}`"
    top = run_git(repo, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        err = git_error(repo, ("rev-parse", "--show-toplevel"), top)
        if "not inside a git" in err.problem:
            raise GitError(
                f"{flag}: {repo} is not inside a git repository",
                expected="a git checkout whose history holds the base revision",
                fix="run pytest from the project's git checkout, or drop --perfguard-ab",
            )
        raise err
    root = Path(top.stdout.strip())
    if not has_commits(root):
        raise GitError(
            f"{flag}: the repository at {root} has no commits yet",
            expected="a committed base revision to measure against",
            fix="commit first: A/B measures a committed base against the working tree",
        )
    if not ref or ref.startswith("-"):
        raise GitError(f"{flag}: {ref!r} is not a git ref", fix=REF_FIX)
    found = run_git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if found.returncode != 0:
        if found.stderr.strip():
            raise git_error(root, ("rev-parse", "--verify", ref), found)
        raise GitError(
            f"{flag}: no branch, tag or commit `{ref}` in {root}",
            expected="a branch, tag or commit present in this clone",
            fix=_shallow_hint(root, REF_FIX),
        )
    sha = found.stdout.strip()
    kind = _kind(root, ref)
    head = resolve(root, "HEAD")
    dirty = is_dirty(root)
    if is_ancestor(root, sha, head):
        return BaseRef(ref=ref, sha=sha, how=f"{ref} ({kind})", dirty=dirty)
    if merge_base_with is None:
        raise GitError(
            f"{flag}: {kind} `{ref}` ({sha[:12]}) is not an ancestor of HEAD ({head[:12]})",
            expected="a base revision that HEAD descends from, so that A/B measures "
            "only the changes since then",
            fix=_shallow_hint(
                root, f"use the merge base: --perfguard-ab=$(git merge-base HEAD {ref})"
            ),
        )
    base = merge_base(root, sha, merge_base_with)
    if base is None or not is_ancestor(root, base, head):
        raise GitError(
            f"{flag}: `{ref}` and {merge_base_with} have no common ancestor on HEAD's history",
            expected="a base revision that shares history with HEAD",
            fix=_shallow_hint(root, REF_FIX),
        )
    how = f"{ref} (merge base with {merge_base_with})"
    return BaseRef(ref=ref, sha=base, how=how, dirty=dirty)


# --------------------------------------------------------------------------- worktree


def _is_ours(path: Path) -> bool:
    return path.name == "base" and path.parent.name.startswith(WORKTREE_PREFIX)


def _worktrees(repo: Path) -> list[Path]:
    """Paths of the linked worktrees (the main one, listed first, left out)."""
    proc = run_git(repo, "worktree", "list", "--porcelain", new_session=True)
    if proc.returncode != 0:
        raise git_error(repo, ("worktree", "list"), proc)
    paths = [Path(line[9:]) for line in proc.stdout.splitlines() if line.startswith("worktree ")]
    return paths[1:]


def _remove(repo: Path, path: Path) -> None:
    """Remove our worktree at ``path`` and its temporary parent; best effort, never raises."""
    drop_submodules(path)  # git refuses to remove a worktree holding submodules
    try:
        proc = run_git(
            repo, "worktree", "remove", "--force", "--force", str(path), new_session=True
        )
        if proc.returncode != 0 and path.exists():
            log.warning("git worktree remove %s failed: %s", path, proc.stderr.strip())
    except GitError as exc:
        log.warning("could not remove the base worktree %s: %s", path, exc)
    if path.parent.exists():
        shutil.rmtree(path.parent, ignore_errors=True)
    try:
        run_git(repo, "worktree", "prune", new_session=True)
    except GitError as exc:
        log.warning("git worktree prune failed: %s", exc)


def sweep_stale_worktrees(
    repo: Path, *, older_than_s: float = STALE_AFTER_S, temp_root: Path | None = None
) -> list[Path]:
    """Remove perfguard's worktrees left by killed runs; returns their paths.

    A worktree counts as left over when its temporary directory no longer
    exists (a temp cleaner got there first), when its owner file
    (:mod:`perfguard.ab.owner`) names a process of this host that is gone, or,
    without an owner it can judge (an older perfguard's folder, another host's),
    when the directory is older than ``older_than_s`` (a day). One whose owner
    lives is never removed, however old. A younger one without an owner file may
    belong to a run still going in another process, even one whose ``base``
    directory is missing: git registers a worktree just before it creates the
    directory.

    Then the temporary folders in ``temp_root`` (the system's by default) that no
    worktree of this repository holds and whose owner is gone are removed too (a
    run killed before ``git worktree add`` or after its removal, or one of another
    repository, whose own next run prunes git's entry).
    """
    stale: list[Path] = []
    now = time.time()
    for path in _worktrees(repo):
        if not _is_ours(path):
            continue
        if _left_over(path.parent, now, older_than_s):
            stale.append(path)
    for path in stale:
        _remove(repo, path)
    return stale + _sweep_orphan_folders(temp_root)


def _left_over(folder: Path, now: float, older_than_s: float) -> bool:
    """Whether the temporary ``folder`` of one of our worktrees was left by a dead run."""
    try:
        age = now - folder.stat().st_mtime
    except FileNotFoundError:
        return True
    owner = read_owner(folder)
    alive = owner.alive() if owner is not None else None
    if alive is not None:
        return not alive
    return age > older_than_s


def _sweep_orphan_folders(temp_root: Path | None) -> list[Path]:
    """Remove ``WORKTREE_PREFIX`` folders in ``temp_root`` whose owner is provably gone
    (never one without an owner file: it may be a live run's, still writing it)."""
    root = Path(tempfile.gettempdir() if temp_root is None else temp_root)
    removed: list[Path] = []
    try:
        folders = sorted(root.glob(f"{WORKTREE_PREFIX}*"))
    except OSError:
        return removed
    for folder in folders:
        owner = read_owner(folder)
        if folder.is_dir() and owner is not None and owner.alive() is False:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder / "base")
    return removed


@contextmanager
def base_worktree(repo: Path, sha: str, *, parent: Path | None = None) -> Iterator[Path]:
    """A detached checkout of ``sha`` in a new temporary directory, removed on exit.

    ``parent`` is where the temporary directory goes (the system's by
    default). Stale worktrees of earlier killed runs are swept first. Raises
    GitError when the checkout fails. See the module docstring for cleanup.
    """
    repo = Path(repo).resolve()
    sweep_stale_worktrees(repo, temp_root=parent)
    tmp: Path | None = None

    def remove_on_terminate() -> None:
        if tmp is not None:
            _remove(repo, tmp / "base")

    root = Path(tempfile.gettempdir() if parent is None else Path(parent).resolve())
    with on_terminate(remove_on_terminate):
        try:
            try:
                tmp = Path(tempfile.mkdtemp(prefix=WORKTREE_PREFIX, dir=root))
                write_owner(tmp)  # the next run removes the folder once this process is gone
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise GitError(
                        f"A/B cannot create its base checkout's folder in {root}: {exc}",
                        expected="a writable temporary folder",
                        fix="make it writable, or point TMPDIR at a folder that is",
                    ) from exc
                raise _checkout_error(repo, sha, root, "no space left") from exc
            path = tmp / "base"
            args = ("worktree", "add", "--detach", "--quiet", str(path), sha)
            proc = run_git(repo, *args, timeout=CHECKOUT_TIMEOUT_S, new_session=True)
            if proc.returncode != 0:
                full = _full_disk(repo, sha, root)
                if full is not None:
                    raise full
                raise git_error(repo, args, proc)
            init_submodules(repo, path)
            yield path
        finally:
            if tmp is not None:
                # A second Ctrl-C or SIGTERM waits until the removal is done.
                with deferred_signals():
                    _remove(repo, tmp / "base")
                    tmp = None


# Free space below this (or below the checkout's size) reads as "the disk is full":
# git's own message then is "Could not reset index file" or "unable to write file".
_FULL_BELOW_BYTES = 64 * 1024 * 1024


def _checkout_size(repo: Path, sha: str) -> int | None:
    """The bytes of ``sha``'s tracked files (what a checkout writes), if git says."""
    proc = run_git(repo, "ls-tree", "-r", "-l", "--full-tree", sha)
    if proc.returncode != 0:
        return None
    sizes = (line.split(None, 4)[3] for line in proc.stdout.splitlines() if line.count(" ") >= 3)
    return sum(int(size) for size in sizes if size.isdigit())


def _full_disk(repo: Path, sha: str, root: Path) -> GitError | None:
    """The explained error when the base checkout failed for want of disk space."""
    needed = _checkout_size(repo, sha)
    for folder in (root, repo / ".git"):
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            continue
        if free < max(_FULL_BELOW_BYTES, needed or 0):
            return _checkout_error(repo, sha, folder, "no space left", free=free, needed=needed)
    return None


def _checkout_error(
    repo: Path,
    sha: str,
    folder: Path,
    detail: str,
    *,
    free: int | None = None,
    needed: int | None = None,
) -> GitError:
    """The base checkout could not be written in ``folder``: say where, how full, the fix."""
    if free is None:
        with contextlib.suppress(OSError):
            free = shutil.disk_usage(folder).free
    if needed is None:
        needed = _checkout_size(repo, sha)
    mib = 1024 * 1024
    space = f"; {free / mib:.0f} MiB free there" if free is not None else ""
    size = f" (about {needed / mib:.0f} MiB of tracked files)" if needed is not None else ""
    temp = folder != repo / ".git"
    return GitError(
        f"A/B cannot check the base {sha[:12]} out in {folder}: {detail}{space}",
        expected=f"room for the base's checkout{size} in "
        + ("the temporary folder" if temp else "the repository's .git folder"),
        fix="free space there, or point TMPDIR at a disk with room (e.g. TMPDIR=$PWD/.tmp)"
        if temp
        else "free space on the repository's disk (git records the worktree in .git)",
    )
