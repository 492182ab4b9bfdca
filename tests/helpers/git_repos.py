"""Git repositories for end-to-end runs: git with a throwaway identity, the spin model's repo."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.models import SPIN_MODEL


def run_git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` with a throwaway identity; returns stripped stdout."""
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


class SpinRepo:
    """A git repository for end-to-end runs of the gate: ``suites/`` holding the spin
    model, the given pytest.ini, and a .gitignore for what runs leave behind (pytester
    keeps its own capture files in the directory: not part of the repo)."""

    def __init__(self, pytester: pytest.Pytester, ini: str, *, ignore: str = "") -> None:
        self.pytester = pytester
        self.path = pytester.path
        (self.path / "suites").mkdir()
        (self.path / "suites" / "spinmodel.py").write_text(SPIN_MODEL)
        pytester.makeini(ini)
        (self.path / ".gitignore").write_text(
            f"reports/\n{ignore}.perfguard/\n__pycache__/\nstdout\nstderr\nrunpytest-*\n"
        )
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        return run_git(self.path, *args)

    def commit_suite(self, text: str, message: str) -> str:
        """Commit ``suites/s.yaml`` with ``text``; the new commit's sha."""
        (self.path / "suites" / "s.yaml").write_text(text)
        self.git("add", "-A")
        self.git("commit", "-qm", message)
        return self.git("rev-parse", "HEAD")
