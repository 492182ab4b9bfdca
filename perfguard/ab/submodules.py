"""Git submodules in a perfguard worktree (A/B's base, bisect's), without the network.

``git worktree add`` leaves every submodule of the new checkout empty, so model code
kept in a submodule would not import on the base side (or, worse, would be found in
the working tree). :func:`init_submodules` fills them from the source checkout's own
submodules: each submodule the source has checked out is cloned from there (a local
clone: ``protocol.file.allow=always`` and the submodule's URL pointed at that
checkout for this one command, so nothing is fetched and the repository's config is
not changed), at the commit the worktree's revision records, nested ones likewise.
A submodule the source has not checked out stays empty, with a warning (perfguard
never fetches). :func:`drop_submodules` removes them again before the worktree goes
(``git worktree remove`` refuses a worktree holding submodules).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from perfguard.baseline.git import run_git
from perfguard.core.errors import GitError

__all__ = ["drop_submodules", "init_submodules", "submodule_paths"]

log = logging.getLogger(__name__)

#: Cloning a submodule locally can take as long as a checkout.
SUBMODULE_TIMEOUT_S = 600.0


def submodule_paths(tree: Path) -> list[tuple[str, str]]:
    """(name, path) of each submodule ``tree``'s ``.gitmodules`` declares."""
    if not (tree / ".gitmodules").is_file():
        return []
    proc = run_git(tree, "config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$")
    out: list[tuple[str, str]] = []
    for line in proc.stdout.splitlines():
        key, _, path = line.partition(" ")
        name = key[len("submodule.") : -len(".path")]
        if name and path:
            out.append((name, path))
    return out


def init_submodules(source: Path, tree: Path) -> list[str]:
    """Check ``tree``'s submodules out from ``source``'s (see the module docstring);
    returns the paths left empty, each with why. Never raises for one submodule."""
    empty: list[str] = []
    for name, path in submodule_paths(tree):
        origin = source / path
        if not (origin / ".git").exists():
            why = f"{path}: not checked out in {source} (perfguard never fetches)"
            log.warning("submodule %s left empty in %s", why, tree)
            empty.append(why)
            continue
        args = (
            "-c",
            "protocol.file.allow=always",
            "-c",
            f"submodule.{name}.url={origin.resolve()}",
            "submodule",
            "update",
            "--init",
            "--",
            path,
        )
        try:
            proc = run_git(tree, *args, timeout=SUBMODULE_TIMEOUT_S, new_session=True)
        except GitError as exc:
            failed, why = True, f"{path}: {exc}"
        else:
            failed, why = proc.returncode != 0, f"{path}: {proc.stderr.strip()}"
        if failed:
            log.warning("submodule %s left empty in %s", why, tree)
            empty.append(why)
            continue
        empty.extend(init_submodules(origin, tree / path))
    return empty


def drop_submodules(tree: Path) -> None:
    """Remove ``tree``'s checked-out submodules and their git data; best effort."""
    if not (tree / ".gitmodules").is_file():
        return
    try:
        proc = run_git(tree, "rev-parse", "--absolute-git-dir", new_session=True)
        paths = submodule_paths(tree)
    except GitError:
        return
    for _, path in paths:
        target = tree / path
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
    git_dir = Path(proc.stdout.strip()) if proc.returncode == 0 else None
    # Only a linked worktree's own git data (.git/worktrees/<name>), never a main checkout's.
    if git_dir is not None and git_dir.parent.name == "worktrees":
        shutil.rmtree(git_dir / "modules", ignore_errors=True)
