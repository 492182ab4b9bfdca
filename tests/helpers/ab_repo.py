"""The A/B end-to-end repository: a sleeping model whose service time a commit plants."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.helpers.git_repos import run_git
from tests.helpers.models import SLEEPY_MODEL

# The sleeping model with a factory whose `MS` a commit plants (MODEL.replace).
MODEL = SLEEPY_MODEL + textwrap.dedent(
    """

    def build():
        return sleepy(MS)
    """
)

SUITE = """\
defaults:
  warmup: {iterations: 5, seconds: 0}
  measure: {iterations: 100, seconds: 0}
  threads: 1
models:
  sleepy:
    factory: abmodel:build
    inputs:
      x: {shape: [1, 8], dtype: float32}
scenarios:
  - name: sleepy
    model: sleepy
"""


def commit(repo: Path, ms: float, message: str, suite: str = SUITE) -> str:
    (repo / "suites").mkdir(exist_ok=True)
    (repo / "suites" / "abmodel.py").write_text(MODEL.replace("MS", repr(ms)))
    (repo / "suites" / "s.yaml").write_text(suite)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", message)
    return run_git(repo, "rev-parse", "HEAD")


def comparison(path: Path) -> dict:
    (found,) = (path / "reports").glob("*/comparison.json")
    return json.loads(found.read_text())
