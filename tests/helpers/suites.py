"""Suite files written for end-to-end runs through pytester."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers.models import TINY_MODELS

FAST_DEFAULTS = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 30, seconds: 0}
  threads: 1
"""

#: The tiny MLP of ``TINY_MODELS`` (``write_suite`` puts its module beside the suite).
MLP_MODEL = """\
models:
  mlp:
    factory: tinymodels:mlp
    inputs:
      x: {shape: [2, 8], dtype: float32}
"""


def write_suite(pytester: pytest.Pytester, name: str, body: str, *, models: bool = True) -> Path:
    """Write ``suites/<name>.yaml`` (with the tiny models module beside it)."""
    suites = pytester.path / "suites"
    suites.mkdir(exist_ok=True)
    if models:
        (suites / "tinymodels.py").write_text(TINY_MODELS)
    path = suites / f"{name}.yaml"
    path.write_text(textwrap.dedent(body))
    return path
