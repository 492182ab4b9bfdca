"""Tests for perfguard.suite.loader: matrix expansion, defaults, gates and every error path."""

from __future__ import annotations

import dataclasses
import itertools
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from perfguard.core.errors import SuiteError
from perfguard.core.policy import GateSpec
from perfguard.core.scenario import (
    BACKENDS,
    DTYPES,
    GRAPH_OPT_LEVELS,
    PRECISIONS,
    SERVER_BACKEND,
    AccuracyGates,
    AccuracyInputs,
    AccuracySpec,
    InputSpec,
    LoopSpec,
    QuantSpec,
    Scenario,
    TaskMetricSpec,
)
from perfguard.suite.loader import Suite, load_suite
from perfguard.suite.sections import accuracy as suite_accuracy
from tests.helpers.suite_cases import (
    ACC_ERROR_CASES,
    BAD_GATES,
    BASE,
    ERROR_CASES,
    scen,
)

EXAMPLE = """\
defaults:
  warmup: {iterations: 20, seconds: 1}
  measure: {iterations: 300, seconds: 5, max_seconds: 60}
  threads: 2
  device: cpu
  gate: {p95: "+5%"}
models:
  minilm:
    factory: perfguard_examples.minilm:build
    kwargs: {seq_len: 64, sizes: [1, 2]}
    opset: 18
    inputs:
      input_ids: {shape: [1, 64], dtype: int64, low: 0, high: 30522, seed: 3}
      attention_mask: {shape: [1, 64], dtype: int64, fill: 1}
    outputs: [embedding]
  exported:
    onnx: models/model.onnx
    inputs_file: data/real.npz
scenarios:
  - name: minilm
    model: minilm
    backend: torch
    graph_optimization_level: basic
    warmup: {iterations: 10}
    stability_tolerance: 0.2
    tags: [nlp, smoke]
    gate: {p99: "+2ms", throughput: "-5%", peak_memory: "+50MiB"}
    matrix:
      precision: [fp32, int8]
      threads: [1, 4]
    exclude:
      - {precision: int8, threads: 4}
  - name: onnx-model
    model: exported
    backend: onnxruntime
"""


def write(directory: Path, text: str, name: str = "suite.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def marked_line(text: str) -> int:
    """The 1-based line carrying the `# <-` marker: where the error must point."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if "# <-" in line)


def load_error(path: Path) -> SuiteError:
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    return info.value


# --------------------------------------------------------------------------- happy paths


def test_example_expands_matrix_in_axis_order_minus_excludes(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, EXAMPLE))
    assert isinstance(suite, Suite)
    assert [sc.item_name for sc in suite.scenarios] == [
        "minilm[fp32-1]",
        "minilm[fp32-4]",
        "minilm[int8-1]",
        "onnx-model",
    ]
    first = suite.scenarios[0]
    assert first.matrix_values == (("precision", "fp32"), ("threads", "1"))
    assert first.threads == 1  # the matrix value beats `defaults: threads: 2`
    assert suite.scenarios[3].threads == 2
    assert suite.scenarios[3].cell_id == ""
    assert suite.scenarios[3].matrix_values == ()
    assert all(sc.error is None for sc in suite.scenarios)


def test_example_fields(tmp_path: Path) -> None:
    path = write(tmp_path, EXAMPLE)
    sc = load_suite(path).scenarios[0]
    assert sc.suite == path
    assert sc.location.path == path
    assert sc.location.line == EXAMPLE.splitlines().index("  - name: minilm") + 1
    assert (sc.backend, sc.device, sc.graph_optimization_level) == ("torch", "cpu", "basic")
    assert sc.warmup == LoopSpec(iterations=10, seconds=1.0)
    assert sc.measure == LoopSpec(iterations=300, seconds=5.0, max_seconds=60.0)
    assert sc.stability_tolerance == 0.2
    assert sc.tags == ("nlp", "smoke")
    assert sc.gates == (
        GateSpec("p95", 0.05),
        GateSpec("p99", 2.0, relative=False),
        GateSpec("throughput", 0.05, higher_is_worse=False),
        GateSpec("peak_memory", 50.0, relative=False),
    )
    model = sc.model
    assert model.name == "minilm"
    assert model.location.line == EXAMPLE.splitlines().index("  minilm:") + 1
    assert model.base_dir == tmp_path.resolve()
    assert model.factory == "perfguard_examples.minilm:build"
    assert model.factory_kwargs == (("seq_len", 64), ("sizes", (1, 2)))
    assert model.opset == 18
    assert model.output_names == ("embedding",)
    assert model.inputs == (
        InputSpec("input_ids", (1, 64), "int64", low=0, high=30522, seed=3),
        InputSpec("attention_mask", (1, 64), "int64", fill=1),
    )
    hash(sc)  # frozen and hashable, even with list-valued factory kwargs


def test_paths_are_relative_to_the_suite_and_not_checked(tmp_path: Path) -> None:
    sub = tmp_path / "suites"
    sub.mkdir()
    onnx_cell = load_suite(write(sub, EXAMPLE)).scenarios[-1]
    assert onnx_cell.model.onnx == sub.resolve() / "models" / "model.onnx"
    assert onnx_cell.model.inputs_file == sub.resolve() / "data" / "real.npz"
    assert not onnx_cell.model.onnx.exists()


def test_suite_path_is_kept_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, BASE)
    monkeypatch.chdir(tmp_path)
    suite = load_suite(Path("suite.yaml"))
    assert suite.path == Path("suite.yaml")
    assert suite.scenarios[0].suite == Path("suite.yaml")
    assert suite.scenarios[0].scenario_id() == "suite.yaml::s"
    assert suite.scenarios[0].model.base_dir == tmp_path.resolve()


def test_built_in_defaults(tmp_path: Path) -> None:
    (sc,) = load_suite(write(tmp_path, BASE)).scenarios
    defaults = Scenario(suite=sc.suite, name="s", cell_id="", model=sc.model, location=sc.location)
    assert sc == defaults
    assert sc.model.inputs == (InputSpec("x", (1, 4)),)
    assert sc.model.opset == 17
    assert sc.model.exporter == "torchscript"


@pytest.mark.parametrize(
    ("lines", "exporter", "opset"),
    [
        ("    exporter: torchscript\n", "torchscript", 17),
        ("    exporter: dynamo\n", "dynamo", 18),  # its own lowest opset, unless written
        ("    exporter: dynamo\n    opset: 20\n", "dynamo", 20),
        ("    opset: 20\n    exporter: dynamo\n", "dynamo", 20),
    ],
)
def test_a_model_chooses_its_exporter(
    tmp_path: Path, lines: str, exporter: str, opset: int
) -> None:
    text = BASE.replace("    inputs:", lines + "    inputs:")
    (sc,) = load_suite(write(tmp_path, text)).scenarios
    assert (sc.model.exporter, sc.model.opset) == (exporter, opset)


def test_defaults_merge_key_by_key(tmp_path: Path) -> None:
    text = """\
    defaults:
      warmup: {iterations: 20, seconds: 1}
      measure: {seconds: 4}
      precision: bf16
      gate: {p99: "+3ms", p95: "+8%"}
      tags: [base]
    models:
      m: {factory: "a:b", inputs: {x: {shape: [2]}}}
    scenarios:
      - name: a
        model: m
        warmup: {iterations: 5}
        gate: {p95: "+1%"}
        tags: [own]
      - name: b
        model: m
        precision: fp32
        measure: {max_seconds: 9}
    """
    a, b = load_suite(write(tmp_path, text)).scenarios
    assert a.warmup == LoopSpec(iterations=5, seconds=1.0)
    assert a.measure == LoopSpec(iterations=100, seconds=4.0)
    assert a.precision == "bf16"
    assert a.tags == ("own",)
    assert {g.metric: g.limit for g in a.gates} == {"p95": 0.01, "p99": 3.0}
    assert b.warmup == LoopSpec(iterations=20, seconds=1.0)
    assert b.measure == LoopSpec(iterations=100, seconds=4.0, max_seconds=9.0)
    assert b.precision == "fp32"
    assert b.tags == ("base",)
    assert {g.metric: g.limit for g in b.gates} == {"p95": 0.08, "p99": 3.0}


def test_yaml_anchors_and_merge_keys(tmp_path: Path) -> None:
    text = """\
    models:
      m: &model {factory: "a:b", inputs: {x: {shape: [2]}}}
      n:
        <<: *model
        factory: "c:d"
    scenarios:
      - &base {name: a, model: m, threads: 3}
      - {<<: *base, name: b, model: n}
    """
    a, b = load_suite(write(tmp_path, text)).scenarios
    assert (a.model.factory, b.model.factory) == ("a:b", "c:d")
    assert b.threads == 3 and b.name == "b"


def test_exclude_drops_partial_cells(tmp_path: Path) -> None:
    text = BASE + textwrap.indent(
        "matrix:\n"
        "  backend: [torch, onnxruntime]\n"
        "  precision: [fp32, int8]\n"
        "  device: [cpu, 'cuda:1']\n"
        "exclude:\n"
        "  - {device: 'cuda:1'}\n"
        "  - {backend: torch, precision: int8}\n",
        "    ",
    )
    ids = [sc.cell_id for sc in load_suite(write(tmp_path, text)).scenarios]
    assert ids == ["torch-fp32-cpu", "onnxruntime-fp32-cpu", "onnxruntime-int8-cpu"]


@pytest.mark.parametrize(
    ("metric", "text", "expected"),
    [
        ("p95", "+5%", GateSpec("p95", 0.05)),
        ("p90", "+0.5%", GateSpec("p90", 0.005)),
        ("p50", "+0%", GateSpec("p50", 0.0)),
        ("p99", "+2ms", GateSpec("p99", 2.0, relative=False)),
        ("p50", "+500us", GateSpec("p50", 0.5, relative=False)),
        ("p999", "+1s", GateSpec("p999", 1000.0, relative=False)),
        ("throughput", "-5%", GateSpec("throughput", 0.05, higher_is_worse=False)),
        ("throughput", "-100/s", GateSpec("throughput", 100.0, False, False)),
        ("peak_memory", "+50MiB", GateSpec("peak_memory", 50.0, relative=False)),
        ("peak_memory", "+1GiB", GateSpec("peak_memory", 1024.0, relative=False)),
        ("peak_memory", "+512KiB", GateSpec("peak_memory", 0.5, relative=False)),
        ("peak_memory", "+10%", GateSpec("peak_memory", 0.1)),
    ],
)
def test_gate_parsing(tmp_path: Path, metric: str, text: str, expected: GateSpec) -> None:
    path = write(tmp_path, BASE + f'    gate: {{{metric}: "{text}"}}\n')
    gates = {g.metric: g for g in load_suite(path).scenarios[0].gates}
    got = gates[metric]
    assert (got.relative, got.higher_is_worse) == (expected.relative, expected.higher_is_worse)
    assert got.limit == pytest.approx(expected.limit)
    if metric != "p95":
        assert gates["p95"] == GateSpec("p95", 0.05)  # the default gate stays


def test_mean_gate_is_refused_at_its_line_with_the_fix(tmp_path: Path) -> None:
    # Every comparison used to come back `invalid` for a `mean` gate the loader accepted.
    text = BASE + '    gate:\n      mean: "+5%"  # <-\n'
    path = write(tmp_path, text)
    message = str(load_error(path))
    assert f"{path}:{marked_line(text)}: unknown key `mean` in" in message
    assert "`p999`" in message  # the expected keys come from the policy's table
    assert "gate `p50` for the typical request or `p95` for the tail" in message.split(". Fix: ")[1]


@pytest.mark.parametrize(("metric", "value", "fix"), BAD_GATES)
def test_bad_gate(tmp_path: Path, metric: str, value: str, fix: str) -> None:
    text = BASE + f"    gate:\n      {metric}: {value}  # <-\n"
    path = write(tmp_path, text)
    message = str(load_error(path))
    assert f"{path}:{marked_line(text)}: gate `{metric}`" in message
    assert "; expected a quoted string like" in message
    assert f"`{fix}`" in message.split(". Fix: ")[1]


def test_unsupported_combinations_fail_only_their_cell(tmp_path: Path) -> None:
    text = """\
    models:
      m: {factory: "a:b", inputs: {x: {shape: [2]}}}
      o: {onnx: m.onnx, inputs_file: x.npz}
    scenarios:
      - name: grid
        model: m
        matrix:
          backend: [torch, onnxruntime]
          precision: [fp32, fp16, bf16, int8]
          device: [cpu, cuda]
      - name: file
        model: o
        matrix: {backend: [onnxruntime, torch]}
    """
    path = write(tmp_path, text)
    cells = {sc.item_name: sc for sc in load_suite(path).scenarios}
    assert len(cells) == 18
    broken = {name for name, sc in cells.items() if sc.error is not None}
    assert broken == {
        "grid[onnxruntime-bf16-cpu]",
        "grid[onnxruntime-bf16-cuda]",
        "grid[torch-int8-cuda]",
        "grid[onnxruntime-int8-cuda]",
        "file[torch]",
    }
    for name in broken:
        sc = cells[name]
        assert sc.error is not None
        assert sc.error.startswith(f"{path}:{sc.location.line}: cell `{name}`")
        assert "; expected " in sc.error and ". Fix: " in sc.error
    bf16 = cells["grid[onnxruntime-bf16-cpu]"].error
    assert bf16 is not None and "backend `torch` for bf16" in bf16
    # fp16 runs on ONNX Runtime (cast model); bf16 does not.
    assert cells["grid[onnxruntime-fp16-cpu]"].error is None
    int8 = cells["grid[torch-int8-cuda]"].error
    assert int8 is not None and "CPU dynamic quantization" in int8 and "`device: cpu`" in int8
    onnx = cells["file[torch]"].error
    assert onnx is not None and "`backend: onnxruntime`" in onnx
    # torch int8 on cpu is dynamic quantization: allowed.
    assert cells["grid[torch-int8-cpu]"].error is None


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("text", "fragments"), ERROR_CASES)
def test_errors_point_at_the_line(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = write(tmp_path, text)
    error = load_error(path)
    message = str(error)
    line = marked_line(text)
    assert error.location is not None
    assert (error.location.path, error.location.line) == (path, line), message
    assert message.startswith(f"{path}:{line}: "), message
    assert "; expected " in message and ". Fix: " in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_empty_file(tmp_path: Path) -> None:
    message = str(load_error(write(tmp_path, "# nothing here\n")))
    assert "suite.yaml:1: the suite file is empty" in message
    assert "`scenarios:`" in message


def test_missing_file(tmp_path: Path) -> None:
    error = load_error(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(error) and "cannot read" in str(error)


# --------------------------------------------------------------------------- properties

AXIS_VALUES: dict[str, st.SearchStrategy[Any]] = {
    # `server` needs a served model (tests/suite/test_suite_server.py)
    "backend": st.sampled_from([b for b in BACKENDS if b != SERVER_BACKEND]),
    "device": st.sampled_from(["cpu", "cuda", "cuda:0", "cuda:1"]),
    "precision": st.sampled_from(PRECISIONS),
    "threads": st.integers(1, 16),
    "graph_optimization_level": st.sampled_from(GRAPH_OPT_LEVELS),
}
AXES = tuple(AXIS_VALUES)
RESERVED = {"skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings"}
IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda s: s not in RESERVED and not s.startswith("x_")  # x_ names are the junk keys
)
GATES = {
    ("p95", "+5%"): GateSpec("p95", 0.05),
    ("p95", "+12%"): GateSpec("p95", 0.12),
    ("p90", "+0%"): GateSpec("p90", 0.0),
    ("p99", "+2ms"): GateSpec("p99", 2.0, relative=False),
    ("p50", "+250us"): GateSpec("p50", 0.25, relative=False),
    ("p999", "+1s"): GateSpec("p999", 1000.0, relative=False),
    ("throughput", "-5%"): GateSpec("throughput", 0.05, higher_is_worse=False),
    ("throughput", "-100/s"): GateSpec("throughput", 100.0, relative=False, higher_is_worse=False),
    ("peak_memory", "+50MiB"): GateSpec("peak_memory", 50.0, relative=False),
    ("peak_memory", "+1GiB"): GateSpec("peak_memory", 1024.0, relative=False),
}


@st.composite
def loop_settings(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["iterations"] = draw(st.integers(1, 1000))
    if draw(st.booleans()):
        out["seconds"] = draw(st.sampled_from([0, 0.25, 1, 2.5]))
    if draw(st.booleans()):
        # Above every drawn `seconds`: a loop that `max_seconds` would cut is an error.
        out["max_seconds"] = draw(st.sampled_from([3, 30.5, 600]))
    return out


@st.composite
def plain_settings(draw: st.DrawFn, axes: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for axis in axes:
        if draw(st.booleans()):
            out[axis] = draw(AXIS_VALUES[axis])
    for loop in ("warmup", "measure"):
        if draw(st.booleans()):
            out[loop] = draw(loop_settings())
    if draw(st.booleans()):
        out["stability_tolerance"] = draw(st.sampled_from([0.01, 0.1, 0.25, 0.99]))
    if draw(st.booleans()):
        out["tags"] = draw(st.lists(IDENT, max_size=3, unique=True))
    if draw(st.booleans()):
        picked = draw(
            st.lists(st.sampled_from(sorted(GATES)), max_size=3, unique_by=lambda g: g[0])
        )
        out["gate"] = dict(picked)
    return out


@st.composite
def input_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"shape": draw(st.lists(st.integers(1, 64), max_size=4))}
    if draw(st.booleans()):
        spec["dtype"] = draw(st.sampled_from(DTYPES))
    kind = draw(st.sampled_from(["none", "range", "fill"]))
    if kind == "range":
        low = draw(st.integers(-100, 100))
        spec["low"], spec["high"] = low, low + draw(st.integers(1, 1000))
    elif kind == "fill":
        spec["fill"] = draw(st.sampled_from([0, 1, 0.5, -3]))
    if draw(st.booleans()):
        spec["seed"] = draw(st.integers(0, 2**31))
    return spec


@st.composite
def model_specs(draw: st.DrawFn) -> dict[str, Any]:
    model: dict[str, Any] = (
        {"factory": "pkg.models:build"} if draw(st.booleans()) else {"onnx": "m/model.onnx"}
    )
    if draw(st.booleans()):
        model["inputs"] = draw(st.dictionaries(IDENT, input_specs(), min_size=1, max_size=3))
    else:
        model["inputs_file"] = "data/in.npz"
    return model


@st.composite
def exclude_entries(draw: st.DrawFn, matrix: dict[str, list[Any]]) -> dict[str, Any]:
    """A partial cell: some axes of the matrix, each with one of its values."""
    axes = draw(st.sets(st.sampled_from(sorted(matrix)), min_size=1))
    return {axis: draw(st.sampled_from(matrix[axis])) for axis in axes}


@st.composite
def suites(draw: st.DrawFn) -> dict[str, Any]:
    models = draw(st.dictionaries(IDENT, model_specs(), min_size=1, max_size=2))
    doc: dict[str, Any] = {}
    if draw(st.booleans()):
        doc["defaults"] = draw(plain_settings(AXES))
    doc["models"] = models
    scenarios = []
    for name in draw(st.lists(IDENT, min_size=1, max_size=3, unique=True)):
        permuted = draw(st.permutations(AXES))
        axes = permuted[: draw(st.integers(0, 3))]
        matrix = {
            a: draw(st.lists(AXIS_VALUES[a], min_size=1, max_size=3, unique=True)) for a in axes
        }
        scenario: dict[str, Any] = {"name": name, "model": draw(st.sampled_from(sorted(models)))}
        scenario.update(draw(plain_settings(tuple(a for a in AXES if a not in matrix))))
        if matrix:
            scenario["matrix"] = matrix
            if draw(st.booleans()):
                entries = st.lists(exclude_entries(matrix), min_size=1, max_size=3)
                scenario["exclude"] = draw(entries)
        scenarios.append(scenario)
    doc["scenarios"] = scenarios
    return doc


def expected_cells(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    matrix: dict[str, list[Any]] = scenario.get("matrix", {})
    cells = [
        dict(zip(matrix, values, strict=True)) for values in itertools.product(*matrix.values())
    ]
    excludes = scenario.get("exclude", [])
    return [c for c in cells if not any(all(c[k] == v for k, v in e.items()) for e in excludes)]


def dump(doc: dict[str, Any], directory: str) -> Path:
    path = Path(directory) / "suite.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    return path


def check_cell(
    sc: Scenario, doc: dict[str, Any], scenario: dict[str, Any], cell: dict[str, Any]
) -> None:
    defaults = doc.get("defaults", {})
    base = Scenario(suite=sc.suite, name="", cell_id="", model=sc.model, location=sc.location)

    def value(key: str) -> Any:
        for layer in (cell, scenario, defaults):
            if key in layer:
                return layer[key]
        return getattr(base, key)

    assert sc.name == scenario["name"]
    assert sc.cell_id == "-".join(str(v) for v in cell.values())
    assert sc.matrix_values == tuple((k, str(v)) for k, v in cell.items())
    for key in (*AXES, "stability_tolerance"):
        assert getattr(sc, key) == value(key), key
    assert sc.tags == tuple(value("tags"))
    for loop in ("warmup", "measure"):
        merged = {**vars(getattr(base, loop)), **defaults.get(loop, {}), **scenario.get(loop, {})}
        assert getattr(sc, loop) == LoopSpec(**merged)
    gates = {g.metric: g for g in base.gates}
    for layer in (defaults, scenario):
        gates.update(
            {metric: GATES[metric, text] for metric, text in layer.get("gate", {}).items()}
        )
    assert {g.metric: g for g in sc.gates} == gates
    model = doc["models"][scenario["model"]]
    assert sc.model.name == scenario["model"]
    assert sc.model.factory == model.get("factory")
    expected_inputs = tuple(
        InputSpec(
            name,
            tuple(spec["shape"]),
            spec.get("dtype", "float32"),
            spec.get("low"),
            spec.get("high"),
            spec.get("fill"),
            spec.get("seed", 0),
        )
        for name, spec in model.get("inputs", {}).items()
    )
    assert sc.model.inputs == expected_inputs
    on_gpu = sc.device.startswith("cuda")
    unsupported = (
        ("onnx" in model and sc.backend == "torch")
        or (sc.backend == "onnxruntime" and sc.precision == "bf16")
        or (sc.backend == "tensorrt" and not on_gpu)
        or (sc.precision == "int8" and on_gpu and sc.backend != "tensorrt")
        or (sc.precision == "int4" and not (sc.backend == "onnxruntime" and sc.generate))
    )
    assert (sc.error is not None) == unsupported


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=suites())
def test_generated_suites_round_trip(doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = dump(doc, directory)
        cells = [expected_cells(scenario) for scenario in doc["scenarios"]]
        if not all(cells):
            with pytest.raises(SuiteError, match="drops every cell"):
                load_suite(path)
            return
        loaded = load_suite(path).scenarios
    assert len(loaded) == sum(len(c) for c in cells)
    expected = [
        (s, cell) for s, group in zip(doc["scenarios"], cells, strict=True) for cell in group
    ]
    for sc, (scenario, cell) in zip(loaded, expected, strict=True):
        check_cell(sc, doc, scenario, cell)


def fixed_schema_mappings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every mapping in a generated suite whose keys are fixed by the format."""
    found: list[dict[str, Any]] = [doc]
    if "defaults" in doc:
        defaults = doc["defaults"]
        found.append(defaults)
        found += [defaults[k] for k in ("warmup", "measure", "gate") if k in defaults]
    for model in doc["models"].values():
        found.append(model)
        found += list(model.get("inputs", {}).values())
    for scenario in doc["scenarios"]:
        found.append(scenario)
        found += [scenario[k] for k in ("warmup", "measure", "gate", "matrix") if k in scenario]
        found += scenario.get("exclude", [])
    return found


junk_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text("abc:", max_size=4),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=suites(), data=st.data(), junk=st.from_regex(r"x_[a-z]{1,8}", fullmatch=True))
def test_junk_keys_anywhere_are_reported_at_their_line(
    doc: dict[str, Any], data: st.DataObject, junk: str
) -> None:
    assume(all(expected_cells(scenario) for scenario in doc["scenarios"]))
    target = data.draw(st.sampled_from(fixed_schema_mappings(doc)))
    items = list(target.items())
    position = data.draw(st.integers(0, len(items)))
    items.insert(position, (junk, data.draw(junk_values)))
    target.clear()
    target.update(items)
    with tempfile.TemporaryDirectory() as directory:
        path = dump(doc, directory)
        text = path.read_text()
        line = next(
            i
            for i, row in enumerate(text.splitlines(), 1)
            if row.strip(" -").startswith(f"{junk}:")
        )
        with pytest.raises(SuiteError) as info:
            load_suite(path)
    message = str(info.value)
    assert f"`{junk}`" in message, message
    assert message.startswith(f"{path}:{line}: "), (message, text)


# --------------------------------------------------------------------------- accuracy, quantization

ACC_EXAMPLE = """\
defaults:
  accuracy:
    golden: 4
    gate: {nonfinite_max: 2, kl_max: 0.5}
quantizations:
  default: {}
  perchannel: {per_channel: true}
  static_entropy: {mode: static, calibration: entropy, calibration_samples: 32}
models:
  minilm:
    factory: perfguard_examples.minilm:build
    inputs:
      input_ids: {shape: [1, 64], dtype: int64, low: 0, high: 30522}
    outputs: [embedding, logits]
scenarios:
  - name: minilm
    model: minilm
    matrix:
      backend: [torch, onnxruntime]
      precision: [fp32, int8]
      quantization: [default, perchannel]
    exclude:
      - {backend: torch, precision: int8}
      - {backend: torch, quantization: perchannel}
    accuracy:
      inputs: {count: 64, function: perfguard_examples.sentences:tokenized}
      labels: data/labels.npy
      reference: {precision: fp32, backend: torch, quantization: default}
      baseline: false
      golden: 16
      outputs: [embedding, 1]
      kl: {on: probabilities, temperature: 2}
      gate: {cosine_min: 0.99, cosine_mean_min: 0.995, kl_max: 0.01, topk: 5,
             topk_agreement_min: 0.99, max_abs_err: 1e-3, mean_abs_err: 1.0e-4,
             max_rel_err: 0.05, baseline_cosine_min: null}
      per_output:
        logits: {kl_max: 0.02}
        0: {cosine_min: 0.9}
      task: {function: mymetrics:accuracy, higher_is_better: false, drop_max: 0.5}
  - name: static
    model: minilm
    backend: onnxruntime
    precision: int8
    quantization: static_entropy
    accuracy:
      inputs: {count: 32, seed: 7}
"""


def test_accuracy_example(tmp_path: Path) -> None:
    cells = {sc.item_name: sc for sc in load_suite(write(tmp_path, ACC_EXAMPLE)).scenarios}
    assert list(cells) == [
        "minilm[torch-fp32-default]",
        "minilm[onnxruntime-fp32-default]",
        "minilm[onnxruntime-fp32-perchannel]",
        "minilm[onnxruntime-int8-default]",
        "minilm[onnxruntime-int8-perchannel]",
        "static",
    ]
    assert all(sc.error is None for sc in cells.values()), [sc.error for sc in cells.values()]
    ort = cells["minilm[onnxruntime-int8-perchannel]"]
    assert ort.matrix_values[-1] == ("quantization", "perchannel")
    assert ort.quantization == QuantSpec(name="perchannel", per_channel=True)
    assert cells["minilm[onnxruntime-int8-default]"].quantization == QuantSpec()
    acc = ort.accuracy
    assert acc is not None
    assert acc.inputs == AccuracyInputs(
        count=64,
        function="perfguard_examples.sentences:tokenized",
        labels=tmp_path.resolve() / "data" / "labels.npy",
    )
    assert acc.reference == (
        ("backend", "torch"),
        ("precision", "fp32"),
        ("quantization", "default"),
    )
    assert (acc.against_baseline, acc.golden, acc.outputs) == (False, 16, ("embedding", "1"))
    assert (acc.kl_on, acc.temperature) == ("probabilities", 2.0)
    gates = AccuracyGates(
        cosine_min=0.99, cosine_mean_min=0.995, kl_max=0.01, topk=5, topk_agreement_min=0.99,
        max_abs_err=1e-3, mean_abs_err=1e-4, max_rel_err=0.05, nonfinite_max=2,
        baseline_cosine_min=None,
    )  # fmt: skip
    assert acc.gates == gates
    assert acc.per_output == (
        ("logits", dataclasses.replace(gates, kl_max=0.02)),
        ("0", dataclasses.replace(gates, cosine_min=0.9)),
    )
    assert acc.task == TaskMetricSpec("mymetrics:accuracy", higher_is_better=False, drop_max=0.5)
    # The reference cell itself has no reference; the rest of its spec is the same.
    torch_acc = cells["minilm[torch-fp32-default]"].accuracy
    assert torch_acc is not None and torch_acc.reference == ()
    assert dataclasses.replace(torch_acc, reference=acc.reference) == acc
    static = cells["static"]
    assert static.quantization == QuantSpec(
        "static_entropy", mode="static", calibration="entropy", calibration_samples=32
    )
    assert static.accuracy == AccuracySpec(
        inputs=AccuracyInputs(count=32, seed=7),
        golden=4,
        gates=AccuracyGates(nonfinite_max=2, kl_max=0.5),
    )
    hash(ort)


def test_the_documented_example_loads(tmp_path: Path) -> None:
    doc = suite_accuracy.__doc__ or ""
    example = textwrap.dedent(doc.split("Format::\n")[1].split("\nRules:")[0])
    models = "models:\n  minilm: {factory: 'a:b', inputs: {x: {shape: [1, 4]}}}\n"
    cells = load_suite(write(tmp_path, models + example)).scenarios
    assert [sc.item_name for sc in cells] == [
        "minilm[torch-fp32-default]",
        "minilm[onnxruntime-fp32-default]",
        "minilm[onnxruntime-fp32-perchannel]",
        "minilm[onnxruntime-int8-default]",
        "minilm[onnxruntime-int8-perchannel]",
        "minilm-static",
    ]
    assert all(sc.error is None and sc.accuracy is not None for sc in cells)
    assert cells[-1].quantization.calibration == "entropy"
    assert cells[-1].accuracy is not None and cells[-1].accuracy.golden == 8


def test_no_accuracy_and_default_quantization(tmp_path: Path) -> None:
    (sc,) = load_suite(write(tmp_path, BASE)).scenarios
    assert sc.accuracy is None and sc.quantization == QuantSpec()
    (sc,) = load_suite(write(tmp_path, scen("accuracy: {}\n"))).scenarios
    assert sc.accuracy == AccuracySpec()


def test_accuracy_merges_over_defaults_and_false_turns_it_off(tmp_path: Path) -> None:
    text = """\
    defaults:
      accuracy:
        inputs: {function: "a:b"}
        golden: 3
        gate: {cosine_min: 0.9, kl_max: 0.1}
        per_output: {y: {kl_max: 1}}
    models:
      m: {factory: "a:b", inputs: {x: {shape: [2]}}}
    scenarios:
      - name: merged
        model: m
        accuracy:
          inputs: {count: 5}
          gate: {kl_max: 0.2, baseline_cosine_min: null}
          per_output: {z: {topk: 3}}
      - name: disabled
        model: m
        accuracy: false
      - name: inherited
        model: m
    """
    merged, off, inherited = load_suite(write(tmp_path, text)).scenarios
    assert merged.accuracy is not None and inherited.accuracy is not None
    assert merged.accuracy.inputs == AccuracyInputs(count=5)  # `inputs` replaces as a whole
    assert merged.accuracy.golden == 3
    gates = AccuracyGates(cosine_min=0.9, kl_max=0.2, baseline_cosine_min=None)
    assert merged.accuracy.gates == gates  # limit by limit
    assert merged.accuracy.per_output == (
        ("y", dataclasses.replace(gates, kl_max=1.0)),
        ("z", dataclasses.replace(gates, topk=3)),
    )
    assert off.accuracy is None
    assert inherited.accuracy.inputs == AccuracyInputs(function="a:b")
    assert inherited.accuracy.gates == AccuracyGates(cosine_min=0.9, kl_max=0.1)


def test_quantization_key_presets_and_inline(tmp_path: Path) -> None:
    text = """\
    defaults:
      quantization: pc
    quantizations:
      default: {reduce_range: true}
      pc: {per_channel: true, weight_type: quint8}
    models:
      m: {factory: "a:b", inputs: {x: {shape: [2]}}}
    scenarios:
      - {name: preset, model: m, backend: onnxruntime, precision: int8}
      - name: inline
        model: m
        backend: onnxruntime
        precision: int8
        quantization: {mode: static, activation_type: qint8, calibration: percentile}
        accuracy: {inputs: {count: 4}}
      - {name: fp32, model: m, backend: onnxruntime, quantization: default}
    """
    preset, inline, fp32 = load_suite(write(tmp_path, text)).scenarios
    assert preset.quantization == QuantSpec("pc", per_channel=True, weight_type="quint8")
    assert inline.quantization == QuantSpec(
        "custom", mode="static", activation_type="qint8", calibration="percentile"
    )
    assert fp32.quantization == QuantSpec("default", reduce_range=True)  # redefined default
    assert [sc.error for sc in (preset, inline, fp32)] == [None, None, None]


def test_reference_with_plain_keys_and_partial_overrides(tmp_path: Path) -> None:
    text = BASE + textwrap.indent(
        "backend: onnxruntime\n"
        "matrix:\n"
        "  precision: [fp32, int8]\n"
        "  threads: [1, 2]\n"
        "accuracy:\n"
        "  reference: {precision: fp32, backend: onnxruntime}\n",
        "    ",
    )
    refs = {
        sc.cell_id: sc.accuracy.reference
        for sc in load_suite(write(tmp_path, text)).scenarios
        if sc.accuracy
    }
    pairs = (("backend", "onnxruntime"), ("precision", "fp32"))
    assert refs == {"fp32-1": (), "fp32-2": (), "int8-1": pairs, "int8-2": pairs}
    text = text.replace("{precision: fp32, backend: onnxruntime}", "{threads: 1}")
    refs = {
        sc.cell_id: sc.accuracy.reference
        for sc in load_suite(write(tmp_path, text)).scenarios
        if sc.accuracy
    }
    assert refs == {
        "fp32-1": (),
        "fp32-2": (("threads", "1"),),
        "int8-1": (),
        "int8-2": (("threads", "1"),),
    }


def test_quantization_cell_errors(tmp_path: Path) -> None:
    text = """\
    quantizations:
      pc: {per_channel: true}
      plain: {}
      st: {mode: static}
      st64: {mode: static, calibration_samples: 64}
    models:
      m: {factory: "a:b", inputs: {x: {shape: [2]}}}
    scenarios:
      - name: grid
        model: m
        matrix:
          backend: [torch, onnxruntime]
          precision: [fp32, int8]
          quantization: [default, plain, pc, st]
      - name: with-inputs
        model: m
        matrix: {quantization: [st, st64]}
        backend: onnxruntime
        precision: int8
        accuracy: {inputs: {count: 32}}
      - name: accuracy-without-inputs
        model: m
        backend: onnxruntime
        precision: int8
        quantization: st
        accuracy: {golden: 1}
    """
    path = write(tmp_path, text)
    cells = {sc.item_name: sc for sc in load_suite(path).scenarios}
    broken = {name: sc.error for name, sc in cells.items() if sc.error}
    assert set(broken) == {
        "grid[torch-int8-pc]",
        "grid[torch-int8-st]",
        "grid[onnxruntime-int8-st]",
        "with-inputs[st64]",
        "accuracy-without-inputs",
    }
    for name, error in broken.items():
        assert error.startswith(f"{path}:{cells[name].location.line}: cell `{name}`"), error
        assert "; expected " in error and ". Fix: " in error
    assert "always dynamic per-tensor" in broken["grid[torch-int8-pc]"]
    assert "`backend: onnxruntime`" in broken["grid[torch-int8-st]"]
    assert "no `accuracy.inputs`" in broken["grid[onnxruntime-int8-st]"]
    assert "no `accuracy.inputs`" in broken["accuracy-without-inputs"]
    assert "calibrates on 64 of 32 accuracy inputs" in broken["with-inputs[st64]"]
    # Quantization is ignored on fp32 cells, even a static preset without inputs.
    assert cells["grid[onnxruntime-fp32-st]"].quantization.mode == "static"


def test_exclude_on_the_quantization_axis(tmp_path: Path) -> None:
    text = "quantizations: {pc: {per_channel: true}}\n" + scen(
        "matrix:\n"
        "  backend: [torch, onnxruntime]\n"
        "  quantization: [default, pc]\n"
        "exclude: [{backend: torch, quantization: pc}]\n"
    )
    ids = [sc.cell_id for sc in load_suite(write(tmp_path, text)).scenarios]
    assert ids == ["torch-default", "onnxruntime-default", "onnxruntime-pc"]


@pytest.mark.parametrize(("text", "fragments"), ACC_ERROR_CASES)
def test_accuracy_errors_point_at_the_line(tmp_path: Path, text: str, fragments: list[str]) -> None:
    test_errors_point_at_the_line(tmp_path, text, fragments)


LIMITS: dict[str, st.SearchStrategy[Any]] = {
    "cosine_min": st.floats(-1, 1) | st.none(),
    "cosine_mean_min": st.floats(-1, 1),
    "baseline_cosine_min": st.floats(-1, 1) | st.none(),
    "topk_agreement_min": st.floats(0, 1),
    "kl_max": st.floats(0, 1e6) | st.none(),
    "max_abs_err": st.floats(0, 1e6),
    "mean_abs_err": st.sampled_from([0, 1e-4, 0.5, 1e-12, 3]),
    "max_rel_err": st.floats(0, 10),
    "topk": st.integers(1, 100),
    "nonfinite_max": st.integers(0, 100),
}
gate_dicts = st.dictionaries(st.sampled_from(sorted(LIMITS)), st.none(), max_size=6).flatmap(
    lambda keys: st.fixed_dictionaries({k: LIMITS[k] for k in keys})
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(defaults=gate_dicts, own=gate_dicts, per=gate_dicts)
def test_accuracy_gates_round_trip(
    defaults: dict[str, Any], own: dict[str, Any], per: dict[str, Any]
) -> None:
    doc = yaml.safe_load(BASE)
    doc["defaults"] = {"accuracy": {"gate": defaults}}
    doc["scenarios"][0]["accuracy"] = {"gate": own, "per_output": {"out": per}}
    with tempfile.TemporaryDirectory() as directory:
        (sc,) = load_suite(dump(doc, directory)).scenarios
    assert sc.accuracy is not None
    gates = AccuracyGates(**{**defaults, **own})
    assert sc.accuracy.gates == gates
    assert sc.accuracy.per_output == (("out", dataclasses.replace(gates, **per)),)


def test_keep_fp32_names_op_types_or_nodes_and_a_bad_item_is_located(tmp_path: Path) -> None:
    text = EXAMPLE.replace(
        "    backend: onnxruntime\n",
        "    backend: onnxruntime\n"
        "    keep_fp32: [LayerNormalization, head/MatMul, LayerNormalization]\n",
    )
    by_name = {sc.name: sc for sc in load_suite(write(tmp_path, text)).scenarios}
    assert by_name["onnx-model"].keep_fp32 == ("LayerNormalization", "head/MatMul")
    assert by_name["minilm"].keep_fp32 is None  # the backend's default
    bad = EXAMPLE.replace(
        "    backend: onnxruntime\n", '    backend: onnxruntime\n    keep_fp32: ["  "]  # <-\n'
    )
    error = load_error(write(tmp_path, bad, "bad.yaml"))
    assert error.location is not None and error.location.line == marked_line(bad)
    assert "keep_fp32" in str(error) and "LayerNormalization" in str(error.fix)
