"""Hypothesis strategies for stored records."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from perfguard.records.declare import FieldSpec, Record, Shape, stored_fields
from perfguard.records.opprofile import PROFILERS, NodeTime, OperatorProfile, OpTypeTime
from perfguard.records.tokenfigures import TokenFigures

names = st.text(max_size=20)


# Profiles store whole nanoseconds, so the strategy draws whole ones (a round trip is exact).
whole_ns = st.integers(0, 10**12).map(float)


profiles = st.builds(
    OperatorProfile,
    profiler=st.sampled_from(PROFILERS),
    requests=st.integers(1, 10**4),
    total_ns=whole_ns,
    nodes=st.lists(
        st.builds(NodeTime, name=names, op_type=names, ns=whole_ns, provider=names), max_size=6
    ).map(tuple),
    op_types=st.lists(st.builds(OpTypeTime, op_type=names, ns=whole_ns), max_size=4).map(tuple),
    trace=st.none() | names,
    wall_ns=st.none() | st.integers(0, 10**12),
)


# ----------------------------------------------------------------- declared records


def _scalars(shape: Shape, spec: FieldSpec) -> st.SearchStrategy[Any]:
    if spec.values is not None:
        return st.sampled_from([v for v in spec.values if v is not None])
    if shape.kind == "enum":
        return st.sampled_from(list(shape.base))
    if shape.kind == "any":
        return st.none() | st.booleans() | st.integers(-100, 100) | names
    low = spec.minimum if spec.minimum is not None else -1e12
    high = spec.maximum if spec.maximum is not None else 1e12
    if shape.base is bool:
        return st.booleans()
    if shape.base is int:
        return st.integers(int(low), int(min(high, 10**12)))
    if shape.base is float:
        # A float field may hold a whole number as an int (as a file can); both round-trip.
        return st.floats(low, high, allow_nan=False) | st.integers(int(low), int(high))
    if spec.pattern is not None:
        return st.from_regex(spec.pattern, fullmatch=True)
    return st.text(min_size=spec.min_length or 0, max_size=12)


def _values(shape: Shape, spec: FieldSpec) -> st.SearchStrategy[Any]:
    if shape.kind == "record":
        inner: st.SearchStrategy[Any] = records(shape.base)
    elif shape.kind == "tuple":
        assert shape.item is not None
        inner = st.lists(_values(shape.item, spec), max_size=3).map(tuple)
    elif shape.kind == "dict":
        assert shape.item is not None
        keys = (
            st.integers(1, 64).map(str)
            if spec.key_pattern == "^[0-9]+$"
            else st.text(min_size=1, max_size=8)
        )
        inner = st.dictionaries(keys, _values(shape.item, spec), max_size=3)
    else:
        inner = _scalars(shape, spec)
    nullable = shape.nullable or (spec.values is not None and None in spec.values)
    return (st.none() | inner) if nullable else inner


#: Token times of generative requests (one row per request, never going backwards).
token_times = hnp.arrays(
    np.int64, st.tuples(st.integers(1, 4), st.integers(1, 5)), elements=st.integers(0, 10**9)
).map(lambda a: np.cumsum(a, axis=1))


def token_figures() -> st.SearchStrategy[TokenFigures]:
    """Token figures as a generative cell records them: their fields are read from the
    token times, so a declaration-drawn record would be inconsistent (and refused)."""
    return st.builds(
        TokenFigures.of, token_times, prompt_tokens=st.integers(1, 64), batch=st.integers(1, 8)
    )


#: Records whose fields depend on each other: drawn by their own strategy.
_DERIVED: dict[type, Any] = {TokenFigures: token_figures}


def records(cls: type[Record]) -> st.SearchStrategy[Any]:
    """Any ``cls`` record its declaration allows (``perfguard.records.declare``)."""
    if cls in _DERIVED:
        return _DERIVED[cls]()  # type: ignore[no-any-return]
    # A field of a hand-written codec keeps its default (its own tests draw it).
    drawn = [f for f in stored_fields(cls) if f.shape.kind != "codec"]
    return st.builds(
        cls, **{f.name: st.deferred(lambda f=f: _values(f.shape, f.spec)) for f in drawn}
    )


# -- mutated JSON documents: what a stored file's reader must read or refuse ---------------

#: Any small JSON value.
garbage = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


def json_places(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value in a JSON document, the document's own ``()`` first."""
    out = [path]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += json_places(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += json_places(v, (*path, i))
    return out


@st.composite
def mutants(draw: st.DrawFn, doc: Any, hows: tuple[str, ...] = ("replace", "delete", "add")) -> Any:
    """``doc`` (with at least one value) with one value replaced by garbage, deleted (from
    an object), or joined by an unknown key (in an object)."""
    places = [p for p in json_places(doc) if p]
    mutated = copy.deepcopy(doc)
    place = draw(st.sampled_from(places))
    parent = mutated
    for step in place[:-1]:
        parent = parent[step]
    how = draw(st.sampled_from(hows))
    if how == "delete" and isinstance(parent, dict):
        del parent[place[-1]]
    elif how == "add" and isinstance(parent, dict):
        parent[draw(st.text(max_size=5))] = draw(garbage)
    else:
        parent[place[-1]] = draw(garbage)
    return mutated
