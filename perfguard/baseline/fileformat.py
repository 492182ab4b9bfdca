"""The baseline file format: the whole document's codec.

A baseline keeps every raw sample (pooling launches and re-summarising needs them),
stored compactly by :func:`perfguard.core.codec.encode_samples` (little-endian int64,
zlib-compressed and base64-encoded, in their original order, with ``n`` in clear so
a truncated or hand-edited blob is detected instead of misread).

The rest of a baseline stays plain JSON (summaries as numbers, so a reviewer can
diff P95s); :func:`decode_document` validates all of it, so a file of another
schema version, commit or environment is refused rather than misread.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfguard.baseline.git import FULL_SHA_RE
from perfguard.core.atomicio import loads_json
from perfguard.core.codec import decode_samples, encode_samples
from perfguard.core.errors import Location, ResultsError, check_schema_version
from perfguard.core.results import CommitInfo, RunResult
from perfguard.core.resultsio import check_stored

BASELINE_SCHEMA_VERSION = 1
BASELINE_KIND = "perfguard-baseline"
MOVE_AWAY_FIX = "move the file away (perfguard never overwrites it) and record the baseline again"
# One safe path component (an environment fingerprint names a directory of the archive);
# no leading dot, so ".locks", "." and ".." can never be one.
FINGERPRINT_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def encode_launch(run: RunResult) -> dict[str, Any]:
    """``run.to_dict()`` with every scenario's samples encoded."""
    data = run.to_dict()
    for scenario in data["scenarios"]:
        scenario["samples_ns"] = encode_samples(scenario["samples_ns"])
    return data


def encode_document(
    fingerprint: str, commit: CommitInfo, launches: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The whole baseline file, from already encoded launches (oldest first)."""
    return {
        "schema_version": BASELINE_SCHEMA_VERSION,
        "kind": BASELINE_KIND,
        "fingerprint": fingerprint,
        "commit": commit.to_dict(),
        "launches": list(launches),
    }


def decode_document(
    raw: bytes, fingerprint: str, sha: str, where: Path
) -> tuple[CommitInfo, list[RunResult], list[Any]]:
    """Validate a baseline file filed under ``fingerprint``/``sha``.

    Returns the commit, the decoded launches and the launches as stored (so a save
    appends without re-encoding, leaving older launches byte-identical in a diff).
    Raises :class:`ResultsError` naming ``where`` (and the line, for broken JSON).
    """

    def corrupt(detail: str, line: int | None = None) -> ResultsError:
        return ResultsError(
            f"baseline file is corrupt or truncated: {detail}",
            expected="a complete baseline written by perfguard",
            fix=MOVE_AWAY_FIX,
            location=Location(where, line),
        )

    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise corrupt("not UTF-8 text", raw[: exc.start].count(b"\n") + 1) from exc
    try:
        doc = loads_json(text, where, fix=MOVE_AWAY_FIX)
    except ResultsError as exc:
        raise corrupt(exc.problem, exc.location.line if exc.location else None) from exc
    if not isinstance(doc, dict):
        raise corrupt(f"top level is a {type(doc).__name__}, not an object", 1)
    if "kind" in doc and doc["kind"] != BASELINE_KIND:
        raise corrupt(f"kind is {doc['kind']!r}, not {BASELINE_KIND!r}")
    check_schema_version(
        doc.get("schema_version"),
        BASELINE_SCHEMA_VERSION,
        "baseline",
        older_fix="re-save the baseline",
        location=Location(where),
    )
    if doc.get("kind") != BASELINE_KIND:
        raise corrupt("'kind' is missing")
    stated = doc.get("fingerprint")
    if not isinstance(stated, str) or not FINGERPRINT_RE.fullmatch(stated):
        raise corrupt(
            f"its fingerprint {stated!r} is not one safe path component "
            "(letters, digits, '.', '_' or '-', not starting with '.')"
        )
    if doc.get("fingerprint") != fingerprint:
        raise corrupt(
            f"it says fingerprint {doc.get('fingerprint')!r}, filed under {fingerprint!r}"
        )
    raw_launches = doc.get("launches")
    if not isinstance(doc.get("commit"), dict) or not isinstance(raw_launches, list):
        raise corrupt("'commit' or 'launches' is missing or malformed")
    if not raw_launches:
        raise corrupt("it holds no launches")
    check_stored(
        doc["commit"],
        where=where,
        what="baseline commit",
        fix=MOVE_AWAY_FIX,
        schema=None,
        pointer="commit",
    )
    commit = CommitInfo.from_dict(doc["commit"])
    if not isinstance(commit.sha, str) or not FULL_SHA_RE.fullmatch(commit.sha):
        raise corrupt(f"its commit sha {commit.sha!r} is not a full commit sha")
    if commit.sha != sha:
        raise corrupt(f"it says commit {commit.sha!r}, filed under {sha!r}")
    launches: list[RunResult] = []
    for index, launch in enumerate(raw_launches):
        label = f"{where} launch {index}"
        if not isinstance(launch, dict) or not isinstance(launch.get("scenarios"), list):
            raise corrupt(f"launch {index} is not an object with a list of 'scenarios'")
        try:
            scenarios = [
                {
                    **s,
                    "samples_ns": decode_samples(
                        s.get("samples_ns", []), source=label, fix=MOVE_AWAY_FIX
                    ),
                }
                for s in launch["scenarios"]
            ]
            decoded = {**launch, "scenarios": scenarios}
            RunResult.check_version(decoded, source=label)
            # The samples were checked as they were decoded (count, int64, >= 0).
            check_stored(
                {**decoded, "scenarios": [{**s, "samples_ns": []} for s in scenarios]},
                where=label,
                what="baseline launch",
                fix=MOVE_AWAY_FIX,
            )
            run = RunResult.from_dict(decoded, source=label)
        except (KeyError, TypeError, AttributeError) as exc:
            raise corrupt(f"launch {index} is malformed ({exc!r})") from exc
        if run.commit.sha != sha or run.environment.fingerprint != fingerprint:
            raise corrupt(f"launch {index} belongs to another commit or environment")
        launches.append(run)
    return commit, launches, raw_launches
