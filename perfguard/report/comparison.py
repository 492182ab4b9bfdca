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

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from perfguard.core.atomicio import read_json, write_json_atomic
from perfguard.core.errors import ResultsError, check_schema_version
from perfguard.judge.verdict import PAIR_SCHEMA, ScenarioVerdict
from perfguard.records.declare import Codec, Record, decode, encode, json_schema, spec

COMPARISON_FILENAME = "comparison.json"
SCHEMA_VERSION = 1
#: The file's JSON Schema, generated from the declarations below (``comparison_schema_text``).
SCHEMA_RESOURCE = "schemas/comparison.schema.json"
_FIX = "delete it to render without verdicts, or re-run `pytest --perfguard`"

_SHA_OR_NULL = {"type": ["string", "null"], "pattern": "^([0-9a-f]{40}|[0-9a-f]{64})$"}


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"a JSON object, not {type(value).__name__}")
    return dict(value)


# Hand-written: the baseline choice is written by perfguard.baseline
# (BaselineChoice.to_dict()) and read here as a plain mapping; its schema is checked on read.
_BASELINE_CODEC = Codec(
    encode=dict,
    decode=lambda value, source, path: _object(value),
    schema={
        "type": "object",
        "description": "How the baseline was chosen (BaselineChoice.to_dict()).",
        "properties": {
            "commit": _SHA_OR_NULL,
            "how": {"type": ["string", "null"]},
            "path": {"type": ["string", "null"]},
            "launches": {"type": "integer", "minimum": 0},
            "env_diff": {"type": "object", "additionalProperties": PAIR_SCHEMA},
        },
    },
    expected="an object",
)


@dataclass(frozen=True)
class StoredComparison(Record):
    """What ``comparison.json`` holds."""

    SCHEMA_NAME: ClassVar[str] = "comparison"
    SCHEMA_DESCRIPTION: ClassVar[str | None] = (
        "The verdicts of one run and how its baseline was chosen, as written to "
        "reports/<commit12>/comparison.json by perfguard.report.comparison.write_comparison "
        "(ScenarioVerdict.to_dict() per scenario). Generated from the record declarations "
        "(perfguard.records.declare), which check every value when the file is read."
    )
    KEY_ORDER: ClassVar[tuple[str, ...] | None] = (
        "schema_version",
        "baseline",
        "gate",
        "verdicts",
        "exit_status",
    )

    verdicts: tuple[ScenarioVerdict, ...] = ()
    # BaselineChoice.to_dict()
    baseline: dict[str, Any] = field(default_factory=dict, metadata=spec(codec=_BASELINE_CODEC))
    gate: bool = True
    exit_status: int | None = field(
        default=None, metadata=spec(omit="none", minimum=0, maximum=255)
    )
    schema_version: int = field(default=SCHEMA_VERSION, metadata=spec(values=(SCHEMA_VERSION,)))


def comparison_schema() -> dict[str, Any]:
    """The JSON Schema of ``comparison.json``, generated from the declarations."""
    return json_schema(StoredComparison, title="perfguard comparison")


def comparison_schema_text() -> str:
    """:func:`comparison_schema` as ``perfguard/schemas/comparison.schema.json`` holds it.
    Regenerate the file with
    ``python -m perfguard.report.comparison > perfguard/schemas/comparison.schema.json``."""
    return json.dumps(comparison_schema(), indent=1, ensure_ascii=False) + "\n"


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
    stored = StoredComparison(
        verdicts=tuple(verdicts),
        baseline=dict(baseline),
        gate=gate,
        exit_status=None if exit_status is None else int(exit_status),
    )
    write_json_atomic(path, encode(stored))


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
    if not isinstance(data, dict):
        raise ResultsError(
            f"{path}: comparison file is malformed (not a comparison object)",
            expected='{"schema_version": 1, "baseline": {...}, "gate": ..., "verdicts": [...]}',
            fix=_FIX,
        )
    return decode(StoredComparison, data, source=str(path), what="comparison file", fix=_FIX)


if __name__ == "__main__":  # python -m perfguard.report.comparison > .../comparison.schema.json
    import sys

    sys.stdout.write(comparison_schema_text())
