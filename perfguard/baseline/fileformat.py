"""The baseline file format: compact samples, and the whole document's codec.

A baseline keeps every raw sample (pooling launches and re-summarising needs them),
but tens of thousands of integers as a JSON list would drown the readable parts of
the file in a reviewer's diff. The samples are therefore stored as little-endian
int64, zlib-compressed and base64-encoded, in their original order; ``n`` is kept
in clear so a truncated or hand-edited blob is detected instead of misread.

The rest of a baseline stays plain JSON (summaries as numbers, so a reviewer can
diff P95s); :func:`decode_document` validates all of it, so a file of another
schema version, commit or environment is refused rather than misread.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.core.errors import Location, ResultsError
from perfguard.core.results import CommitInfo, RunResult

ENCODING = "int64-le+zlib+base64"
BASELINE_SCHEMA_VERSION = 1
BASELINE_KIND = "perfguard-baseline"
MOVE_AWAY_FIX = "move the file away (perfguard never overwrites it) and record the baseline again"

# Fixed byte order so a file written on one machine reads the same on any other.
_DTYPE = np.dtype("<i8")


def encode_samples(samples: Sequence[int]) -> dict[str, Any]:
    """Encode ``samples`` (nanoseconds, any order) as a JSON-ready dict."""
    try:
        raw = np.asarray(samples, dtype=_DTYPE).tobytes()
    except OverflowError as exc:
        # Only reachable with absurd values (> 292 years in ns); say so rather than wrap.
        raise ValueError(f"a latency sample does not fit in int64 nanoseconds: {exc}") from exc
    data = base64.b64encode(zlib.compress(raw, 9)).decode("ascii")
    return {"encoding": ENCODING, "n": len(samples), "data": data}


def decode_samples(blob: object, *, source: str = "<baseline>") -> tuple[int, ...]:
    """Decode what :func:`encode_samples` wrote; a plain JSON list is accepted too.

    Raises :class:`ResultsError` naming ``source`` when the blob is of an unknown
    encoding, does not decode, or holds another number of samples than ``n`` says.
    """
    if isinstance(blob, list):
        # A hand-written or legacy list of integers is unambiguous: accept it.
        try:
            return tuple(int(v) for v in blob)
        except (TypeError, ValueError) as exc:
            raise _bad(source, f"samples list holds a non-integer ({exc})") from exc
    if not isinstance(blob, Mapping):
        raise _bad(source, f"samples are a {type(blob).__name__}, not an encoded block")
    encoding = blob.get("encoding")
    if encoding != ENCODING:
        raise _bad(source, f"unknown samples encoding {encoding!r}")
    n = blob.get("n")
    text = blob.get("data")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0 or not isinstance(text, str):
        raise _bad(source, "samples block lacks an integer 'n' or a string 'data'")
    try:
        raw = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, zlib.error, UnicodeEncodeError) as exc:
        raise _bad(source, f"samples data does not decode ({exc})") from exc
    if len(raw) != n * _DTYPE.itemsize:
        raise _bad(
            source,
            f"samples block says n={n} but holds {len(raw) / _DTYPE.itemsize:g} samples",
        )
    return tuple(int(v) for v in np.frombuffer(raw, dtype=_DTYPE))


def _bad(source: str, problem: str) -> ResultsError:
    return ResultsError(
        f"{source}: {problem}",
        expected=f"samples encoded as {ENCODING!r} with a matching count",
        fix=MOVE_AWAY_FIX,
    )


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


def _refuse_constant(name: str) -> Any:
    # NaN/Infinity are not JSON; perfguard never writes them (atomicio refuses).
    raise ValueError(f"{name} is not valid JSON")


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
        doc = json.loads(raw.decode("utf-8-sig"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as exc:
        raise corrupt("not UTF-8 text", raw[: exc.start].count(b"\n") + 1) from exc
    except json.JSONDecodeError as exc:
        raise corrupt(f"invalid JSON ({exc.msg}, column {exc.colno})", exc.lineno) from exc
    except ValueError as exc:
        raise corrupt(str(exc)) from exc
    if not isinstance(doc, dict):
        raise corrupt(f"top level is a {type(doc).__name__}, not an object", 1)
    if "kind" in doc and doc["kind"] != BASELINE_KIND:
        raise corrupt(f"kind is {doc['kind']!r}, not {BASELINE_KIND!r}")
    version = doc.get("schema_version")
    if version != BASELINE_SCHEMA_VERSION:
        newer = isinstance(version, int) and version > BASELINE_SCHEMA_VERSION
        raise ResultsError(
            f"baseline schema_version {version!r} is not supported",
            expected=f"schema_version {BASELINE_SCHEMA_VERSION}",
            fix=(
                "it was written by a newer perfguard: upgrade perfguard to read it"
                if newer
                else "it was written by an older perfguard: re-save the baseline"
            ),
            location=Location(where),
        )
    if doc.get("kind") != BASELINE_KIND:
        raise corrupt("'kind' is missing")
    if doc.get("fingerprint") != fingerprint:
        raise corrupt(
            f"it says fingerprint {doc.get('fingerprint')!r}, filed under {fingerprint!r}"
        )
    raw_launches = doc.get("launches")
    if not isinstance(doc.get("commit"), dict) or not isinstance(raw_launches, list):
        raise corrupt("'commit' or 'launches' is missing or malformed")
    if not raw_launches:
        raise corrupt("it holds no launches")
    commit = CommitInfo.from_dict(doc["commit"])
    if commit.sha != sha:
        raise corrupt(f"it says commit {commit.sha!r}, filed under {sha!r}")
    launches: list[RunResult] = []
    for index, launch in enumerate(raw_launches):
        label = f"{where} launch {index}"
        try:
            scenarios = [
                {**s, "samples_ns": decode_samples(s.get("samples_ns", []), source=label)}
                for s in launch["scenarios"]
            ]
            run = RunResult.from_dict({**launch, "scenarios": scenarios}, source=label)
        except (KeyError, TypeError, AttributeError) as exc:
            raise corrupt(f"launch {index} is malformed ({exc!r})") from exc
        if run.commit.sha != sha or run.environment.fingerprint != fingerprint:
            raise corrupt(f"launch {index} belongs to another commit or environment")
        launches.append(run)
    return commit, launches, raw_launches
