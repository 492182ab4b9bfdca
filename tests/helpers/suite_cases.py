"""The suite loader's error cases (suite text, what the message must say), shared by the
loader's tests and the schema's."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

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


BAD_GATES = [
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
]


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
        edit(
            "    factory: pkg.mod:build\n", "    onnx: a.onnx\n    factory: pkg.mod:build  # <-\n"
        ),
        "both `onnx` and `factory`",
        "exactly one of",
    ),
    case(
        "no-factory",
        M.replace("  m:", "  m:  # <-"),
        "none of `factory`, `onnx`, `server`",
        "exactly one of",
    ),
    case(
        "inputs-and-file",
        edit("    inputs:\n", "    inputs_file: a.npz\n    inputs:  # <-\n"),
        "both `inputs_file` and `inputs`",
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
        "has `opset` but no `factory`",
        "`opset` only with `factory`",
    ),
    case(
        "bool-opset",
        edit("    inputs:", "    opset: true  # <-\n    inputs:"),
        "`opset`",
        "an integer >= 1",
    ),
    case(
        "exporter-on-onnx",
        edit("factory: pkg.mod:build", "onnx: a.onnx\n    exporter: dynamo  # <-"),
        "has `exporter` but no `factory`",
        "`exporter` only with `factory`",
    ),
    case(
        "unknown-exporter",
        edit("    inputs:", "    exporter: dynamic  # <-\n    inputs:"),
        "`exporter` of model `m` is `dynamic`",
        "one of `torchscript`, `dynamo`",
        "did you mean `dynamo`?",
    ),
    case(
        "dynamo-below-its-opset",
        edit("    inputs:", "    exporter: dynamo\n    opset: 17  # <-\n    inputs:"),
        "`opset` of model `m` is 17 with `exporter: dynamo`",
        "opset >= 18",
        "write `opset: 18` (or leave it out), or `exporter: torchscript` for opset 17",
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
        "both `low` and `fill`",
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
        "has both `file` and `seed`",
        "`seed` (generated input i uses seed + i)",
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
