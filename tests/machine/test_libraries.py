"""The model libraries a project's factories import: found from source, recorded in the
environment, and in the fingerprint only for those that change the figures."""

from __future__ import annotations

import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from perfguard.machine import env
from perfguard.machine.env import MODEL_LIBRARIES, collect_environment, model_libraries
from perfguard.machine.libraries import imported_distributions
from perfguard.records.results import fingerprint

#: The comparable keys of a machine without a GPU before model libraries existed (and
#: the optional runtimes this one has installed).
PLAIN_KEYS = (
    {"cpu_model", "cpu_count", "machine", "os", "python"}
    | set(env.RUNTIME_DISTRIBUTIONS)
    | {k for k, names in env.OPTIONAL_RUNTIMES.items() if env.package_version(names) != env.ABSENT}
)


@pytest.fixture
def no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    monkeypatch.setitem(sys.modules, "pynvml", None)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_imports_are_followed_through_the_projects_own_modules(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    suites = tmp_path / "suites"
    # The factory module beside the suite imports the project's package at the root...
    write(suites / "models.py", "import os\nimport nets.text\nfrom nets import vision\n")
    write(tmp_path / "nets" / "__init__.py", "")
    # ... whose modules import transformers lazily, and yaml through a relative import.
    write(tmp_path / "nets" / "text.py", "def build():\n    from transformers import AutoModel\n")
    write(tmp_path / "nets" / "vision.py", "from . import helpers\n")
    write(tmp_path / "nets" / "helpers.py", "import yaml\nimport json\n")
    found = imported_distributions([("models", suites)], roots=[tmp_path])
    assert found == ("pyyaml", "transformers")
    # A factory importing only torch and the standard library names nothing new.
    write(suites / "plain.py", "import math\nimport torch\n")
    assert imported_distributions([("plain", suites)], roots=[tmp_path]) == ("torch",)
    assert imported_distributions([("missing", suites)], roots=[tmp_path]) == ()


@pytest.mark.usefixtures("no_gpu")
def test_a_project_without_model_libraries_keeps_its_fingerprint_byte_identical() -> None:
    plain = collect_environment()
    assert set(plain.comparable) == PLAIN_KEYS  # no key added by this change
    assert "model_libraries" not in plain.recorded
    # torch, numpy and perfguard are what such a project's factories import.
    same = collect_environment(libraries=("torch", "numpy", "perfguard"))
    assert same.comparable == plain.comparable
    assert same.fingerprint == plain.fingerprint == fingerprint(plain.comparable)
    assert "model_libraries" not in same.recorded


@pytest.mark.usefixtures("no_gpu")
def test_a_model_library_enters_the_fingerprint_and_others_are_recorded() -> None:
    pytest.importorskip("transformers")
    plain = collect_environment()
    with_hf = collect_environment(libraries=("transformers", "pyyaml"))
    transformers, pyyaml = metadata.version("transformers"), metadata.version("pyyaml")
    assert with_hf.comparable == {**plain.comparable, "transformers": transformers}
    assert with_hf.fingerprint != plain.fingerprint
    assert with_hf.recorded["model_libraries"] == f"pyyaml {pyyaml}, transformers {transformers}"
    assert env.diff_comparable(plain, with_hf) == {"transformers": (None, transformers)}
    # A hook's field still wins on a clash.
    pinned = collect_environment({"transformers": "pinned"}, libraries=("transformers",))
    assert pinned.comparable["transformers"] == "pinned"


def test_a_library_that_requires_a_model_library_brings_it_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    versions = {"sentence-transformers": "3.0.1", "transformers": "4.44.0", "tqdm": "4.66"}
    requires = {"sentence-transformers": ["transformers<5,>=4.41.0", "tqdm", "torch>=1.11"]}

    def version(name: str) -> str:
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(env.metadata, "version", version)
    monkeypatch.setattr(env.metadata, "requires", lambda name: requires.get(name, []))
    assert {"sentence-transformers", "transformers"} <= MODEL_LIBRARIES
    assert model_libraries(["Sentence_Transformers"]) == {
        "sentence-transformers": "3.0.1",
        "transformers": "4.44.0",
    }
    assert model_libraries(["tqdm", "torch", "onnxruntime-gpu"]) == {"tqdm": "4.66"}
