"""The gate's end-to-end repository: a spin model whose cost a commit sets."""

from __future__ import annotations

import json

import pytest

from tests.helpers.git_repos import SpinRepo

# Contention from other processes on a shared CI host would turn verdicts into
# `invalid`; these tests are about the plumbing, so the contention check is off.
INI = "[pytest]\nperfguard_contention_limit = 1.01\n"


CONFTEST = ""


def suite_text(us: int, *, scenarios: str = "spin") -> str:
    body = f"""\
defaults:
  warmup: {{iterations: 5, seconds: 0}}
  measure: {{iterations: 400, seconds: 0}}
  threads: 1
  # Plumbing tests: a busy host must not turn a verdict into `invalid` (unstable).
  stability_tolerance: 0.99
  gate: {{p95: "+50%"}}
models:
  spin:
    factory: spinmodel:spin
    kwargs: {{us: {us}}}
    inputs:
      x: {{shape: [1, 4]}}
scenarios:
"""
    for name in scenarios.split(","):
        body += f"  - name: {name}\n    model: spin\n"
    return body


class Repo(SpinRepo):
    def __init__(self, pytester: pytest.Pytester) -> None:
        super().__init__(pytester, INI)
        pytester.makeconftest(CONFTEST)

    def commit(self, us: int, message: str, *, scenarios: str = "spin") -> str:
        return self.commit_suite(suite_text(us, scenarios=scenarios), message)

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest("--perfguard", "-rA", *args)

    def comparison(self) -> dict:
        sha = self.git("rev-parse", "HEAD")
        return json.loads((self.path / "reports" / sha[:12] / "comparison.json").read_text())
