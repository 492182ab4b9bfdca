"""Arrays as compact JSON: golden outputs archived beside a baseline's figures.

A baseline keeps the outputs of its first few accuracy inputs so the next
commit can be checked against them. They are stored as little-endian bytes,
zlib-compressed and base64-encoded, with dtype and shape in clear; floating
outputs are kept as float32 (the precision the comparison needs, half the
size of float64). Decoding checks the size, so a truncated blob is refused.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from perfguard.core.errors import ResultsError

ENCODING = "le+zlib+base64"


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
        "data": base64.b64encode(zlib.compress(little.tobytes(), 6)).decode("ascii"),
    }


def decode_array(blob: Mapping[str, Any], *, source: str = "<golden outputs>") -> np.ndarray:
    try:
        if blob.get("encoding") != ENCODING:
            raise ValueError(f"unknown encoding {blob.get('encoding')!r}")
        dtype = np.dtype(str(blob["dtype"])).newbyteorder("<")
        shape = tuple(int(d) for d in blob["shape"])
        raw = zlib.decompress(base64.b64decode(str(blob["data"]), validate=True))
        array = np.frombuffer(raw, dtype=dtype)
        return array.reshape(shape).astype(dtype.newbyteorder("="))
    except (KeyError, TypeError, ValueError, zlib.error, binascii.Error) as exc:
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
