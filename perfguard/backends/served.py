"""Served models: ``backend: server``, a running inference server called over its
OpenAI-compatible HTTP API (vLLM, SGLang, TGI, TensorRT-LLM's and Triton's OpenAI
frontends, llama.cpp's server).

Opening a cell starts the model's ``server.command`` (``perfguard.serving.process``: a
free port, its own process group, ready when ``server.health`` answers 200) or reaches
the ``server.url`` of one already running, and reads its identity: ``/v1/models`` (the
served model's id), the ``Server`` header, and what the engine says of itself where it
answers (``/version``: vLLM; ``/props``: llama.cpp's server; ``/get_server_info``:
SGLang; ``/info``: TGI; any secret-looking field hidden). The identity goes into the
cell's runtime facts, so a baseline records which server and model it measured, and
every reply's ``model`` is checked against it (a server swapped under a run fails it).

Prompts are texts (``perfguard.models.prompts.make_text_prompts``) cut to exactly
``prompt_tokens`` of the *server's* tokens: ``prepare`` bisects on each text's length,
asking the server for the prompt token count of each candidate (one ``max_tokens: 1``
request each, ``usage.prompt_tokens``; about a dozen per prompt, before any timing). With
``api: chat`` the count is the whole templated prompt, as the server reports it.

A request (``generate``) asks for ``max_tokens = new_tokens`` with the fixed-length
fields (``core.scenario.FIXED_LENGTH_BODY``: ``ignore_eos``, ``min_tokens``; a suite's
``server.request`` adds or drops fields) and streams the reply, ``stamp()`` per token
chunk (``perfguard.serving.client``). It then checks that the server generated exactly
``new_tokens`` (its ``usage`` where it sends one, else the chunks) and streamed one chunk
per token: a server that stopped early or packs several tokens into a chunk fails the
cell with the reason, never a silently shorter request. Without streaming
(``stream: false``) every token arrives with the reply: TTFT is the whole request.

A served embedding model (``api: embeddings``) is a plain ``Session`` (``open``): its
one ``text`` input (``core.scenario.TEXT_DTYPE``, shape ``[texts, tokens]``) holds the
texts of one request; ``prepare`` cuts each text to exactly ``tokens`` of the server's
tokens (``/v1/embeddings`` probes; a text shorter than that, as accuracy sentences are,
is sent whole) and encodes the request body once; ``run`` is one ``POST
/v1/embeddings`` read to its last byte (the timed call); ``to_numpy`` parses the reply
after the timing and checks it (one vector per text, in order, of the model opened on):
the ``embedding`` output, ``texts x dimension`` float32.

The runtime facts also count the TCP connections the client opened (``connections``:
1 for a single stream whose connection was kept alive throughout).

API keys come from the environment variable ``server.api_key_env`` names, are sent as a
bearer token, and are never written anywhere (not the results, reports or logs).
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.core.errors import CellError, InputError, ServerError
from perfguard.core.scenario import FIXED_LENGTH_BODY, SERVER_BACKEND, Scenario, ServerSpec
from perfguard.serving.client import OpenAIClient, Reply
from perfguard.serving.process import ServerProcess, free_port, server_env

__all__ = [
    "SERVE_INSTALL_HINT",
    "ServedBackend",
    "ServedEmbeddings",
    "ServedGeneration",
    "ServedSession",
]

SERVE_INSTALL_HINT = "pip install aiohttp (perfguard's `serve` extra)"
#: What an engine says of itself, where it answers (path -> engine).
ENGINE_INFO_PATHS: tuple[tuple[str, str], ...] = (
    ("/version", "vLLM"),
    ("/props", "llama.cpp"),
    ("/get_server_info", "SGLang"),
    ("/info", "TGI"),
)
_SECRET_RE = re.compile(r"(?i)(api[-_]?key|token|secret|password|authorization)")
_INFO_CHARS = 4000  # of one engine-info reply kept in the runtime facts
_MAX_PROBES = 64  # prompt-length probes per prompt, at most
#: The path each of ``core.scenario.SERVER_APIS`` posts to.
_API_PATHS = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
    "embeddings": "/v1/embeddings",
}


class ServedBackend:
    """``backend: server`` (``perfguard.backends.base.Backend``): generative cells only."""

    name = SERVER_BACKEND

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec("aiohttp") is None:
            return (
                f"a served model's cells need aiohttp, which is not installed: {SERVE_INSTALL_HINT}"
            )
        return None

    def open(
        self,
        scenario: Scenario,
        feeds: Mapping[str, np.ndarray],
        cache_dir: Path,
        *,
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    ) -> ServedEmbeddings:
        """A served embedding model's session (the loader sends every other served cell
        to the generation path)."""
        return ServedEmbeddings(scenario, cache_dir)


class ServedGeneration:
    """The served models' generation path (``perfguard.backends.base.GenerativeBackend``)."""

    def open_generative(self, scenario: Scenario, cache_dir: Path) -> ServedSession:
        return ServedSession(scenario, cache_dir)


def _api_key(spec: ServerSpec, scenario: Scenario) -> str | None:
    if spec.api_key_env is None:
        return None
    key = os.environ.get(spec.api_key_env)
    if not key:
        raise ServerError(
            f"cell `{scenario.item_name}` needs the API key in the environment variable "
            f"{spec.api_key_env}, which is not set",
            expected=f"{spec.api_key_env} set to the server's API key",
            fix=f"export {spec.api_key_env}=... before running (CI: from a secret)",
            location=spec.location,
        )
    return key


def fill_command(spec: ServerSpec, scenario: Scenario, port: int | None) -> list[str]:
    """The server's arguments for ``scenario`` (``SERVER_PLACEHOLDERS`` filled); with
    ``port`` None, ``{port}`` and ``{python}`` stay as written (the command as runtime
    facts record it, the same on every run and machine)."""
    values = {
        "port": "{port}" if port is None else port,
        "python": "{python}" if port is None else sys.executable,
        "threads": "" if scenario.threads is None else scenario.threads,
        "precision": scenario.precision,
        "device": scenario.device,
    }
    return [arg.format(**values) for arg in spec.command]


def _hide_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "<hidden>" if _SECRET_RE.search(str(k)) and v else _hide_secrets(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hide_secrets(v) for v in value]
    return value


class _ServedModel:
    """One cell's server (started, or reached at its URL), its client and its identity:
    what generating and embedding sessions share."""

    def __init__(self, scenario: Scenario, cache_dir: Path) -> None:
        spec = scenario.model.server
        assert spec is not None, scenario.item_name
        self._scenario = scenario
        self._spec = spec
        self._path = _API_PATHS[spec.api]
        self._process: ServerProcess | None = None
        self._client: OpenAIClient | None = None
        name = f"cell `{scenario.item_name}`"
        key = _api_key(spec, scenario)
        try:
            ready_s: float | None = None
            if spec.command:
                port = free_port()
                base = f"http://127.0.0.1:{port}"
                slug = re.sub(r"[^A-Za-z0-9_.+-]+", "_", scenario.item_name)
                self._process = ServerProcess(
                    fill_command(spec, scenario, port),
                    cwd=scenario.model.base_dir,
                    env=server_env(dict(spec.env)),
                    log=cache_dir.parent / "servers" / f"{slug}-{port}.log",
                    name=name,
                    location=spec.location,
                )
                self._process.start()
                auth = {"Authorization": f"Bearer {key}"} if key else {}
                ready_s = self._process.wait_ready(
                    base + spec.health, spec.start_timeout_s, headers=auth
                )
            else:
                assert spec.url is not None
                base = spec.url
            # The connection count stays current in the runtime facts as connections are
            # made (on the client's loop), never written inside a timed request.
            self.runtime_info: dict[str, Any] = {}
            self._client = OpenAIClient(
                base, name=name, api_key=key, timeout_s=spec.request_timeout_s,
                location=spec.location, on_connection=self._connected,
            )  # fmt: skip
            if ready_s is None:
                self._check_health(base)
            self.runtime_info.update(self._identity(ready_s))
        except BaseException:
            self.close()
            raise

    # --------------------------------------------------------------- opening

    def _connected(self, count: int) -> None:
        self.runtime_info["connections"] = count

    @property
    def client(self) -> OpenAIClient:
        assert self._client is not None
        return self._client

    def _check_health(self, base: str) -> None:
        status, _, body = self.client.get(self._spec.health)
        if status != 200:
            raise ServerError(
                f"the server of cell `{self._scenario.item_name}` at {base} answered GET "
                f"{self._spec.health} with HTTP {status}: {str(body)[:200]}",
                expected="HTTP 200 from a server that is up",
                fix="start the server first, or check `server.url` and `server.health`",
                location=self._spec.location,
            )

    def _identity(self, ready_s: float | None) -> dict[str, Any]:
        spec = self._spec
        status, headers, body = self.client.get("/v1/models")
        data = body.get("data") if isinstance(body, dict) else None
        if status != 200 or not isinstance(data, list):
            raise ServerError(
                f"the server of cell `{self._scenario.item_name}` answered GET /v1/models "
                f"with HTTP {status}: {str(body)[:200]}",
                expected="the OpenAI-compatible list of served models",
                fix="check that the server speaks the OpenAI API (and `server.api_key_env`)",
                location=spec.location,
            )
        ids = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]
        model = spec.model if spec.model is not None else (ids[0] if ids else None)
        if model is None or model not in ids:
            raise ServerError(
                f"the server of cell `{self._scenario.item_name}` serves "
                f"{', '.join(ids) or 'no model'}; the suite asks for {model!r}",
                expected="`server.model` among the ids of /v1/models",
                fix=f"set `server.model` to one of: {', '.join(ids)}"
                if ids
                else "check the server's model path",
                location=spec.location,
            )
        self.model = model
        info: dict[str, Any] = {
            "server": "command" if spec.command else "url",
            "api": spec.api,
            "served_model": model,
            "models": ids,
            "server_header": headers.get("Server", headers.get("server", "")),
            **self._request_facts(),
        }
        if spec.command:
            info["command"] = " ".join(fill_command(spec, self._scenario, None))
        else:
            info["url"] = spec.url
        if ready_s is not None:
            info["ready_s"] = round(ready_s, 3)
        for entry in data:
            if isinstance(entry, dict) and entry.get("id") == model:
                info["model_card"] = _hide_secrets(
                    {k: v for k, v in entry.items() if k not in ("id", "object", "created")}
                )
        for path, engine in ENGINE_INFO_PATHS:
            status, _, body = self.client.get(path)
            if status == 200 and isinstance(body, dict):
                text = str(_hide_secrets(body))
                info[f"engine_info {path}"] = (
                    _hide_secrets(body) if len(text) <= _INFO_CHARS else text[:_INFO_CHARS]
                )
                info.setdefault("engine", engine)
        return info

    def _request_facts(self) -> dict[str, Any]:
        """What the session's requests send beside the prompt, for the runtime facts."""
        return {"request": dict(self._spec.request)} if self._spec.request else {}

    # --------------------------------------------------------------- prompts

    def _body(self, text: str) -> dict[str, Any]:
        if self._spec.api == "chat":
            return {"model": self.model, "messages": [{"role": "user", "content": text}]}
        if self._spec.api == "embeddings":
            return {"model": self.model, "input": text}
        return {"model": self.model, "prompt": text}

    def _count(self, text: str) -> int:
        body = self._body(text)
        if self._spec.generative:
            body = {**body, "max_tokens": 1, "stream": False}
        reply = self.client.post(self._path, body)
        usage = reply.get("usage") if isinstance(reply, dict) else None
        count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if not isinstance(count, int):
            raise ServerError(
                f"the server of cell `{self._scenario.item_name}` reports no "
                f"usage.prompt_tokens in its reply to POST {self._path}",
                expected="the OpenAI `usage` object (it cuts prompts to `prompt_tokens`)",
                fix="use a server that reports usage (vLLM, SGLang, TGI and llama.cpp do)",
                location=self._spec.location,
            )
        return count

    def _cut(self, text: str, want: int, *, shorter: bool = False) -> tuple[str, int]:
        """The shortest prefix of ``text`` the server counts as exactly ``want`` tokens,
        and its count; with ``shorter``, a text of fewer tokens comes back whole."""
        # Grow a prefix until it holds `want` tokens (never asking for far more than the
        # context holds), then bisect for the shortest such prefix.
        high, probes = min(len(text), 2 * want), 0
        while (have := self._count(text[:high])) < want and high < len(text):
            high, probes = min(len(text), 2 * high), probes + 1
        if have < want:
            if shorter:
                return text, have
            raise InputError(
                f"a prompt of cell `{self._scenario.item_name}` is {have} tokens long on its "
                f"server; the cell needs {want}: {text[:80]!r}...",
                expected=f"prompts of at least {want} tokens",
                fix="use longer texts in the prompts file, or lower `prompt_tokens`",
                location=self._scenario.location,
            )
        low = 0
        while low < high and probes < _MAX_PROBES:  # the shortest prefix of `want` tokens
            middle = (low + high) // 2
            probes += 1
            if self._count(text[:middle]) >= want:
                high = middle
            else:
                low = middle + 1
        got = self._count(text[:high])
        if got != want:
            floor = self._count("")
            why = (
                f"the chat template alone is {floor} tokens"
                if floor >= want
                else f"its shortest cut of at least {want} tokens is {got}"
            )
            raise InputError(
                f"cell `{self._scenario.item_name}`: no cut of a text is exactly {want} "
                f"tokens on its server ({why})",
                expected=f"a text the server counts as {want} tokens",
                fix="pick another token count (for `api: chat`, above the template's own tokens)",
                location=self._scenario.location,
            )
        return text[:high], got

    def _died(self, exc: ServerError) -> ServerError:
        """``exc`` of a failed request, told why when perfguard's server has exited."""
        died = self._process.exit_reason() if self._process is not None else None
        if died is None:
            return exc
        return ServerError(
            f"{exc.problem}: {died}",
            expected="a server that keeps running for the whole cell",
            fix="see the server's log: a crash, the OOM killer (dmesg) or an outside kill",
            location=self._spec.location,
        )

    def _check_model(self, model: object) -> None:
        """Fail when a reply names another model than the one the cell opened on."""
        if model is not None and model != self.model:
            raise ServerError(
                f"the server of cell `{self._scenario.item_name}` answered as model "
                f"{model!r}; the cell opened on {self.model!r}: the server changed under the "
                "run",
                expected="the same served model for the whole cell",
                fix="keep the server (`server.url`) unchanged while perfguard runs",
                location=self._spec.location,
            )

    def check_unchanged(self) -> None:
        """Read the server's identity again: a ``url`` server that another one replaced
        while the cell was measured (another model, version or engine setting) fails it."""
        if self._process is not None:
            return  # perfguard's own server, running since the cell opened
        now = self._identity(None)
        keys = (
            "models",
            "server_header",
            *(k for k in self.runtime_info if k.startswith("engine_info")),
        )
        changed = [k for k in keys if now.get(k) != self.runtime_info.get(k)]
        if changed:
            what = "; ".join(
                f"{k}: {self.runtime_info.get(k)!r} -> {now.get(k)!r}" for k in changed
            )
            raise ServerError(
                f"the server of cell `{self._scenario.item_name}` at {self._spec.url} changed "
                f"while the cell was measured ({what[:600]})",
                expected="the same server, model and engine settings for the whole cell",
                fix="keep the server unchanged while perfguard runs (or let perfguard start "
                "it: `server.command`)",
                location=self._spec.location,
            )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._process is not None:
            self._process.stop()
            self._process = None


class ServedSession(_ServedModel):
    """A generating served model (``perfguard.backends.base.GenerativeSession``)."""

    vocab_size: int | None = None

    def _request_facts(self) -> dict[str, Any]:
        return {"stream": self._spec.stream, "fixed_length": self._fixed_fields(0, text=True)}

    def _fixed_fields(self, new_tokens: int, *, text: bool = False) -> dict[str, Any]:
        """The fixed-length fields and the suite's ``request`` fields for ``new_tokens``
        (``text``: ``{new_tokens}`` left as written, for the runtime facts)."""
        fields: dict[str, Any] = dict(FIXED_LENGTH_BODY)
        for key, value in self._spec.request:
            if value is None:
                fields.pop(key, None)
            else:
                fields[key] = value
        if not text:
            fields = {k: new_tokens if v == "{new_tokens}" else v for k, v in fields.items()}
        return fields

    def prepare(self, prompt: Any) -> dict[str, Any]:
        """The request body of ``prompt`` (a text) cut to exactly ``prompt_tokens`` of the
        server's tokens."""
        spec = self._scenario.generate
        assert spec is not None
        text, _ = self._cut(str(prompt), spec.prompt_tokens)
        return self._request_body(self._body(text), spec.new_tokens)

    def _request_body(self, prompt: dict[str, Any], new_tokens: int) -> dict[str, Any]:
        """The whole body of a timed request, built once per prompt (never inside the
        timed request): the prompt, the fixed-length fields, ``max_tokens``, ``stream``."""
        fields = self._fixed_fields(new_tokens)
        return {**prompt, **fields, "max_tokens": new_tokens, "stream": self._spec.stream}

    # --------------------------------------------------------------- requests

    def generate(self, prepared: Any, new_tokens: int, stamp: Callable[[], None]) -> Reply:
        try:
            return self._request(prepared, new_tokens, stamp)
        except ServerError as exc:
            raise self._died(exc) from exc

    def _request(self, prepared: Any, new_tokens: int, stamp: Callable[[], None]) -> Reply:
        body = prepared
        if body["max_tokens"] != new_tokens:  # another length than the cell's (not timed)
            body = self._request_body(prepared, new_tokens)
        if self._spec.stream:
            reply = self.client.stream(self._path, body, stamp)
        else:
            data = self.client.post(self._path, body)
            for _ in range(new_tokens):  # every token arrives with the reply
                stamp()
            model = data.get("model")
            reply = Reply(tokens=new_tokens, usage=data.get("usage"), chunks=1)
            reply.model = model if isinstance(model, str) else None
            choices = data.get("choices") or [{}]
            reply.finish_reason = choices[0].get("finish_reason")
        self._check(reply, new_tokens)
        return reply

    def _check(self, reply: Reply, new_tokens: int) -> None:
        counted = reply.completion_tokens
        generated = counted if counted is not None else reply.tokens
        where = f"the server of cell `{self._scenario.item_name}`"
        self._check_model(reply.model)
        if generated != new_tokens and reply.finish_reason is None:
            raise ServerError(
                f"{where} ended the stream after {generated} of {new_tokens} tokens with no "
                "finish_reason: it cut the request short",
                expected=f"{new_tokens} tokens, then a finish_reason",
                fix="see the server's log; llama-cpp-python's server cuts a running request "
                "when another arrives unless started with `--interrupt_requests False`",
                location=self._spec.location,
            )
        if generated != new_tokens:
            raise ServerError(
                f"{where} generated {generated} tokens for max_tokens {new_tokens} "
                f"(finish_reason {reply.finish_reason!r})",
                expected=f"exactly {new_tokens} tokens per request (a fixed shape)",
                fix="make the server ignore end-of-sequence: `server.request` sends "
                + ", ".join(f"{k}" for k, _ in FIXED_LENGTH_BODY)
                + " by default; add your engine's own field (TGI: none; use a prompt that "
                "does not end early) or check its log",
                location=self._spec.location,
            )
        if reply.tokens != new_tokens:
            raise ServerError(
                f"{where} streamed {reply.tokens} token chunks for {generated} tokens",
                expected="one chunk per token, so that each token has its own time",
                fix="turn off what packs tokens into chunks (speculative decoding, a stream "
                "interval or buffering flag), or set `server.stream: false` to gate the "
                "whole request",
                location=self._spec.location,
            )

    def tokens(self, generated: Any) -> None:
        """A server streams text, not token ids: ``generate`` checked the count itself."""
        return None

    def logits(self, ids: np.ndarray) -> np.ndarray:
        raise CellError(
            f"cell `{self._scenario.item_name}`: a served model's logits are not read",
            expected="accuracy checks on a model perfguard runs itself",
            location=self._scenario.location,
        )


@dataclass(frozen=True)
class _Texts:
    """A served embedding request, ready: its JSON body, encoded once, and its texts."""

    body: bytes
    texts: int


@dataclass(frozen=True)
class _Embedded:
    """What one timed embedding request returned: the reply's bytes, parsed after timing."""

    raw: bytes
    texts: int


class ServedEmbeddings(_ServedModel):
    """A served embedding model (``perfguard.backends.base.Session``): one ``POST
    /v1/embeddings`` per request, its texts cut to the input's ``tokens``."""

    #: None: a reply is complete when its last byte has arrived.
    synchronize: Callable[[], None] | None = None

    def __init__(self, scenario: Scenario, cache_dir: Path) -> None:
        super().__init__(scenario, cache_dir)
        (spec,) = scenario.model.inputs
        self._input = spec.name
        self._tokens = int(spec.shape[1])

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> _Texts:
        """The request body of ``feeds``' texts, each cut to the input's ``tokens`` of the
        server's tokens (a shorter text whole); the first inputs prepared (the timing
        ones) give the runtime fact ``input_tokens``."""
        texts, counts = [], []
        for text in np.asarray(feeds[self._input]).reshape(-1):
            cut, count = self._cut(str(text), self._tokens, shorter=True)
            texts.append(cut)
            counts.append(count)
        self.runtime_info.setdefault("input_tokens", counts)
        body = {**self._body(""), "input": texts}
        for key, value in self._spec.request:
            if value is not None:
                body[key] = value
        return _Texts(json.dumps(body).encode(), len(texts))

    def run(self, prepared: _Texts) -> _Embedded:
        try:
            raw = self.client.post_raw(self._path, prepared.body)
        except ServerError as exc:
            raise self._died(exc) from exc
        return _Embedded(raw, prepared.texts)

    def to_numpy(self, outputs: _Embedded) -> list[np.ndarray]:
        """The reply's embeddings as one ``texts x dimension`` float32 array, checked."""
        reply = self.client.json_reply(self._path, outputs.raw)
        self._check_model(reply.get("model"))
        where = f"the server of cell `{self._scenario.item_name}`"
        data = reply.get("data")
        items = sorted(
            (d for d in data if isinstance(d, dict)) if isinstance(data, list) else (),
            key=lambda d: d.get("index", 0) if isinstance(d.get("index"), int) else 0,
        )
        if len(items) != outputs.texts:
            raise ServerError(
                f"{where} returned {len(items)} embeddings for {outputs.texts} texts",
                expected="one embedding per input text (`data` of the OpenAI reply)",
                fix="check the server's log, and that it serves an embedding model",
                location=self._spec.location,
            )
        vectors = [_vector(item.get("embedding"), where, self._spec.location) for item in items]
        if len({v.shape for v in vectors}) != 1:
            raise ServerError(
                f"{where} returned embeddings of sizes "
                f"{sorted({int(v.size) for v in vectors})} in one reply",
                expected="one size of embedding for every text",
                fix="check the server's pooling setting (one vector per text)",
                location=self._spec.location,
            )
        return [np.stack(vectors)]


def _vector(value: object, where: str, location: Any) -> np.ndarray:
    """One text's embedding: a list of numbers, or base64 float32 (``encoding_format:
    base64`` in ``server.request``)."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
            return np.frombuffer(raw, dtype="<f4").astype(np.float32)
        except (ValueError, binascii.Error):
            pass
    elif (
        isinstance(value, list)
        and value
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)
    ):
        return np.asarray(value, dtype=np.float32)
    nested = isinstance(value, list) and value and isinstance(value[0], list)
    raise ServerError(
        f"{where} returned an embedding that is "
        + ("one vector per token" if nested else f"{str(value)[:80]!r}"),
        expected="one vector of numbers per text (or base64 float32)",
        fix="turn on the server's pooling (llama.cpp: `--pooling mean`; llama-cpp-python: "
        "a model with a pooling type)"
        if nested
        else "check the server's log, and that it serves an embedding model",
        location=location,
    )
