"""The ``load:`` and ``shapes:`` parts of a suite file: concurrent load and input shapes.

``perfguard.suite.loader`` reads the rest and calls in here; errors are the same
``SuiteError`` naming ``file:line``, what was found, what was expected and the fix.

The keys, their types and defaults are declared in :data:`perfguard.suite.grammar.LOAD`
(``perfguard keys`` lists them).

Format::

    defaults:
      load: {late_ms: 2}          # merged key by key with each scenario's `load`
    scenarios:
      - name: minilm
        model: minilm
        shapes:                   # optional input-shape buckets (scenario only)
          seq32: {input_ids: [1, 32], attention_mask: [1, 32]}
          seq128: {input_ids: [1, 128], attention_mask: [1, 128]}
        load:
          concurrency: [1, 2, 4]  # closed loop: cells c1, c2, c4 (an integer or a list)
      - name: minilm-open
        model: minilm
        load:
          rate: ["100/s", 200]    # open loop, requests per second: cells r100, r200
          arrivals: constant
          workers: 2
          batching: {max_batch: 8, max_wait_ms: 2}
          slo: {p95_ms: 50, factor: 2, refine: 4, max: 2000}   # one more cell: `slo`

Rules:

* ``load`` holds exactly one of ``concurrency`` (closed loop: N clients, each
  sending its next request when its last one returned; integers >= 1) and
  ``rate`` (open loop: requests scheduled in advance at that many per second,
  sent whatever happened to earlier ones; numbers or ``"N/s"`` strings, > 0 and
  at most 1e6/s: perfguard's load generator is one Python thread). Either is one
  level or a list of distinct ones; each level is one cell, in the order written
  (``LoadSpec.level`` = N or the rate). Rate cell ids keep 6 significant digits,
  so two rates that only differ beyond them are a repeat; rates below 0.0001/s
  are refused (their id would hold ``-``).
* ``load`` merges key by key over ``defaults`` (``batching`` and ``slo`` as a
  whole). A ``defaults`` ``load`` without ``concurrency``/``rate`` only sets
  options for the scenarios that have a ``load:``; one with a level gives every
  scenario that load. ``load: false`` turns a ``defaults`` load off. Without any
  ``load``, a scenario runs one request at a time (``Scenario.load`` is None).
* ``arrivals`` only applies to an open loop; ``workers`` to an open loop or to
  ``batching``, where the clients of a closed loop submit to a batching server
  with ``workers`` model instances. Written next to ``concurrency`` (same
  scenario, or both in ``defaults``) otherwise, they are errors; from
  ``defaults`` they are ignored by a scenario that names its own ``concurrency``.
* ``batching``: ``max_batch`` integer >= 2 and ``max_wait_ms`` >= 0, both
  required. Requests are stacked on their leading axis, so every input of the
  model (of each shape bucket) needs at least one dimension; ``inputs_file``
  models are checked only when they run.
* ``slo``: exactly one target, ``p50_ms``, ``p90_ms``, ``p95_ms`` or ``p99_ms``
  (> 0); ``factor`` > 1 (default 2), ``refine`` integer >= 0 (default 4), ``max``
  above the start (default: no cap). It adds one cell, id ``slo``, after the
  listed levels: a search starting at the lowest listed level (see
  ``SloSpec``). Its latency gates are dropped (the search holds latency to the
  target itself) and it is gated on throughput, ``-10%`` unless the scenario
  gives a ``throughput`` gate: the search finds its level only to within its
  last bisection step, so the usual ``-5%`` would flag that step as a change.
* Sample counts: a latency gate on percentile q needs
  ``perfguard.judge.compare.samples_needed(q, 0.99)`` requests per level (P50 7,
  P90 44, P95 90, P99 459). An open-loop level schedules
  ``round(rate * measure.seconds)`` requests, a closed-loop level runs at least
  ``measure.iterations``; fewer is an error at the ``load`` line. The ``slo``
  cell needs as many for its own target's percentile at its start level. Every
  level needs at least one request.
* ``shapes``: bucket name (letters, digits, ``_ . +``; ``-`` joins cell id
  parts) -> input name -> shape (integers >= 1, ``[]`` for a scalar). Inputs
  must be declared under the model's ``inputs:`` (not ``inputs_file``); inputs a
  bucket does not name keep the model's shape. Each bucket's cells carry
  ``Scenario.shape_bucket`` and the model with those shapes.
* Cells: for each matrix cell, each bucket, each level; the id joins the
  non-empty parts with ``-`` (``onnxruntime-fp32-seq32-c4``, ``seq32-r200``,
  ``c4``, ``torch-slo``) and ``matrix_values`` gains ``("shape", bucket)`` and
  ``("load", level id)``, so an accuracy ``reference`` is the cell with the same
  bucket and level. ``shapes`` and ``load`` are not matrix axes: ``exclude``
  cannot name them and ``defaults`` cannot hold ``shapes``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from perfguard.core.policy import (
    CONFIDENCE,
    LATENCY_QS,
    LOOP_MAX_ITERATIONS,
    NAME_MAX_CHARS,
    SLO_GATE,
    samples_needed,
)
from perfguard.core.scenario import (
    ARRIVALS,
    SESSION_MODES,
    BatchingSpec,
    GenerateSpec,
    GoodputSpec,
    LoadSpec,
    ModelSpec,
    Scenario,
    SloSpec,
)
from perfguard.suite import grammar
from perfguard.suite.rules import check_section, integer, number
from perfguard.suite.yamlpos import PosDict, PosList, Reader, found, one_of, suggest

__all__ = ["LOAD", "MAX_RATE", "SHAPES", "expand_cells", "parse_load", "parse_shapes"]

LOAD = "load"  # scenario and defaults key
SHAPES = "shapes"  # scenario key
MAX_RATE = grammar.MAX_RATE
MIN_RATE = grammar.MIN_RATE
_DEFAULTS_WHERE = "`defaults`"  # how perfguard.suite.loader names `defaults` in `where`
# `concurrency` and `rate`: at most one in a written `load` (the grammar's rule), exactly one
# in a scenario's merged one (`_loads`, which knows where each came from).
_LEVEL_KEYS = grammar.LOAD.at_most_one[0]
# Keys copied into LoadSpec as they are.
_OPTIONS = tuple(k for k in grammar.LOAD.names if k not in (*_LEVEL_KEYS, "slo"))
_SLO_TARGETS = grammar.SLO_TARGETS
_GOODPUT_SHARE = "goodput_share"  # the goodput search's target, in `slo`
# A closed loop's level: the first form of `concurrency` (the other is a list of them).
_CLIENTS = next(
    o
    for o in cast("grammar.OneOf", grammar.LOAD.key("concurrency").type).options
    if isinstance(o, grammar.Scalar)
)
_RATE_RE = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?:/\s*s)?")
_BUCKET_RE = re.compile(grammar.BUCKET_PATTERN)
_LINE = "@"  # draft key holding the line of the `load:` key (the scenario's wins the merge)


@dataclass(frozen=True)
class _At:
    """One parsed ``load`` value, its line, and whether it was written in ``defaults``."""

    value: object
    line: int
    from_defaults: bool


@dataclass(frozen=True)
class _Slo:
    percentile: float
    target_ms: float | None  # None: a goodput search
    factor: float
    refine: int
    max_level: float | None
    max_line: int
    goodput_share: float | None


def _rate(rd: Reader, value: object, line: int, what: str) -> float:
    expected = 'a number of requests per second > 0, or a string like "100/s"'
    rate = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        rate = float(value)
    elif isinstance(value, str) and (match := _RATE_RE.fullmatch(value.strip())):
        rate = float(match[1])  # also a bare `1e3`, which YAML 1.1 reads as a string
    if rate is None or not math.isfinite(rate):
        number = re.match(r"\s*(\d+(?:\.\d*)?)", value) if isinstance(value, str) else None
        fix = f'write `"{number[1] if number else 100}/s"`'
        rd.fail(line, f"{what} is {found(value)}", expected, fix)
    if rate <= 0:
        rd.fail(line, f"{what} is {found(value)}", expected, 'set a rate > 0, e.g. `"100/s"`')
    if rate < MIN_RATE:
        expected = f"at least {MIN_RATE:g}/s (a lower rate's cell id would hold `-`)"
        rd.fail(line, f"{what} is {rate:g}/s", expected, f"raise it to {MIN_RATE:g}/s or more")
    if rate > MAX_RATE:
        expected = (
            f"at most {MAX_RATE:g}/s: perfguard's load generator is a Python thread; beyond ~1e6/s "
            "it cannot send requests on schedule and every level would be invalid"
        )
        fix = "lower the rate to 1e6/s or less"
        rd.fail(line, f"{what} is {rate:g}/s", expected, fix)
    return rate


def _levels(
    rd: Reader, value: object, line: int, what: str, closed: bool
) -> tuple[tuple[float, int], ...]:
    if isinstance(value, PosList):
        if not value:
            fix = "list levels, e.g. `[1, 4]`" if closed else 'list rates, e.g. `["100/s"]`'
            rd.fail(line, f"{what} is an empty list", "at least one level", fix)
        items = [(v, value.item_line(i), f"item {i + 1} of {what}") for i, v in enumerate(value)]
    else:
        items = [(value, line, what)]
    seen: dict[str, tuple[float, int]] = {}
    for raw, at, name in items:
        level = float(_clients(rd, raw, at, name)) if closed else _rate(rd, raw, at, name)
        cell = LoadSpec("closed" if closed else "open", level).level_id
        if cell in seen:
            first, first_at = seen[cell]
            shown = f"{level:g}" if closed else f"{level:g}/s"
            problem = f"{what} lists {shown} twice (first at line {first_at})"
            fix = "remove the repeat"
            if first != level:
                problem = f"{what} lists {first!r}/s and {level!r}/s, which share cell id `{cell}`"
                fix = "remove one, or make them differ within 6 significant digits"
            rd.fail(at, problem, "distinct levels", fix)
        seen[cell] = (level, at)
    return tuple(seen.values())


def _clients(rd: Reader, value: object, line: int, what: str) -> int:
    """A ``concurrency`` level: a count of load-generator threads, within the limit."""
    return integer(rd, value, line, what, _CLIENTS)


def _batching(rd: Reader, value: object, line: int, what: str) -> BatchingSpec:
    m = rd.as_map(value, line, what)
    rd.keys(m, grammar.BATCHING.names, what)
    check_section(rd, m, grammar.BATCHING, line, what)
    at, name = m.key_line("max_wait_ms"), f"`max_wait_ms` of {what}"
    return BatchingSpec(
        integer(rd, m["max_batch"], m.key_line("max_batch"), f"`max_batch` of {what}",
                grammar.BATCHING.scalar("max_batch")),
        number(rd, m["max_wait_ms"], at, name, grammar.BATCHING.scalar("max_wait_ms")),
    )  # fmt: skip


def _goodput(rd: Reader, value: object, line: int, what: str) -> GoodputSpec:
    m = rd.as_map(value, line, what)
    rd.keys(m, grammar.GOODPUT.names, what)
    check_section(rd, m, grammar.GOODPUT, line, what)
    return GoodputSpec(
        *(
            number(rd, m[k], m.key_line(k), f"`{k}` of {what}", grammar.GOODPUT.scalar(k))
            for k in grammar.GOODPUT.names
        )
    )


def _slo(rd: Reader, value: object, line: int, what: str) -> _Slo:
    m = rd.as_map(value, line, what)
    rd.keys(m, grammar.SLO.names, what)
    check_section(rd, m, grammar.SLO, line, what)
    key = next(key for key in m if key in (*_SLO_TARGETS, _GOODPUT_SHARE))

    def num(k: str) -> float:
        return number(rd, m[k], m.key_line(k), f"`{k}` of {what}", grammar.SLO.scalar(k))

    refine = m.get("refine", grammar.SLO.key("refine").default)
    goodput = key == _GOODPUT_SHARE
    return _Slo(
        _SLO_TARGETS.get(key, 95.0),  # a goodput search records P95 per step
        None if goodput else num(key),
        num("factor") if "factor" in m else grammar.SLO.key("factor").default,
        integer(rd, refine, m.key_line("refine"), f"`refine` of {what}",
                grammar.SLO.scalar("refine")),
        num("max") if "max" in m else None,
        m.key_line("max"),
        num(key) if goodput else None,
    )  # fmt: skip


def _option(name: str) -> Callable[[Reader, object, int, str], object]:
    """The parser of a number option of ``load`` (its bounds from the grammar)."""
    node = grammar.LOAD.scalar(name)
    if node.kind == "integer":
        return lambda rd, v, line, what: integer(rd, v, line, what, node)
    return lambda rd, v, line, what: number(rd, v, line, what, node)


# fmt: off
_PARSERS: dict[str, Callable[[Reader, object, int, str], object]] = {
    "concurrency": lambda rd, v, line, what: _levels(rd, v, line, what, closed=True),
    "rate": lambda rd, v, line, what: _levels(rd, v, line, what, closed=False),
    "batching": _batching, "slo": _slo, "goodput": _goodput,
    "arrivals": lambda rd, v, line, what: rd.as_choice(v, line, what, ARRIVALS),
    "sessions": lambda rd, v, line, what: rd.as_choice(v, line, what, SESSION_MODES),
    **{k: _option(k) for k in ("seed", "workers", "late_ms", "late_max", "errors_max")},
}
# fmt: on


def parse_load(rd: Reader, value: object, line: int, where: str) -> dict[str, object] | None:
    """``load:`` as a dict to merge key by key over ``defaults`` (``None`` for ``false``).

    Each value is parsed here; ``expand_cells`` checks the merged whole.
    """
    if value is False:
        return None
    what = f"`{LOAD}` in {where}"
    if not isinstance(value, PosDict):
        expected = "a mapping with `concurrency` or `rate`, or `false` for one request at a time"
        rd.fail(line, f"{what} is {found(value)}", expected, f"write {what} as a mapping")
    rd.keys(value, grammar.LOAD.names, what)
    in_defaults = where == _DEFAULTS_WHERE
    draft: dict[str, object] = {_LINE: _At(None, line, in_defaults)}
    for key, v in value.items():
        at = value.key_line(key)
        draft[key] = _At(_PARSERS[key](rd, v, at, f"`{key}` of {what}"), at, in_defaults)
    return draft


def parse_shapes(rd: Reader, m: PosDict, where: str, model: ModelSpec) -> dict[str, ModelSpec]:
    """A scenario's ``shapes:``: bucket name -> the model with that bucket's input shapes
    (empty without ``shapes``)."""
    if SHAPES not in m:
        return {}
    line, what = m.key_line(SHAPES), f"`{SHAPES}` of {where}"
    buckets = rd.as_map(m[SHAPES], line, what)
    if not buckets:
        fix = "add e.g. `seq32: {input_ids: [1, 32]}`, or remove `shapes`"
        rd.fail(line, f"{what} is empty", "bucket name -> input name -> shape", fix)
    if model.inputs_file is not None:
        problem = f"{what} reshapes inputs, but model `{model.name}` reads `inputs_file`"
        fix = "declare the model's inputs under `inputs:`, or remove `shapes`"
        rd.fail(line, problem, "a model whose inputs are declared under `inputs:`", fix)
    declared = [spec.name for spec in model.inputs]
    out: dict[str, ModelSpec] = {}
    for name, value in buckets.items():
        at = buckets.key_line(name)
        if isinstance(name, str) and len(name) > NAME_MAX_CHARS:
            problem = f"shape bucket name {found(name)} in {where} is {len(name)} characters long"
            rd.fail(at, problem, f"at most {NAME_MAX_CHARS} characters", "shorten it")
        if not isinstance(name, str) or not _BUCKET_RE.fullmatch(name):
            fixed = re.sub(r"[^A-Za-z0-9_.+]", "_", name) if isinstance(name, str) else f"s{name}"
            expected = "letters, digits, `_`, `.` and `+` (`-` joins the parts of cell ids)"
            problem = f"shape bucket name {found(name)} in {where} is not allowed"
            rd.fail(at, problem, expected, f"rename it, e.g. `{fixed}`")
        bucket = f"shape bucket `{name}` of {where}"
        given = rd.as_map(value, at, bucket)
        if not given:
            fix = f"add e.g. `{declared[0]}: [...]`, or remove the bucket"
            rd.fail(at, f"{bucket} is empty", "input name -> shape", fix)
        shapes: dict[str, tuple[int, ...]] = {}
        for key, raw in given.items():
            k_at = given.key_line(key)
            if key not in declared:
                problem = f"{bucket} names input {found(key)}, which model `{model.name}` lacks"
                fix = suggest(key, declared) or "name an input declared under the model's `inputs:`"
                rd.fail(k_at, problem, one_of(declared), fix)
            dims = rd.as_list(raw, k_at, f"the shape of `{key}` in {bucket}")
            shapes[key] = tuple(
                rd.as_int(d, dims.item_line(i), f"dimension {i} of `{key}` in {bucket}", 1)
                for i, d in enumerate(dims)
            )
        inputs = tuple(
            dataclasses.replace(spec, shape=shapes[spec.name]) if spec.name in shapes else spec
            for spec in model.inputs
        )
        out[name] = dataclasses.replace(model, inputs=inputs)
    return out


def expand_cells(
    rd: Reader, cells: Sequence[Scenario], draft: object, shapes: Mapping[str, ModelSpec],
    own: bool, finish: Callable[[list[Scenario]], list[Scenario]],
    prompts: Sequence[GenerateSpec] = (),
) -> list[Scenario]:  # fmt: skip
    """Each matrix cell once per shape bucket, prompt length (``prompts``: a generative
    scenario's, one ``GenerateSpec`` each) and load level, in that order.

    ``draft`` is the merged ``load`` (``parse_load``'s dicts over ``defaults``), the
    same for every cell; ``own``: the scenario wrote ``load:`` itself. ``finish``
    runs on each (bucket, level) group of cells, aligned with ``cells``, before
    ``shape``/``load`` join ``matrix_values``: ``perfguard.suite.sections.accuracy``
    resolves an accuracy reference among the matrix values of one such group.
    """
    if not cells:
        return []
    loads = _loads(rd, cells[0].name, draft, own)
    lines = (
        {k: v.line for k, v in cast("dict[str, _At]", draft).items()}
        if isinstance(draft, dict)
        else {}
    )
    buckets: list[tuple[str, ModelSpec | None]] = [*shapes.items()] or [("", None)]
    generate: list[GenerateSpec | None] = [*prompts] or [None]
    groups = [
        finish([_cell(rd, sc, bucket, model, load, lines, prompt) for sc in cells])
        for bucket, model in buckets
        for prompt in generate
        for load in loads
    ]
    return [_with_axes(group[i]) for i in range(len(cells)) for group in groups]


def _loads(rd: Reader, name: str, draft: object, own: bool) -> list[LoadSpec | None]:
    if not isinstance(draft, dict):
        return [None]
    d = cast("dict[str, _At]", draft)
    where, line = f"`{LOAD}` of scenario `{name}`", d[_LINE].line
    given = [key for key in _LEVEL_KEYS if key in d]
    if not given and not own:
        return [None]  # a `defaults` load without a level only holds options
    expected = "exactly one of `concurrency` (closed loop) and `rate` (open loop)"
    if not given:
        fix = 'add e.g. `concurrency: [1, 4]` or `rate: ["100/s"]`'
        rd.fail(line, f"{where} has neither `concurrency` nor `rate`", expected, fix)
    if len(given) == 2:
        inherited = [key for key in given if d[key].from_defaults]
        fix = "remove one of them"
        if len(inherited) == 1:
            fix += f" (`{inherited[0]}` comes from `defaults`: set it on the scenarios using it)"
        at = max(d[key].line for key in given if key not in inherited or len(inherited) == 2)
        rd.fail(at, f"{where} has both `concurrency` and `rate`", expected, fix)
    key = given[0]
    closed = key == "concurrency"
    options = {k: d[k] for k in _OPTIONS if k in d}
    for opt in ("arrivals", "workers"):
        if opt not in options or not closed or (opt == "workers" and "batching" in d):
            continue
        if options[opt].from_defaults and not d[key].from_defaults:
            del options[opt]  # a `defaults` option for open loops; this scenario is closed
            continue
        if opt == "arrivals":
            problem = f"`arrivals` is set in {where}, which runs a closed loop (`concurrency`)"
            expected = "`arrivals` only with `rate`: closed-loop clients send as requests return"
            fix = "remove `arrivals`, or use `rate:` for an open loop"
        else:
            problem = f"`workers` is set in {where}, a closed loop without `batching`"
            expected = (
                "`workers` with `rate`, or with `concurrency` and `batching` (clients then "
                "submit to a batching server with `workers` model instances)"
            )
            fix = "remove `workers` (each client calls the model itself), or add `batching`"
        rd.fail(options[opt].line, problem, expected, fix)
    fields = cast("dict[str, Any]", {k: v.value for k, v in options.items()})
    base = LoadSpec("closed" if closed else "open", 0.0, **fields)
    levels = cast("tuple[tuple[float, int], ...]", d[key].value)
    specs: list[LoadSpec | None] = [dataclasses.replace(base, level=lv) for lv, _ in levels]
    if "slo" in d:
        slo, start = cast("_Slo", d["slo"].value), min(lv for lv, _ in levels)
        if slo.max_level is not None and slo.max_level <= start:
            problem = f"`max` of `slo` in {where} is {slo.max_level:g}, not above its start"
            expected = f"`max` > the lowest listed `{key}` ({start:g}), where the search starts"
            fix = f"set `max` above {start:g}, e.g. {start * slo.factor**4:g}, or remove it"
            rd.fail(slo.max_line, problem, expected, fix)
        spec = SloSpec(
            slo.percentile, slo.target_ms, start, slo.factor, slo.refine, slo.max_level,
            slo.goodput_share,
        )  # fmt: skip
        specs.append(dataclasses.replace(base, level=start, slo=spec))
    return specs


def _cell(
    rd: Reader, sc: Scenario, bucket: str, model: ModelSpec | None, load: LoadSpec | None,
    lines: Mapping[str, int], prompt: GenerateSpec | None = None,
) -> Scenario:  # fmt: skip
    parts = (sc.cell_id, bucket, prompt.bucket_id if prompt else "", load.level_id if load else "")
    gates = sc.gates
    if load is not None and load.slo is not None:
        gates = tuple(g for g in gates if g.metric not in LATENCY_QS)
        gates += () if any(g.metric == SLO_GATE.metric for g in gates) else (SLO_GATE,)
    cell = dataclasses.replace(
        sc, cell_id="-".join(p for p in parts if p), model=model or sc.model, load=load,
        shape_bucket=bucket, gates=gates, generate=prompt,
    )  # fmt: skip
    if any(g.metric == "goodput" for g in cell.gates) and (load is None or not load.goodput):
        where = f"scenario `{sc.name}`"
        rd.fail(
            lines.get("goodput", sc.location.line),
            f"{where} gates `goodput` but sets no goodput limits "
            f"(`{LOAD}: goodput: {{ttft_ms, tpot_ms}}`)",
            "`goodput` gated on a generative cell under `load:` with `goodput:` limits",
            f"add e.g. `goodput: {{ttft_ms: 200, tpot_ms: 20}}` to `{LOAD}` of {where}, or "
            "remove the `goodput` gate (one in `defaults` reaches every generative scenario)",
        )
    if load is not None:
        _check_generative(rd, cell, load, lines)
        _check_batching(rd, cell, load, lines.get("batching", lines[_LINE]))
        _check_count(rd, cell, load, lines[_LINE])
    return cell


# What a generative cell under load does not take yet: the `load` key, why, and the fix.
_GENERATIVE_NOT_YET: Mapping[str, tuple[str, str]] = {
    "batching": (
        "dynamic batching of generative requests (continuous batching is a serving "
        "engine's, not a queue in front of `generate`)",
        "remove `batching`; `generate: batch:` decodes several prompts per request",
    ),
    "sessions": (
        "one model per worker for generative cells (the workers share the model; each "
        "request has its own KV cache)",
        "remove `sessions`",
    ),
}


def _check_generative(rd: Reader, sc: Scenario, load: LoadSpec, lines: Mapping[str, int]) -> None:
    """``goodput`` only on a generative cell; on one, what load does not take yet."""
    if sc.generate is None:
        if load.slo is not None and load.slo.goodput_share is not None:
            rd.fail(
                lines.get("slo", lines[_LINE]),
                f"`goodput_share` in `slo` of scenario `{sc.name}`, which generates nothing",
                "a goodput search only beside `generate:`",
                "search on a latency target (`p95_ms`) instead, or add `generate:`",
            )
        if load.goodput is not None:
            rd.fail(
                lines.get("goodput", lines[_LINE]),
                f"`goodput` in `{LOAD}` of scenario `{sc.name}`, which generates nothing",
                "`goodput` only beside `generate:` (its limits are on TTFT and TPOT)",
                "remove `goodput`, or add `generate:` to the scenario",
            )
        return
    if load.slo is not None and load.slo.goodput_share is not None and load.goodput is None:
        where = f"`{LOAD}` of scenario `{sc.name}`"
        rd.fail(
            lines.get("slo", lines[_LINE]),
            f"`goodput_share` of `slo` in {where} needs goodput limits",
            f"`goodput: {{ttft_ms, tpot_ms}}` beside it in `{LOAD}` (what a good request is)",
            f"add e.g. `goodput: {{ttft_ms: 200, tpot_ms: 20}}` to {where}",
        )
    given = {
        "batching": load.batching is not None,
        "sessions": load.sessions != grammar.LOAD.key("sessions").default,
    }
    for key, (what, fix) in _GENERATIVE_NOT_YET.items():
        if given[key]:
            rd.fail(
                lines.get(key, lines[_LINE]),
                f"`{key}` in `{LOAD}` of scenario `{sc.name}`, a generative scenario: {what} "
                "is not measured yet",
                f"a generative cell under `{LOAD}`: `concurrency` or `rate`, `arrivals`, "
                "`seed`, `workers`, `late_ms`, `late_max`, `errors_max`, `goodput`, `slo`",
                fix,
            )


def _with_axes(sc: Scenario) -> Scenario:
    axes: tuple[tuple[str, str], ...] = (("shape", sc.shape_bucket),) if sc.shape_bucket else ()
    axes += (("prompt", sc.generate.bucket_id),) if sc.generate else ()
    axes += (("load", sc.load.level_id),) if sc.load else ()
    return dataclasses.replace(sc, matrix_values=sc.matrix_values + axes)


def _check_batching(rd: Reader, sc: Scenario, load: LoadSpec, line: int) -> None:
    for spec in sc.model.inputs if load.batching else ():
        if not spec.shape:
            bucket = f" (shape bucket `{sc.shape_bucket}`)" if sc.shape_bucket else ""
            problem = (
                f"`batching` in `{LOAD}` of scenario `{sc.name}` stacks requests on a leading "
                f"batch axis, but input `{spec.name}` of model `{sc.model.name}`{bucket} is a "
                "scalar (shape [])"
            )
            expected = "every input with at least one dimension (the batch axis)"
            fix = f"give `{spec.name}` a leading batch dimension, e.g. `[1]`, or remove `batching`"
            rd.fail(line, problem, expected, fix)


def _up(x: float) -> str:
    """``x`` rounded up to 2 decimals, for a fix that must reach it."""
    return f"{math.ceil(x * 100 - 1e-9) / 100:g}"


def _check_count(rd: Reader, sc: Scenario, load: LoadSpec, line: int) -> None:
    if load.slo is not None:
        qs = (
            {load.slo.percentile: f"its P{load.slo.percentile:g} target"}
            if load.slo.goodput_share is None
            else {}  # a share of good requests needs no percentile bound
        )
        level, start, lower = load.slo.start, "the `slo` search's start ", "target"
    else:
        qs = {LATENCY_QS[g.metric]: f"a P{LATENCY_QS[g.metric]:g} gate" for g in sc.gates
              if g.metric in LATENCY_QS}  # fmt: skip
        level, start, lower = load.level, "", "gate"
    needed, who = max(((samples_needed(q, CONFIDENCE), w) for q, w in qs.items()), default=(1, ""))
    bound = f"{who} needs at least {needed} requests for a {CONFIDENCE:.0%} bound"
    lower = f", or {lower} a lower percentile" if qs else ""
    if not qs:
        bound = "a level needs at least 1 request"
    cell = f"scenario `{sc.name}`: "
    if load.mode == "closed":
        runs = sc.measure.iterations
        if runs < needed:
            problem = f"{cell}measure.iterations {runs} runs {runs} requests at {start}"
            problem += f"concurrency {level:g}, but {bound}"
            fix = f"set measure.iterations >= {needed}{lower}"
            rd.fail(line, problem, f"at least {needed} requests per level", fix)
        return
    seconds = sc.measure.seconds
    count = round(level * seconds)
    if count > LOOP_MAX_ITERATIONS:
        problem = f"{cell}{start}rate {level:g}/s for measure.seconds {seconds:g} schedules "
        problem += f"{count} requests"
        expected = f"at most {LOOP_MAX_ITERATIONS} requests per level (perfguard's loop limit)"
        fix = f"set measure.seconds <= {LOOP_MAX_ITERATIONS / level:g}, or lower the rate"
        rd.fail(line, problem, expected, fix)
    if count < needed:
        problem = f"{cell}{start}rate {level:g}/s for measure.seconds {seconds:g} schedules "
        problem += f"{count} requests, but {bound}"
        fix = f"set measure.seconds >= {_up(needed / level)}"
        if seconds > 0:
            rate = "the lowest listed rate" if load.slo else "the rate"
            fix += f", raise {rate} to >= {_up(needed / seconds)}/s"
        rd.fail(line, problem, f"at least {needed} requests per level", fix + lower)
