"""Which files are suites: the default patterns and the test, shared by the plugin's
collection (and its ini default) and ``perfguard init``.

Kept apart from the grammar so that the plugin's entry point, which registers the ini
default, imports nothing but this.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

__all__ = ["SUITE_PATTERNS", "SUITE_SUFFIXES", "is_suite_path"]

#: The file suffixes a suite may have (YAML).
SUITE_SUFFIXES: tuple[str, ...] = (".yaml", ".yml")

# Which files are suites when none is named on the command line (the default of the
# `perfguard_suite_patterns` ini key), as globs relative to the rootdir.
SUITE_PATTERNS: tuple[str, ...] = tuple(
    f"{folder}/*{suffix}" for folder in ("suites", "*/suites") for suffix in SUITE_SUFFIXES
)


def is_suite_path(relative: str, patterns: Sequence[str] = SUITE_PATTERNS) -> bool:
    """Whether ``relative`` (a path relative to the rootdir, with ``/``) is a suite file."""
    return any(fnmatch.fnmatch(relative, p) for p in patterns)
