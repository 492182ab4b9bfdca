"""Where a run's results live on disk, and writing/reading them safely.

``reports/<commit12>/results.json`` holds ``RunResult.to_dict()`` (``<commit12>-ab/``
for a same-run A/B run). Writes are atomic (see ``atomicio``) and checked against the
packaged JSON Schema when ``jsonschema`` is installed. That schema,
``perfguard/schemas/results.schema.json``, is generated from the record declarations
(``perfguard.records.declare``; ``results_schema_text``, kept in step by
tests/core/test_record.py).

Every file is checked again when it is *read*, with no third-party checker: a results
file or a baseline is decoded by its declarations (``RunResult.from_dict``), which check
every value as they read it; so is a ``comparison.json``
(``perfguard.report.comparison``). Such a file may come from a branch every collaborator
can push to, so a value no perfguard writes (a path-like sha, a negative figure, an
unknown status, a string where a list belongs) is refused with its place in the file,
never passed on to a report or a file name. The reading check is tolerant where versions
differ: keys missing (written by an older perfguard of the same schema version) take
their defaults and unknown ones (a newer one) are ignored.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from perfguard.core.atomicio import read_json, write_json_atomic
from perfguard.core.errors import ResultsError
from perfguard.records.declare import TAMPERED_FIX, json_schema
from perfguard.records.results import CommitInfo, RunResult

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
def load_schema(resource: str = SCHEMA_RESOURCE) -> dict[str, Any]:
    """A packaged schema (read once; works from a wheel or a zip too)."""
    text = resources.files("perfguard").joinpath(resource).read_text(encoding="utf-8")
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
    return results_from_dict(data, path)


def results_schema() -> dict[str, Any]:
    """The results JSON Schema, generated from the record declarations
    (``perfguard.records.declare``: ``RunResult`` and every record it holds)."""
    return json_schema(RunResult, title="perfguard results")


def results_schema_text() -> str:
    """:func:`results_schema` as ``perfguard/schemas/results.schema.json`` holds it
    (1-space indent, final newline). Regenerate the file with
    ``python -m perfguard.records.resultsfile > perfguard/schemas/results.schema.json``."""
    return json.dumps(results_schema(), indent=1, ensure_ascii=False) + "\n"


def results_from_dict(data: dict[str, Any], where: Path | str) -> RunResult:
    """A results document read from ``where``, every value checked as it is read (the
    version first, so a newer perfguard's file says "upgrade", not "bad value")."""
    return RunResult.from_dict(data, source=str(where), what="results file", fix=TAMPERED_FIX)


if __name__ == "__main__":  # python -m perfguard.records.resultsfile > .../results.schema.json
    import sys

    sys.stdout.write(results_schema_text())
