"""perfguard.yml's jobs, run step by step (tests/workflow_harness.py) on a tiny project.

The project is one suite whose model busy-waits a set number of microseconds per call
(``SPIN_MODEL``; the cost is a ``kwargs`` value in the suite file, so a commit changes
it). Its origin is a local bare repository; the jobs run the workflow's own ``run:``
steps (git, tar, jq, the pytest command lines) with the stand-ins the harness documents.
A planted regression is 4x the cost and the gate limit is +50%, so no verdict here
depends on how busy this machine is.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import SPIN_MODEL
from tests.workflow_harness import (
    ROOT,
    STAND_IN_STEPS,
    GhRecorder,
    HarnessError,
    Job,
    Server,
    WorkflowRun,
    evaluate,
)

pytest.importorskip("torch")  # the spin model is a torch module

WORKFLOW = ROOT / ".github" / "workflows" / "perfguard.yml"
BRANCH = "perfguard-baselines"
PUSH_STEP = "Push baselines to the perfguard-baselines branch"
MARKER = "<!-- perfguard-summary -->"
FAST_US, SLOW_US = 300, 1200

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
scenarios:
  - name: spin
    model: spin
"""


def project(us: int) -> dict[str, str]:
    return {
        "pytest.ini": "[pytest]\nperfguard_contention_limit = 1.01\n",
        ".gitignore": "reports/\n.venv/\n.perfguard/\n__pycache__/\n.pytest_cache/\n",
        "baselines/.gitkeep": "",
        "suites/spinmodel.py": SPIN_MODEL,
        "suites/s.yaml": SUITE.format(us=us),
    }


@dataclass
class Origin:
    server: Server
    tmp: Path
    main: list[tuple[str, Job]]

    def push_run(self, sha: str, label: str) -> WorkflowRun:
        return WorkflowRun(
            WORKFLOW,
            self.server,
            event_name="push",
            sha=sha,
            ref="refs/heads/main",
            directory=self.tmp / label,
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
        )

    def baseline(self, sha: str, label: str, *, until: str | None = None) -> Job:
        job = self.push_run(sha, label).job("baseline")
        job.run(until=until)
        return job


def head_report(run: WorkflowRun, head: str) -> Path:
    """The head commit's report folder in the artifact, as the comment job picks it."""
    reports = run.artifacts / "perfguard-reports"
    found = [d for d in (reports / f"{head[:12]}-ab", reports / head[:12]) if d.is_dir()]
    assert found, sorted(p.name for p in reports.iterdir())
    return found[0]


def baseline_doc(server: Server, sha: str) -> dict:
    (path,) = [p for p in server.branch_files(BRANCH) if p.endswith(f"/{sha}.json")]
    return json.loads(server.origin_git("show", f"refs/heads/{BRANCH}:{path}"))


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Origin:
    """main with two commits, each measured by the baseline job, in order."""
    tmp = tmp_path_factory.mktemp("workflow-runs")
    server = Server(tmp / "server")
    found = Origin(server, tmp, [])
    first = server.commit(project(FAST_US), "a model")
    found.main.append((first, found.baseline(first, "main-1")))
    second = server.commit({"README.md": "docs\n"}, "docs only")
    found.main.append((second, found.baseline(second, "main-2")))
    return found


def test_main_pushes_create_then_extend_the_baselines_branch(origin: Origin) -> None:
    server = origin.server
    (first, job1), (second, job2) = origin.main
    assert job1.result() == "success", job1.describe()
    assert job2.result() == "success", job2.describe()
    assert "no perfguard-baselines branch yet; this run creates it" in (
        job1.steps["Fetch stored baselines"].output
    )
    assert [s for s in job1.steps.values() if s.stood_in] == [
        job1.steps["actions/checkout"],
        job1.steps["Install"],
        job1.steps["Upload reports"],
    ]
    assert server.has_branch(BRANCH)
    files = server.branch_files(BRANCH)
    assert sum(p.endswith(f"/{first}.json") for p in files) == 1
    assert sum(p.endswith(f"/{second}.json") for p in files) == 1
    for sha in (first, second):
        doc = baseline_doc(server, sha)
        assert doc["kind"] == "perfguard-baseline" and len(doc["launches"]) == 1
    log = server.origin_git("log", "--format=%s", f"refs/heads/{BRANCH}").splitlines()
    assert log == [f"perfguard baseline for {second}", f"perfguard baseline for {first}"]
    # The token reached git through the environment only.
    token = origin.push_run(first, "token").github["token"]
    for job in (job1, job2):
        assert token not in (job.workspace / ".git" / "config").read_text()
        assert all(token not in step.output for step in job.steps.values())
    # main is left alone: its tip is the developer's commit, not a bot's.
    assert server.origin_git("rev-parse", "refs/heads/main") == second
    # The push event runs the baseline job only.
    run = origin.push_run(second, "main-2-others")
    assert run.job("perf").run() == "skipped"


def test_a_pr_with_a_planted_regression_fails_and_the_comment_is_its_summary(
    origin: Origin,
) -> None:
    server = origin.server
    head = server.commit(project(SLOW_US), "4x slower model", branch="pr-slow")
    gh = GhRecorder(origin.tmp / "gh-slow")
    run = origin.pr_run(head, "pr-slow", 7, gh)
    perf = run.job("perf")
    assert perf.run() == "failure", perf.describe()
    fetched = perf.steps["Fetch stored baselines"]
    assert fetched.rc == 0 and f"files from {BRANCH}" in fetched.output, perf.describe()
    gate = perf.steps["Performance gate"]
    assert gate.rc == 1, perf.describe()
    assert "P95 latency" in gate.output and "measured in this run, interleaved" in gate.output
    assert perf.steps["Upload reports"].rc == 0  # if: always()
    report = head_report(run, head)
    (verdict,) = json.loads((report / "comparison.json").read_text())["verdicts"]
    assert verdict["mode"] == "ab" and verdict["verdict"] == "regression"
    # A decoy that sorts before the head's directory: the old summaries[0] took it.
    decoy = run.artifacts / "perfguard-reports" / "000000000000"
    decoy.mkdir()
    (decoy / "summary.md").write_text(f"{MARKER}\nthe wrong commit\n")

    comment = run.job("comment")
    assert comment.run() == "success", comment.describe()
    ((listed, posted),) = [gh.calls]  # one list, one post
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
    perf = run.job("perf")
    assert perf.run() == "success", perf.describe()
    report = head_report(run, head)
    (verdict,) = json.loads((report / "comparison.json").read_text())["verdicts"]
    assert verdict["mode"] == "ab" and verdict["verdict"] in ("unchanged", "improvement")
    # The stored baselines were there for the report's history.
    assert f"files from {BRANCH}" in perf.steps["Fetch stored baselines"].output


def test_racing_baseline_jobs_lose_no_launch(origin: Origin) -> None:
    server = origin.server
    before = server.origin_git("rev-parse", f"refs/heads/{BRANCH}")
    third = server.commit({"README.md": "docs 3\n"}, "third")
    fourth = server.commit({"README.md": "docs 4\n"}, "fourth")
    # Both measured while the branch is at `before`; then both push at once.
    jobs = [origin.baseline(sha, f"race-{sha[:7]}", until=PUSH_STEP) for sha in (third, fourth)]
    for job in jobs:
        assert job.result() == "success", job.describe()
    running = [job.start(PUSH_STEP) for job in jobs]
    pushes = [step.wait() for step in running]
    assert [p.rc for p in pushes] == [0, 0], "\n".join(j.describe() for j in jobs)
    # Both commits had the same parent: exactly one push was rejected and merged again.
    assert sum("rejected; merging" in p.output for p in pushes) == 1, pushes
    files = server.branch_files(BRANCH)
    for sha in (origin.main[0][0], origin.main[1][0], third, fourth):
        assert sum(p.endswith(f"/{sha}.json") for p in files) == 1, (sha, files)
        assert len(baseline_doc(server, sha)["launches"]) == 1
    chain = server.origin_git("rev-list", "--first-parent", f"refs/heads/{BRANCH}").splitlines()
    assert chain[2] == before and len(chain) == 4


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
    run.results["perf"] = "failure"
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


def test_every_stand_in_step_exists() -> None:
    # A renamed Install step would otherwise run for real (pip, PyPI, a GPU check).
    workflow = yaml.safe_load(WORKFLOW.read_text())
    for job in ("perf", "baseline"):
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
