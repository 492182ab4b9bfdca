"""Inputs are sized before they are made, and made in their own dtype (issue 15)."""

from __future__ import annotations

import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from perfguard.core.errors import InputError, Location
from perfguard.core.scenario import DTYPES, AccuracyInputs, InputSpec, ModelSpec
from perfguard.machine.env import available_memory
from perfguard.models import inputs as inputs_module
from perfguard.models.inputs import (
    check_input_sizes,
    generate_input,
    input_sizes,
    make_accuracy_inputs,
    make_inputs,
)

HUGE = InputSpec("x", (100_000, 100_000, 8), "float64")
HUGE_BYTES = 100_000 * 100_000 * 8 * 8


def model_of(tmp_path: Path, *inputs: InputSpec) -> ModelSpec:
    return ModelSpec(
        name="lin",
        location=Location(tmp_path / "suite.yaml", 5),
        base_dir=tmp_path,
        factory="models:make",
        inputs=inputs,
    )


def test_a_huge_shape_is_refused_before_anything_is_allocated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The host "has" 1 GiB free: the 596 GiB input must be refused by its declared
    # size, not by numpy failing to allocate it.
    monkeypatch.setattr(inputs_module, "available_memory", lambda: 1 << 30)
    with pytest.raises(InputError) as caught:
        make_inputs(model_of(tmp_path, HUGE, InputSpec("mask", (4,), "int64", fill=1)))
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'suite.yaml'}:5: ")
    assert "input 'x'" in message
    assert "[100000, 100000, 8]" in message
    assert "float64" in message
    assert f"need 596.0 GiB ({HUGE_BYTES + 32} bytes) in all" in message
    assert f"input 'x' (shape [100000, 100000, 8], float64): 596.0 GiB ({HUGE_BYTES} bytes)" in (
        message
    )
    assert "1.0 GiB" in message  # what was available
    assert "Fix: shrink the shape of 'x'" in message
    assert "Unable to allocate" not in message


def test_the_limit_names_the_input_its_bytes_the_limit_and_the_setting(tmp_path: Path) -> None:
    model = model_of(tmp_path, InputSpec("image", (64, 3, 32, 32), "float32"))
    nbytes = 64 * 3 * 32 * 32 * 4
    check_input_sizes(model, limit_bytes=nbytes, limit_setting="--opt", available=lambda: None)
    with pytest.raises(InputError) as caught:
        check_input_sizes(
            model, limit_bytes=nbytes - 1, limit_setting="--opt", available=lambda: None
        )
    message = str(caught.value)
    assert f"input 'image' (shape [64, 3, 32, 32], float32): 768.0 KiB ({nbytes} bytes)" in message
    assert f"over the limit of 768.0 KiB ({nbytes - 1} bytes)" in message
    assert "or raise --opt" in message


def test_generated_accuracy_samples_count_toward_the_limit(tmp_path: Path) -> None:
    model = model_of(tmp_path, InputSpec("x", (2, 8), "float32"))
    one = 2 * 8 * 4
    accuracy = AccuracyInputs(count=32)
    assert sum(s.nbytes for s in input_sizes(model, accuracy)) == one * 33
    # Inputs from a file have no declared size: only the timing template counts.
    from_file = AccuracyInputs(count=32, file=Path("samples.npz"))
    assert sum(s.nbytes for s in input_sizes(model, from_file)) == one
    with pytest.raises(InputError, match="32 accuracy samples of shape"):
        check_input_sizes(model, accuracy, limit_bytes=one * 10, available=lambda: None)
    with pytest.raises(InputError, match=r"lower the accuracy `count`"):
        check_input_sizes(model, accuracy, limit_bytes=one * 10, available=lambda: None)


def test_accuracy_inputs_are_sized_against_free_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_of(tmp_path, InputSpec("x", (1000, 1000), "float32"))
    # The timing input fits; 10,000 samples of it (40 GB) do not.
    monkeypatch.setattr(inputs_module, "available_memory", lambda: 100 << 20)
    make_inputs(model)
    with pytest.raises(InputError, match="10000 accuracy samples"):
        make_accuracy_inputs(model, AccuracyInputs(count=10_000))


def test_free_memory_is_checked_with_the_reader_given(tmp_path: Path) -> None:
    model = model_of(tmp_path, InputSpec("x", (1024,), "int32"))
    check_input_sizes(model, available=lambda: 4096)
    check_input_sizes(model, available=lambda: None)  # unknown: not checked
    with pytest.raises(InputError, match=r"\(4095 bytes\) of memory available"):
        check_input_sizes(model, available=lambda: 4095)


def test_available_memory_is_a_positive_byte_count_where_proc_has_it() -> None:
    free = available_memory()
    if not Path("/proc/meminfo").is_file():
        pytest.skip("no /proc/meminfo on this platform")
    assert free is not None and free > 0


def test_specs_refused_by_their_own_check_are_not_sized(tmp_path: Path) -> None:
    model = model_of(tmp_path, InputSpec("x", (-1, 4), "float32"), InputSpec("y", (2,), "nope"))
    assert input_sizes(model) == []
    with pytest.raises(InputError, match="negative dimension"):
        make_inputs(model)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8", "bool"])
def test_inputs_are_made_in_their_dtype_without_a_wide_copy(dtype: str) -> None:
    # 8M values: a float64/int64 copy of the whole tensor would be 64 MiB on its own.
    spec = InputSpec("x", (1024, 8192), dtype, low=None if dtype != "uint8" else 0, high=None)
    tracemalloc.start()
    try:
        array = generate_input(spec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert array.dtype == np.dtype(dtype)
    block = inputs_module.GENERATE_BLOCK * 8
    assert peak <= array.nbytes + 2 * block, (peak, array.nbytes)


def _as_before(spec: InputSpec) -> np.ndarray:
    """The values the first version generated: the whole tensor drawn wide, then cast."""
    dtype = np.dtype("float32" if spec.dtype == "bfloat16" else spec.dtype)
    rng = np.random.default_rng([spec.seed, zlib.crc32(spec.name.encode())])
    if dtype.kind == "b":
        return rng.integers(0, 2, size=spec.shape).astype(np.bool_)
    if dtype.kind in "iu":
        low = 0 if spec.low is None else int(np.ceil(spec.low))
        high = 100 if spec.high is None else int(np.ceil(spec.high))
        return rng.integers(low, high, size=spec.shape, dtype=np.int64).astype(dtype)
    if spec.low is None and spec.high is None:
        return rng.standard_normal(size=spec.shape).astype(dtype)
    low = 0.0 if spec.low is None else float(spec.low)
    high = 1.0 if spec.high is None else float(spec.high)
    return rng.uniform(low, high, size=spec.shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bounds", [(None, None), (1.0, 7.0)])
def test_values_are_those_of_one_wide_draw_whatever_the_block(
    dtype: str, bounds: tuple[float | None, float | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Baselines' accuracy references rest on these values: filling a block at a time
    # must not change one of them, at any block size.
    spec = InputSpec("tok", (3, 37, 5), dtype, low=bounds[0], high=bounds[1], seed=11)
    monkeypatch.setattr(inputs_module, "GENERATE_BLOCK", 7)
    small_blocks = generate_input(spec)
    monkeypatch.setattr(inputs_module, "GENERATE_BLOCK", 1 << 20)
    one_block = generate_input(spec)
    before = _as_before(spec)
    assert small_blocks.dtype == before.dtype
    assert small_blocks.flags.c_contiguous
    np.testing.assert_array_equal(small_blocks, before)
    np.testing.assert_array_equal(one_block, before)


def test_texts_are_sized_by_their_words_before_they_are_made(tmp_path: Path) -> None:
    texts = InputSpec("input", (1000, 100_000), "text")
    (size,) = input_sizes(model_of(tmp_path, texts))
    made = generate_input(InputSpec("input", (2, 50), "text"))
    per_token = max(len(t.encode()) for t in made) / 50
    assert size.nbytes == 1000 * 100_000 * inputs_module.TEXT_BYTES_PER_TOKEN
    assert per_token <= inputs_module.TEXT_BYTES_PER_TOKEN  # an upper bound of the real size
    with pytest.raises(InputError) as caught:
        check_input_sizes(model_of(tmp_path, texts), limit_bytes=1 << 30)
    assert "input 'input' (shape [1000, 100000], text)" in str(caught.value)
