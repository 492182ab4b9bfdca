"""Run the `run:` steps of a GitHub workflow on this machine, against a local origin.

A test builds a ``Server`` (a bare repository at ``<server>/<owner>/<repo>.git``, so
``${GITHUB_SERVER_URL}/${GITHUB_REPOSITORY}.git`` with ``GITHUB_SERVER_URL=file://<server>``
is that repository), then a ``WorkflowRun`` for one event and runs its jobs::

    run = WorkflowRun(WORKFLOW, server, event_name="push", sha=sha, ref="refs/heads/main",
                      directory=tmp, variables={"PERFGUARD_SHARDS": "2"})
    run.run_job("plan")        # every step in order, as a runner would
    job = run.job("baseline", matrix={"shard": 1})   # one instance of a matrix job
    job.run()
    job.steps["Fetch stored baselines"].output
    run.run_job("baseline-merge")   # a whole job: each matrix instance in turn

What runs for real: every ``run:`` step, with bash as GitHub runs it (no ``shell:``:
``bash -e {0}``; ``shell: bash``: ``bash --noprofile --norc -eo pipefail {0}``; ``sh``,
``python`` and ``... {0}`` templates likewise), in the job's workspace, with the
workflow's, job's and step's ``env:`` (``${{ }}`` resolved from the run's context),
GitHub's variables (``GITHUB_SHA``, ``GITHUB_REF``, ``GITHUB_WORKSPACE``,
``GITHUB_STEP_SUMMARY``/``GITHUB_OUTPUT``/``GITHUB_ENV``/``GITHUB_PATH`` files,
``RUNNER_TEMP``, ...), and a clean environment (its own ``HOME``; nothing of the
calling pytest leaks in). Job and step ``if:`` conditions are evaluated (a small
evaluator of GitHub's expression language: paths, literals, ``== != && || !``,
``always() success() failure() cancelled() contains() startsWith() endsWith()
fromJSON() toJSON() format()``); a step without ``if:`` is skipped after a failure, like
``success()``. The contexts: ``github``, ``vars`` (``variables=``; an unset variable is
empty), ``secrets`` (``secrets=``; unset is empty), ``needs`` (only the jobs in
``needs:``, which must have run: their ``result`` and ``outputs``), ``runner``
(``temp``, ``os``, ``arch``), ``matrix`` and ``steps``
(each step with an ``id:``: its ``outputs`` from its own ``$GITHUB_OUTPUT`` file,
``outcome``, ``conclusion``). A job's
``outputs:`` are evaluated when it ends. A job's ``environment:`` is checked as GitHub
checks it before a job reaches a runner (``environments=``, ``Environment``): a branch
outside its deployment branches (a pull request's head branch, else the ref's) fails the
job with no step run; otherwise the job's ``secrets`` and ``vars`` include the
environment's, which no other job sees. ``strategy.matrix`` (lists, or one expression
such as ``fromJSON(...)``; no ``include``/``exclude``) runs the job once per value; the
job's result is ``failure`` if any instance failed, as on GitHub. ``runs-on``,
``permissions``, ``concurrency``, ``fail-fast`` and ``timeout-minutes`` are GitHub's
business and are not modelled (instances run one after another).

What is stood in for, and why:

* ``actions/checkout``: ``git clone`` of the origin, then the commit the action would
  check out (``with.ref`` or ``GITHUB_SHA``), detached; only ``fetch-depth: 0`` is
  supported, and no credentials are stored (as with ``persist-credentials: false``).
* ``actions/upload-artifact`` / ``actions/download-artifact``: a copy to and from a
  folder per artifact name (names may hold expressions), shared by the jobs of one
  ``WorkflowRun``; a download by ``pattern:`` puts each matching artifact in
  ``path/<name>/`` (all into ``path`` with ``merge-multiple: true``); none matching is
  no error, as with the action.
* ``actions/setup-python``: ``python``/``python3`` on ``PATH`` become this interpreter.
* ``actions/create-github-app-token``: ``outputs.token`` is ``APP_TOKEN`` (the origin is
  a folder: any credential pushes); an error, as with the action, without the App's
  client id and private key.
* the step named ``Install`` (see ``STAND_IN_STEPS``): it builds a venv from a hash
  lock and needs PyPI (and a GPU); instead ``.venv/bin/python`` becomes a wrapper of
  this interpreter with ``PYTHONPATH`` at the perfguard under test, so the workflow's
  ``pytest --perfguard`` runs this checkout's perfguard, and ``.venv/bin/perfguard`` its
  console script. A runtime of ``HEAVY_RUNTIMES`` (torch, ...) that the step's lock
  (``--require-hashes -r "$VAR"``, the file in this checkout) does not pin is hidden
  from that interpreter, as it would be missing from the venv: the merge jobs run
  without torch. Its real text is checked by tests/project/test_workflows.py (actionlint,
  zizmor, the exact pip commands).
* ``gh``: a recorder on ``PATH`` logs each call's argv and stdin (``GhRecorder``)
  and answers ``gh api .../comments`` with the comments the test planted (``--jq``
  applied with the real ``jq``).

Any other ``uses:`` step, an expression the context does not define, or ``${{ }}`` in a
``run:`` script (perfguard's workflows pass values through ``env:``), is an error.
"""

from __future__ import annotations

import fnmatch
import itertools
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

from tests.helpers.git_repos import run_git

ROOT = Path(__file__).resolve().parents[2]
STAND_IN_STEPS = ("Install",)
STEP_TIMEOUT_S = 600
# Runtimes the Install stand-in hides when the step's lock does not hold them (the merge
# jobs' lock has none of them: `perfguard merge` must run without).
_CONSOLE_SCRIPT = "import sys; from perfguard.cli import main; sys.exit(main())"
HEAVY_RUNTIMES = ("onnxruntime", "tensorrt", "torch", "transformers")
_HIDE = """\
# Written by the Install stand-in of tests/helpers/workflow_harness.py: these packages are not in
# the job's lock, so they are not installed; hide them from this interpreter.
import sys
from importlib.machinery import PathFinder

_ABSENT = frozenset({names!r})


class _NotInstalled(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in _ABSENT:
            return None
        return PathFinder.find_spec(fullname, path, target)


sys.meta_path[:] = [_NotInstalled if f is PathFinder else f for f in sys.meta_path]
"""


class HarnessError(Exception):
    """The workflow uses something the harness does not model."""


#: The token the ``actions/create-github-app-token`` stand-in hands out.
APP_TOKEN = "ghs_harness_app_token_not_a_secret"


@dataclass(frozen=True)
class Environment:
    """A deployment environment: the branches that may use it (None: any), and the
    secrets and variables a job referencing it gets."""

    name: str
    branches: tuple[str, ...] | None = None
    secrets: Mapping[str, str] = field(default_factory=dict)
    variables: Mapping[str, str] = field(default_factory=dict)

    def allows(self, branch: str) -> bool:
        return self.branches is None or any(
            fnmatch.fnmatchcase(branch, pattern) for pattern in self.branches
        )


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
        if name in ("startsWith", "endsWith") and len(args) == 2:
            text, part = (_as_text(a).lower() for a in args)
            return text.startswith(part) if name == "startsWith" else text.endswith(part)
        if name == "fromJSON" and len(args) == 1:
            try:
                return json.loads(_as_text(args[0]))
            except json.JSONDecodeError as exc:
                raise HarnessError(f"fromJSON of {args[0]!r}: {exc} (in {self.text!r})") from exc
        if name == "toJSON" and len(args) == 1:
            return json.dumps(args[0], indent=2)
        if name == "format" and args:
            return _format(_as_text(args[0]), [_as_text(a) for a in args[1:]], self.text)
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


def _format(template: str, args: list[str], text: str) -> str:
    """GitHub's format(): ``{N}`` replaced by argument N, ``{{``/``}}`` are braces."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) in ("{{", "}}"):
            return match.group(0)[0]
        index = int(match.group(1))
        if index >= len(args):
            raise HarnessError(f"format(): no argument {{{index}}} in {text!r}")
        return args[index]

    return re.sub(r"\{\{|\}\}|\{(\d+)\}", one, template)


class Lenient(dict[str, Any]):
    """A context object whose missing keys are null, as GitHub reads ``vars.UNSET`` and
    ``steps.<id>.outputs.unset`` (other contexts stay strict: a typo is an error)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> None:
        return None


def evaluate(
    expr: str, context: Mapping[str, Any], status: Mapping[str, bool] | None = None
) -> Any:
    """The value of one GitHub expression (without ``${{ }}``)."""
    return _Parser(expr, context, status or {}).parse()


def _as_text(value: Any) -> str:
    # GitHub writes an array or object as these words in a string, not as JSON.
    if isinstance(value, list):
        return "Array"
    if isinstance(value, dict):
        return "Object"
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


def resolve(value: Any, context: Mapping[str, Any]) -> Any:
    """A YAML value: a string that is one whole ``${{ expr }}`` keeps the expression's
    type (``matrix: {shard: ${{ fromJSON(...) }}}`` is a list); other strings are text."""
    if isinstance(value, str):
        match = _EXPR.fullmatch(value.strip())
        if match:
            return evaluate(match.group(1), context)
        return substitute(value, context)
    return value


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
# gh stand-in of tests/helpers/workflow_harness.py: logs argv and stdin, answers comment lists.
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
        variables: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        environments: Mapping[str, Environment] | None = None,
    ) -> None:
        self.workflow_path = workflow
        self.workflow = yaml.safe_load(workflow.read_text(encoding="utf-8"))
        self.server = server
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.artifacts = directory / "artifacts"
        self.gh = gh or GhRecorder(directory / "gh")
        # Each job's result (a matrix job's: its instances' together) and outputs.
        self.results: dict[str, str] = {}
        self.outputs: dict[str, dict[str, str]] = {}
        self.instance_results: dict[str, dict[str, str]] = {}
        # Every Job made for a name (a matrix job's instances in order).
        self.ran: dict[str, list[Job]] = {}
        # The repository's configuration variables (the `vars` context).
        self.variables = dict(variables or {})
        # The repository's secrets, and its deployment environments (the `secrets` and
        # `vars` a job referencing one also gets, and the branches that may use it).
        self.secrets = dict(secrets or {})
        self.environments = dict(environments or {})
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

    def needs(self, name: str) -> list[str]:
        """The jobs ``name`` needs (``needs:``)."""
        needs = self._spec(name).get("needs")
        return [needs] if isinstance(needs, str) else list(needs or [])

    def context(self, job: str | None = None, **extra: Any) -> dict[str, Any]:
        """The expression context of ``job``: ``github``, ``vars`` and ``needs`` (only the
        jobs it needs, as on GitHub, each of which must have run), plus ``extra``."""
        needs: dict[str, Any] = {}
        for dep in self.needs(job) if job is not None else []:
            if dep not in self.results:
                raise HarnessError(
                    f"job {job!r} needs {dep!r}, which has not run in this WorkflowRun "
                    f"(run it first, or set run.results[{dep!r}])"
                )
            needs[dep] = {
                "result": self.results[dep],
                "outputs": Lenient(self.outputs.get(dep, {})),
            }
        secrets, variables = dict(self.secrets), dict(self.variables)
        environment = self.environment(job) if job is not None else None
        if environment is not None:
            secrets.update(environment.secrets)
            variables.update(environment.variables)
        return {
            "github": self.github,
            "vars": Lenient(variables),
            "secrets": Lenient(secrets),
            "needs": needs,
            **extra,
        }

    def environment(self, job: str) -> Environment | None:
        """The deployment environment ``job`` references (``environment:``), or None; one
        the run does not define is empty (as on GitHub, which creates it on first use)."""
        spec = self._spec(job).get("environment")
        if spec is None:
            return None
        name = str(spec["name"] if isinstance(spec, Mapping) else spec)
        return self.environments.get(name, Environment(name))

    def deploying_branch(self) -> str:
        """The branch GitHub checks against an environment's deployment branches: the
        pull request's head branch for a pull_request event, else the ref's name."""
        if self.github["event_name"] == "pull_request":
            return str(self.github["head_ref"])
        return str(self.github["ref_name"])

    def _spec(self, name: str) -> dict[str, Any]:
        if name not in self.workflow["jobs"]:
            raise HarnessError(f"no job {name!r} in {self.workflow_path.name}")
        spec: dict[str, Any] = self.workflow["jobs"][name]
        return spec

    def should_run(self, name: str) -> bool:
        """The job's ``if:``, with the status functions about the jobs it needs."""
        results = [self.results.get(dep) for dep in self.needs(name)]
        status = {
            "always": True,
            "cancelled": False,
            "success": all(r == "success" for r in results),
            "failure": any(r == "failure" for r in results),
        }
        text = str(self._spec(name).get("if", "success()"))
        match = _EXPR.fullmatch(text.strip())
        text = match.group(1) if match else text
        value = evaluate(text, self.context(name), status)
        if not re.search(r"\b(always|success|failure|cancelled)\(", text):
            return status["success"] and _truthy(value)
        return _truthy(value)

    def matrix(self, name: str) -> list[dict[str, Any]] | None:
        """The values of the job's ``strategy.matrix`` (None without one), in GitHub's
        order: the product of its keys' lists, the first key slowest."""
        strategy = self._spec(name).get("strategy") or {}
        if "matrix" not in strategy:
            return None
        context = self.context(name)
        matrix = resolve(strategy["matrix"], context)
        if not isinstance(matrix, Mapping) or not matrix:
            raise HarnessError(f"job {name!r}: strategy.matrix is not a mapping: {matrix!r}")
        keys, lists = [], []
        for key, value in matrix.items():
            if key in ("include", "exclude"):
                raise HarnessError(f"job {name!r}: matrix {key} is not modelled")
            values = resolve(value, context)
            if not isinstance(values, list) or not values:
                raise HarnessError(
                    f"job {name!r}: matrix.{key} must be a non-empty list, got {values!r}"
                )
            keys.append(key)
            lists.append(values)
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*lists)]

    def job(self, name: str, matrix: Mapping[str, Any] | None = None) -> Job:
        """One runner's job: for a matrix job, the instance with the values ``matrix``."""
        values = self.matrix(name) if self.should_run(name) else None
        if matrix is not None and values is not None and dict(matrix) not in values:
            raise HarnessError(f"job {name!r}: {dict(matrix)} is not one of {values}")
        if matrix is None and values is not None:
            raise HarnessError(f"job {name!r} is a matrix job: give matrix= one of {values}")
        return Job(self, name, dict(matrix) if matrix is not None else None)

    def jobs(self, name: str) -> list[Job]:
        """The job once per value of its matrix (once without a matrix, or when skipped)."""
        if not self.should_run(name):
            return [Job(self, name)]
        values = self.matrix(name)
        return [Job(self, name)] if values is None else [Job(self, name, v) for v in values]

    def run_job(self, name: str) -> str:
        """Run the job (each matrix instance in turn, as parallel runners would); its result."""
        for job in self.jobs(name):
            job.run()
        return self.results[name]

    def record(self, name: str, instance: str, result: str, outputs: Mapping[str, str]) -> None:
        """One instance's end: a matrix job's result is `failure` if any instance
        failed, else `cancelled` if any was, else `success` if any succeeded."""
        found = self.instance_results.setdefault(name, {})
        found[instance] = result
        for outcome in ("failure", "cancelled", "success", "skipped"):
            if outcome in found.values():
                self.results[name] = outcome
                break
        # Outputs of a matrix job: the last instance to set one wins, as on GitHub.
        self.outputs.setdefault(name, {}).update({k: v for k, v in outputs.items() if v})


class Job:
    """One job of a ``WorkflowRun`` on a fresh runner (its own workspace, temp, home);
    for a matrix job, one instance, with its ``matrix`` values."""

    def __init__(
        self, run: WorkflowRun, name: str, matrix: Mapping[str, Any] | None = None
    ) -> None:
        self.run_ = run
        self.name = name
        self.spec: dict[str, Any] = run.workflow["jobs"][name]
        self.matrix = dict(matrix or {})
        run.ran.setdefault(name, []).append(self)
        self.instance = "-".join(_as_text(v) for v in self.matrix.values()) or name
        label = f"{name}-{self.instance}" if self.matrix else name
        base = run.directory / "jobs" / label
        suffix = 1
        while base.exists():
            suffix += 1
            base = run.directory / "jobs" / f"{label}-{suffix}"
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
        # The `steps` context: each step with an `id:` that has run or been skipped.
        self.step_context: dict[str, dict[str, Any]] = {}
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
        context = self.context()
        for scope in (self.run_.workflow.get("env") or {}, self.spec.get("env") or {}):
            env.update({k: substitute(str(v), context) for k, v in scope.items()})
        env.update(self.added_env)
        return env

    def context(self) -> dict[str, Any]:
        """The expression context of this job's steps: the run's, ``matrix`` and ``steps``."""
        runner = {"temp": str(self.temp), "os": "Linux", "arch": "X64"}
        # A step of this job that has not run reads as null on GitHub; an id no step
        # has stays an error (a typo).
        steps: dict[str, Any] = {
            str(step["id"]): {"outputs": Lenient(), "outcome": None, "conclusion": None}
            for step in self._step_list()
            if "id" in step
        }
        steps.update(self.step_context)
        return self.run_.context(self.name, matrix=self.matrix, steps=steps, runner=runner)

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
        value = evaluate(text, self.context(), self._status())
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
        return self.run_.should_run(self.name)

    def run(self, *, until: str | None = None) -> str:
        """Run the remaining steps (those before ``until``); the job's result so far."""
        if self._index == 0 and not self.should_run_job():
            self.run_.record(self.name, self.instance, "skipped", {})
            return "skipped"
        environment = self.run_.environment(self.name)
        branch = self.run_.deploying_branch()
        if self._index == 0 and environment is not None and not environment.allows(branch):
            # GitHub checks this before the job is sent to a runner: no step runs, and no
            # secret of the environment reaches it.
            self._index = len(self._step_list())
            message = (
                f'Branch "{branch}" is not allowed to deploy to {environment.name} due to '
                "environment protection rules."
            )
            self._finish(StepRun("environment protection rules", 1, message))
            return self.result()
        steps = self._step_list()
        if until is not None and until not in self.step_names():
            raise HarnessError(f"job {self.name!r} has no step {until!r}")
        while self._index < len(steps):
            step = steps[self._index]
            if until is not None and _step_name(step) == until:
                break
            self._index += 1
            self._finish(self._run_step(step), step.get("id"))
        return self.result()

    def result(self) -> str:
        """The job's result so far (recorded in the run, with its ``outputs:``)."""
        outcome = "failure" if self.failed else "success"
        context = self.context()
        outputs = {
            key: _as_text(resolve(value, context))
            for key, value in (self.spec.get("outputs") or {}).items()
        }
        self.run_.record(self.name, self.instance, outcome, outputs)
        return outcome

    def start(self, name: str) -> RunningStep:
        """Start the next step, ``name``, without waiting (to race it with another job's)."""
        step = self._step_list()[self._index]
        if _step_name(step) != name or "run" not in step:
            raise HarnessError(f"the next step of {self.name!r} is {_step_name(step)!r}")
        self._index += 1
        if not self._should_run(step.get("if")):
            return RunningStep(self, StepRun(name, None), None, step.get("id"))
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
        return RunningStep(self, StepRun(name, None), proc, step.get("id"))

    def _output_file(self) -> Path:
        # Each step has a GITHUB_OUTPUT file of its own, as on GitHub.
        return self.temp / f"output-{self._index}.txt"

    def _finish(self, outcome: StepRun, step_id: str | None = None) -> None:
        self.steps[outcome.name] = outcome
        if outcome.rc not in (None, 0):
            self.failed = True
        if step_id is not None:
            output = self._output_file()
            found = _read_env_file(output) if output.exists() else {}
            result = (
                "skipped" if outcome.rc is None else "success" if outcome.rc == 0 else "failure"
            )
            self.step_context[step_id] = {
                "outputs": Lenient(found),
                "outcome": result,
                "conclusion": result,
            }
        self.added_env.update(_read_env_file(self.files["GITHUB_ENV"]))
        extra_path = self.files["GITHUB_PATH"].read_text(encoding="utf-8").splitlines()
        self.added_path = [p for p in reversed(extra_path) if p] + [
            p for p in self.added_path if p not in extra_path
        ]

    def _prepare(self, step: Mapping[str, Any]) -> tuple[list[str], dict[str, str], Path]:
        env = self._base_env()
        output = self._output_file()
        output.touch()
        env["GITHUB_OUTPUT"] = str(output)
        context = self.context()
        env.update({k: substitute(str(v), context) for k, v in (step.get("env") or {}).items()})
        if "${{" in str(step["run"]):
            # perfguard's workflows never put an expression in a script (injection).
            raise HarnessError(f"step {_step_name(step)!r}: ${{{{ }}}} in run: is not modelled")
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
            return self._stand_in_install(name, step)
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
        context = self.context()
        return {k: substitute(_as_text(v), context) for k, v in (step.get("with") or {}).items()}

    def _stand_in_action(self, name: str, step: Mapping[str, Any]) -> StepRun:
        action = str(step["uses"]).split("@")[0]
        handlers: dict[str, Callable[[dict[str, str]], str]] = {
            "actions/checkout": self._checkout,
            "actions/upload-artifact": self._upload,
            "actions/download-artifact": self._download,
            "actions/setup-python": self._setup_python,
            "actions/create-github-app-token": self._app_token,
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
        unknown = set(options) - {"name", "pattern", "path", "merge-multiple"}
        if unknown:
            raise HarnessError(f"download-artifact stand-in: {sorted(unknown)} not modelled")
        dest = self.workspace / options.get("path", ".")
        if "name" in options:
            source = self.run_.artifacts / options["name"]
            if not source.exists():
                raise FileNotFoundError(f"no artifact {options['name']!r} in this run")
            shutil.copytree(source, dest, dirs_exist_ok=True)
            return f"downloaded {options['name']}"
        # By pattern (or all): each artifact into path/<name>/, or all into path with
        # merge-multiple; none matching is no error, as with the action.
        pattern = options.get("pattern", "*")
        stored = (
            sorted(p.name for p in self.run_.artifacts.glob("*"))
            if self.run_.artifacts.exists()
            else []
        )
        found = [name for name in stored if fnmatch.fnmatchcase(name, pattern)]
        merge = options.get("merge-multiple", "false") == "true"
        for artifact in found:
            target = dest if merge else dest / artifact
            shutil.copytree(self.run_.artifacts / artifact, target, dirs_exist_ok=True)
        return f"found {len(found)} artifact(s) matching {pattern!r}: {' '.join(found)}"

    def _app_token(self, options: dict[str, str]) -> str:
        """An installation token as ``outputs.token``; like the action, an error
        without the App's client id and private key."""
        known = {"client-id", "private-key", "permission-contents"}
        if set(options) - known:
            raise HarnessError(f"create-github-app-token stand-in: {sorted(set(options) - known)}")
        missing = [key for key in ("client-id", "private-key") if not options.get(key)]
        if missing:
            raise FileNotFoundError(f"create-github-app-token: {', '.join(missing)} is empty")
        with self._output_file().open("a", encoding="utf-8") as out:
            out.write(f"token={APP_TOKEN}\n")
        return f"stand-in: an installation token of App {options['client-id']}"

    def _setup_python(self, options: dict[str, str]) -> str:
        # python3/python on PATH become this interpreter (not the version asked for: the
        # steps after it only build the venv, which the Install stand-in replaces).
        unknown = set(options) - {"python-version"}
        if unknown:
            raise HarnessError(f"setup-python stand-in: {sorted(unknown)} not modelled")
        bin_dir = self.temp / "setup-python" / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for command in ("python", "python3"):
            link = bin_dir / command
            if not link.exists():
                link.symlink_to(sys.executable)
        self.added_path.insert(0, str(bin_dir))
        return f"stand-in: python3 is {sys.executable} (asked for {options.get('python-version')})"

    def _locked_packages(self, step: Mapping[str, Any]) -> set[str] | None:
        """The packages of the hash lock the Install step installs (`-r "$VAR"`, VAR
        from the workflow's env, the file in this checkout of perfguard); None if none."""
        match = re.search(
            r'--require-hashes (?:--only-binary :all: )?-r "\$(\w+)"', str(step.get("run", ""))
        )
        if match is None:
            return None
        env = {**(self.run_.workflow.get("env") or {}), **(self.spec.get("env") or {})}
        lock = ROOT / str(env.get(match.group(1), ""))
        if not lock.is_file():
            raise HarnessError(f"Install stand-in: no lock {lock} (from ${match.group(1)})")
        pins = re.findall(r"^([A-Za-z0-9][\w.-]*)==", lock.read_text(encoding="utf-8"), re.M)
        return {pin.lower().replace("_", "-") for pin in pins}

    def _stand_in_install(self, name: str, step: Mapping[str, Any]) -> StepRun:
        bin_dir = self.workspace / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        path = str(ROOT)
        # A runtime the lock does not hold is absent from the venv: a sitecustomize hides
        # it from this interpreter's imports (find_spec sees nothing, import fails).
        locked = self._locked_packages(step)
        absent = sorted(
            module
            for module in HEAVY_RUNTIMES
            if locked is not None
            # onnxruntime-gpu and tensorrt-cu13 install the modules onnxruntime, tensorrt
            and not any(pin == module or pin.startswith(f"{module}-") for pin in locked)
        )
        if absent:
            hide = self.workspace / ".venv" / "absent"
            hide.mkdir()
            (hide / "sitecustomize.py").write_text(_HIDE.format(names=absent), encoding="utf-8")
            path = f"{hide}:{path}"
        python = bin_dir / "python"
        python.write_text(
            "#!/usr/bin/env bash\n"
            f"export PYTHONPATH={path}${{PYTHONPATH:+:$PYTHONPATH}}\n"
            f'exec {sys.executable} "$@"\n',
            encoding="utf-8",
        )
        python.chmod(0o755)
        # The console script pip would write for [project.scripts].
        perfguard = bin_dir / "perfguard"
        perfguard.write_text(
            f'#!/usr/bin/env bash\nexec {python} -c "{_CONSOLE_SCRIPT}" "$@"\n',
            encoding="utf-8",
        )
        perfguard.chmod(0o755)
        hidden = f"; without {', '.join(absent)} (not in the lock)" if absent else ""
        return StepRun(name, 0, f"stand-in: {python} runs {sys.executable}{hidden}", stood_in=True)

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
    step_id: str | None = None

    def wait(self) -> StepRun:
        if self.proc is not None:
            output, _ = self.proc.communicate(timeout=STEP_TIMEOUT_S)
            self.outcome.rc = self.proc.returncode
            self.outcome.output = output
        self.job._finish(self.outcome, self.step_id)
        return self.outcome


def files_under(path: Path) -> Iterator[Path]:
    return (p for p in sorted(path.rglob("*")) if p.is_file())
