"""A new user's first hour, rehearsed end to end (issue 28): a starter for a Hugging Face
BERT built from a config (``perfguard init``, with its ``.gitignore`` lines), the first
same-run A/B against main catching a slowdown on a branch, then the run just measured
archived from its ``results.json`` (``perfguard baseline save``), as getting-started says.

The slowdown is real and large (the branch doubles the encoder's layers), so the verdict
does not depend on how busy the machine is; the save takes ``--allow-inconclusive`` so a
noisy machine cannot refuse it (the refusal itself is tested in tests/cli/test_cli_save.py).
"""

from __future__ import annotations

import json

import pytest

from perfguard.cli import main
from tests.helpers.git_repos import run_git
from tests.helpers.hf_models import HF_FACTORIES, preload_transformers

pytestmark = pytest.mark.slow


def test_starter_then_ab_then_save_from_results(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    preload_transformers()
    root = pytester.path
    monkeypatch.chdir(root)
    pytester.makeini("[pytest]\n")
    (root / "suites").mkdir()
    (root / "suites" / "hf_factories.py").write_text(HF_FACTORIES, encoding="utf-8")
    # pytester's own capture files are no part of the project.
    (root / ".gitignore").write_text("__pycache__/\nstdout\nstderr\nrunpytest-*\n")

    # 1. The starter, and the .gitignore lines it offers.
    argv = ["init", "--factory", "hf_factories:bert", "-o", "suites/bert.yaml", "--gitignore"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("wrote suites/bert.yaml")
    assert "added to .gitignore: .perfguard/" in out
    ignored = (root / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert ".perfguard/" in ignored and "reports/" in ignored
    suite = (root / "suites" / "bert.yaml").read_text(encoding="utf-8")
    assert "input_ids: {shape: [1, 128], dtype: int64, low: 0, high: 500}" in suite
    assert "$schema=/" not in suite  # nothing of this machine in a committed file

    run_git(root, "init", "-q", "-b", "main")
    run_git(root, "add", "-A")
    run_git(root, "commit", "-qm", "perfguard starter for bert")

    # 2. A branch that slows the model down: twice the encoder layers.
    run_git(root, "checkout", "-qb", "deeper")
    factories = root / "suites" / "hf_factories.py"
    text = factories.read_text(encoding="utf-8")
    assert "def bert(layers=2):" in text
    factories.write_text(text.replace("def bert(layers=2):", "def bert(layers=4):"))
    run_git(root, "commit", "-qam", "bert: four layers")
    head = run_git(root, "rev-parse", "HEAD")

    # 3. The first loop: same-run A/B against main, no archive needed.
    ab = pytester.runpytest(
        "--perfguard",
        "suites/bert.yaml",
        "-k",
        "torch",
        "--perfguard-ab=main",
        "--perfguard-inconclusive=fail",
        "-p",
        "no:cacheprovider",
    )
    assert ab.ret == 1, ab.stdout.str()
    ab.stdout.fnmatch_lines(["*baseline: same-run A/B against*"])
    verdicts = json.loads((root / "reports" / f"{head[:12]}-ab" / "comparison.json").read_text())
    (verdict,) = verdicts["verdicts"]
    assert (verdict["mode"], verdict["verdict"]) == ("ab", "regression")

    # 4. A plain run of the working tree, then that run archived from its results.json.
    plain = pytester.runpytest(
        "--perfguard", "suites/bert.yaml", "-k", "torch", "--perfguard-no-gate",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    assert plain.ret == 0, plain.stdout.str()
    results = root / "reports" / head[:12] / "results.json"
    assert results.is_file()
    assert main(["baseline", "save", str(results), "--allow-inconclusive"]) == 0
    out, err = capsys.readouterr()
    saved = [line for line in out.splitlines() if line.startswith("baseline saved: ")]
    assert len(saved) == 1, (out, err)
    archived = root / saved[0].removeprefix("baseline saved: ").split()[0]
    assert archived.is_file() and archived.name == f"{head}.json", archived
