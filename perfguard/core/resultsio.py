"""Where a run's results live on disk, and writing/reading them safely.

``reports/<commit12>/results.json`` holds ``RunResult.to_dict()`` (``<commit12>-ab/`` for
a same-run A/B run). Writes are
atomic (see ``atomicio``) and checked against the packaged JSON Schema when
``jsonschema`` is installed, so drift between the data classes and the schema
shows up in perfguard's own tests rather than in a user's CI.

Every file is checked again when it is *read* (``check_stored``), with no third-party
checker: a results file, a baseline or a ``comparison.json`` may come from a branch
every collaborator can push to, so a value no perfguard writes (a path-like sha, a
negative or non-finite figure, an unknown status, a string where a list belongs) is
refused with its place in the file, never passed on to a report or a file name. The
reading check is tolerant where versions differ: keys missing (written by an older
perfguard of the same schema version) or unknown (a newer one) are left to the
readers, which default or ignore them.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from perfguard.core.atomicio import read_json, write_json_atomic
from perfguard.core.errors import ResultsError
from perfguard.core.record import TAMPERED_FIX, json_schema
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
def load_schema(resource: str = SCHEMA_RESOURCE) -> dict[str, Any]:
    """A packaged schema (read once; works from a wheel or a zip too)."""
    text = resources.files("perfguard").joinpath(resource).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


_JSON_TYPES: Mapping[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


# An array of these (raw latency samples) is checked in one pass.
_COUNT: Mapping[str, Any] = {"type": "integer", "minimum": 0}


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("number", "integer"):
        return False
    return isinstance(value, _JSON_TYPES[name])


def _describe(value: Any) -> str:
    if isinstance(value, (dict, list, tuple)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else ""
    return (text[:60] + "...") if len(text) > 60 else text


def _stored_problem(
    value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str
) -> tuple[str, str, Any] | None:
    """``(place, what was expected, the value)`` of the first value in ``value`` that ``schema``
    refuses, else None. The subset of JSON Schema perfguard's own schemas use; tolerant
    of missing and unknown keys (see the module docstring)."""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target: Any = root
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        found = _stored_problem(value, target, root, where)
        if found is not None:
            return found
    for key in ("oneOf", "anyOf"):
        if key in schema:
            options = [_stored_problem(value, s, root, where) for s in schema[key]]
            if all(o is not None for o in options):
                # Name the deepest option's complaint: it is the one that got furthest.
                return max((o for o in options if o is not None), key=lambda o: len(o[0]))
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is_type(value, n) for n in names):
            return where, " or ".join(names), value
    if "const" in schema and value != schema["const"]:
        return where, json.dumps(schema["const"]), value
    if "enum" in schema and not any(
        value == option and type(value) is type(option) for option in schema["enum"]
    ):
        return where, "one of " + ", ".join(json.dumps(o) for o in schema["enum"]), value
    if isinstance(value, str):
        # x-read-pattern: what a reader accepts where it is looser than what perfguard
        # writes (checked by ``validate``), e.g. a fingerprint from an older writer.
        pattern = schema.get("x-read-pattern", schema.get("pattern"))
        if isinstance(pattern, str) and not re.search(pattern, value):
            return where, f"a string matching {pattern}", value
        if len(value) < schema.get("minLength", 0):
            return where, f"a string of at least {schema['minLength']} characters", value
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return where, f"a string of at most {schema['maxLength']} characters", value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return where, f"a number >= {schema['minimum']}", value
        if "maximum" in schema and value > schema["maximum"]:
            return where, f"a number <= {schema['maximum']}", value
    elif isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        names = schema.get("propertyNames", {}).get("pattern")
        for key, item in value.items():
            if names is not None and not re.search(names, key):
                return f"{where}.{key}", f"keys matching {names}", key
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                found = _stored_problem(item, sub, root, f"{where}.{key}")
                if found is not None:
                    return found
    elif isinstance(value, (list, tuple)) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        if items == _COUNT and all(type(v) is int and v >= 0 for v in value):
            return None  # raw samples: up to millions of them, checked in one pass
        for index, item in enumerate(value):
            found = _stored_problem(item, schema["items"], root, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def check_stored(
    data: Any,
    *,
    where: Path | str,
    what: str,
    fix: str,
    schema: Mapping[str, Any] | None = None,
    pointer: str = "",
) -> None:
    """Refuse ``data`` read from ``where`` unless valid against ``schema`` (the results
    schema by default; ``pointer``: a ``$defs`` entry to check against instead, e.g.
    ``"scenario"``). ResultsError naming the file, the place, the value found and what
    was expected."""
    root = load_schema() if schema is None else schema
    sub: Mapping[str, Any] = root["$defs"][pointer] if pointer else root
    found = _stored_problem(data, sub, root, "$")
    if found is None:
        return
    place, expected, value = found
    raise ResultsError(
        f"{where}: {what} holds {_describe(value)} at {place}",
        expected=expected,
        fix=fix,
    )


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
    (``perfguard.core.record``: ``RunResult`` and every record it holds)."""
    return json_schema(RunResult, title="perfguard results")


def results_schema_text() -> str:
    """:func:`results_schema` as ``perfguard/schemas/results.schema.json`` holds it
    (1-space indent, final newline). Regenerate the file with
    ``python -m perfguard.core.resultsio > perfguard/schemas/results.schema.json``."""
    return json.dumps(results_schema(), indent=1, ensure_ascii=False) + "\n"


def results_from_dict(data: dict[str, Any], where: Path | str) -> RunResult:
    """A results document read from ``where``, checked (``check_stored``) then parsed."""
    # The version first, so a newer perfguard's file says "upgrade", not "bad value".
    RunResult.check_version(data, source=str(where))
    check_stored(data, where=where, what="results file", fix=TAMPERED_FIX)
    return RunResult.from_dict(data, source=str(where))


if __name__ == "__main__":  # python -m perfguard.core.resultsio > .../results.schema.json
    import sys

    sys.stdout.write(results_schema_text())
