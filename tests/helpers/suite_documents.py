"""Hypothesis strategies for suite documents drawn from the grammar (perfguard.suite.grammar)."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import strategies as st

from perfguard.suite import grammar
from perfguard.suite.grammar import (
    DEFAULTS,
    MODEL,
    SCENARIO,
    SUITE,
    Key,
    ListOf,
    MapOf,
    Node,
    OneOf,
    Scalar,
    Section,
)

_JUNK = st.one_of(
    st.integers(-3, 3), st.text("ab-_: ", max_size=4), st.booleans(), st.none(),
    st.floats(-2, 2, allow_nan=False), st.just([]), st.just({}),
)  # fmt: skip


ASCII = st.characters(min_codepoint=32, max_codepoint=126)  # what suites are written in


def _scalar(node: Scalar) -> st.SearchStrategy[Any]:
    if node.choices:
        return st.sampled_from(node.choices)
    if node.kind == "boolean":
        return st.booleans()
    if node.kind == "null":
        return st.none()
    if node.kind == "any":
        return st.one_of(st.integers(0, 3), st.text("abc", max_size=3), st.lists(st.integers()))
    if node.kind == "string":
        if node.pattern and node.pattern.startswith("^"):
            return st.from_regex(node.pattern, fullmatch=True, alphabet=ASCII).filter(
                lambda s: len(s) < 40
            )
        return st.text("abxy_.:", min_size=0, max_size=5)
    lo = next((v for v in (node.minimum, node.exclusive_minimum) if v is not None), -5.0)
    hi = next((v for v in (node.maximum, node.exclusive_maximum) if v is not None), lo + 500)
    if node.kind == "integer":
        edges = st.sampled_from([int(lo) - 1, int(lo), int(lo) + 1, int(hi), int(hi) + 1])
        return st.one_of(edges, st.integers(int(lo) - 1, int(hi) + 1))
    near = st.sampled_from([lo, hi, lo + 1e-9, (lo + hi) / 2])
    return st.one_of(near, st.integers(int(lo) - 1, int(hi) + 1), st.floats(lo - 1, hi + 1))


_STRATEGIES: dict[tuple[int, int], st.SearchStrategy[Any]] = {}


def values(node: Node, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of ``node``'s type, near its bounds, now and then of another type."""
    if (id(node), depth) not in _STRATEGIES:
        _STRATEGIES[id(node), depth] = _values(node, depth)
    return _STRATEGIES[id(node), depth]


def _values(node: Node, depth: int) -> st.SearchStrategy[Any]:
    strategy: st.SearchStrategy[Any]
    if isinstance(node, Scalar):
        strategy = _scalar(node)
    elif isinstance(node, ListOf):
        strategy = st.lists(values(node.items, depth + 1), min_size=node.min_items, max_size=3)
    elif isinstance(node, MapOf):
        names = (
            st.from_regex(node.key_pattern, fullmatch=True, alphabet=ASCII).filter(
                lambda s: len(s) < 12
            )
            if node.key_pattern
            else st.sampled_from(["x", "y", "0"])
        )
        strategy = st.dictionaries(
            names, values(node.values, depth + 1), min_size=node.min_items, max_size=2
        )
    elif isinstance(node, OneOf):
        strategy = st.one_of([values(o, depth) for o in node.options])
    else:
        strategy = some_keys(node, 2 if depth < 3 else 0, depth + 1)
    return st.integers(0, 29).flatmap(lambda i: _JUNK if i == 0 else strategy)


@st.composite
def _keys(draw: st.DrawFn, section: Section, most: int) -> list[Key]:
    """Up to ``most`` optional keys of ``section``, its required ones, one of each
    exactly-one group, never two of an at-most-one group, and what a key requires."""
    grouped = {name for group in section.exactly_one for name in group}
    optional = [k for k in section.keys if not k.required and k.name not in grouped]
    names = [k.name for k in section.keys if k.required]
    names += [draw(st.sampled_from(group)) for group in section.exactly_one]
    if optional and most:
        picked = draw(
            st.lists(st.sampled_from(optional), max_size=most, unique_by=lambda k: k.name)
        )
        names += [k.name for k in picked]
    for group in section.at_most_one:
        names = [n for n in names if n not in group[1:] or group[0] not in names]
    names += [need for key, needs in section.requires if key in names for need in needs]
    return [section.key(name) for name in dict.fromkeys(names)]


def some_keys(section: Section, most: int, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    return _keys(section, most).flatmap(
        lambda keys: st.fixed_dictionaries({k.name: values(k.type, depth) for k in keys})
    )


def whole(section: Section) -> st.SearchStrategy[dict[str, Any]]:
    return some_keys(section, len(section.keys))


M_INPUTS = {"x": {"shape": [1, 4]}}


# (where a drawn value goes, what it is): one place of a document gets many of its keys
# drawn, the rest stays valid, so that most documents reach the keys under test.
FOCUS: dict[str, tuple[str, st.SearchStrategy[Any]]] = {
    "scenario": ("scenario", some_keys(SCENARIO, 4)),
    "defaults": ("defaults", some_keys(DEFAULTS, 4)),
    "model": ("model", whole(MODEL)),
    "input": ("model.inputs.x", whole(grammar.INPUT)),
    "quantizations": ("quantizations", values(SUITE.key("quantizations").type)),
    "quantization": ("scenario.quantization", whole(grammar.QUANT)),
    "loop": ("scenario.measure", whole(grammar.LOOP)),
    "gate": ("scenario.gate", whole(grammar.GATE)),
    "matrix": ("scenario.matrix", some_keys(grammar.MATRIX, 3)),
    "shapes": ("scenario.shapes", values(SCENARIO.key("shapes").type)),
    "load": ("scenario.load", whole(grammar.LOAD)),
    "slo": ("scenario.load.slo", whole(grammar.SLO)),
    "batching": ("scenario.load.batching", whole(grammar.BATCHING)),
    "gpu": ("scenario.gpu", whole(grammar.GPU)),
    "tensorrt": ("scenario.gpu.tensorrt", whole(grammar.TENSORRT)),
    "accuracy": ("scenario.accuracy", whole(grammar.ACCURACY)),
    "accuracy-inputs": ("scenario.accuracy.inputs", whole(grammar.ACCURACY_INPUTS)),
    "accuracy-gate": ("scenario.accuracy.gate", whole(grammar.ACCURACY_LIMITS)),
    "kl": ("scenario.accuracy.kl", whole(grammar.KL)),
    "task": ("scenario.accuracy.task", whole(grammar.TASK)),
    "reference": ("scenario.accuracy.reference", whole(grammar.REFERENCE)),
}


@st.composite
def documents(draw: st.DrawFn, focus: str) -> dict[str, Any]:
    where, strategy = FOCUS[focus]
    model: dict[str, Any] = {"factory": "pkg.mod:build", "inputs": dict(M_INPUTS)}
    # Enough requests for any load level, so that a level's count is not what refuses it.
    scenario: dict[str, Any] = {"measure": {"iterations": 500, "seconds": 60}}
    doc: dict[str, Any] = {"models": {"m": model}, "scenarios": [scenario]}
    if where.startswith("scenario.load"):
        scenario["load"] = {"rate": 100}
    if where.startswith("scenario.accuracy.reference"):
        scenario["matrix"] = {"backend": ["torch", "onnxruntime"]}
    places = {"scenario": scenario, "model": model, "defaults": doc}
    head, *rest = where.split(".")
    value = draw(strategy)
    if head == "defaults" or head == "quantizations":
        doc[head] = value
    elif not rest:
        places[head].update(value)
    elif where == "scenario.load":
        # A scenario's load names a level: keep the drawn one, else the base rate.
        levels = isinstance(value, dict) and {"concurrency", "rate"} & set(value)
        scenario["load"] = (
            value if levels or not isinstance(value, dict) else {"rate": 100, **value}
        )
    else:
        parent = places[head]
        for part in rest[:-1]:
            parent = parent.setdefault(part, {})
        parent[rest[-1]] = value
    scenario.update({"name": "s", "model": "m"})
    return doc


# --------------------------------------------------------------------------- rule cases

# One small suite every rule case starts from; a section's mapping goes in at its place.
_BASE_SUITE: dict[str, Any] = {
    "models": {"m": {"factory": "pkg.mod:build", "inputs": dict(M_INPUTS)}},
    "scenarios": [{"name": "s", "model": "m", "measure": {"iterations": 500, "seconds": 60}}],
}
_LOAD = {"scenarios.0.load": {"rate": 100}}

# Section name in perfguard.suite.grammar -> (where its mapping goes, a valid mapping,
# what else the suite needs there: dotted path -> value). "" is the whole file.
PLACES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "SUITE": ("", _BASE_SUITE, {}),
    "DEFAULTS": ("defaults", {}, {}),
    "SCENARIO": ("scenarios.0", {"name": "s", "model": "m"}, {}),
    "MODEL": ("models.m", _BASE_SUITE["models"]["m"], {}),
    "INPUT": ("models.m.inputs.x", {"shape": [1, 4]}, {}),
    "SERVER": ("models.served.server", {"command": ["serve", "--port", "{port}"]}, {}),
    "QUANT": ("quantizations.q", {}, {}),
    "LOOP": ("scenarios.0.measure", {}, {}),
    "GATE": ("scenarios.0.gate", {}, {}),
    "MATRIX": ("scenarios.0.matrix", {"backend": ["torch"]}, {}),
    "EXCLUDE_ENTRY": (
        "scenarios.0.exclude.0",
        {"backend": "torch"},
        {"scenarios.0.matrix": {"backend": ["torch", "onnxruntime"]}, "scenarios.0.exclude": [{}]},
    ),
    "ACCURACY": ("scenarios.0.accuracy", {}, {}),
    "ACCURACY_INPUTS": ("scenarios.0.accuracy.inputs", {}, {}),
    "ACCURACY_LIMITS": ("scenarios.0.accuracy.gate", {}, {}),
    "KL": ("scenarios.0.accuracy.kl", {}, {}),
    "TASK": ("scenarios.0.accuracy.task", {"function": "a:b"}, {}),
    "REFERENCE": (
        "scenarios.0.accuracy.reference",
        {"backend": "torch"},
        {"scenarios.0.matrix": {"backend": ["torch", "onnxruntime"]}},
    ),
    "LOAD": ("scenarios.0.load", {"rate": 100}, {}),
    "SLO": ("scenarios.0.load.slo", {"p95_ms": 50}, _LOAD),
    "BATCHING": ("scenarios.0.load.batching", {"max_batch": 2, "max_wait_ms": 1}, _LOAD),
    "GENERATE": ("scenarios.0.generate", {"prompt_tokens": 8, "new_tokens": 4}, {}),
    "GOODPUT": (
        "scenarios.0.load.goodput",
        {"ttft_ms": 200, "tpot_ms": 20},
        {**_LOAD, "scenarios.0.generate": {"prompt_tokens": 8, "new_tokens": 4}},
    ),
    "GPU": ("scenarios.0.gpu", {}, {}),
    "TENSORRT": ("scenarios.0.gpu.tensorrt", {}, {}),
    "PROFILE": (
        "scenarios.0.gpu.tensorrt.profiles.x",
        {"min": [1], "opt": [1], "max": [1]},
        {"scenarios.0.gpu": {"tensorrt": {"profiles": {}}}},
    ),
}


def _put(doc: Any, where: str, value: Any) -> None:
    *parents, last = where.split(".")
    for part in parents:
        doc = doc[int(part)] if isinstance(doc, list) else doc.setdefault(part, {})
    if isinstance(doc, list):
        doc[int(last)] = value
    else:
        doc[last] = value


def suite_with(section: str, mapping: dict[str, Any]) -> dict[str, Any]:
    """The base suite with ``mapping`` as the mapping of grammar section ``section``."""
    where, _, setup = PLACES[section]
    if not where:
        return copy.deepcopy(mapping)
    doc = copy.deepcopy(_BASE_SUITE)
    for path, value in setup.items():
        _put(doc, path, copy.deepcopy(value))
    _put(doc, where, copy.deepcopy(mapping))
    return doc


def sample(key: Key) -> Any:
    """A value of ``key`` that the loader takes on its own (its example, its default,
    else the plainest value of its type)."""
    if key.example:
        return yaml.safe_load(key.example)
    if key.default is not grammar.NO_DEFAULT:
        return copy.deepcopy(key.default)
    return _plain(key.type)


def _plain(node: Node) -> Any:
    if isinstance(node, OneOf):
        return _plain(node.options[0])
    if isinstance(node, ListOf):
        return []
    if isinstance(node, MapOf | Section):
        return {}
    if node.choices:
        return node.choices[0]
    if node.kind == "string":
        return "a:b" if node.pattern == grammar.FUNCTION_PATTERN else "x"
    bound = next((b for b in (node.minimum, node.exclusive_minimum) if b is not None), 0)
    return int(bound) + 1 if node.kind == "integer" else bound + 1
