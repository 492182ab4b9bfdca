"""The folders perfguard writes into a project that are not meant to be committed, and
whether a project's ``.gitignore`` ignores them (``perfguard init`` says so).

``.perfguard/`` holds the export cache; ``reports/`` each run's reports (both defaults
of their pytest ini keys, named here once). The baseline archive (``baselines/``) is
meant to be committed and is not among them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CACHE_DIR", "GENERATED", "REPORT_DIR", "not_ignored"]

REPORT_DIR = "reports"  # ini perfguard_report_dir's default
CACHE_DIR = ".perfguard/cache"  # ini perfguard_cache_dir's default
#: What each generated folder holds, as its ``.gitignore`` line.
GENERATED: dict[str, str] = {
    ".perfguard/": "the export and quantization cache",
    f"{REPORT_DIR}/": "each run's reports and results.json",
}


def _ignores(patterns: set[str], line: str) -> bool:
    """Whether one of ``patterns`` (a ``.gitignore``'s lines) ignores the top-level
    folder ``line`` (``name/``): its plain forms, anchored or not, with or without the
    slash. Globs other than ``**/`` are not read: such a project is told, and decides."""
    name = line.rstrip("/")
    forms = {name, f"{name}/", f"/{name}", f"/{name}/", f"**/{name}", f"**/{name}/"}
    return bool(forms & patterns)


def not_ignored(gitignore: Path) -> list[str]:
    """The :data:`GENERATED` lines ``gitignore`` does not ignore (all of them when the
    file is missing)."""
    try:
        text = gitignore.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return list(GENERATED)
    patterns = {
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "!"))
    }
    return [line for line in GENERATED if not _ignores(patterns, line)]
