"""Where the tests find the repository, themselves and their recorded files, wherever a
test module sits in the tests' folders."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (pyproject.toml, docs/, .github/).
ROOT = Path(__file__).resolve().parents[2]
#: The tests' own folder (conftest.py, one folder per package part, helpers/).
TESTS = ROOT / "tests"
#: Files written by earlier perfguard versions, read back byte for byte.
RECORDS = TESTS / "fixtures" / "records"
