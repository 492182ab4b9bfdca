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
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfguard.core.errors import ResultsError

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
_BAD_BLOB = (binascii.Error, zlib.error, UnicodeEncodeError)


def _pack(raw: bytes, level: int) -> str:
    return base64.b64encode(zlib.compress(raw, level)).decode("ascii")


def _unpack(text: str) -> bytes:
    """The bytes of a ``_pack``ed text; binascii.Error, zlib.error or
    UnicodeEncodeError when it does not decode."""
    return zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True))


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
        try:
            return tuple(int(v) for v in blob)
        except (TypeError, ValueError) as exc:
            raise bad(f"samples list holds a non-integer ({exc})") from exc
    if not isinstance(blob, Mapping):
        raise bad(f"samples are a {type(blob).__name__}, not an encoded block")
    encoding = blob.get("encoding")
    if encoding != SAMPLES_ENCODING:
        raise bad(f"unknown samples encoding {encoding!r}")
    n = blob.get("n")
    text = blob.get("data")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0 or not isinstance(text, str):
        raise bad("samples block lacks an integer 'n' or a string 'data'")
    try:
        raw = _unpack(text)
    except _BAD_BLOB as exc:
        raise bad(f"samples data does not decode ({exc})") from exc
    if len(raw) != n * _SAMPLES_DTYPE.itemsize:
        raise bad(
            f"samples block says n={n} but holds {len(raw) / _SAMPLES_DTYPE.itemsize:g} samples"
        )
    return tuple(int(v) for v in np.frombuffer(raw, dtype=_SAMPLES_DTYPE))


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
        shape = tuple(int(d) for d in blob["shape"])
        array = np.frombuffer(_unpack(str(blob["data"])), dtype=dtype)
        return array.reshape(shape).astype(dtype.newbyteorder("="))
    except (KeyError, TypeError, ValueError, *_BAD_BLOB) as exc:
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
