"""Run the `run:` steps of a GitHub workflow on this machine, against a local origin.

A test builds a ``Server`` (a bare repository at ``<server>/<owner>/<repo>.git``, so
``${GITHUB_SERVER_URL}/${GITHUB_REPOSITORY}.git`` with ``GITHUB_SERVER_URL=file://<server>``
is that repository), then a ``WorkflowRun`` for one event and runs its jobs::

    run = WorkflowRun(WORKFLOW, server, event_name="push", sha=sha, ref="refs/heads/main")
    job = run.job("baseline")
    job.run()                  # every step in order, as a runner would
    job.steps["Fetch stored baselines"].output

What runs for real: every ``run:`` step, with bash as GitHub runs it (no ``shell:``:
``bash -e {0}``; ``shell: bash``: ``bash --noprofile --norc -eo pipefail {0}``; ``sh``,
``python`` and ``... {0}`` templates likewise), in the job's workspace, with the
workflow's, job's and step's ``env:`` (``${{ }}`` resolved from the run's context),
GitHub's variables (``GITHUB_SHA``, ``GITHUB_REF``, ``GITHUB_WORKSPACE``,
``GITHUB_STEP_SUMMARY``/``GITHUB_OUTPUT``/``GITHUB_ENV``/``GITHUB_PATH`` files,
``RUNNER_TEMP``, ...), and a clean environment (its own ``HOME``; nothing of the
calling pytest leaks in). Job and step ``if:`` conditions are evaluated (a small
evaluator of GitHub's expression language: paths, literals, ``== != && || !``,
``always() success() failure() cancelled() contains()``); a step without ``if:`` is
skipped after a failure, like ``success()``. ``runs-on``, ``permissions``,
``concurrency`` and ``timeout-minutes`` are GitHub's business and are not modelled.

What is stood in for, and why:

* ``actions/checkout``: ``git clone`` of the origin, then the commit the action would
  check out (``with.ref`` or ``GITHUB_SHA``), detached; only ``fetch-depth: 0`` is
  supported, and no credentials are stored (as with ``persist-credentials: false``).
* ``actions/upload-artifact`` / ``actions/download-artifact``: a copy to and from a
  folder per artifact name, shared by the jobs of one ``WorkflowRun``.
* the step named ``Install`` (see ``STAND_IN_STEPS``): it builds a venv from the
  hash lock and needs PyPI and a GPU; instead ``.venv/bin/python`` becomes a wrapper of
  this interpreter with ``PYTHONPATH`` at the perfguard under test, so the workflow's
  ``pytest --perfguard`` runs this checkout's perfguard. Its real text is checked by
  tests/test_workflows.py (actionlint, zizmor, the exact pip commands).
* ``gh``: a recorder on ``PATH`` logs each call's argv and stdin (``GhRecorder``)
  and answers ``gh api .../comments`` with the comments the test planted (``--jq``
  applied with the real ``jq``).

Any other ``uses:`` step, or an expression the context does not define, is an error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import run_git

ROOT = Path(__file__).resolve().parent.parent
STAND_IN_STEPS = ("Install",)
STEP_TIMEOUT_S = 600


class HarnessError(Exception):
    """The workflow uses something the harness does not model."""


# --- expressions ---------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)"
    r"|(?P<op>==|!=|&&|\|\||<=|>=|[!<>(),])|(?P<name>[A-Za-z_][\w.*\-]*))"
)
_EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise HarnessError(f"cannot parse expression {text!r} at {text[pos:]!r}")
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    return tokens


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def _loose_eq(a: Any, b: Any) -> bool:
    # GitHub compares strings case-insensitively.
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return bool(a == b)


class _Parser:
    def __init__(self, text: str, context: Mapping[str, Any], status: Mapping[str, bool]):
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0
        self.context = context
        self.status = status
        self.skip = 0

    def parse(self) -> Any:
        value = self._or()
        if self.pos != len(self.tokens):
            raise HarnessError(f"trailing tokens in expression {self.text!r}")
        return value

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, op: str) -> bool:
        if self._peek() == ("op", op):
            self.pos += 1
            return True
        return False

    # `||` and `&&` short-circuit as on GitHub: the operand not needed is parsed but
    # not evaluated, so `event_name == 'pull_request' && github.event.pull_request...`
    # needs no pull_request in a push's context.
    def _or(self) -> Any:
        value = self._and()
        while self._take("||"):
            if _truthy(value):
                self._skipping(self._and)
            else:
                value = self._and()
        return value

    def _and(self) -> Any:
        value = self._cmp()
        while self._take("&&"):
            if _truthy(value):
                value = self._cmp()
            else:
                self._skipping(self._cmp)
        return value

    def _skipping(self, parse: Callable[[], Any]) -> None:
        self.skip += 1
        try:
            parse()
        finally:
            self.skip -= 1

    def _cmp(self) -> Any:
        value = self._unary()
        if self._take("=="):
            return _loose_eq(value, self._unary())
        if self._take("!="):
            return not _loose_eq(value, self._unary())
        return value

    def _unary(self) -> Any:
        if self._take("!"):
            return not _truthy(self._unary())
        return self._primary()

    def _primary(self) -> Any:
        token = self._peek()
        if token is None:
            raise HarnessError(f"expression {self.text!r} ends too soon")
        self.pos += 1
        kind, text = token
        if (kind, text) == ("op", "("):
            value = self._or()
            if not self._take(")"):
                raise HarnessError(f"missing ) in {self.text!r}")
            return value
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if kind == "name":
            if text in ("true", "false", "null"):
                return {"true": True, "false": False, "null": None}[text]
            if self._take("("):
                args = []
                if not self._take(")"):
                    args.append(self._or())
                    while self._take(","):
                        args.append(self._or())
                    if not self._take(")"):
                        raise HarnessError(f"missing ) in {self.text!r}")
                return self._call(text, args)
            return self._lookup(text)
        raise HarnessError(f"unexpected {text!r} in expression {self.text!r}")

    def _call(self, name: str, args: list[Any]) -> Any:
        if self.skip:
            return None
        if name in self.status and not args:
            return self.status[name]
        if name == "contains" and len(args) == 2:
            haystack, needle = args
            if isinstance(haystack, list):
                return any(_loose_eq(item, needle) for item in haystack)
            return str(needle).lower() in str(haystack).lower()
        raise HarnessError(f"function {name}() is not modelled (in {self.text!r})")

    def _lookup(self, path: str) -> Any:
        if self.skip:
            return None
        value: Any = self.context
        for part in path.split("."):
            if not isinstance(value, Mapping) or part not in value:
                raise HarnessError(
                    f"expression {self.text!r}: {path!r} is not in the harness's context "
                    f"(add it to WorkflowRun's context)"
                )
            value = value[part]
        return value


def evaluate(
    expr: str, context: Mapping[str, Any], status: Mapping[str, bool] | None = None
) -> Any:
    """The value of one GitHub expression (without ``${{ }}``)."""
    return _Parser(expr, context, status or {}).parse()


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def substitute(text: str, context: Mapping[str, Any]) -> str:
    """``text`` with each ``${{ expr }}`` replaced by its value."""
    return _EXPR.sub(lambda m: _as_text(evaluate(m.group(1), context)), text)


# --- the origin ----------------------------------------------------------------------


class Server:
    """``<dir>/<owner>/<repo>.git`` (bare) plus a developer clone that pushes to it."""

    def __init__(self, directory: Path, repository: str = "acme/models") -> None:
        self.directory = directory
        self.repository = repository
        self.url = f"file://{directory}"
        self.bare = directory / f"{repository}.git"
        self.bare.parent.mkdir(parents=True)
        run_git(directory, "init", "-q", "--bare", "-b", "main", str(self.bare))
        self.dev = directory.parent / "dev"
        run_git(directory.parent, "clone", "-q", str(self.bare), str(self.dev))
        run_git(self.dev, "symbolic-ref", "HEAD", "refs/heads/main")

    def git(self, *args: str) -> str:
        return run_git(self.dev, *args)

    def commit(
        self, files: Mapping[str, str], message: str, *, branch: str = "main", start: str = "main"
    ) -> str:
        """Write ``files`` on ``branch`` (new ones start at ``start``), commit, push; the sha."""
        if self.git("symbolic-ref", "--short", "HEAD") != branch:
            exists = bool(self.git("branch", "--list", branch))
            self.git("checkout", "-q", *((branch,) if exists else ("-b", branch, start)))
        for name, text in files.items():
            path = self.dev / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        self.git("push", "-q", "origin", f"HEAD:refs/heads/{branch}")
        return self.git("rev-parse", "HEAD")

    def origin_git(self, *args: str) -> str:
        return run_git(self.bare, *args)

    def branch_files(self, branch: str) -> list[str]:
        out = self.origin_git("ls-tree", "-r", "--name-only", f"refs/heads/{branch}")
        return sorted(out.splitlines())

    def has_branch(self, branch: str) -> bool:
        refs = self.origin_git("for-each-ref", "--format=%(refname)", f"refs/heads/{branch}")
        return bool(refs)


# --- gh ------------------------------------------------------------------------------

_GH = """#!{python}
# gh stand-in of tests/workflow_harness.py: logs argv and stdin, answers comment lists.
import json, os, subprocess, sys
args = sys.argv[1:]
stdin = sys.stdin.read() if "--input" in args and args[args.index("--input") + 1] == "-" else ""
with open(os.environ["GH_RECORDER_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({{"argv": args, "stdin": stdin}}) + "\\n")
if args[:1] != ["api"]:
    sys.exit("gh stand-in: only `gh api` is modelled: " + " ".join(args))
method = args[args.index("--method") + 1] if "--method" in args else "GET"
endpoint = next(a for a in args if a.startswith("repos/"))
if method == "GET" and endpoint.endswith("/comments"):
    with open(os.environ["GH_RECORDER_COMMENTS"], encoding="utf-8") as f:
        payload = f.read()
else:
    payload = json.dumps({{"id": 4242}})
if "--jq" in args:
    jq = args[args.index("--jq") + 1]
    sys.exit(subprocess.run(["jq", "-r", jq], input=payload, text=True).returncode)
print(payload)
"""


@dataclass
class GhRecorder:
    """The ``gh`` on the jobs' PATH: ``calls`` are what the workflow asked of it."""

    directory: Path
    comments: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        gh = self.directory / "gh"
        gh.write_text(_GH.format(python=sys.executable), encoding="utf-8")
        gh.chmod(gh.stat().st_mode | stat.S_IXUSR)
        self.log.touch()

    @property
    def log(self) -> Path:
        return self.directory / "gh-calls.jsonl"

    @property
    def comments_file(self) -> Path:
        return self.directory / "gh-comments.json"

    def env(self) -> dict[str, str]:
        self.comments_file.write_text(json.dumps(self.comments), encoding="utf-8")
        return {"GH_RECORDER_LOG": str(self.log), "GH_RECORDER_COMMENTS": str(self.comments_file)}

    @property
    def calls(self) -> list[dict[str, Any]]:
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line]


# --- running -------------------------------------------------------------------------


@dataclass
class StepRun:
    """One step's outcome: ``rc`` None when it was skipped."""

    name: str
    rc: int | None
    output: str = ""
    stood_in: bool = False

    @property
    def skipped(self) -> bool:
        return self.rc is None


def _shell_argv(shell: str | None, script: Path) -> list[str]:
    if shell is None:
        return ["bash", "-e", str(script)]
    templates = {
        "bash": "bash --noprofile --norc -eo pipefail {0}",
        "sh": "sh -e {0}",
        "python": f"{sys.executable} {{0}}",
    }
    template = templates.get(shell, shell)
    if "{0}" not in template:
        raise HarnessError(f"shell {shell!r} is not modelled")
    return [part.replace("{0}", str(script)) for part in template.split()]


def _step_name(step: Mapping[str, Any]) -> str:
    if "name" in step:
        return str(step["name"])
    if "uses" in step:
        return str(step["uses"]).split("@")[0]
    return str(step["run"]).splitlines()[0]


def _read_env_file(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    lines = iter(path.read_text(encoding="utf-8").splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delimiter = line.split("<<", 1)
            body = []
            for more in lines:
                if more == delimiter:
                    break
                body.append(more)
            found[key] = "\n".join(body)
        elif "=" in line:
            key, value = line.split("=", 1)
            found[key] = value
    return found


class WorkflowRun:
    """One run of a workflow for one event: its context, artifacts and jobs."""

    def __init__(
        self,
        workflow: Path,
        server: Server,
        *,
        event_name: str,
        sha: str,
        ref: str,
        directory: Path,
        event: Mapping[str, Any] | None = None,
        base_ref: str = "",
        head_ref: str = "",
        gh: GhRecorder | None = None,
    ) -> None:
        self.workflow_path = workflow
        self.workflow = yaml.safe_load(workflow.read_text(encoding="utf-8"))
        self.server = server
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.artifacts = directory / "artifacts"
        self.gh = gh or GhRecorder(directory / "gh")
        self.results: dict[str, str] = {}
        self.event = dict(event or {})
        self.github: dict[str, Any] = {
            "token": "ghs_harness_token_not_a_secret",
            "event_name": event_name,
            "sha": sha,
            "ref": ref,
            "ref_name": ref.rsplit("/", 1)[-1],
            "base_ref": base_ref,
            "head_ref": head_ref,
            "repository": server.repository,
            "repository_owner": server.repository.split("/")[0],
            "server_url": server.url,
            "run_id": "1",
            "run_number": "1",
            "event": self.event,
        }

    def context(self, **extra: Any) -> dict[str, Any]:
        needs = {name: {"result": result} for name, result in self.results.items()}
        return {"github": self.github, "needs": needs, **extra}

    def job(self, name: str) -> Job:
        if name not in self.workflow["jobs"]:
            raise HarnessError(f"no job {name!r} in {self.workflow_path.name}")
        return Job(self, name)


class Job:
    """One job of a ``WorkflowRun`` on a fresh runner (its own workspace, temp, home)."""

    def __init__(self, run: WorkflowRun, name: str) -> None:
        self.run_ = run
        self.name = name
        self.spec: dict[str, Any] = run.workflow["jobs"][name]
        base = run.directory / "jobs" / name
        suffix = 1
        while base.exists():
            suffix += 1
            base = run.directory / "jobs" / f"{name}-{suffix}"
        self.dir = base
        self.workspace = base / "work" / run.server.repository.split("/")[1]
        self.temp = base / "temp"
        self.home = base / "home"
        for path in (self.workspace, self.temp, self.home):
            path.mkdir(parents=True)
        self.files = {
            key: self.temp / f"{key.lower()}.txt"
            for key in ("GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH")
        }
        for path in self.files.values():
            path.touch()
        (self.temp / "event.json").write_text(json.dumps(run.event), encoding="utf-8")
        self.steps: dict[str, StepRun] = {}
        self.added_env: dict[str, str] = {}
        self.added_path: list[str] = []
        self.failed = False
        self._index = 0

    # The job's environment, before step env.
    def _base_env(self) -> dict[str, str]:
        github = self.run_.github
        env = {
            "PATH": os.pathsep.join(
                [*self.added_path, str(self.run_.gh.directory), os.environ.get("PATH", "")]
            ),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKFLOW": str(self.run_.workflow.get("name", "")),
            "GITHUB_JOB": self.name,
            "GITHUB_RUN_ID": github["run_id"],
            "GITHUB_RUN_NUMBER": github["run_number"],
            "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_SHA": github["sha"],
            "GITHUB_REF": github["ref"],
            "GITHUB_REF_NAME": github["ref_name"],
            "GITHUB_BASE_REF": github["base_ref"],
            "GITHUB_HEAD_REF": github["head_ref"],
            "GITHUB_REPOSITORY": github["repository"],
            "GITHUB_REPOSITORY_OWNER": github["repository_owner"],
            "GITHUB_SERVER_URL": github["server_url"],
            "GITHUB_API_URL": "http://harness.invalid/api",
            "GITHUB_EVENT_NAME": github["event_name"],
            "GITHUB_EVENT_PATH": str(self.temp / "event.json"),
            "GITHUB_WORKSPACE": str(self.workspace),
            "RUNNER_TEMP": str(self.temp),
            "RUNNER_OS": "Linux",
            "RUNNER_ARCH": "X64",
            **{key: str(path) for key, path in self.files.items()},
            **self.run_.gh.env(),
        }
        context = self.run_.context()
        for scope in (self.run_.workflow.get("env") or {}, self.spec.get("env") or {}):
            env.update({k: substitute(str(v), context) for k, v in scope.items()})
        env.update(self.added_env)
        return env

    def _status(self) -> dict[str, bool]:
        return {
            "always": True,
            "success": not self.failed,
            "failure": self.failed,
            "cancelled": False,
        }

    def _should_run(self, condition: Any) -> bool:
        if condition is None:
            return not self.failed
        text = str(condition).strip()
        match = _EXPR.fullmatch(text)
        text = match.group(1) if match else text
        value = evaluate(text, self.run_.context(), self._status())
        # A condition without a status function implies success() && (...).
        if not re.search(r"\b(always|success|failure|cancelled)\(", text):
            return not self.failed and _truthy(value)
        return _truthy(value)

    def _step_list(self) -> list[dict[str, Any]]:
        return list(self.spec["steps"])

    def step_names(self) -> list[str]:
        return [_step_name(step) for step in self._step_list()]

    def should_run_job(self) -> bool:
        """The job's ``if:``, with the status functions about the jobs it needs."""
        needs = self.spec.get("needs")
        deps = [needs] if isinstance(needs, str) else list(needs or [])
        results = [self.run_.results.get(dep) for dep in deps]
        status = {
            "always": True,
            "cancelled": False,
            "success": all(r == "success" for r in results),
            "failure": any(r == "failure" for r in results),
        }
        text = str(self.spec.get("if", "success()"))
        value = evaluate(text, self.run_.context(), status)
        if not re.search(r"\b(always|success|failure|cancelled)\(", text):
            return status["success"] and _truthy(value)
        return _truthy(value)

    def run(self, *, until: str | None = None) -> str:
        """Run the remaining steps (those before ``until``); the job's result so far."""
        if self._index == 0 and not self.should_run_job():
            self.run_.results[self.name] = "skipped"
            return "skipped"
        steps = self._step_list()
        if until is not None and until not in self.step_names():
            raise HarnessError(f"job {self.name!r} has no step {until!r}")
        while self._index < len(steps):
            step = steps[self._index]
            if until is not None and _step_name(step) == until:
                break
            self._index += 1
            self._finish(self._run_step(step))
        return self.result()

    def result(self) -> str:
        outcome = "failure" if self.failed else "success"
        self.run_.results[self.name] = outcome
        return outcome

    def start(self, name: str) -> RunningStep:
        """Start the next step, ``name``, without waiting (to race it with another job's)."""
        step = self._step_list()[self._index]
        if _step_name(step) != name or "run" not in step:
            raise HarnessError(f"the next step of {self.name!r} is {_step_name(step)!r}")
        self._index += 1
        if not self._should_run(step.get("if")):
            return RunningStep(self, StepRun(name, None), None)
        argv, env, cwd = self._prepare(step)
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return RunningStep(self, StepRun(name, None), proc)

    def _finish(self, outcome: StepRun) -> None:
        self.steps[outcome.name] = outcome
        if outcome.rc not in (None, 0):
            self.failed = True
        self.added_env.update(_read_env_file(self.files["GITHUB_ENV"]))
        extra_path = self.files["GITHUB_PATH"].read_text(encoding="utf-8").splitlines()
        self.added_path = [p for p in reversed(extra_path) if p] + [
            p for p in self.added_path if p not in extra_path
        ]

    def _prepare(self, step: Mapping[str, Any]) -> tuple[list[str], dict[str, str], Path]:
        env = self._base_env()
        context = self.run_.context()
        env.update({k: substitute(str(v), context) for k, v in (step.get("env") or {}).items()})
        script = self.temp / f"step-{self._index}.sh"
        script.write_text(str(step["run"]), encoding="utf-8")
        defaults = {
            **((self.run_.workflow.get("defaults") or {}).get("run") or {}),
            **((self.spec.get("defaults") or {}).get("run") or {}),
        }
        shell = step.get("shell", defaults.get("shell"))
        cwd = self.workspace / str(
            step.get("working-directory", defaults.get("working-directory", "."))
        )
        return _shell_argv(shell, script), env, cwd

    def _run_step(self, step: Mapping[str, Any]) -> StepRun:
        name = _step_name(step)
        if not self._should_run(step.get("if")):
            return StepRun(name, None)
        if "uses" in step:
            return self._stand_in_action(name, step)
        if name in STAND_IN_STEPS:
            return self._stand_in_install(name)
        argv, env, cwd = self._prepare(step)
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
        return StepRun(name, proc.returncode, proc.stdout + proc.stderr)

    # --- stand-ins -----------------------------------------------------------------

    def _with(self, step: Mapping[str, Any]) -> dict[str, str]:
        context = self.run_.context()
        return {k: substitute(_as_text(v), context) for k, v in (step.get("with") or {}).items()}

    def _stand_in_action(self, name: str, step: Mapping[str, Any]) -> StepRun:
        action = str(step["uses"]).split("@")[0]
        handlers: dict[str, Callable[[dict[str, str]], str]] = {
            "actions/checkout": self._checkout,
            "actions/upload-artifact": self._upload,
            "actions/download-artifact": self._download,
        }
        if action not in handlers:
            raise HarnessError(f"no stand-in for the action {action!r}")
        try:
            output = handlers[action](self._with(step))
        except (subprocess.CalledProcessError, FileNotFoundError, FileExistsError) as exc:
            detail = getattr(exc, "stderr", "") or ""
            return StepRun(name, 1, f"{action} stand-in failed: {exc}\n{detail}", stood_in=True)
        return StepRun(name, 0, output, stood_in=True)

    def _checkout(self, options: dict[str, str]) -> str:
        unknown = set(options) - {"ref", "fetch-depth", "persist-credentials"}
        if unknown or options.get("fetch-depth") != "0":
            raise HarnessError(f"checkout stand-in models fetch-depth: 0 only; given {options}")
        url = f"{self.run_.server.url}/{self.run_.server.repository}.git"
        subprocess.run(
            ["git", "clone", "-q", url, str(self.workspace)],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "HOME": str(self.home)},
        )
        target = options.get("ref") or self.run_.github["sha"]
        run_git(self.workspace, "checkout", "-q", "--detach", target)
        return f"checked out {target}"

    def _upload(self, options: dict[str, str]) -> str:
        source = self.workspace / options["path"]
        dest = self.run_.artifacts / options["name"]
        if dest.exists():
            raise FileExistsError(f"an artifact named {options['name']!r} exists in this run")
        if not source.exists():
            if options.get("if-no-files-found", "warn") == "error":
                raise FileNotFoundError(source)
            return f"warning: no files at {options['path']}"
        shutil.copytree(source, dest)
        return f"uploaded {options['path']} as {options['name']}"

    def _download(self, options: dict[str, str]) -> str:
        source = self.run_.artifacts / options["name"]
        if not source.exists():
            raise FileNotFoundError(f"no artifact {options['name']!r} in this run")
        shutil.copytree(source, self.workspace / options.get("path", "."), dirs_exist_ok=True)
        return f"downloaded {options['name']}"

    def _stand_in_install(self, name: str) -> StepRun:
        bin_dir = self.workspace / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        python = bin_dir / "python"
        python.write_text(
            "#!/usr/bin/env bash\n"
            f"export PYTHONPATH={ROOT}${{PYTHONPATH:+:$PYTHONPATH}}\n"
            f'exec {sys.executable} "$@"\n',
            encoding="utf-8",
        )
        python.chmod(0o755)
        return StepRun(name, 0, f"stand-in: {python} runs {sys.executable}", stood_in=True)

    def describe(self) -> str:
        """Every step's outcome and output, for an assertion message."""
        parts = []
        for step in self.steps.values():
            status = "skipped" if step.skipped else f"rc={step.rc}"
            parts.append(f"--- {self.name}: {step.name} ({status})\n{step.output}")
        return "\n".join(parts)


@dataclass
class RunningStep:
    job: Job
    outcome: StepRun
    proc: subprocess.Popen[str] | None

    def wait(self) -> StepRun:
        if self.proc is not None:
            output, _ = self.proc.communicate(timeout=STEP_TIMEOUT_S)
            self.outcome.rc = self.proc.returncode
            self.outcome.output = output
        self.job._finish(self.outcome)
        return self.outcome


def files_under(path: Path) -> Iterator[Path]:
    return (p for p in sorted(path.rglob("*")) if p.is_file())
