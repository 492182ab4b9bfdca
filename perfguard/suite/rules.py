"""The grammar's constraints, enforced: the loader's one check of each declared rule.

:mod:`perfguard.suite.grammar` declares, next to each key, the rules the loader holds a
suite to (they also become the JSON Schema): a section's required keys and its
``exactly_one``, ``requires`` and ``at_most_one`` groups (:func:`check_section`), and a
number's bounds (:func:`number`). The loader and the section parsers call these instead
of writing the rules again; each failure is the ``SuiteError`` of
:class:`~perfguard.suite.yamlpos.Reader`: ``file:line``, what was found, what was
expected (the rule, from the grammar) and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfguard.suite.grammar import Key, Scalar, Section
from perfguard.suite.yamlpos import PosDict, Reader

__all__ = ["check_section", "expected_number", "integer", "number"]


def _names(group: Sequence[str]) -> str:
    """```a` and `b``` for two keys, ```a`, `b`, `c``` for more."""
    quoted = [f"`{k}`" for k in group]
    return " and ".join(quoted) if len(quoted) == 2 else ", ".join(quoted)


def _write(key: Key) -> str:
    """How a fix writes ``key`` (``shape: [1, 64]``, or ``name:``)."""
    return f"`{key.name}: {key.example}`" if key.example else f"`{key.name}:`"


def _add_one(section: Section, group: Sequence[str]) -> str:
    keys = [section.key(k) for k in group]
    if len(keys) == 2:
        return f"add {_write(keys[0])} or {_write(keys[1])}"
    shown = next((k for k in keys if k.example), keys[0])
    return f"add one of them, e.g. {_write(shown)}"


def check_section(rd: Reader, m: PosDict, section: Section, line: int, where: str) -> None:
    """Refuse ``m`` where it breaks a rule ``section`` declares, in this order: a
    required key missing, an ``exactly_one`` group with none or several keys written, a
    key written without one it ``requires``, two keys of an ``at_most_one`` group.

    ``line`` is where the mapping is named (its key's line), ``where`` how messages name
    it. A key that breaks a rule by being written is reported at its own line.
    """
    for key in section.keys:
        if key.required and key.name not in m:
            expected = f"`{key.name}` ({key.doc})"
            rd.fail(line, f"{where} has no `{key.name}`", expected, f"add {_write(key)}")
    for group in section.exactly_one:
        given = [k for k in m if k in group]
        expected = f"exactly one of {_names(group)}"
        if not given:
            none = (
                f"neither `{group[0]}` nor `{group[1]}`"
                if len(group) == 2
                else f"none of {_names(group)}"
            )
            rd.fail(line, f"{where} has {none}", expected, _add_one(section, group))
        if len(given) > 1:
            problem = f"{where} has both `{given[0]}` and `{given[1]}`"
            rd.fail(m.key_line(given[1]), problem, expected, "keep only one of them")
    for name, needs in section.requires:
        for need in needs if name in m else ():
            if need not in m:
                problem = f"{where} has `{name}` but no `{need}`"
                fix = f"add {_write(section.key(need))}, or remove `{name}`"
                rd.fail(m.key_line(name), problem, f"`{name}` only with `{need}`", fix)
    for group in section.at_most_one:
        given = [k for k in m if k in group]
        if len(given) > 1:
            a, b = given[:2]
            expected = (
                f"at most one of `{a}` ({section.key(a).doc}) and `{b}` ({section.key(b).doc})"
            )
            problem = f"{where} has both `{a}` and `{b}`"
            rd.fail(m.key_line(b), problem, expected, f"remove `{a}` or `{b}`")


def _lower(node: Scalar) -> tuple[float, str] | None:
    if node.exclusive_minimum is not None:
        return node.exclusive_minimum, "<"
    if node.minimum is not None:
        return node.minimum, "<="
    return None


def _upper(node: Scalar) -> tuple[float, str] | None:
    if node.exclusive_maximum is not None:
        return node.exclusive_maximum, "<"
    if node.maximum is not None:
        return node.maximum, "<="
    return None


def expected_number(node: Scalar) -> str:
    """The bounds of ``node`` as an error's expected part: ``an integer >= 1``, ``a number
    in [-1, 1]``, ``a number with 0 <= x < 1``. An upper bound with a ``why`` is left out
    (it gets a message of its own)."""
    lower, upper = _lower(node), None if node.why else _upper(node)
    if node.kind == "integer":
        assert lower is not None and lower[1] == "<=", node  # integers are written with _int
        lo = int(lower[0])
        return f"an integer {lo}..{int(upper[0])}" if upper else f"an integer >= {lo}"
    if lower and upper:
        if lower[1] == upper[1] == "<=":
            return f"a number in [{lower[0]:g}, {upper[0]:g}]"
        return f"a number with {lower[0]:g} {lower[1]} x {upper[1]} {upper[0]:g}"
    if lower:
        return f"a number {'>' if lower[1] == '<' else '>='} {lower[0]:g}"
    if upper:
        return f"a number {'<' if upper[1] == '<' else '<='} {upper[0]:g}"
    return "a finite number"


def _within(node: Scalar, x: float, upper_too: bool) -> bool:
    lower, upper = _lower(node), _upper(node) if upper_too else None
    return (
        lower is None or (x > lower[0] if lower[1] == "<" else x >= lower[0])
    ) and (upper is None or (x < upper[0] if upper[1] == "<" else x <= upper[0]))  # fmt: skip


def integer(rd: Reader, value: object, line: int, what: str, node: Scalar) -> int:
    """``value`` read as the integer ``node`` declares, within its bounds."""
    lower = _lower(node)
    read = rd.as_int(value, line, what, int(lower[0]) if lower else 0)
    expected = expected_number(node)
    if not _within(node, read, upper_too=not node.why):
        rd.fail(line, f"{what} is {read}", expected, f"set {what} to {expected}")
    _at_most(rd, read, line, what, node)
    return read


def number(rd: Reader, value: object, line: int, what: str, node: Scalar) -> float:
    """``value`` read as the number ``node`` declares, within its bounds."""
    expected = expected_number(node)
    read = rd.as_num(value, line, what, expected, lambda x: _within(node, x, not node.why))
    _at_most(rd, read, line, what, node)
    return read


def _at_most(rd: Reader, read: float, line: int, what: str, node: Scalar) -> None:
    """An upper bound with a ``why``: its own message, naming the reason."""
    upper = _upper(node)
    if node.why and upper is not None and not _within(node, read, upper_too=True):
        rd.at_most(read, upper[0], line, what, node.why, f"lower it to {upper[0]:g} or less")
