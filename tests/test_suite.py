"""Tests for perfguard.suite: matrix expansion, defaults, gates and every error path."""

from __future__ import annotations

import itertools
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from perfguard.errors import SuiteError
from perfguard.scenario import (
    BACKENDS,
    DTYPES,
    GRAPH_OPT_LEVELS,
    PRECISIONS,
    GateSpec,
    InputSpec,
    LoopSpec,
    Scenario,
)
from perfguard.suite import Suite, load_suite

BASE = """\
models:
  m:
    factory: pkg.mod:build
    inputs:
      x: {shape: [1, 4]}
scenarios:
  - name: s
    model: m
"""

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
        ("mean", "+1s", GateSpec("mean", 1000.0, relative=False)),
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


@pytest.mark.parametrize(
    ("metric", "value", "fix"),
    [
        ("p95", "5", 'p95: "+5%"'),
        ("throughput", "5", 'throughput: "-5%"'),
        ("p95", '"-5%"', 'p95: "+5%"'),
        ("p95", '"5%"', 'p95: "+5%"'),
        ("p99", '"-2ms"', 'p99: "+2ms"'),
        ("throughput", '"+5%"', 'throughput: "-5%"'),
        ("throughput", '"+100/s"', 'throughput: "-100/s"'),
        ("peak_memory", '"-50MiB"', 'peak_memory: "+50MiB"'),
        ("p99", '"+5MiB"', 'p99: "+2ms"'),
        ("peak_memory", '"+5ms"', 'peak_memory: "+50MiB"'),
        ("throughput", '"-5ms"', 'throughput: "-100/s"'),
        ("p95", '"+5"', 'p95: "+5%"'),
        ("p95", "fast", 'p95: "+5%"'),
        ("p95", "true", 'p95: "+5%"'),
    ],
)
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
        "grid[onnxruntime-fp16-cpu]",
        "grid[onnxruntime-fp16-cuda]",
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
    fp16 = cells["grid[onnxruntime-fp16-cpu]"].error
    assert fp16 is not None and "backend `torch` for fp16" in fp16
    int8 = cells["grid[torch-int8-cuda]"].error
    assert int8 is not None and "CPU dynamic quantization" in int8 and "`device: cpu`" in int8
    onnx = cells["file[torch]"].error
    assert onnx is not None and "`backend: onnxruntime`" in onnx
    # torch int8 on cpu is dynamic quantization: allowed.
    assert cells["grid[torch-int8-cpu]"].error is None


# --------------------------------------------------------------------------- errors


def scen(lines: str) -> str:
    """BASE with ``lines`` added to its scenario (indented to the scenario's keys)."""
    return BASE + textwrap.indent(lines, "    ")


def edit(old: str, new: str) -> str:
    assert old in BASE
    return BASE.replace(old, new)


def inp(spec: str) -> str:
    """BASE with the input spec of `x` replaced, the error expected on its line."""
    return edit("{shape: [1, 4]}", spec + "  # <-")


M = edit("    factory: pkg.mod:build\n", "")  # a model without factory/onnx


def case(case_id: str, text: str, *fragments: str) -> Any:
    return pytest.param(text, list(fragments), id=case_id)


ERROR_CASES = [
    case(
        "scenario-key",
        scen("warmpu: {iterations: 3}  # <-\n"),
        "`warmpu`",
        "did you mean `warmup`?",
    ),
    case(
        "loop-key",
        scen("warmup: {iteratons: 3}  # <-\n"),
        "`iteratons`",
        "did you mean `iterations`?",
    ),
    case("top-key", "modles: {}  # <-\n" + BASE, "`modles`", "did you mean `models`?"),
    case(
        "defaults-key",
        "defaults:\n  thread: 2  # <-\n" + BASE,
        "`thread`",
        "did you mean `threads`?",
    ),
    case(
        "defaults-name",
        "defaults:\n  name: x  # <-\n" + BASE,
        "`name`",
        "set `name` on each scenario",
    ),
    case(
        "model-key",
        edit("    inputs:", "    ouputs: [y]  # <-\n    inputs:"),
        "`ouputs`",
        "did you mean `outputs`?",
    ),
    case("input-key", inp("{shape: [1, 4], dtpye: int8}"), "`dtpye`", "did you mean `dtype`?"),
    case("gate-metric", scen('gate: {p96: "+5%"}  # <-\n'), "`p96`", "did you mean `p99`?"),
    case(
        "bool-threads",
        scen("threads: true  # <-\n"),
        "`threads`",
        "`True` (bool)",
        "an integer >= 1",
    ),
    case("zero-threads", scen("threads: 0  # <-\n"), "`threads`", "an integer >= 1"),
    case("str-threads", scen("threads: '2'  # <-\n"), "`threads`", "(str)", "an integer >= 1"),
    case(
        "zero-iterations",
        scen("measure: {iterations: 0}  # <-\n"),
        "`iterations`",
        "an integer >= 1",
    ),
    case(
        "negative-iterations",
        scen("warmup: {iterations: -3}  # <-\n"),
        "`iterations`",
        "an integer >= 1",
    ),
    case(
        "float-iterations",
        scen("measure: {iterations: 2.5}  # <-\n"),
        "`iterations`",
        "an integer >= 1",
    ),
    case("negative-seconds", scen("measure: {seconds: -1}  # <-\n"), "`seconds`", "a number >= 0"),
    case("bool-seconds", scen("measure: {seconds: yes}  # <-\n"), "`seconds`", "a number >= 0"),
    case(
        "zero-max-seconds",
        scen("measure: {max_seconds: 0}  # <-\n"),
        "`max_seconds`",
        "a number > 0",
    ),
    case(
        "tolerance",
        scen("stability_tolerance: 1  # <-\n"),
        "`stability_tolerance`",
        "0 < x < 1",
    ),
    case("loop-not-mapping", scen("warmup: 10  # <-\n"), "`warmup`", "expected a mapping"),
    case(
        "backend",
        scen("backend: pytorch  # <-\n"),
        "`pytorch`",
        "one of `torch`, `onnxruntime`",
        "did you mean `torch`?",
    ),
    case("precision", scen("precision: fp33  # <-\n"), "`fp33`", "did you mean `fp32`?"),
    case("graph-opt", scen("graph_optimization_level: ful  # <-\n"), "`ful`", "one of `disable`"),
    case("device", scen("device: gpu  # <-\n"), "`gpu`", "`cpu`, `cuda` or `cuda:N`", "`cuda:0`"),
    case("device-index", scen("device: 'cuda:x'  # <-\n"), "`cuda:x`", "`cuda:N`"),
    case(
        "tag-ident", scen("tags: [nlp, 2fast]  # <-\n"), "`2fast`", "not an identifier", "`_2fast`"
    ),
    case("tag-line", scen("tags:\n  - ok\n  - has-dash  # <-\n"), "`has-dash`", "`has_dash`"),
    case("tag-reserved", scen("tags: [skip]  # <-\n"), "`skip`", "built-in pytest marker"),
    case("tags-not-list", scen("tags: nlp  # <-\n"), "`tags`", "expected a list"),
    case(
        "unknown-model",
        edit("model: m", "model: mm  # <-"),
        "`mm`",
        "did you mean `m`?",
        "defined under `models:`",
    ),
    case("missing-model", edit("name: s\n    model: m", "name: s  # <-"), "has no `model`"),
    case("missing-name", edit("  - name: s\n", "  - threads: 1  # <-\n"), "has no `name`"),
    case("bad-name", edit("name: s", "name: 'a b'  # <-"), "`a b`", "`a_b`"),
    case(
        "dup-name",
        BASE + "  - name: s  # <-\n    model: m\n",
        "`s` is used twice",
        "first at line 7",
    ),
    case(
        "factory-and-onnx",
        edit("  m:", "  m:  # <-\n    onnx: a.onnx"),
        "both `factory` and `onnx`",
        "exactly one of",
    ),
    case(
        "no-factory",
        M.replace("  m:", "  m:  # <-"),
        "neither `factory` nor `onnx`",
        "exactly one of",
    ),
    case(
        "inputs-and-file",
        edit("  m:", "  m:  # <-\n    inputs_file: a.npz"),
        "both `inputs` and `inputs_file`",
    ),
    case(
        "factory-form",
        edit("factory: pkg.mod:build", "factory: pkg.mod.build  # <-"),
        "`module:function`",
        "`pkg.mod:build`",
    ),
    case(
        "factory-space",
        edit("factory: pkg.mod:build", "factory: 'pkg mod:build'  # <-"),
        "`module:function`",
    ),
    case(
        "opset-on-onnx",
        edit("factory: pkg.mod:build", "onnx: a.onnx\n    opset: 13  # <-"),
        "`opset`",
        "only on `factory:` models",
    ),
    case(
        "bool-opset",
        edit("    inputs:", "    opset: true  # <-\n    inputs:"),
        "`opset`",
        "an integer >= 1",
    ),
    case(
        "kwargs-list",
        edit("    inputs:", "    kwargs: [1]  # <-\n    inputs:"),
        "`kwargs`",
        "a mapping",
    ),
    case(
        "zero-dim",
        edit("[1, 4]", "[1, 0]}  # <-\n      y: {shape: [1]"),
        "dimension 1 of `shape`",
        "an integer >= 1",
    ),
    case(
        "negative-dim",
        edit("[1, 4]", "[-1, 4]}  # <-\n      y: {shape: [1]"),
        "dimension 0 of `shape`",
        "`-1`",
    ),
    case(
        "bool-dim",
        edit("[1, 4]", "[1, true]}  # <-\n      y: {shape: [1]"),
        "dimension 1",
        "(bool)",
    ),
    case("no-shape", inp("{dtype: int8}"), "has no `shape`", "`shape: [1, 64]`"),
    case(
        "dtype",
        inp("{shape: [1], dtype: flaot32}"),
        "`flaot32`",
        "did you mean `float32`?",
        "`bfloat16`",
    ),
    case("low-ge-high", inp("{shape: [1], low: 5, high: 5}"), "low=5 >= high=5", "low < high"),
    case("low-only", inp("{shape: [1], low: 5}"), "`low` but no `high`"),
    case(
        "fill-and-range",
        inp("{shape: [1], low: 0, high: 2, fill: 1}"),
        "both `fill` and `low`/`high`",
    ),
    case("negative-seed", inp("{shape: [1], seed: -1}"), "`seed`", "an integer >= 0"),
    case("nan-fill", inp("{shape: [1], fill: .nan}"), "`fill`", "a finite number"),
    case(
        "matrix-axis",
        scen("matrix:\n  backends: [torch]  # <-\n"),
        "`backends` is not a matrix axis",
        "did you mean `backend`?",
    ),
    case(
        "matrix-non-axis",
        scen("matrix:\n  stability_tolerance: [0.1]  # <-\n"),
        "not a matrix axis",
    ),
    case("matrix-empty-list", scen("matrix:\n  backend: []  # <-\n"), "`backend`", "an empty list"),
    case("matrix-empty", scen("matrix: {}  # <-\n"), "`matrix`", "is empty"),
    case("matrix-not-list", scen("matrix:\n  backend: torch  # <-\n"), "expected a list"),
    case(
        "matrix-value",
        scen("matrix:\n  backend:\n    - torch\n    - tensorrt  # <-\n"),
        "`tensorrt`",
        "one of `torch`",
    ),
    case(
        "matrix-duplicate", scen("matrix:\n  threads:\n    - 1\n    - 1  # <-\n"), "lists `1` twice"
    ),
    case(
        "axis-and-key",
        scen("backend: torch  # <-\nmatrix: {backend: [torch]}\n"),
        "both as a key and as a matrix axis",
    ),
    case(
        "exclude-axis",
        scen("matrix: {backend: [torch]}\nexclude:\n  - {precision: fp32}  # <-\n"),
        "axis `precision`",
        "one of `backend`",
    ),
    case(
        "exclude-value",
        scen("matrix: {backend: [torch, onnxruntime]}\nexclude:\n  - {backend: torhc}  # <-\n"),
        "`torhc`",
        "did you mean `torch`?",
    ),
    case(
        "exclude-empty-entry",
        scen("matrix: {backend: [torch]}\nexclude:\n  - {}  # <-\n"),
        "is empty",
    ),
    case(
        "exclude-everything",
        scen("matrix: {backend: [torch]}\nexclude:  # <-\n  - {backend: torch}\n"),
        "drops every cell",
    ),
    case(
        "exclude-no-matrix",
        scen("exclude: [{backend: torch}]  # <-\n"),
        "`exclude` but no `matrix`",
    ),
    case("no-scenarios", "models: {}  # <-\n", "no `scenarios`"),
    case("empty-scenarios", "models: {}\nscenarios: []  # <-\n", "`scenarios` is empty"),
    case("top-list", "- 1  # <-\n", "top level", "a list", "expected a mapping"),
    case("scenario-not-mapping", BASE + "  - 5  # <-\n", "scenario #2", "expected a mapping"),
    case(
        "duplicate-key",
        scen("backend: torch\nbackend: onnxruntime  # <-\n"),
        "`backend` appears again (first at line 9)",
        "remove or rename",
    ),
    case(
        "yaml-flow",
        scen("backend: [torch  # <-\n"),
        "malformed YAML",
        "indentation, brackets and quotes",
    ),
    case("yaml-indent", BASE + "    tags: [a]\n   bad: 1  # <-\n", "malformed YAML", "indentation"),
    case(
        "unsafe-tag",
        scen("threads: !!python/object:os.system 1  # <-\n"),
        "malformed YAML",
        "python/object",
    ),
]


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
    "backend": st.sampled_from(BACKENDS),
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
    ("mean", "+1s"): GateSpec("mean", 1000.0, relative=False),
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
        out["max_seconds"] = draw(st.sampled_from([1, 30.5, 600]))
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
    unsupported = (
        ("onnx" in model and sc.backend == "torch")
        or (sc.backend == "onnxruntime" and sc.precision in ("fp16", "bf16"))
        or (sc.precision == "int8" and sc.device.startswith("cuda"))
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
