"""The ``accuracy:``, ``quantization:`` and ``quantizations:`` parts of a suite file.

``perfguard.suite.loader`` reads the rest and calls in here; errors are the same
``SuiteError`` (``file:line``, did-you-mean) and ``Scenario.error`` cell errors.

The keys, their types and defaults are declared in :mod:`perfguard.suite.grammar`
(``ACCURACY``, ``QUANT``; ``perfguard keys`` lists them).

Format::

    quantizations:            # optional named presets for int8 on onnxruntime
      default: {}             # used where no preset is named; may be redefined
      perchannel: {per_channel: true}
      static_entropy: {mode: static, calibration: entropy, calibration_samples: 32}
    defaults:
      accuracy: {golden: 8}   # merged key by key with each scenario's `accuracy`
    scenarios:
      - name: minilm
        model: minilm
        matrix:
          backend: [torch, onnxruntime]
          precision: [fp32, int8]
          quantization: [default, perchannel]   # preset names; part of the cell id
        exclude: [{backend: torch, precision: int8}, {backend: torch, quantization: perchannel}]
        accuracy:                  # `false` turns off accuracy set in `defaults`
          inputs: {count: 64, function: perfguard_examples.sentences:tokenized}
          reference: {backend: torch, precision: fp32, quantization: default}  # omit: none
          kl: {on: logits, temperature: 1.0}
          gate: {cosine_min: 0.99, kl_max: 0.01, topk: 1, topk_agreement_min: 0.99}
          per_output:
            logits: {kl_max: 0.01}
          task: {function: mymetrics:accuracy, higher_is_better: true, drop_max: 1.0}
      - name: minilm-static
        model: minilm
        backend: onnxruntime
        precision: int8
        quantization: static_entropy   # a preset name, or an inline mapping (`custom`)
        accuracy: {inputs: {count: 32, seed: 7}}   # or {file: data/acc.npz}

Rules:

* Presets (names: letters, digits, ``_``): ``mode`` dynamic | static;
  ``per_channel``, ``reduce_range`` (booleans); ``weight_type`` qint8 | quint8;
  static only: ``activation_type`` quint8 | qint8, ``calibration`` minmax |
  entropy | percentile, ``calibration_samples`` >= 1 (default: all inputs).
* ``quantization`` only affects int8 cells. On torch (always dynamic per-tensor)
  another preset fails the cell; static int8 fails without ``accuracy.inputs``
  (calibration data) or with fewer of them than ``calibration_samples``.
* ``accuracy`` keys merge one by one over ``defaults``, ``gate`` and
  ``per_output`` entry by entry. ``accuracy: {}`` checks with every default.
* ``inputs``: ``count`` >= 1 (default 32) and at most one of ``function``
  (``module:function``, imported from the suite's folder, called with no
  arguments) and ``file`` (``.npz``); with neither they are generated from the
  model's input specs with seeds ``seed + i`` (``seed`` >= 0, default 1000).
  ``file`` and ``labels`` are relative to the suite's folder, opened at run time.
* ``reference`` overrides the cell's ``backend``, ``device``, ``precision``,
  ``threads``, ``graph_optimization_level`` or ``quantization``; the result must
  be a cell of the same scenario (that cell itself gets no reference).
* ``gate`` (all optional): ``cosine_min``, ``cosine_mean_min``,
  ``baseline_cosine_min`` (default 0.999) in [-1, 1]; ``topk_agreement_min`` in
  [0, 1]; ``kl_max``, ``max_abs_err``, ``mean_abs_err``, ``max_rel_err`` >= 0;
  integers ``topk`` >= 1 (default 1), ``nonfinite_max`` >= 0 (default 0). ``null``
  switches a number limit off; ``1e-3`` may be written unquoted. ``per_output``
  entries replace limits for one output (name or index).
* ``task``: ``function`` (required; ``module:function(outputs, labels) -> float``),
  ``higher_is_better`` (default true), ``drop_max`` >= 0 (default 1, in its units).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from perfguard.core.errors import CellError
from perfguard.core.policy import NAME_MAX_CHARS
from perfguard.core.scenario import (
    AccuracyGates,
    AccuracyInputs,
    AccuracySpec,
    AccuracyText,
    QuantSpec,
    Scenario,
    TaskMetricSpec,
)
from perfguard.suite import grammar
from perfguard.suite.grammar import OneOf, Scalar
from perfguard.suite.rules import check_section, integer, number
from perfguard.suite.yamlpos import PosDict, Reader, found, one_of, suggest

__all__ = ["ACCURACY", "PRESETS", "QUANTIZATION", "QuantRef", "finish_cells", "parse_accuracy"]
__all__ += ["parse_presets", "parse_quantization"]

T = TypeVar("T")

QUANTIZATION = "quantization"  # scenario key and matrix axis
ACCURACY = "accuracy"  # scenario key
PRESETS = "quantizations"  # top-level key
_CUSTOM = "custom"  # the name of an inline `quantization:` mapping
_STATIC_ONLY = ("activation_type", "calibration", "calibration_samples", "symmetric")
_QUANT_CHOICES = grammar.QUANT.choice_keys
_REF_CHOICES = grammar.REFERENCE.choice_keys
# Preset names end up in cell ids, which are joined with "-".
_PRESET_RE = re.compile(grammar.IDENT_PATTERN)
_FUNCTION_RE = re.compile(grammar.FUNCTION_PATTERN)
_SPEC = AccuracySpec()


@dataclass(frozen=True)
class QuantRef:
    """A ``quantization:`` value as written (``str()``: its name, for cell ids and ``exclude``)."""

    name: str
    line: int
    inline: QuantSpec | None = None

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class _Reference:
    pairs: tuple[tuple[str, str], ...]  # sorted by key
    lines: Mapping[str, int]  # key -> line, for did-you-mean on a value
    line: int


def _number_type(section: grammar.Section, name: str) -> Scalar:
    """The number a tolerance (a number, a numeric string or null) of ``name`` is."""
    node = section.key(name).type
    if isinstance(node, OneOf):
        node = next(o for o in node.options if isinstance(o, Scalar) and o.kind == "number")
    assert isinstance(node, Scalar), name
    return node


def _num(rd: Reader, value: object, line: int, what: str, node: Scalar) -> float:
    # PyYAML (YAML 1.1) reads `1e-3` as a string, and tolerances are written that way.
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    return number(rd, value, line, what, node)


def _function(rd: Reader, value: object, line: int, what: str) -> str:
    text = rd.as_str(value, line, what)
    if not _FUNCTION_RE.fullmatch(text):
        module, _, func = text.replace(":", ".").rpartition(".")
        fix = f"separate module and function with `:`, e.g. `{module or 'module'}:{func}`"
        rd.fail(line, f"{what} is `{text}`", "`module:function`", fix)
    return text


def _path(rd: Reader, value: object, line: int, what: str) -> Path:
    return rd.path.parent.resolve() / rd.as_str(value, line, what)


def _output_name(rd: Reader, value: object, line: int, what: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    rd.fail(line, f"{what} is {found(value)}", "an output name or index >= 0", f"fix {what}")


def _quant_spec(rd: Reader, value: object, line: int, where: str, name: str) -> QuantSpec:
    m = rd.as_map(value, line, where)
    rd.keys(m, grammar.QUANT.names, where)
    fields: dict[str, Any] = {}
    for key, v in m.items():
        at, what = m.key_line(key), f"`{key}` of {where}"
        if key in _QUANT_CHOICES:
            fields[key] = rd.as_choice(v, at, what, _QUANT_CHOICES[key])
        elif key == "calibration_samples":
            fields[key] = integer(rd, v, at, what, grammar.QUANT.scalar(key))
        else:
            fields[key] = rd.as_bool(v, at, what)
    spec = QuantSpec(name=name, **fields)
    for key in _STATIC_ONLY:
        if key in m and spec.mode == "dynamic":
            problem = f"`{key}` is set on {where}, whose mode is `dynamic`"
            fix = f"add `mode: static`, or remove `{key}`"
            rd.fail(m.key_line(key), problem, f"`{key}` only with `mode: static`", fix)
    return spec


def parse_presets(rd: Reader, top: PosDict) -> dict[str, QuantSpec]:
    """The top-level ``quantizations:`` presets, always with a ``default``."""
    presets = {"default": QuantSpec()}
    if PRESETS not in top:
        return presets
    m = rd.as_map(top[PRESETS], top.key_line(PRESETS), f"`{PRESETS}`")
    for name, value in m.items():
        at = m.key_line(name)
        if isinstance(name, str) and len(name) > NAME_MAX_CHARS:
            problem = f"quantization preset name {found(name)} is {len(name)} characters long"
            rd.fail(at, problem, f"at most {NAME_MAX_CHARS} characters", "shorten it")
        if not isinstance(name, str) or not _PRESET_RE.fullmatch(name):
            fixed = re.sub(r"\W", "_", str(name))
            fix = f"rename it, e.g. `{fixed if _PRESET_RE.fullmatch(fixed) else '_' + fixed}`"
            expected = "letters, digits and `_`, not starting with a digit (it joins cell ids)"
            rd.fail(at, f"quantization preset name {found(name)} is not allowed", expected, fix)
        if name == _CUSTOM:
            problem = f"quantization preset name `{_CUSTOM}` is reserved for inline mappings"
            rd.fail(at, problem, "another name", f"rename it, e.g. `{_CUSTOM}_int8`")
        presets[name] = _quant_spec(rd, value, at, f"quantization preset `{name}`", name)
    return presets


def parse_quantization(rd: Reader, value: object, line: int, where: str, axis: bool) -> QuantRef:
    """A ``quantization:`` key (a preset name or an inline mapping) or matrix axis value."""
    what = f"matrix axis `{QUANTIZATION}` of {where}" if axis else f"`{QUANTIZATION}` in {where}"
    if isinstance(value, PosDict) and not axis:
        return QuantRef(_CUSTOM, line, _quant_spec(rd, value, line, f"the inline {what}", _CUSTOM))
    if not isinstance(value, str) or not value.strip():
        expected = "a preset name from `quantizations:`" + ("" if axis else " or a mapping")
        fix = "define the preset under the top-level `quantizations:` and use its name"
        rd.fail(line, f"{what} is {found(value)}", expected, fix)
    return QuantRef(value, line)


def _resolve(rd: Reader, ref: object, presets: Mapping[str, QuantSpec]) -> QuantSpec:
    if not isinstance(ref, QuantRef):
        return presets["default"]
    if ref.inline is not None:
        return ref.inline
    if ref.name not in presets:
        problem = f"quantization preset `{ref.name}` is not defined"
        fix = suggest(ref.name, list(presets)) or "define it under the top-level `quantizations:`"
        rd.fail(ref.line, problem, f"a preset name: {one_of(presets)}", fix)
    return presets[ref.name]


def parse_accuracy(rd: Reader, value: object, line: int, where: str) -> dict[str, object] | None:
    """``accuracy:`` as a flat dict to merge over ``defaults`` (``None`` for ``false``):
    ``gate.<limit>``/``per_output.<name>`` keys make the merge go entry by entry."""
    if value is False:
        return None
    what = f"`{ACCURACY}` in {where}"
    if not isinstance(value, PosDict):
        expected = "a mapping (`{}` for every default), or `false` for no accuracy checks"
        rd.fail(line, f"{what} is {found(value)}", expected, f"write {what} as a mapping")
    rd.keys(value, grammar.ACCURACY.names, what)
    draft: dict[str, object] = {}
    for key, v in value.items():
        at, name = value.key_line(key), f"`{key}` of {what}"
        if key == "gate":
            draft.update({f"gate.{k}": x for k, x in _limits(rd, v, at, name).items()})
        elif key == "per_output":
            per = rd.as_map(v, at, name)
            for out, limits in per.items():
                o_at, o_what = per.key_line(out), f"`{out}` of {name}"
                key_name = f"per_output.{_output_name(rd, out, o_at, f'a key of {name}')}"
                draft[key_name] = _limits(rd, limits, o_at, o_what)
        else:
            draft[key] = _PARSERS[key](rd, v, at, name)
    return draft


def _sourced(
    rd: Reader, value: object, line: int, what: str, section: grammar.Section
) -> dict[str, Any]:
    """The fields of a section of integers, a ``file`` (relative to the suite's folder)
    and a ``module:function`` (``accuracy.inputs``, ``accuracy.text``)."""
    m = rd.as_map(value, line, what)
    rd.keys(m, section.names, what)
    check_section(rd, m, section, line, what)
    fields: dict[str, Any] = {}
    for key, v in m.items():
        at, name = m.key_line(key), f"`{key}` of {what}"
        if key == "file":
            fields[key] = _path(rd, v, at, name)
        elif section.scalar(key).kind == "integer":
            fields[key] = integer(rd, v, at, name, section.scalar(key))
        else:
            fields[key] = _function(rd, v, at, name)
    return fields


def _inputs(rd: Reader, value: object, line: int, what: str) -> AccuracyInputs:
    return AccuracyInputs(**_sourced(rd, value, line, what, grammar.ACCURACY_INPUTS))


def _outputs(rd: Reader, value: object, line: int, what: str) -> tuple[str, ...]:
    items = rd.as_list(value, line, what)
    if not items:
        rd.fail(line, f"{what} is empty", "output names or indices", "remove it to check all")
    names = (_output_name(rd, o, items.item_line(i), what) for i, o in enumerate(items))
    return tuple(dict.fromkeys(names))  # repeats dropped


def _kl(rd: Reader, value: object, line: int, what: str) -> tuple[str, float]:
    m = rd.as_map(value, line, what)
    if any(key is True for key in m):  # YAML 1.1 reads the key `on` as the boolean true
        m["on"] = m.pop(True)
        m.key_lines["on"] = m.key_lines.pop(True)
    rd.keys(m, grammar.KL.names, what)
    on = m.get("on", grammar.KL.key("on").default)
    on = rd.as_choice(on, m.key_line("on"), f"`on` of {what}", grammar.KL_ON)
    temp = m.get("temperature", grammar.KL.key("temperature").default)
    at, node = m.key_line("temperature"), _number_type(grammar.KL, "temperature")
    return on, _num(rd, temp, at, f"`temperature` of {what}", node)


def _reference(rd: Reader, value: object, line: int, what: str) -> _Reference:
    m = rd.as_map(value, line, what)
    rd.keys(m, grammar.REFERENCE.names, what)
    if not m:
        expected = "matrix values of the reference cell, e.g. `{backend: torch, precision: fp32}`"
        rd.fail(line, f"{what} is empty", expected, "add them, or remove `reference`")
    pairs: dict[str, str] = {}
    for key, v in m.items():
        at, name = m.key_line(key), f"`{key}` of {what}"
        if key in _REF_CHOICES:
            pairs[key] = rd.as_choice(v, at, name, _REF_CHOICES[key])
        elif key == "threads":
            pairs[key] = str(integer(rd, v, at, name, grammar.REFERENCE.scalar(key)))
        elif key == "device" and (not isinstance(v, str) or not grammar.DEVICE_RE.fullmatch(v)):
            rd.fail(at, f"{name} is {found(v)}", "`cpu`, `cuda` or `cuda:N`", "write e.g. `cpu`")
        else:  # a device, or a preset name (checked against the presets with the cells)
            pairs[key] = rd.as_str(v, at, name)
    return _Reference(tuple(sorted(pairs.items())), {k: m.key_line(k) for k in pairs}, line)


def _limits(rd: Reader, value: object, line: int, what: str) -> dict[str, float | int | None]:
    m = rd.as_map(value, line, what)
    rd.keys(m, grammar.ACCURACY_LIMITS.names, what)
    out: dict[str, float | int | None] = {}
    for key, v in m.items():
        at, name = m.key_line(key), f"`{key}` in {what}"
        node = _number_type(grammar.ACCURACY_LIMITS, key)
        if node.kind == "integer":  # `topk`, `nonfinite_max`: these cannot be switched off
            out[key] = integer(rd, v, at, name, node)
        elif v is None:  # switches a limit off, e.g. the default `baseline_cosine_min`
            out[key] = None
        else:
            out[key] = _num(rd, v, at, name, node)
    return out


def _task(rd: Reader, value: object, line: int, what: str) -> TaskMetricSpec:
    m = rd.as_map(value, line, what)
    rd.keys(m, grammar.TASK.names, what)
    check_section(rd, m, grammar.TASK, line, what)
    fields: dict[str, Any] = {}
    for key, v in m.items():
        at, name = m.key_line(key), f"`{key}` of {what}"
        if key == "function":
            fields[key] = _function(rd, v, at, name)
        elif key == "higher_is_better":
            fields[key] = rd.as_bool(v, at, name)
        else:
            fields[key] = _num(rd, v, at, name, _number_type(grammar.TASK, key))
    return TaskMetricSpec(**fields)


def _text(rd: Reader, value: object, line: int, what: str) -> AccuracyText:
    return AccuracyText(**_sourced(rd, value, line, what, grammar.ACCURACY_TEXT))


# Every `accuracy:` key but `gate` and `per_output`, which parse_accuracy flattens.
# fmt: off
_PARSERS: dict[str, Callable[[Reader, object, int, str], object]] = {
    "inputs": _inputs, "labels": _path, "reference": _reference, "baseline": Reader.as_bool,
    "golden": lambda rd, v, line, what: integer(
        rd, v, line, what, grammar.ACCURACY.scalar("golden")),
    "outputs": _outputs, "kl": _kl, "task": _task, "text": _text,
}
# fmt: on


def _get(draft: Mapping[str, object], key: str, default: T) -> T:
    # parse_accuracy stored a value of the default's type under each key.
    return cast("T", draft.get(key, default))


def _cell_value(sc: Scenario, key: str) -> str:  # as `reference` writes it
    return sc.quantization.name if key == QUANTIZATION else str(getattr(sc, key))


def finish_cells(
    rd: Reader, cells: Sequence[Scenario], extras: Sequence[Mapping[str, object]],
    presets: Mapping[str, QuantSpec], written: Iterable[object],
) -> list[Scenario]:  # fmt: skip
    """Set each cell's ``quantization`` and ``accuracy`` (``extras[i]``: cell i's merged
    values as parsed here) and their cell errors. ``written`` holds every value that may
    be a ``QuantRef``, so that preset names no cell uses (overridden, excluded) are checked.
    """
    for ref in written:
        _resolve(rd, ref, presets)
    cells = [
        dataclasses.replace(sc, quantization=_resolve(rd, extra.get(QUANTIZATION), presets))
        for sc, extra in zip(cells, extras, strict=True)
    ]
    out = []
    for sc, extra in zip(cells, extras, strict=True):
        draft = extra.get(ACCURACY)
        if isinstance(draft, dict):
            sc = dataclasses.replace(sc, accuracy=_accuracy(rd, draft, sc, cells, presets))
        out.append(dataclasses.replace(sc, error=sc.error or _cell_error(sc, draft)))
    return out


def _accuracy(
    rd: Reader, draft: Mapping[str, object], sc: Scenario, cells: Sequence[Scenario],
    presets: Mapping[str, QuantSpec],
) -> AccuracySpec:  # fmt: skip
    inputs = _get(draft, "inputs", _SPEC.inputs)
    if "labels" in draft:
        inputs = dataclasses.replace(inputs, labels=_get(draft, "labels", Path()))
    limits = {k.removeprefix("gate."): v for k, v in draft.items() if k.startswith("gate.")}
    gates = AccuracyGates(**cast("dict[str, Any]", limits))
    per_output = tuple(
        (key.removeprefix("per_output."), dataclasses.replace(gates, **cast("Any", value)))
        for key, value in draft.items()
        if key.startswith("per_output.")
    )
    kl_on, temperature = _get(draft, "kl", (_SPEC.kl_on, _SPEC.temperature))
    ref = draft.get("reference")
    return AccuracySpec(
        inputs, _reference_of(rd, sc, ref, cells, presets) if isinstance(ref, _Reference) else (),
        _get(draft, "baseline", _SPEC.against_baseline), _get(draft, "golden", _SPEC.golden),
        _get(draft, "outputs", _SPEC.outputs), kl_on, temperature, gates, per_output,
        _get(draft, "task", _SPEC.task), _get(draft, "text", _SPEC.text),
    )  # fmt: skip


def _reference_of(
    rd: Reader, sc: Scenario, ref: _Reference, cells: Sequence[Scenario],
    presets: Mapping[str, QuantSpec],
) -> tuple[tuple[str, str], ...]:  # fmt: skip
    target = dict(ref.pairs)
    name = target.get(QUANTIZATION)
    if name is not None and name not in presets and name != _CUSTOM:
        _resolve(rd, QuantRef(name, ref.lines[QUANTIZATION]), presets)  # raises, did-you-mean
    axes = [axis for axis, _ in sc.matrix_values]
    # The reference is this cell with the overrides applied; it must exist.
    wanted = {**{axis: _cell_value(sc, axis) for axis in axes}, **target}
    for cell in cells:
        if all(_cell_value(cell, k) == v for k, v in wanted.items()):
            return () if cell.cell_id == sc.cell_id else ref.pairs
    keys = [*axes, *(k for k in target if k not in axes)]
    listed = ", ".join(" ".join(f"{k}={_cell_value(c, k)}" for k in keys) for c in cells)
    of_cell = "" if set(axes) <= set(target) else f" (the reference of cell `{sc.item_name}`)"
    desc = " ".join(f"{k}={v}" for k, v in ref.pairs)
    problem = f"reference cell {desc}{of_cell} is not a cell of scenario `{sc.name}`"
    line, fix = ref.line, "name one of those cells, or add its values to the `matrix`"
    near = [c for c in cells if all(_cell_value(c, k) == v for k, v in target.items())]
    if near:  # the overridden values exist, only not with this cell's other axis values
        full = ", ".join(f"{k}: {_cell_value(near[0], k)}" for k in sorted({*axes, *target}))
        fix = f"name every axis, e.g. `reference: {{{full}}}`"
    for key, value in ref.pairs:
        seen = sorted({_cell_value(c, key) for c in cells})
        if value not in seen:
            line = ref.lines[key]
            other = f"add `{value}` to the `{key}` values, or use one of {', '.join(seen)}"
            fix = suggest(value, seen) or other
            break
    expected = "`reference` values naming another cell of the same scenario"
    rd.fail(line, f"{problem}; cells: {listed}", expected, fix)


#: The `accuracy:` keys of a single-call cell that a generative cell has no use for:
#: its prompts are its accuracy inputs and its output is the next-token logits.
_NOT_GENERATIVE = ("inputs", "labels", "outputs", "task", "per_output")
#: The `accuracy:` keys only a generative cell has.
_GENERATIVE_ONLY = ("text", "gate.token_match_min", "gate.perplexity_rise_max")


def _kind_error(sc: Scenario, draft: object) -> tuple[str, str, str] | None:
    """``accuracy:`` keys that do not fit the cell's kind: (problem, expected, fix)."""
    if not isinstance(draft, dict):
        return None
    cell = f"cell `{sc.item_name}`"
    if sc.generate is not None:
        keys = [k for k in draft if k.split(".")[0] in _NOT_GENERATIVE]
        if keys:
            listed = ", ".join(f"`{k.split('.')[0]}`" for k in dict.fromkeys(keys))
            return (
                f"{cell} generates, and its `accuracy:` sets {listed}",
                "`reference`, `gate`, `text`, `golden`, `baseline` or `kl` on a generative "
                "cell: its prompts are its inputs and its output the next-token logits",
                f"remove {listed} from this scenario's `accuracy:`",
            )
        kl_on, _temperature = _get(draft, "kl", (_SPEC.kl_on, _SPEC.temperature))
        if kl_on != "logits":
            return (
                f"{cell} generates and reads its outputs as probabilities (`kl: {{on: "
                "probabilities}`)",
                "`kl: {on: logits}`: a generative cell's output is its next-token logits",
                "remove `on: probabilities`",
            )
        return None
    keys = [k for k in draft if k in _GENERATIVE_ONLY and draft[k] is not None]
    if keys:
        listed = ", ".join(f"`{k.removeprefix('gate.')}`" for k in keys)
        return (
            f"{cell} generates nothing, and its `accuracy:` sets {listed}",
            "those on a scenario with `generate:` (token agreement, perplexity)",
            f"remove {listed}, or add `generate:` for a generative model",
        )
    return None


def _cell_error(sc: Scenario, draft: object) -> str | None:
    q, cell = sc.quantization, f"cell `{sc.item_name}`"
    custom = dataclasses.replace(q, name="default") != QuantSpec()
    kind = _kind_error(sc, draft)
    if kind is not None:
        problem, expected, fix = kind
    elif sc.generate is not None and sc.backend == "onnxruntime" and custom:
        problem = f"{cell} sets quantization preset `{q.name}` for ONNX Runtime GenAI"
        expected = "the default preset: the model builder quantizes the weights itself"
        fix = "remove `quantization:` from this cell (or `exclude` it)"
    elif sc.precision != "int8":
        return None  # quantization settings only apply to int8
    elif sc.backend == "torch":
        if not custom:
            return None
        problem = f"{cell} asks torch for int8 with quantization preset `{q.name}`"
        expected = "a preset with the default settings: torch int8 is always dynamic per-tensor"
        fix = "run this preset on `backend: onnxruntime`, or `exclude` this cell"
    elif q.mode != "static":
        return None
    elif not isinstance(draft, dict) or "inputs" not in draft:
        problem = f"{cell} uses static quantization `{q.name}` but has no `accuracy.inputs`"
        expected = "`accuracy: {inputs: ...}`: static int8 is calibrated on the accuracy inputs"
        fix = "add e.g. `accuracy: {inputs: {file: calibration.npz}}`, or use `mode: dynamic`"
    elif sc.accuracy and (q.calibration_samples or 0) > sc.accuracy.inputs.count:
        count = sc.accuracy.inputs.count
        problem = f"{cell} calibrates on {q.calibration_samples} of {count} accuracy inputs"
        expected = f"`calibration_samples` <= `accuracy.inputs.count` ({count})"
        fix = "lower `calibration_samples`, or raise `count` in `accuracy.inputs`"
    else:
        return None
    return str(CellError(problem, expected=expected, fix=fix, location=sc.location))
