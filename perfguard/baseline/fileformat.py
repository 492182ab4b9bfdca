"""The baseline file format: the whole document's codec.

A baseline keeps every raw sample (pooling launches and re-summarising needs them),
stored compactly by :func:`perfguard.records.arrays.encode_samples` (little-endian int64,
zlib-compressed and base64-encoded, in their original order, with ``n`` in clear so
a truncated or hand-edited blob is detected instead of misread).

The rest of a baseline stays plain JSON (summaries as numbers, so a reviewer can
diff P95s); :func:`decode_document` validates all of it, so a file of another
schema version, commit or environment is refused rather than misread.

Every top-level key but ``launches`` comes first, and ``summary`` (newest launch's
``created_at``, the number of launches and of scenarios) says what the launches hold, so
:func:`read_header` lists a baseline from the first few hundred bytes of its file without
reading its samples; :func:`decode_document` refuses a summary its launches contradict.
Files written before the summary existed are read whole by :func:`read_header`.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from perfguard.baseline.git import FULL_SHA_RE
from perfguard.core.atomicio import loads_json, read_capped, too_large
from perfguard.core.errors import Location, ResultsError, check_schema_version
from perfguard.core.policy import MAX_STORED_FILE_BYTES
from perfguard.records.arrays import decode_samples, encode_samples
from perfguard.records.results import CommitInfo, RunResult

BASELINE_SCHEMA_VERSION = 1
BASELINE_KIND = "perfguard-baseline"
MOVE_AWAY_FIX = "move the file away (perfguard never overwrites it) and record the baseline again"
# One safe path component (an environment fingerprint names a directory of the archive);
# no leading dot, so ".locks", "." and ".." can never be one.
FINGERPRINT_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
SUMMARY_KEY = "summary"
# The key read_header stops at: everything after it is samples.
_LAUNCHES_KEY = "launches"
_HEADER_CHUNK = 4096


def parse_time(text: str) -> datetime:
    """``created_at`` as an aware datetime; unparsable values sort oldest."""
    try:
        # Python 3.10's fromisoformat does not accept a trailing "Z".
        value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class Header:
    """What a baseline file says about itself before its launches (see the module doc)."""

    fingerprint: str
    commit: CommitInfo
    created_at: str  # the newest launch's
    launches: int
    scenarios: int  # distinct scenario ids over all launches

    @property
    def sha(self) -> str:
        assert self.commit.sha is not None  # checked by the reader
        return self.commit.sha

    @property
    def measured_at(self) -> datetime:
        return parse_time(self.created_at)


def summarise(launches: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``summary`` of encoded launches (each with ``created_at`` and ``scenarios``)."""
    newest = max((str(launch["created_at"]) for launch in launches), key=parse_time)
    ids = dict.fromkeys(s["id"] for launch in launches for s in launch["scenarios"])
    return {"created_at": newest, "launches": len(launches), "scenarios": len(ids)}


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
        SUMMARY_KEY: summarise(launches),
        _LAUNCHES_KEY: list(launches),
    }


def _corrupt(where: Path, detail: str, line: int | None = None) -> ResultsError:
    return ResultsError(
        f"baseline file is corrupt or truncated: {detail}",
        expected="a complete baseline written by perfguard",
        fix=MOVE_AWAY_FIX,
        location=Location(where, line),
    )


def _check_header(doc: dict[str, Any], fingerprint: str, sha: str, where: Path) -> CommitInfo:
    """The top-level checks (kind, version, fingerprint, commit) of a file filed under
    ``fingerprint``/``sha``; the commit it states."""
    if "kind" in doc and doc["kind"] != BASELINE_KIND:
        raise _corrupt(where, f"kind is {doc['kind']!r}, not {BASELINE_KIND!r}")
    check_schema_version(
        doc.get("schema_version"),
        BASELINE_SCHEMA_VERSION,
        "baseline",
        older_fix="re-save the baseline",
        location=Location(where),
    )
    if doc.get("kind") != BASELINE_KIND:
        raise _corrupt(where, "'kind' is missing")
    stated = doc.get("fingerprint")
    if not isinstance(stated, str) or not FINGERPRINT_RE.fullmatch(stated):
        raise _corrupt(
            where,
            f"its fingerprint {stated!r} is not one safe path component "
            "(letters, digits, '.', '_' or '-', not starting with '.')",
        )
    if stated != fingerprint:
        raise _corrupt(where, f"it says fingerprint {stated!r}, filed under {fingerprint!r}")
    if not isinstance(doc.get("commit"), dict):
        raise _corrupt(where, "'commit' is missing or malformed")
    commit = CommitInfo.from_dict(
        doc["commit"], source=str(where), what="baseline commit", fix=MOVE_AWAY_FIX
    )
    if not isinstance(commit.sha, str) or not FULL_SHA_RE.fullmatch(commit.sha):
        raise _corrupt(where, f"its commit sha {commit.sha!r} is not a full commit sha")
    if commit.sha != sha:
        raise _corrupt(where, f"it says commit {commit.sha!r}, filed under {sha!r}")
    return commit


def _top_level_until_launches(stream: BinaryIO, where: Path) -> tuple[dict[str, Any], bool]:
    """The top-level fields before ``launches``, read a chunk at a time, and whether
    ``launches`` was reached (False: the object ended without it)."""
    decoder = json.JSONDecoder()
    text, pos, done, taken = "", 0, False, 0
    utf8 = codecs.getincrementaldecoder("utf-8-sig")()

    def more() -> bool:
        nonlocal text, done, taken
        if done:
            return False
        chunk = stream.read(_HEADER_CHUNK)
        taken += len(chunk)
        if taken > MAX_STORED_FILE_BYTES:  # a header that never ends (the one cap)
            raise too_large(where, None)
        try:
            text += utf8.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            raise _corrupt(where, "not UTF-8 text", text.count("\n") + 1) from exc
        done = not chunk
        return True

    def line() -> int:
        return text.count("\n", 0, pos) + 1

    def skip_space() -> None:
        nonlocal pos
        while True:
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            if pos < len(text) or not more():
                return

    def value() -> Any:
        # raw_decode finds where the value ends; loads_json re-reads it the careful way.
        nonlocal pos
        while True:
            try:
                _, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                if more():
                    continue
                detail = f"invalid JSON at line {exc.lineno}: {exc.msg}"
                raise _corrupt(where, detail, line()) from exc
            if end == len(text) and more():  # a number may go on in the next chunk
                continue
            found = loads_json(text[pos:end], where, fix=MOVE_AWAY_FIX)
            pos = end
            return found

    def expect(chars: str) -> str:
        nonlocal pos
        skip_space()
        if pos >= len(text) or text[pos] not in chars:
            seen = "the end of the file" if pos >= len(text) else repr(text[pos])
            detail = f"expected one of {chars!r} at line {line()}, found {seen}"
            raise _corrupt(where, detail, line())
        pos += 1
        return text[pos - 1]

    fields: dict[str, Any] = {}
    expect("{")
    skip_space()
    if text[pos : pos + 1] == "}":
        return fields, False
    while True:
        skip_space()
        key = value()
        if not isinstance(key, str):
            raise _corrupt(where, f"a top-level key is not a string at line {line()}", line())
        expect(":")
        skip_space()
        if key == _LAUNCHES_KEY:
            return fields, True
        fields[key] = value()
        if expect(",}") == "}":
            return fields, False


def read_header(stream: BinaryIO, fingerprint: str, sha: str, where: Path) -> Header:
    """A baseline file's :class:`Header`, checked as :func:`decode_document` checks the
    top level; only the bytes before ``launches`` are read when the file has a summary."""
    fields, reached = _top_level_until_launches(stream, where)
    commit = _check_header(fields, fingerprint, sha, where)
    summary = fields.get(SUMMARY_KEY)
    if summary is None:  # written before summaries: read the launches, not their samples
        if not reached:
            raise _corrupt(where, "'launches' is missing")
        doc = loads_json(_rest(stream, where), where, fix=MOVE_AWAY_FIX)
        if not isinstance(doc, dict):
            raise _corrupt(where, f"top level is a {type(doc).__name__}, not an object", 1)
        summary = _summary_of(doc.get(_LAUNCHES_KEY), where)
    created, launches, scenarios = (
        summary.get(k) if isinstance(summary, dict) else None
        for k in ("created_at", "launches", "scenarios")
    )
    if not (
        isinstance(created, str)
        and isinstance(launches, int)
        and isinstance(scenarios, int)
        and launches >= 1
        and scenarios >= 0
    ):
        raise _corrupt(
            where,
            f"its summary {summary!r} is malformed (expected created_at, launches >= 1 "
            "and scenarios >= 0)",
        )
    return Header(fingerprint, commit, created, launches, scenarios)


def _rest(stream: BinaryIO, where: Path) -> str:
    stream.seek(0)
    raw = read_capped(stream, where)
    try:
        return str(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise _corrupt(where, "not UTF-8 text", raw[: exc.start].count(b"\n") + 1) from exc


def _summary_of(launches: Any, where: Path) -> dict[str, Any]:
    """The summary of stored launches, or ResultsError when they are too broken to have one."""
    if not isinstance(launches, list) or not launches:
        raise _corrupt(where, "'launches' is missing, malformed or empty")
    try:
        return summarise(launches)
    except (KeyError, TypeError) as exc:
        raise _corrupt(where, f"a launch is malformed ({exc!r})") from exc


def decode_document(
    raw: bytes, fingerprint: str, sha: str, where: Path
) -> tuple[CommitInfo, list[RunResult], list[Any]]:
    """Validate a baseline file filed under ``fingerprint``/``sha``.

    Returns the commit, the decoded launches and the launches as stored (so a save
    appends without re-encoding, leaving older launches byte-identical in a diff).
    Raises :class:`ResultsError` naming ``where`` (and the line, for broken JSON).
    """

    def corrupt(detail: str, line: int | None = None) -> ResultsError:
        return _corrupt(where, detail, line)

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
    raw_launches = doc.get(_LAUNCHES_KEY)
    commit = _check_header(doc, fingerprint, sha, where)
    if not isinstance(raw_launches, list):
        raise corrupt("'commit' or 'launches' is missing or malformed")
    if not raw_launches:
        raise corrupt("it holds no launches")
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
            # The samples were checked as they were decoded (count, int64, >= 0); every
            # other value is checked as the launch is read.
            run = RunResult.from_dict(
                decoded, source=label, what="baseline launch", fix=MOVE_AWAY_FIX, verify=False
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise corrupt(f"launch {index} is malformed ({exc!r})") from exc
        problem = run.environment.mismatch()
        if problem:
            raise corrupt(f"launch {index}'s {problem}")
        if run.commit.sha != sha or run.environment.fingerprint != fingerprint:
            raise corrupt(f"launch {index} belongs to another commit or environment")
        launches.append(run)
    stated_summary = doc.get(SUMMARY_KEY)
    if stated_summary is not None and stated_summary != summarise(raw_launches):
        raise corrupt(
            f"its summary {stated_summary!r} does not match its launches "
            f"{summarise(raw_launches)!r}"
        )
    return commit, launches, raw_launches
