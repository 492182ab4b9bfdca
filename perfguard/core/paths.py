"""Paths as results, reports and ids name them: relative to the pytest rootdir."""

from __future__ import annotations

from pathlib import Path

__all__ = ["display_path", "under_root"]


def under_root(path: Path, rootdir: Path) -> Path | None:
    """``path`` relative to ``rootdir`` (both resolved); None when it lies outside."""
    try:
        return Path(path).resolve().relative_to(Path(rootdir).resolve())
    except ValueError:
        return None


def display_path(path: Path, rootdir: Path) -> str:
    """``path`` relative to ``rootdir`` in POSIX form, or as given when it lies outside:
    how results, ids and reports name a suite file."""
    relative = under_root(path, rootdir)
    return (relative if relative is not None else Path(path)).as_posix()
