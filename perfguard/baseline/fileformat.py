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

Every top-level key but ``launches`` is declared once (:class:`StoredHeader`, its
:class:`Summary`; ``perfguard.records.declare``): written by :func:`encode_document`
and read, every value checked, by both readers (``_check_header``). Kept by hand: the
streaming parse that stops at ``launches`` (it finds the bytes the declaration reads),
the launches themselves (``RunResult`` records whose samples are decoded first), and
the checks no declaration states (the file is where its fingerprint and commit say, its
summary is what its launches hold).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from perfguard.baseline.git import FULL_SHA_RE
from perfguard.core.atomicio import loads_json, read_capped, too_large
from perfguard.core.errors import Location, ResultsError, check_schema_version
from perfguard.core.policy import MAX_STORED_FILE_BYTES
from perfguard.records.arrays import decode_samples, encode_samples
from perfguard.records.declare import Record, decode, encode, spec
from perfguard.records.results import CommitInfo, RunResult

BASELINE_SCHEMA_VERSION = 1
BASELINE_KIND = "perfguard-baseline"
MOVE_AWAY_FIX = "move the file away (perfguard never overwrites it) and record the baseline again"
# One safe path component (an environment fingerprint names a directory of the archive);
# no leading dot, so ".locks", "." and ".." can never be one.
FINGERPRINT_PATTERN = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"
FINGERPRINT_RE = re.compile(FINGERPRINT_PATTERN.strip("^$"))
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
class Summary(Record):
    """What a baseline's launches hold, stated before them (``summary``)."""

    SCHEMA_NAME: ClassVar[str] = "baseline_summary"

    created_at: str = field(metadata=spec(min_length=1, description="the newest launch's"))
    launches: int = field(metadata=spec(minimum=1))
    scenarios: int = field(
        metadata=spec(minimum=0, description="distinct scenario ids over all launches")
    )


@dataclass(frozen=True)
class StoredHeader(Record):
    """Every top-level key of a baseline file but ``launches`` (which follows them), as
    the file holds them; :func:`read_header` reads it without reading the launches.

    ``summary`` is absent from files written before it existed (their launches say it).
    """

    SCHEMA_NAME: ClassVar[str] = "baseline_header"
    KEY_ORDER: ClassVar[tuple[str, ...] | None] = (
        "schema_version",
        "kind",
        "fingerprint",
        "commit",
        "summary",
    )

    fingerprint: str = field(
        metadata=spec(
            pattern="^[0-9a-f]{12}$",
            # It names a directory of the baseline archive: one safe path component.
            read_pattern=FINGERPRINT_PATTERN,
        )
    )
    commit: CommitInfo
    summary: Summary | None = field(default=None, metadata=spec(omit="none"))
    schema_version: int = field(
        default=BASELINE_SCHEMA_VERSION, metadata=spec(values=(BASELINE_SCHEMA_VERSION,))
    )
    kind: str = field(default=BASELINE_KIND, metadata=spec(values=(BASELINE_KIND,)))


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


def summarise(launches: Sequence[dict[str, Any]]) -> Summary:
    """The ``summary`` of encoded launches (each with ``created_at`` and ``scenarios``)."""
    newest = max((str(launch["created_at"]) for launch in launches), key=parse_time)
    ids = dict.fromkeys(s["id"] for launch in launches for s in launch["scenarios"])
    return Summary(created_at=newest, launches=len(launches), scenarios=len(ids))


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
    header = StoredHeader(fingerprint=fingerprint, commit=commit, summary=summarise(launches))
    return {**encode(header), _LAUNCHES_KEY: list(launches)}


def _corrupt(
    where: Path,
    detail: str,
    line: int | None = None,
    expected: str = "a complete baseline written by perfguard",
) -> ResultsError:
    return ResultsError(
        f"baseline file is corrupt or truncated: {detail}",
        expected=expected,
        fix=MOVE_AWAY_FIX,
        location=Location(where, line),
    )


def _check_header(doc: dict[str, Any], fingerprint: str, sha: str, where: Path) -> StoredHeader:
    """The top level (every key but ``launches``) of a file filed under
    ``fingerprint``/``sha``, read by its declaration (:class:`StoredHeader`): first which
    file it is (kind, version: another version's file says "upgrade" or "re-save", not
    "bad value"), then every value, then what the declaration cannot say (the file is
    where its fingerprint and commit say)."""
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
    try:
        header = decode(StoredHeader, doc, source=str(where), what="its header", fix=MOVE_AWAY_FIX)
    except ResultsError as exc:  # said as every other corruption of the file is
        detail = exc.problem.removeprefix(f"{where}: ")
        raise _corrupt(where, detail, expected=exc.expected or "") from exc
    if header.fingerprint != fingerprint:
        raise _corrupt(
            where, f"it says fingerprint {header.fingerprint!r}, filed under {fingerprint!r}"
        )
    commit = header.commit
    if not isinstance(commit.sha, str) or not FULL_SHA_RE.fullmatch(commit.sha):
        raise _corrupt(where, f"its commit sha {commit.sha!r} is not a full commit sha")
    if commit.sha != sha:
        raise _corrupt(where, f"it says commit {commit.sha!r}, filed under {sha!r}")
    return header


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
    header = _check_header(fields, fingerprint, sha, where)
    summary = header.summary
    if summary is None:  # written before summaries: read the launches, not their samples
        if not reached:
            raise _corrupt(where, "'launches' is missing")
        doc = loads_json(_rest(stream, where), where, fix=MOVE_AWAY_FIX)
        if not isinstance(doc, dict):
            raise _corrupt(where, f"top level is a {type(doc).__name__}, not an object", 1)
        summary = _summary_of(doc.get(_LAUNCHES_KEY), where)
    return Header(
        fingerprint, header.commit, summary.created_at, summary.launches, summary.scenarios
    )


def _rest(stream: BinaryIO, where: Path) -> str:
    stream.seek(0)
    raw = read_capped(stream, where)
    try:
        return str(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise _corrupt(where, "not UTF-8 text", raw[: exc.start].count(b"\n") + 1) from exc


def _summary_of(launches: Any, where: Path) -> Summary:
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
    header = _check_header(doc, fingerprint, sha, where)
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
    # Beyond the declaration: the summary must say what the launches hold.
    stated, actual = header.summary, summarise(raw_launches)
    if stated is not None and stated != actual:
        raise corrupt(
            f"its summary {encode(stated)!r} does not match its launches {encode(actual)!r}"
        )
    return header.commit, launches, raw_launches
