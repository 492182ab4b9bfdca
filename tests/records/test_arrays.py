"""``perfguard.records.arrays``: a baseline's samples and golden outputs as compact JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.core.errors import ResultsError
from perfguard.records.arrays import (
    ENCODING,
    SAMPLES_ENCODING,
    decode_array,
    decode_outputs,
    decode_samples,
    encode_array,
    encode_outputs,
    encode_samples,
)


@given(st.lists(st.integers(0, 2**63 - 1), max_size=200))
@settings(max_examples=50, database=None, deadline=None)
def test_sample_encoding_round_trips_exactly(samples: list[int]) -> None:
    # Latencies are never negative; a block holding one is refused (see below).
    blob = encode_samples(samples)
    assert blob["n"] == len(samples) and blob["encoding"] == SAMPLES_ENCODING
    assert decode_samples(json.loads(json.dumps(blob))) == tuple(samples)


def test_sample_decoding_refuses_a_wrong_count_or_bad_data() -> None:
    blob = encode_samples([1, 2, 3])
    with pytest.raises(ResultsError, match="n=4 but holds 3"):
        decode_samples({**blob, "n": 4}, source="x.json")
    with pytest.raises(ResultsError, match="does not decode"):
        decode_samples({**blob, "data": blob["data"][:-6]}, source="x.json")
    with pytest.raises(ResultsError, match="unknown samples encoding") as info:
        decode_samples({**blob, "encoding": "float32"}, source="x.json", fix="move it away")
    assert info.value.fix == "move it away"
    assert decode_samples([4, 5]) == (4, 5)


def test_sample_bytes_are_fixed() -> None:
    # The baseline files in a repository must not change when perfguard does.
    assert encode_samples([1, 2, 3])["data"] == "eNpjZIAAJijNDKUBAGgABw=="


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int32", "bool"])
def test_arrays_round_trip_with_floats_as_float32(dtype: str) -> None:
    array = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    blob = json.loads(json.dumps(encode_array(array)))
    assert blob["encoding"] == ENCODING and blob["shape"] == [2, 3, 4]
    back = decode_array(blob)
    expected = array.astype(np.float32) if dtype.startswith("float") else array
    assert back.dtype == expected.dtype and np.array_equal(back, expected)


def test_outputs_keep_their_first_samples_by_name() -> None:
    arrays = [np.ones((5, 2)), np.arange(5)]
    blob = encode_outputs(["logits", "ids"], arrays, 3)
    decoded = decode_outputs(blob, source="baseline abc")
    assert list(decoded) == ["logits", "ids"] and decoded["ids"].tolist() == [0, 1, 2]


def test_a_truncated_or_foreign_array_is_refused_with_its_source() -> None:
    blob = encode_array(np.ones(10))
    with pytest.raises(ResultsError, match="baseline abc: an archived output array cannot be"):
        decode_array({**blob, "data": blob["data"][:-4]}, source="baseline abc")
    with pytest.raises(ResultsError, match="unknown encoding"):
        decode_array({**blob, "encoding": "npy"})
    with pytest.raises(ResultsError, match="cannot be decoded"):
        decode_array({**blob, "shape": [3]})
