"""perfguard.yml's jobs, run step by step (tests/workflow_harness.py): the plan job, the
comment job on planted artifacts, and the harness itself.

(The end-to-end runs of the shard matrix and its merge on a tiny project come in the
next commit: they need `perfguard merge --save` to judge contention by the project's
`perfguard_contention_limit`, as the shards do.)
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.workflow_harness import (
    ROOT,
    STAND_IN_STEPS,
    GhRecorder,
    HarnessError,
    Job,
    Server,
    WorkflowRun,
    evaluate,
    substitute,
)

pytest.importorskip("torch")  # the GPU lock's Install stand-in finds torch

WORKFLOW = ROOT / ".github" / "workflows" / "perfguard.yml"
MARKER = "<!-- perfguard-summary -->"


def describe(run: WorkflowRun, *names: str) -> str:
    return "\n".join(job.describe() for name in names for job in run.ran[name])


# --- the plan job alone -------------------------------------------------------------------


def plan_run(tmp: Path, variables: dict[str, str]) -> WorkflowRun:
    return WorkflowRun(
        WORKFLOW,
        Server(tmp / "server"),
        event_name="push",
        sha="e" * 40,
        ref="refs/heads/main",
        directory=tmp / "run",
        variables=variables,
    )


@pytest.mark.parametrize(
    ("value", "shards"), [(None, "[1]"), ("1", "[1]"), ("3", "[1,2,3]"), ("32", None)]
)
def test_the_plan_job_lists_the_shards(tmp_path: Path, value: str | None, shards: str) -> None:
    run = plan_run(tmp_path, {} if value is None else {"PERFGUARD_SHARDS": value})
    assert run.run_job("plan") == "success", describe(run, "plan")
    total = value or "1"
    expected = shards or "[" + ",".join(str(k) for k in range(1, 33)) + "]"
    assert run.outputs["plan"] == {"total": total, "shards": expected}
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
    sha = server.commit({"baselines/.gitkeep": ""}, "a project")
    run = WorkflowRun(
        WORKFLOW,
        server,
        event_name="push",
        sha=sha,
        ref="refs/heads/main",
        directory=tmp_path / "run",
        variables={"PERFGUARD_SHARDS": "2"},
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
    for job in ("perf", "baseline", "perf-merge", "baseline-merge"):
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
    return WorkflowRun(
        workflow,
        Server(tmp_path / "server"),
        event_name="push",
        sha="f" * 40,
        ref="refs/heads/main",
        directory=tmp_path / "run",
        variables=variables,
    )


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
