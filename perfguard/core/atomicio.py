"""Crash-safe file writes and careful JSON reads.

Results and baselines are rewritten in place by CI jobs that can be killed at
any moment. A reader must see either the old file or the new one, never half
of each, so a write goes to a temporary file in the same directory (same
filesystem, so the rename is atomic), is flushed to disk, and then replaces
the target with ``os.replace``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from perfguard.core.errors import Location, ResultsError
from perfguard.core.policy import MAX_STORED_FILE_BYTES

_CORRUPT_FIX = "the file is corrupt or was cut short; restore it from git or delete it"
_HOSTILE_FIX = (
    "the file was not written by perfguard (or was edited by hand); restore it from git "
    "or delete it"
)

#: The deepest nesting of arrays and objects a stored file may hold. perfguard's own
#: files stay under 10 levels; a deeper one was not written by perfguard, and a very
#: deep one would exhaust the interpreter's stack in the parser or a reader.
MAX_JSON_DEPTH = 64
#: ``write_text_atomic``'s temporary files: ``.<target name>.<random>.tmp`` beside the
#: target (``tempfile``'s random part is 8 letters, digits or ``_``).
TEMP_FILE_RE = re.compile(r"\.(?P<target>.+)\.[A-Za-z0-9_]{8}\.tmp")
#: The gitignore pattern matching every such temporary file.
TEMP_FILE_GLOB = ".*.tmp"
#: Bytes per read where a stored file's size is not known up front.
_READ_CHUNK = 1024 * 1024


def _default_mode() -> int:
    """Permissions a plain ``open(path, "w")`` would give, i.e. 0o666 less the umask.

    NamedTemporaryFile creates 0o600 files; without this a results file would
    become unreadable to other users (CI artifact uploaders, shared machines).
    The umask is read from /proc rather than set-and-restored, which would race
    with other threads creating files.
    """
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii", errors="replace")
    except OSError:
        status = ""
    match = re.search(r"^Umask:\s*([0-7]+)", status, re.MULTILINE)
    umask = int(match.group(1), 8) if match else 0o022
    return 0o666 & ~umask


def _fsync_directory(directory: Path) -> None:
    """Persist the rename itself; a no-op where directories cannot be opened (Windows)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(directory, flags)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8, newlines as given) atomically.

    On any failure the temporary file is removed and the old ``path`` is left
    exactly as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777  # keep the permissions a user chose
    except OSError:
        mode = _default_mode()
    tmp_name: str | None = None
    try:
        # newline="" so files are byte-identical on every OS (they live in git).
        with tempfile.NamedTemporaryFile(
            "w",
            encoding="utf-8",
            newline="",
            delete=False,
            dir=path.parent,
            prefix=f".{path.name}.",
            suffix=".tmp",
        ) as handle:
            tmp_name = handle.name
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(OSError):  # chmod can be refused on some mounts
            Path(tmp_name).chmod(mode)
        Path(tmp_name).replace(path)  # os.replace: atomic on POSIX and Windows
        tmp_name = None
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                Path(tmp_name).unlink()
    _fsync_directory(path.parent)


def _find_non_finite(data: Any, where: str = "$", seen: set[int] | None = None) -> str | None:
    """JSON path of the first NaN or infinity in ``data``, to say where it is."""
    if isinstance(data, float):
        return None if math.isfinite(data) else where
    if not isinstance(data, (dict, list, tuple)):
        return None
    seen = set() if seen is None else seen
    if id(data) in seen:  # a cycle; json.dumps reports those itself
        return None
    seen.add(id(data))
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for key, value in items:
        step = f"{where}.{key}" if isinstance(data, dict) else f"{where}[{key}]"
        found = _find_non_finite(value, step, seen)
        if found:
            return found
    return None


def dumps_json(data: Any, *, path: Path | None = None) -> str:
    """The text ``write_json_atomic`` writes; ResultsError if ``data`` is not valid JSON."""
    where = f"{path}: " if path is not None else ""
    try:
        # indent=1 keeps long sample lists readable in a diff without doubling the size.
        return (
            json.dumps(data, indent=1, sort_keys=False, ensure_ascii=False, allow_nan=False) + "\n"
        )
    except ValueError as exc:
        # allow_nan=False: Python would otherwise write `NaN`, which no JSON
        # parser but Python's accepts, poisoning the file for every other tool.
        place = _find_non_finite(data)
        if place is None:  # e.g. a circular reference
            raise ResultsError(
                f"{where}cannot write the data as JSON ({exc})",
                fix="this is a perfguard bug; report it",
            ) from exc
        raise ResultsError(
            f"{where}refusing to write a NaN or infinite number at {place}",
            expected="finite numbers only (JSON has no NaN or infinity)",
            fix="this is a perfguard bug: a measurement produced a non-finite figure; report it",
        ) from exc
    except TypeError as exc:
        raise ResultsError(
            f"{where}cannot write a value as JSON ({exc})",
            expected="dicts, lists, strings, numbers, booleans and None",
            fix="this is a perfguard bug; report it",
        ) from exc


def write_json_atomic(path: Path, data: Any) -> None:
    """Serialise ``data`` as JSON (trailing newline) and write it atomically.

    Serialisation happens before anything touches the disk, so a value that
    cannot be written leaves no trace.
    """
    write_text_atomic(Path(path), dumps_json(data, path=Path(path)))


def sweep_temp_files(
    directory: Path, *, older_than_s: float = 60.0, prefix: str = ""
) -> list[Path]:
    """Delete ``write_text_atomic``'s temporary files left in ``directory`` by a killed
    writer; return the paths deleted.

    Only names of the temporary-file pattern (``TEMP_FILE_RE``), only regular files
    (never a link: it is unlinked, not followed) and only those last modified over
    ``older_than_s`` ago, so a concurrent writer's file in flight is left alone (with
    ``prefix``, only names starting with it). Call it under the lock that serialises
    writers of ``directory`` where there is one.
    """
    swept: list[Path] = []
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return swept
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(prefix) or not TEMP_FILE_RE.fullmatch(entry.name):
            continue
        try:
            info = entry.lstat()
        except OSError:
            continue
        if now - info.st_mtime < older_than_s:
            continue
        with contextlib.suppress(OSError):
            entry.unlink()
            swept.append(entry)
    return swept


class _HostileNumber(ValueError):
    """A number in a stored file that no perfguard writes (non-finite, absurdly long)."""


def _refuse_constant(name: str) -> Any:
    # The JSON standard has no NaN/Infinity; a file holding them was not written
    # by perfguard and would break the report and other tools.
    raise _HostileNumber(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    # json reads 1e400 as inf, which no perfguard writes (allow_nan=False).
    value = float(text)
    if not math.isfinite(value):
        raise _HostileNumber(f"the number {text[:40]} is too large for a float (it reads as inf)")
    return value


def _bounded_int(text: str) -> int:
    # int64 holds every figure perfguard writes (nanoseconds fit until 2262).
    if len(text.lstrip("-")) > 19:
        raise _HostileNumber(f"the integer {text[:40]}... has {len(text)} digits (at most 19)")
    return int(text)


def _nesting(data: Any) -> Iterator[tuple[Any, int]]:
    """Every container in ``data`` with its depth (the top level is 1); iterative, so a
    deep document cannot exhaust the stack here."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            yield value, depth
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            yield value, depth
            stack.extend((v, depth + 1) for v in value)


def loads_json(text: str, where: Path | str, *, fix: str = _CORRUPT_FIX) -> Any:
    """Parse a stored file's ``text`` the careful way every perfguard reader does.

    Refuses, as a ResultsError naming ``where`` (and the line where parsing stopped):
    broken JSON, NaN and infinities (``1e400`` reads as inf), integers beyond int64 and
    nesting deeper than ``MAX_JSON_DEPTH`` (a very deep one would otherwise end in a
    RecursionError inside the parser).
    """
    path = Path(where)
    try:
        data = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except json.JSONDecodeError as exc:
        raise ResultsError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            expected="a complete JSON document",
            fix=fix,
            location=Location(path, exc.lineno),
        ) from exc
    except _HostileNumber as exc:
        raise ResultsError(
            f"invalid JSON: {exc}",
            expected="finite numbers only, integers within int64",
            fix=_HOSTILE_FIX,
            location=Location(path),
        ) from exc
    except RecursionError as exc:
        raise ResultsError(
            "JSON nested too deeply to parse",
            expected=f"at most {MAX_JSON_DEPTH} levels of arrays and objects",
            fix=_HOSTILE_FIX,
            location=Location(path),
        ) from exc
    deepest = max((depth for _, depth in _nesting(data)), default=0)
    if deepest > MAX_JSON_DEPTH:
        raise ResultsError(
            f"JSON nested {deepest} levels deep",
            expected=f"at most {MAX_JSON_DEPTH} levels of arrays and objects",
            fix=_HOSTILE_FIX,
            location=Location(path),
        )
    return data


def _size_text(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB" if size >= 1024**3 else f"{size / 1024**2:.1f} MiB"


def too_large(where: Path, size: int | None) -> ResultsError:
    """The error for a stored file over ``MAX_STORED_FILE_BYTES`` (``size``: None when
    only known to be larger)."""
    found = f"{size} bytes ({_size_text(size)})" if size is not None else "larger than that"
    return ResultsError(
        f"the file is {found}, over perfguard's limit of {MAX_STORED_FILE_BYTES} bytes "
        f"({_size_text(MAX_STORED_FILE_BYTES)}) for a stored file; it was not read",
        expected=f"a file written by perfguard, at most {_size_text(MAX_STORED_FILE_BYTES)}",
        fix="this is not a file perfguard wrote (or it was appended to); move it away, "
        "or restore it from git",
        location=Location(where),
    )


def read_capped(stream: BinaryIO, where: Path | str) -> bytes:
    """The rest of ``stream`` (an open stored file); ResultsError naming ``where`` when it
    holds more than ``MAX_STORED_FILE_BYTES`` (policy: one cap for every stored file).

    A file's size is checked before anything is read, so a huge file costs nothing; the
    read itself stops one byte past the cap (a file that grows meanwhile, or a stream
    without a size).
    """
    path = Path(where)
    left: int | None = None
    with contextlib.suppress(OSError, AttributeError, io.UnsupportedOperation):
        info = os.fstat(stream.fileno())
        if stat.S_ISREG(info.st_mode):
            left = max(0, info.st_size - stream.tell())
    if left is not None and left > MAX_STORED_FILE_BYTES:
        raise too_large(path, left)
    # One read of the size the file has (read(n) allocates n bytes up front), then
    # small ones to see whether it grew; without a size, small reads up to the cap.
    chunks = [stream.read(left + 1)] if left is not None else []
    total = sum(len(c) for c in chunks)
    while total <= MAX_STORED_FILE_BYTES and (not chunks or chunks[-1]):
        chunks.append(stream.read(min(_READ_CHUNK, MAX_STORED_FILE_BYTES + 1 - total)))
        total += len(chunks[-1])
    if total > MAX_STORED_FILE_BYTES:
        raise too_large(path, None)
    filled = [c for c in chunks if c]
    return filled[0] if len(filled) == 1 else b"".join(filled)  # no copy of a whole file


def read_stored_bytes(path: Path) -> bytes:
    """The bytes of the stored file at ``path``, read under the one size cap
    (``read_capped``). Raises ResultsError when it is missing, not a regular file (a FIFO
    would block the read forever), unreadable or too large."""
    path = Path(path)
    with contextlib.suppress(OSError):  # a missing file is reported by the open below
        if not stat.S_ISREG(path.stat().st_mode):
            raise ResultsError(
                f"{path}: not a regular file",
                expected="a JSON file written by perfguard",
                fix="pass the path of a results or baseline file",
            )
    try:
        with path.open("rb") as stream:
            return read_capped(stream, path)
    except FileNotFoundError as exc:
        raise ResultsError(
            f"{path}: not found",
            expected="a JSON file written by perfguard",
            fix="check the path, or create it by running `pytest --perfguard`",
        ) from exc
    except OSError as exc:
        raise ResultsError(
            f"{path}: cannot be read ({exc.strerror or exc})",
            expected="a readable JSON file",
            fix="check that it is a file and that you may read it",
        ) from exc


def read_json(path: Path) -> Any:
    """Parse the JSON file at ``path``; never modifies it.

    Raises ResultsError when it is missing, not a regular file, unreadable, over the
    stored-file size cap (see ``read_stored_bytes``), or not valid JSON (with the line
    and column where parsing stopped; see ``loads_json``).
    """
    path = Path(path)
    raw = read_stored_bytes(path)
    try:
        # utf-8-sig: tolerate a byte-order mark added by a Windows editor.
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ResultsError(
            f"{path}: not valid UTF-8 text (byte {exc.start})",
            expected="a UTF-8 JSON file",
            fix=_CORRUPT_FIX,
        ) from exc
    if not text.strip():
        raise ResultsError(
            "the file is empty",
            expected="a JSON document",
            fix=_CORRUPT_FIX,
            location=Location(path, 1),
        )
    return loads_json(text, path)
