"""The suite file's grammar: every key a suite may write, its type, default and meaning.

One declarative tree of frozen dataclasses is the single source for

* the loader's allowed-key checks and did-you-mean (``Reader.keys(m, SECTION.names, ...)``
  in :mod:`perfguard.suite.loader`, ``models``, ``accuracy``, ``load``, ``gpu``),
* the loader's rules: required keys, ``exactly_one``/``requires``/``at_most_one``
  groups, numeric bounds and defaults, which it enforces and takes from here through
  :mod:`perfguard.suite.rules` (``check_section``, ``integer``, ``number``),
* the JSON Schema of suite files (:func:`json_schema`, shipped as
  ``perfguard/schemas/suite.schema.json`` for editors), and
* ``perfguard keys`` (:func:`walk`: one row per key with its path, type, default, doc).

A key added here passes the loader's key checks, is listed and is in the schema at once
(its value still needs its reader in the loader, which takes the bounds from here). The
value checks that need more than the grammar says (a gate's sign and unit, a reference
naming another cell, the sample count a load level needs, ``low < high``...) stay in the
loader, which names ``file:line``; the schema is looser than the loader, never stricter
(``tests/suite/test_suite_schema.py`` holds both to that), and
``tests/suite/test_suite_rules.py`` breaks each rule declared here and expects the loader
to refuse it.

Merging, in short: a value comes from the matrix cell, else the scenario, else
``defaults``, else the built-in default. ``warmup``/``measure``, ``gate``, ``accuracy``,
``load`` and ``gpu`` merge key by key over ``defaults``; every other key replaces.
One pytest item per cell: ``name[cell_id]``, the cell id joining the cell's matrix
values, shape bucket and load level with ``-`` (``onnxruntime-int8-seq32-c4``).
Cells that are well formed but cannot run (``onnxruntime`` + ``bf16``, ``int8`` on
``cuda`` outside TensorRT, an ``onnx:`` model on ``torch``, TensorRT on the CPU) fail
only themselves. YAML anchors and ``<<`` merges work; duplicate keys are an error.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from perfguard.core.errors import Location
from perfguard.core.policy import (
    DEFAULT_GATES,
    GENERATE_MAX_TOKENS,
    LOAD_MAX_CLIENTS,
    LOOP_MAX_ITERATIONS,
    LOOP_MAX_SECONDS,
    METRICS,
    OPEN_TIMEOUT_S,
    GateMetric,
)
from perfguard.core.scenario import (
    ARRIVALS,
    BACKENDS,
    COMPILE_MODES,
    DTYPES,
    DYNAMO_MIN_OPSET,
    EXPORTERS,
    FIXED_LENGTH_BODY,
    GRAPH_OPT_LEVELS,
    ORT_GPU_PROVIDERS,
    PRECISIONS,
    SERVER_APIS,
    SERVER_PLACEHOLDERS,
    SESSION_MODES,
    TEXT_DTYPE,
    AccuracyGates,
    AccuracyInputs,
    AccuracySpec,
    AccuracyText,
    BatchingSpec,
    GenerateSpec,
    GoodputSpec,
    GpuSpec,
    InputSpec,
    LoadSpec,
    LoopSpec,
    ModelSpec,
    QuantSpec,
    Scenario,
    ServerSpec,
    SloSpec,
    TaskMetricSpec,
    TensorRTSpec,
)

__all__ = [
    "DEVICE_RE",
    "ACCURACY",
    "ACCURACY_INPUTS",
    "ACCURACY_LIMITS",
    "AXES",
    "BUCKET_PATTERN",
    "BATCHING",
    "DEFAULTS",
    "DIMENSION",
    "EXCLUDE_ENTRY",
    "FUNCTION_PATTERN",
    "GATE",
    "GENERATE",
    "GOODPUT",
    "GPU",
    "IDENT_PATTERN",
    "INPUT",
    "KL",
    "KL_ON",
    "LOAD",
    "LOOP",
    "MAX_RATE",
    "MIN_RATE",
    "MATRIX",
    "MODEL",
    "NAME_PATTERN",
    "NO_DEFAULT",
    "PROFILE",
    "QUANT",
    "REFERENCE",
    "RESERVED_TAGS",
    "SCENARIO",
    "SERVER",
    "SLO",
    "SLO_TARGETS",
    "SUITE",
    "TASK",
    "TENSORRT",
    "Key",
    "ListOf",
    "MapOf",
    "Node",
    "OneOf",
    "Row",
    "Scalar",
    "Section",
    "gate_pattern",
    "json_schema",
    "schema_text",
    "type_text",
    "walk",
]

# A device a cell may name (the whole string).
DEVICE_RE = re.compile(r"cpu|cuda(:\d+)?")


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True)
class Scalar:
    """A single value: ``kind`` is a JSON type (``any`` for anything).

    ``text`` is how ``perfguard keys`` shows the type when the kind and choices do not
    say enough (``cpu | cuda | cuda:N``). Bounds follow JSON Schema's names; ``why``, for
    an upper bound that is a perfguard limit, is the reason the loader's message gives.
    """

    kind: str
    choices: tuple[object, ...] = ()
    pattern: str | None = None
    forbidden: tuple[str, ...] = ()
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    exclusive_maximum: float | None = None
    text: str = ""
    why: str = ""  # why the upper bound is there, for the loader's message


@dataclass(frozen=True)
class ListOf:
    """A list of ``items``; ``min_items`` 1 where the loader refuses an empty one."""

    items: Node
    min_items: int = 0
    unique: bool = False


@dataclass(frozen=True)
class MapOf:
    """A mapping from names the user picks (``key_text``) to ``values``."""

    values: Node
    key_text: str = "name"
    key_pattern: str | None = None
    key_forbidden: tuple[str, ...] = ()
    min_items: int = 0


@dataclass(frozen=True)
class Section:
    """A mapping with fixed keys; any other key is an error (the loader is strict).

    ``exactly_one``/``at_most_one``: groups of keys of which exactly one / at most one
    may be written; ``requires``: (key, keys that must be written with it).
    ``min_items`` 1 where an empty mapping is an error. ``title`` names a section the
    schema defines once (``$defs``) and refers to.
    """

    keys: tuple[Key, ...]
    exactly_one: tuple[tuple[str, ...], ...] = ()
    at_most_one: tuple[tuple[str, ...], ...] = ()
    requires: tuple[tuple[str, tuple[str, ...]], ...] = ()
    min_items: int = 0
    title: str = ""  # a section used in several places: one entry of the schema's $defs

    @property
    def names(self) -> tuple[str, ...]:
        """The allowed keys, in the order errors list them."""
        return tuple(k.name for k in self.keys)

    def key(self, name: str) -> Key:
        return next(k for k in self.keys if k.name == name)

    @property
    def choice_keys(self) -> dict[str, tuple[str, ...]]:
        """Key -> its choices, for the keys whose value is one of fixed strings."""
        return {
            k.name: tuple(map(str, k.type.choices))
            for k in self.keys
            if isinstance(k.type, Scalar) and k.type.kind == "string" and k.type.choices
        }

    def scalar(self, name: str) -> Scalar:
        """The type of key ``name``, a ``Scalar`` (a number's bounds, for the loader)."""
        node = self.key(name).type
        assert isinstance(node, Scalar), name
        return node

    def choices(self, name: str) -> tuple[str, ...]:
        """The choices of key ``name`` (a ``Scalar`` with choices)."""
        node = self.key(name).type
        assert isinstance(node, Scalar) and node.choices, name
        return tuple(str(c) for c in node.choices)


@dataclass(frozen=True)
class OneOf:
    """Alternative forms of one value (``load: false`` or a mapping, ``"100/s"`` or 100)."""

    options: tuple[Node, ...]


Node = Union[Scalar, ListOf, MapOf, Section, OneOf]  # noqa: UP007 (a runtime alias)


@dataclass(frozen=True)
class Key:
    """One key of a ``Section``: its name, type, default and one line of meaning.

    ``default`` is a JSON value (``NO_DEFAULT``: none); ``default_text`` describes a
    default that is not a fixed value (``the runtime's``). ``example``: a value the
    loader's fix suggests when the key is missing (``add `shape: [1, 64]```).
    """

    name: str
    type: Node
    doc: str
    default: Any = NO_DEFAULT
    default_text: str = ""
    required: bool = False
    example: str = ""  # a value the loader's fix suggests (`add `shape: [1, 64]``)


def _default(cls: type, name: str) -> Any:
    """The default of dataclass field ``name``: defaults are not written out twice."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.default
    raise KeyError(name)


# --------------------------------------------------------------------------- scalars

_BOOL = Scalar("boolean")
_FALSE = Scalar("boolean", choices=(False,), text="false")
_TEXT = Scalar("string", pattern=r"\S", text="string")  # non-empty
_ANY = Scalar("any")
# The patterns the loader also matches names and values with (its own messages and fixes).
FUNCTION_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"
_FUNCTION = Scalar("string", pattern=FUNCTION_PATTERN, text="module:function")
IDENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"  # tags, presets, kwargs
NAME_PATTERN = r"^[A-Za-z0-9_.+-]+$"  # a scenario's name
BUCKET_PATTERN = r"^[A-Za-z0-9_.+]+$"  # a shape bucket's name (`-` joins cell ids)
_DEVICE = Scalar("string", pattern=f"^({DEVICE_RE.pattern})$", text="cpu | cuda | cuda:N")
# PyYAML reads `1e-3` as a string; tolerances are written that way, so they may be one.
_NUMERIC_STRING = Scalar(
    "string",
    pattern=r"^\s*[+-]?(\d(_?\d)*(\.(\d(_?\d)*)?)?|\.\d(_?\d)*)([eE][+-]?\d(_?\d)*)?\s*$",
    text="numeric string",
)


def _int(minimum: int, maximum: int | None = None, why: str = "") -> Scalar:
    return Scalar("integer", minimum=minimum, maximum=maximum, why=why)


def _num(
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    maximum: float | None = None,
    exclusive_maximum: float | None = None,
    why: str = "",
) -> Scalar:
    return Scalar(
        "number",
        minimum=minimum,
        exclusive_minimum=exclusive_minimum,
        maximum=maximum,
        exclusive_maximum=exclusive_maximum,
        why=why,
    )


def _choice(choices: Sequence[str]) -> Scalar:
    return Scalar("string", choices=tuple(choices))


def _tolerance(number: Scalar) -> OneOf:
    """A number that may also be written as a quoted/YAML-1.1 numeric string."""
    return OneOf((number, _NUMERIC_STRING))


DIMENSION = _int(1)  # of a shape
_SHAPE = ListOf(DIMENSION)

# --------------------------------------------------------------------------- models

INPUT = Section(
    (
        Key(
            "shape",
            _SHAPE,
            "dimensions, integers >= 1 (`[]` for a scalar)",
            required=True,
            example="[1, 64]",
        ),
        Key(
            "dtype",
            _choice((*DTYPES, TEXT_DTYPE)),
            "numpy dtype; `text` for a served embedding model's texts",
            _default(InputSpec, "dtype"),
        ),
        Key("low", _num(), "lower bound of the random range (with `high`)"),
        Key("high", _num(), "upper bound (exclusive for integers); low < high"),
        Key("fill", _num(), "a constant value instead of a random range"),
        Key("seed", _int(0), "seed of the generated values", _default(InputSpec, "seed")),
    ),
    at_most_one=(("fill", "low"), ("fill", "high")),
    requires=(("low", ("high",)), ("high", ("low",))),
    title="input",
)

_SERVER = ServerSpec(Location(Path("suite.yaml"), 1))
SERVER = Section(
    (
        Key(
            "command",
            OneOf((_TEXT, ListOf(_TEXT, min_items=1))),
            "the command that starts the server (a list of arguments, or one string split "
            "like a shell's), run in the suite's folder; placeholders "
            + ", ".join(f"{{{p}}}" for p in SERVER_PLACEHOLDERS)
            + " (or `url`)",
            example='[python, -m, llama_cpp.server, --model, m.gguf, --port, "{port}"]',
        ),
        Key(
            "url",
            _TEXT,
            "base URL of a server already running (or `command`)",
            example="http://127.0.0.1:8000",
        ),
        Key(
            "health",
            _TEXT,
            "path a GET of which answers 200 once the server is ready",
            _SERVER.health,
        ),
        Key(
            "start_timeout_s",
            _num(exclusive_minimum=0, maximum=OPEN_TIMEOUT_S, why="perfguard's open timeout"),
            "longest wait for the server to be ready",
            _SERVER.start_timeout_s,
        ),
        Key(
            "request_timeout_s",
            _num(exclusive_minimum=0),
            "longest wait for one request's reply (each chunk of a stream)",
            _SERVER.request_timeout_s,
        ),
        Key(
            "env",
            MapOf(Scalar("string", text="string"), key_text="variable"),
            "environment variables added for the command",
        ),
        Key(
            "api_key_env",
            Scalar("string", pattern=IDENT_PATTERN, text="variable name"),
            "environment variable holding the API key (sent as a bearer token; never stored)",
        ),
        Key("model", _TEXT, "the served model's id", default_text="the first /v1/models lists"),
        Key("api", _choice(SERVER_APIS), "the OpenAI-compatible API called", _SERVER.api),
        Key(
            "stream",
            _BOOL,
            "stream tokens as server-sent events (false: one reply)",
            _SERVER.stream,
        ),
        Key(
            "request",
            MapOf(_ANY, key_text="field"),
            "JSON body fields added to each request (null drops a default one)",
            default_text=", ".join(f"{k}: {v}" for k, v in FIXED_LENGTH_BODY),
        ),
        Key(
            "exclusive",
            _BOOL,
            "the server needs its device to itself: same-run A/B measures the base's and "
            "the head's servers one after the other, not side by side (command only)",
            _SERVER.exclusive,
        ),
    ),
    # `env` and `start_timeout_s` with `url`: refused by the loader (they need a command)
    exactly_one=(("command", "url"),),
    title="server",
)

MODEL = Section(
    (
        Key(
            "factory",
            _FUNCTION,
            "Python factory returning a torch.nn.Module (or `onnx`)",
            example="package.module:function",
        ),
        Key(
            "kwargs",
            MapOf(_ANY, key_text="keyword", key_pattern=IDENT_PATTERN),
            "keyword arguments for the factory (plain data; lists become tuples)",
        ),
        Key(
            "opset",
            _int(1),
            "ONNX export opset (factory models)",
            _default(ModelSpec, "opset"),
            default_text=f"{_default(ModelSpec, 'opset')} ({DYNAMO_MIN_OPSET} with "
            "`exporter: dynamo`, its lowest)",
        ),
        Key(
            "exporter",
            _choice(EXPORTERS),
            "torch's ONNX exporter (factory models): `torchscript` traces forward "
            "(dynamo=False); `dynamo` captures it with torch.export (dynamo=True; "
            "needs the onnxscript package)",
            _default(ModelSpec, "exporter"),
        ),
        Key(
            "onnx",
            _TEXT,
            "ONNX file, relative to the suite's folder (or `factory`)",
            example="model.onnx",
        ),
        Key(
            "inputs",
            MapOf(INPUT, key_text="input", min_items=1),
            "input name -> generated input spec (or `inputs_file`)",
            example="{x: {shape: [1, 64]}}",
        ),
        Key(
            "inputs_file",
            _TEXT,
            ".npz of real inputs keyed by input name (or `inputs`)",
            example="inputs.npz",
        ),
        Key("outputs", ListOf(_TEXT), "output names"),
        Key("server", SERVER, "an inference server serving the model (backend `server`)"),
    ),
    exactly_one=(("factory", "onnx", "server"),),
    # Neither: a generative model (its scenarios' `generate:` makes the prompts).
    at_most_one=(("inputs", "inputs_file"),),
    requires=(("kwargs", ("factory",)), ("opset", ("factory",)), ("exporter", ("factory",))),
    title="model",
)

# --------------------------------------------------------------------------- loops, gates

_LOOP_DEFAULTS = {"warmup": _default(Scenario, "warmup"), "measure": _default(Scenario, "measure")}

_LOOP_WHY = "perfguard's loop limit, one hour"
LOOP = Section(
    (
        Key(
            "iterations",
            _int(
                1,
                LOOP_MAX_ITERATIONS,
                "perfguard's loop limit: every request keeps a latency "
                f"sample; {LOOP_MAX_ITERATIONS} requests already resolve any percentile",
            ),
            "runs at least this many requests",
        ),
        Key(
            "seconds",
            _num(minimum=0, maximum=LOOP_MAX_SECONDS, why=_LOOP_WHY),
            "and for at least this many seconds (at most `max_seconds`)",
        ),
        Key(
            "max_seconds",
            _num(exclusive_minimum=0, maximum=LOOP_MAX_SECONDS, why=_LOOP_WHY),
            "caps the loop",
            _default(LoopSpec, "max_seconds"),
        ),
    ),
    title="loop",
)


def gate_pattern(metric: GateMetric) -> str:
    """The regular expression a gate value of ``metric`` matches (sign and unit checked)."""
    units = "|".join(re.escape(u) for u in ("%", *metric.units))
    return rf"^\s*{re.escape(metric.sign)}\s*(\d+(\.\d*)?|\.\d+)\s*({units})\s*$"


def _gate_limit_text(limit: float, relative: bool, metric: GateMetric) -> str:
    unit = "%" if relative else metric.limit_unit
    amount = limit * 100 if relative else limit
    return f"{metric.sign}{amount:g}{unit}"


_DEFAULT_LIMITS = {g.metric: g for g in DEFAULT_GATES}

GATE = Section(
    tuple(
        Key(
            m.name,
            Scalar(
                "string",
                pattern=gate_pattern(m),
                text=f'"{m.examples[0]}" | "{m.examples[1]}"',
            ),
            f"limit on {m.label} vs the baseline ({'higher' if m.higher_is_worse else 'lower'} "
            f"is worse; units %, {', '.join(m.units)})",
            _gate_limit_text(g.limit, g.relative, m)
            if (g := _DEFAULT_LIMITS.get(m.name))
            else NO_DEFAULT,
        )
        for m in METRICS
    ),
    title="gate",
)

# --------------------------------------------------------------------------- quantization

_QTYPES = ("qint8", "quint8")
QUANT = Section(
    (
        Key(
            "mode",
            _choice(("dynamic", "static")),
            "int8 quantization mode",
            _default(QuantSpec, "mode"),
        ),
        Key("per_channel", _BOOL, "per-channel weight scales", _default(QuantSpec, "per_channel")),
        Key(
            "reduce_range",
            _BOOL,
            "7-bit weights",
            default_text="auto: true on an x86 CPU without VNNI (uint8 x int8 kernels there "
            "saturate with 8-bit weights), else false",
        ),
        Key("weight_type", _choice(_QTYPES), "weight type", _default(QuantSpec, "weight_type")),
        Key(
            "activation_type",
            _choice(_QTYPES),
            "activation type (static only)",
            _default(QuantSpec, "activation_type"),
        ),
        Key(
            "calibration",
            _choice(("minmax", "entropy", "percentile")),
            "calibration method (static only)",
            _default(QuantSpec, "calibration"),
        ),
        Key(
            "calibration_samples",
            _int(1),
            "accuracy inputs calibrated on (static only)",
            default_text="all accuracy inputs",
        ),
        Key(
            "symmetric",
            _BOOL,
            "zero points of 0 for activations and weights (static only; TensorRT's Q/DQ "
            "int8 sets it itself)",
            _default(QuantSpec, "symmetric"),
        ),
    ),
    title="quantization",
)
assert QUANT.names == tuple(f.name for f in dataclasses.fields(QuantSpec) if f.name != "name")
_PRESET_NAME = Scalar("string", pattern=r"\S", text="preset name")
_QUANT_VALUE = OneOf((_PRESET_NAME, QUANT))

# --------------------------------------------------------------------------- accuracy

_ACC_INPUTS = AccuracyInputs()
ACCURACY_INPUTS = Section(
    (
        Key("count", _int(1), "how many accuracy inputs", _ACC_INPUTS.count),
        Key("seed", _int(0), "generated input i uses seed + i", _ACC_INPUTS.seed),
        Key("file", _TEXT, ".npz of inputs, relative to the suite's folder"),
        Key("function", _FUNCTION, "function returning the inputs (no arguments)"),
    ),
    at_most_one=(("file", "function"), ("seed", "file"), ("seed", "function")),
    title="accuracyInputs",
)

REFERENCE = Section(
    (
        Key("backend", _choice(BACKENDS), "the reference cell's backend"),
        Key("device", _DEVICE, "the reference cell's device"),
        Key("precision", _choice(PRECISIONS), "the reference cell's precision"),
        Key("threads", _int(1), "the reference cell's threads"),
        Key("graph_optimization_level", _choice(GRAPH_OPT_LEVELS), "the reference cell's level"),
        Key("quantization", _PRESET_NAME, "the reference cell's quantization preset"),
    ),
    min_items=1,
    title="reference",
)

KL_ON = ("logits", "probabilities")
_SPEC = AccuracySpec()
KL = Section(
    (
        Key("on", _choice(KL_ON), "what the outputs are", _SPEC.kl_on),
        Key(
            "temperature",
            _tolerance(_num(exclusive_minimum=0)),
            "softmax temperature",
            _SPEC.temperature,
        ),
    ),
    title="kl",
)

_TASK = TaskMetricSpec("a:b")
TASK = Section(
    (
        Key(
            "function",
            _FUNCTION,
            "module:function(outputs, labels) -> float",
            required=True,
            example="mymetrics:accuracy",
        ),
        Key("higher_is_better", _BOOL, "direction of the metric", _TASK.higher_is_better),
        Key(
            "drop_max",
            _tolerance(_num(minimum=0)),
            "largest allowed drop, in the metric's units",
            _TASK.drop_max,
        ),
    ),
    title="task",
)

_GATES = AccuracyGates()
_COSINE = _num(minimum=-1, maximum=1)
_NON_NEGATIVE = _num(minimum=0)


def _limit(name: str, number: Scalar, doc: str) -> Key:
    """A float accuracy limit: a number, a numeric string, or null (switched off)."""
    default = getattr(_GATES, name)
    return Key(name, OneOf((number, _NUMERIC_STRING, Scalar("null"))), doc, default)


ACCURACY_LIMITS = Section(
    (
        _limit("cosine_min", _COSINE, "lowest cosine similarity of any output row"),
        _limit("cosine_mean_min", _COSINE, "lowest mean cosine similarity"),
        _limit("kl_max", _NON_NEGATIVE, "largest KL divergence (see `kl`)"),
        Key("topk", _int(1), "k of the top-k agreement", _GATES.topk),
        _limit("topk_agreement_min", _num(minimum=0, maximum=1), "lowest top-k agreement"),
        _limit("max_abs_err", _NON_NEGATIVE, "largest absolute error"),
        _limit("mean_abs_err", _NON_NEGATIVE, "largest mean absolute error"),
        _limit("max_rel_err", _NON_NEGATIVE, "largest relative error"),
        Key("nonfinite_max", _int(0), "NaN/Inf outputs allowed", _GATES.nonfinite_max),
        _limit("baseline_cosine_min", _COSINE, "lowest cosine vs the baseline's golden outputs"),
        _limit("cosine_drift_max", _NON_NEGATIVE, "largest cosine drift vs the baseline"),
        _limit(
            "token_match_min",
            _num(minimum=0, maximum=1),
            "lowest share of greedy tokens equal to the reference's (generative cells)",
        ),
        _limit(
            "perplexity_rise_max",
            _NON_NEGATIVE,
            "largest relative rise of the `text` perplexity over the reference's (0.05: +5%)",
        ),
    ),
    title="accuracyLimits",
)

_TEXT_SET = AccuracyText(Path("texts.jsonl"), "a:b")
ACCURACY_TEXT = Section(
    (
        Key(
            "file",
            _TEXT,
            'JSONL texts, one {"prompt": "..."} per line, relative to the suite\'s folder',
            required=True,
            example="texts.jsonl",
        ),
        Key(
            "tokenizer",
            _FUNCTION,
            "module:function returning a tokenizer with encode(text)",
            required=True,
            example="mytokenizers:llama",
        ),
        Key("tokens", _int(2), "tokens of each text scored", _TEXT_SET.tokens),
        Key("count", _int(1), "texts scored (the first long enough)", _TEXT_SET.count),
    ),
    title="accuracyText",
)
assert ACCURACY_LIMITS.names == tuple(f.name for f in dataclasses.fields(AccuracyGates))

_OUTPUT_NAME = OneOf((_TEXT, _int(0)))
ACCURACY = Section(
    (
        Key("inputs", ACCURACY_INPUTS, "the inputs checked (generated from the input specs)"),
        Key("labels", _TEXT, ".npy/.npz labels for `task`, relative to the suite's folder"),
        Key("reference", REFERENCE, "the cell compared against: overrides of this cell's values"),
        Key(
            "baseline", _BOOL, "compare with the baseline's golden outputs", _SPEC.against_baseline
        ),
        Key("golden", _int(0), "inputs whose outputs a baseline archives", _SPEC.golden),
        Key("outputs", ListOf(_OUTPUT_NAME, min_items=1), "outputs checked (names or indices)"),
        Key("kl", KL, "how KL divergence reads the outputs"),
        Key("task", TASK, "a task metric computed from the outputs and labels"),
        Key("text", ACCURACY_TEXT, "a text set whose perplexity is checked (generative cells)"),
        Key("gate", ACCURACY_LIMITS, "accuracy limits (null switches one off)"),
        Key(
            "per_output",
            MapOf(ACCURACY_LIMITS, key_text="output"),
            "limits for one output (name or index), over `gate`",
        ),
    ),
    title="accuracy",
)

# --------------------------------------------------------------------------- load

_LOAD = LoadSpec("closed", 1.0)
SLO_TARGETS = {"p50_ms": 50.0, "p90_ms": 90.0, "p95_ms": 95.0, "p99_ms": 99.0}
_SLO = SloSpec(95.0, 1.0, 1.0)
SLO = Section(
    (
        *(
            Key(
                k,
                _num(exclusive_minimum=0),
                f"search target: P{q:g} latency in ms",
                example="50" if k == "p95_ms" else "",
            )
            for k, q in SLO_TARGETS.items()
        ),
        Key(
            "goodput_share",
            _num(exclusive_minimum=0, maximum=1),
            "generative cells with `goodput:` limits: the share of good requests a level "
            "must reach (the search finds the highest such level)",
            example="0.9",
        ),
        Key("factor", _num(exclusive_minimum=1), "level multiplier while searching", _SLO.factor),
        Key("refine", _int(0), "bisection steps after the target is missed", _SLO.refine),
        Key("max", _num(exclusive_minimum=0), "highest level tried", default_text="no cap"),
    ),
    exactly_one=((*SLO_TARGETS, "goodput_share"),),
    title="slo",
)

BATCHING = Section(
    (
        Key(
            "max_batch",
            _int(2),
            "most requests served in one model call",
            required=True,
            example="8",
        ),
        Key(
            "max_wait_ms",
            _num(minimum=0),
            "longest wait for a batch to fill",
            required=True,
            example="2",
        ),
    ),
    title="batching",
)
assert BATCHING.names == tuple(f.name for f in dataclasses.fields(BatchingSpec))

MAX_RATE = 1e6  # requests/s one Python generator thread can still dispatch on time
MIN_RATE = 1e-4  # below it `LoadSpec.level_id` would print an exponent with `-`
_RATE = OneOf(
    (
        Scalar("number", minimum=MIN_RATE, maximum=MAX_RATE, text="number"),
        Scalar(
            "string",
            pattern=r"^\s*\+?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*(/\s*s)?\s*$",
            text='"100/s"',
        ),
    )
)
GOODPUT = Section(
    (
        Key(
            "ttft_ms",
            _num(exclusive_minimum=0),
            "most time to first token, from the scheduled send",
            required=True,
            example="200",
        ),
        Key(
            "tpot_ms",
            _num(exclusive_minimum=0),
            "most time per output token after the first",
            required=True,
            example="20",
        ),
    ),
    title="goodput",
)
assert GOODPUT.names == tuple(f.name for f in dataclasses.fields(GoodputSpec))
_CLIENTS_WHY = "perfguard's limit: each is a thread of the load generator"
_CONCURRENCY = _int(1, LOAD_MAX_CLIENTS, _CLIENTS_WHY)

LOAD = Section(
    (
        Key(
            "concurrency",
            OneOf((_CONCURRENCY, ListOf(_CONCURRENCY, min_items=1, unique=True))),
            "closed loop: N clients (one cell per level, id cN)",
        ),
        Key(
            "rate",
            OneOf((_RATE, ListOf(_RATE, min_items=1))),
            "open loop: requests per second (one cell per rate, id rN)",
        ),
        Key("arrivals", _choice(ARRIVALS), "open-loop arrival process", _LOAD.arrivals),
        Key("seed", _int(0), "seeds the poisson schedule", _LOAD.seed),
        Key(
            "workers",
            _int(1, LOAD_MAX_CLIENTS, _CLIENTS_WHY),
            "model instances serving the queue",
            _LOAD.workers,
        ),
        Key(
            "sessions",
            _choice(SESSION_MODES),
            "one runtime session or one per worker",
            _LOAD.sessions,
        ),
        Key("batching", BATCHING, "dynamic batching as an inference server does it"),
        Key(
            "late_ms",
            _num(exclusive_minimum=0),
            "a request sent later than this is late",
            default_text="max(1, 250 / rate) ms",
        ),
        Key(
            "late_max",
            _num(minimum=0, exclusive_maximum=1),
            "share of late requests that invalidates a level",
            _LOAD.late_max,
        ),
        Key(
            "errors_max",
            _num(minimum=0, exclusive_maximum=1),
            "share of a level's requests that may fail (errors are counted, never timed)",
            _LOAD.errors_max,
        ),
        Key("slo", SLO, "one more cell (`slo`): the highest level meeting a latency target"),
        Key(
            "goodput",
            GOODPUT,
            "generative cells: a request is good when its TTFT and TPOT are both within "
            "these; the level's goodput is good requests per second",
        ),
    ),
    at_most_one=(("concurrency", "rate"),),
    title="load",
)

# --------------------------------------------------------------------------- generate

_GEN = GenerateSpec(prompt_tokens=1, new_tokens=1)
_TOKENS_WHY = "perfguard's limit on tokens per request (each keeps a timestamp)"
_TOKENS = _int(1, GENERATE_MAX_TOKENS, _TOKENS_WHY)
GENERATE = Section(
    (
        Key(
            "prompt_tokens",
            OneOf((_TOKENS, ListOf(_TOKENS, min_items=1, unique=True))),
            "prompt length in tokens; a list: one set of cells per length (id pN)",
            required=True,
            example="[48, 96]",
        ),
        Key(
            "new_tokens",
            _TOKENS,
            "tokens generated per request, always all of them (greedy, no early stop)",
            required=True,
            example="32",
        ),
        Key("batch", _int(1), "prompts per request (decoded together)", _GEN.batch),
        Key("prompts", _int(1), "distinct prompts, used in turn", _GEN.prompts),
        Key("seed", _int(0), "seeds the random prompts' token ids", _GEN.seed),
        Key(
            "vocab",
            _int(2),
            "random token ids are drawn from [0, vocab)",
            default_text="the model's config.vocab_size",
        ),
        Key(
            "file",
            _TEXT,
            'JSONL prompts (`{"prompt": "..."}` per line), relative to the suite\'s folder',
            example="prompts.jsonl",
        ),
        Key(
            "tokenizer",
            _FUNCTION,
            "`module:function` returning a tokenizer with encode(text) -> token ids",
            example="mypkg.text:tokenizer",
        ),
    ),
    # `file` without `tokenizer`: a served model's (its server tokenizes); the loader
    # refuses it on any other cell.
    requires=(("tokenizer", ("file",)),),
    at_most_one=(("file", "vocab"), ("file", "seed")),
    title="generate",
)

# --------------------------------------------------------------------------- gpu

_GPU = GpuSpec()
_TRT = TensorRTSpec()
PROFILE = Section(
    (
        Key("min", _SHAPE, "smallest shape", required=True, example="[...]"),
        Key("opt", _SHAPE, "shape TensorRT tunes for", required=True, example="[...]"),
        Key("max", _SHAPE, "largest shape", required=True, example="[...]"),
    ),
    title="tensorrtProfile",
)
TENSORRT = Section(
    (
        Key("workspace_mib", _int(1), "builder workspace", _TRT.workspace_mib),
        Key(
            "builder_optimization_level",
            _int(0, 5),
            "0..5",
            default_text="TensorRT's (3)",
        ),
        Key("timing_cache", _BOOL, "reuse the timing cache across builds", _TRT.timing_cache),
        Key(
            "profiles",
            MapOf(PROFILE, key_text="input"),
            "one optimization profile: input -> min/opt/max shapes",
        ),
    ),
    title="tensorrt",
)
GPU = Section(
    (
        Key("cuda_graph", _BOOL, "torch: capture one request, replay it", _GPU.cuda_graph),
        Key(
            "cudnn_benchmark",
            _BOOL,
            "torch.backends.cudnn.benchmark",
            default_text="torch's setting",
        ),
        Key(
            "iobinding",
            _BOOL,
            "onnxruntime: inputs/outputs stay on the device",
            _GPU.iobinding,
        ),
        Key(
            "include_copies",
            _BOOL,
            "time host->device and device->host copies",
            _GPU.include_copies,
        ),
        Key(
            "allow_cpu_fallback",
            _BOOL,
            "onnxruntime: nodes may run on the CPU provider",
            _GPU.allow_cpu_fallback,
        ),
        Key(
            "allow_throttle",
            _BOOL,
            "a run while the GPU throttled stays valid",
            _GPU.allow_throttle,
        ),
        Key(
            "exclusive",
            _BOOL,
            "refuse to run while other processes use the GPU or NVML cannot list them",
            _GPU.exclusive,
        ),
        Key(
            "compile",
            OneOf((_choice(COMPILE_MODES), _FALSE)),
            "torch.compile mode (false: eager)",
            default_text="eager",
        ),
        Key(
            "ort_provider",
            _choice(ORT_GPU_PROVIDERS),
            "onnxruntime execution provider on cuda",
            _GPU.ort_provider,
        ),
        Key(
            "provider_options",
            MapOf(OneOf((Scalar("string"), Scalar("number"), _BOOL)), key_text="option"),
            "options passed to that provider (as strings)",
        ),
        Key("tensorrt", TENSORRT, "TensorRT engine build options (backend: tensorrt)"),
    ),
    title="gpu",
)

# --------------------------------------------------------------------------- scenarios

# Tags become pytest markers; these names already mean something to pytest.
RESERVED_TAGS = ("skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings")
_TAG = Scalar("string", pattern=IDENT_PATTERN, forbidden=RESERVED_TAGS, text="identifier")

# Settings that may also be matrix axes, in the order errors list them.
_AXIS_KEYS = (
    Key("backend", _choice(BACKENDS), "runtime that runs the model", _default(Scenario, "backend")),
    Key("device", _DEVICE, "where the model runs", _default(Scenario, "device")),
    Key("precision", _choice(PRECISIONS), "numeric precision", _default(Scenario, "precision")),
    Key("threads", _int(1), "intra-op threads", default_text="the runtime's"),
    Key(
        "graph_optimization_level",
        _choice(GRAPH_OPT_LEVELS),
        "onnxruntime graph optimizations",
        _default(Scenario, "graph_optimization_level"),
    ),
    Key(
        "quantization",
        _QUANT_VALUE,
        "int8 preset from `quantizations:` (or an inline mapping)",
        _default(QuantSpec, "name"),
    ),
)


def _loop_key(name: str, what: str) -> Key:
    spec = _LOOP_DEFAULTS[name]
    default = {"iterations": spec.iterations, "seconds": spec.seconds}
    return Key(name, LOOP, f"{what}; runs until BOTH iterations and seconds", default)


_SETTING_KEYS = (
    *_AXIS_KEYS,
    _loop_key("warmup", "warm-up loop, not measured"),
    _loop_key("measure", "timed loop"),
    Key(
        "stability_tolerance",
        _num(exclusive_minimum=0, exclusive_maximum=1),
        "largest drift between the run's first and last thirds (median ratio - 1), 0 < x < 1",
        _default(Scenario, "stability_tolerance"),
    ),
    Key("tags", ListOf(_TAG), "pytest markers for `-m`"),
    Key("gate", GATE, "limits vs the baseline; merged metric by metric over `defaults`"),
    Key(
        "isolate",
        _BOOL,
        "measure in a worker process of its own (always, for a cell that gates peak_memory)",
        _default(Scenario, "isolate"),
    ),
    Key(
        "keep_fp32",
        ListOf(Scalar("string", pattern=r"\S", text="op type or node name")),
        "fp16 from a converted graph (onnxruntime, TensorRT 11): op types or node names "
        "kept in float32",
        default_text="TensorRT: [LayerNormalization]; onnxruntime: none",
    ),
    Key(
        "profile",
        _BOOL,
        "take an operator profile after the timed measurement (always for a regression)",
        _default(Scenario, "profile"),
    ),
    Key(
        "accuracy",
        OneOf((ACCURACY, _FALSE)),
        "accuracy checks ({} for every default, false: off)",
    ),
    Key("load", OneOf((LOAD, _FALSE)), "concurrent load (false: one request at a time)"),
    Key("gpu", GPU, "GPU options; ignored on the CPU"),
)

DEFAULTS = Section(_SETTING_KEYS, title="defaults")
AXES = tuple(k.name for k in _AXIS_KEYS)
MATRIX = Section(
    tuple(
        Key(
            k.name,
            ListOf(_PRESET_NAME if k.name == "quantization" else k.type, min_items=1, unique=True),
            "axis: one cell per value, int8 preset names"
            if k.name == "quantization"
            else f"axis: one cell per value ({k.doc})",
        )
        for k in _AXIS_KEYS
    ),
    min_items=1,
    title="matrix",
)
EXCLUDE_ENTRY = Section(
    tuple(
        Key(k.name, OneOf((Scalar("string"), Scalar("number"))), "a value of this matrix axis")
        for k in _AXIS_KEYS
    ),
    min_items=1,
    title="exclude",
)

SCENARIO = Section(
    (
        Key(
            "name",
            Scalar("string", pattern=NAME_PATTERN, text="letters, digits, _ . + -"),
            "unique in the file; pytest shows name[cell_id]",
            required=True,
        ),
        Key("model", _TEXT, "a model defined under `models:`", required=True),
        *_SETTING_KEYS,
        Key(
            "shapes",
            MapOf(
                MapOf(_SHAPE, key_text="input", min_items=1),
                key_text="bucket",
                key_pattern=BUCKET_PATTERN,
                min_items=1,
            ),
            "input-shape buckets: bucket -> input -> shape, one set of cells each",
        ),
        Key(
            "generate",
            GENERATE,
            "a generative model: token-level timing of greedy generation (TTFT, ITL, TPOT)",
        ),
        Key("matrix", MATRIX, "axes: one cell per combination, in the order written"),
        Key("exclude", ListOf(EXCLUDE_ENTRY), "partial cells to drop"),
    ),
    requires=(("exclude", ("matrix",)),),
    title="scenario",
)

SUITE = Section(
    (
        Key("defaults", DEFAULTS, "settings every scenario starts from"),
        Key(
            "quantizations",
            MapOf(QUANT, key_text="preset", key_pattern=IDENT_PATTERN, key_forbidden=("custom",)),
            "named int8 presets (`default` always exists and may be redefined)",
        ),
        Key("models", MapOf(MODEL, key_text="model"), "the models scenarios measure"),
        Key(
            "scenarios",
            ListOf(SCENARIO, min_items=1),
            "what to measure; each expands into its matrix cells",
            required=True,
            example="[{name: ..., model: ...}]",
        ),
    )
)

# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class Row:
    """One line of ``perfguard keys`` (``default`` empty: none)."""

    path: str
    type: str
    default: str
    doc: str


def type_text(node: Node) -> str:
    """How a type reads in ``perfguard keys`` (``int >= 1``, ``cpu | cuda | cuda:N``)."""
    if isinstance(node, Scalar):
        if node.text:
            return node.text
        if node.choices:
            return " | ".join(json.dumps(c) if not isinstance(c, str) else c for c in node.choices)
        name = {"integer": "int", "number": "number", "boolean": "bool"}.get(node.kind, node.kind)
        bounds = [
            f"{op} {v:g}"
            for op, v in (
                (">=", node.minimum),
                (">", node.exclusive_minimum),
                ("<=", node.maximum),
                ("<", node.exclusive_maximum),
            )
            if v is not None
        ]
        return " ".join([name, *bounds[:1]]) + (f", {', '.join(bounds[1:])}" if bounds[1:] else "")
    if isinstance(node, ListOf):
        items = type_text(node.items)
        return f"list of ({items})" if " | " in items else f"list of {items}"
    if isinstance(node, MapOf):
        return f"{node.key_text} -> {type_text(node.values)}"
    if isinstance(node, Section):
        return "mapping"
    return " | ".join(type_text(o) for o in node.options)


def _default_text(key: Key) -> str:
    if key.default_text:
        return key.default_text
    if key.default is NO_DEFAULT:
        return "required" if key.required else ""
    if isinstance(key.default, dict):
        return "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in key.default.items()) + "}"
    return json.dumps(key.default)


def _children(node: Node, path: str) -> Iterator[tuple[str, Section]]:
    """The sections below ``node`` with the path their keys hang from."""
    if isinstance(node, Section):
        yield path, node
    elif isinstance(node, ListOf):
        yield from _children(node.items, f"{path}[]")
    elif isinstance(node, MapOf):
        yield from _children(node.values, f"{path}.<{node.key_text}>")
    elif isinstance(node, OneOf):
        for option in node.options:
            yield from _children(option, path)


def walk(node: Node = SUITE, path: str = "") -> Iterator[Row]:
    """Every key below ``node``, depth first in file order (``scenarios[].load.slo.p95_ms``)."""
    for base, section in _children(node, path):
        for key in section.keys:
            here = f"{base}.{key.name}" if base else key.name
            yield Row(here, type_text(key.type), _default_text(key), key.doc)
            yield from walk(key.type, here)


# --------------------------------------------------------------------------- JSON Schema


def _scalar_schema(node: Scalar) -> dict[str, Any]:
    out: dict[str, Any] = {} if node.kind == "any" else {"type": node.kind}
    if len(node.choices) == 1:
        out["const"] = node.choices[0]
    elif node.choices:
        out["enum"] = list(node.choices)
    if node.pattern is not None:
        out["pattern"] = node.pattern
    if node.forbidden:
        out["not"] = {"enum": list(node.forbidden)}
    for name, value in (
        ("minimum", node.minimum),
        ("exclusiveMinimum", node.exclusive_minimum),
        ("maximum", node.maximum),
        ("exclusiveMaximum", node.exclusive_maximum),
    ):
        if value is not None:
            out[name] = value
    return out


def _schema(node: Node, defs: dict[str, Any]) -> dict[str, Any]:
    if isinstance(node, Scalar):
        return _scalar_schema(node)
    if isinstance(node, ListOf):
        out: dict[str, Any] = {"type": "array", "items": _schema(node.items, defs)}
        if node.min_items:
            out["minItems"] = node.min_items
        if node.unique:
            out["uniqueItems"] = True
        return out
    if isinstance(node, MapOf):
        out = {"type": "object", "additionalProperties": _schema(node.values, defs)}
        names: dict[str, Any] = {}
        if node.key_pattern:
            names["pattern"] = node.key_pattern
        if node.key_forbidden:
            names["not"] = {"enum": list(node.key_forbidden)}
        if names:
            out["propertyNames"] = names
        if node.min_items:
            out["minProperties"] = node.min_items
        return out
    if isinstance(node, OneOf):
        return {"oneOf": [_schema(o, defs) for o in node.options]}
    if not node.title:
        return _section_schema(node, defs)
    if node.title not in defs:
        defs[node.title] = {}  # taken before recursing: a section may not contain itself
        defs[node.title] = _section_schema(node, defs)
    return {"$ref": f"#/$defs/{node.title}"}


def _section_schema(node: Section, defs: dict[str, Any]) -> dict[str, Any]:
    props = {}
    for key in node.keys:
        prop = {"description": key.doc, **_schema(key.type, defs)}
        if key.default is not NO_DEFAULT:
            prop["default"] = key.default
        props[key.name] = prop
    out: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "additionalProperties": False,
    }
    required = [k.name for k in node.keys if k.required]
    if required:
        out["required"] = required
    if node.min_items:
        out["minProperties"] = node.min_items
    rules: list[dict[str, Any]] = [
        {"oneOf": [{"required": [k]} for k in group]} for group in node.exactly_one
    ]
    rules += [
        {"not": {"required": [a, b]}}
        for group in node.at_most_one
        for i, a in enumerate(group)
        for b in group[i + 1 :]
    ]
    if rules:
        out["allOf"] = rules
    if node.requires:
        out["dependentRequired"] = {key: list(needs) for key, needs in node.requires}
    return out


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a suite file, from the grammar above."""
    defs: dict[str, Any] = {}
    top = _section_schema(SUITE, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "perfguard suite",
        "description": (
            "A perfguard suite file (suites/*.yaml): models and the scenarios measured on "
            "them. Generated from perfguard.suite.grammar; `perfguard keys` lists every key."
        ),
        **top,
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    """:func:`json_schema` as the shipped file holds it (2-space indent, final newline)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
