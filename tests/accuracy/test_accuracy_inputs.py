"""Accuracy inputs: generated per sample, rows of an .npz, or a user function; labels."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from perfguard.core.errors import InputError, Location
from perfguard.core.scenario import AccuracyInputs, InputSpec, ModelSpec
from perfguard.models.inputs import generate_input, load_labels, make_accuracy_inputs, make_inputs

SPECS = (
    InputSpec("ids", (1, 6), "int64", low=0, high=1000, seed=3),
    InputSpec("mask", (1, 6), "int64", fill=1),
    InputSpec("x", (2,), "float32"),
)


@pytest.fixture
def model(tmp_path: Path) -> ModelSpec:
    return ModelSpec("m", Location(tmp_path / "suite.yaml", 7), tmp_path, "a:b", inputs=SPECS)


@pytest.fixture
def module(tmp_path: Path) -> Iterator[str]:
    """A unique module name for a function module beside the suite; forgotten afterwards."""
    name = f"accinputs_{uuid.uuid4().hex[:8]}"
    yield name
    sys.modules.pop(name, None)


def write_module(tmp_path: Path, name: str, body: str) -> None:
    source = "import numpy as np\n\nN = 5\n\n\ndef one(i):\n" + textwrap.indent(
        "return {'ids': np.full((1, 6), i, np.int64), 'mask': np.ones((1, 6), np.int64),\n"
        "        'x': np.full(2, i, np.float32)}\n",
        "    ",
    )
    (tmp_path / f"{name}.py").write_text(source + "\n\n" + textwrap.dedent(body))


def stacked(n: int) -> dict[str, np.ndarray]:
    return {
        "ids": np.arange(n * 6, dtype=np.int64).reshape(n, 1, 6),
        "mask": np.ones((n, 1, 6), np.int64),
        "x": np.arange(n * 2, dtype=np.float32).reshape(n, 2),
    }


def error(model: ModelSpec, spec: AccuracyInputs) -> str:
    with pytest.raises(InputError) as info:
        make_accuracy_inputs(model, spec)
    assert info.value.location == model.location
    message = str(info.value)
    assert "; expected " in message and ". Fix: " in message, message
    return message


def assert_like_timing_inputs(model: ModelSpec, samples: list[dict[str, np.ndarray]]) -> None:
    template = make_inputs(model)
    for sample in samples:
        assert list(sample) == list(template)
        for name, array in sample.items():
            assert (array.shape, array.dtype) == (template[name].shape, template[name].dtype)
            assert array.flags.c_contiguous


# --- generated ---------------------------------------------------------------------------


def test_generated_samples_use_seed_plus_index(model: ModelSpec) -> None:
    samples, labels = make_accuracy_inputs(model, AccuracyInputs(count=3, seed=10))
    assert labels is None and len(samples) == 3
    assert_like_timing_inputs(model, samples)
    for i, sample in enumerate(samples):
        for spec in SPECS:
            expected = generate_input(dataclasses.replace(spec, seed=10 + i))
            np.testing.assert_array_equal(sample[spec.name], expected)
    assert not np.array_equal(samples[0]["x"], samples[1]["x"])
    np.testing.assert_array_equal(samples[2]["mask"], np.ones((1, 6)))  # fill stays constant
    again, _ = make_accuracy_inputs(model, AccuracyInputs(count=3, seed=10))
    assert all(a["x"].tobytes() == b["x"].tobytes() for a, b in zip(samples, again, strict=True))


def test_generated_needs_input_specs(model: ModelSpec, tmp_path: Path) -> None:
    np.savez(tmp_path / "timing.npz", x=np.zeros(2, np.float32))
    file_model = dataclasses.replace(model, inputs=(), inputs_file=Path("timing.npz"))
    assert "no input specs" in error(file_model, AccuracyInputs(count=2))


# --- file --------------------------------------------------------------------------------


def test_file_rows_become_samples(model: ModelSpec, tmp_path: Path) -> None:
    np.savez(tmp_path / "acc.npz", **stacked(5))
    samples, labels = make_accuracy_inputs(model, AccuracyInputs(count=3, file=Path("acc.npz")))
    assert labels is None and len(samples) == 3
    assert_like_timing_inputs(model, samples)
    np.testing.assert_array_equal(samples[2]["ids"], stacked(5)["ids"][2])


def test_file_labels_have_one_row_per_file_sample(model: ModelSpec, tmp_path: Path) -> None:
    np.savez(tmp_path / "acc.npz", **stacked(5))
    np.save(tmp_path / "labels.npy", np.arange(5))
    spec = AccuracyInputs(count=3, file=Path("acc.npz"), labels=tmp_path / "labels.npy")
    _, labels = make_accuracy_inputs(model, spec)
    assert labels is not None
    np.testing.assert_array_equal(labels, [0, 1, 2])
    np.save(tmp_path / "labels.npy", np.arange(3))
    message = error(model, spec)
    assert "3 rows" in message and "5 samples" in message


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        (lambda d: d.pop("mask"), ["missing 'mask'", "exactly the inputs ids, mask, x"]),
        (lambda d: d.update(extra=d["x"]), ["unexpected 'extra'"]),
        (lambda d: d.update(x=d["x"][:, :1]), ["'x'", "shape [1]", "expected shape [2]"]),
        (lambda d: d.update(x=d["x"].astype(np.float64)), ["dtype float64", "astype"]),
        (lambda d: d.update(x=np.zeros(2, np.float32)), ["shape [2]", "[N, 2]", "numpy.stack"]),
        (lambda d: d.update(x=np.zeros((4, 2), np.float32)), ["different numbers", "x: 4"]),
    ],
    ids=["missing", "extra", "shape", "dtype", "no-sample-axis", "ragged"],
)
def test_file_errors(
    model: ModelSpec,
    tmp_path: Path,
    change: Callable[[dict[str, np.ndarray]], object],
    fragments: list[str],
) -> None:
    arrays = stacked(5)
    change(arrays)
    np.savez(tmp_path / "acc.npz", **arrays)
    message = error(model, AccuracyInputs(count=3, file=Path("acc.npz")))
    assert str(tmp_path / "acc.npz") in message
    for fragment in fragments:
        assert fragment in message, message


def test_file_too_few_rows_and_missing_file(model: ModelSpec, tmp_path: Path) -> None:
    np.savez(tmp_path / "acc.npz", **stacked(2))
    message = error(model, AccuracyInputs(count=3, file=Path("acc.npz")))
    assert "has 2 samples, fewer than `count: 3`" in message and "lower `count` to 2" in message
    assert "not found" in error(model, AccuracyInputs(file=Path("nope.npz")))


# --- function ----------------------------------------------------------------------------


def test_function_list_of_feeds(model: ModelSpec, tmp_path: Path, module: str) -> None:
    write_module(tmp_path, module, "def make():\n    return [one(i) for i in range(N)]\n")
    samples, labels = make_accuracy_inputs(
        model, AccuracyInputs(count=4, function=f"{module}:make")
    )
    assert labels is None and len(samples) == 4
    assert_like_timing_inputs(model, samples)
    assert [float(s["x"][0]) for s in samples] == [0, 1, 2, 3]


def test_function_stacked_dict_with_labels(model: ModelSpec, tmp_path: Path, module: str) -> None:
    write_module(
        tmp_path,
        module,
        """\
        def make():
            feeds = [one(i) for i in range(N)]
            stacked = {k: np.stack([f[k] for f in feeds]) for k in feeds[0]}
            return stacked, list(range(10, 10 + N))
        """,
    )
    spec = AccuracyInputs(count=2, function=f"{module}:make")
    samples, labels = make_accuracy_inputs(model, spec)
    assert_like_timing_inputs(model, samples)
    assert labels is not None and labels.tolist() == [10, 11]
    # Labels from the function and from `labels:` at once are ambiguous.
    np.save(tmp_path / "labels.npy", np.arange(5))
    message = error(model, dataclasses.replace(spec, labels=tmp_path / "labels.npy"))
    assert "both" in message


def test_function_pair_of_feeds_is_two_samples(
    model: ModelSpec, tmp_path: Path, module: str
) -> None:
    write_module(tmp_path, module, "def make():\n    return (one(0), one(1))\n")
    samples, labels = make_accuracy_inputs(
        model, AccuracyInputs(count=2, function=f"{module}:make")
    )
    assert len(samples) == 2 and labels is None


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        ("def make():\n    return 42\n", ["returned builtins.int", "a list of feed dicts"]),
        ("def make():\n    return [one(0)]\n", ["has 1 samples, fewer than `count: 2`"]),
        (
            "def make():\n    return [one(0), {**one(1), 'x': np.zeros(3, np.float32)}]\n",
            ["sample 1 of accuracy inputs function", "'x'", "shape [3]", "expected shape [2]"],
        ),
        ("def make():\n    raise RuntimeError('no data')\n", ["raised RuntimeError: no data"]),
        ("def other():\n    pass\n", ["has no function 'make'"]),
        ("import not_a_real_module_xyz\n", ["cannot import", "ModuleNotFoundError"]),
        ("def make():\n    return [one(i) for i in range(N)], [1, 2]\n", ["2 rows", "5 samples"]),
    ],
    ids=["wrong-type", "too-few", "bad-sample", "raises", "no-function", "import", "labels"],
)
def test_function_errors(
    model: ModelSpec, tmp_path: Path, module: str, body: str, fragments: list[str]
) -> None:
    write_module(tmp_path, module, body)
    message = error(model, AccuracyInputs(count=2, function=f"{module}:make"))
    for fragment in fragments:
        assert fragment in message, message


# --- labels ------------------------------------------------------------------------------


def test_labels_files(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(4))
    np.savez(tmp_path / "b.npz", labels=np.arange(3))
    np.savez(tmp_path / "c.npz", a=np.arange(3), b=np.arange(3))
    (tmp_path / "d.npy").write_bytes(b"not numpy")
    assert load_labels(tmp_path / "a.npy").tolist() == [0, 1, 2, 3]
    assert load_labels(tmp_path / "b.npz").tolist() == [0, 1, 2]
    with pytest.raises(InputError, match="hold 2 arrays"):
        load_labels(tmp_path / "c.npz")
    with pytest.raises(InputError, match="cannot read accuracy labels"):
        load_labels(tmp_path / "d.npy")
    with pytest.raises(InputError, match="cannot read accuracy labels"):
        load_labels(tmp_path / "missing.npy")


def test_generated_with_labels_and_location_override(model: ModelSpec, tmp_path: Path) -> None:
    np.save(tmp_path / "labels.npy", np.arange(3))
    spec = AccuracyInputs(count=3, labels=tmp_path / "labels.npy")
    _, labels = make_accuracy_inputs(model, spec)
    assert labels is not None and labels.tolist() == [0, 1, 2]
    np.save(tmp_path / "labels.npy", np.int64(3))
    where = Location(tmp_path / "other.yaml", 99)
    with pytest.raises(InputError, match="a scalar") as info:
        make_accuracy_inputs(model, spec, where)
    assert info.value.location == where


# --- texts of a served embedding model ---------------------------------------------------


def text_model(tmp_path: Path) -> ModelSpec:
    where = Location(tmp_path / "suite.yaml", 7)
    return ModelSpec("m", where, tmp_path, inputs=(InputSpec("input", (2, 16), "text"),))


def test_texts_from_a_function_or_a_file_become_samples_of_strings(
    tmp_path: Path, module: str
) -> None:
    body = "def make():\n    return [{'input': [f'a {i}', f'b {i}']} for i in range(3)]\n"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(body))
    model = text_model(tmp_path)
    samples, _ = make_accuracy_inputs(model, AccuracyInputs(count=3, function=f"{module}:make"))
    assert [list(s["input"]) for s in samples] == [["a 0", "b 0"], ["a 1", "b 1"], ["a 2", "b 2"]]
    assert all(s["input"].dtype == object for s in samples)
    np.savez(tmp_path / "t.npz", input=np.array([["x", "y"], ["z", "w"]]))
    samples, _ = make_accuracy_inputs(model, AccuracyInputs(count=2, file="t.npz"))
    assert [list(s["input"]) for s in samples] == [["x", "y"], ["z", "w"]]
    generated, _ = make_accuracy_inputs(model, AccuracyInputs(count=2, seed=5))
    assert list(generated[0]["input"]) != list(generated[1]["input"])


@pytest.mark.parametrize(
    ("sample", "found"),
    [
        ("['only one']", "has shape [1] and holds str"),
        ("[1, 2]", "holds int"),
    ],
)
def test_texts_of_the_wrong_count_or_type_are_refused(
    tmp_path: Path, module: str, sample: str, found: str
) -> None:
    (tmp_path / f"{module}.py").write_text(f"def make():\n    return [{{'input': {sample}}}]\n")
    message = error(text_model(tmp_path), AccuracyInputs(count=1, function=f"{module}:make"))
    assert found in message and "2 texts (str) per sample" in message
