"""A commented starter suite for one model: what ``perfguard init`` writes.

The text is built from :mod:`perfguard.suite.grammar` (defaults, the schema line) and
a model's inputs: read from an ONNX file's graph here (:func:`onnx_inputs`), or found
by the caller from a factory's module (``perfguard.cli``; a Hugging Face model's from its
config, :mod:`perfguard.suite.pretrained`). Dynamic dimensions get a
fixed default (batch 1, 128 elsewhere) and a comment naming them; an input whose shape
or dtype could not be read gets a placeholder and a ``TODO``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from perfguard.core.errors import ModelError
from perfguard.core.scenario import DTYPES
from perfguard.suite import grammar

__all__ = [
    "BATCH",
    "DIM",
    "SCHEMA_FILE",
    "SCHEMA_NAME",
    "StarterInput",
    "onnx_inputs",
    "render",
    "schema_comment",
    "suite_name",
]

SCHEMA_NAME = "perfguard/schemas/suite.schema.json"  # where the package ships it
SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "suite.schema.json"
BATCH = 1  # what a dynamic leading (batch) dimension becomes
DIM = 128  # what any other dynamic dimension becomes (a sequence length, an image side)
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./+-]*")
# Names that are token ids / masks by convention: integer inputs with a fitting range.
_MASKS = ("attention_mask", "token_type_ids", "mask")


@dataclass(frozen=True)
class StarterInput:
    """One input of a starter suite: its spec and a comment for the line (may be empty)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    note: str = ""
    low: int | None = None
    high: int | None = None
    fill: int | None = None


def suite_name(text: str) -> str:
    """A scenario/model name from a file stem or module name (letters, digits, ``_ . + -``)."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", text).strip("._") or "model"
    return name


def _integer_input(name: str, shape: tuple[int, ...], dtype: str, note: str) -> StarterInput:
    lowered = name.lower()
    if any(lowered.endswith(m) for m in _MASKS):
        return StarterInput(name, shape, dtype, note, fill=1 if "attention" in lowered else 0)
    return StarterInput(name, shape, dtype, note)


def _fixed(dims: Sequence[int | str | None]) -> tuple[tuple[int, ...], list[str]]:
    """Dims with dynamic ones (``None``, a name, <= 0) replaced, and what was replaced."""
    shape: list[int] = []
    notes: list[str] = []
    for i, dim in enumerate(dims):
        if isinstance(dim, int) and dim > 0:
            shape.append(dim)
            continue
        value = BATCH if i == 0 else DIM
        shape.append(value)
        label = f"`{dim}`" if isinstance(dim, str) and dim else "dynamic"
        notes.append(f"dim {i} ({label}) fixed at {value}")
    return tuple(shape), notes


def _input(name: str, dims: Sequence[int | str | None] | None, dtype: str | None) -> StarterInput:
    if dims is None:
        note = "TODO: the shape could not be read; set it"
        return StarterInput(name, (BATCH, DIM), dtype or "float32", note)
    shape, notes = _fixed(dims)
    if dtype not in DTYPES:
        notes.append(f"TODO: dtype {dtype or 'unknown'} is not one perfguard generates; set it")
        dtype = "float32"
    note = "; ".join(notes)
    if dtype.startswith(("int", "uint")):
        return _integer_input(name, shape, dtype, note)
    return StarterInput(name, shape, dtype, note)


def onnx_inputs(path: Path) -> list[StarterInput]:
    """The graph inputs of an ONNX file (initializers excluded), dynamic dims fixed.

    Reads the file with ``onnx`` when it is installed, else with ``onnxruntime``.
    """
    if not path.is_file():
        raise ModelError(
            f"ONNX file {path} not found",
            expected="an existing .onnx file",
            fix="check the path given to --onnx",
        )
    try:
        return _with_onnx(path)
    except ImportError:
        pass
    try:
        return _with_onnxruntime(path)
    except ImportError:
        raise ModelError(
            f"cannot read the inputs of {path}: neither onnx nor onnxruntime is installed",
            expected="the `onnx` or `onnxruntime` package",
            fix="pip install 'perfguard[onnx]'",
        ) from None


def _with_onnx(path: Path) -> list[StarterInput]:
    import onnx
    from onnx import helper

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise _not_onnx(path, exc) from exc
    graph = proto.graph
    initialized = {init.name for init in graph.initializer}
    out = []
    for value in graph.input:
        if value.name in initialized:
            continue
        tensor = value.type.tensor_type
        dtype = None
        try:
            dtype = str(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        except (KeyError, ValueError, TypeError):
            dtype = None
        dims: list[int | str | None] | None = None
        if tensor.HasField("shape"):
            dims = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tensor.shape.dim
            ]
        out.append(_input(value.name, dims, _dtype_name(dtype)))
    return out


def _with_onnxruntime(path: Path) -> list[StarterInput]:
    import onnxruntime

    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise _not_onnx(path, exc) from exc
    out = []
    for arg in session.get_inputs():
        match = re.fullmatch(r"tensor\((\w+)\)", arg.type or "")
        dtype = {"float": "float32", "double": "float64", "float16": "float16"}.get(
            match[1] if match else "", match[1] if match else None
        )
        dims = [d if isinstance(d, int) else (d or None) for d in arg.shape]
        out.append(_input(arg.name, dims, dtype))
    return out


def _dtype_name(dtype: str | None) -> str | None:
    return {"bool_": "bool"}.get(dtype or "", dtype)


def _not_onnx(path: Path, exc: Exception) -> ModelError:
    return ModelError(
        f"{path} is not an ONNX model ({type(exc).__name__}: {exc})",
        expected="a serialized onnx.ModelProto",
        fix="export the model first (torch.onnx.export) and pass the .onnx file",
    )


def schema_comment(suite_path: Path, root: Path) -> str:
    """The editor's schema line, relative to the suite file when perfguard sits inside
    the project ``root`` (a virtual environment there, a checkout): it then works in
    any checkout. Otherwise a comment naming the schema's place in the package, never
    this machine's absolute path (the file is meant to be committed)."""
    target = SCHEMA_FILE
    if target.is_relative_to(root.resolve()):
        shown = Path(os.path.relpath(target, (root / suite_path).parent.resolve())).as_posix()
        return f"# yaml-language-server: $schema={shown}"
    return (
        f"# Editor completion: point `$schema` at {SCHEMA_NAME} of the installed perfguard "
        "(`perfguard init` printed its path)"
    )


def _flow(value: object) -> str:
    """A flow-style YAML value for numbers, strings and lists of them."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        plain = _PLAIN_VALUE.fullmatch(value) and yaml.safe_load(value) == value
        return value if plain else json.dumps(value)
    return json.dumps(value)


def _key(name: str) -> str:
    return name if _PLAIN_KEY.fullmatch(name) else json.dumps(name)


def _input_line(spec: StarterInput) -> str:
    fields: dict[str, object] = {"shape": list(spec.shape), "dtype": spec.dtype}
    if spec.fill is not None:
        fields["fill"] = spec.fill
    elif spec.low is not None and spec.high is not None:
        fields["low"], fields["high"] = spec.low, spec.high
    line = f"      {_key(spec.name)}: {_flow(fields)}"
    return f"{line}  # {spec.note}" if spec.note else line


def render(
    name: str,
    suite_path: Path,
    inputs: Sequence[StarterInput],
    *,
    root: Path,
    factory: str | None = None,
    onnx: str | None = None,
    source_note: str = "",
    torch_only: str | None = None,
) -> str:
    """The starter suite's text: one model (``factory`` or ``onnx``), one scenario.

    ``suite_path`` is where it will be written, relative to the project ``root``.
    ``torch_only``: why a factory's model runs in torch alone (no ONNX Runtime cell)."""
    defaults = grammar.DEFAULTS
    warmup, measure = defaults.key("warmup").default, defaults.key("measure").default
    p95 = grammar.GATE.key("p95").default
    run = f"pytest --perfguard {suite_path.as_posix()}"
    lines = [
        schema_comment(suite_path, root),
        f"# perfguard suite for `{name}`, written by `perfguard init`. Run it with",
        f"#   {run}",
        "# Every key, its type and default: `perfguard keys`.",
        "defaults:",
        "  # Each loop runs until BOTH its iterations and its seconds are reached.",
        f"  warmup: {_flow(warmup)}",
        f"  measure: {_flow(measure)}",
        "  # Fail a cell whose P95 latency regressed by more than this vs the baseline.",
        f'  gate: {{p95: "{p95}"}}',
        "",
        "models:",
        f"  {_key(name)}:",
    ]
    if factory is not None:
        lines.append(f"    factory: {factory}  # module:function returning a torch.nn.Module")
    else:
        lines.append(f"    onnx: {_flow(onnx)}  # relative to this file's folder")
    lines.append("    inputs:" + (f"  # {source_note}" if source_note else ""))
    lines += [_input_line(spec) for spec in inputs]
    lines += [
        "",
        "scenarios:",
        f"  - name: {name}",
        f"    model: {_key(name)}",
        "    device: cpu",
    ]
    if factory is not None and torch_only is not None:
        lines += [
            f"    backend: torch  # ONNX Runtime left out: {torch_only};",
            "    #   an export traces one pass and would measure something else",
        ]
    elif factory is not None:
        lines += [
            "    matrix:  # one pytest item per cell: name[torch-fp32], ...",
            "      backend: [torch, onnxruntime]",
            "      # precision: [fp32, int8]",
        ]
    else:
        lines += [
            "    backend: onnxruntime",
            "    # matrix:  # one pytest item per cell",
            "    #   precision: [fp32, int8]",
        ]
    lines += [
        "    # threads: 2                     # intra-op threads (default: the runtime's)",
        "    # load: {concurrency: [1, 4]}    # concurrent clients, one cell per level",
    ]
    return "\n".join(lines) + "\n"
