"""perfguard.suite.rules: the loader refuses whatever breaks a rule the grammar declares.

The rules live once, in perfguard.suite.grammar: a section's required keys, its
``exactly_one``, ``requires`` and ``at_most_one`` groups and each number's bounds. The
cases below are generated from that declaration, so a rule added there is tested at once
and a rule the loader stops enforcing fails here: each case puts a section's mapping,
valid but for the one rule it breaks, at the section's place in a small suite
(tests/helpers/suite_documents.py ``PLACES``) and expects a ``SuiteError`` naming the key
and the rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfguard.core.errors import SuiteError
from perfguard.suite import grammar
from perfguard.suite.grammar import Key, ListOf, Node, OneOf, Scalar, Section
from perfguard.suite.loader import load_suite
from perfguard.suite.rules import expected_number
from tests.helpers.suite_documents import PLACES, sample, suite_with

SECTIONS = {
    name: value for name in grammar.__all__ if isinstance(value := getattr(grammar, name), Section)
}


def refusal(tmp_path: Path, doc: dict[str, Any]) -> SuiteError:
    """The ``SuiteError`` that refuses ``doc`` (the test fails if none)."""
    path = tmp_path / "suite.yaml"
    text = yaml.safe_dump(doc, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    return info.value


def test_every_section_of_the_grammar_has_a_place() -> None:
    assert set(PLACES) == set(SECTIONS)


@pytest.mark.parametrize("section", list(PLACES))
def test_each_place_holds_a_valid_mapping(tmp_path: Path, section: str) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite_with(section, PLACES[section][1])), encoding="utf-8")
    assert load_suite(path).scenarios


# --------------------------------------------------------------------------- key rules


def _with(section: Section, mapping: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """``mapping`` with the keys ``names`` added, and the keys those require."""
    out = dict(mapping)
    for name in names:
        out[name] = sample(section.key(name))
        for key, needs in section.requires:
            if key == name:
                out.update({need: sample(section.key(need)) for need in needs if need not in out})
    return out


def _without(mapping: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k not in names}


def rule_cases() -> Iterator[Any]:
    """(section, mapping breaking one rule, what the message must name) for every rule."""
    for name, section in SECTIONS.items():
        valid = PLACES[name][1]
        for key in section.keys:
            if key.required:
                yield pytest.param(
                    name, _without(valid, (key.name,)), [f"has no `{key.name}`"],
                    id=f"{name}-requires-{key.name}",
                )  # fmt: skip
        for group in section.exactly_one:
            quoted = [f"`{k}`" for k in group]
            listed = "exactly one of " + (" and " if len(group) == 2 else ", ").join(quoted)
            none = _without(valid, group)
            yield pytest.param(name, none, [listed], id=f"{name}-none-of-{'-'.join(group)}")
            two = _with(section, none, group[:2])
            yield pytest.param(name, two, [listed], id=f"{name}-two-of-{'-'.join(group)}")
        for key, needs in section.requires:
            for need in needs:
                broken = _without(valid, (need,))
                for group in section.exactly_one:  # what `need` stood for in the group
                    if need in group:
                        broken = _with(section, broken, tuple(k for k in group if k != need)[:1])
                broken = _with(section, broken, (key,))
                broken.pop(need, None)
                yield pytest.param(
                    name, broken, [f"has `{key}` but no `{need}`", f"`{key}` only with `{need}`"],
                    id=f"{name}-{key}-without-{need}",
                )  # fmt: skip
        for group in section.at_most_one:
            # `load`'s levels: exactly one of them once merged over `defaults` (the loader
            # says so), at most one in a mapping as written (the grammar, the schema).
            for a, b in itertools.combinations(group, 2):
                yield pytest.param(
                    name, _with(section, valid, (a, b)), ["one of", f"`{a}`", f"`{b}`"],
                    id=f"{name}-{a}-and-{b}",
                )  # fmt: skip


RULE_CASES = list(rule_cases())


def test_there_are_rule_cases_of_every_kind() -> None:
    ids = [case.id for case in RULE_CASES]
    for kind in ("-requires-", "-none-of-", "-two-of-", "-without-", "-and-"):
        assert any(kind in i for i in ids), kind


@pytest.mark.parametrize(("section", "mapping", "needles"), RULE_CASES)
def test_the_loader_refuses_what_breaks_a_rule_of_the_grammar(
    tmp_path: Path, section: str, mapping: dict[str, Any], needles: list[str]
) -> None:
    message = str(refusal(tmp_path, suite_with(section, mapping)))
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"


# --------------------------------------------------------------------------- bounds


def _setting(name: str, key: str, value: object) -> dict[str, Any]:
    """The valid mapping of section ``name`` with ``key: value`` (and what it requires),
    without the keys it may not be written with."""
    section = SECTIONS[name]
    groups = [g for g in (*section.exactly_one, *section.at_most_one) if key in g]
    others = tuple(k for g in groups for k in g if k != key)
    mapping = _with(section, _without(PLACES[name][1], others), (key,))
    mapping[key] = value
    return mapping


def _bounded(node: Node) -> Iterator[tuple[Scalar, bool]]:
    """The bounded numbers ``node`` may be (through alternatives), and whether as a list item."""
    if isinstance(node, OneOf):
        for option in node.options:
            yield from _bounded(option)
    elif isinstance(node, ListOf) and isinstance(node.items, Scalar | OneOf):
        yield from ((scalar, True) for scalar, _ in _bounded(node.items))
    elif isinstance(node, Scalar) and node.kind in ("integer", "number"):
        bounds = (node.minimum, node.exclusive_minimum, node.maximum, node.exclusive_maximum)
        if any(b is not None for b in bounds):
            yield node, False


def _outside(node: Scalar) -> Iterator[tuple[float, float]]:
    """(a value out of ``node``'s bounds, the bound it breaks)."""
    if node.minimum is not None:
        low = node.minimum
        yield (low - 1 if node.kind == "integer" or low <= 0 else low / 2), low
    if node.exclusive_minimum is not None:
        yield node.exclusive_minimum, node.exclusive_minimum
    if node.maximum is not None:
        yield node.maximum + 1, node.maximum
    if node.exclusive_maximum is not None:
        yield node.exclusive_maximum, node.exclusive_maximum


def bound_cases() -> Iterator[Any]:
    seen: set[tuple[str, str, float]] = set()
    for name, section in SECTIONS.items():
        for key in section.keys:
            for node, listed in _bounded(key.type):
                for value, bound in _outside(node):
                    if (name, key.name, value) in seen:
                        continue
                    seen.add((name, key.name, value))
                    written = [value] if listed else value
                    yield pytest.param(name, key, written, bound, id=f"{name}-{key.name}-{value:g}")


BOUND_CASES = list(bound_cases())


def test_there_are_bound_cases_of_every_kind() -> None:
    nodes = [node for _, key, _, _ in (c.values for c in BOUND_CASES) for node, _ in
             _bounded(key.type)]  # fmt: skip
    assert any(n.minimum is not None for n in nodes)
    assert any(n.exclusive_minimum is not None for n in nodes)
    assert any(n.maximum is not None and n.why for n in nodes)
    assert any(n.maximum is not None and not n.why for n in nodes)
    assert any(n.exclusive_maximum is not None for n in nodes)
    assert len(BOUND_CASES) > 60


@pytest.mark.parametrize(("section", "key", "value", "bound"), BOUND_CASES)
def test_the_loader_refuses_a_number_past_its_grammar_bound(
    tmp_path: Path, section: str, key: Key, value: object, bound: float
) -> None:
    error = refusal(tmp_path, suite_with(section, _setting(section, key.name, value)))
    assert f"`{key.name}`" in error.problem, str(error)
    assert f"{bound:g}" in (error.expected or ""), f"the bound {bound:g} is not in {error}"


# The numbers the loader reads with perfguard.suite.rules (rates and shapes have readers of
# their own, tested above): (section, key, its number type).
NUMBERS = [
    (name, key, node)
    for name, section in SECTIONS.items()
    for key in section.keys
    for node, listed in _bounded(key.type)
    if not listed and key.name != "rate"
]


def _within(node: Scalar, x: float) -> bool:
    return all(
        (
            node.minimum is None or x >= node.minimum,
            node.exclusive_minimum is None or x > node.exclusive_minimum,
            node.maximum is None or x <= node.maximum,
            node.exclusive_maximum is None or x < node.exclusive_maximum,
        )
    )


def test_any_number_is_refused_or_taken_as_its_bounds_say(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tmp = tmp_path_factory.mktemp("bounds")

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        case=st.sampled_from(NUMBERS),
        x=st.one_of(st.integers(-3, 10**6 + 2), st.floats(-2, 4000, allow_nan=False)),
    )
    def check(case: tuple[str, Key, Scalar], x: float) -> None:
        name, key, node = case
        if node.kind == "integer" and not isinstance(x, int):
            x = round(x)
        path = tmp / "suite.yaml"
        doc = suite_with(name, _setting(name, key.name, x))
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        try:
            load_suite(path)
        except SuiteError as exc:
            if not _within(node, x):
                assert f"`{key.name}`" in str(exc)
                assert expected_number(node) in str(exc) or node.why in str(exc), str(exc)
            return
        assert _within(node, x), f"`{key.name}: {x}` loaded, past {expected_number(node)}"

    check()
