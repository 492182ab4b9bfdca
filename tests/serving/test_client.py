"""The OpenAI-compatible client (perfguard.serving.client): against a real llama.cpp
server, and against byte-exact replays of what other engines send (vLLM's and SGLang's
stream shapes, cut streams, error events) that no engine here can be made to send."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from perfguard.core.errors import ServerError
from perfguard.serving.client import OpenAIClient
from tests.helpers.served import llama_server


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(tmp_path_factory.mktemp("llama")) as (base, _proc):
        yield base


def _client(base: str, **kwargs: object) -> OpenAIClient:
    return OpenAIClient(base, name="the test's server", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_real_stream_stamps_once_per_token(llama: str, api: str) -> None:
    client = _client(llama)
    try:
        _, _, models = client.get("/v1/models")
        model = models["data"][0]["id"]
        body: dict[str, object] = {"model": model, "max_tokens": 12, "min_tokens": 12}
        if api == "chat":
            body["messages"] = [{"role": "user", "content": "hello there"}]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = "hello there"
            path = "/v1/completions"
        stamps: list[int] = []
        reply = client.stream(path, {**body, "stream": True}, lambda: stamps.append(len(stamps)))
        assert reply.tokens == 12 == len(stamps)
        assert reply.finish_reason == "length"
        assert reply.model == model
        for _ in range(5):
            client.stream(path, {**body, "stream": True}, lambda: None)
        whole = client.post(path, {**body, "stream": False})
        assert whole["usage"]["completion_tokens"] == 12
        assert client.connections == 1  # one kept-alive connection for all of it
    finally:
        client.close()


def test_a_refused_request_quotes_the_servers_message(llama: str) -> None:
    client = _client(llama)
    try:
        body = {"prompt": "x " * 2000, "max_tokens": 4}
        with pytest.raises(ServerError) as info:
            client.post("/v1/completions", body)
        message = str(info.value)
        assert "answered POST /v1/completions with HTTP 400" in message
        assert "context" in message  # llama.cpp's own reason
    finally:
        client.close()


def test_a_server_that_is_not_there_is_named(tmp_path: Path) -> None:
    from perfguard.serving.process import free_port

    client = _client(f"http://127.0.0.1:{free_port()}", timeout_s=5)
    try:
        with pytest.raises(ServerError) as info:
            client.post("/v1/completions", {"prompt": "x"})
        assert "failed" in str(info.value) and "ClientConnectorError" in str(info.value)
        assert "check that the server is running" in str(info.value)
    finally:
        client.close()


# --------------------------------------------------------------------------- replays


@contextlib.contextmanager
def replay(chunks: list[bytes], *, status: int = 200, pause_s: float = 0.0) -> Iterator[str]:
    """A server that answers every POST with ``chunks`` as they are (``pause_s`` between
    them): what a given engine sends, byte for byte."""

    async def answer(request: web.Request) -> web.StreamResponse:
        if status != 200:
            return web.Response(status=status, text=chunks[0].decode())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
            await asyncio.sleep(pause_s)
        return response

    app = web.Application()
    app.router.add_post("/v1/{tail:.*}", answer)
    with serving(app) as base:
        yield base


@contextlib.contextmanager
def serving(app: web.Application) -> Iterator[str]:
    """``app`` served on a free port by a loop thread of its own; yields its base URL."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def _event(payload: str) -> bytes:
    return f"data: {payload}\n\n".encode()


# vLLM's chat stream: a role chunk with empty content, one chunk per token, the last
# token's chunk carrying finish_reason, then a usage-only chunk (stream_options).
VLLM_CHAT = [
    _event('{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'),
    *(
        _event(f'{{"model":"m","choices":[{{"index":0,"delta":{{"content":"t{i}"}}}}]}}')
        for i in range(3)
    ),
    _event(
        '{"model":"m","choices":[{"index":0,"delta":{"content":"t3"},"finish_reason":"length"}]}'
    ),
    _event('{"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}'),
    b"data: [DONE]\n\n",
]


def test_a_vllm_chat_stream_counts_tokens_not_chunks() -> None:
    with replay(VLLM_CHAT) as base:
        client = _client(base)
        try:
            stamps: list[None] = []
            reply = client.stream("/v1/chat/completions", {}, lambda: stamps.append(None))
        finally:
            client.close()
    assert reply.tokens == 4 == len(stamps)  # not the role chunk, not the usage chunk
    assert reply.chunks == 6
    assert reply.completion_tokens == 4 and reply.prompt_tokens == 5
    assert reply.finish_reason == "length" and "".join(reply.text) == "t0t1t2t3"


def test_split_events_and_comments_are_read_whole() -> None:
    # an event split over two writes, an SSE comment, CRLF line ends
    first = b'data: {"choices":[{"text":"a"}]}\r\n\r\n: keep-alive\r\n\r\ndata: {"choi'
    second = (
        b'ces":[{"text":"b"}]}\r\n\r\n'
        b'data: {"choices":[{"text":"","finish_reason":"length"}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    )
    with replay([first, second], pause_s=0.05) as base:
        client = _client(base)
        try:
            reply = client.stream("/v1/completions", {}, lambda: None)
        finally:
            client.close()
    assert reply.tokens == 2 and reply.text == ["a", "b"] and reply.finish_reason == "length"


@pytest.mark.parametrize(
    ("chunks", "status", "found"),
    [
        (
            [_event('{"choices":[{"text":"a"}]}'), _event('{"choices":[{"text":"b"}]}')],
            200,
            "after 2 tokens without `data: [DONE]`",
        ),
        (
            [_event('{"choices":[{"text":"a"}]}'), _event('{"error":{"message":"KV cache full"}}')],
            200,
            "sent an error in the stream of POST /v1/completions after 1 tokens: KV cache full",
        ),
        ([b'{"error":"overloaded"}'], 503, 'with HTTP 503: {"error":"overloaded"}'),
        ([b"not found"], 404, "check `server.model` and `server.api`"),
        ([b"no key"], 401, "`server.api_key_env`"),
        ([b"data: <html>\n\n"], 200, "an event that is not JSON"),
    ],
    ids=["cut", "error-event", "503", "404", "401", "not-json"],
)
def test_each_failure_says_what_happened(chunks: list[bytes], status: int, found: str) -> None:
    with replay(chunks, status=status) as base:
        client = _client(base)
        try:
            with pytest.raises(ServerError) as info:
                client.stream("/v1/completions", {}, lambda: None)
        finally:
            client.close()
    assert found in str(info.value)


def test_a_stream_that_stalls_times_out_with_the_setting_named() -> None:
    chunks = [_event('{"choices":[{"text":"a"}]}'), _event('{"choices":[{"text":"b"}]}')]
    with replay(chunks, pause_s=3.0) as base:
        client = _client(base, timeout_s=0.5)
        try:
            with pytest.raises(ServerError) as info:
                client.stream("/v1/completions", {}, lambda: None)
        finally:
            client.close()
    message = str(info.value)
    assert "after 1 tokens" in message and "no reply within 0.5 s" in message
    assert "raise `server.request_timeout_s`" in message


def test_the_api_key_is_sent_as_a_bearer_token() -> None:
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", answer)
    with serving(app) as base:
        client = _client(base, api_key="s3cret")
        try:
            assert client.get("/v1/models")[0] == 200
        finally:
            client.close()
    assert seen == ["Bearer s3cret"]
