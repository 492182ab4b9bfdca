"""Line-tracking YAML loading and typed reads that fail with ``file:line``.

perfguard's error messages point at ``file:line``, and ``yaml.safe_load`` throws
the marks away. :class:`PositionLoader` builds :class:`PosDict` and
:class:`PosList`, plain ``dict``/``list`` subclasses that carry 1-based lines,
from the safe constructors only (no Python tags). It also rejects duplicate
keys, which ``safe_load`` silently collapses to the last one: a repeated model
or setting would otherwise vanish without a word.

Loading is bounded (the caps live in :mod:`perfguard.core.policy`): the text's size,
the nesting depth and the number of values the document expands to, counting every
use of an alias (``*name``) as the copy it stands for, are checked on the composed node
graph, before any Python object is built, so an "alias bomb" (a few hundred bytes that
expand to 10**10 values) or 900 nested lists are refused in milliseconds. A refusal is
:class:`LimitExceeded`, which the loader turns into a ``SuiteError`` at ``file:line``.

:class:`Reader` checks the type of a value read from such a tree and raises a
:class:`~perfguard.core.errors.SuiteError` that says what was found, what was
expected and how to fix it.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, cast

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

from perfguard.core.errors import Location, SuiteError
from perfguard.core.policy import (
    NAME_MAX_CHARS,
    SUITE_MAX_BYTES,
    SUITE_MAX_DEPTH,
    SUITE_MAX_NODES,
)

__all__ = [
    "DuplicateKeyError",
    "LimitExceeded",
    "PosDict",
    "PosList",
    "PositionLoader",
    "Reader",
    "check_size",
    "combined",
    "found",
    "frozen",
    "load_with_positions",
    "number_trap",
    "one_of",
    "printable",
    "suggest",
]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class PosDict(dict[Any, Any]):
    """A mapping that knows its own line and the line of each key and value."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[Any, int] = {}
        self.value_lines: dict[Any, int] = {}

    def key_line(self, key: object) -> int:
        return self.key_lines.get(key, self.line)

    def value_line(self, key: object) -> int:
        return self.value_lines.get(key, self.key_line(key))


class PosList(list[Any]):
    """A list that knows its own line and the line of each item."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.item_lines: list[int] = []

    def item_line(self, index: int) -> int:
        return self.item_lines[index] if 0 <= index < len(self.item_lines) else self.line


class DuplicateKeyError(ConstructorError):
    """A mapping repeats a key; ``line`` is the 1-based line of the repeat."""

    def __init__(self, key: object, first_line: int, node: MappingNode, key_node: Any) -> None:
        problem = f"`{key}` appears again (first at line {first_line})"
        super().__init__(
            "while constructing a mapping", node.start_mark, problem, key_node.start_mark
        )
        self.line: int = key_node.start_mark.line + 1


class LimitExceeded(yaml.YAMLError):
    """The document goes past one of the suite limits (size, depth, values); ``line``
    is the 1-based line where it does, the rest the parts of a ``SuiteError``."""

    def __init__(self, line: int | None, problem: str, expected: str, fix: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem
        self.expected = expected
        self.fix = fix


def _too_deep(line: int) -> LimitExceeded:
    return LimitExceeded(
        line,
        f"mappings and lists nest more than {SUITE_MAX_DEPTH} levels deep here "
        "(counting the values that aliases `*name` stand for)",
        f"at most {SUITE_MAX_DEPTH} levels (perfguard's suite limit; real suites nest ~8)",
        "flatten the structure; a factory's deep configuration belongs in the factory's "
        "own code or a file it reads, not in `kwargs`",
    )


def _too_many(line: int, through_aliases: bool) -> LimitExceeded:
    how = " once its aliases `*name` are expanded" if through_aliases else ""
    return LimitExceeded(
        line,
        f"the suite file holds more than {SUITE_MAX_NODES} values{how} (at the value here)",
        f"at most {SUITE_MAX_NODES} values (perfguard's suite limit; real suites hold a "
        "few hundred)",
        "remove the repeated aliases (an anchor whose list repeats another alias is an "
        '"alias bomb"); pass large data to a factory as a file path, not in `kwargs`'
        if through_aliases
        else "split the suite into several files, or pass large data to a factory as a file path",
    )


def check_size(size: int, text: str | bytes) -> None:
    """Refuse a suite file of more than ``SUITE_MAX_BYTES``; ``text`` holds at least its
    first ``SUITE_MAX_BYTES`` (for the line where the limit is passed)."""
    if size <= SUITE_MAX_BYTES:
        return
    head = text[:SUITE_MAX_BYTES]
    line = (head.count(b"\n") if isinstance(head, bytes) else head.count("\n")) + 1
    raise LimitExceeded(
        line,
        f"the suite file is {size} bytes, past the limit at this line",
        f"at most {SUITE_MAX_BYTES} bytes (perfguard's suite limit; real suites are a few KB)",
        "split it into several suite files, or keep large data (inputs, configurations) "
        "in files the suite names",
    )


class PositionLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose mappings and sequences are ``PosDict``/``PosList``,
    within the suite limits (``LimitExceeded``)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # The scanner reads up to 1024 characters ahead inside brackets (a `[` may start
        # a key) at a cost that grows with the open brackets: refuse deep ones here.
        if self.flow_level >= SUITE_MAX_DEPTH:
            mark: Any = self.get_mark()
            raise _too_deep(mark.line + 1)
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Node | None, index: int) -> Node:
        # Aliases are counted as what they expand to, once the whole graph is composed.
        if self.check_event(AliasEvent):
            return cast("Node", super().compose_node(parent, index))
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 1
        self._nodes += 1
        if self._nodes > SUITE_MAX_NODES:
            raise _too_many(line, through_aliases=False)
        # The composer recurses per level: refuse before Python's recursion limit does.
        self._depth += 1
        try:
            if self._depth > SUITE_MAX_DEPTH:
                raise _too_deep(line)
            return cast("Node", super().compose_node(parent, index))
        finally:
            self._depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # A tag that asks for a type the text is not (`!!int 1.5`, `!!float x`, an empty
        # `!!float`, `!!bool x`) makes PyYAML's constructors raise plain ValueErrors,
        # IndexErrors or KeyErrors, without a mark.
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError, LookupError) as exc:
            if isinstance(exc, yaml.YAMLError):
                raise
            problem = f"{found(node.value)} cannot be read as `{node.tag}` ({exc})"
            raise ConstructorError(None, None, problem, node.start_mark) from None


def _check_expansion(root: Node) -> None:
    """Refuse a node graph whose aliases expand past the value or depth limit, or that
    holds itself (``&a [*a]``), before any Python object is built from it."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, levels) when expanded
    active: set[int] = set()

    def walk(node: Node, level: int) -> tuple[int, int]:
        key = id(node)
        line = node.start_mark.line + 1
        if key not in sizes:
            if key in active:
                raise LimitExceeded(
                    line,
                    "this value contains itself through an alias (`&name` ... `*name` inside it)",
                    "plain data without cycles",
                    "write the value out instead of referring back to its own anchor",
                )
            if level > SUITE_MAX_DEPTH:
                raise _too_deep(line)
            active.add(key)
            count, depth = 1, 1
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                children = [n for pair in node.value for n in pair]
            for child in children:
                c_count, c_depth = walk(child, level + 1)
                count, depth = count + c_count, max(depth, c_depth + 1)
                if count > SUITE_MAX_NODES:
                    raise _too_many(line, through_aliases=True)
            active.discard(key)
            sizes[key] = (count, depth)
        count, depth = sizes[key]
        if level + depth - 1 > SUITE_MAX_DEPTH:
            raise _too_deep(line)
        return count, depth

    walk(root, 1)


def _construct_mapping(loader: PositionLoader, node: MappingNode) -> Iterator[PosDict]:
    data = PosDict(node.start_mark.line + 1)
    # Yield first so recursive (aliased) structures resolve, as SafeLoader does.
    yield data
    explicit = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE_TAG)
    loader.flatten_mapping(node)
    # flatten_mapping puts `<<` merged pairs first; explicit keys may override
    # those, but two explicit keys with the same name are a user mistake.
    first_explicit = len(node.value) - explicit
    seen: set[Any] = set()
    for index, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node)
        if not isinstance(key, Hashable):
            raise ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found an unhashable key (a list or mapping used as a key)",
                key_node.start_mark,
            )
        if index >= first_explicit:
            if key in seen:
                raise DuplicateKeyError(key, data.key_line(key), node, key_node)
            seen.add(key)
        data[key] = loader.construct_object(value_node)
        data.key_lines[key] = key_node.start_mark.line + 1
        data.value_lines[key] = value_node.start_mark.line + 1


def _construct_sequence(loader: PositionLoader, node: SequenceNode) -> Iterator[PosList]:
    data = PosList(node.start_mark.line + 1)
    yield data
    for item in node.value:
        data.append(loader.construct_object(item))
        data.item_lines.append(item.start_mark.line + 1)


PositionLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
PositionLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


def load_with_positions(text: str) -> Any:
    """Parse one YAML document safely; raises ``yaml.YAMLError`` with a mark on bad input,
    ``LimitExceeded`` past a suite limit."""
    check_size(len(text.encode("utf-8", "surrogatepass")), text)
    loader = PositionLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def one_of(choices: Iterable[object]) -> str:
    """``one of `a`, `b`, `c``` for an error's expected part."""
    return "one of " + ", ".join(f"`{c}`" for c in choices)


_SHOWN_CHARS = 60  # a longer value is shown cut, with its length


def printable(text: str) -> str:
    """``text`` on one line: newlines and other control characters as escapes."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def found(value: object) -> str:
    """How a value read from YAML is shown in an error's problem part."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "empty (null)"
    text = str(value)
    if len(text) > _SHOWN_CHARS:
        text = f"{text[: _SHOWN_CHARS - 20]}... ({len(text)} characters)"
    return f"`{text}` ({type(value).__name__})"


# What YAML 1.1 (PyYAML) reads as a float: a dot is required, and an exponent's sign.
# Strings that YAML 1.2 and JSON read as numbers but 1.1 does not: `1e-3`, `1E5`, `2.e3`.
_NUMBER_TRAP = re.compile(r"([+-]?)(\d[\d_]*)(?:\.(\d*))?[eE]([+-]?)(\d+)")


def number_trap(value: object) -> str | None:
    """For a string that YAML 1.1 left a string but that reads as a number (``1e-3``),
    the same number written so that YAML 1.1 reads it (``1.0e-3``); else ``None``."""
    if not isinstance(value, str):
        return None
    match = _NUMBER_TRAP.fullmatch(value.strip())
    if match is None:
        return None
    sign, whole, frac, exp_sign, exp = match.groups()
    if frac is not None and exp_sign:
        return None  # `1.0e-3`: a float to YAML 1.1 too (quoted, it is meant as a string)
    return f"{sign}{whole}.{frac or '0'}e{exp_sign or '+'}{exp}"


def _trap_text(value: object, what: str) -> tuple[str, str] | None:
    """(problem, fix) for a number that YAML 1.1 read as a string, else ``None``."""
    number = number_trap(value)
    if number is None:
        return None
    problem = (
        f"{what} is `{value}`, which YAML 1.1 (the YAML perfguard reads) takes for a "
        "string, not a number: a float needs a dot and a signed exponent there"
    )
    return problem, f"write `{number}`"


def frozen(value: object, _memo: dict[int, object] | None = None) -> object:
    """Plain, hashable-where-possible data: lists become tuples, ``PosDict`` a plain dict.

    A value shared through an alias is converted once and stays shared (the loader's
    limits already bound what it stands for).
    """
    memo: dict[int, object] = {} if _memo is None else _memo
    if not isinstance(value, dict | list):
        return value
    key = id(value)
    if key not in memo:
        if isinstance(value, dict):
            memo[key] = {k: frozen(v, memo) for k, v in value.items()}
        else:
            memo[key] = tuple(frozen(v, memo) for v in value)
    return memo[key]


def combined(errors: Sequence[SuiteError]) -> SuiteError:
    """One ``SuiteError`` for all the errors found in one suite file, in line order.

    One error is returned as it is. Several become one error at the first one's
    ``file:line`` whose message lists every error, each with its own ``file:line``.
    """
    if len(errors) == 1:
        return errors[0]
    ordered = sorted(
        errors, key=lambda e: (e.location is None or e.location.line is None,
                               e.location.line if e.location and e.location.line else 0)
    )  # fmt: skip
    first = ordered[0]
    lines = "\n".join(f"- {e.message}" for e in ordered)
    error = SuiteError(
        f"{len(ordered)} errors in this suite file, each at its line:\n{lines}",
        location=first.location,
    )
    return error


def suggest(word: object, choices: Sequence[str]) -> str | None:
    """``did you mean `x`?`` for the closest choice, or ``None``."""
    close = difflib.get_close_matches(str(word).lower(), choices, n=1)
    return f"did you mean `{close[0]}`?" if close else None


@dataclass(frozen=True)
class Reader:
    """Typed reads from a positioned YAML tree of one file; failures are ``SuiteError``.

    ``what`` arguments name the value for the message, e.g. "`threads` in scenario `x`".
    """

    path: Path

    def fail(
        self, line: int | None, problem: str, expected: str | None = None, fix: str | None = None
    ) -> NoReturn:
        # One line, whatever a key or value of the file held (newlines, escapes).
        raise SuiteError(
            printable(problem),
            expected=printable(expected) if expected else expected,
            fix=printable(fix) if fix else fix,
            location=Location(self.path, line),
        )

    def keys(
        self, m: PosDict, allowed: Sequence[str], where: str, hints: Mapping[str, str] | None = None
    ) -> None:
        """Reject any key not in ``allowed``; ``hints`` gives a fix for specific keys."""
        for key in m:
            if key not in allowed:
                fix = (hints or {}).get(key) or suggest(key, allowed) or f"remove `{key}`"
                self.fail(m.key_line(key), f"unknown key `{key}` in {where}", one_of(allowed), fix)

    def as_map(self, value: object, line: int, what: str) -> PosDict:
        if not isinstance(value, PosDict):
            fix = f"write {what} as indented `key: value` lines or as `{{key: value}}`"
            self.fail(line, f"{what} is {found(value)}", "a mapping", fix)
        return value

    def as_list(self, value: object, line: int, what: str) -> PosList:
        if not isinstance(value, PosList):
            fix = f"write {what} as `[a, b]` or as `- item` lines"
            self.fail(line, f"{what} is {found(value)}", "a list", fix)
        return value

    def as_int(self, value: object, line: int, what: str, minimum: int = 1) -> int:
        number = number_trap(value)
        if number is not None and float(number).is_integer() and float(number) >= minimum:
            problem = (
                f"{what} is `{value}`, which YAML 1.1 (the YAML perfguard reads) takes for a "
                "string, not a number"
            )
            fix = f"write the whole number out: `{int(float(number))}`"
            self.fail(line, problem, f"an integer >= {minimum}", fix)
        # bool is an int subclass in Python, but `threads: true` is still a mistake.
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            fix = f"set {what} to a whole number >= {minimum}, e.g. {max(minimum, 1)}"
            self.fail(line, f"{what} is {found(value)}", f"an integer >= {minimum}", fix)
        return value

    def as_num(
        self, value: object, line: int, what: str, expected: str, ok: Callable[[float], bool]
    ) -> float:
        trap = _trap_text(value, what)
        if trap is not None:
            self.fail(line, trap[0], expected, trap[1])
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and ok(value))
        ):
            self.fail(line, f"{what} is {found(value)}", expected, f"set {what} to {expected}")
        return float(value)

    def as_bool(self, value: object, line: int, what: str) -> bool:
        if not isinstance(value, bool):
            self.fail(
                line, f"{what} is {found(value)}", "`true` or `false`", "write `true` or `false`"
            )
        return value

    def as_str(self, value: object, line: int, what: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(line, f"{what} is {found(value)}", "a non-empty string", f"set {what}")
        return value

    def at_most(self, value: float, limit: float, line: int, what: str, why: str, fix: str) -> None:
        """Refuse ``value`` above ``limit``: ``why`` says why the limit is there."""
        if value > limit:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            self.fail(line, f"{what} is {shown}", f"at most {limit:g} ({why})", fix)

    def as_name(self, value: object, line: int, what: str) -> str:
        """A non-empty string of at most ``NAME_MAX_CHARS`` characters."""
        name = self.as_str(value, line, what)
        if len(name) > NAME_MAX_CHARS:
            problem = f"{what} is {len(name)} characters long (`{name[:40]}...`)"
            expected = f"at most {NAME_MAX_CHARS} characters (it becomes a pytest id)"
            self.fail(line, problem, expected, "shorten it")
        return name

    def as_choice(self, value: object, line: int, what: str, choices: Sequence[str]) -> str:
        if not isinstance(value, str) or value not in choices:
            fix = suggest(value, choices) or f"use {one_of(choices)}"
            self.fail(line, f"{what} is {found(value)}", one_of(choices), fix)
        return value
