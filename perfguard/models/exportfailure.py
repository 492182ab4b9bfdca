"""Why an ONNX export stopped, read from the exporter's exception, as an ``ExportError``.

torch's two exporters fail in their own words: the TorchScript one with
``Exporting the operator 'aten::diff' to ONNX opset version 17 is not supported`` or a
JIT message about an output of an ``unsupported type: DynamicCache``; the dynamo one
with a ``TorchExportError`` (torch.export could not capture ``forward``) or a
``ConversionError`` (no ONNX translation of an operator), each quoting the first
exception under ``## Exception summary``. :func:`read_blocker` reads the operator or
type that stopped it; :func:`export_error` turns that into perfguard's error with what
was found, what the exporter expects and the options that can get past it.

A Python generation loop (transformers' ``generate()``) is no graph at all: a factory
that returns a bound ``generate`` method (:func:`is_generation_loop`), or an export that
fails after forward called a submodule's ``generate`` (:func:`watch_generate`) or inside
transformers' generation code, gets :func:`generation_loop_error`.
"""

from __future__ import annotations

import contextlib
import re
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from perfguard.core.errors import ExportError
from perfguard.core.scenario import ModelSpec

__all__ = [
    "Blocker",
    "GenerateCalls",
    "export_error",
    "generation_loop_error",
    "in_generation_code",
    "is_generation_loop",
    "read_blocker",
    "watch_generate",
]

_DETAIL_CHARS = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# TorchScript exporter (torch.onnx.errors.UnsupportedOperatorError).
_TS_OPERATOR = re.compile(
    r"Exporting the operator '(?P<name>[^']+)' to ONNX opset version (?P<opset>\d+) is not "
    r"supported(?:\. Support for this operator was added in version (?P<added>\d+))?"
)
_TS_NAMESPACE = re.compile(r"unrecognized namespace (?P<name>\w+::\w+)")
_TS_SYMBOLIC = re.compile(r"Unsupported: ONNX export of (?:operator )?(?P<name>[\w.:]+)")
# The JIT tracer, on an input or output that is not a tensor (a KV cache, a dataclass).
_JIT_TYPE = re.compile(r"unsupported type: (?P<name>[\w.]+)")
# The dynamo exporter quotes the first exception of its chain under this heading.
_SUMMARY = re.compile(r"## Exception summary\s*\n\s*<class '(?P<cls>[^']+)'>: (?P<text>[^\n]*)")
_DISPATCH = re.compile(r"No ONNX function found for <OpOverload\(op='(?P<name>[^']+)'")
_FX_TARGET = re.compile(r"target=(?P<name>torch\.ops\.[\w.]+)")
_UNKNOWN_OUTPUT = re.compile(r"Found <class '(?P<name>[\w.]+)'> in (?P<where>output|input)")
_USER_CALL = re.compile(
    r"The following call raised this error:\s*\n\s*File \"(?P<file>[^\"]+)\", line "
    r"(?P<line>\d+), in (?P<func>\w+)\n\s*(?P<code>[^\n]*)"
)
_GENERATION_CODE = re.compile(r"transformers[/\\]generation[/\\]")


@dataclass(frozen=True)
class Blocker:
    """What stopped an export.

    ``kind``: ``operator`` (no ONNX translation of ``name``), ``type`` (a value of type
    ``name`` crosses forward's boundary), ``capture`` (torch.export could not capture
    forward: ``name`` is the exception class, ``where`` the user's line it quotes),
    ``generation`` (a Python generation loop) or ``unknown`` (``name``: the exception's
    class). ``detail`` is the exporter's own line; ``added``, for an operator, the opset
    from which the TorchScript exporter translates it.
    """

    kind: str
    name: str
    detail: str
    added: int | None = None
    where: str = ""


def _one_line(text: str) -> str:
    line = " ".join(_ANSI.sub("", text).split())
    return line if len(line) <= _DETAIL_CHARS else line[: _DETAIL_CHARS - 3] + "..."


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


@dataclass
class GenerateCalls:
    """Whether forward called a submodule's ``generate`` during an export."""

    called: list[str] = field(default_factory=list)


@contextlib.contextmanager
def watch_generate(module: object, calls: GenerateCalls) -> Iterator[None]:
    """Note the calls of every submodule's bound ``generate`` while the block runs.

    The TorchScript tracer runs a generation loop to its end and fails afterwards, in
    its own graph code: no frame of its exception is in transformers then, but the
    call was seen here, in ``calls``. The wrappers are instance attributes, removed on
    the way out.
    """
    wrapped: list[object] = []
    modules = getattr(module, "modules", None)
    for sub in modules() if callable(modules) else ():
        original = getattr(sub, "generate", None)
        if "generate" in vars(sub) or not is_generation_loop(original):
            continue
        with contextlib.suppress(AttributeError, TypeError):
            object.__setattr__(sub, "generate", _noting(original, calls, type(sub).__name__))
            wrapped.append(sub)
    try:
        yield
    finally:
        for sub in wrapped:
            with contextlib.suppress(AttributeError):
                object.__delattr__(sub, "generate")


def _noting(generate: Callable[..., Any], calls: GenerateCalls, owner: str) -> Callable[..., Any]:
    def noted(*args: Any, **kwargs: Any) -> Any:
        calls.called.append(f"{owner}.generate")
        return generate(*args, **kwargs)

    return noted


def in_generation_code(exc: BaseException) -> bool:
    """Whether ``exc`` (or one it was raised from) came from transformers' generation
    code: a frame of its traceback there, or the dynamo exporter quoting such a line."""
    for one in _chain(exc):
        if _GENERATION_CODE.search(str(one)):
            return True
        frames = traceback.extract_tb(one.__traceback__)
        if any(_GENERATION_CODE.search(frame.filename) for frame in frames):
            return True
    return False


def read_blocker(exc: BaseException) -> Blocker:
    """The operator or type that stopped an export, read from the exporter's exception."""
    if in_generation_code(exc):
        return Blocker("generation", "generate", _one_line(f"{type(exc).__name__}: {exc}"))
    text = _ANSI.sub("", str(exc))
    summary = _SUMMARY.search(text)
    if summary is not None:  # the dynamo exporter: its first exception says why
        return _dynamo_blocker(text, summary)
    if match := _TS_OPERATOR.search(text):
        added = int(match["added"]) if match["added"] else None
        return Blocker("operator", match["name"], _one_line(match[0]), added)
    for pattern in (_TS_NAMESPACE, _TS_SYMBOLIC):
        if match := pattern.search(text):
            return Blocker("operator", match["name"], _one_line(text))
    if match := _JIT_TYPE.search(text):
        return Blocker("type", match["name"].rpartition(".")[2], _one_line(text))
    return Blocker("unknown", type(exc).__name__, _one_line(f"{type(exc).__name__}: {text}"))


def _dynamo_blocker(text: str, summary: re.Match[str]) -> Blocker:
    detail = _one_line(f"{summary['cls'].rpartition('.')[2]}: {summary['text']}")
    if match := _DISPATCH.search(text):
        return Blocker("operator", match["name"], detail)
    if match := _UNKNOWN_OUTPUT.search(text):
        return Blocker("type", match["name"].rpartition(".")[2], detail)
    if "ConversionError" in summary["cls"] and (match := _FX_TARGET.search(text)):
        return Blocker("operator", match["name"].removeprefix("torch.ops."), detail)
    call = _USER_CALL.search(text)
    where = f"{call['file']}:{call['line']} ({call['code'].strip()})" if call else ""
    return Blocker("capture", summary["cls"].rpartition(".")[2], detail, where=where)


def is_generation_loop(value: object) -> TypeGuard[Callable[..., Any]]:
    """Whether a factory returned a bound ``generate`` method (a generation loop)."""
    return (
        callable(value)
        and getattr(value, "__name__", "") == "generate"
        and (getattr(value, "__self__", None) is not None)
    )


def generation_loop_error(model: ModelSpec, found: str) -> ExportError:
    """The error of a model that is a Python generation loop (``found``: what showed it)."""
    return ExportError(
        f"factory {model.factory} gives a Python generation loop ({found}): a loop of "
        "forward passes with Python stopping rules and sampling cannot be exported to ONNX, "
        "and ONNX Runtime has no generate()",
        expected="a torch.nn.Module whose forward is one pass of the network",
        fix="measure generation as a generative scenario (`generate:` in the suite: TTFT, "
        "ITL and TPOT on the torch backend, the factory returning the causal LM), or "
        "return a module whose forward is the model's forward (the prefill: "
        "`model(input_ids=input_ids, use_cache=False).logits`) and export that",
        location=model.location,
    )


def export_error(
    exc: BaseException, model: ModelSpec, calls: GenerateCalls | None = None
) -> ExportError:
    """perfguard's error for an export of ``model`` that raised ``exc`` (``calls``: the
    ``generate`` calls :func:`watch_generate` saw during it)."""
    blocker = read_blocker(exc)
    if calls is not None and calls.called and blocker.kind != "generation":
        found = f"forward called {calls.called[0]}(); the export then failed with "
        return generation_loop_error(model, found + blocker.detail)
    if blocker.kind == "generation":
        found = f"the export failed in transformers' generation code: {blocker.detail}"
        return generation_loop_error(model, found)
    doing = f"exporting factory {model.factory} to ONNX ({model.exporter} exporter, "
    doing += f"opset {model.opset})"
    expected, fix = _advice(blocker, model)
    if blocker.kind == "operator":
        problem = f"{doing} stopped at operator `{blocker.name}`: {blocker.detail}"
    elif blocker.kind == "type":
        problem = f"{doing} stopped at a value of type `{blocker.name}`: {blocker.detail}"
    elif blocker.kind == "capture":
        at = f" at {blocker.where}" if blocker.where else ""
        problem = f"{doing}: torch.export could not capture forward{at}: {blocker.detail}"
    else:
        problem = f"{doing} failed: {blocker.detail}"
    return ExportError(problem, expected=expected, fix=fix, location=model.location)


_ELSEWHERE = "run this model on the torch backend, or export it yourself and point `onnx:` at it"


def _advice(blocker: Blocker, model: ModelSpec) -> tuple[str, str]:
    """(expected, fix) for what stopped ``model``'s export."""
    dynamo = model.exporter == "dynamo"
    if blocker.kind == "operator":
        if blocker.added is not None and not dynamo:
            return (
                f"an operator the TorchScript exporter translates at opset {model.opset}",
                f"write `opset: {blocker.added}` (the TorchScript exporter translates "
                f"`{blocker.name}` from opset {blocker.added} on), `exporter: dynamo`, or "
                + _ELSEWHERE,
            )
        if not dynamo:
            return (
                "operators the TorchScript exporter translates to ONNX (no opset of it "
                f"translates `{blocker.name}`: another `opset:` does not help)",
                "write `exporter: dynamo` (torch.export decomposes operators into ones it "
                f"translates), replace `{blocker.name}` in forward, or " + _ELSEWHERE,
            )
        return (
            "operators the dynamo exporter (onnxscript's torchlib) translates to ONNX",
            f"replace `{blocker.name}` in forward, try `exporter: torchscript`, or " + _ELSEWHERE,
        )
    if blocker.kind == "type":
        if blocker.name.endswith("Cache"):
            return (
                "forward to take and return tensors only: neither exporter takes a "
                f"KV-cache object (`{blocker.name}`) as an output or input",
                "build the model with `use_cache=False` in the factory and return its "
                "tensors (the prefill: a module whose forward returns "
                "`model(input_ids=input_ids, use_cache=False).logits`)"
                + (
                    ""
                    if dynamo
                    else "; should the tracer then stop at an operator, `exporter: dynamo`"
                ),
            )
        return (
            "forward to take and return tensors (or tuples, lists, dicts of tensors)",
            f"return tensors instead of `{blocker.name}` from forward (a wrapper module "
            "that picks them out), or " + _ELSEWHERE,
        )
    if blocker.kind == "capture":
        return (
            "a forward torch.export can capture: no Python control flow on tensor values, "
            "no untraceable Python calls",
            "change the quoted line (torch.where or torch.cond for a branch on a value), "
            "write `exporter: torchscript` (it traces the one path these inputs take), or "
            + _ELSEWHERE,
        )
    other = "torchscript" if dynamo else "dynamo"
    return (
        f"a model torch.onnx.export ({model.exporter} exporter, fixed shapes) can export",
        f"write `exporter: {other}`, " + _ELSEWHERE,
    )
