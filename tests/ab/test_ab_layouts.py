"""End-to-end: same-run A/B imports each side's own code, whatever the project's layout.

A tiny ``nn.Linear`` model whose head commit makes ``forward`` ~300x slower (300 more
layers' worth of work, no new parameters), kept where real projects keep it: a
src-layout package installed with a real ``pip install -e .`` (setuptools' static
``.pth``), a flat namespace package installed editable (setuptools' editable finder,
``MAPPING``/``NAMESPACES``), ``PYTHONPATH=src``, pytest's ``pythonpath = src`` ini, and
a git submodule. Before the base side switched its imports to the base worktree, the
first three compared the head with itself and passed; the last two failed the cell.
Each must now fail the gate as a regression. A factory that reaches the head's tree by
a path written out in full is refused, naming the module. No figure of this machine
is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import perfguard
from tests.helpers.git_repos import run_git

# End to end: runs pytest (and git, worktrees) in subprocesses.
pytestmark = pytest.mark.slow

MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Lin(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            y = self.lin(x)
            for _ in range(REPEAT):
                y = torch.tanh(self.lin(y))
            return y


    def build():
        torch.manual_seed(0)
        return Lin().eval()
    """
)

SUITE = """\
defaults:
  warmup: {iterations: 5, seconds: 0}
  measure: {iterations: 60, seconds: 0}
  threads: 1
models:
  lin:
    factory: FACTORY
    inputs:
      x: {shape: [1, 8], dtype: float32}
scenarios:
  - name: lin
    model: lin
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "NAME"
version = "0.1"
"""

AB = ("--perfguard-ab=HEAD~1",)
HARNESS = str(Path(perfguard.__file__).resolve().parent.parent)
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}


def model(repeat: int) -> str:
    return MODEL.replace("REPEAT", str(repeat))


def commit(repo: Path, message: str) -> None:
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", message)


def new_repo(path: Path, factory: str, ini: str = "[pytest]\n") -> Path:
    path.mkdir()
    run_git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text("reports/\n.perfguard/\n__pycache__/\n*.egg-info/\n")
    (path / "pytest.ini").write_text(ini)
    (path / "suites").mkdir()
    (path / "suites" / "s.yaml").write_text(SUITE.replace("FACTORY", factory))
    return path


def env(pythonpath: str = "") -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, HARNESS) if p)
    out.pop("PYTEST_ADDOPTS", None)
    return out


def ab(repo: Path, python: str = sys.executable, *extra: str, pythonpath: str = "") -> tuple:
    """Run the A/B gate in ``repo``; (exit status, output, the verdicts by id)."""
    proc = subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", "--perfguard", "-v", *AB, *extra],
        cwd=repo,
        env=env(pythonpath),
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = list((repo / "reports").glob("*/comparison.json"))
    verdicts = (
        {v["scenario_id"]: v for v in json.loads(found[0].read_text())["verdicts"]} if found else {}
    )
    return proc.returncode, proc.stdout + proc.stderr, verdicts


def assert_regression(result: tuple) -> None:
    code, output, verdicts = result
    verdict = verdicts.get("suites/s.yaml::lin")
    assert verdict is not None, output
    assert (verdict["mode"], verdict["verdict"]) == ("ab", "regression"), output
    assert verdict["ab"]["decision"]["ratio"] > 2.0, verdict["messages"]  # 300 layers vs 1
    assert code == 1, output


def venv(tmp_path: Path, where: Path | None = None) -> str:
    """A virtual environment that sees this one's packages, for a real ``pip install -e``
    (at ``where``, default ``tmp_path / "venv"``)."""
    where = where or tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run(
        [base, "-m", "venv", "--without-pip", "--system-site-packages", str(where)], check=True
    )
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "zz_outer.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return str(python)


def pip_install_editable(python: str, project: Path) -> None:
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", "."],
        cwd=project,
        check=True,
        capture_output=True,
        env=env(),
    )


def src_layout(repo: Path) -> None:
    (repo / "src" / "mylib").mkdir(parents=True)
    (repo / "src" / "mylib" / "__init__.py").write_text("")
    (repo / "src" / "mylib" / "model.py").write_text(model(0))
    commit(repo, "base: one layer")
    (repo / "src" / "mylib" / "model.py").write_text(model(300))
    commit(repo, "head: 300 more layers")


@pytest.mark.parametrize("own_python", [False, True], ids=["one-worker", "ab-python"])
def test_a_src_layout_installed_editable_is_imported_from_each_side(
    tmp_path: Path, own_python: bool
) -> None:
    # setuptools installs a src layout as a static .pth holding <repo>/src.
    repo = new_repo(tmp_path / "repo", "mylib.model:build")
    (repo / "pyproject.toml").write_text(PYPROJECT.replace("NAME", "mylib-src"))
    src_layout(repo)
    python = venv(tmp_path)
    pip_install_editable(python, repo)
    extra = (f"--perfguard-ab-python={python}",) if own_python else ()
    assert_regression(ab(repo, python, *extra))


def test_a_namespace_package_behind_an_editable_finder_is_imported_from_each_side(
    tmp_path: Path,
) -> None:
    # A flat layout with a namespace package: setuptools' __editable___*_finder with
    # MAPPING and NAMESPACES entries pointing into the checkout.
    repo = new_repo(tmp_path / "repo", "acme.models.model:build")
    (repo / "pyproject.toml").write_text(
        PYPROJECT.replace("NAME", "acme-models")
        + '\n[tool.setuptools.packages.find]\ninclude = ["acme*"]\nnamespaces = true\n'
    )
    package = repo / "acme" / "models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(model(0))
    commit(repo, "base: one layer")
    (package / "model.py").write_text(model(300))
    commit(repo, "head: 300 more layers")
    python = venv(tmp_path)
    pip_install_editable(python, repo)
    finders = list(Path(tmp_path / "venv").glob("lib/*/site-packages/__editable___*_finder.py"))
    assert finders and "NAMESPACES" in finders[0].read_text()
    assert_regression(ab(repo, python))


def test_pythonpath_src_is_applied_in_each_side_s_tree(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", "mylib.model:build")
    src_layout(repo)
    assert_regression(ab(repo, pythonpath="src"))


def test_pytest_s_pythonpath_ini_is_applied_in_each_side_s_tree(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo", "mylib.model:build", ini="[pytest]\npythonpath = src\n")
    src_layout(repo)
    assert_regression(ab(repo))


def test_model_code_in_a_git_submodule_is_checked_out_in_the_base_worktree(
    tmp_path: Path,
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    run_git(models, "init", "-q", "-b", "main")
    (models / "__init__.py").write_text("")
    (models / "model.py").write_text(model(0))
    commit(models, "one layer")
    repo = new_repo(tmp_path / "repo", "mylib.model:build")
    run_git(
        repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(models),
        "suites/mylib",
    )  # fmt: skip
    commit(repo, "base: the model at one layer")
    (models / "model.py").write_text(model(300))
    commit(models, "300 more layers")
    run_git(repo / "suites" / "mylib", "pull", "-q", "origin", "main")
    commit(repo, "head: the model at 300 more layers")
    config = (repo / ".git" / "config").read_text()
    assert_regression(ab(repo))
    assert (repo / ".git" / "config").read_text() == config  # nothing written there
    assert len(run_git(repo, "worktree", "list").splitlines()) == 1  # the worktree is gone


def test_a_factory_reaching_the_head_by_a_full_path_is_refused_naming_the_module(
    tmp_path: Path,
) -> None:
    repo = new_repo(tmp_path / "repo", "entry:build")
    (repo / "lib" / "mylib").mkdir(parents=True)
    (repo / "lib" / "mylib" / "__init__.py").write_text("")
    (repo / "lib" / "mylib" / "model.py").write_text(model(0))
    # The head's lib/ written out in full: the base side would import the head's model.
    (repo / "suites" / "entry.py").write_text(
        f"import sys\nsys.path.insert(0, {str(repo / 'lib')!r})\nfrom mylib.model import build\n"
    )
    commit(repo, "base: one layer")
    (repo / "lib" / "mylib" / "model.py").write_text(model(300))
    commit(repo, "head: 300 more layers")
    code, output, verdicts = ab(repo)
    assert code == 1, output
    assert "module 'mylib" in output, output  # the package or its model module
    assert f"was loaded from {repo / 'lib' / 'mylib'}" in output, output
    assert "not from this side's tree" in output and "perfguard-ab-base-" in output, output
    verdict = verdicts.get("suites/s.yaml::lin")
    assert verdict is None or verdict["verdict"] != "unchanged", output


def test_a_virtual_environment_inside_the_repository_serves_both_sides(tmp_path: Path) -> None:
    """``python -m venv .venv`` in the checkout (as `make install` does here): its packages
    are no side's code. The base side once mapped the venv's site-packages into the base
    worktree, where no venv is, and every cell was skipped for a missing package."""
    repo = new_repo(tmp_path / "repo", "lin_model:build")
    (repo / ".gitignore").write_text("reports/\n.perfguard/\n__pycache__/\n.venv/\n")
    python = venv(tmp_path, repo / ".venv")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "venvonly.py").write_text("LAYERS = 1\n")  # installed in .venv only
    body = "import venvonly\n" + model(0)
    (repo / "suites" / "lin_model.py").write_text(body)
    commit(repo, "base: one layer")
    (repo / "suites" / "lin_model.py").write_text(body.replace("range(0)", "range(300)"))
    commit(repo, "head: 300 more layers")
    assert_regression(ab(repo, python))
