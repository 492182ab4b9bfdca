"""What a starter suite learns from a factory's model beyond its ``forward`` signature.

Two things ``perfguard init`` cannot read from a signature:

* a Hugging Face ``transformers`` model (a ``PreTrainedModel``, or a wrapper holding
  one) takes every input as optional keyword; its config says which inputs it needs
  and their ranges: token ids below ``vocab_size``, an attention mask of ones, token
  type ids where the config has ``type_vocab_size``, a sequence no longer than
  ``max_position_embeddings``; or images of ``num_channels`` by ``image_size`` squared
  (:func:`pretrained_inputs`);
* a model whose ``forward`` is a generation loop (it calls ``generate()`` or loops
  with ``while``) runs in torch only: an ONNX export traces one pass and would
  measure something else (:func:`generation_loop`).

Nothing here imports ``transformers``: a model can only be one of its classes when
the factory imported it.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from perfguard.suite.starter import BATCH, DIM, StarterInput

__all__ = ["find_pretrained", "generation_loop", "pretrained_inputs"]

#: The token inputs a text model is given, in this order, when its forward takes them.
_TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def find_pretrained(module: Any) -> Any | None:
    """``module`` itself when it is a ``transformers.PreTrainedModel``, else the first
    one it holds (a wrapper's ``self.model``); None when it holds none."""
    transformers = sys.modules.get("transformers")
    base = getattr(transformers, "PreTrainedModel", None) if transformers else None
    if not isinstance(base, type):
        return None
    modules = getattr(module, "modules", None)
    candidates = modules() if callable(modules) else [module]
    return next((m for m in candidates if isinstance(m, base)), None)


def _sequence_length(config: Any, generating: bool) -> tuple[int, str]:
    """The starter's sequence length, at most :data:`DIM`, and a note saying why. A
    prompt of a generation loop gets half the context: room for the tokens it adds."""
    limit = getattr(config, "max_position_embeddings", None)
    if not isinstance(limit, int) or limit <= 0:
        return DIM, f"{DIM} tokens (set your traffic's length)"
    if generating:
        limit //= 2
        what = f"half the config's max_position_embeddings ({limit})"
    else:
        what = f"the config's max_position_embeddings ({limit})"
    if limit < DIM:
        return limit, f"{limit} tokens: {what}"
    return DIM, f"{DIM} tokens (set your traffic's length; at most {what})"


def _image_side(config: Any) -> int | None:
    size = getattr(config, "image_size", None)
    if isinstance(size, list | tuple) and size:
        size = size[0]
    return size if isinstance(size, int) and size > 0 else None


def pretrained_inputs(
    pretrained: Any, accepted: Sequence[str], *, generating: bool = False
) -> list[StarterInput]:
    """The inputs of a ``transformers`` model from its config, limited to the names its
    caller's ``forward`` ``accepted``; empty when its main input is neither token ids
    nor pixel values (the caller falls back to the signature). ``generating``: the
    caller's forward is a generation loop (:func:`generation_loop`), the tokens a prompt."""
    config = pretrained.config
    main = getattr(pretrained, "main_input_name", "input_ids")
    kind = type(pretrained).__name__
    if main == "pixel_values" and "pixel_values" in accepted:
        channels = getattr(config, "num_channels", None)
        side = _image_side(config)
        if isinstance(channels, int) and channels > 0 and side is not None:
            note = f"{kind} config: num_channels {channels}, image_size {side}"
            return [StarterInput("pixel_values", (BATCH, channels, side, side), "float32", note)]
        note = f"TODO: {kind} config has no num_channels/image_size; set the image shape"
        return [StarterInput("pixel_values", (BATCH, 3, 224, 224), "float32", note)]
    if main != "input_ids":
        return []
    length, why = _sequence_length(config, generating)
    shape = (BATCH, length)
    out: list[StarterInput] = []
    for name in (n for n in _TOKEN_INPUTS if n in accepted):
        if name == "input_ids":
            vocab = getattr(config, "vocab_size", None)
            if isinstance(vocab, int) and vocab > 0:
                note = f"{why}; ids below the config's vocab_size"
                out.append(StarterInput(name, shape, "int64", note, low=0, high=vocab))
            else:
                note = f"TODO: {kind} config has no vocab_size; set `high`"
                out.append(StarterInput(name, shape, "int64", note, low=0, high=2))
        elif name == "attention_mask":
            out.append(StarterInput(name, shape, "int64", "no padding", fill=1))
        elif isinstance(getattr(config, "type_vocab_size", None), int):
            out.append(StarterInput(name, shape, "int64", "one segment", fill=0))
    return out


class _LoopFinder(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: str | None = None

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "generate" and self.found is None:
            self.found = "forward() calls generate(), a generation loop"
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        if self.found is None:
            self.found = "forward() loops with `while`, a length only known as it runs"
        self.generic_visit(node)


def generation_loop(module: Any) -> str | None:
    """Why ``module``'s ``forward`` cannot be exported as one graph (it calls
    ``generate()`` or runs a ``while`` loop), or None (also when its source is unknown)."""
    forward = getattr(type(module), "forward", None)
    try:
        source = textwrap.dedent(inspect.getsource(forward))  # type: ignore[arg-type]
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    finder = _LoopFinder()
    finder.visit(tree)
    return finder.found
