"""Atomic writes keep the old file on any failure; reads explain corrupt files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from perfguard.core.atomicio import read_json, write_json_atomic, write_text_atomic
from perfguard.core.errors import ResultsError


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_round_trip_creates_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "results.json"
    data = {"name": "Résumé ⚡", "values": [1, 2.5, None, True], "nested": {"k": "v"}}
    write_json_atomic(path, data)
    assert read_json(path) == data
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert "Résumé ⚡" in text  # ensure_ascii=False: readable in a diff
    assert list(data) == list(json.loads(text))  # key order kept
    assert leftovers(path.parent) == []


def test_overwrite_replaces_content(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    write_text_atomic(path, "old\n")
    write_text_atomic(path, "new\r\n")
    assert path.read_bytes() == b"new\r\n"  # newlines written exactly as given
    assert leftovers(tmp_path) == []


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_permissions(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.json"
    write_json_atomic(fresh, {})
    umask = os.umask(0)
    os.umask(umask)
    # Not the 0o600 a temporary file is created with.
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    kept.chmod(0o640)
    write_json_atomic(kept, {"a": 1})
    assert kept.stat().st_mode & 0o777 == 0o640


def test_unserialisable_value_leaves_old_file(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    write_json_atomic(path, {"ok": 1})
    before = path.read_bytes()
    with pytest.raises(ResultsError, match="cannot write a value as JSON"):
        write_json_atomic(path, {"ok": object()})
    assert path.read_bytes() == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_numbers_refused(tmp_path: Path, bad: float) -> None:
    path = tmp_path / "results.json"
    write_json_atomic(path, {"ok": 1})
    before = path.read_bytes()
    with pytest.raises(ResultsError) as exc_info:
        write_json_atomic(path, {"scenarios": [{"throughput": 1.0}, {"throughput": bad}]})
    message = str(exc_info.value)
    assert "NaN or infinite" in message
    assert "$.scenarios[1].throughput" in message
    assert str(path) in message
    assert path.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_circular_data_refused(tmp_path: Path) -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ResultsError, match="cannot write the data as JSON"):
        write_json_atomic(tmp_path / "x.json", loop)


def test_crash_at_replace_keeps_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.json"
    write_json_atomic(path, {"version": "old"})

    def crash(src: object, dst: object) -> None:
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        write_json_atomic(path, {"version": "new"})
    monkeypatch.undo()
    assert read_json(path) == {"version": "old"}
    assert leftovers(tmp_path) == []


def test_crash_while_writing_keeps_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.json"
    write_text_atomic(path, "old")

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(path, "new" * 1000)
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert leftovers(tmp_path) == []


def test_read_missing(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="not found") as exc_info:
        read_json(tmp_path / "nope.json")
    assert str(tmp_path / "nope.json") in str(exc_info.value)


def test_read_corrupt_names_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text('{\n "a": 1,\n "b" 2\n}\n')
    before = path.read_bytes()
    with pytest.raises(ResultsError) as exc_info:
        read_json(path)
    err = exc_info.value
    assert err.location is not None and err.location.line == 3
    assert f"{path}:3" in str(err)
    assert "line 3, column 6" in str(err)
    assert err.fix is not None and "restore it from git or delete it" in err.fix
    assert path.read_bytes() == before  # never modified


def test_read_truncated(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    write_json_atomic(path, {"samples": list(range(200)), "tail": "x"})
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    stat_before = path.stat()
    with pytest.raises(ResultsError, match="invalid JSON at line") as exc_info:
        read_json(path)
    assert str(path) in str(exc_info.value)
    assert "cut short" in str(exc_info.value)
    assert path.stat().st_mtime_ns == stat_before.st_mtime_ns


def test_read_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("")
    with pytest.raises(ResultsError, match="empty"):
        read_json(path)


def test_read_refuses_nan(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text('{"p95": NaN}')
    with pytest.raises(ResultsError, match="NaN is not valid JSON"):
        read_json(path)


def test_read_not_utf8_and_directory(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ResultsError, match="not valid UTF-8"):
        read_json(path)
    with pytest.raises(ResultsError, match="not a regular file"):
        read_json(tmp_path)


def test_read_tolerates_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert read_json(path) == {"a": 1}
