"""Hostile and mistaken suite files (issue 15): each is refused by the loader with a
``file:line`` error that names the limit and the fix, never a traceback, a
``MemoryError`` or a silent clamp."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfguard.core.errors import SuiteError
from perfguard.core.policy import (
    LOAD_MAX_CLIENTS,
    LOOP_MAX_ITERATIONS,
    LOOP_MAX_SECONDS,
    NAME_MAX_CHARS,
    SUITE_MAX_BYTES,
    SUITE_MAX_DEPTH,
    SUITE_MAX_NODES,
    threads_limit,
)
from perfguard.suite.loader import load_suite
from perfguard.suite.yamlpos import frozen, load_with_positions, number_trap
from tests.helpers.suites import write_suite

MODELS = """\
models:
  lin:
    factory: mymod:build
    inputs:
      x: {shape: [1, 4]}
"""


def suite(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def scenario(tmp_path: Path, body: str, models: str = MODELS) -> Path:
    """A suite with the one model and one scenario `s` holding ``body`` (YAML lines)."""
    lines = "".join(f"    {line}\n" for line in textwrap.dedent(body).strip().splitlines())
    return suite(tmp_path, f"{models}scenarios:\n  - name: s\n    model: lin\n{lines}")


def refused(path: Path) -> SuiteError:
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    return info.value


def bomb(levels: int = 10) -> str:
    """The finding: ``&aN [*a(N-1) x 10]`` ``levels`` deep under a model's kwargs."""
    lines = ["models:", "  lin:", "    factory: mymod:build", "    kwargs:"]
    lines.append("      a0: &a0 [x, x, x, x, x, x, x, x, x, x]")
    for i in range(1, levels):
        lines.append(f"      a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines += [
        "    inputs:",
        "      x: {shape: [1, 4]}",
        "scenarios:",
        "  - name: s",
        "    model: lin",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- caps


def test_an_alias_bomb_under_kwargs_is_refused_in_a_bounded_process(tmp_path: Path) -> None:
    # In a child process under a 1 GiB address-space limit and a timeout, so that a
    # regression fails this test instead of taking the machine's memory.
    path = suite(tmp_path, bomb())
    code = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from pathlib import Path
        from perfguard.core.errors import SuiteError
        from perfguard.suite.loader import load_suite
        try:
            load_suite(Path({str(path)!r}))
        except SuiteError as exc:
            print("SUITE-ERROR", exc)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert f"SUITE-ERROR {path}:9:" in out  # `a4`, the first anchor past the limit
    assert f"more than {SUITE_MAX_NODES} values" in out
    assert "alias" in out


def test_a_self_referencing_alias_is_refused(tmp_path: Path) -> None:
    body = MODELS.replace("    inputs:", "    kwargs:\n      loop: &l [1, *l]\n    inputs:")
    error = refused(suite(tmp_path, body + "scenarios:\n  - {name: s, model: lin}\n"))
    assert error.location is not None and error.location.line == 5
    assert "contains itself" in error.problem


def test_aliases_within_the_limit_load_and_stay_shared(tmp_path: Path) -> None:
    path = suite(tmp_path, bomb(levels=3))  # 1111 values: a real, if odd, kwargs
    model = load_suite(path).scenarios[0].model
    a2 = dict(model.factory_kwargs)["a2"]
    assert isinstance(a2, tuple) and len(a2) == 10
    assert all(item is a2[0] for item in a2)  # one copy, not ten


def test_frozen_converts_a_shared_value_once() -> None:
    doc = load_with_positions("a: &a [1, 2]\nb: [*a, *a, *a]\n")
    out = frozen(doc)
    assert isinstance(out, dict)
    assert out["b"] == ((1, 2),) * 3
    assert out["b"][0] is out["b"][1] is out["b"][2]


def nested(depth: int) -> str:
    return "[" * depth + "fast" + "]" * depth


def test_deep_nesting_is_refused_at_its_line(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, f"tags: {nested(900)}"))
    assert error.location is not None and error.location.line == 9
    assert f"more than {SUITE_MAX_DEPTH} levels" in error.problem
    assert "flatten" in (error.fix or "")


def test_deep_nesting_through_aliases_is_refused(tmp_path: Path) -> None:
    # Each anchor nests 40 levels under the last one: no line is deep, the whole is.
    kwargs = "".join(
        f"      a{i}: &a{i} {'[' * 40}{f'*a{i - 1}' if i else '0'}{']' * 40}\n" for i in range(30)
    )
    body = MODELS.replace("    inputs:", f"    kwargs:\n{kwargs}    inputs:")
    error = refused(suite(tmp_path, body + "scenarios:\n  - {name: s, model: lin}\n"))
    assert f"more than {SUITE_MAX_DEPTH} levels" in error.problem


def test_a_huge_document_is_refused_without_being_parsed(tmp_path: Path) -> None:
    filler = "# " + "x" * 1000 + "\n"
    text = MODELS + filler * (SUITE_MAX_BYTES // len(filler) + 5) + "scenarios: []\n"
    error = refused(suite(tmp_path, text))
    assert f"at most {SUITE_MAX_BYTES} bytes" in (error.expected or "")
    assert error.location is not None and error.location.line is not None
    assert error.location.line > 1000  # where the limit is passed, not line 1


def test_a_document_with_too_many_values_is_refused(tmp_path: Path) -> None:
    values = ", ".join(["0"] * (SUITE_MAX_NODES + 10))
    body = MODELS.replace("    inputs:", f"    kwargs:\n      big: [{values}]\n    inputs:")
    error = refused(suite(tmp_path, body + "scenarios:\n  - {name: s, model: lin}\n"))
    assert f"more than {SUITE_MAX_NODES} values" in error.problem


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("written", "fixed"),
    [("1e-3", "1.0e-3"), ("1e308", "1.0e+308"), ("2.5E4", "2.5e+4"), ("-3e2", "-3.0e+2")],
)
def test_number_trap_gives_the_yaml_1_1_spelling(written: str, fixed: str) -> None:
    assert number_trap(written) == fixed
    # The spelling given really is a float to PyYAML, and the same number.
    assert load_with_positions(f"v: {fixed}")["v"] == float(written)


@pytest.mark.parametrize("value", ["100", "fast", "1.0e-3", "1e", "e5", ""])
def test_number_trap_leaves_other_strings_alone(value: str) -> None:
    assert number_trap(value) is None


def test_1e_minus_3_explains_the_yaml_1_1_trap(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, "stability_tolerance: 1e-3"))
    assert error.location is not None and error.location.line == 9
    assert "YAML 1.1" in error.problem and "a dot and a signed exponent" in error.problem
    assert error.fix == "write `1.0e-3`"


def test_1e308_explains_the_trap_and_then_the_loop_limit(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, "measure: {seconds: 1e308}"))
    assert "YAML 1.1" in error.problem
    assert error.fix == "write `1.0e+308`"
    error = refused(scenario(tmp_path, "measure: {seconds: 1.0e+308}"))
    assert f"at most {LOOP_MAX_SECONDS:g}" in (error.expected or "")


def test_an_integer_written_with_an_exponent_says_how_to_write_it(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, "measure: {iterations: 1e6}"))
    assert "YAML 1.1" in error.problem
    assert error.fix == "write the whole number out: `1000000`"


# --------------------------------------------------------------------------- bounds


def test_measure_seconds_1e300_is_refused_not_overflowed(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, "measure: {seconds: 1.0e+300}"))
    assert error.location is not None and error.location.line == 9
    assert "`seconds` in `measure` in scenario `s` is 1e+300" in error.problem
    assert f"at most {LOOP_MAX_SECONDS:g}" in (error.expected or "")


def test_iterations_10_to_the_30_is_refused_not_run_to_the_cap(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, f"measure: {{iterations: {10**30}}}"))
    assert f"at most {LOOP_MAX_ITERATIONS:g}" in (error.expected or "")
    assert error.location is not None and error.location.line == 9


def test_warmup_max_seconds_past_the_limit_is_refused(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, "warmup: {max_seconds: 100000}"))
    assert "`max_seconds` in `warmup`" in error.problem


def test_seconds_past_max_seconds_is_refused_not_cut(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, "measure: {seconds: 900}"))
    assert "past its `max_seconds: 300`" in error.problem
    assert "raise `max_seconds` to at least 900" in (error.fix or "")
    loaded = load_suite(scenario(tmp_path, "measure: {seconds: 900, max_seconds: 900}"))
    assert loaded.scenarios[0].measure.seconds == 900


def test_threads_1e9_is_refused(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, "threads: 1000000000"))
    assert error.location is not None and error.location.line == 9
    assert f"at most {threads_limit()}" in (error.expected or "")
    assert "CPUs" in (error.expected or "")
    assert load_suite(scenario(tmp_path, f"threads: {threads_limit()}")).scenarios


def test_threads_as_a_matrix_axis_is_bounded_too(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, "matrix: {threads: [1, 99999999]}"))
    assert f"at most {threads_limit()}" in (error.expected or "")


def test_a_huge_concurrency_is_refused(tmp_path: Path) -> None:
    body = "measure: {iterations: 500}\nload: {concurrency: [1, 1000000000]}"
    error = refused(scenario(tmp_path, body))
    assert f"at most {LOAD_MAX_CLIENTS}" in (error.expected or "")


def test_an_open_loop_level_past_the_request_limit_is_refused(tmp_path: Path) -> None:
    body = 'measure: {seconds: 3600, max_seconds: 3600}\nload: {rate: "1000000/s"}'
    error = refused(scenario(tmp_path, body))
    assert f"at most {LOOP_MAX_ITERATIONS} requests" in (error.expected or "")


def test_a_20000_character_scenario_name_is_refused_briefly(tmp_path: Path) -> None:
    path = suite(tmp_path, MODELS + f"scenarios:\n  - name: {'n' * 20000}\n    model: lin\n")
    error = refused(path)
    assert error.location is not None and error.location.line == 7
    assert "20000 characters long" in error.problem
    assert f"at most {NAME_MAX_CHARS} characters" in (error.expected or "")
    assert len(str(error)) < 1000  # the name is not echoed whole


def test_a_long_model_name_is_refused(tmp_path: Path) -> None:
    text = MODELS.replace("  lin:", f"  {'m' * 500}:") + "scenarios:\n  - {name: s, model: x}\n"
    error = refused(suite(tmp_path, text))
    assert "500 characters long" in str(error)


def test_a_list_given_as_a_tag_gets_a_readable_fix(tmp_path: Path) -> None:
    tags = ", ".join(f"tag{i}" for i in range(60))
    error = refused(scenario(tmp_path, f"tags: [[{tags}]]"))
    assert error.location is not None and error.location.line == 9
    assert "tag 1 in `tags` in scenario `s` is a list" in error.problem
    assert error.fix == "write each tag as one word in the list, e.g. `tags: [smoke, nightly]`"
    assert "__" not in str(error)


def test_a_tag_with_punctuation_gets_a_short_identifier(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, 'tags: ["a -- b"]'))
    assert error.fix == "use `a_b`"


# --------------------------------------------------------------------------- several errors

SEVERAL = """\
models:
  lin:
    factory: mymod:build
    inputs:
      x: {shape: [1, 4]}
  bad:
    factory: no-colon
    inputs:
      x: {shape: [1, 4]}
scenarios:
  - name: one
    model: lin
    threads: -1
  - name: two
    model: lin
    measure: {iterations: 0}
  - name: three
    model: bad
  - name: four
    model: lin
bogus: 1
"""


def test_several_errors_are_all_reported_each_at_its_line(tmp_path: Path) -> None:
    path = suite(tmp_path, SEVERAL)
    error = refused(path)
    text = str(error)
    assert text.startswith(f"{path}:7: 4 errors in this suite file, each at its line:\n")
    lines = text.splitlines()[1:]
    assert [re.match(rf"- {re.escape(str(path))}:(\d+): ", line)[1] for line in lines] == [  # type: ignore[index]
        "7", "13", "16", "21",
    ]  # fmt: skip
    assert "`factory` of model `bad`" in lines[0]
    assert "`threads` in scenario `one`" in lines[1]
    assert "`iterations` in `measure` in scenario `two`" in lines[2]
    assert "unknown key `bogus`" in lines[3]
    # The first error's place is the error's place: pytest's item points there.
    assert error.location is not None and error.location.line == 7


def test_one_error_keeps_its_single_line_message(tmp_path: Path) -> None:
    error = refused(scenario(tmp_path, "threads: -1"))
    assert "\n" not in str(error)
    assert str(error).startswith(f"{tmp_path / 's.yaml'}:9: `threads` in scenario `s` is `-1`")


def test_a_scenario_of_a_broken_model_is_not_blamed_for_it(tmp_path: Path) -> None:
    text = MODELS.replace("mymod:build", "no-colon") + "scenarios:\n  - {name: s, model: lin}\n"
    error = refused(suite(tmp_path, text))
    assert "\n" not in str(error)  # no "undefined model `lin`" on top
    assert "`factory` of model `lin`" in error.problem


def test_pytest_shows_every_error_of_a_suite_file(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "several", SEVERAL)
    result = suite_writer.runpytest("--perfguard", "-rf")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    for line in (7, 13, 16, 21):
        assert f"suites/several.yaml:{line}: " in out
    assert "Traceback" not in out and "INTERNALERROR" not in out


def test_pytest_reports_a_nesting_bomb_as_a_failed_suite_not_an_interrupt(
    suite_writer: pytest.Pytester,
) -> None:
    write_suite(
        suite_writer,
        "deep",
        MODELS + f"scenarios:\n  - {{name: s, model: lin, tags: {nested(900)}}}\n",
    )
    result = suite_writer.runpytest("--perfguard")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "RecursionError" not in out and "Interrupted" not in out
    assert f"more than {SUITE_MAX_DEPTH} levels" in out
