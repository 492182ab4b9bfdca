"""A run's environment carries the model libraries its project's factories import."""

from __future__ import annotations

import pytest

from perfguard.machine.env import collect_environment

SUITE = """\
models:
  bert: {factory: "textmodels:build", inputs: {x: {shape: [1, 8]}}}
scenarios:
  - {name: bert, model: bert, backend: torch}
"""


def test_the_header_fingerprint_has_the_factories_model_library(
    suite_writer: pytest.Pytester,
) -> None:
    pytest.importorskip("transformers")
    suites = suite_writer.path / "suites"
    suites.mkdir()
    (suites / "bert.yaml").write_text(SUITE)
    (suites / "textmodels.py").write_text("from transformers import BertModel\n")
    result = suite_writer.runpytest("--perfguard", "--collect-only", "-p", "no:cacheprovider")
    expected = collect_environment(libraries=("transformers",)).fingerprint
    assert expected != collect_environment().fingerprint
    result.stdout.fnmatch_lines([f"perfguard: commit *; environment {expected}; *"])
