"""Fuzzing the suite loader (issue 15): valid suite documents from the suite grammar,
then mutated (keys inserted, deleted and renamed, types swapped, hostile values, deep
nesting, aliases and alias bombs, duplicate keys, YAML 1.1 traps, cut or garbled text),
written to a file and read by the real loader.

Whatever the document, ``load_suite`` either returns a suite or raises a ``SuiteError``
that names the file (and a line inside it where it gives one); no other exception
escapes, and nothing is written beside the suite or in the working directory.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from perfguard.core.errors import SuiteError
from perfguard.core.policy import SUITE_MAX_BYTES
from perfguard.suite.loader import load_suite
from tests.helpers.suite_documents import FOCUS, documents

# ---------------------------------------------------------------------------- hostile values

# Raw YAML put where a value goes (in flow style, so it fits any place of a block document).
BOMB = "[" + ", ".join(
    ["&b0 [x, x, x, x, x, x, x, x, x, x]"]
    + [f"&b{i} [" + ", ".join([f"*b{i - 1}"] * 10) + "]" for i in range(1, 10)]
) + "]"  # fmt: skip
RAW: list[str] = [
    BOMB,
    "&self [1, *self]",
    "[" * 900 + "x" + "]" * 900,
    "{a: " * 200 + "1" + "}" * 200,
    "[&d " + "[" * 40 + "0" + "]" * 40 + ", " + "[" * 40 + "*d" + "]" * 40 + "]",
    "{a: 1, a: 2}",
    "*undefined",
    "{<<: *undefined}",
    "{<<: [1, 2]}",
    "1e-3", "1e308", "-1e400", "0x1F", "0o17", "0b101", "1_000", "12:30:00",
    "2001-12-14", "2001-12-14t21:59:43.10-05:00", "yes", "off", "~", ".nan", ".inf", "-.inf",
    "!!binary aGVsbG8=", "!!set {a, b}", "!!omap [a: 1]", "!!python/object:os.system {}",
    "!!float x", "!!float", "!!bool x", "!!int 1.5", "!custom 1",
    '"\\u0000\\x1b[31m\\u202e"', "'", "[unclosed", "{key", "- a", "&a", "? [a, b]\n  : c",
]  # fmt: skip
HUGE = [10**30, -(10**30), 2**63, -1, 0, 1e308, -1e308, 1e-320]
ODD_FLOATS = [math.nan, math.inf, -math.inf, -0.0]
LONG = ["n" * 20_000, "x" * 300, "tag with spaces", "a-b", "é" * 500]
CONTROL = ["\x00", "\x1b[2J", "\u202e", "a\tb", "\x85", "\ufeff", "line\nbreak", "\x7f"]
KNOWN_KEYS = sorted(
    {k for _, strategy in FOCUS.values() for k in ("name", "model", "threads", "tags")}
    | {"measure", "warmup", "iterations", "seconds", "max_seconds", "load", "concurrency",
       "rate", "matrix", "backend", "precision", "shape", "dtype", "kwargs", "factory",
       "inputs", "gate", "p95", "accuracy", "gpu", "exclude", "defaults", "scenarios",
       "models", "quantizations", "shapes", "<<"}
)  # fmt: skip
HOSTILE = st.one_of(
    st.sampled_from(HUGE),
    st.sampled_from(ODD_FLOATS),
    st.sampled_from(LONG),
    st.sampled_from(CONTROL),
    st.sampled_from([True, False, None, [], {}, [[[]]], {"a": {"b": {}}}]),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
).map(copy.deepcopy)  # mutations change values in place: never a shared one
RAW_MARK = "zzraw{}zz"  # a plain scalar that yaml.safe_dump writes as it is


def _containers(node: Any, out: list[Any]) -> list[Any]:
    if isinstance(node, dict | list):
        out.append(node)
        for child in node.values() if isinstance(node, dict) else node:
            _containers(child, out)
    return out


@st.composite
def mutate(draw: st.DrawFn, doc: dict[str, Any], raws: list[str]) -> None:
    """One mutation of ``doc`` in place; raw YAML is left as a marker indexing ``raws``."""
    target = draw(st.sampled_from(_containers(doc, [])))
    op = draw(st.sampled_from(["insert", "delete", "rename", "swap", "raw"]))
    event(f"mutation: {op}")
    if isinstance(target, list):
        if op == "delete" and target:
            del target[draw(st.integers(0, len(target) - 1))]
        elif op in ("insert", "rename") or not target:
            target.insert(draw(st.integers(0, len(target))), draw(HOSTILE))
        else:
            i = draw(st.integers(0, len(target) - 1))
            target[i] = _raw(draw, raws) if op == "raw" else draw(HOSTILE)
        return
    keys = list(target)
    if op == "insert" or not keys:
        key = draw(st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=8), st.integers()))
        target[key] = _raw(draw, raws) if draw(st.booleans()) else draw(HOSTILE)
        return
    key = draw(st.sampled_from(keys))
    if op == "delete":
        del target[key]
    elif op == "rename":
        new = draw(st.one_of(st.sampled_from(KNOWN_KEYS), st.just(str(key)[:-1] or "x")))
        target[new] = target.pop(key)
    elif op == "swap":
        target[key] = draw(HOSTILE)
    else:
        target[key] = _raw(draw, raws)


def _raw(draw: st.DrawFn, raws: list[str]) -> str:
    raws.append(draw(st.sampled_from(RAW)))
    return RAW_MARK.format(len(raws) - 1)


def _serialise(doc: dict[str, Any], raws: list[str]) -> str:
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10_000)
    for i, raw in enumerate(raws):
        text = text.replace(RAW_MARK.format(i), raw)
    return text


@st.composite
def texts(draw: st.DrawFn) -> str:
    """A valid document of the suite grammar, mutated 1-4 times, as text (sometimes
    garbled at the end: cut, a stray character, a duplicate key, a huge padding)."""
    focus = draw(st.sampled_from(list(FOCUS)))
    # A copy: the generator shares some of its parts between documents.
    doc = copy.deepcopy(draw(documents(focus)))
    raws: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        draw(mutate(doc, raws))
    text = _serialise(doc, raws)
    garble = draw(st.sampled_from(["none"] * 16 + ["cut"] * 2 + ["char"] * 2 + ["dup", "pad"]))
    event(f"garble: {garble}")
    if garble == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    elif garble == "char":
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at] + draw(st.sampled_from([*CONTROL, ":", "-", "&", "*", "'", "\t"])) + text[at:]
        )
    elif garble == "dup":
        first = text.splitlines(keepends=True)[:1]
        text += "".join(first)
    elif garble == "pad":
        text += "# " + "x" * (SUITE_MAX_BYTES + 1) + "\n"
    return text


# ---------------------------------------------------------------------------- the property


def _event(name: str) -> None:
    if currently_in_test_context():
        event(name)


def check(directory: Path, text: str) -> None:
    path = directory / "suite.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    before = sorted(Path.cwd().iterdir())
    try:
        load_suite(path)
        _event("loaded")
    except SuiteError as exc:
        _event("SuiteError")
        message = str(exc)
        assert exc.location is not None and exc.location.path == path, message
        line = exc.location.line
        # YAML also breaks lines at \x85, \u2028 and \u2029 (splitlines: a superset).
        lines = len(text.splitlines()) + 1
        assert line is None or 1 <= line <= lines, (line, lines, message)
        assert message.startswith(f"{path}"), message
        # One line, or a combined error whose every entry names the file (and a line).
        several = "errors in this suite file, each at its line:" in message.splitlines()[0]
        assert several or "\n" not in message, message
        for entry in message.splitlines()[1:]:
            assert entry.startswith(f"- {path}"), entry
    # Any other exception escapes here and fails the test with the document.
    assert [p.name for p in directory.iterdir()] == ["suite.yaml"]
    assert sorted(Path.cwd().iterdir()) == before


@pytest.fixture
def directory(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path_factory.mktemp("fuzz-cwd")
    monkeypatch.chdir(work)  # where a stray relative write would land
    return tmp_path_factory.mktemp("fuzz")


@settings(
    max_examples=1000,
    deadline=None,
    database=None,
    # `directory` is one folder for all examples: each writes the same file anew.
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(text=texts())
# What the fuzzer found (each was a ValueError traceback or a message over several lines):
@example(text="models:\n  m: !!float x\nscenarios:\n- {name: s, model: m}\n")
@example(text="'<<': !!int 1.5\nscenarios:\n- {name: s, model: m}\n")
@example(text="models:\n  m: !!float")
@example(text="models:\n  m: !!bool x\n")
@example(text="models:\n  m: !!timestamp 2001-13-45\n")
@example(text="\x00scenarios:\n- {name: s, model: m}\n")
@example(text="scenarios:\n- '\x85  '\n- {name: s, model: m}\ndefaults: [[[[\n")
@example(text="defaults: 'line\n\n  break'\nscenarios:\n- {name: s, model: m}\n")
def test_mutated_suites_load_or_fail_with_a_suite_error(directory: Path, text: str) -> None:
    check(directory, text)


@pytest.mark.parametrize("raw", RAW)
def test_every_raw_value_anywhere_in_a_scenario(directory: Path, raw: str) -> None:
    base = (
        "models:\n  m:\n    factory: pkg.mod:build\n    kwargs: {k: RAW}\n"
        "    inputs:\n      x: {shape: [1, 4]}\n"
        "scenarios:\n  - name: s\n    model: m\n    threads: RAW\n    tags: [RAW]\n"
    )
    for place in range(3):
        parts = base.split("RAW")
        text = (
            "".join(
                part + (raw if i == place else "1" if i == 1 else "t")
                for i, part in enumerate(parts[:-1])
            )
            + parts[-1]
        )
        check(directory, text)
