"""The ``models:`` section of a suite file: each entry into a :class:`ModelSpec`.

Read by :func:`perfguard.suite.loader.load_suite`; the keys, their types and defaults
are declared in :data:`perfguard.suite.grammar.MODEL` and ``INPUT``. Strict like the
rest: every error names ``file:line``, what was found, what was expected and the fix.

* A model is exactly one of ``server:`` (a served model: ``sections.server``),
  ``factory: "module:function"`` (a torch module;
  ``kwargs`` reach the function as plain data, lists turned into tuples;
  ``opset`` for the ONNX export, default 17, and ``exporter``: ``torchscript``
  (default) or ``dynamo``, whose opset is at least 18) or ``onnx: path.onnx``; and exactly
  at most one of ``inputs:`` (name -> spec) or ``inputs_file: data.npz`` (neither: a
  generative model, whose scenarios' ``generate:`` makes its prompts). ``outputs``
  optionally names the outputs.
* ``onnx`` and ``inputs_file`` are relative to the suite file's directory
  (``ModelSpec.base_dir``, also where factory modules are imported from). Files
  are not checked here; a missing one fails only the cells that use it.
* Input specs: ``shape`` (required; integers >= 1, ``[]`` for a scalar),
  ``dtype`` (float32 (default), float16, bfloat16, float64, int64, int32, int16,
  int8, uint8, bool), either ``low``+``high`` (``low < high``; high exclusive for
  integers) or ``fill``, and ``seed`` (integer >= 0, default 0). Without a range
  or fill, floats are standard normal and integers uniform in [0, 100).
* A served embedding model (``server: {api: embeddings}``) has exactly one input, of
  dtype ``text`` and shape ``[texts, tokens]`` (no range or fill), and one output
  (``embedding`` unless ``outputs`` names it); ``text`` belongs to no other model, and
  a generating served model takes no ``inputs`` (its ``generate:`` makes the prompts).
"""

from __future__ import annotations

import re
from pathlib import Path

from perfguard.core.errors import Location
from perfguard.core.policy import NAME_MAX_CHARS
from perfguard.core.scenario import (
    DTYPES,
    DYNAMO_MIN_OPSET,
    EMBEDDING_OUTPUT,
    EXPORTERS,
    TEXT_DTYPE,
    InputSpec,
    ModelSpec,
    ServerSpec,
)
from perfguard.suite import grammar
from perfguard.suite.rules import check_section, integer, number
from perfguard.suite.sections.server import parse_server
from perfguard.suite.yamlpos import PosDict, Reader, found, frozen

__all__ = ["MODEL_KEYS", "parse_model"]

MODEL_KEYS = grammar.MODEL.names
#: The dtypes an input may have: numpy's, and served embedding models' ``text``.
INPUT_DTYPES = (*DTYPES, TEXT_DTYPE)
_FACTORY_RE = re.compile(grammar.FUNCTION_PATTERN)


def _input(rd: Reader, name: object, value: object, line: int, model: str) -> InputSpec:
    where = (
        f"input `{name}` of model `{model}`"
        if len(str(name)) <= NAME_MAX_CHARS
        else f"an input of model `{model}`"
    )
    m = rd.as_map(value, line, where)
    rd.keys(m, grammar.INPUT.names, where)
    name = rd.as_name(name, line, f"the name of {where}")
    check_section(rd, m, grammar.INPUT, line, where)
    dims = rd.as_list(m["shape"], m.key_line("shape"), f"`shape` of {where}")
    shape = tuple(
        integer(rd, d, dims.item_line(i), f"dimension {i} of `shape` of {where}", grammar.DIMENSION)
        for i, d in enumerate(dims)
    )
    dtype = m.get("dtype", grammar.INPUT.key("dtype").default)
    dtype = rd.as_choice(dtype, m.key_line("dtype"), f"`dtype` of {where}", INPUT_DTYPES)
    if dtype == TEXT_DTYPE:
        at = m.key_line("dtype")
        if len(shape) != 2:
            problem = f"{where} has dtype text and shape {list(shape)}"
            expected = "shape [texts, tokens]: the texts of one request, each of `tokens` tokens"
            rd.fail(at, problem, expected, "write e.g. `shape: [1, 64]`")
        for key in ("low", "high", "fill"):
            if key in m:
                problem = f"{where} has dtype text and `{key}`"
                expected = "a text input without a range or fill (its texts are seeded words)"
                rd.fail(m.key_line(key), problem, expected, f"remove `{key}`")
    nums = {
        k: number(rd, m[k], m.key_line(k), f"`{k}` of {where}", grammar.INPUT.scalar(k))
        for k in ("low", "high", "fill")
        if k in m
    }
    low, high, fill = nums.get("low"), nums.get("high"), nums.get("fill")
    if low is not None and high is not None and low >= high:
        fix = "make `high` larger than `low` (high is exclusive for integers)"
        rd.fail(m.key_line("low"), f"{where} has low={low:g} >= high={high:g}", "low < high", fix)
    seed = integer(
        rd,
        m.get("seed", grammar.INPUT.key("seed").default),
        m.key_line("seed"),
        f"`seed` of {where}",
        grammar.INPUT.scalar("seed"),
    )
    return InputSpec(name, shape, dtype, low, high, fill, seed)


def parse_model(rd: Reader, name: object, value: object, line: int, base_dir: Path) -> ModelSpec:
    where = f"model `{name}`" if len(str(name)) <= NAME_MAX_CHARS else "a model"
    m = rd.as_map(value, line, where)
    rd.keys(m, grammar.MODEL.names, where)
    name = rd.as_name(name, line, "the model name")
    check_section(rd, m, grammar.MODEL, line, where)

    def path(key: str) -> Path:
        return base_dir / rd.as_str(m[key], m.key_line(key), f"`{key}` of {where}")

    factory, onnx, inputs_file, server = None, None, None, None
    opset: int = grammar.MODEL.key("opset").default
    exporter: str = grammar.MODEL.key("exporter").default
    kwargs: tuple[tuple[str, object], ...] = ()
    if "factory" in m:
        factory = rd.as_str(m["factory"], m.key_line("factory"), f"`factory` of {where}")
        if not _FACTORY_RE.fullmatch(factory):
            module, _, func = factory.replace(":", ".").rpartition(".")
            fix = f"separate module and function with `:`, e.g. `{module or 'module'}:{func}`"
            problem = f"`factory` of {where} is `{factory}`"
            rd.fail(m.key_line("factory"), problem, "`module:function`", fix)
        if "kwargs" in m:
            kw = rd.as_map(m["kwargs"], m.key_line("kwargs"), f"`kwargs` of {where}")
            for k in kw:
                if not isinstance(k, str) or not k.isidentifier():
                    problem = f"`kwargs` key {found(k)} of {where} is not a keyword name"
                    rd.fail(kw.key_line(k), problem, "a Python identifier", "rename the key")
            kwargs = tuple((k, frozen(v)) for k, v in kw.items())
        if "exporter" in m:
            at, what = m.key_line("exporter"), f"`exporter` of {where}"
            exporter = rd.as_choice(m["exporter"], at, what, EXPORTERS)
        if "opset" in m:
            at, what = m.key_line("opset"), f"`opset` of {where}"
            opset = integer(rd, m["opset"], at, what, grammar.MODEL.scalar("opset"))
            if exporter == "dynamo" and opset < DYNAMO_MIN_OPSET:
                problem = f"{what} is {opset} with `exporter: dynamo`"
                expected = (
                    f"opset >= {DYNAMO_MIN_OPSET}: the dynamo exporter writes no lower opset, "
                    "and converting its graph down can leave one ONNX Runtime refuses"
                )
                fix = (
                    f"write `opset: {DYNAMO_MIN_OPSET}` (or leave it out), "
                    f"or `exporter: torchscript` for opset {opset}"
                )
                rd.fail(at, problem, expected, fix)
        elif exporter == "dynamo":
            opset = DYNAMO_MIN_OPSET
    elif "onnx" in m:
        onnx = path("onnx")
    else:
        server = parse_server(rd, m["server"], m.key_line("server"), where)
    inputs: list[InputSpec] = []
    if "inputs" in m:
        spec = rd.as_map(m["inputs"], m.key_line("inputs"), f"`inputs` of {where}")
        if not spec:
            fix = "add `name: {shape: [...], dtype: ...}` entries"
            rd.fail(m.key_line("inputs"), f"`inputs` of {where} is empty", "an input", fix)
        inputs = [_input(rd, k, v, spec.key_line(k), name) for k, v in spec.items()]
    elif "inputs_file" in m:
        inputs_file = path("inputs_file")
    outputs: tuple[str, ...] = ()
    if "outputs" in m:
        out = rd.as_list(m["outputs"], m.key_line("outputs"), f"`outputs` of {where}")
        outputs = tuple(
            rd.as_str(o, out.item_line(i), f"output {i} of {where}") for i, o in enumerate(out)
        )
    where_inputs = m.key_line("inputs") if "inputs" in m else line
    outputs = _served_io(rd, server, inputs, outputs, where, where_inputs, m)
    return ModelSpec(
        name, Location(rd.path, line), base_dir, factory, kwargs, onnx, tuple(inputs),
        inputs_file, outputs, opset, exporter, server,
    )  # fmt: skip


def _served_io(
    rd: Reader,
    server: ServerSpec | None,
    inputs: list[InputSpec],
    outputs: tuple[str, ...],
    where: str,
    line: int,
    m: PosDict,
) -> tuple[str, ...]:
    """The outputs of a model once its inputs fit what it is: text inputs for a served
    embedding model only (exactly one, and one output, ``EMBEDDING_OUTPUT`` by default),
    no inputs for a generating served model."""
    texts = [spec for spec in inputs if spec.dtype == TEXT_DTYPE]
    embeds = server is not None and not server.generative
    if texts and not embeds:
        problem = f"input `{texts[0].name}` of {where} has dtype text"
        expected = "text inputs only on a served embedding model (`server: {api: embeddings}`)"
        fix = "use a numeric dtype (token ids: int64), or serve the model"
        rd.fail(m["inputs"].key_line(texts[0].name), problem, expected, fix)
    if server is not None and server.generative and (inputs or "inputs_file" in m):
        key = "inputs" if inputs else "inputs_file"
        problem = f"{where} is a served model that generates (`api: {server.api}`) and has `{key}`"
        expected = "prompts from the scenarios' `generate:` (the server tokenizes them)"
        fix = f"remove `{key}` (or set `server.api: embeddings` for an embedding model)"
        rd.fail(m.key_line(key), problem, expected, fix)
    if not embeds:
        return outputs
    if len(inputs) != 1 or not texts:
        problem = f"{where} is a served embedding model with " + (
            "no `inputs`" if not inputs else f"inputs {', '.join(s.name for s in inputs)}"
        )
        expected = "exactly one input of dtype text, shape [texts, tokens]"
        fix = "write `inputs: {input: {shape: [1, 64], dtype: text}}`"
        rd.fail(line, problem, expected, fix)
    if len(outputs) > 1:
        problem = f"{where} is a served embedding model with outputs {', '.join(outputs)}"
        expected = f"one output (its embeddings; `{EMBEDDING_OUTPUT}` when not named)"
        rd.fail(m.key_line("outputs"), problem, expected, "name one output, or none")
    return outputs or (EMBEDDING_OUTPUT,)
