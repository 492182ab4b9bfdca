"""Model inputs that are bit-identical on every run and every machine.

Inputs come either from ``ModelSpec.inputs`` (generated from a seed) or from
``ModelSpec.inputs_file`` (an ``.npz`` of real inputs keyed by input name).
Generated tensors depend only on (seed, name, shape, dtype, range): the random
generator is seeded with ``[seed, crc32(name)]`` and numpy's PCG64 stream is
the same on every platform.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from perfguard.errors import InputError, Location
from perfguard.scenario import DTYPES, InputSpec, ModelSpec

__all__ = ["batch_size", "generate_input", "load_inputs_file", "make_inputs"]

_INT_DEFAULT_LOW = 0
_INT_DEFAULT_HIGH = 100
_FLOAT_DEFAULT_LOW = 0.0
_FLOAT_DEFAULT_HIGH = 1.0


def make_inputs(model: ModelSpec) -> dict[str, np.ndarray]:
    """The model's inputs, keyed by input name, in the suite's order.

    ``inputs_file`` wins when set; otherwise every ``InputSpec`` is generated.
    """
    if model.inputs_file is not None:
        return load_inputs_file(model.base_dir / model.inputs_file, model.location)
    if not model.inputs:
        raise InputError(
            f"model {model.name!r} declares no inputs",
            expected="`inputs:` (name, shape, dtype per input) or `inputs_file:` (an .npz)",
            fix="describe the model's inputs in the suite",
            location=model.location,
        )
    return {spec.name: generate_input(spec, model.location) for spec in model.inputs}


def generate_input(spec: InputSpec, location: Location | None = None) -> np.ndarray:
    """One reproducible tensor for ``spec`` (``bfloat16`` comes out as float32)."""
    if spec.dtype not in DTYPES:
        raise InputError(
            f"input {spec.name!r} has unknown dtype {spec.dtype!r}",
            expected="one of: " + ", ".join(DTYPES),
            fix="use a supported numpy dtype name",
            location=location,
        )
    if any(dim < 0 for dim in spec.shape):
        raise InputError(
            f"input {spec.name!r} has a negative dimension in shape {list(spec.shape)}",
            expected="non-negative integer dimensions",
            fix="give the input a fixed, concrete shape",
            location=location,
        )
    dtype = np.dtype("float32" if spec.dtype == "bfloat16" else spec.dtype)
    shape = tuple(int(dim) for dim in spec.shape)
    if spec.fill is not None:
        return np.full(shape, spec.fill, dtype=dtype)
    rng = np.random.default_rng([spec.seed, zlib.crc32(spec.name.encode())])
    if dtype.kind == "b":
        return np.asarray(rng.integers(0, 2, size=shape).astype(np.bool_), order="C")
    if dtype.kind in "iu":
        return _integers(rng, spec, dtype, shape, location)
    if spec.low is None and spec.high is None:
        values = rng.standard_normal(size=shape)
    else:
        low = _FLOAT_DEFAULT_LOW if spec.low is None else float(spec.low)
        high = _FLOAT_DEFAULT_HIGH if spec.high is None else float(spec.high)
        _check_range(spec, low, high, location)
        values = rng.uniform(low, high, size=shape)
    return np.asarray(np.asarray(values).astype(dtype), order="C")


def _integers(
    rng: np.random.Generator,
    spec: InputSpec,
    dtype: np.dtype[np.generic],
    shape: tuple[int, ...],
    location: Location | None,
) -> np.ndarray:
    low = _INT_DEFAULT_LOW if spec.low is None else int(np.ceil(spec.low))
    high = _INT_DEFAULT_HIGH if spec.high is None else int(np.ceil(spec.high))
    _check_range(spec, low, high, location)
    info = np.iinfo(dtype.name)
    if low < int(info.min) or high - 1 > int(info.max):
        raise InputError(
            f"input {spec.name!r}: range [{low}, {high}) does not fit dtype {spec.dtype}",
            expected=f"values within [{info.min}, {info.max}]",
            fix="narrow `low`/`high` or use a wider integer dtype",
            location=location,
        )
    values = rng.integers(low, high, size=shape, dtype=np.int64)
    return np.asarray(np.asarray(values).astype(dtype), order="C")


def _check_range(spec: InputSpec, low: float, high: float, location: Location | None) -> None:
    if not low < high:
        raise InputError(
            f"input {spec.name!r} has an empty range [{low}, {high})",
            expected="low < high (high is exclusive)",
            fix="set `high` above `low`",
            location=location,
        )


def load_inputs_file(path: Path, location: Location | None = None) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file, keyed by input name, in file order."""
    fix = (
        "point `inputs_file:` at an .npz written with "
        "numpy.savez(path, input_name=array, ...), relative to the suite file"
    )
    if not path.is_file():
        raise InputError(
            f"inputs file {path} not found",
            expected="an existing .npz file",
            fix=fix,
            location=location,
        )
    try:
        # Our own handle: np.load leaks its file when the archive is corrupt.
        with path.open("rb") as handle:
            loaded = np.load(handle, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise InputError(
                    f"inputs file {path} holds a single array, not an .npz archive",
                    expected="an .npz archive keyed by input name",
                    fix=fix,
                    location=location,
                )
            with loaded:
                feeds = {name: np.asarray(loaded[name], order="C") for name in loaded.files}
    except InputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(
            f"inputs file {path} is not a readable .npz archive ({type(exc).__name__}: {exc})",
            expected="an .npz archive of numeric arrays keyed by input name",
            fix=fix,
            location=location,
        ) from exc
    if not feeds:
        raise InputError(
            f"inputs file {path} holds no arrays",
            expected="one array per model input, keyed by input name",
            fix=fix,
            location=location,
        )
    return feeds


def batch_size(feeds: Mapping[str, np.ndarray]) -> int:
    """The first dimension of the first input; 1 for scalars or no inputs."""
    for array in feeds.values():
        shape = np.shape(array)
        return int(shape[0]) if shape else 1
    return 1
