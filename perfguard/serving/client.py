"""The HTTP client of served models: the OpenAI-compatible API over ``aiohttp``.

One ``OpenAIClient`` per open cell: an event loop in a thread of its own
(``perfguard-http``) holds one ``aiohttp.ClientSession`` whose connection pool keeps
connections alive between requests (a request never pays a TCP handshake once the pool
is warm; ``connections`` counts the ones made, and ``on_connection`` hears of each). The
measuring threads (the timing loop, each load stream) hand it requests and wait for the
reply, so concurrent streams share
one loop, as a serving benchmark's client does (vLLM's and SGLang's benchmark clients
use aiohttp too).

``stream`` reads a server-sent-event stream line by line and calls ``stamp()`` as soon
as a chunk that carries a token is parsed, in the loop's thread: a token's time is when
its chunk reached the client, plus the client's parse of that one line (a few
microseconds, measured by ``benchmarks/client_overhead.py``). A chunk carries a token
when its first choice has a text field (``text`` for completions, ``delta.content`` for
chat), even an empty one while the stream goes on (a byte of a character split over
tokens streams as ``""``); a chunk that only opens the message (``delta.role``), only
ends it (``finish_reason`` with no text) or only carries ``usage`` carries none. The
caller checks the count against the server's own (``usage``) where it sends one.

Every failure is a ``ServerError`` saying what happened: an HTTP status with the
server's own message, an ``error`` event inside a stream, a stream cut before
``data: [DONE]``, no chunk within ``timeout_s``, a refused connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from perfguard.core.errors import Location, ServerError

__all__ = ["OpenAIClient", "Reply"]

_T = TypeVar("_T")
#: Characters of a server's error body an error quotes.
_BODY_CHARS = 400
_JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass
class Reply:
    """What one request returned: its tokens (chunks that carried one, when streamed),
    the text, why it ended and the server's ``usage`` (None when it sent none)."""

    tokens: int = 0
    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    chunks: int = 0
    model: str | None = None  # the served model's id as the reply names it

    @property
    def completion_tokens(self) -> int | None:
        """The server's own count of generated tokens, when it reported one."""
        value = (self.usage or {}).get("completion_tokens")
        return value if isinstance(value, int) else None

    @property
    def prompt_tokens(self) -> int | None:
        """The server's own count of prompt tokens, when it reported one."""
        value = (self.usage or {}).get("prompt_tokens")
        return value if isinstance(value, int) else None


class OpenAIClient:
    """Requests to one server at ``base_url`` (no ``/v1``), from any thread."""

    def __init__(
        self,
        base_url: str,
        *,
        name: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        location: Location | None = None,
        on_connection: Callable[[int], None] | None = None,
    ) -> None:
        import aiohttp

        self.base_url = base_url.rstrip("/")
        self.name = name
        self.location = location
        self.timeout_s = timeout_s
        self.connections = 0
        self._on_connection = on_connection
        self._aiohttp = aiohttp
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="perfguard-http", daemon=True
        )
        self._thread.start()
        self._session: Any = self._run(self._open())

    async def _open(self) -> Any:
        aiohttp = self._aiohttp
        trace = aiohttp.TraceConfig()

        async def made(*_: Any) -> None:  # on the loop's thread, never per request
            self.connections += 1
            if self._on_connection is not None:
                self._on_connection(self.connections)

        trace.on_connection_create_end.append(made)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout_s, sock_read=self.timeout_s
        )
        # limit=0: no cap of perfguard's on concurrent connections (a load level's
        # streams each hold one); keep-alive keeps them between requests.
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60.0)
        return aiohttp.ClientSession(
            timeout=timeout,
            connector=connector,
            headers=self._headers,
            trace_configs=[trace],
            auto_decompress=False,
        )

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # --------------------------------------------------------------- requests

    def get(self, path: str) -> tuple[int, dict[str, str], Any]:
        """GET ``path``: (status, headers, the body as JSON or text; None when empty)."""
        return self._run(self._get(path))

    async def _get(self, path: str) -> tuple[int, dict[str, str], Any]:
        url = self.base_url + path
        try:
            async with self._session.get(url) as reply:
                text = await reply.text(errors="replace")
                body: Any = text or None
                with contextlib.suppress(ValueError):
                    body = json.loads(text)
                return reply.status, dict(reply.headers), body
        except (self._aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise self._failed(f"GET {path}", exc) from exc

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON to ``path``; the JSON reply (any status but 200 fails)."""
        return self.json_reply(path, self.post_raw(path, json.dumps(body).encode()))

    def post_raw(self, path: str, data: bytes) -> bytes:
        """POST ``data`` (JSON, encoded once by the caller) to ``path``; the reply's bytes,
        read to the end (any status but 200 fails). A timed request reads its reply here
        and parses it (``json_reply``) after the timing."""
        return self._run(self._post_raw(path, data))

    async def _post_raw(self, path: str, data: bytes) -> bytes:
        try:
            async with self._session.post(
                self.base_url + path, data=data, headers=_JSON_HEADERS
            ) as reply:
                raw: bytes = await reply.read()
                if reply.status != 200:
                    raise self._status(path, reply.status, raw.decode(errors="replace"))
                return raw
        except (self._aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise self._failed(f"POST {path}", exc) from exc

    def json_reply(self, path: str, raw: bytes) -> dict[str, Any]:
        """The JSON object of the reply ``raw`` to ``path``, or the error saying what it is."""
        text = raw.decode(errors="replace")
        try:
            data = json.loads(text)
        except ValueError:
            raise self._bad(path, f"a reply that is not JSON: {text[:_BODY_CHARS]!r}") from None
        if not isinstance(data, dict):
            raise self._bad(path, f"a JSON {type(data).__name__}, not an object")
        return data

    def stream(self, path: str, body: dict[str, Any], stamp: Callable[[], None]) -> Reply:
        """POST ``body`` (with ``stream: true``) and read its server-sent events, calling
        ``stamp()`` as each token's chunk arrives."""
        return self._run(self._stream(path, body, stamp))

    async def _stream(self, path: str, body: dict[str, Any], stamp: Callable[[], None]) -> Reply:
        reply = Reply()
        chat = path.endswith("/chat/completions")
        done = False
        try:
            async with self._session.post(self.base_url + path, json=body) as response:
                if response.status != 200:
                    text = await response.text(errors="replace")
                    raise self._status(path, response.status, text)
                # Whole blocks as they arrive (one wake-up per read, not per line),
                # split into lines here; a line cut between two blocks waits for the next.
                # After `[DONE]` the body is read to its end, so that the connection goes
                # back to the pool for the next request (a body left unread closes it).
                pending = b""
                async for block in response.content.iter_any():
                    if done:
                        continue
                    lines = (pending + block).split(b"\n")
                    pending = lines.pop()
                    for raw in lines:
                        if self._line(raw, path, chat, reply, stamp):
                            done = True
                            break
                if not done and pending and self._line(pending, path, chat, reply, stamp):
                    done = True
        except ServerError:
            raise
        except (self._aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise self._failed(f"the stream of POST {path}", exc, reply) from exc
        if not done:
            raise ServerError(
                f"the server of {self.name} ended the stream of POST {path} after "
                f"{reply.tokens} tokens without `data: [DONE]` (finish_reason "
                f"{reply.finish_reason!r}): a cut stream",
                expected="a stream that ends with `data: [DONE]`",
                fix="check the server's log: it may have crashed or dropped the connection",
                location=self.location,
            )
        return reply

    def _line(
        self, raw: bytes, path: str, chat: bool, reply: Reply, stamp: Callable[[], None]
    ) -> bool:
        """Read one line of the stream into ``reply`` (stamping a token's chunk); True
        at ``data: [DONE]``."""
        line = raw.strip()
        if not line.startswith(b"data:"):
            return False  # blank separators, `: comments`, `event:` lines
        data = line[5:].strip()
        if data == b"[DONE]":
            return True
        try:
            event = json.loads(data)
        except ValueError:
            raise self._bad(path, f"an event that is not JSON: {data[:200]!r}") from None
        if not isinstance(event, dict):
            raise self._bad(path, f"an event that is not an object: {data[:200]!r}")
        if "error" in event:
            raise self._event_error(path, event["error"], reply)
        reply.chunks += 1
        if reply.model is None and isinstance(event.get("model"), str):
            reply.model = event["model"]
        if event.get("usage"):
            reply.usage = event["usage"]
        choices = event.get("choices") or ()
        if not choices or not isinstance(choices[0], dict):
            return False
        choice = choices[0]
        text = _text(choice, chat)
        finish = choice.get("finish_reason")
        if finish is not None:
            reply.finish_reason = str(finish)
        if text is not None and (text or finish is None):
            stamp()
            reply.tokens += 1
            reply.text.append(text)
        return False

    # --------------------------------------------------------------- errors

    def _status(self, path: str, status: int, text: str) -> ServerError:
        message = text.strip()[:_BODY_CHARS] or "(empty body)"
        if status in (401, 403):
            fix = "set the API key's environment variable (`server.api_key_env`)"
        elif status == 404:
            fix = "check `server.model` and `server.api` (does the server serve this API?)"
        elif status in (400, 422):
            fix = "check `server.request`: the server refused a field (see its message)"
        else:
            fix = "check the server's log"
        return ServerError(
            f"the server of {self.name} answered POST {path} with HTTP {status}: {message}",
            expected="HTTP 200",
            fix=fix,
            location=self.location,
        )

    def _bad(self, path: str, what: str) -> ServerError:
        return ServerError(
            f"the server of {self.name} sent {what} for POST {path}",
            expected="the OpenAI-compatible API's JSON",
            fix="check that the server speaks the OpenAI API at this URL",
            location=self.location,
        )

    def _event_error(self, path: str, error: Any, reply: Reply) -> ServerError:
        text = error.get("message", error) if isinstance(error, dict) else error
        return ServerError(
            f"the server of {self.name} sent an error in the stream of POST {path} after "
            f"{reply.tokens} tokens: {str(text)[:_BODY_CHARS]}",
            expected="a stream of tokens",
            fix="check the server's log",
            location=self.location,
        )

    def _failed(self, what: str, exc: BaseException, reply: Reply | None = None) -> ServerError:
        if isinstance(exc, asyncio.TimeoutError):
            reason = f"no reply within {self.timeout_s:g} s"
            fix = "raise `server.request_timeout_s`, or check whether the server hangs"
        else:
            reason = f"{type(exc).__name__}: {exc}"
            fix = "check that the server is running (its log) and reachable at its URL"
        after = f" after {reply.tokens} tokens" if reply is not None else ""
        return ServerError(
            f"{what} to the server of {self.name} at {self.base_url} failed{after}: {reason}",
            expected="a reply from a running server",
            fix=fix,
            location=self.location,
        )

    # --------------------------------------------------------------- end

    def close(self) -> None:
        """Close the connections and stop the loop's thread."""
        if not self._loop.is_running():
            return
        with contextlib.suppress(Exception):
            self._run(self._session.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._loop.close()


def _text(choice: dict[str, Any], chat: bool) -> str | None:
    """A chunk's text, "" when it has an empty one, None when it carries no text field
    (a chat chunk that opens the message with ``role``, or one with no content)."""
    if chat:
        delta = choice.get("delta")
        if not isinstance(delta, dict) or ("role" in delta and not delta.get("content")):
            return None
        content = delta.get("content")
        return content if isinstance(content, str) else None
    text = choice.get("text")
    return text if isinstance(text, str) else None
