"""The model factories a project's suite files name, and the distributions they import:
what the environment fingerprint reads its model libraries from.

Read from the project's suite files (those the suite patterns match under the rootdir,
and those named on the command line), not from the cells a run collects: the
fingerprint is needed before collection (the header, the check of HEAD's baseline
before a save) and in an xdist controller, which collects nothing; every process of a
run, and ``perfguard env``, so read the same files and agree. A suite file that does
not load is passed over here: its collection reports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from perfguard.core.errors import PerfguardError
from perfguard.machine.libraries import imported_distributions
from perfguard.suite.files import SUITE_PATTERNS, SUITE_SUFFIXES, is_suite_path
from perfguard.suite.loader import load_suite

__all__ = ["project_factories", "project_libraries"]


def _suite_files(rootdir: Path, patterns: Sequence[str], named: Iterable[Path]) -> list[Path]:
    found: set[Path] = set()
    for pattern in patterns:
        try:
            matches = list(rootdir.glob(pattern))
        except (ValueError, NotImplementedError, OSError):  # an absolute or odd pattern
            continue
        found.update(
            p.resolve()
            for p in matches
            if p.is_file() and is_suite_path(p.relative_to(rootdir).as_posix(), patterns)
        )
    found.update(p.resolve() for p in named if p.suffix in SUITE_SUFFIXES and p.is_file())
    return sorted(found)


def project_factories(
    rootdir: Path, patterns: Sequence[str] = SUITE_PATTERNS, named: Iterable[Path] = ()
) -> tuple[tuple[str, Path], ...]:
    """``(factory module, suite folder)`` of every factory the project's suites name."""
    factories: dict[tuple[str, Path], None] = {}
    for path in _suite_files(rootdir, patterns, named):
        try:
            suite = load_suite(path)
        except (PerfguardError, OSError):
            continue
        for scenario in suite.scenarios:
            model = scenario.model
            if model.factory:
                factories[(model.factory.partition(":")[0], Path(model.base_dir))] = None
    return tuple(factories)


def project_libraries(
    rootdir: Path,
    patterns: Sequence[str] = SUITE_PATTERNS,
    named: Iterable[Path] = (),
    pythonpath: Sequence[Path] = (),
) -> tuple[str, ...]:
    """The distributions the project's factories import (``pythonpath``: further folders
    the project's own modules are imported from, as pytest's ``pythonpath``)."""
    factories = project_factories(rootdir, patterns, named)
    return imported_distributions(factories, roots=(rootdir, *pythonpath))
