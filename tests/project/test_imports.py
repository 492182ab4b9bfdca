"""Every module of perfguard imports on its own, the pytest entry point stays light, and
no test module imports another test module or conftest.py (shared objects live in
tests/helpers/).

Each check runs in a fresh interpreter: in this process pytest and the other tests
have already imported half of perfguard (and numpy), which would hide both failures.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import perfguard
from tests.helpers.paths import TESTS

# What `import perfguard.plugin.hooks` (the pytest11 entry point, imported by every
# pytest run) must not pull in: each costs tens to hundreds of milliseconds.
HEAVY = ("numpy", "scipy", "yaml", "jinja2", "matplotlib", "torch", "onnxruntime")


def _modules() -> list[str]:
    found = ["perfguard"]
    for info in pkgutil.walk_packages(perfguard.__path__, "perfguard."):
        found.append(info.name)
    return sorted(found)


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_walk_finds_every_part() -> None:
    names = set(_modules())
    assert {"perfguard.plugin.hooks", "perfguard.cli", "perfguard.core.errors"} <= names
    assert "perfguard.worker.__main__" in names


def _import_alone(name: str) -> str | None:
    """The last line of the error of ``import name`` in a fresh interpreter, or None."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {name}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]


def test_every_module_imports() -> None:
    # One interpreter per module: a module that only imports because another one
    # happened to be imported first still fails here.
    with ThreadPoolExecutor(max_workers=4) as pool:
        errors = dict(zip(_modules(), pool.map(_import_alone, _modules()), strict=True))
    assert {name: error for name, error in errors.items() if error is not None} == {}


def test_the_entry_point_imports_nothing_heavy() -> None:
    out = _run(
        "import json, sys\n"
        "import perfguard.plugin.hooks\n"
        f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))\n"
    )
    assert json.loads(out) == []


def test_the_heavy_check_would_see_a_heavy_import() -> None:
    # The check above must be able to fail: the run's state module does import them.
    out = _run(
        "import json, sys\n"
        "import perfguard.plugin.state\n"
        "print(json.dumps(sorted(m for m in ('numpy', 'scipy', 'yaml') if m in sys.modules)))\n"
    )
    assert json.loads(out) == ["numpy", "scipy", "yaml"]


# What a plain `pytest` run loads of perfguard: the entry point, the option definitions
# and the small tables they need (a default contention limit, the suite patterns, the
# report and cache folders' defaults).
# Importing the suite grammar here once added ~90 ms to every plain pytest run.
ENTRY_POINT_MODULES = [
    "perfguard",
    "perfguard.core",
    "perfguard.core.gitignore",
    "perfguard.core.policy",
    "perfguard.plugin",
    "perfguard.plugin.hooks",
    "perfguard.plugin.hookspecs",
    "perfguard.plugin.options",
    "perfguard.suite",
    "perfguard.suite.files",
]


def test_the_entry_point_loads_only_option_registration() -> None:
    out = _run(
        "import json, sys\n"
        "import perfguard.plugin.hooks\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'perfguard')))\n"
    )
    assert json.loads(out) == ENTRY_POINT_MODULES


# -- the tests' own imports ---------------------------------------------------------------


def _is_test_module(dotted: str) -> bool:
    """Whether a module path (``tests.test_x``, ``conftest``, ``.test_x``...) names a test
    module or a conftest."""
    parts = dotted.lstrip(".").split(".")
    if parts[0] == "tests":
        parts = parts[1:]
    return any(part == "conftest" or part.startswith("test_") for part in parts)


def imports_of_test_modules(source: str) -> list[str]:
    """The imports in ``source`` (at any depth, lazy ones too) of a test module or of a
    conftest, each as the dotted name it imports."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.module and _is_test_module(node.module):
                found.append(base)
            elif node.level or node.module == "tests":
                # `from tests import test_x`, `from . import conftest`
                sep = "." if node.module else ""
                found += [
                    f"{base}{sep}{alias.name}"
                    for alias in node.names
                    if _is_test_module(alias.name)
                ]
    return found


def test_no_test_module_imports_another_test_module_or_conftest() -> None:
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 80 and TESTS / "conftest.py" in files
    offenders = {
        str(path.relative_to(TESTS)): names
        for path in files
        if (names := imports_of_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, "move what they share into tests/helpers/"


IMPORT_SPELLINGS = [
    ("from tests.test_store import FP", ["tests.test_store"]),
    ("from tests.baseline.test_store import FP", ["tests.baseline.test_store"]),
    ("from tests.conftest import run_git", ["tests.conftest"]),
    ("import tests.test_report", ["tests.test_report"]),
    ("import tests.test_report as r", ["tests.test_report"]),
    ("from tests import test_suite, helpers", ["tests.test_suite"]),
    ("from .test_worker import alive", [".test_worker"]),
    ("from . import conftest", [".conftest"]),
    ("import conftest", ["conftest"]),
    (
        "def f():\n    from tests.test_report_browser import FLAGS\n",
        ["tests.test_report_browser"],
    ),
    ("from tests.helpers.results import run_of", []),
    ("from tests.helpers import suite_cases", []),
    ("import perfguard.suite.loader", []),
    ("from perfguard.records.results import Environment", []),
]


@pytest.mark.parametrize(
    ("source", "found"),
    IMPORT_SPELLINGS,
    ids=[" ".join(source.split()) for source, _ in IMPORT_SPELLINGS],
)
def test_the_import_check_sees_every_spelling(source: str, found: list[str]) -> None:
    assert imports_of_test_modules(source) == found


# -- the tests' own heavy imports ---------------------------------------------------------

_RUN_AND_REPORT = (
    "import json, sys, pytest\n"
    "rc = pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[1:]])\n"
    "print(json.dumps([rc, sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules)]))\n"
)


def _runtimes_imported_by_running(*args: str) -> list[str]:
    """The runtimes a pytest run of ``args`` (tests of this repository) imports."""
    proc = subprocess.run(
        [sys.executable, "-c", _RUN_AND_REPORT, *args],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    rc, imported = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rc == 0, proc.stdout
    return list(imported)


def test_tests_that_need_no_runtime_do_not_import_one() -> None:
    # conftest.py imports the runtimes only before a test that runs pytest (pytester).
    assert _runtimes_imported_by_running("tests/measure/test_quiet.py") == []


def test_the_runtime_check_would_see_an_import() -> None:
    pytest.importorskip("torch")
    test = "tests/backends/test_torch_backend.py::test_fp32_cpu_session_runs_the_factory_model"
    assert "torch" in _runtimes_imported_by_running(test)
