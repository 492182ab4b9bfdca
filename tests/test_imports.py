"""Every module of perfguard imports on its own, and the pytest entry point stays light.

Each check runs in a fresh interpreter: in this process pytest and the other tests
have already imported half of perfguard (and numpy), which would hide both failures.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import perfguard

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


def test_every_module_imports() -> None:
    # One interpreter per module: a module that only imports because another one
    # happened to be imported first still fails here.
    code = (
        "import importlib, json, subprocess, sys\n"
        "failed = {}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    proc = subprocess.run([sys.executable, '-c', f'import {name}'],\n"
        "                          capture_output=True, text=True)\n"
        "    if proc.returncode:\n"
        "        failed[name] = proc.stderr.strip().splitlines()[-1:]\n"
        "print(json.dumps(failed))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(_modules())],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {}


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
