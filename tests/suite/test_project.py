"""The factories a project's suite files name, and the distributions they import (what
the environment fingerprint reads its model libraries from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfguard.suite.project import project_factories, project_libraries

SUITE = """\
models:
  {name}: {{factory: "{factory}", inputs: {{x: {{shape: [1, 8]}}}}}}
scenarios:
  - {{name: {name}, model: {name}, backend: torch}}
"""


def suite(path: Path, name: str, factory: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SUITE.format(name=name, factory=factory), encoding="utf-8")


def test_the_suites_factories_and_their_libraries(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    suites = tmp_path / "suites"
    suite(suites / "text.yaml", "text", "textmodels:build")
    suite(suites / "plain.yaml", "plain", "plainmodels:build")
    (suites / "broken.yaml").write_text("models: [\n")  # its collection says so, not this
    (suites / "textmodels.py").write_text("from transformers import BertModel\n")
    (suites / "plainmodels.py").write_text("import torch\n")
    found = project_factories(tmp_path)
    assert set(found) == {("textmodels", suites), ("plainmodels", suites)}
    assert project_libraries(tmp_path) == ("torch", "transformers")
    # A project whose factories import no model library: nothing new.
    (suites / "text.yaml").unlink()
    assert project_libraries(tmp_path) == ("torch",)


def test_a_suite_named_on_the_command_line_counts_too(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    bench = tmp_path / "bench"
    suite(bench / "text.yaml", "text", "textmodels:build")
    (bench / "textmodels.py").write_text("import transformers\n")
    assert project_libraries(tmp_path) == ()  # outside the default patterns
    assert project_libraries(tmp_path, named=[bench / "text.yaml"]) == ("transformers",)
    assert project_libraries(tmp_path, ["bench/*.yaml"]) == ("transformers",)
