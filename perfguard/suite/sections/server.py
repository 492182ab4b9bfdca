"""The ``server:`` part of a model in a suite file: a served model
(``perfguard.core.scenario.ServerSpec``), measured on ``backend: server``.

``perfguard.suite.sections.models`` calls in here; errors are the same located
``SuiteError``. The keys, types and defaults are declared in
:data:`perfguard.suite.grammar.SERVER`.

* ``command`` is a list of arguments or one string, split like a shell's (``shlex``);
  ``{port}`` (required), ``{python}``, ``{threads}``, ``{precision}`` and ``{device}``
  are its only placeholders (any other ``{...}`` is an error; ``{{`` writes a brace). It
  runs in the suite's folder.
* ``url`` is an ``http://`` or ``https://`` base URL without ``/v1`` (a trailing slash
  is dropped); ``health`` a path starting with ``/``.
* ``request`` holds JSON body fields; ``RESERVED_FIELDS`` (the model, the prompt or
  texts, ``stream``, ``max_tokens``) are perfguard's to set and refused there.
* An API key is never written in a suite: ``api_key_env`` names the variable holding it.
"""

from __future__ import annotations

import re
import shlex
import string
from urllib.parse import urlsplit

from perfguard.core.errors import CellError, Location
from perfguard.core.scenario import (
    SERVER_APIS,
    SERVER_BACKEND,
    SERVER_PLACEHOLDERS,
    Scenario,
    ServerSpec,
)
from perfguard.suite import grammar
from perfguard.suite.rules import check_section, number
from perfguard.suite.yamlpos import PosDict, Reader, found, frozen

__all__ = ["RESERVED_FIELDS", "parse_server", "served_accuracy_problem", "served_problem"]

#: Request body fields perfguard sets itself (``request:`` may not).
RESERVED_FIELDS = (
    "model",
    "prompt",
    "messages",
    "input",
    "stream",
    "max_tokens",
    "stream_options",
)
_SECRET_RE = re.compile(r"(?i)(api[-_]?key|token|secret|password|authorization)")


def _command(rd: Reader, m: PosDict, where: str) -> tuple[str, ...]:
    at, what = m.key_line("command"), f"`command` of {where}"
    raw = m["command"]
    if isinstance(raw, str):
        try:
            args = shlex.split(raw)
        except ValueError as exc:
            fix = "close the quote, or write the command as a list of arguments"
            rd.fail(at, f"{what} cannot be split into arguments: {exc}", "a command line", fix)
        if not args:
            rd.fail(at, f"{what} is empty", "a command", "write the command that starts it")
    else:
        items = rd.as_list(raw, at, what)
        args = [
            rd.as_str(a, items.item_line(i), f"argument {i} of {what}") for i, a in enumerate(items)
        ]
    for arg in args:
        try:
            names = {name for _, name, _, _ in string.Formatter().parse(arg) if name is not None}
        except ValueError as exc:
            fix = "write a literal brace as `{{` or `}}`"
            rd.fail(at, f"{what} has argument {found(arg)}: {exc}", "balanced braces", fix)
        unknown = sorted(names - set(SERVER_PLACEHOLDERS))
        if unknown:
            listed = ", ".join(f"{{{p}}}" for p in SERVER_PLACEHOLDERS)
            problem = f"{what} has the placeholder {{{unknown[0]}}} in {found(arg)}"
            fix = "use one of those, or write a literal brace as `{{` or `}}`"
            rd.fail(at, problem, f"placeholders among {listed}", fix)
        if _SECRET_RE.search(arg) and "=" in arg:
            problem = f"{what} seems to hold a secret in {found(arg.split('=')[0] + '=...')}"
            fix = "pass secrets through the environment (`api_key_env`, or the server's own)"
            rd.fail(at, problem, "no secrets in a suite (results record the command)", fix)
    if not any("{port}" in arg for arg in args):
        fix = 'pass `"{port}"` to the server\'s port flag, e.g. `--port, "{port}"`'
        expected = "`{port}` in the command: perfguard picks a free port for each server"
        rd.fail(at, f"{what} has no {{port}}", expected, fix)
    return tuple(args)


def _url(rd: Reader, m: PosDict, where: str) -> str:
    at, what = m.key_line("url"), f"`url` of {where}"
    url = rd.as_str(m["url"], at, what).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        fix = "write the server's base URL, e.g. `http://127.0.0.1:8000`"
        rd.fail(at, f"{what} is {found(url)}", "an http:// or https:// URL", fix)
    if parts.username or parts.password:
        fix = "drop the credentials from the URL; give the key with `api_key_env`"
        rd.fail(at, f"{what} holds credentials", "a URL without user:password@", fix)
    if parts.path.endswith("/v1"):
        fix = f"write `{url[: -len('/v1')]}` (perfguard adds /v1/...)"
        rd.fail(at, f"{what} ends with /v1", "the base URL, without /v1", fix)
    return url


def parse_server(rd: Reader, value: object, line: int, where: str) -> ServerSpec:
    """The ``server:`` mapping ``value`` of ``where`` (a model) as a ``ServerSpec``."""
    what = f"`server` of {where}"
    m = rd.as_map(value, line, what)
    rd.keys(m, grammar.SERVER.names, what)
    check_section(rd, m, grammar.SERVER, line, what)
    spec = grammar.SERVER
    fields: dict[str, object] = {}
    if "command" in m:
        fields["command"] = _command(rd, m, what)
    else:
        fields["url"] = _url(rd, m, what)
        for key in ("env", "start_timeout_s", "exclusive"):
            if key in m:
                problem = f"{what} has `url` and `{key}`"
                expected = f"`{key}` with `command` only (perfguard does not start a `url` server)"
                fix = f"remove `{key}`, or give the `command` that starts the server"
                rd.fail(m.key_line(key), problem, expected, fix)
    if "health" in m:
        health = rd.as_str(m["health"], m.key_line("health"), f"`health` of {what}")
        if not health.startswith("/"):
            fix = f"write `/{health}`"
            rd.fail(m.key_line("health"), f"`health` of {what} is {found(health)}", "a path", fix)
        fields["health"] = health
    for key in ("start_timeout_s", "request_timeout_s"):
        if key in m:
            at = m.key_line(key)
            fields[key] = number(rd, m[key], at, f"`{key}` of {what}", spec.scalar(key))
    if "env" in m:
        env = rd.as_map(m["env"], m.key_line("env"), f"`env` of {what}")
        fields["env"] = tuple(
            (str(k), rd.as_str(v, env.key_line(k), f"`env.{k}` of {what}")) for k, v in env.items()
        )
    for key in ("api_key_env", "model"):
        if key in m:
            fields[key] = rd.as_str(m[key], m.key_line(key), f"`{key}` of {what}")
    if "api" in m:
        fields["api"] = rd.as_choice(m["api"], m.key_line("api"), f"`api` of {what}", SERVER_APIS)
    for key in ("stream", "exclusive"):
        if key in m:
            fields[key] = rd.as_bool(m[key], m.key_line(key), f"`{key}` of {what}")
    if "request" in m:
        body = rd.as_map(m["request"], m.key_line("request"), f"`request` of {what}")
        for key in body:
            if key in RESERVED_FIELDS:
                problem = f"`request` of {what} sets `{key}`"
                expected = f"fields other than {', '.join(RESERVED_FIELDS)} (perfguard's)"
                fix = (
                    "remove it: perfguard sets it from the cell (`generate:`, the inputs, `stream`)"
                )
                rd.fail(body.key_line(key), problem, expected, fix)
            if _SECRET_RE.search(str(key)):
                problem = f"`request` of {what} sets `{key}`, which looks like a secret"
                fix = "give the API key with `api_key_env`"
                rd.fail(body.key_line(key), problem, "no secrets in a suite", fix)
        fields["request"] = tuple((str(k), frozen(v)) for k, v in body.items())
    return ServerSpec(Location(rd.path, line), **fields)  # type: ignore[arg-type]


#: The cell values a server command can take as placeholders (the matrix axes among them).
_CELL_PLACEHOLDERS = tuple(p for p in SERVER_PLACEHOLDERS if p not in ("port", "python"))


def served_problem(sc: Scenario) -> tuple[str, str, str] | None:
    """Why cell ``sc`` cannot run as a served model, as (problem, expected, fix); None
    when it can (or is not one). Checked per cell by the loader (``_unsupported``)."""
    cell = f"cell `{sc.item_name}`"
    server = sc.model.server
    if server is None:
        if sc.backend == SERVER_BACKEND:
            problem = f"{cell} runs model `{sc.model.name}` on backend `server`"
            expected = "a model with `server:` (a command or URL) for backend `server`"
            fix = f"give model `{sc.model.name}` a `server:`, or pick another backend"
            return problem, expected, fix
        return None
    if sc.backend != SERVER_BACKEND:
        problem = f"{cell} runs model `{sc.model.name}`, a served model, on `{sc.backend}`"
        expected = "backend `server` for a model with `server:`"
        return problem, expected, "set `backend: server` for this scenario"
    used = server.placeholders
    varied = {axis for axis, _ in sc.matrix_values}
    for name in _CELL_PLACEHOLDERS:
        if name in varied and name not in used:
            what = "the command has no" if server.command else "a `url:` server takes no"
            problem = f"{cell}: the matrix varies `{name}`, but {what} {{{name}}}"
            expected = f"`{{{name}}}` in the server's command, so that each cell runs its own"
            fix = f"use `{{{name}}}` in `command` (or drop `{name}` from the matrix)"
            return problem, expected, fix
    if "threads" in used and sc.threads is None:
        problem = f"{cell}: the server command uses {{threads}}, and the cell sets no `threads`"
        return problem, "`threads:` on the scenario (or in the matrix)", "set `threads: N`"
    if sc.profile:
        problem = f"{cell} profiles the operators of a served model (`profile: true`)"
        expected = "no `profile` on a served model: its operators run in the server"
        fix = "remove `profile`, and use the engine's own profiler (vLLM: VLLM_TORCH_PROFILER_DIR)"
        return problem, expected, fix
    if sc.load is not None and sc.load.batching is not None:
        problem = f"{cell} batches requests in perfguard (`load.batching`) for a server"
        expected = "no `batching`: a server batches concurrent requests itself"
        fix = "remove `load.batching`; set the server's own batching flags in its command"
        return problem, expected, fix
    if sc.generate is not None and sc.generate.batch != 1:
        problem = f"{cell} sends batches of {sc.generate.batch} prompts to a server"
        expected = "`batch: 1`: a server batches concurrent requests itself"
        fix = "remove `batch`, and measure concurrent requests with `load: {concurrency: N}`"
        return problem, expected, fix
    return None


def served_accuracy_problem(sc: Scenario) -> str | None:
    """The error of a served cell with accuracy checks (once the loader has attached its
    ``accuracy``), else None."""
    if sc.model.server is None or not sc.model.server.generative or sc.accuracy is None:
        return None
    return str(
        CellError(
            f"cell `{sc.item_name}` checks the accuracy of a served model that generates, "
            "which is not measured yet (its logits are not read)",
            expected="`accuracy: false` (or none) on a generating served model's scenario "
            "(a served embedding model's accuracy is checked)",
            fix="remove `accuracy` here (or write `accuracy: false` over `defaults`); check "
            "the model's files on a runtime perfguard runs itself",
            location=sc.location,
        )
    )
