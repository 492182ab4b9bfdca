"""``comparison.json``: the verdicts of a run and how its baseline was chosen.

Written beside ``results.json`` by ``pytest --perfguard``; read by ``perfguard report``
and the report index. This module is the file's one writer and one reader::

    {"schema_version": 1, "baseline": {...}, "gate": true, "verdicts": [...],
     "exit_status": 1}

``exit_status`` (pytest's; an optional key, so no schema bump: older
readers ignore it, and a file without it reads as None) lets the report index say
how each past run ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfguard.core.atomicio import read_json, write_json_atomic
from perfguard.core.errors import ResultsError, check_schema_version
from perfguard.core.resultsio import check_stored, load_schema
from perfguard.judge.verdict import ScenarioVerdict

COMPARISON_FILENAME = "comparison.json"
SCHEMA_VERSION = 1
#: The file's JSON Schema, checked on every read (values of the wrong type, sign or word).
SCHEMA_RESOURCE = "schemas/comparison.schema.json"
_FIX = "delete it to render without verdicts, or re-run `pytest --perfguard`"


@dataclass(frozen=True)
class StoredComparison:
    """What ``comparison.json`` holds."""

    verdicts: tuple[ScenarioVerdict, ...] = ()
    baseline: dict[str, Any] = field(default_factory=dict)  # BaselineChoice.to_dict()
    gate: bool = True
    exit_status: int | None = None


def comparison_path(results_path: Path) -> Path:
    """The ``comparison.json`` that belongs to ``results_path`` (in the same directory)."""
    return Path(results_path).with_name(COMPARISON_FILENAME)


def write_comparison(
    path: Path,
    *,
    baseline: Mapping[str, Any],
    gate: bool,
    verdicts: Iterable[ScenarioVerdict],
    exit_status: int | None = None,
) -> None:
    """Write ``path`` atomically (the layout in the module docstring)."""
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "baseline": dict(baseline),
        "gate": gate,
        "verdicts": [v.to_dict() for v in verdicts],
    }
    if exit_status is not None:
        data["exit_status"] = int(exit_status)
    write_json_atomic(path, data)


def read_comparison(path: Path) -> StoredComparison:
    """Parse ``path``; ResultsError (naming the file and the fix) when it is malformed."""
    data = read_json(path)
    if isinstance(data, dict):
        check_schema_version(
            data.get("schema_version"),
            SCHEMA_VERSION,
            f"{path}: comparison",
            older_fix=_FIX,
        )
        check_stored(
            data, where=path, what="comparison file", fix=_FIX, schema=load_schema(SCHEMA_RESOURCE)
        )
    try:
        if not isinstance(data, dict):
            raise ValueError("not a comparison object")
        verdicts = tuple(ScenarioVerdict.from_dict(v) for v in data.get("verdicts", ()))
        info = data.get("baseline") or {}
        if not isinstance(info, dict):
            raise ValueError("'baseline' is not an object")
        status = data.get("exit_status")
        return StoredComparison(
            verdicts=verdicts,
            baseline=info,
            gate=bool(data.get("gate", True)),
            exit_status=None if status is None else int(status),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ResultsError(
            f"{path}: comparison file is malformed ({exc})",
            expected='{"schema_version": 1, "baseline": {...}, "gate": ..., "verdicts": [...]}',
            fix=_FIX,
        ) from exc
