"""Where a run's results live on disk, and writing/reading them safely.

``reports/<commit12>/results.json`` holds ``RunResult.to_dict()`` (``<commit12>-ab/`` for
a same-run A/B run). Writes are
atomic (see ``atomicio``) and checked against the packaged JSON Schema when
``jsonschema`` is installed, so drift between the data classes and the schema
shows up in perfguard's own tests rather than in a user's CI.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from perfguard.core.atomicio import read_json, write_json_atomic
from perfguard.core.errors import ResultsError
from perfguard.core.results import CommitInfo, RunResult

RESULTS_FILENAME = "results.json"
SCHEMA_RESOURCE = "schemas/results.schema.json"


def run_dir_name(commit: CommitInfo, mode: str = "plain") -> str:
    """A run's folder under the report directory: ``<commit12>``, or ``<commit12>-ab``
    for a same-run A/B run, which so lands beside the plain run of the same commit
    instead of over it (``uncommitted`` without a commit)."""
    return commit.short if mode == "plain" else f"{commit.short}-{mode}"


def results_path(report_dir: Path, commit: CommitInfo, mode: str = "plain") -> Path:
    """``report_dir / <run_dir_name> / results.json``."""
    return Path(report_dir) / run_dir_name(commit, mode) / RESULTS_FILENAME


@functools.cache
def load_schema() -> dict[str, Any]:
    """The packaged results schema (read once; works from a wheel or a zip too)."""
    text = resources.files("perfguard").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate(data: dict[str, Any]) -> None:
    """Check ``data`` against the results schema; ResultsError on the best-matching error.

    ``jsonschema`` is a test extra, not a runtime dependency, so without it this
    silently does nothing: a user's run must never fail for a missing checker.
    """
    try:
        import jsonschema
    except ImportError:
        return
    validator = jsonschema.Draft202012Validator(load_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return
    raise ResultsError(
        f"results do not match the schema at {error.json_path}: {error.message}",
        expected=f"data valid against perfguard/{SCHEMA_RESOURCE}",
        fix="this is a perfguard bug (the result data classes and the schema drifted); report it",
    )


def write_results(run: RunResult, report_dir: Path) -> Path:
    """Write ``run`` to its ``results.json`` under ``report_dir`` atomically; return the path."""
    data = run.to_dict()
    validate(data)
    path = results_path(report_dir, run.commit, run.mode)
    write_json_atomic(path, data)
    return path


def read_results(path: Path) -> RunResult:
    """Read a ``results.json``; ResultsError naming the file if it is missing or invalid."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise ResultsError(
            f"{path}: holds a JSON {type(data).__name__}, not an object",
            expected="a results file written by perfguard",
            fix="re-create it with `pytest --perfguard`",
        )
    return RunResult.from_dict(data, source=str(path))
