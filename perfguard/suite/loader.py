"""Load a suite YAML file into frozen :class:`~perfguard.core.scenario.Scenario` objects.

A suite file names models and scenarios; each scenario expands into one
``Scenario`` per cell of its ``matrix``. Loading is strict: any unknown key,
wrong type or bad value raises :class:`~perfguard.core.errors.SuiteError` naming
``file:line``, what was found, what was expected and the fix. Combinations that
are well formed but cannot run (e.g. ``onnxruntime`` + ``bf16``) do not raise:
only that cell gets ``Scenario.error`` set and fails when it runs.

The keys a suite may write, their types, defaults and meaning are declared once in
:mod:`perfguard.suite.grammar` (``perfguard keys`` lists them; the JSON Schema is
generated from it); this module and its helpers check the values. Each section has
its parser in :mod:`perfguard.suite.sections`: ``models:`` is read by
:mod:`~perfguard.suite.sections.models`, ``accuracy:``/``quantization:``/
``quantizations:`` by :mod:`~perfguard.suite.sections.accuracy`, ``load:``/``shapes:``
by :mod:`~perfguard.suite.sections.load` and ``gpu:`` by
:mod:`~perfguard.suite.sections.gpu`, whose docstrings give the rules.

Rules:

* A value comes from the matrix cell, else the scenario, else ``defaults``, else
  the built-in default. ``warmup``/``measure`` merge key by key; ``gate`` merges
  metric by metric and always holds ``p95: "+5%"`` unless ``p95`` is given;
  ``tags`` and every other key replace the default as a whole.
* Loops run until BOTH ``iterations`` and ``seconds`` are reached; ``max_seconds``
  caps them.
* Gates: metrics from :data:`perfguard.core.policy.METRICS`; values are quoted
  strings. Latency and memory are written with ``+`` (higher is worse), throughput
  with ``-``. Relative: ``"+5%"``. Absolute: latency ``"+2ms"``/``"+500us"``/``"+1s"``,
  memory ``"+50MiB"``/``"+512KiB"``/``"+1GiB"``, throughput ``"-100/s"``.
* Cell id: the cell's matrix values joined by ``-`` in the order the axes are
  written (``onnxruntime-int8``); ``""`` without a matrix. pytest shows
  ``name[cell_id]``. ``exclude`` entries must name axes and values of the matrix.
  An axis may not also be set as a plain key of the same scenario.
* Scenario names (letters, digits, ``_ . + -``) and cells are unique per file.
  Tags may not be pytest's own markers (``skip``, ``xfail``, ``parametrize``, ...).
* Cells that cannot run get ``Scenario.error``: ``onnxruntime`` with ``bf16``;
  ``int8`` (CPU dynamic quantization) on a ``cuda`` device; an ``onnx:``
  model on the ``torch`` backend; ``tensorrt`` off the GPU; ``int4`` anywhere but a
  generative ``onnxruntime`` cell (ONNX Runtime GenAI), which also refuses ``fp16`` on
  the CPU (and quantization presets: ``sections.accuracy``).
* YAML anchors and ``<<`` merges work; duplicate keys are an error.
* Limits (``perfguard.core.policy``, "suite limits"): the file's size, its nesting and
  the values it expands to through aliases (:mod:`perfguard.suite.yamlpos`); ``threads``,
  loop ``iterations``/``seconds``/``max_seconds``, load clients and names have upper
  bounds, and a loop's ``seconds`` may not pass its ``max_seconds``. Each is an error at
  its line naming the limit, never a silent clamp.
* Every error: the top-level keys, the presets, each model, ``defaults`` and each
  scenario are checked on their own and all their errors raised as one ``SuiteError``
  (:func:`perfguard.suite.yamlpos.combined`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from perfguard.core.errors import CellError, Location, SuiteError
from perfguard.core.policy import (
    LOOP_MAX_SECONDS,
    NAME_MAX_CHARS,
    REFUSED_METRICS,
    SUITE_MAX_BYTES,
    THREADS_FLOOR,
    THREADS_MARGIN,
    GateSpec,
    gate_metric,
    threads_limit,
)
from perfguard.core.scenario import (
    GENAI_PRECISIONS,
    GENERATIVE_BACKENDS,
    ModelSpec,
    QuantSpec,
    Scenario,
)
from perfguard.suite import grammar
from perfguard.suite.rules import check_section, integer, number
from perfguard.suite.sections.accuracy import (
    ACCURACY,
    QUANTIZATION,
    finish_cells,
    parse_accuracy,
    parse_presets,
    parse_quantization,
)
from perfguard.suite.sections.generate import check_generative, drop_token_gates, parse_generate
from perfguard.suite.sections.gpu import GPU, gpu_spec, parse_gpu
from perfguard.suite.sections.load import LOAD, expand_cells, parse_load, parse_shapes
from perfguard.suite.sections.models import parse_model
from perfguard.suite.sections.server import served_accuracy_problem, served_problem
from perfguard.suite.yamlpos import (
    DuplicateKeyError,
    LimitExceeded,
    PosDict,
    PosList,
    Reader,
    check_size,
    combined,
    found,
    load_with_positions,
    one_of,
    suggest,
)

__all__ = ["Suite", "load_suite"]

_T = TypeVar("_T")

_AXES = grammar.MATRIX.names
_LOOPS = ("warmup", "measure")
_SETTINGS = grammar.DEFAULTS.names
_DEFAULTS_HINTS = {
    k: f"set `{k}` on each scenario; `defaults` cannot hold it"
    for k in grammar.SCENARIO.names
    if k not in _SETTINGS
}
_GATE_RE = re.compile(r"([+-]?)\s*(\d+(?:\.\d*)?|\.\d+)\s*(.*)")
_IDENT_RE = re.compile(grammar.IDENT_PATTERN)
_NAME_RE = re.compile(grammar.NAME_PATTERN)
_TAG_FORM = "letters, digits and `_`, not starting with a digit (tags become pytest markers)"
_CHOICES = grammar.DEFAULTS.choice_keys
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Scenario)}


@dataclass(frozen=True)
class Suite:
    """A loaded suite file: every matrix cell of every scenario, in file order."""

    path: Path
    scenarios: tuple[Scenario, ...]


def _loop(rd: Reader, value: object, line: int, what: str) -> dict[str, float]:
    m = rd.as_map(value, line, what)
    rd.keys(m, grammar.LOOP.names, what)
    out: dict[str, float] = {}
    for key, v in m.items():
        at, name, node = m.key_line(key), f"`{key}` in {what}", grammar.LOOP.scalar(key)
        read = integer if node.kind == "integer" else number
        out[key] = read(rd, v, at, name, node)
    return out


def _check_loops(
    rd: Reader, m: PosDict, defaults: dict[str, object], settings: dict[str, object], where: str
) -> None:
    """``seconds`` past the loop's ``max_seconds`` would be cut there without a word."""
    loops = _merge({k: defaults[k] for k in _LOOPS if k in defaults},
                   {k: settings[k] for k in _LOOPS if k in settings})  # fmt: skip
    for key in _LOOPS:
        spec = dataclasses.replace(_DEFAULTS[key], **cast("Any", loops.get(key, {})))
        if spec.seconds > spec.max_seconds:
            line = m.key_line(key) if key in m else m.line
            given = "" if key in m else " (from `defaults` or the built-in default)"
            problem = (
                f"`{key}` of {where} runs for `seconds: {spec.seconds:g}`, past its "
                f"`max_seconds: {spec.max_seconds:g}`{given}, which would stop it early"
            )
            fix = (
                f"raise `max_seconds` to at least {spec.seconds:g} (up to "
                f"{LOOP_MAX_SECONDS:g}), or lower `seconds`"
            )
            rd.fail(line, problem, "`seconds` <= `max_seconds`", fix)


def _gate(rd: Reader, metric: str, value: object, line: int, where: str) -> GateSpec:
    spec = gate_metric(metric)
    assert spec is not None  # the keys were checked against the policy's table
    units = spec.units
    rel, absolute = spec.examples
    sign = spec.sign
    what = f"gate `{metric}` in {where}"
    why = "higher is worse" if sign == "+" else "lower is worse"
    expected = (
        f'a quoted string like "{rel}" or "{absolute}", written with `{sign}` because {why} '
        f"(units: %, {', '.join(units)})"
    )
    if isinstance(value, int | float) and not isinstance(value, bool):
        fix = f'write `{metric}: "{sign}{value}%"` for a relative limit'
        rd.fail(line, f"{what} is the bare number {value}", expected, fix)
    match = _GATE_RE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        rd.fail(line, f"{what} is {found(value)}", expected, f'write e.g. `{metric}: "{rel}"`')
    unit = match[3].strip()
    if unit != "%" and unit not in units:
        fix = f'write e.g. `{metric}: "{sign}{match[2]}%"` or `{metric}: "{absolute}"`'
        rd.fail(line, f"{what} is `{value}`, unit `{unit or '(none)'}`", expected, fix)
    if match[1] != sign:
        fix = f'write `{metric}: "{sign}{match[2]}{unit}"`'
        rd.fail(line, f"{what} is `{value}`, with the wrong sign", expected, fix)
    amount, worse = float(match[2]), sign == "+"
    if unit == "%":
        return GateSpec(metric, amount / 100, relative=True, higher_is_worse=worse)
    return GateSpec(metric, amount * units[unit], relative=False, higher_is_worse=worse)


def _tags(rd: Reader, value: object, line: int, what: str) -> tuple[str, ...]:
    tags = rd.as_list(value, line, what)
    for i, tag in enumerate(tags):
        at = tags.item_line(i)
        if isinstance(tag, dict | list):
            problem = f"tag {i + 1} in {what} is {found(tag)}"
            fix = "write each tag as one word in the list, e.g. `tags: [smoke, nightly]`"
            rd.fail(at, problem, _TAG_FORM, fix)
        if isinstance(tag, str) and len(tag) > NAME_MAX_CHARS:
            problem = f"tag {found(tag)} in {what} is {len(tag)} characters long"
            expected = f"at most {NAME_MAX_CHARS} characters (it becomes a pytest marker)"
            rd.fail(at, problem, expected, "shorten it")
        if not isinstance(tag, str) or not _IDENT_RE.fullmatch(tag):
            fixed = re.sub(r"\W+", "_", str(tag)).strip("_") or "tag"
            fixed = fixed if _IDENT_RE.fullmatch(fixed) else f"_{fixed}"
            problem = f"tag {found(tag)} in {what} is not an identifier"
            rd.fail(at, problem, _TAG_FORM, f"use `{fixed}`")
        if tag in grammar.RESERVED_TAGS:
            fix = f"rename it, e.g. `{tag}_`"
            rd.fail(at, f"tag `{tag}` in {what} is a built-in pytest marker", "another name", fix)
    return tuple(dict.fromkeys(tags))


def _keep_fp32(rd: Reader, value: object, line: int, what: str) -> tuple[str, ...]:
    names = rd.as_list(value, line, what)
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            fix = "list ONNX op types or node names, e.g. `keep_fp32: [LayerNormalization]`"
            rd.fail(names.item_line(i), f"item {i + 1} of {what} is {found(name)}",
                    "an op type or node name", fix)  # fmt: skip
    return tuple(dict.fromkeys(str(n).strip() for n in names))


def _setting(rd: Reader, key: str, value: object, line: int, where: str) -> object:
    what = f"`{key}` in {where}"
    if key in _CHOICES:
        return rd.as_choice(value, line, what, _CHOICES[key])
    if key == "threads":
        threads = integer(rd, value, line, what, grammar.DEFAULTS.scalar(key))
        limit = threads_limit()
        why = (
            f"{THREADS_MARGIN} x this machine's {os.cpu_count() or 1} CPUs, or "
            f"{THREADS_FLOOR}; more threads than that only measure oversubscription"
        )
        fix = "set the intra-op thread count to at most the CPUs you measure on"
        rd.at_most(threads, limit, line, what, why, fix)
        return threads
    if key == "device":
        if not isinstance(value, str) or not grammar.DEVICE_RE.fullmatch(value):
            fix = "write `cpu`, `cuda` or e.g. `cuda:0`"
            rd.fail(line, f"{what} is {found(value)}", "`cpu`, `cuda` or `cuda:N`", fix)
        return value
    if key in ("isolate", "profile"):
        if not isinstance(value, bool):
            rd.fail(line, f"{what} is {found(value)}", "true or false", f"write `{key}: true`")
        return value
    if key == "stability_tolerance":
        return number(rd, value, line, what, grammar.DEFAULTS.scalar(key))
    if key in _LOOPS:
        return _loop(rd, value, line, what)
    if key == QUANTIZATION:
        return parse_quantization(rd, value, line, where, axis=False)
    if key == ACCURACY:
        return parse_accuracy(rd, value, line, where)
    if key == LOAD:
        return parse_load(rd, value, line, where)
    if key == GPU:
        return parse_gpu(rd, value, line, where)
    if key == "tags":
        return _tags(rd, value, line, what)
    if key == "keep_fp32":
        return _keep_fp32(rd, value, line, what)
    gates = rd.as_map(value, line, what)
    rd.keys(gates, grammar.GATE.names, what, REFUSED_METRICS)
    return {k: _gate(rd, k, v, gates.key_line(k), where) for k, v in gates.items()}


def _settings(rd: Reader, m: PosDict, where: str) -> dict[str, object]:
    return {k: _setting(rd, k, v, m.key_line(k), where) for k, v in m.items() if k in _SETTINGS}


def _merge(*layers: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for layer in layers:
        for key, value in layer.items():
            old = out.get(key)
            # Loops and gates merge entry by entry; every other setting replaces.
            if isinstance(old, dict) and isinstance(value, dict):
                out[key] = {**old, **value}
            else:
                out[key] = value
    return out


def _unsupported(sc: Scenario) -> str | None:
    cell = f"cell `{sc.item_name}`"
    served = served_problem(sc)
    if served is not None:
        problem, expected, fix = served
    elif (
        sc.generate is not None
        and sc.generate.file is not None
        and not sc.generate.tokenizer
        and sc.model.server is None
    ):
        problem = f"{cell} reads prompts from a file without a `tokenizer`"
        expected = "`generate.tokenizer: module:function` (only a served model's server tokenizes)"
        fix = "add `tokenizer:` beside `file:` in `generate:`"
    elif sc.model.onnx is not None and sc.backend == "torch":
        problem = f"{cell} runs the ONNX file of model `{sc.model.name}` on the `torch` backend"
        expected = "backend `onnxruntime` for `onnx:` models"
        fix = "use `backend: onnxruntime` for this cell, or give the model a `factory:`"
    elif sc.backend == "onnxruntime" and sc.precision == "bf16":
        problem = f"{cell} asks onnxruntime for `{sc.precision}`, which perfguard does not support"
        expected = "precision `fp32`, `fp16` or `int8` on onnxruntime"
        fix = "use backend `torch` for bf16, or fp32/fp16/int8 on onnxruntime (or `exclude`)"
    elif sc.backend == "tensorrt" and not sc.is_gpu:
        problem = f"{cell} asks for TensorRT on `{sc.device}`; TensorRT runs on NVIDIA GPUs"
        expected = "device `cuda` or `cuda:N` for backend `tensorrt`"
        fix = "set `device: cuda` for this cell (or `exclude` it)"
    elif sc.generate is not None and sc.backend not in GENERATIVE_BACKENDS:
        problem = f"{cell} generates on `{sc.backend}`, which has no generation path yet"
        expected = f"backend {' or '.join(map(repr, GENERATIVE_BACKENDS))} for a generative cell"
        fix = "use `backend: torch` for this cell (or `exclude` it)"
    elif sc.precision == "int4" and not (sc.backend == "onnxruntime" and sc.generate):
        problem = f"{cell} asks `{sc.backend}` for `int4`"
        expected = "int4 on generative onnxruntime cells (ONNX Runtime GenAI's weight-only int4)"
        fix = "run int4 on `backend: onnxruntime` with `generate:`, or use int8 (or `exclude`)"
    elif (
        sc.backend == "onnxruntime"
        and sc.generate
        and sc.precision not in GENAI_PRECISIONS["cuda" if sc.is_gpu else "cpu"]
    ):
        where = "a GPU" if sc.is_gpu else "the CPU"
        listed = ", ".join(GENAI_PRECISIONS["cuda" if sc.is_gpu else "cpu"])
        problem = f"{cell} asks ONNX Runtime GenAI for `{sc.precision}` on `{sc.device}`"
        expected = f"{listed} on {where} (the model builder's fp16 is a GPU graph)"
        fix = f"use one of {listed} (or `exclude` this cell)"
    elif sc.precision == "int8" and sc.is_gpu and sc.backend != "tensorrt":
        problem = f"{cell} asks for `int8` on `{sc.device}`; int8 is CPU dynamic quantization"
        expected = "device `cpu` for precision `int8`"
        fix = "use `device: cpu` for int8, or fp16/bf16 on the GPU (or `exclude` this cell)"
    else:
        return None
    return str(CellError(problem, expected=expected, fix=fix, location=sc.location))


def _matrix(rd: Reader, m: PosDict, where: str) -> list[tuple[str, list[object]]]:
    if "matrix" not in m:
        return []
    mx = rd.as_map(m["matrix"], m.key_line("matrix"), f"`matrix` of {where}")
    if not mx:
        fix = "add an axis such as `backend: [torch, onnxruntime]`, or remove `matrix`"
        rd.fail(m.key_line("matrix"), f"`matrix` of {where} is empty", "at least one axis", fix)
    axes = []
    for axis, raw in mx.items():
        at = mx.key_line(axis)
        if axis not in _AXES:
            fix = suggest(axis, _AXES) or f"move `{axis}` out of `matrix`"
            rd.fail(at, f"`{axis}` is not a matrix axis ({where})", one_of(_AXES), fix)
        if axis in m:
            fix = f"remove `{axis}: ...` or the `{axis}` axis"
            problem = f"`{axis}` is set both as a key and as a matrix axis in {where}"
            rd.fail(m.key_line(axis), problem, "each setting in one place", fix)
        items = rd.as_list(raw, at, f"matrix axis `{axis}` of {where}")
        if not items:
            fix = f"list values, e.g. `{axis}: [...]`, or remove the axis"
            rd.fail(at, f"matrix axis `{axis}` of {where} is an empty list", "values", fix)
        values: list[object] = []
        for i, raw_value in enumerate(items):
            at = items.item_line(i)
            value = (
                parse_quantization(rd, raw_value, at, where, axis=True)
                if axis == QUANTIZATION
                else _setting(rd, axis, raw_value, at, where)
            )
            # Values never contain "-", so a repeated value is the only way to repeat a cell id.
            if str(value) in map(str, values):
                problem = f"matrix axis `{axis}` of {where} lists `{value}` twice"
                rd.fail(items.item_line(i), problem, "distinct values", "remove the repeat")
            values.append(value)
        axes.append((axis, values))
    return axes


def _excludes(
    rd: Reader, m: PosDict, axes: list[tuple[str, list[object]]], where: str
) -> list[dict[str, str]]:
    if "exclude" not in m:
        return []
    line = m.key_line("exclude")
    known = {axis: [str(v) for v in values] for axis, values in axes}
    entries = rd.as_list(m["exclude"], line, f"`exclude` of {where}")
    rules = []
    for i, raw in enumerate(entries):
        entry = rd.as_map(raw, entries.item_line(i), f"`exclude` entry {i + 1} of {where}")
        if not entry:
            problem = f"`exclude` entry {i + 1} of {where} is empty"
            rd.fail(entries.item_line(i), problem, "`axis: value` pairs", "remove the entry")
        for axis, v in entry.items():
            if axis not in known:
                problem = f"`exclude` names axis `{axis}`, which is not in the matrix of {where}"
                fix = suggest(axis, list(known)) or f"remove `{axis}`"
                rd.fail(entry.key_line(axis), problem, one_of(known), fix)
            if isinstance(v, bool) or str(v) not in known[axis]:
                problem = f"`exclude` value {found(v)} for `{axis}` is not in the matrix of {where}"
                fix = suggest(v, known[axis]) or "use a value listed in the matrix"
                rd.fail(entry.key_line(axis), problem, one_of(known[axis]), fix)
        rules.append({axis: str(v) for axis, v in entry.items()})
    return rules


def _scenario(
    rd: Reader, index: int, value: object, line: int, models: dict[str, ModelSpec],
    defaults: dict[str, object], names: dict[str, int], presets: dict[str, QuantSpec],
) -> list[Scenario]:  # fmt: skip
    m = rd.as_map(value, line, f"scenario #{index + 1}")
    name = m.get("name")
    named = isinstance(name, str) and len(name) <= NAME_MAX_CHARS
    where = f"scenario `{name}`" if named else f"scenario #{index + 1}"
    rd.keys(m, grammar.SCENARIO.names, where)
    check_section(rd, m, grammar.SCENARIO, m.line, where)
    name, at = rd.as_name(name, m.key_line("name"), f"`name` of {where}"), m.key_line("name")
    if not _NAME_RE.fullmatch(name):
        fix = f"rename it, e.g. `{re.sub(r'[^A-Za-z0-9_.+-]', '_', name)}`"
        expected = "letters, digits, `_`, `.`, `+` and `-`"
        rd.fail(at, f"scenario name `{name}` has characters pytest ids cannot carry", expected, fix)
    if name in names:
        problem = f"scenario name `{name}` is used twice (first at line {names[name]})"
        rd.fail(at, problem, "unique scenario names in one file", "rename one of them")
    names[name] = at
    model = rd.as_str(m["model"], m.key_line("model"), f"`model` of {where}")
    if model not in models:
        expected = f"a model defined under `models:` ({', '.join(models) or 'none defined'})"
        fix = suggest(model, list(models)) or "define it under `models:`"
        rd.fail(m.key_line("model"), f"{where} uses undefined model {found(model)}", expected, fix)
    settings = _settings(rd, m, where)
    _check_loops(rd, m, defaults, settings, where)
    shapes = parse_shapes(rd, m, where, models[model])
    prompts = parse_generate(rd, m, where)
    check_generative(rd, m, where)
    server = models[model].server
    if not prompts and server is not None and server.generative:
        problem = f"{where} uses model `{model}`, a served model that generates (`api: "
        problem += f"{server.api}`), and generates nothing"
        expected = "`generate:` on a scenario of a generating served model"
        fix = "add `generate: {prompt_tokens: ..., new_tokens: ...}` to this scenario (or "
        fix += "set `server.api: embeddings` for an embedding model)"
        rd.fail(m.key_line("model"), problem, expected, fix)
    if prompts and server is not None and not server.generative:
        problem = f"{where} generates on model `{model}`, a served embedding model"
        expected = "no `generate:` on an embedding model's scenario: each request is one call"
        fix = "remove `generate:`, or set `server.api` to `completions` or `chat`"
        rd.fail(m.key_line("generate"), problem, expected, fix)
    if not prompts and not models[model].inputs and models[model].inputs_file is None:
        problem = f"{where} uses model `{model}`, which declares no inputs, and generates nothing"
        expected = "`inputs:` or `inputs_file:` on the model, or `generate:` on this scenario"
        fix = f"declare the inputs of model `{model}`, or add `generate:` for a generative model"
        rd.fail(m.key_line("model"), problem, expected, fix)
    axes = _matrix(rd, m, where)
    rules = _excludes(rd, m, axes, where)
    cells = [
        dict(zip([axis for axis, _ in axes], cell, strict=True))
        for cell in itertools.product(*(values for _, values in axes))
    ]
    cells = [c for c in cells if not any(all(str(c[a]) == v for a, v in r.items()) for r in rules)]
    if not cells:
        fix = "narrow the `exclude` entries"
        rd.fail(m.key_line("exclude"), f"`exclude` drops every cell of {where}", "a cell left", fix)
    out: list[Scenario] = []
    extras: list[dict[str, object]] = []
    for cell in cells:
        merged = _merge(defaults, settings, cell)
        # Resolved by perfguard.suite.sections.accuracy once every cell exists (a reference
        # names another cell).
        extras.append({k: merged.pop(k) for k in (QUANTIZATION, ACCURACY) if k in merged})
        load = merged.pop(LOAD, None)  # the same in every cell: `load` is not an axis
        merged[GPU] = gpu_spec(merged.pop(GPU, None))
        loops = {
            k: dataclasses.replace(_DEFAULTS[k], **cast("Any", merged.pop(k, {}))) for k in _LOOPS
        }
        gates = {g.metric: g for g in _DEFAULTS["gates"]}
        gates.update(cast("dict[str, GateSpec]", merged.pop("gate", {})))
        if not prompts:
            gates = {g.metric: g for g in drop_token_gates(tuple(gates.values()))}
        sc = Scenario(
            suite=rd.path, name=name, cell_id="-".join(map(str, cell.values())),
            model=models[model], location=Location(rd.path, m.line), gates=tuple(gates.values()),
            matrix_values=tuple((a, str(v)) for a, v in cell.items()),
            **loops, **cast("dict[str, Any]", merged),
        )  # fmt: skip
        out.append(sc)
    written = [
        defaults.get(QUANTIZATION),
        settings.get(QUANTIZATION),
        *dict(axes).get(QUANTIZATION, []),
    ]

    def finish(group: list[Scenario]) -> list[Scenario]:
        group = [dataclasses.replace(sc, error=_unsupported(sc)) for sc in group]
        return [
            dataclasses.replace(sc, error=sc.error or served_accuracy_problem(sc))
            for sc in finish_cells(rd, group, extras, presets, written)
        ]

    return expand_cells(rd, out, load, shapes, LOAD in settings, finish, prompts)


def _read(rd: Reader, path: Path) -> PosDict:
    """The suite file's top-level mapping; a file that cannot be read or parsed is one
    error (nothing past it can be checked)."""
    try:
        with path.open("rb") as f:
            # Never more than the limit (+1 to see it passed): a suite path may name a
            # huge file, a device or a FIFO.
            data = f.read(SUITE_MAX_BYTES + 1)
        check_size(len(data), data)
        text = data.decode("utf-8")
    except LimitExceeded as exc:
        rd.fail(exc.line, exc.problem, exc.expected, exc.fix)
    except (OSError, UnicodeDecodeError) as exc:
        rd.fail(None, f"cannot read the suite file ({exc})", "a UTF-8 YAML file", "check the path")
    try:
        doc = load_with_positions(text)
    except LimitExceeded as exc:
        rd.fail(exc.line, exc.problem, exc.expected, exc.fix)
    except DuplicateKeyError as exc:
        problem = f"duplicate key: {exc.problem}"
        rd.fail(exc.line, problem, "each key once per mapping", "remove or rename one of them")
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else "a byte"
        problem = f"the character {char} is not allowed in a YAML file"
        fix = "remove it (inside double quotes, write it as an escape such as `\\x00`)"
        rd.fail(line, problem, "printable characters", fix)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        # An unclosed bracket or quote is only noticed at the end of the file;
        # the place where it was opened is the useful line then.
        if mark is None or (exc.context_mark and mark.line >= len(text.splitlines())):
            mark = exc.context_mark
        context = f" ({exc.context})" if exc.context else ""
        fix = "check the indentation, brackets and quotes on this line and the one above"
        at = mark.line + 1 if mark else None
        rd.fail(at, f"malformed YAML: {exc.problem}{context}", "valid YAML", fix)
    except yaml.YAMLError as exc:
        rd.fail(None, f"malformed YAML: {exc}", "valid YAML", "check the indentation and quotes")
    if doc is None:
        expected = "a mapping with `models:` and `scenarios:`"
        rd.fail(1, "the suite file is empty", expected, "add `models:` and `scenarios:`")
    return rd.as_map(doc, 1, "the top level of the suite file")


class _Errors:
    """The errors of one suite file, collected part by part (each model, each scenario,
    each top-level section) so that one run reports them all."""

    def __init__(self) -> None:
        self.found: list[SuiteError] = []

    def check(self, fn: Callable[[], _T]) -> _T | None:
        """``fn()``, or ``None`` with its ``SuiteError`` kept."""
        try:
            return fn()
        except SuiteError as exc:
            self.found.append(exc)
            return None


def load_suite(path: Path) -> Suite:
    """Read and validate a suite file; raises ``SuiteError`` naming ``file:line``.

    Several errors in independent parts of the file (models, scenarios, sections) are
    raised together: one ``SuiteError`` at the first one's line that lists them all.
    A scenario that depends on a part in error (its model, ``defaults``,
    ``quantizations``) is not checked until that part is fixed.
    """
    rd = Reader(path)
    top = _read(rd, path)
    errors = _Errors()
    errors.check(lambda: rd.keys(top, grammar.SUITE.names, "the top level of the suite file"))
    base_dir = path.parent.resolve()
    presets = errors.check(lambda: parse_presets(rd, top))
    models: dict[str, ModelSpec] = {}
    broken: set[object] = set()  # models in error: their scenarios are not checked
    mm: PosDict | None = None
    if "models" in top:
        mm = errors.check(lambda: rd.as_map(top["models"], top.key_line("models"), "`models`"))

        def read_model(m: PosDict, key: object) -> ModelSpec:
            return parse_model(rd, key, m[key], m.key_line(key), base_dir)

        for key in mm or {}:
            assert mm is not None
            model = errors.check(functools.partial(read_model, mm, key))
            if model is None:
                broken.add(key)
            else:
                models[key] = model
    defaults: dict[str, object] | None = {}
    if "defaults" in top:

        def read_defaults() -> dict[str, object]:
            d = rd.as_map(top["defaults"], top.key_line("defaults"), "`defaults`")
            rd.keys(d, _SETTINGS, "`defaults`", _DEFAULTS_HINTS)
            return _settings(rd, d, "`defaults`")

        defaults = errors.check(read_defaults)
    errors.check(lambda: check_section(rd, top, grammar.SUITE, top.line, "the suite file"))
    if "scenarios" not in top:
        raise combined(errors.found)
    entries = errors.check(
        lambda: rd.as_list(top["scenarios"], top.key_line("scenarios"), "`scenarios`")
    )
    if entries is not None and not entries:
        line, fix = top.key_line("scenarios"), "add `- name: ...` entries"
        errors.check(lambda: rd.fail(line, "`scenarios` is empty", "at least one scenario", fix))
    names: dict[str, int] = {}
    scenarios: list[Scenario] = []
    # Scenarios rest on `defaults`, the presets and `models` as a whole: with one of
    # those in error their checks would only repeat it.
    if not entries or defaults is None or presets is None or ("models" in top and mm is None):
        entries = PosList(top.line)

    def read_scenario(i: int, raw: object) -> list[Scenario]:
        assert entries is not None and defaults is not None and presets is not None
        return _scenario(rd, i, raw, entries.item_line(i), models, defaults, names, presets)

    for i, raw in enumerate(entries):
        model = raw.get("model") if isinstance(raw, PosDict) else None
        if isinstance(model, Hashable) and model in broken:
            continue
        scenarios += errors.check(functools.partial(read_scenario, i, raw)) or []
    if errors.found:
        raise combined(errors.found)
    return Suite(path=path, scenarios=tuple(scenarios))
