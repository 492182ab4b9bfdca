"""Arrays as compact JSON: little-endian bytes, zlib-compressed, base64-encoded.

Two blocks are written this way, each with what it needs in clear so a truncated
or hand-edited blob is refused rather than misread:

* a baseline's raw latency samples (:func:`encode_samples`): int64 nanoseconds in
  their original order, with their count ``n``. Tens of thousands of integers as a
  JSON list would drown the readable parts of a baseline in a reviewer's diff.
* golden outputs (:func:`encode_array`): the outputs of a baseline's first few
  accuracy inputs, so the next commit can be checked against them, with dtype and
  shape; floating outputs are kept as float32 (the precision the comparison needs,
  half the size of float64).
"""

from __future__ import annotations

import base64
import binascii
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfguard.core.errors import ResultsError
from perfguard.core.policy import MAX_ARCHIVED_ARRAY_BYTES, MAX_STORED_SAMPLES

__all__ = [
    "ENCODING",
    "SAMPLES_ENCODING",
    "decode_array",
    "decode_outputs",
    "decode_samples",
    "encode_array",
    "encode_outputs",
    "encode_samples",
]

ENCODING = "le+zlib+base64"
SAMPLES_ENCODING = "int64-le+zlib+base64"
# Fixed byte order so a file written on one machine reads the same on any other.
_SAMPLES_DTYPE = np.dtype("<i8")


class _TooLarge(ValueError):
    """A compressed blob inflates beyond the size its own header declares (a zip bomb)."""


_BAD_BLOB = (binascii.Error, zlib.error, UnicodeEncodeError, _TooLarge)


def _pack(raw: bytes, level: int) -> str:
    return base64.b64encode(zlib.compress(raw, level)).decode("ascii")


def _unpack(text: str, expected: int) -> bytes:
    """The bytes of a ``_pack``ed text, inflated to at most ``expected`` bytes (what the
    blob's own ``n`` or shape declares, so a blob of a few MB cannot inflate to GBs);
    binascii.Error, zlib.error, UnicodeEncodeError or _TooLarge when it does not decode."""
    inflater = zlib.decompressobj()
    raw = inflater.decompress(base64.b64decode(text.encode("ascii"), validate=True), expected + 1)
    if len(raw) > expected:
        raise _TooLarge(f"it inflates to more than the {expected} bytes declared")
    if not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return raw


# --------------------------------------------------------------------------- samples


def encode_samples(samples: Sequence[int]) -> dict[str, Any]:
    """Encode ``samples`` (nanoseconds, any order) as a JSON-ready dict."""
    try:
        raw = np.asarray(samples, dtype=_SAMPLES_DTYPE).tobytes()
    except OverflowError as exc:
        # Only reachable with absurd values (> 292 years in ns); say so rather than wrap.
        raise ValueError(f"a latency sample does not fit in int64 nanoseconds: {exc}") from exc
    return {"encoding": SAMPLES_ENCODING, "n": len(samples), "data": _pack(raw, 9)}


def decode_samples(
    blob: object, *, source: str = "<baseline>", fix: str | None = None
) -> tuple[int, ...]:
    """Decode what :func:`encode_samples` wrote; a plain JSON list is accepted too.

    Raises :class:`ResultsError` naming ``source`` (with ``fix``) when the blob is of
    an unknown encoding, does not decode, or holds another number of samples than
    ``n`` says.
    """

    def bad(problem: str) -> ResultsError:
        return ResultsError(
            f"{source}: {problem}",
            expected=f"samples encoded as {SAMPLES_ENCODING!r} with a matching count",
            fix=fix,
        )

    if isinstance(blob, list):
        # A hand-written or legacy list of integers is unambiguous: accept it.
        if len(blob) > MAX_STORED_SAMPLES:
            raise bad(f"samples list holds {len(blob)} samples, over {MAX_STORED_SAMPLES}")
        if not all(type(v) is int and v >= 0 for v in blob):
            found = next(v for v in blob if type(v) is not int or v < 0)
            raise bad(f"samples list holds {found!r}, not a latency in whole nanoseconds >= 0")
        return tuple(blob)
    if not isinstance(blob, Mapping):
        raise bad(f"samples are a {type(blob).__name__}, not an encoded block")
    encoding = blob.get("encoding")
    if encoding != SAMPLES_ENCODING:
        raise bad(f"unknown samples encoding {encoding!r}")
    n = blob.get("n")
    text = blob.get("data")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0 or not isinstance(text, str):
        raise bad("samples block lacks an integer 'n' or a string 'data'")
    if n > MAX_STORED_SAMPLES:
        raise bad(f"samples block declares n={n} samples, over the limit of {MAX_STORED_SAMPLES}")
    try:
        raw = _unpack(text, n * _SAMPLES_DTYPE.itemsize)
    except _TooLarge as exc:
        raise bad(f"samples block says n={n} but its data holds more samples ({exc})") from exc
    except _BAD_BLOB as exc:
        raise bad(f"samples data does not decode ({exc})") from exc
    if len(raw) != n * _SAMPLES_DTYPE.itemsize:
        raise bad(
            f"samples block says n={n} but holds {len(raw) / _SAMPLES_DTYPE.itemsize:g} samples"
        )
    values = np.frombuffer(raw, dtype=_SAMPLES_DTYPE)
    if values.size and int(values.min()) < 0:
        raise bad(f"samples block holds a negative latency ({int(values.min())} ns)")
    return tuple(int(v) for v in values)


# --------------------------------------------------------------------------- golden outputs


def encode_array(array: np.ndarray) -> dict[str, Any]:
    data = np.asarray(array)
    if np.issubdtype(data.dtype, np.floating):
        data = data.astype(np.float32)
    data = np.ascontiguousarray(data)
    little = data.astype(data.dtype.newbyteorder("<"), copy=False)
    return {
        "dtype": data.dtype.name,
        "shape": list(data.shape),
        "encoding": ENCODING,
        "data": _pack(little.tobytes(), 6),
    }


def decode_array(blob: Mapping[str, Any], *, source: str = "<golden outputs>") -> np.ndarray:
    try:
        if blob.get("encoding") != ENCODING:
            raise ValueError(f"unknown encoding {blob.get('encoding')!r}")
        dtype = np.dtype(str(blob["dtype"])).newbyteorder("<")
        if dtype.hasobject or dtype.itemsize == 0:
            raise ValueError(f"dtype {dtype.name!r} is not an array of numbers")
        shape = tuple(int(d) for d in blob["shape"])
        if any(d < 0 for d in shape):
            raise ValueError(f"shape {list(shape)} has a negative dimension")
        size = dtype.itemsize * math.prod(shape)
        if size > MAX_ARCHIVED_ARRAY_BYTES:
            raise ValueError(
                f"shape {list(shape)} of {dtype.name} declares {size} bytes, "
                f"over the limit of {MAX_ARCHIVED_ARRAY_BYTES}"
            )
        array = np.frombuffer(_unpack(str(blob["data"]), size), dtype=dtype)
        return array.reshape(shape).astype(dtype.newbyteorder("="))
    except (KeyError, TypeError, ValueError, AttributeError, *_BAD_BLOB) as exc:
        raise ResultsError(
            f"{source}: an archived output array cannot be decoded ({exc})",
            expected=f"a {ENCODING} array written by perfguard",
            fix="re-save the baseline with `pytest --perfguard --perfguard-save`",
        ) from exc


def encode_outputs(names: list[str], arrays: list[np.ndarray], count: int) -> dict[str, Any]:
    """The first ``count`` samples of each output, keyed by output name."""
    return {name: encode_array(array[:count]) for name, array in zip(names, arrays, strict=True)}


def decode_outputs(blob: Mapping[str, Any], *, source: str) -> dict[str, np.ndarray]:
    return {str(name): decode_array(value, source=source) for name, value in blob.items()}
