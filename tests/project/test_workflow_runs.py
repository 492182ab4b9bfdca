"""perfguard.yml's jobs, run step by step (tests/helpers/workflow_harness.py) on a tiny project.

The project is one suite of two models that busy-wait a set number of microseconds per
call (``SPIN_MODEL``; the cost is a ``kwargs`` value in the suite file, so a commit
changes it): ``spin`` (the one a PR slows down) and ``steady``, one cell each, so two
shards get one cell each. Its origin is a local bare repository; the jobs run the
workflow's own ``run:`` steps (git, tar, jq, the pytest and ``perfguard merge`` command
lines) with the stand-ins the harness documents: the shards of a matrix job run one
after another, and the merge jobs run without torch, as from their lock. A planted
regression is 4x the cost and the gate limit is +50%, so no verdict here depends on how
busy this machine is.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.helpers.models import SPIN_MODEL
from tests.helpers.workflow_harness import (
    APP_TOKEN,
    ROOT,
    STAND_IN_STEPS,
    Environment,
    GhRecorder,
    HarnessError,
    Job,
    Server,
    WorkflowRun,
    evaluate,
    substitute,
)

# End to end: runs the workflow's jobs (pytest, git) in subprocesses.
pytestmark = pytest.mark.slow

pytest.importorskip("torch")  # the spin model is a torch module

WORKFLOW = ROOT / ".github" / "workflows" / "perfguard.yml"
BRANCH = "perfguard-baselines"
PUSH_STEP = "Push baselines to the perfguard-baselines branch"
MARKER = "<!-- perfguard-summary -->"
FAST_US, SLOW_US = 300, 1200
SHARDS = {"PERFGUARD_SHARDS": "2"}
APP_KEY = "-----BEGIN RSA PRIVATE KEY----- harness -----END RSA PRIVATE KEY-----"
# The deployment environment docs/ci.md sets up: main only, holding the App's key.
ENVIRONMENTS = {
    "perfguard-baselines": Environment(
        "perfguard-baselines",
        branches=("main",),
        secrets={"PERFGUARD_BASELINES_APP_KEY": APP_KEY},
        variables={"PERFGUARD_BASELINES_APP_CLIENT_ID": "Iv23harness"},
    )
}

SUITE = """\
defaults:
  warmup: {{iterations: 5, seconds: 0}}
  measure: {{iterations: 150, seconds: 0}}
  threads: 1
  # Plumbing, not this machine: a busy host must not make a verdict `invalid`.
  stability_tolerance: 0.99
  gate: {{p95: "+50%"}}
models:
  spin:
    factory: spinmodel:spin
    kwargs: {{us: {us}}}
    inputs:
      x: {{shape: [1, 4]}}
  steady:
    factory: spinmodel:spin
    kwargs: {{us: {fast}}}
    inputs:
      x: {{shape: [1, 4]}}
scenarios:
  - name: spin
    model: spin
  - name: steady
    model: steady
"""


def project(us: int) -> dict[str, str]:
    return {
        "pytest.ini": "[pytest]\nperfguard_contention_limit = 1.01\n",
        ".gitignore": "reports/\n.venv/\n.perfguard/\n__pycache__/\n.pytest_cache/\n",
        "baselines/.gitkeep": "",
        "suites/spinmodel.py": SPIN_MODEL,
        "suites/s.yaml": SUITE.format(us=us, fast=FAST_US),
    }


@dataclass
class Origin:
    server: Server
    tmp: Path
    main: list[tuple[str, WorkflowRun]]

    def push_run(
        self, sha: str, label: str, variables: dict[str, str] | None = None
    ) -> WorkflowRun:
        return WorkflowRun(
            WORKFLOW,
            self.server,
            event_name="push",
            sha=sha,
            ref="refs/heads/main",
            directory=self.tmp / label,
            variables=SHARDS if variables is None else variables,
            environments=ENVIRONMENTS,
        )

    def pr_run(
        self, head: str, branch: str, number: int, gh: GhRecorder | None = None
    ) -> WorkflowRun:
        # GitHub's GITHUB_SHA is the merge commit; the perf job checks out the head (with.ref).
        event = {
            "number": number,
            "pull_request": {
                "number": number,
                "head": {"sha": head, "ref": branch, "repo": {"full_name": self.server.repository}},
                "base": {"ref": "main"},
            },
        }
        return WorkflowRun(
            WORKFLOW,
            self.server,
            event_name="pull_request",
            sha=head,
            ref=f"refs/pull/{number}/merge",
            base_ref="main",
            head_ref=branch,
            event=event,
            directory=self.tmp / f"pr-{number}",
            gh=gh,
            variables=SHARDS,
            environments=ENVIRONMENTS,
        )

    def baseline(
        self,
        sha: str,
        label: str,
        *,
        until: str | None = None,
        variables: dict[str, str] | None = None,
    ) -> tuple[WorkflowRun, Job]:
        """The push workflow: plan, the baseline shards, then baseline-merge (its steps
        before ``until``)."""
        run = self.push_run(sha, label, variables)
        assert run.run_job("plan") == "success"
        run.run_job("baseline")
        (merge,) = run.jobs("baseline-merge")
        merge.run(until=until)
        return run, merge


def describe(run: WorkflowRun, *names: str) -> str:
    return "\n".join(job.describe() for name in names for job in run.ran[name])


def head_report(run: WorkflowRun, head: str) -> Path:
    """The head commit's report folder in the artifact, as the comment job picks it."""
    reports = run.artifacts / "perfguard-reports"
    found = [d for d in (reports / f"{head[:12]}-ab", reports / head[:12]) if d.is_dir()]
    assert found, sorted(p.name for p in reports.iterdir())
    return found[0]


def baseline_doc(server: Server, sha: str) -> dict:
    (path,) = [p for p in server.branch_files(BRANCH) if p.endswith(f"/{sha}.json")]
    return json.loads(server.origin_git("show", f"refs/heads/{BRANCH}:{path}"))


def model_of(cell_id: str) -> str:
    return "steady" if "steady" in cell_id else "spin"


def shard_plan(run: WorkflowRun, index: int) -> dict:
    """The shard.json that shard ``index`` uploaded."""
    (path,) = (run.artifacts / f"perfguard-shard-{index}").rglob("shard.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Origin:
    """main with two commits, each measured by the push workflow in two shards, in order."""
    tmp = tmp_path_factory.mktemp("workflow-runs")
    server = Server(tmp / "server")
    found = Origin(server, tmp, [])
    first = server.commit(project(FAST_US), "two models")
    found.main.append((first, found.baseline(first, "main-1")[0]))
    second = server.commit({"README.md": "docs\n"}, "docs only")
    found.main.append((second, found.baseline(second, "main-2")[0]))
    return found


def test_main_pushes_merge_the_shards_into_one_baseline_commit_each(origin: Origin) -> None:
    server = origin.server
    (first, run1), (second, run2) = origin.main
    # The second run read the archive at the commit the first one pushed.
    assert "baselines" not in run1.outputs["plan"]
    first_push = server.origin_git("rev-list", "--reverse", f"refs/heads/{BRANCH}").split()[0]
    assert run2.outputs["plan"]["baselines"] == first_push
    for run in (run1, run2):
        assert {k: run.outputs["plan"][k] for k in ("total", "shards")} == {
            "total": "2",
            "shards": "[1,2]",
        }
        shards = run.ran["baseline"]
        assert [job.matrix for job in shards] == [{"shard": 1}, {"shard": 2}]
        assert all(job.result() == "success" for job in shards), describe(run, "baseline")
        assert run.results["baseline-merge"] == "success", describe(run, "baseline-merge")
        # The shards measure and upload; they neither save nor push.
        for job in shards:
            assert PUSH_STEP not in job.steps
            assert "--perfguard-save" not in str(job.spec["steps"])
        # Each shard measured one of the two cells; together, both.
        plans = [shard_plan(run, k) for k in (1, 2)]
        assert [p["shard"] for p in plans] == [1, 2]
        cells = [c for shard in plans[0]["shards"] for c in shard["cells"]]
        assert len(cells) == 2 and all(len(s["cells"]) == 1 for s in plans[0]["shards"])
        assert plans[0]["shards"] == plans[1]["shards"]
    (merge1,) = run1.ran["baseline-merge"]
    assert "no perfguard-baselines branch yet; this run creates it" in (
        merge1.steps["Fetch stored baselines"].output
    )
    assert [s for s in merge1.steps.values() if s.stood_in] == [
        merge1.steps["actions/checkout"],
        merge1.steps["actions/setup-python"],
        merge1.steps["Install"],
        merge1.steps["actions/download-artifact"],
        merge1.steps["Upload reports"],
        merge1.steps["Token for the perfguard-baselines branch"],
    ]
    # The merge job's venv has no torch (its lock has none), and it merged all the same.
    assert "without" in merge1.steps["Install"].output
    assert "torch" in merge1.steps["Install"].output
    assert server.has_branch(BRANCH)
    files = server.branch_files(BRANCH)
    assert sum(p.endswith(f"/{first}.json") for p in files) == 1
    assert sum(p.endswith(f"/{second}.json") for p in files) == 1
    for sha in (first, second):
        doc = baseline_doc(server, sha)
        assert doc["kind"] == "perfguard-baseline" and len(doc["launches"]) == 1
        (launch,) = doc["launches"]
        assert sorted(r["name"] for r in launch["scenarios"]) == ["spin", "steady"]
    # One commit per push, with both shards' cells.
    log = server.origin_git("log", "--format=%s", f"refs/heads/{BRANCH}").splitlines()
    assert log == [f"perfguard baseline for {second}", f"perfguard baseline for {first}"]
    # The token reached git through the environment only.
    # The push used the environment's App token; neither token nor the App's key reached
    # .git/config or a log.
    for run in (run1, run2):
        (merge,) = run.ran["baseline-merge"]
        assert "App Iv23harness" in merge.steps["Token for the perfguard-baselines branch"].output
        for job in (*run.ran["baseline"], *run.ran["baseline-merge"]):
            for secret in (run.github["token"], APP_TOKEN, APP_KEY):
                assert secret not in (job.workspace / ".git" / "config").read_text()
                assert all(secret not in step.output for step in job.steps.values())
    # main is left alone: its tip is the developer's commit, not a bot's.
    assert server.origin_git("rev-parse", "refs/heads/main") == second
    # The push event runs the baseline jobs only.
    assert run1.run_job("perf") == "skipped"
    assert run1.run_job("perf-merge") == "skipped"


def test_a_pr_with_a_planted_regression_fails_the_merge_and_the_comment_is_its_summary(
    origin: Origin,
) -> None:
    server = origin.server
    head = server.commit(project(SLOW_US), "4x slower model", branch="pr-slow")
    gh = GhRecorder(origin.tmp / "gh-slow")
    run = origin.pr_run(head, "pr-slow", 7, gh)
    assert run.run_job("plan") == "success"
    assert run.run_job("perf") == "failure", describe(run, "perf")
    shards = run.ran["perf"]
    assert [job.matrix for job in shards] == [{"shard": 1}, {"shard": 2}]
    # The shard that measured `spin` fails on its own regression; the other passes.
    owner = {c: s["index"] for s in shard_plan(run, 1)["shards"] for c in s["cells"]}
    (spin_shard,) = {k for c, k in owner.items() if model_of(c) == "spin"}
    for job in shards:
        gate = job.steps["Performance gate"]
        assert gate.rc == (1 if job.matrix["shard"] == spin_shard else 0), job.describe()
        fetched = job.steps["Fetch stored baselines"]
        assert fetched.rc == 0 and f"files from {BRANCH}" in fetched.output, job.describe()
        assert job.steps["Upload reports"].rc == 0  # if: always()
    assert run.run_job("perf-merge") == "failure", describe(run, "perf-merge")
    (merge,) = run.ran["perf-merge"]
    assert merge.steps["Merge the shards"].rc == 1, merge.describe()
    # The merged verdict is the run's step summary too.
    assert "regression" in merge.files["GITHUB_STEP_SUMMARY"].read_text().lower()
    report = head_report(run, head)
    verdicts = {
        model_of(v["scenario_id"]): v
        for v in json.loads((report / "comparison.json").read_text())["verdicts"]
    }
    assert sorted(verdicts) == ["spin", "steady"], verdicts
    assert verdicts["spin"]["mode"] == "ab" and verdicts["spin"]["verdict"] == "regression"
    assert verdicts["steady"]["verdict"] in ("unchanged", "improvement")
    # A decoy that sorts before the head's directory: the old summaries[0] took it.
    decoy = run.artifacts / "perfguard-reports" / "000000000000"
    decoy.mkdir()
    (decoy / "summary.md").write_text(f"{MARKER}\nthe wrong commit\n")

    assert run.run_job("comment") == "success", describe(run, "comment")
    ((listed, posted),) = [gh.calls]  # one list, one post: one comment for both shards
    assert listed["argv"][:3] == [
        "api",
        "--paginate",
        f"repos/{server.repository}/issues/7/comments",
    ]
    assert posted["argv"][:4] == [
        "api",
        "--method",
        "POST",
        f"repos/{server.repository}/issues/7/comments",
    ]
    body = json.loads(posted["stdin"])["body"]
    assert body == (report / "summary.md").read_text()
    assert body.startswith(MARKER) and "the wrong commit" not in body


def test_an_unchanged_pr_passes_in_ab_mode(origin: Origin) -> None:
    server = origin.server
    head = server.commit({"NOTES.md": "no model change\n"}, "notes", branch="pr-same")
    run = origin.pr_run(head, "pr-same", 8)
    assert run.run_job("plan") == "success"
    assert run.run_job("perf") == "success", describe(run, "perf")
    assert run.run_job("perf-merge") == "success", describe(run, "perf-merge")
    report = head_report(run, head)
    verdicts = json.loads((report / "comparison.json").read_text())["verdicts"]
    assert len(verdicts) == 2
    for verdict in verdicts:
        assert verdict["mode"] == "ab" and verdict["verdict"] in ("unchanged", "improvement")
    # The stored baselines were there for the report's history.
    for job in run.ran["perf"]:
        assert f"files from {BRANCH}" in job.steps["Fetch stored baselines"].output


def test_a_shard_without_reports_fails_the_merge_with_its_cells_named(origin: Origin) -> None:
    server = origin.server
    head = server.commit({"NOTES.md": "a runner dies\n"}, "notes", branch="pr-lost")
    run = origin.pr_run(head, "pr-lost", 9)
    assert run.run_job("plan") == "success"
    first, second = run.jobs("perf")
    assert first.run() == "success", first.describe()
    # Shard 2's runner is lost before it uploads anything.
    second.run(until="Performance gate")
    second.failed = True
    assert second.result() == "failure"
    assert run.results["perf"] == "failure"
    assert not (run.artifacts / "perfguard-shard-2").exists()
    assert run.run_job("perf-merge") == "failure", describe(run, "perf-merge")
    (merge,) = run.ran["perf-merge"]
    step = merge.steps["Merge the shards"]
    assert step.rc == 1, merge.describe()
    (lost,) = [s["cells"] for s in shard_plan(run, 1)["shards"] if s["index"] == 2]
    assert lost and all(cell in step.output for cell in lost), step.output
    # The comment still goes out, with the merge's summary (if the merge wrote one).
    assert run.should_run("comment")


def test_racing_baseline_jobs_lose_no_launch(origin: Origin) -> None:
    # Without the variable: one shard, as before sharding.
    server = origin.server
    before = server.origin_git("rev-parse", f"refs/heads/{BRANCH}")
    third = server.commit({"README.md": "docs 3\n"}, "third")
    fourth = server.commit({"README.md": "docs 4\n"}, "fourth")
    # Both measured and merged while the branch is at `before`; then both push at once.
    runs = [
        origin.baseline(sha, f"race-{sha[:7]}", until=PUSH_STEP, variables={})
        for sha in (third, fourth)
    ]
    for run, job in runs:
        assert run.outputs["plan"]["total"] == "1" and run.outputs["plan"]["shards"] == "[1]"
        assert len(run.ran["baseline"]) == 1
        assert job.result() == "success", job.describe()
    running = [job.start(PUSH_STEP) for _, job in runs]
    pushes = [step.wait() for step in running]
    assert [p.rc for p in pushes] == [0, 0], "\n".join(j.describe() for _, j in runs)
    # Both commits had the same parent: exactly one push was rejected and merged again.
    assert sum("rejected; merging" in p.output for p in pushes) == 1, pushes
    files = server.branch_files(BRANCH)
    for sha in (origin.main[0][0], origin.main[1][0], third, fourth):
        assert sum(p.endswith(f"/{sha}.json") for p in files) == 1, (sha, files)
        assert len(baseline_doc(server, sha)["launches"]) == 1
    chain = server.origin_git("rev-list", "--first-parent", f"refs/heads/{BRANCH}").splitlines()
    assert chain[2] == before and len(chain) == 4


def test_a_baseline_landing_while_the_shards_run_changes_neither_plan_nor_baseline(
    origin: Origin,
) -> None:
    """Shard 1 of a push runs; the parent's baseline lands (its own workflow finishes);
    shard 2 runs. Each shard used to plan from, and judge against, the archive as it
    fetched it: the merge refused ("the shards differ in plan"/"in baseline") and the
    commit's baseline was lost."""
    server = origin.server
    parent = server.commit({"README.md": "docs 5\n"}, "parent, measured late")
    child = server.commit({"README.md": "docs 6\n"}, "child")
    run = origin.push_run(child, "landing-child")
    assert run.run_job("plan") == "success", describe(run, "plan")
    planned = run.outputs["plan"]["baselines"]
    assert len(planned) == 40 and planned == server.origin_git("rev-parse", f"refs/heads/{BRANCH}")
    first = run.job("baseline", matrix={"shard": 1})
    assert first.run() == "success", first.describe()
    # The parent's own push workflow ends now, and pushes its baseline.
    landed, _ = origin.baseline(parent, "landing-parent")
    assert landed.results["baseline-merge"] == "success", describe(landed, "baseline-merge")
    assert server.origin_git("rev-parse", f"refs/heads/{BRANCH}") != planned
    second = run.job("baseline", matrix={"shard": 2})
    assert second.run() == "success", second.describe()
    # Both shards read the archive at the plan job's commit and followed its plan.
    for job in (first, second):
        output = job.steps["Fetch stored baselines"].output
        assert f"from {BRANCH} at {planned}" in output, job.describe()
    plans = [shard_plan(run, k) for k in (1, 2)]
    uploaded = json.loads(next((run.artifacts / "perfguard-plan").glob("*.json")).read_text())
    assert plans[0]["digest"] == plans[1]["digest"] == uploaded["digest"]
    judged = [
        json.loads(
            next((run.artifacts / f"perfguard-shard-{k}").rglob("comparison.json")).read_text()
        )["baseline"]["commit"]
        for k in (1, 2)
    ]
    assert judged[0] == judged[1] != parent
    assert run.run_job("baseline-merge") == "success", describe(run, "baseline-merge")
    assert len(baseline_doc(server, child)["launches"]) == 1
    assert len(baseline_doc(server, parent)["launches"]) == 1


# --- the plan job alone -------------------------------------------------------------------


def push_run(
    workflow: Path, tmp: Path, variables: dict[str, str], server: Server | None = None
) -> WorkflowRun:
    """A push to main running ``workflow`` against ``server`` (else an empty origin)."""
    server = server or Server(tmp / "server")
    sha = server.git("rev-parse", "HEAD") if server.has_branch("main") else "e" * 40
    return WorkflowRun(
        workflow,
        server,
        event_name="push",
        sha=sha,
        ref="refs/heads/main",
        directory=tmp / "run",
        variables=variables,
        environments=ENVIRONMENTS,
    )


def plan_run(tmp: Path, variables: dict[str, str]) -> WorkflowRun:
    """The workflow on a push of the tiny project (the plan job collects its suite)."""
    server = Server(tmp / "server")
    server.commit(project(FAST_US), "two models")
    return push_run(WORKFLOW, tmp, variables, server)


@pytest.mark.parametrize(
    ("value", "shards"), [(None, "[1]"), ("1", "[1]"), ("3", "[1,2,3]"), ("32", None)]
)
def test_the_plan_job_lists_the_shards(tmp_path: Path, value: str | None, shards: str) -> None:
    run = plan_run(tmp_path, {} if value is None else {"PERFGUARD_SHARDS": value})
    assert run.run_job("plan") == "success", describe(run, "plan")
    total = value or "1"
    expected = shards or "[" + ",".join(str(k) for k in range(1, 33)) + "]"
    assert run.outputs["plan"] == {"total": total, "shards": expected}  # no baselines yet
    # The plan of the project's two cells over N shards, for every shard to follow.
    (path,) = (run.artifacts / "perfguard-plan").glob("*.json")
    plan = json.loads(path.read_text())
    assert plan["total"] == int(total) and len(plan["shards"]) == int(total)
    assert sorted(c for s in plan["shards"] for c in s["cells"]) == [
        "suites/s.yaml::spin",
        "suites/s.yaml::steady",
    ]
    assert [j.matrix for j in run.jobs("baseline")] == [
        {"shard": k} for k in range(1, int(total) + 1)
    ]


@pytest.mark.parametrize("value", ["0", "33", "two", "1.5", "02", " 2", "-1", "2\n::warning::x"])
def test_the_plan_job_refuses_a_bad_variable(tmp_path: Path, value: str) -> None:
    run = plan_run(tmp_path, {"PERFGUARD_SHARDS": value})
    assert run.run_job("plan") == "failure"
    (job,) = run.ran["plan"]
    output = job.steps["Number of shards"].output
    assert output.startswith(
        "::error title=perfguard::the repository variable PERFGUARD_SHARDS must be a whole "
        "number from 1 to 32"
    ), output
    # The value is shown, but cannot start a workflow command of its own.
    assert "\n::warning" not in output
    assert run.run_job("baseline") == "skipped"
    assert run.run_job("baseline-merge") == "skipped"


def test_no_shard_reports_at_all_fails_the_merge_with_an_error(tmp_path: Path) -> None:
    server = Server(tmp_path / "server")
    sha = server.commit(project(FAST_US), "a project")
    run = WorkflowRun(
        WORKFLOW,
        server,
        event_name="push",
        sha=sha,
        ref="refs/heads/main",
        directory=tmp_path / "run",
        variables={"PERFGUARD_SHARDS": "2"},
        environments=ENVIRONMENTS,
    )
    assert run.run_job("plan") == "success"
    # Both shard runners lost before they uploaded anything.
    for job in run.jobs("baseline"):
        run.record("baseline", job.instance, "failure", {})
    assert run.run_job("baseline-merge") == "failure"
    (merge,) = run.ran["baseline-merge"]
    assert "found 0 artifact(s)" in merge.steps["actions/download-artifact"].output
    step = merge.steps["Merge and save the baseline"]
    assert step.rc == 1 and step.output.startswith(
        "::error title=perfguard::none of the 2 shard(s) uploaded its reports"
    ), merge.describe()
    assert merge.steps["Push baselines to the perfguard-baselines branch"].skipped
    assert not server.has_branch("perfguard-baselines")


# --- the comment job alone, on planted artifacts ------------------------------------------


def comment_run(
    tmp: Path, head: str, dirs: dict[str, str], comments: list[dict]
) -> tuple[Job, GhRecorder]:
    server = Server(tmp / "server")
    gh = GhRecorder(tmp / "gh", comments=comments)
    event = {"pull_request": {"number": 3, "head": {"sha": head}}}
    run = WorkflowRun(
        WORKFLOW,
        server,
        event_name="pull_request",
        sha=head,
        ref="refs/pull/3/merge",
        base_ref="main",
        event=event,
        directory=tmp / "run",
        gh=gh,
    )
    for name, text in dirs.items():
        (run.artifacts / "perfguard-reports" / name).mkdir(parents=True)
        (run.artifacts / "perfguard-reports" / name / "summary.md").write_text(text)
    run.results["perf-merge"] = "failure"
    job = run.job("comment")
    job.run()
    return job, gh


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_the_comment_prefers_the_ab_directory_and_updates_the_bots_comment(tmp_path: Path) -> None:
    head = "ab" * 20
    existing = [
        {"id": 11, "user": {"login": "someone"}, "body": f"{MARKER} quoted by a human"},
        {"id": 12, "user": {"login": "github-actions[bot]"}, "body": f"{MARKER}\nold"},
    ]
    job, gh = comment_run(
        tmp_path,
        head,
        {
            "000000000000": "decoy",
            head[:12]: f"{MARKER}\narchived",
            f"{head[:12]}-ab": f"{MARKER}\nab",
        },
        existing,
    )
    assert job.result() == "success", job.describe()
    _, patched = gh.calls
    assert patched["argv"][:4] == [
        "api",
        "--method",
        "PATCH",
        "repos/acme/models/issues/comments/12",
    ]
    assert json.loads(patched["stdin"]) == {"body": f"{MARKER}\nab"}


def test_no_summary_of_the_head_commit_means_a_warning_and_no_comment(tmp_path: Path) -> None:
    head = "cd" * 20
    job, gh = comment_run(tmp_path, head, {"000000000000": f"{MARKER}\nother"}, [])
    assert job.result() == "success", job.describe()
    assert gh.calls == []
    output = job.steps["Post or update the summary comment"].output
    assert f"::warning title=perfguard::no summary.md of the head commit {head[:12]}" in output


# --- the harness itself ------------------------------------------------------------------


def test_expressions() -> None:
    context = {"github": {"event_name": "push", "ref": "refs/heads/main", "labels": ["a", "B"]}}
    assert evaluate("github.event_name == 'push' && github.ref == 'refs/heads/main'", context)
    assert not evaluate("github.event_name == 'pull_request' || !(github.ref != 'x')", context)
    assert evaluate("contains(github.labels, 'b') && 'yes' || 'no'", context) == "yes"
    assert evaluate("always() && (x == 'y')", {"x": "Y"}, {"always": True})
    # Short-circuit: the right-hand side is not looked up when it is not needed.
    assert not evaluate("github.event_name == 'pr' && github.event.pull_request.x", context)
    assert evaluate("github.event_name == 'push' || github.nope", context)
    with pytest.raises(HarnessError, match=r"github\.nope"):
        evaluate("github.event_name == 'push' && github.nope", context)
    with pytest.raises(HarnessError, match=r"github\.token"):
        evaluate("github.token", context)
    with pytest.raises(HarnessError, match="not modelled"):
        evaluate("hashFiles('x')", context)
    # Functions of the matrix workflow, and GitHub's text for arrays.
    assert evaluate("fromJSON('[1,2]')", context) == [1, 2]
    assert evaluate("toJSON(fromJSON('{\"a\": [1]}'))", context) == '{\n  "a": [\n    1\n  ]\n}'
    assert evaluate("format('{0}/{1} {{x}}', 1, github.event_name)", context) == "1/push {x}"
    assert evaluate("startsWith(github.ref, 'refs/') && endsWith(github.ref, 'MAIN')", context)
    with pytest.raises(HarnessError, match="fromJSON"):
        evaluate("fromJSON('[1,')", context)
    with pytest.raises(HarnessError, match=r"no argument \{1\}"):
        evaluate("format('{1}', 'a')", context)
    assert substitute("${{ fromJSON('[1]') }}", context) == "Array"


def test_every_stand_in_step_exists() -> None:
    # A renamed Install step would otherwise run for real (pip, PyPI, a GPU check).
    workflow = yaml.safe_load(WORKFLOW.read_text())
    for job in ("plan", "perf", "baseline", "perf-merge", "baseline-merge"):
        names = [s.get("name") for s in workflow["jobs"][job]["steps"]]
        assert all(name in names for name in STAND_IN_STEPS), (job, names)


def test_a_failing_step_skips_the_rest_but_not_always(tmp_path: Path) -> None:
    workflow = tmp_path / "wf.yml"
    workflow.write_text(
        textwrap.dedent(
            """\
            on: push
            env: {TOP: "${{ github.sha }}"}
            jobs:
              j:
                runs-on: ubuntu-latest
                env: {MID: mid}
                steps:
                  - name: one
                    env: {LOW: low}
                    run: |
                      echo "$TOP $MID $LOW $GITHUB_ACTIONS" > "$RUNNER_TEMP/seen"
                      echo "FROM_ONE=1" >> "$GITHUB_ENV"
                  - name: two
                    run: |
                      test "$FROM_ONE" = 1
                      false | true
                      false
                      echo not reached
                  - name: three
                    run: echo skipped
                  - name: four
                    if: always()
                    shell: bash
                    run: false | true; echo "pipefail=$?"
            """
        )
    )
    server = Server(tmp_path / "server")
    run = WorkflowRun(
        workflow,
        server,
        event_name="push",
        sha="f" * 40,
        ref="refs/heads/main",
        directory=tmp_path / "run",
    )
    job = run.job("j")
    assert job.run() == "failure"
    assert (job.temp / "seen").read_text() == f"{'f' * 40} mid low true\n"
    assert job.steps["two"].rc == 1 and "not reached" not in job.steps["two"].output
    assert job.steps["three"].skipped
    # `shell: bash` is -eo pipefail: the failing pipeline stops the step.
    assert job.steps["four"].rc == 1 and "pipefail" not in job.steps["four"].output


def synthetic_run(tmp_path: Path, text: str, **variables: str) -> WorkflowRun:
    tmp_path.mkdir(parents=True, exist_ok=True)
    workflow = tmp_path / "wf.yml"
    workflow.write_text(textwrap.dedent(text))
    return push_run(workflow, tmp_path, variables)


MATRIX_WORKFLOW = """\
    on: push
    jobs:
      a:
        runs-on: ubuntu-latest
        outputs:
          list: ${{ steps.s.outputs.list }}
          unset: ${{ steps.s.outputs.nope }}
        steps:
          - id: s
            env: {N: "${{ vars.N }}", UNSET: "${{ vars.UNSET }}"}
            run: |
              test -z "$UNSET"
              echo "list=[$(seq -s, 1 "$N")]" >> "$GITHUB_OUTPUT"
          - name: second
            env: {SEEN: "${{ steps.s.outputs.list }}", HOW: "${{ steps.s.outcome }}"}
            run: test "$SEEN $HOW" = "[1,2] success"
      b:
        needs: a
        runs-on: ubuntu-latest
        strategy:
          matrix:
            k: ${{ fromJSON(needs.a.outputs.list) }}
            flavour: [x, y]
        env:
          LABEL: ${{ format('{0}/{1}-{2}', matrix.k, matrix.flavour, needs.a.result) }}
        steps:
          - run: |
              mkdir out
              echo "$LABEL" > out/f.txt
              test "$LABEL" != 2/y-success
          - uses: actions/upload-artifact@v0
            if: always()
            with: {name: "out-${{ matrix.k }}-${{ matrix.flavour }}", path: out/}
      c:
        needs: [a, b]
        if: always() && needs.b.result == 'failure'
        runs-on: ubuntu-latest
        steps:
          - uses: actions/download-artifact@v0
            with: {pattern: out-1-*, path: apart}
          - uses: actions/download-artifact@v0
            with: {pattern: out-2-*, path: together, merge-multiple: true}
          - uses: actions/download-artifact@v0
            with: {pattern: none-*, path: nothing}
      d:
        needs: a
        runs-on: ubuntu-latest
        steps:
          - env: {B: "${{ needs.b.result }}"}
            run: echo "$B"
"""


def test_matrix_outputs_needs_and_vars(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path, MATRIX_WORKFLOW, N="2")
    with pytest.raises(HarnessError, match="job 'b' needs 'a', which has not run"):
        run.jobs("b")
    assert run.run_job("a") == "success", describe(run, "a")
    # Outputs from $GITHUB_OUTPUT through the job's outputs:; an unset one is empty.
    assert run.outputs["a"] == {"list": "[1,2]"}
    assert run.context("b")["needs"]["a"]["outputs"]["unset"] is None
    with pytest.raises(HarnessError, match="matrix job"):
        run.job("b")
    assert run.run_job("b") == "failure"
    jobs = run.ran["b"]
    assert [j.matrix for j in jobs] == [
        {"k": 1, "flavour": "x"},
        {"k": 1, "flavour": "y"},
        {"k": 2, "flavour": "x"},
        {"k": 2, "flavour": "y"},
    ]
    assert [j.result() for j in jobs] == ["success", "success", "success", "failure"]
    assert sorted(p.name for p in run.artifacts.iterdir()) == [
        "out-1-x",
        "out-1-y",
        "out-2-x",
        "out-2-y",
    ]
    assert (run.artifacts / "out-2-y" / "f.txt").read_text() == "2/y-success\n"
    # A job that needs a failed matrix job runs only with always() (or failure()).
    assert run.run_job("c") == "success", describe(run, "c")
    (c,) = run.ran["c"]
    assert sorted(p.name for p in (c.workspace / "apart").iterdir()) == ["out-1-x", "out-1-y"]
    assert (c.workspace / "together" / "f.txt").read_text() in ("2/x-success\n", "2/y-success\n")
    # The last download (steps are keyed by name) matched nothing: no error.
    assert "found 0 artifact(s)" in c.steps["actions/download-artifact"].output
    # `needs` holds only the jobs of needs:, as on GitHub.
    with pytest.raises(HarnessError, match=r"needs\.b\.result"):
        run.run_job("d")


def test_unset_vars_are_empty_and_the_matrix_must_be_a_list(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path, MATRIX_WORKFLOW)
    # A job whose step with the output never ran: its output is empty, not an error.
    one = run.job("a")
    one.run(until='test -z "$UNSET"')  # stops before the step with id s
    one.failed = True
    assert one.result() == "failure" and run.outputs.get("a", {}) == {}
    run = synthetic_run(tmp_path / "again", MATRIX_WORKFLOW)
    # N is empty, not an error: the list comes out empty.
    assert run.run_job("a") == "failure"
    assert run.outputs["a"] == {"list": "[]"}
    assert run.run_job("b") == "skipped"  # a failed: b is skipped, its matrix unread
    with pytest.raises(HarnessError, match=r"matrix\.k must be a non-empty list, got \[\]"):
        run.matrix("b")


def test_a_pr_that_edits_the_workflow_cannot_reach_the_baselines_credential(
    tmp_path: Path,
) -> None:
    """A same-repository PR may edit perfguard.yml: give a PR-path job the write token,
    reference the environment, read its secret. The token cannot push to the branch
    (docs/ci.md: only the App may), and the environment runs no job of the PR's branch,
    so its key never reaches one (GitHub's rule, as the harness models it)."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steal = {
        "runs-on": "ubuntu-latest",
        "permissions": {"contents": "write"},
        "steps": [
            {
                "name": "read the key",
                "env": {"KEY": "${{ secrets.PERFGUARD_BASELINES_APP_KEY }}"},
                "run": 'test -n "$KEY" && touch "$RUNNER_TEMP/stolen"',
            }
        ],
    }
    workflow["jobs"]["steal"] = {**steal, "environment": {"name": "perfguard-baselines"}}
    workflow["jobs"]["peek"] = steal
    edited = tmp_path / "perfguard.yml"
    edited.write_text(yaml.safe_dump(workflow))
    server = Server(tmp_path / "server")
    server.commit(project(FAST_US), "a project")
    head = server.commit({"NOTES.md": "x\n"}, "a PR", branch="evil")
    event = {"pull_request": {"number": 1, "head": {"sha": head, "ref": "evil"}}}
    run = WorkflowRun(
        edited,
        server,
        event_name="pull_request",
        sha=head,
        ref="refs/pull/1/merge",
        base_ref="main",
        head_ref="evil",
        event=event,
        directory=tmp_path / "run",
        environments=ENVIRONMENTS,
    )
    assert run.run_job("steal") == "failure"
    (job,) = run.ran["steal"]
    assert list(job.steps) == ["environment protection rules"], job.describe()
    assert 'Branch "evil" is not allowed to deploy to perfguard-baselines' in job.describe()
    assert not (job.temp / "stolen").exists()
    # Outside the environment the secret is empty.
    assert run.run_job("peek") == "failure"
    assert not (run.ran["peek"][0].temp / "stolen").exists()
    # On main, the job that references it gets the key (the push path).
    main = push_run(edited, tmp_path / "main", {}, server)
    assert main.context("steal")["secrets"]["PERFGUARD_BASELINES_APP_KEY"] == APP_KEY
    assert main.context("peek")["secrets"]["PERFGUARD_BASELINES_APP_KEY"] is None


def test_the_install_stand_in_has_what_the_lock_has(tmp_path: Path) -> None:
    run = synthetic_run(
        tmp_path,
        """\
        on: push
        env:
          LOCK_FILE: .github/requirements/perfguard-gpu.txt
          MERGE_LOCK_FILE: .github/requirements/perfguard-merge.txt
        jobs:
          gpu:
            runs-on: ubuntu-latest
            steps:
              - name: Install
                run: .venv/bin/python -m pip install --require-hashes -r "$LOCK_FILE"
              - run: .venv/bin/python -c "import importlib.util as u; assert u.find_spec('torch')"
          merge:
            runs-on: ubuntu-latest
            steps:
              - uses: actions/setup-python@v0
                with: {python-version: "3.11"}
              - name: Install
                run: .venv/bin/python -m pip install --require-hashes -r "$MERGE_LOCK_FILE"
              - run: |
                  python3 -c "import sys; print(sys.executable)"
                  .venv/bin/python -c "import importlib.util as u; assert not u.find_spec('torch')"
                  .venv/bin/python -c "import numpy, yaml, perfguard"
                  ! .venv/bin/python -c "import torch" 2> err.txt
                  grep -q "No module named 'torch'" err.txt
                  .venv/bin/perfguard --help
        """,
    )
    assert run.run_job("gpu") == "success", describe(run, "gpu")
    # The GPU lock has them all (onnxruntime as onnxruntime-gpu): nothing hidden.
    assert "without" not in run.ran["gpu"][0].steps["Install"].output
    assert run.run_job("merge") == "success", describe(run, "merge")
    (merge,) = run.ran["merge"]
    assert "without onnxruntime, tensorrt, torch, transformers" in merge.steps["Install"].output
    assert "usage: " in merge.steps['python3 -c "import sys; print(sys.executable)"'].output
