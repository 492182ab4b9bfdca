"""The ``generate:`` part of a suite file: a generative scenario
(``perfguard.core.scenario.GenerateSpec``).

``perfguard.suite.loader`` calls in here; errors are the same located ``SuiteError``. The
keys, types, bounds and defaults are declared in :data:`perfguard.suite.grammar.GENERATE`.

* ``prompt_tokens`` is one length or a list of them (the prompt-length buckets): one set
  of cells per length, id ``p<length>`` after the matrix values and shape bucket, before
  the load level, and ``("prompt", "p<length>")`` in the cell's ``matrix_values``.
* ``file`` is relative to the suite file's folder; it is read when the cell opens, with
  errors naming its line.
* A generative scenario's prompts are its inputs: the model's ``inputs:`` are not used.
  What this version does not measure for a generative cell yet is refused at the
  scenario's ``generate:`` line (``shapes``, ``profile``; what ``load`` does
  not take for one is refused by ``perfguard.suite.sections.load``), and a
  gate on a token figure (``ttft_p95``, ``itl_p95``, ``tpot_p50``, ``tokens_per_s``...) is
  refused on a scenario without ``generate:``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfguard.core.policy import GENERATIVE_METRICS, GateSpec, gate_metric
from perfguard.core.scenario import GenerateSpec
from perfguard.suite import grammar
from perfguard.suite.rules import check_section, integer
from perfguard.suite.yamlpos import PosDict, Reader

__all__ = ["GENERATE", "check_generative", "drop_token_gates", "parse_generate"]

GENERATE = "generate"  # scenario key
_INTS = ("new_tokens", "batch", "prompts", "seed", "vocab")
_TOKENS = next(
    o
    for o in grammar.GENERATE.key("prompt_tokens").type.options  # type: ignore[union-attr]
    if isinstance(o, grammar.Scalar)
)
# What a generative cell does not measure yet: the scenario keys refused beside `generate`.
_NOT_YET: Mapping[str, str] = {
    "shapes": "shape buckets (a generative cell's buckets are its `prompt_tokens`)",
    "profile": "operator profiles of generative cells",
}


def parse_generate(rd: Reader, m: PosDict, where: str) -> list[GenerateSpec]:
    """One ``GenerateSpec`` per prompt length of the scenario ``m``'s ``generate:``
    (empty without it)."""
    if GENERATE not in m:
        return []
    line, what = m.key_line(GENERATE), f"`{GENERATE}` of {where}"
    g = rd.as_map(m[GENERATE], line, what)
    rd.keys(g, grammar.GENERATE.names, what)
    check_section(rd, g, grammar.GENERATE, line, what)
    fields: dict[str, object] = {}
    for key in _INTS:
        if key in g:
            at = g.key_line(key)
            node = grammar.GENERATE.scalar(key)
            fields[key] = integer(rd, g[key], at, f"`{key}` of {what}", node)
    if "file" in g:
        name = rd.as_str(g["file"], g.key_line("file"), f"`file` of {what}")
        fields["file"] = rd.path.parent / name
        if "tokenizer" in g:  # none: a served model's (the loader checks per cell)
            fields["tokenizer"] = rd.as_str(
                g["tokenizer"], g.key_line("tokenizer"), f"`tokenizer` of {what}"
            )
    at = g.key_line("prompt_tokens")
    raw = g["prompt_tokens"]
    lengths: list[int] = []
    if isinstance(raw, list):
        items = rd.as_list(raw, at, f"`prompt_tokens` of {what}")
        for i, value in enumerate(items):
            n = integer(rd, value, items.item_line(i), f"prompt length {i} of {what}", _TOKENS)
            if n in lengths:
                problem = f"`prompt_tokens` of {what} lists {n} twice"
                rd.fail(items.item_line(i), problem, "distinct lengths", f"remove one {n}")
            lengths.append(n)
        if not lengths:
            fix = "list lengths, e.g. `prompt_tokens: [48, 96]`"
            rd.fail(at, f"`prompt_tokens` of {what} is an empty list", "lengths", fix)
    else:
        lengths.append(integer(rd, raw, at, f"`prompt_tokens` of {what}", _TOKENS))
    for key, feature in _NOT_YET.items():
        if key in m and m[key] is not False:
            problem = f"{where} has `{GENERATE}` and `{key}`: {feature} is not measured yet"
            expected = f"a generative scenario without `{key}` (one request at a time)"
            fix = f"remove `{key}` here, or measure it in a scenario without `generate`"
            rd.fail(m.key_line(key), problem, expected, fix)
    new_tokens = fields.pop("new_tokens")
    return [
        GenerateSpec(prompt_tokens=n, new_tokens=new_tokens, **fields)  # type: ignore[arg-type]
        for n in lengths
    ]


def check_generative(rd: Reader, m: PosDict, where: str) -> None:
    """Refuse a gate on a token figure written in a scenario that generates nothing: it
    would never have a figure to judge. (One from ``defaults`` is for the suite's
    generative scenarios: the others leave it out, ``drop_token_gates``.)"""
    if GENERATE in m or "gate" not in m:
        return
    gates = rd.as_map(m["gate"], m.key_line("gate"), f"`gate` of {where}")
    for key in gates:
        metric = gate_metric(str(key))
        if metric is None or metric.name not in GENERATIVE_METRICS:
            continue
        problem = f"{where} gates `{key}`, a token figure, but generates nothing"
        expected = "token gates (ttft_*, itl_*, tpot_*, tokens_per_s) with `generate:`"
        fix = f"remove the `{key}` gate, or add `generate:` to this scenario"
        rd.fail(gates.key_line(key), problem, expected, fix)


def drop_token_gates(gates: Sequence[GateSpec]) -> tuple[GateSpec, ...]:
    """``gates`` without those on token figures (a cell that generates nothing)."""
    return tuple(g for g in gates if g.metric not in GENERATIVE_METRICS)
