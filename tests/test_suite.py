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
    AccuracyGates,
    AccuracyInputs,
    AccuracySpec,
    InputSpec,
    LoopSpec,
    QuantSpec,
    Scenario,
    TaskMetricSpec,
)
from perfguard.suite import accuracy as suite_accuracy
from perfguard.suite.loader import Suite, load_suite

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
        scen("matrix:\n  backend:\n    - torch\n    - openvino  # <-\n"),
        "`openvino`",
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


def acc(lines: str) -> str:
    """A scenario with a torch/onnxruntime x fp32/int8 matrix and ``lines`` in `accuracy:`."""
    return (
        "quantizations:\n  perchannel: {per_channel: true}\n"
        + BASE.replace("x: {shape: [1, 4]}", "x: {shape: [1, 4]}\n    outputs: [logits]")
        + "    matrix:\n      backend: [torch, onnxruntime]\n      precision: [fp32, int8]\n"
        + "    exclude: [{backend: torch, precision: int8}]\n"
        + "    accuracy:\n"
        + textwrap.indent(lines, "      ")
    )


def quant(preset: str) -> str:
    """BASE with one preset ``q`` (the line to blame) used by its scenario."""
    return f"quantizations:\n  q: {preset}  # <-\n" + scen("quantization: q\n")


ACC_ERROR_CASES = [
    case("acc-key", acc("gaet: {}  # <-\n"), "`gaet`", "did you mean `gate`?"),
    case("acc-gate-key", acc("gate:\n  cosine_mni: 0.9  # <-\n"), "did you mean `cosine_min`?"),
    case("acc-inputs-key", acc("inputs: {cout: 3}  # <-\n"), "did you mean `count`?"),
    case("acc-kl-key", acc("kl: {tempreature: 2}  # <-\n"), "did you mean `temperature`?"),
    case("acc-kl-on", acc("kl: {on: logit}  # <-\n"), "`logit`", "did you mean `logits`?"),
    case("acc-task-key", acc("task: {function: 'a:b', drop_mx: 1}  # <-\n"), "`drop_max`?"),
    case("acc-per-output-key", acc("per_output:\n  logits: {kl_mx: 1}  # <-\n"), "`kl_max`?"),
    case("acc-ref-key", acc("reference: {backedn: torch}  # <-\n"), "did you mean `backend`?"),
    case("acc-ref-value", acc("reference: {backend: torhc}  # <-\n"), "did you mean `torch`?"),
    case(
        "acc-ref-not-a-cell",
        acc("reference: {backend: torch, precision: int8}  # <-\n"),
        "reference cell backend=torch precision=int8 is not a cell of scenario `s`",
        "cells: backend=torch precision=fp32, backend=onnxruntime precision=fp32, "
        "backend=onnxruntime precision=int8",
    ),
    case(
        "acc-ref-partial",
        acc("reference: {backend: torch}  # <-\n"),
        "reference cell backend=torch (the reference of cell `s[onnxruntime-int8]`)",
    ),
    case(
        "acc-ref-name-every-axis",
        "quantizations: {pc: {per_channel: true}}\n"
        + scen(
            "matrix:\n  backend: [torch, onnxruntime]\n  quantization: [default, pc]\n"
            "exclude: [{backend: torch, quantization: pc}]\n"
            "accuracy: {reference: {backend: torch}}  # <-\n"
        ),
        "(the reference of cell `s[onnxruntime-pc]`)",
        "`reference: {backend: torch, quantization: default}`",
    ),
    case(
        "acc-ref-plain-key",
        acc("reference:\n  threads: 2  # <-\n"),
        "threads=2",
        "not a cell of scenario `s`",
    ),
    case(
        "acc-ref-preset",
        acc("reference:\n  quantization: perchanel  # <-\n"),
        "`perchanel` is not defined",
        "did you mean `perchannel`?",
    ),
    case("acc-ref-empty", acc("reference: {}  # <-\n"), "is empty"),
    case("acc-count", acc("inputs: {count: 0}  # <-\n"), "`count`", "an integer >= 1"),
    case("acc-seed", acc("inputs: {seed: -1}  # <-\n"), "`seed`", "an integer >= 0"),
    case("acc-golden", acc("golden: -1  # <-\n"), "`golden`", "an integer >= 0"),
    case("acc-cosine", acc("gate: {cosine_min: 1.5}  # <-\n"), "a number in [-1, 1]"),
    case("acc-cosine-mean", acc("gate: {cosine_mean_min: -2}  # <-\n"), "[-1, 1]"),
    case("acc-baseline-cos", acc("gate: {baseline_cosine_min: 2}  # <-\n"), "[-1, 1]"),
    case("acc-kl-max", acc("gate: {kl_max: -0.1}  # <-\n"), "`kl_max`", "a number >= 0"),
    case("acc-topk", acc("gate: {topk: 0}  # <-\n"), "`topk`", "an integer >= 1"),
    case("acc-topk-null", acc("gate: {topk: null}  # <-\n"), "`topk`", "an integer >= 1"),
    case("acc-nonfinite", acc("gate: {nonfinite_max: -1}  # <-\n"), "an integer >= 0"),
    case("acc-agreement", acc("gate: {topk_agreement_min: 1.1}  # <-\n"), "[0, 1]"),
    case("acc-abs-err", acc("gate: {max_abs_err: abc}  # <-\n"), "`abc`", "a number >= 0"),
    case("acc-nan", acc("gate: {max_rel_err: .nan}  # <-\n"), "a number >= 0"),
    case("acc-temperature", acc("kl: {temperature: 0}  # <-\n"), "a number > 0"),
    case("acc-drop", acc("task: {function: 'a:b', drop_max: -1}  # <-\n"), "a number >= 0"),
    case("acc-better", acc("task: {function: 'a:b', higher_is_better: 1}  # <-\n"), "`true`"),
    case("acc-baseline", acc("baseline: 'yes'  # <-\n"), "`baseline`", "`true` or `false`"),
    case(
        "acc-file-and-function",
        acc("inputs: {file: a.npz, function: 'a:b'}  # <-\n"),
        "both `file` and `function`",
    ),
    case(
        "acc-seed-with-file",
        acc("inputs:\n  file: a.npz\n  seed: 3  # <-\n"),
        "inputs come from `file`",
        "`seed` only for generated inputs",
    ),
    case(
        "acc-function-form",
        acc("inputs: {function: mod.fn}  # <-\n"),
        "`module:function`",
        "`mod:fn`",
    ),
    case("acc-task-form", acc("task: {function: m.acc}  # <-\n"), "`module:function`", "`m:acc`"),
    case("acc-task-function", acc("task: {drop_max: 1}  # <-\n"), "has no `function`"),
    case("acc-labels", acc("labels: 3  # <-\n"), "`labels`", "a non-empty string"),
    case("acc-outputs-empty", acc("outputs: []  # <-\n"), "is empty"),
    case(
        "acc-outputs-item", acc("outputs:\n  - logits\n  - -1  # <-\n"), "an output name or index"
    ),
    case("acc-per-output-key-type", acc("per_output:\n  true: {}  # <-\n"), "`True` (bool)"),
    case("acc-not-mapping", scen("accuracy: 5  # <-\n"), "`accuracy`", "or `false`"),
    case("acc-defaults", "defaults:\n  accuracy: {golde: 3}  # <-\n" + BASE, "`golden`?"),
    case("q-key", quant("{per_chanel: true}"), "`per_chanel`", "did you mean `per_channel`?"),
    case("q-mode", quant("{mode: statc}"), "`statc`", "did you mean `static`?"),
    case("q-calibration", quant("{mode: static, calibration: entropi}"), "`entropy`?"),
    case("q-weight-type", quant("{weight_type: int8}"), "one of `qint8`, `quint8`"),
    case("q-activation-type", quant("{mode: static, activation_type: uint8}"), "`quint8`"),
    case("q-static-only", quant("{calibration: entropy}"), "whose mode is `dynamic`"),
    case("q-bool", quant("{per_channel: 1}"), "`per_channel`", "`true` or `false`"),
    case("q-samples", quant("{mode: static, calibration_samples: 0}"), "an integer >= 1"),
    case(
        "q-name",
        "quantizations:\n  per-channel: {}  # <-\n" + BASE,
        "`per-channel`",
        "`per_channel`",
    ),
    case("q-custom", "quantizations:\n  custom: {}  # <-\n" + BASE, "reserved"),
    case("q-not-mapping", "quantizations: [a]  # <-\n" + BASE, "a mapping"),
    case(
        "q-top-key",
        "quantizatons: {}  # <-\n" + BASE,
        "`quantizatons`",
        "did you mean `quantizations`?",
    ),
    case(
        "q-unknown",
        "quantizations: {perchannel: {}}\n" + scen("quantization: perchanel  # <-\n"),
        "`perchanel` is not defined",
        "did you mean `perchannel`?",
    ),
    case(
        "q-unknown-in-defaults",
        "defaults:\n  quantization: nope  # <-\n" + scen("quantization: default\n"),
        "`nope` is not defined",
    ),
    case(
        "q-unknown-axis-value",
        scen(
            "matrix:\n  quantization:\n    - default\n    - perchanel  # <-\n"
            "exclude: [{quantization: perchanel}]\n"
        ),
        "`perchanel` is not defined",
        "one of `default`",
    ),
    case(
        "q-inline-in-matrix",
        scen("matrix:\n  quantization:\n    - {per_channel: true}  # <-\n"),
        "a preset name from `quantizations:`",
    ),
    case("q-not-string", scen("quantization: 3  # <-\n"), "a preset name", "or a mapping"),
    case(
        "q-axis-typo",
        scen("matrix:\n  quantisation: [default]  # <-\n"),
        "did you mean `quantization`?",
    ),
    case(
        "q-axis-and-key",
        scen("quantization: default  # <-\nmatrix: {quantization: [default]}\n"),
        "both as a key and as a matrix axis",
    ),
    case(
        "q-inline-key",
        scen("quantization: {per_channle: true}  # <-\n"),
        "inline `quantization`",
        "did you mean `per_channel`?",
    ),
]


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
