"""A baseline file's top level, declared once (``StoredHeader``, ``Summary`` in
perfguard.baseline.fileformat on records.declare).

Any header the declaration allows is written and read back (by the declaration, and by
the streaming ``read_header`` from the bytes before ``launches``) to the same header
and bytes; a recorded file's header, mutated, is read or refused by both readers with a
ResultsError naming the file ("corrupt or truncated", the place, what was expected and
the fix), and ``read_header`` never accepts what ``decode_document`` refuses for a
reason of the header.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.baseline.fileformat import (
    MOVE_AWAY_FIX,
    StoredHeader,
    Summary,
    decode_document,
    encode_document,
    read_header,
)
from perfguard.core.atomicio import dumps_json
from perfguard.core.errors import ResultsError
from perfguard.records.declare import decode, encode
from perfguard.records.results import CommitInfo
from tests.helpers.paths import RECORDS
from tests.helpers.strategies import mutants, records

SETTINGS = settings(max_examples=80, deadline=None, database=None)
RECORDED = sorted(RECORDS.glob("baselines/*/*.json"))
SOURCE = Path("baselines/fp/sha.json")

shas = st.from_regex("^[0-9a-f]{40}$", fullmatch=True)
headers = st.builds(
    StoredHeader,
    fingerprint=st.from_regex("^[A-Za-z0-9_-][A-Za-z0-9._-]{0,20}$", fullmatch=True),
    commit=st.builds(
        CommitInfo,
        sha=shas,
        branch=st.none() | st.text(max_size=10),
        dirty=st.booleans(),
        note=st.none() | st.text(max_size=10),
    ),
    summary=st.none() | records(Summary),
)


def _json(data: Any) -> Any:
    return json.loads(json.dumps(data, allow_nan=False))


def _file(header: StoredHeader, launches: list[Any]) -> bytes:
    """A baseline file's bytes: the header's keys, then ``launches``."""
    return dumps_json({**encode(header), "launches": launches}).encode("utf-8")


# -- round trips ------------------------------------------------------------------------------


@SETTINGS
@given(header=headers)
def test_any_header_round_trips_through_the_declaration_and_the_streaming_reader(
    header: StoredHeader,
) -> None:
    doc = _json(encode(header))
    assert list(doc) == [
        k for k in ("schema_version", "kind", "fingerprint", "commit", "summary") if k in doc
    ]
    assert decode(StoredHeader, doc, source=str(SOURCE)) == header
    assert dumps_json(encode(decode(StoredHeader, doc))) == dumps_json(doc)
    assert header.commit.sha is not None
    # The launches cut short: with a summary, the streaming reader never needs them.
    raw = _file(header, [])
    raw = raw[: raw.rindex(b'"launches": ') + len(b'"launches": ')] + b"[{"
    if header.summary is None:  # written before summaries: the launches say it
        with pytest.raises(ResultsError, match=str(SOURCE)):
            read_header(io.BytesIO(raw), header.fingerprint, header.commit.sha, SOURCE)
        return
    read = read_header(io.BytesIO(raw), header.fingerprint, header.commit.sha, SOURCE)
    assert (read.fingerprint, read.commit) == (header.fingerprint, header.commit)
    assert (read.created_at, read.launches, read.scenarios) == (
        header.summary.created_at,
        header.summary.launches,
        header.summary.scenarios,
    )


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem[:12])
def test_a_recorded_file_and_its_rewrite_give_the_same_header(path: Path) -> None:
    fingerprint, sha = path.parent.name, path.stem
    commit, _, stored = decode_document(path.read_bytes(), fingerprint, sha, path)
    old = read_header(io.BytesIO(path.read_bytes()), fingerprint, sha, path)  # no summary
    rewritten = dumps_json(encode_document(fingerprint, commit, stored)).encode("utf-8")
    new = read_header(io.BytesIO(rewritten), fingerprint, sha, path)
    assert old == new and new.commit == commit
    assert decode_document(rewritten, fingerprint, sha, path)[0] == commit


# -- refusals -------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_a_mutated_header_is_read_or_refused_naming_the_file(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(RECORDED))
    fingerprint, sha = path.parent.name, path.stem
    commit, _, stored = decode_document(path.read_bytes(), fingerprint, sha, path)
    doc = _json(encode_document(fingerprint, commit, stored))
    launches = doc.pop("launches")
    mutated = data.draw(mutants(doc))
    raw = dumps_json({**mutated, "launches": launches}).encode("utf-8")

    def outcome(read: Any) -> Any:
        try:
            return read()
        except ResultsError as exc:
            assert str(path) in str(exc) and exc.expected and exc.fix, exc
            return exc

    header = outcome(lambda: read_header(io.BytesIO(raw), fingerprint, sha, path))
    whole = outcome(lambda: decode_document(raw, fingerprint, sha, path))
    if not isinstance(whole, ResultsError):  # the whole file read: so is its header
        assert not isinstance(header, ResultsError), header
        assert header.commit == whole[0] and header.launches == len(whole[1])
    if isinstance(header, ResultsError):
        assert isinstance(whole, ResultsError)


@pytest.mark.parametrize(
    ("change", "found", "expected"),
    [
        (
            lambda d: d.update(fingerprint="../x"),
            'its header holds "../x" at $.fingerprint',
            "a string matching",
        ),
        (
            lambda d: d.update(fingerprint="other"),
            "it says fingerprint 'other'",
            "a complete baseline",
        ),
        (lambda d: d["commit"].update(sha=None), "its commit sha None", "a complete baseline"),
        (lambda d: d["commit"].update(sha="abc"), "at $.commit.sha", "a string matching"),
        (lambda d: d["commit"].update(dirty="no"), "at $.commit.dirty", "boolean"),
        (lambda d: d.update(commit=[]), "its header holds a JSON array at $.commit", "object"),
        (lambda d: d["summary"].update(launches=0), "at $.summary.launches", "a number >= 1"),
        (lambda d: d["summary"].update(scenarios=-1), "at $.summary.scenarios", "a number >= 0"),
        (lambda d: d["summary"].pop("created_at"), "lacks the key 'created_at'", "the key"),
        (lambda d: d.update(summary="x"), "at $.summary", "object"),
        (lambda d: d.update(kind="other"), "kind is 'other'", "a complete baseline"),
    ],
)
def test_a_refusal_names_the_file_the_place_what_was_expected_and_the_fix(
    change: Any, found: str, expected: str
) -> None:
    path = RECORDED[0]
    fingerprint, sha = path.parent.name, path.stem
    commit, _, stored = decode_document(path.read_bytes(), fingerprint, sha, path)
    doc = _json(encode_document(fingerprint, commit, stored))
    change(doc)
    raw = dumps_json(doc).encode("utf-8")
    for read in (
        lambda: read_header(io.BytesIO(raw), fingerprint, sha, path),
        lambda: decode_document(raw, fingerprint, sha, path),
    ):
        with pytest.raises(ResultsError) as info:
            read()
        message = str(info.value)
        assert message.startswith(f"{path}: baseline file is corrupt or truncated: "), message
        assert found in message and expected in str(info.value.expected), message
        assert info.value.fix == MOVE_AWAY_FIX
