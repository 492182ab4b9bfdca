"""Line-tracking YAML loading and typed reads that fail with ``file:line``.

perfguard's error messages point at ``file:line``, and ``yaml.safe_load`` throws
the marks away. :class:`PositionLoader` builds :class:`PosDict` and
:class:`PosList`, plain ``dict``/``list`` subclasses that carry 1-based lines,
from the safe constructors only (no Python tags). It also rejects duplicate
keys, which ``safe_load`` silently collapses to the last one: a repeated model
or setting would otherwise vanish without a word.

:class:`Reader` checks the type of a value read from such a tree and raises a
:class:`~perfguard.core.errors.SuiteError` that says what was found, what was
expected and how to fix it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, SequenceNode

from perfguard.core.errors import Location, SuiteError

__all__ = [
    "DuplicateKeyError",
    "PosDict",
    "PosList",
    "PositionLoader",
    "Reader",
    "found",
    "frozen",
    "load_with_positions",
    "one_of",
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


class PositionLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose mappings and sequences are ``PosDict``/``PosList``."""


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
    """Parse one YAML document safely; raises ``yaml.YAMLError`` with a mark on bad input."""
    loader = PositionLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def one_of(choices: Iterable[object]) -> str:
    """``one of `a`, `b`, `c``` for an error's expected part."""
    return "one of " + ", ".join(f"`{c}`" for c in choices)


def found(value: object) -> str:
    """How a value read from YAML is shown in an error's problem part."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "empty (null)"
    return f"`{value}` ({type(value).__name__})"


def frozen(value: object) -> object:
    """Plain, hashable-where-possible data: lists become tuples, ``PosDict`` a plain dict."""
    if isinstance(value, dict):
        return {k: frozen(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    return value


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
        raise SuiteError(problem, expected=expected, fix=fix, location=Location(self.path, line))

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
        # bool is an int subclass in Python, but `threads: true` is still a mistake.
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            fix = f"set {what} to a whole number >= {minimum}, e.g. {max(minimum, 1)}"
            self.fail(line, f"{what} is {found(value)}", f"an integer >= {minimum}", fix)
        return value

    def as_num(
        self, value: object, line: int, what: str, expected: str, ok: Callable[[float], bool]
    ) -> float:
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

    def as_choice(self, value: object, line: int, what: str, choices: Sequence[str]) -> str:
        if not isinstance(value, str) or value not in choices:
            fix = suggest(value, choices) or f"use {one_of(choices)}"
            self.fail(line, f"{what} is {found(value)}", one_of(choices), fix)
        return value
