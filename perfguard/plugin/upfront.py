"""Checks made before the first cell is measured, so that a run never spends minutes of
measurement only to fail writing its files: the report and baseline directories exist
or can be made and are writable, and with ``--perfguard-save`` HEAD's baseline file, if
present, reads (a save adds a launch to it, and never overwrites a file it cannot read).

Each check returns one line (what was found, what is expected, the fix) or ``None``;
``PerfguardSession.pytest_sessionstart`` raises the first as a ``pytest.UsageError``
(pytest's exit status 4, no traceback).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from perfguard.baseline.store import check_save_target
from perfguard.core.errors import PerfguardError
from perfguard.plugin.settings import RunSettings

__all__ = ["directory_problem", "first_problem", "head_baseline_problem"]


def directory_problem(path: Path, *, option: str, ini: str, write: bool) -> str | None:
    """Why ``path`` cannot serve as the directory ``option`` (ini ``ini``) names, or None.

    It must be a directory, or not exist yet below a directory; with ``write``, a file
    must be creatable in it. The probe creates the missing directories and a temporary
    file, then removes all it made: a run that is refused leaves nothing behind.
    """
    fix = f"Fix: point {option} (or ini {ini}) at a directory you can write to"
    existing = path
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        found = _kind(existing) if existing == path else f"below {existing}, {_kind(existing)}"
        return (
            f"perfguard: {option} {path} is {found}, not a directory; expected a directory "
            f"that exists or can be created. {fix}"
        )
    if not write:
        return None
    made: list[Path] = []
    try:
        current = existing
        for part in path.relative_to(existing).parts:
            current = current / part
            current.mkdir()
            made.append(current)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".perfguard-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        failed = f" ({exc.filename})" if exc.filename else ""
        return (
            f"perfguard: {option} {path} cannot be written: {reason}{failed}; "
            f"expected a writable directory (or one that can be created). {fix}"
        )
    finally:
        for directory in reversed(made):
            with contextlib.suppress(OSError):
                directory.rmdir()
    return None


def head_baseline_problem(root: Path, fingerprint: str, sha: str) -> str | None:
    """Why ``--perfguard-save`` cannot add to HEAD's baseline file, or None.

    A save reads the file first and refuses to overwrite one it cannot read, or to write
    through a link in the archive; checked here (``check_save_target``, the store's own
    rules), the refusal comes before the measurement.
    """
    try:
        check_save_target(root, fingerprint, sha)
    except PerfguardError as exc:
        return f"perfguard: --perfguard-save cannot add to HEAD's baseline: {exc}"
    return None


def _kind(path: Path) -> str:
    """What ``path`` is, in words (for a message that says why it is not a directory)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return "unreadable"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symbolic link to something that is not a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a directory"


def first_problem(
    settings: RunSettings, fingerprint: Callable[[], str], sha: str | None
) -> str | None:
    """The first reason this run could not write its files, or None (every check above).

    ``fingerprint`` is called only when HEAD's baseline is to be read (with a save).
    """
    judging = settings.judging
    problem = directory_problem(
        settings.report_dir, option="--perfguard-report-dir", ini="perfguard_report_dir", write=True
    ) or directory_problem(
        judging.baseline_dir,
        option="--perfguard-baseline-dir",
        ini="perfguard_baseline_dir",
        write=judging.save,
    )
    if problem is None and judging.save and sha:
        problem = head_baseline_problem(judging.baseline_dir, fingerprint(), sha)
    return problem
