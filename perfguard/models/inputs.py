"""Model inputs that are bit-identical on every run and every machine.

Inputs come either from ``ModelSpec.inputs`` (generated from a seed) or from
``ModelSpec.inputs_file`` (an ``.npz`` of real inputs keyed by input name).
Generated tensors depend only on (seed, name, shape, dtype, range): the random
generator is seeded with ``[seed, crc32(name)]`` and numpy's PCG64 stream is
the same on every platform. A tensor is filled in its own dtype, a block of
``GENERATE_BLOCK`` values at a time (the values are those of one draw of the
whole tensor: the generator's stream does not depend on the block size), so a
float32 input never needs a float64 copy of itself.

Inputs are sized before they are made: :func:`input_sizes` gives the declared
bytes of every generated input (timing and accuracy), :func:`check_input_sizes`
refuses a cell whose inputs exceed a limit (the plugin's
``--perfguard-max-input-mib``) or the memory the host has available, naming the
input, its shape, dtype and bytes, and the fix.

:func:`make_accuracy_inputs` builds the N samples accuracy is checked on
(``AccuracyInputs``): generated with seeds ``seed + i``, rows of an ``.npz``, or
what a ``module:function`` returns, each validated against the timing inputs.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import zipfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfguard.core.errors import InputError, Location
from perfguard.core.scenario import DTYPES, TEXT_DTYPE, AccuracyInputs, InputSpec, ModelSpec
from perfguard.machine.env import available_memory

# The factory loader's helpers, so that accuracy functions are imported the same way.
from perfguard.models.factory import forget_shadowed, on_sys_path
from perfguard.models.prompts import TEXT_BYTES_PER_TOKEN, random_text

__all__ = [
    "GENERATE_BLOCK",
    "InputSize",
    "batch_size",
    "check_input_sizes",
    "generate_input",
    "input_sizes",
    "load_inputs_file",
    "load_labels",
    "make_accuracy_inputs",
    "make_inputs",
]

Feeds = dict[str, np.ndarray]

_INT_DEFAULT_LOW = 0
_INT_DEFAULT_HIGH = 100
_FLOAT_DEFAULT_LOW = 0.0
_FLOAT_DEFAULT_HIGH = 1.0

#: Values drawn per block while filling a generated input: the float64/int64
#: intermediate stays at 8 MiB, however large the input.
GENERATE_BLOCK = 1 << 20


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
    check_input_sizes(model, location=model.location)
    return {spec.name: generate_input(spec, model.location) for spec in model.inputs}


def generate_input(spec: InputSpec, location: Location | None = None) -> np.ndarray:
    """One reproducible tensor for ``spec`` (``bfloat16`` comes out as float32).

    A ``text`` input of shape ``[texts, tokens]`` is an object array of ``texts`` strings
    of seeded random words, each long enough for ``tokens`` tokens (the served model's
    session cuts them to exactly that many of its server's)."""
    if spec.dtype == TEXT_DTYPE:
        rng = np.random.default_rng([spec.seed, zlib.crc32(spec.name.encode())])
        texts, tokens = (int(dim) for dim in spec.shape)
        out = np.empty(texts, dtype=object)
        out[:] = [random_text(rng, tokens) for _ in range(texts)]
        return out
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
    dtype = _generated_dtype(spec.dtype)
    shape = tuple(int(dim) for dim in spec.shape)
    if spec.fill is not None:
        return np.full(shape, spec.fill, dtype=dtype)
    rng = np.random.default_rng([spec.seed, zlib.crc32(spec.name.encode())])
    draw: Callable[[int], np.ndarray]
    if dtype.kind == "b":

        def draw(n: int) -> np.ndarray:
            return rng.integers(0, 2, size=n)
    elif dtype.kind in "iu":
        low, high = _int_range(spec, dtype, location)

        def draw(n: int) -> np.ndarray:
            return rng.integers(low, high, size=n, dtype=np.int64)
    elif spec.low is None and spec.high is None:

        def draw(n: int) -> np.ndarray:
            return rng.standard_normal(size=n)
    else:
        flow = _FLOAT_DEFAULT_LOW if spec.low is None else float(spec.low)
        fhigh = _FLOAT_DEFAULT_HIGH if spec.high is None else float(spec.high)
        _check_range(spec, flow, fhigh, location)

        def draw(n: int) -> np.ndarray:
            return rng.uniform(flow, fhigh, size=n)

    return _filled(shape, dtype, draw)


def _filled(
    shape: tuple[int, ...], dtype: np.dtype[np.generic], draw: Callable[[int], np.ndarray]
) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` filled from ``draw(n)`` (n float64/int64 values
    at a time), a block at a time: the values are those of one ``draw`` of the whole
    array (the generator's stream does not depend on how it is cut), cast into place,
    so the wide intermediate never holds more than ``GENERATE_BLOCK`` values."""
    out = np.empty(shape, dtype=dtype)
    flat = out.reshape(-1)  # a view: ``out`` is new, so C-contiguous
    for start in range(0, flat.size, GENERATE_BLOCK):
        stop = min(start + GENERATE_BLOCK, flat.size)
        flat[start:stop] = draw(stop - start)
    return out


def _int_range(
    spec: InputSpec, dtype: np.dtype[np.generic], location: Location | None
) -> tuple[int, int]:
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
    return low, high


def _generated_dtype(name: str) -> np.dtype[np.generic]:
    """The numpy dtype an input of dtype ``name`` is generated in (bfloat16: float32)."""
    return np.dtype("float32" if name == "bfloat16" else name)


@dataclass(frozen=True)
class InputSize:
    """The declared size of one generated input: ``count`` tensors of ``shape``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int  # all ``count`` tensors together
    count: int = 1  # accuracy samples; 1 for a timing input

    def describe(self) -> str:
        copies = f"{self.count} accuracy samples of " if self.count != 1 else ""
        return (
            f"input {self.name!r} ({copies}shape {list(self.shape)}, {self.dtype}): "
            f"{_human(self.nbytes)}"
        )


def input_sizes(model: ModelSpec, accuracy: AccuracyInputs | None = None) -> list[InputSize]:
    """The declared bytes of every input ``model`` generates, largest first: its timing
    inputs and, with ``accuracy`` generated from the same specs, its ``count`` samples.

    Inputs read from files or returned by a function have no declared size (the file
    or the function decides); specs with an unknown dtype or a negative dimension are
    left to :func:`generate_input`, which refuses them with their own message.
    """
    sizes = []
    generated_accuracy = accuracy is not None and accuracy.file is None and not accuracy.function
    for spec in model.inputs if model.inputs_file is None else ():
        if spec.dtype not in (*DTYPES, TEXT_DTYPE) or any(dim < 0 for dim in spec.shape):
            continue
        itemsize = (
            TEXT_BYTES_PER_TOKEN
            if spec.dtype == TEXT_DTYPE
            else _generated_dtype(spec.dtype).itemsize
        )
        one = math.prod(int(dim) for dim in spec.shape) * itemsize
        sizes.append(InputSize(spec.name, tuple(spec.shape), spec.dtype, one))
        if generated_accuracy and accuracy is not None and accuracy.count > 0:
            count = accuracy.count
            sizes.append(InputSize(spec.name, tuple(spec.shape), spec.dtype, one * count, count))
    return sorted(sizes, key=lambda size: -size.nbytes)


def check_input_sizes(
    model: ModelSpec,
    accuracy: AccuracyInputs | None = None,
    *,
    limit_bytes: int | None = None,
    limit_setting: str = "",
    available: Callable[[], int | None] = lambda: available_memory(),
    location: Location | None = None,
) -> None:
    """Refuse, before anything is allocated, inputs whose declared bytes (all of
    :func:`input_sizes` together) exceed ``limit_bytes`` or the memory available.

    ``limit_setting`` names where the limit is set, for the fix (e.g. the option).
    """
    sizes = input_sizes(model, accuracy)
    total = sum(size.nbytes for size in sizes)
    if not sizes or total == 0:
        return
    where = location or model.location
    biggest = sizes[0]
    what = f"model {model.name!r}: "
    if len(sizes) > 1:
        what += f"its inputs need {_human(total)} in all; the largest is {biggest.describe()}"
    else:
        what += biggest.describe()
    shrink = f"shrink the shape of {biggest.name!r} in the model's `inputs:`"
    if biggest.count != 1:
        shrink += " (or lower the accuracy `count`)"
    if limit_bytes is not None and total > limit_bytes:
        raise InputError(
            f"{what}, over the limit of {_human(limit_bytes)}",
            expected=f"at most {_human(limit_bytes)} of generated inputs per cell"
            + (f" ({limit_setting})" if limit_setting else ""),
            fix=f"{shrink}, or raise {limit_setting or 'the limit'} if the machine has the memory",
            location=where,
        )
    free = available()
    if free is not None and total > free:
        raise InputError(
            f"{what}, more than the {_human(free)} of memory available on this machine",
            expected="inputs that fit in the available memory (MemAvailable, or what the "
            "cgroup's limit leaves)",
            fix=f"{shrink}, or run on a machine with more free memory",
            location=where,
        )


def _human(nbytes: int) -> str:
    """``nbytes`` exactly, and in the largest binary unit it reaches (``1.5 GiB``)."""
    value, unit = float(nbytes), "bytes"
    for next_unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            break
        value, unit = value / 1024, next_unit
    return f"{nbytes} bytes" if unit == "bytes" else f"{value:.1f} {unit} ({nbytes} bytes)"


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


def make_accuracy_inputs(
    model: ModelSpec, spec: AccuracyInputs, location: Location | None = None
) -> tuple[list[Feeds], np.ndarray | None]:
    """``spec.count`` feed dicts shaped like ``make_inputs(model)``, and the labels or ``None``.

    Labels come from ``spec.labels`` or from a function returning ``(inputs,
    labels)`` (not both), one per sample of the source: the file's or the
    function's N samples, or ``count`` for generated inputs. Both are cut to
    the first ``count``.
    """
    where = location or model.location
    labels: object = None
    if spec.function is not None:
        result = _call_function(spec.function, model.base_dir, where)
        # A pair of feed dicts is two samples, not (inputs, labels).
        if isinstance(result, tuple) and len(result) == 2 and not isinstance(result[1], Mapping):
            result, labels = result
            if spec.labels is not None:
                raise InputError(
                    f"accuracy labels come from both {spec.function} and {spec.labels}",
                    expected="one source of labels",
                    fix="remove `labels:` from `accuracy`, or return only the inputs",
                    location=where,
                )
        source = f"accuracy inputs function {spec.function}"
        samples, rows = _samples_of(result, make_inputs(model), spec.count, source, where)
    elif spec.file is not None:
        path = model.base_dir / spec.file
        stacked = load_inputs_file(path, where)
        source = f"accuracy inputs file {path}"
        samples, rows = _unstack(stacked, make_inputs(model), spec.count, source, where)
    else:
        samples, rows = _generated(model, spec, where), spec.count
    if spec.labels is not None:
        labels = load_labels(model.base_dir / spec.labels, where)
    if labels is None:
        return samples, None
    label_array = np.asarray(labels)
    if label_array.ndim == 0 or len(label_array) != rows:
        found = "a scalar" if label_array.ndim == 0 else f"{len(label_array)} rows"
        raise InputError(
            f"the accuracy labels have {found} but the accuracy inputs have {rows} samples",
            expected=f"{rows} labels, one per sample, in the same order",
            fix="save one label per accuracy input sample",
            location=where,
        )
    return samples, np.ascontiguousarray(label_array[: spec.count])


def load_labels(path: Path, location: Location | None = None) -> np.ndarray:
    """The labels array of a ``.npy`` file, or of an ``.npz`` holding exactly one array."""
    fix = "save the labels with numpy.save(path, labels), or savez with one array"
    try:
        # Our own handle: np.load leaks its file when the archive is corrupt.
        with path.open("rb") as handle:
            loaded = np.load(handle, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                return np.asarray(loaded)
            with loaded:
                names = list(loaded.files)
                arrays = [np.asarray(loaded[name]) for name in names]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(
            f"cannot read accuracy labels {path} ({type(exc).__name__}: {exc})",
            expected="an existing .npy file, or an .npz of one array",
            fix=f"check `labels:` (relative to the suite file); {fix}",
            location=location,
        ) from exc
    if len(arrays) != 1:
        raise InputError(
            f"accuracy labels {path} hold {len(arrays)} arrays ({', '.join(names) or 'none'})",
            expected="exactly one array of labels",
            fix=fix,
            location=location,
        )
    return arrays[0]


def _generated(model: ModelSpec, spec: AccuracyInputs, location: Location) -> list[Feeds]:
    if not model.inputs:
        raise InputError(
            f"model {model.name!r} has no input specs to generate accuracy inputs from",
            expected="`inputs:` specs on the model, or accuracy inputs from `file:`/`function:`",
            fix="give `accuracy: {inputs: {file: samples.npz}}` (inputs stacked on a first axis)",
            location=location,
        )
    check_input_sizes(model, spec, location=location)
    # `fill` inputs (e.g. an attention mask) stay constant; random ones differ per sample.
    return [
        {s.name: generate_input(dataclasses.replace(s, seed=spec.seed + i), location)
         for s in model.inputs}
        for i in range(spec.count)
    ]  # fmt: skip


def _call_function(ref: str, base_dir: Path, location: Location) -> object:
    module_name, _, function_name = ref.partition(":")
    entry = str(Path(base_dir).resolve())
    fix = f"check `function: {ref}` (a module importable from {entry} and a function in it)"
    # The suite's folder stays on sys.path during the call: the function may import lazily.
    with on_sys_path(entry):
        try:
            importlib.invalidate_caches()
            forget_shadowed(module_name, Path(entry))
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise InputError(
                f"cannot import accuracy inputs module {module_name!r} "
                f"({type(exc).__name__}: {exc})",
                expected=f"{module_name.replace('.', '/')}.py beside the suite, or installed",
                fix=fix,
                location=location,
            ) from exc
        function = getattr(module, function_name, None)
        if not callable(function):
            raise InputError(
                f"module {module_name!r} has no function {function_name!r}",
                expected="a function taking no arguments that returns the accuracy inputs",
                fix=fix,
                location=location,
            )
        try:
            return function()
        except Exception as exc:
            raise InputError(
                f"accuracy inputs function {ref} raised {type(exc).__name__}: {exc}",
                expected="the function to return the inputs without raising",
                fix="fix the function (call it in Python to see the traceback)",
                location=location,
            ) from exc


def _samples_of(
    result: object, template: Feeds, count: int, source: str, location: Location
) -> tuple[list[Feeds], int]:
    """The first ``count`` samples of what a function returned, and how many it returned."""
    if isinstance(result, Mapping):
        return _unstack(result, template, count, source, location)
    if isinstance(result, list | tuple) and all(isinstance(feed, Mapping) for feed in result):
        _check_rows(len(result), count, source, location)
        samples = []
        for i, feed in enumerate(result[:count]):
            where = f"sample {i} of {source}"
            names = _checked_names(feed, template, where, location)
            samples.append({name: _checked(feed[name], name, template, where, location)
                            for name in names})  # fmt: skip
        return samples, len(result)
    raise InputError(
        f"{source} returned {type(result).__module__}.{type(result).__qualname__}",
        expected="a list of feed dicts {input name: array}, a dict of arrays stacked on a "
        "leading axis of N samples, or a tuple (inputs, labels) of either",
        fix="return e.g. [{'x': array}, ...] or {'x': numpy.stack(samples)}",
        location=location,
    )


def _unstack(
    stacked: Mapping[str, object], template: Feeds, count: int, source: str, location: Location
) -> tuple[list[Feeds], int]:
    """The first ``count`` samples of arrays stacked on a leading axis, and that axis' N."""
    names = _checked_names(stacked, template, source, location)
    arrays = {name: np.asarray(stacked[name]) for name in names}
    for name, array in arrays.items():
        want = list(template[name].shape)
        if array.ndim != len(want) + 1:
            raise InputError(
                f"input {name!r} in {source} has shape {list(array.shape)}",
                expected=f"shape [N, {', '.join(map(str, want))}]: N samples of the timing "
                f"input's shape {want}",
                fix="stack the samples on a new first axis (numpy.stack)",
                location=location,
            )
    rows = {name: int(array.shape[0]) for name, array in arrays.items()}
    if len(set(rows.values())) > 1:
        counts = ", ".join(f"{name}: {n}" for name, n in rows.items())
        raise InputError(
            f"the inputs in {source} have different numbers of samples ({counts})",
            expected="the same leading axis N for every input",
            fix="save the same samples for every input",
            location=location,
        )
    n = next(iter(rows.values()))
    _check_rows(n, count, source, location)
    samples = [
        {name: _checked(a[i], name, template, f"sample {i} of {source}", location)
         for name, a in arrays.items()}
        for i in range(count)
    ]  # fmt: skip
    return samples, n


def _check_rows(rows: int, count: int, source: str, location: Location) -> None:
    if rows < count:
        raise InputError(
            f"{source} has {rows} samples, fewer than `count: {count}`",
            expected=f"at least {count} samples",
            fix=f"lower `count` to {rows}, or provide more samples",
            location=location,
        )


def _checked_names(
    feeds: Mapping[str, object], template: Feeds, source: str, location: Location
) -> list[str]:
    """The model's input names, in its order, when ``feeds`` has exactly those."""
    missing = [name for name in template if name not in feeds]
    extra = [str(name) for name in feeds if name not in template]
    if missing or extra:
        problems = [f"missing {', '.join(map(repr, missing))}"] if missing else []
        problems += [f"unexpected {', '.join(map(repr, extra))}"] if extra else []
        raise InputError(
            f"the inputs in {source} do not match the model's: {'; '.join(problems)}",
            expected=f"exactly the inputs {', '.join(template)}",
            fix="name the arrays after the model's inputs (as in `inputs:`)",
            location=location,
        )
    return list(template)


def _checked(
    value: object, name: str, template: Feeds, source: str, location: Location
) -> np.ndarray:
    array, want = np.asarray(value), template[name]
    if want.dtype == object:  # texts (a served embedding model's)
        if array.shape == want.shape and all(isinstance(text, str) for text in array.flat):
            texts = np.empty(array.shape, dtype=object)
            texts[...] = array.tolist()
            return texts
        raise InputError(
            f"input {name!r} in {source} has shape {list(array.shape)} and holds "
            + ", ".join(sorted({type(t).__name__ for t in array.flat}) or ["nothing"]),
            expected=f"{want.shape[0]} texts (str) per sample, like the timing input",
            fix=f"give every sample a list of {want.shape[0]} strings",
            location=location,
        )
    if array.shape != want.shape:
        fix = f"give every sample the timing input's shape {list(want.shape)}"
    elif array.dtype != want.dtype:
        fix = f"cast it, e.g. array.astype(numpy.{want.dtype})"
    else:
        return np.ascontiguousarray(array)
    raise InputError(
        f"input {name!r} in {source} has shape {list(array.shape)} and dtype {array.dtype}",
        expected=f"shape {list(want.shape)} and dtype {want.dtype}, like the timing inputs",
        fix=fix,
        location=location,
    )
