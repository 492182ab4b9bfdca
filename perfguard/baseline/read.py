"""Read any file perfguard can compare with: a ``results.json`` or a baseline archive file.

One reader for the plugin (``--perfguard-baseline=PATH``), ``perfguard compare``
and ``perfguard report``, so the three accept the same files and refuse bad ones
with the same message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfguard.baseline.fileformat import BASELINE_KIND, decode_document
from perfguard.baseline.store import Baseline
from perfguard.core.atomicio import read_json, read_stored_bytes
from perfguard.core.errors import ResultsError
from perfguard.records.results import RunResult
from perfguard.records.resultsfile import results_from_dict


def read_baseline_file(path: Path) -> Baseline:
    """The file as a ``Baseline`` (a results file is a baseline of one launch)."""
    data: Any = read_json(path)
    if not isinstance(data, dict):
        raise ResultsError(
            f"{path}: holds a JSON {type(data).__name__}, not an object",
            expected="a results.json or a baseline archive file",
            fix="pass the path of a file written by perfguard",
        )
    if data.get("kind") == BASELINE_KIND:
        # Validated against the names the file states itself, so a copy kept
        # outside the archive reads the same as the original.
        commit = data.get("commit")
        stated = data.get("fingerprint"), commit.get("sha") if isinstance(commit, dict) else None
        fingerprint, sha = (v if isinstance(v, str) else "" for v in stated)
        info, launches, _ = decode_document(read_stored_bytes(path), fingerprint, sha, path)
        return Baseline(fingerprint, info, tuple(launches), path)
    run = results_from_dict(data, path)
    return Baseline(run.environment.fingerprint, run.commit, (run,), path)


def pooled_run(baseline: Baseline) -> RunResult:
    """The baseline as one run: each scenario's launches pooled."""
    newest = baseline.launches[-1]
    pooled = (baseline.pooled(sid) for sid in baseline.scenario_ids())
    return RunResult(
        commit=baseline.commit,
        environment=newest.environment,
        scenarios=tuple(p for p in pooled if p is not None),
        created_at=newest.created_at,
        perfguard_version=newest.perfguard_version,
        mode="ab" if any(launch.mode == "ab" for launch in baseline.launches) else "plain",
    )
