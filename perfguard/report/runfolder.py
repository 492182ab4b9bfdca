"""A run folder (``reports/<commit12>``, ``reports/<commit12>-ab``) is written by one run
at a time, and holds no report of a run that is not the last one to start measuring.

The run claims its folder as the session starts: an exclusive lock on
``<folder>/.run.lock``, held until the session ends (the operating system lets go of
it when the process dies, however it dies), and a note of who holds it
(``.run.holder``: process, host, start, command line). A second run on the same commit
and mode at once is refused at its start, naming the run that holds the folder: two
runs writing one folder left ``results.json`` and ``comparison.json`` of one and
``summary.md`` and ``report.html`` of the other.

Just before the run's first cell, the previous run's files are removed (``clear``), so
a run that dies while measuring (``os._exit`` in model code, ``kill -9``, a lost
machine) leaves a folder holding no report at all rather than the previous run's
looking current; the reports index is refreshed so it no longer links it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import re
import shutil
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import filelock

from perfguard.core.atomicio import read_json, write_json_atomic
from perfguard.core.errors import PerfguardError, ResultsError
from perfguard.records.results import CommitInfo
from perfguard.records.resultsfile import RESULTS_FILENAME, results_path
from perfguard.report import SUMMARY_FILENAME
from perfguard.report.comparison import COMPARISON_FILENAME
from perfguard.report.index import REPORT_FILENAME, render_index

#: The folder of a run's Chrome traces of profiled cells, in the run's report folder.
TRACES_DIR = "traces"
#: Added to the trace's name of the base side of a same-run A/B cell.
BASE_TRACE_SUFFIX = "-base"

#: The lock a run holds on its folder while it runs.
LOCK_FILENAME = ".run.lock"
#: Who holds the lock: the process, its host, when it started, its command line.
HOLDER_FILENAME = ".run.holder"
#: The files (and the traces folder) a run writes into its folder; ``clear`` removes
#: them, and whatever else the caller names (a shard's plan), nothing else.
RUN_FILES = (RESULTS_FILENAME, COMPARISON_FILENAME, REPORT_FILENAME, SUMMARY_FILENAME)


def run_dir(report_dir: Path, commit: CommitInfo, mode: str) -> Path:
    """The run's report folder (``<commit12>``, ``<commit12>-ab``): results.json's."""
    return results_path(report_dir, commit, mode).parent


def trace_paths(run_folder: Path, scenario_id: str) -> tuple[Path, Path]:
    """Where a profiled cell's Chrome trace goes, and its A/B base side's:
    ``traces/<readable name>-<hash>.json`` and ``traces/<readable name>-<hash>-base.json``.

    The readable name is the id made file-safe and cut short, so two ids can share it
    (``m-1`` and ``m[1]``; ``x/s.yaml`` and ``x-s.yaml``; a long common start; a case
    that differs only in case); the hash is of the whole id, so two cells never share a
    file. A cell's own name always ends in the hash's hex digits and a base side's in
    ``BASE_TRACE_SUFFIX``, which is not hex, so neither is the other cell's.
    """
    digest = hashlib.sha256(scenario_id.encode("utf-8", "surrogatepass")).hexdigest()
    readable = _UNSAFE.sub("-", scenario_id).strip("-.")[:_NAME_CHARS].rstrip("-.") or "cell"
    name = f"{readable}-{digest[:_HASH_CHARS]}"
    folder = run_folder / TRACES_DIR
    return folder / f"{name}.json", folder / f"{name}{BASE_TRACE_SUFFIX}.json"


# What the report links as a trace (report.profilediff): letters, digits, ``_ . -``, no ``..``.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+|\.\.+")
# The readable part stays well under a file name's 255 bytes with the hash and suffix.
_NAME_CHARS = 160
# 64 bits of the id's sha256: no two cells of a run share them by chance.
_HASH_CHARS = 16


class RunFolderBusy(PerfguardError):
    """Another run is writing the folder this run would write."""


class RunFolder:
    """This run's claim on its report folder (``claim``), until ``release``."""

    def __init__(self, folder: Path, lock: filelock.BaseFileLock, also: Sequence[str]) -> None:
        self.folder = folder
        self._lock = lock
        self._also = tuple(also)
        self.cleared = False

    @classmethod
    def claim(cls, folder: Path, *, also: Sequence[str] = ()) -> RunFolder:
        """Lock ``folder`` for this run (creating it), or raise ``RunFolderBusy`` naming
        the run that holds it. ``also``: more file names of the run (``clear``)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(folder / LOCK_FILENAME), timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise RunFolderBusy(
                f"another run is writing {folder} ({_holder(folder)})",
                expected="one run at a time per report folder: two at once would leave "
                "a report mixing both runs' files",
                fix="wait for that run to end, or give this run a report folder of its "
                "own with --perfguard-report-dir",
            ) from None
        write_json_atomic(
            folder / HOLDER_FILENAME,
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "command": " ".join(sys.argv),
            },
        )
        return cls(folder, lock, also)

    def clear(self) -> None:
        """Remove the previous run's files (once): called before the first cell runs, so
        only a run that ends writes a report here. Refreshes the reports index."""
        if self.cleared:
            return
        self.cleared = True
        removed = False
        for name in (*RUN_FILES, *self._also):
            # Something else in a file's place (a folder) is left for the write at the
            # end to name; measuring goes on.
            with contextlib.suppress(OSError):
                (self.folder / name).unlink()
                removed = True
        traces = self.folder / TRACES_DIR
        if traces.is_dir() and not traces.is_symlink():
            shutil.rmtree(traces, ignore_errors=True)
            removed = True
        if removed:
            # The index linked the report just removed. A failure here is no reason to
            # stop the run: its own end refreshes the index again.
            with contextlib.suppress(OSError, PerfguardError):
                render_index(self.folder.parent)

    def release(self) -> None:
        """Let go of the folder (the session ended)."""
        with contextlib.suppress(OSError):
            (self.folder / HOLDER_FILENAME).unlink()
        self._lock.release()


def _holder(folder: Path) -> str:
    """Who holds ``folder``, in words, from its holder note."""
    try:
        note = read_json(folder / HOLDER_FILENAME)
    except (OSError, ResultsError):
        return "its holder note cannot be read"
    if not isinstance(note, dict):
        return "its holder note cannot be read"
    return (
        f"process {note.get('pid')} on {note.get('host')}, started {note.get('started')}: "
        f"{note.get('command')}"
    )
