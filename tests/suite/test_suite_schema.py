"""The suite JSON Schema (perfguard/schemas/suite.schema.json) and the grammar it comes from.

The schema is generated from perfguard.suite.grammar, the same tree the loader reads its
allowed keys from. It is looser than the loader (value checks that need the whole file
stay in code) but never stricter: whatever the loader accepts, the schema accepts.
"""

from __future__ import annotations

import functools
import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings

import perfguard
from perfguard.core.errors import SuiteError
from perfguard.core.policy import METRICS
from perfguard.suite import grammar
from perfguard.suite.grammar import (
    SCENARIO,
    Section,
    json_schema,
    schema_text,
)
from perfguard.suite.loader import load_suite
from perfguard.suite.yamlpos import one_of
from tests.helpers import gpu_cases, load_cases, suite_cases
from tests.helpers.paths import ROOT
from tests.helpers.suite_documents import (
    FOCUS,
    documents,
)

SCHEMA_FILE = Path(perfguard.__file__).parent / "schemas" / "suite.schema.json"
EXAMPLES = sorted([*ROOT.glob("suites/*.yaml"), *ROOT.glob("examples/**/*.yaml")])
SCHEMA_LINE = re.compile(r"# yaml-language-server: \$schema=(\S+)")


# YAML as editors read it (YAML 1.2 core: only true/false are booleans, `1e3` is a number),
# for the files a user opens; the loader reads YAML 1.1 (PyYAML).
class Yaml12Loader(yaml.SafeLoader):
    pass


_BOOL, _FLOAT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:float"
Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
Yaml12Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def load12(text: str) -> Any:
    return yaml.load(text, Loader=Yaml12Loader)


@functools.cache
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def schema_errors(doc: object) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(doc)
    ]


# --------------------------------------------------------------------------- the file


def test_the_shipped_schema_is_the_generated_one() -> None:
    regenerate = (
        "python -c 'from perfguard.suite.grammar import schema_text; import sys; "
        "sys.stdout.write(schema_text())' > perfguard/schemas/suite.schema.json"
    )
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), f"regenerate: {regenerate}"


def test_the_schema_is_draft_2020_12_and_strict_where_the_loader_is() -> None:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False and schema["required"] == ["scenarios"]
    scenario = schema["$defs"]["scenario"]
    assert scenario["additionalProperties"] is False
    assert set(scenario["properties"]) == set(SCENARIO.names)
    # Enums and descriptions come from the grammar's choices and docs.
    assert scenario["properties"]["backend"]["enum"] == [
        "torch",
        "onnxruntime",
        "tensorrt",
        "server",
    ]
    assert scenario["properties"]["backend"]["description"] == SCENARIO.key("backend").doc
    # Gate keys are the policy's metric names.
    assert list(schema["$defs"]["gate"]["properties"]) == [m.name for m in METRICS]


@pytest.mark.parametrize(
    ("metric", "ok", "bad"),
    [
        ("p95", ["+5%", "+2ms", " +0.5 us ", "+1s", "+.5%"], ["5%", "-5%", "+5", "+5MiB", "5"]),
        ("throughput", ["-5%", "-100/s"], ["+5%", "-5ms", "-100"]),
        ("peak_memory", ["+50MiB", "+512KiB", "+1GiB", "+10%"], ["-50MiB", "+5ms", "+5 MB"]),
    ],
)
def test_gate_patterns_follow_the_policy(metric: str, ok: list[str], bad: list[str]) -> None:
    pattern = json_schema()["$defs"]["gate"]["properties"][metric]["pattern"]
    assert [v for v in ok if not re.search(pattern, v)] == []
    assert [v for v in bad if re.search(pattern, v)] == []


def example_ids() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in EXAMPLES]


@pytest.mark.parametrize("path", EXAMPLES, ids=example_ids())
def test_every_example_suite_names_the_schema_and_validates(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    match = SCHEMA_LINE.fullmatch(text.splitlines()[0])
    assert match is not None, "the first line must be `# yaml-language-server: $schema=...`"
    assert (path.parent / match[1]).resolve() == SCHEMA_FILE.resolve()
    assert schema_errors(load12(text)) == []  # as an editor reads it
    assert schema_errors(yaml.safe_load(text)) == []  # as the loader reads it
    assert load_suite(path).scenarios


def test_there_are_example_suites() -> None:
    assert len(EXAMPLES) >= 4


# --------------------------------------------------------------------------- bad input

# The loader's error cases whose problem needs the whole file or a value check the
# schema cannot express (an undefined model, a repeat, a sample count, NaN...).
NOT_STRUCTURAL = {
    "unknown-model", "dup-name", "low-ge-high", "nan-fill", "axis-and-key", "exclude-axis",
    "exclude-value", "exclude-everything", "duplicate-key", "yaml-flow", "yaml-indent",
    "unsafe-tag",
    "acc-ref-not-a-cell", "acc-ref-partial", "acc-ref-name-every-axis", "acc-ref-plain-key",
    "acc-ref-preset", "acc-nan", "acc-per-output-key-type", "q-static-only", "q-unknown",
    "q-unknown-in-defaults", "q-unknown-axis-value", "q-axis-and-key",
    "load-rate-nan", "load-rate-2e6", "load-rate-repeat", "load-rate-same-id",
    "load-neither", "load-arrivals-closed", "load-workers-closed", "load-slo-max",
    "load-count-0", "load-count-1", "load-count-2", "load-count-3", "load-count-4",
    "load-count-5", "load-shapes-int-name", "load-shapes-unknown-input",
    "gpu-profile-order", "dynamo-below-its-opset",
}  # fmt: skip

# tests/helpers/load_cases.py names its cases by their message: message starts -> a name above.
LOAD_NAMES = {
    "`nan` (float)": "load-rate-nan",
    "is 2e+06/s": "load-rate-2e6",
    "lists 100/s twice (first at line 19)": "load-rate-repeat",
    "100000.4/s and 100000.1/s, which share ": "load-rate-same-id",
    "`load` of scenario `s` has neither `con": "load-neither",
    "`arrivals` is set in `load` of scenario": "load-arrivals-closed",
    "`workers` is set in `load` of scenario ": "load-workers-closed",
    "`max` of `slo` in `load` of scenario `s": "load-slo-max",
    "`128` (int)": "load-shapes-int-name",
    "shape bucket `a` of scenario `s` names i": "load-shapes-unknown-input",
}


def bad_cases() -> Iterator[tuple[str, str]]:
    """(id, suite text) of every error case of the loader's tests."""
    for p in [*suite_cases.ERROR_CASES, *suite_cases.ACC_ERROR_CASES]:
        yield p.id, p.values[0]
    for metric, value, _ in suite_cases.BAD_GATES:
        yield f"gate-{metric}-{value}", suite_cases.BASE + f"    gate:\n      {metric}: {value}\n"
    counts = 0
    for p in load_cases.ERROR_CASES:
        body, problem = p.values[0], p.values[1]
        name = next((v for k, v in LOAD_NAMES.items() if problem.startswith(k)), None)
        if name is None and "requests" in problem:
            name, counts = f"load-count-{counts}", counts + 1
        yield name or f"load: {p.id}", load_cases.scen(body)
    for block, needles in gpu_cases.BAD_GPU_VALUES:
        name = "gpu-profile-order" if "not ordered" in needles else f"gpu: {block}"
        text = gpu_cases.MODELS + f"scenarios:\n  - name: s\n    model: mlp\n    {block}\n"
        yield name, textwrap.dedent(text)


BAD = list(bad_cases())


def test_the_unstructural_list_names_real_cases() -> None:
    assert {name for name, _ in BAD} >= NOT_STRUCTURAL
    assert len(BAD) > 150


@pytest.mark.parametrize(
    "text", [t for name, t in BAD if name not in NOT_STRUCTURAL],
    ids=[name for name, _ in BAD if name not in NOT_STRUCTURAL],
)  # fmt: skip
def test_structural_errors_of_the_loader_are_schema_errors(tmp_path: Path, text: str) -> None:
    path = tmp_path / "suites" / "s.yaml"
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SuiteError):
        load_suite(path)
    assert schema_errors(load12(text)) != [], "the schema accepts what the loader refuses"


# --------------------------------------------------------------------------- property


@pytest.mark.parametrize("focus", list(FOCUS))
def test_what_the_loader_accepts_the_schema_accepts(
    tmp_path_factory: pytest.TempPathFactory, focus: str
) -> None:
    path = tmp_path_factory.mktemp("property") / "suite.yaml"

    @settings(
        max_examples=100,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(doc=documents(focus))
    def check(doc: dict[str, Any]) -> None:
        # PyYAML quotes what YAML 1.1 would misread (`on`, `yes`): the loader reads `doc`.
        text = yaml.safe_dump(doc, sort_keys=False)
        path.write_text(text, encoding="utf-8")
        try:
            load_suite(path)
        except SuiteError:
            return
        assert schema_errors(doc) == [], text

    check()


def test_every_grammar_key_is_in_the_schema_and_in_perfguard_keys() -> None:
    rows = {row.path for row in grammar.walk()}
    for path in (
        "scenarios[].load.slo.p95_ms",
        "defaults.gate.p95",
        "models.<model>.inputs.<input>.dtype",
        "scenarios[].gpu.tensorrt.profiles.<input>.opt",
        "scenarios[].accuracy.per_output.<output>.kl_max",
        "quantizations.<preset>.calibration",
        "scenarios[].matrix.backend",
        "scenarios[].exclude[].precision",
    ):
        assert path in rows


def _scenario_with(lines: str) -> str:
    return suite_cases.BASE + textwrap.indent(lines, "    ")


# One junk key in each section of the grammar: the loader's message lists the section's keys.
JUNK_KEYS = {
    "SUITE": "zz_junk: 1\n" + suite_cases.BASE,
    "DEFAULTS": "defaults:\n  zz_junk: 1\n" + suite_cases.BASE,
    "SCENARIO": _scenario_with("zz_junk: 1\n"),
    "MODEL": suite_cases.BASE.replace("    inputs:\n", "    zz_junk: 1\n    inputs:\n"),
    "INPUT": suite_cases.BASE.replace("{shape: [1, 4]}", "{shape: [1, 4], zz_junk: 1}"),
    "SERVER": suite_cases.BASE.replace(
        "scenarios:", "  served:\n    server: {url: 'http://h:1', zz_junk: 1}\nscenarios:"
    ),
    "QUANT": "quantizations:\n  q: {zz_junk: 1}\n" + suite_cases.BASE,
    "LOOP": _scenario_with("measure: {zz_junk: 1}\n"),
    "GATE": _scenario_with("gate: {zz_junk: '+5%'}\n"),
    "MATRIX": _scenario_with("matrix: {zz_junk: [1]}\n"),
    "ACCURACY": _scenario_with("accuracy: {zz_junk: 1}\n"),
    "ACCURACY_INPUTS": _scenario_with("accuracy: {inputs: {zz_junk: 1}}\n"),
    "ACCURACY_LIMITS": _scenario_with("accuracy: {gate: {zz_junk: 1}}\n"),
    "KL": _scenario_with("accuracy: {kl: {zz_junk: 1}}\n"),
    "TASK": _scenario_with("accuracy: {task: {function: 'a:b', zz_junk: 1}}\n"),
    "REFERENCE": _scenario_with("accuracy: {reference: {zz_junk: 1}}\n"),
    "LOAD": _scenario_with("load: {rate: 100, zz_junk: 1}\n"),
    "SLO": _scenario_with("load: {rate: 100, slo: {p95_ms: 5, zz_junk: 1}}\n"),
    "BATCHING": _scenario_with(
        "load: {rate: 100, batching: {max_batch: 2, max_wait_ms: 1, zz_junk: 1}}\n"
    ),
    "GPU": _scenario_with("gpu: {zz_junk: 1}\n"),
    "GENERATE": _scenario_with("generate: {prompt_tokens: 8, new_tokens: 4, zz_junk: 1}\n"),
    "GOODPUT": _scenario_with(
        "generate: {prompt_tokens: 8, new_tokens: 4}\n"
        "load: {rate: 100, goodput: {ttft_ms: 9, tpot_ms: 1, zz_junk: 1}}\n"
    ),
    "TENSORRT": _scenario_with("gpu: {tensorrt: {zz_junk: 1}}\n"),
    "PROFILE": _scenario_with(
        "gpu: {tensorrt: {profiles: {x: {min: [1], opt: [1], max: [1], zz_junk: 1}}}}\n"
    ),
}


@pytest.mark.parametrize(("section", "text"), JUNK_KEYS.items(), ids=list(JUNK_KEYS))
def test_the_loader_allows_exactly_the_grammar_keys(
    tmp_path: Path, section: str, text: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    names = getattr(grammar, section).names
    assert info.value.expected == one_of(names), str(info.value)
    assert "`zz_junk`" in info.value.problem
    assert schema_errors(load12(text)) != []


def test_every_section_of_the_grammar_is_checked_for_junk_keys() -> None:
    sections = {
        name
        for name in grammar.__all__
        if isinstance(getattr(grammar, name), Section) and name != "EXCLUDE_ENTRY"
    }
    assert sections == set(JUNK_KEYS)  # exclude entries are checked against the matrix
