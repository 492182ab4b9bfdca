"""Served models' sessions (perfguard.backends.served) against a real llama.cpp server:
prompts cut to the server's own token count, fixed-length streamed requests, identity,
API keys kept out of everything written, each failure's message; and served embedding
models: texts cut to their tokens, one vector per text, each bad reply's message."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from perfguard.backends.served import ServedEmbeddings, ServedSession
from perfguard.core.errors import InputError, Location, ServerError
from perfguard.core.scenario import ServerSpec
from perfguard.models.inputs import generate_input
from perfguard.models.prompts import make_text_prompts
from perfguard.serving.client import OpenAIClient
from tests.helpers.processes import gone
from tests.helpers.served import (
    EMBEDDING_FLAGS,
    SERVER_FLAGS,
    embedding_scenario,
    llama_server,
    served_scenario,
    tiny_command,
)


def _spec(tmp_path: Path, **fields: object) -> ServerSpec:
    fields.setdefault("command", tuple(tiny_command()))
    return ServerSpec(Location(tmp_path / "suite.yaml", 4), **fields)  # type: ignore[arg-type]


def _count(base: str, model: str, body: dict[str, object], path: str) -> int:
    """The server's own count of the prompt (or texts) in ``body``, asked afresh."""
    client = OpenAIClient(base, name="check")
    try:
        prompt = {k: body[k] for k in ("prompt", "messages", "input") if k in body}
        one = {} if path.endswith("/embeddings") else {"max_tokens": 1}
        reply = client.post(path, {**prompt, **one, "model": model})
        return int(reply["usage"]["prompt_tokens"])
    finally:
        client.close()


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_started_server_serves_prompts_of_exactly_the_cells_length(
    tmp_path: Path, api: str
) -> None:
    scenario = served_scenario(
        tmp_path, server=_spec(tmp_path, api=api), prompt_tokens=40, new_tokens=8, prompts=3
    )
    session = ServedSession(scenario, tmp_path / "cache")
    try:
        process = session._process
        assert process is not None and process.pid is not None
        pid = process.pid
        base = session.client.base_url
        prepared = [session.prepare(p) for p in make_text_prompts(scenario)]
        path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
        for body in prepared:  # the server's own count, asked afresh
            assert _count(base, session.model, body, path) == 40
        assert len({json.dumps(b) for b in prepared}) == 3  # distinct prompts
        stamps: list[None] = []
        reply = session.generate(prepared[0], 8, lambda: stamps.append(None))
        assert len(stamps) == 8 == reply.tokens
        assert session.tokens(reply) is None  # text, not ids: generate checked the count
        info = session.runtime_info
        assert info["served_model"] == session.model and info["api"] == api
        assert info["command"].startswith("{python} -m perfguard_examples.tinyserver")
        assert "--port {port}" in info["command"]
        assert info["fixed_length"] == {"ignore_eos": True, "min_tokens": "{new_tokens}"}
        assert info["server_header"] == "uvicorn"
        session.generate(prepared[1], 8, lambda: None)
        assert session.runtime_info["connections"] == 1  # kept alive from the first probe
    finally:
        session.close()
    assert gone(pid, 10)
    assert list((tmp_path / "servers").glob("served-*.log"))  # beside the cache folder


def test_a_whole_reply_without_streaming_counts_as_every_token_at_once(tmp_path: Path) -> None:
    scenario = served_scenario(tmp_path, server=_spec(tmp_path, stream=False), new_tokens=8)
    session = ServedSession(scenario, tmp_path / "cache")
    try:
        prepared = session.prepare(make_text_prompts(scenario)[0])
        assert prepared["stream"] is False
        stamps: list[None] = []
        reply = session.generate(prepared, 8, lambda: stamps.append(None))
        assert session.runtime_info["stream"] is False
    finally:
        session.close()
    assert len(stamps) == 8 == reply.tokens and reply.chunks == 1
    assert reply.completion_tokens == 8 and reply.finish_reason == "length"
    assert reply.model == session.model


def test_a_server_that_stops_at_eos_fails_the_request_with_the_fix(tmp_path: Path) -> None:
    # Without the fixed-length fields, and EOS (id 2) made certain, the server stops early.
    request = (("ignore_eos", None), ("min_tokens", None), ("logit_bias", {"2": 100.0}))
    scenario = served_scenario(tmp_path, server=_spec(tmp_path, request=request))
    session = ServedSession(scenario, tmp_path / "cache")
    try:
        prepared = session.prepare(make_text_prompts(scenario)[0])
        with pytest.raises(ServerError) as info:
            session.generate(prepared, 8, lambda: None)
    finally:
        session.close()
    message = str(info.value)
    assert re.search(r"generated [01] tokens for max_tokens 8 \(finish_reason 'stop'\)", message)
    assert "ignore end-of-sequence" in message and "ignore_eos, min_tokens" in message


def test_a_running_server_is_reached_by_url_and_its_key_stays_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "pg-test-key-31337"
    with llama_server(tmp_path, env={"API_KEY": secret}) as (base, _proc):
        spec = _spec(tmp_path, command=(), url=base, api_key_env="PG_TEST_KEY")
        scenario = served_scenario(tmp_path, server=spec)
        monkeypatch.delenv("PG_TEST_KEY", raising=False)
        with pytest.raises(ServerError) as missing:
            ServedSession(scenario, tmp_path / "cache")
        assert "needs the API key in the environment variable PG_TEST_KEY" in str(missing.value)
        monkeypatch.setenv("PG_TEST_KEY", "wrong")
        with pytest.raises(ServerError) as refused:
            ServedSession(scenario, tmp_path / "cache")
        assert "HTTP 401" in str(refused.value)
        monkeypatch.setenv("PG_TEST_KEY", secret)
        session = ServedSession(scenario, tmp_path / "cache")
        try:
            reply = session.generate(
                session.prepare(make_text_prompts(scenario)[0]), 8, lambda: None
            )
            assert reply.tokens == 8
            facts = json.dumps(session.runtime_info)
            assert session.runtime_info["url"] == base and "command" not in session.runtime_info
        finally:
            session.close()
        assert secret not in facts
        assert secret not in str(refused.value) and "wrong" not in str(refused.value)
        wrong = dataclasses.replace(spec, model="llama-70b")
        with pytest.raises(ServerError) as other:
            ServedSession(served_scenario(tmp_path, server=wrong), tmp_path / "cache")
        assert "the suite asks for 'llama-70b'" in str(other.value)
        assert "set `server.model` to one of: " in str(other.value)


def test_a_prompt_too_short_for_the_cell_is_refused_before_timing(tmp_path: Path) -> None:
    scenario = served_scenario(tmp_path, server=_spec(tmp_path), prompt_tokens=40)
    session = ServedSession(scenario, tmp_path / "cache")
    try:
        with pytest.raises(InputError) as info:
            session.prepare("too short")
    finally:
        session.close()
    # 9 characters, the tokenizer's leading space and <s>: one token each on this model
    assert "is 11 tokens long on its server; the cell needs 40" in str(info.value)


def test_a_chat_prompt_shorter_than_its_template_says_so(tmp_path: Path) -> None:
    scenario = served_scenario(tmp_path, server=_spec(tmp_path, api="chat"), prompt_tokens=3)
    session = ServedSession(scenario, tmp_path / "cache")
    try:
        with pytest.raises(InputError) as info:
            session.prepare(make_text_prompts(scenario)[0])
    finally:
        session.close()
    assert "the chat template alone is" in str(info.value)


def test_a_url_server_replaced_under_the_cell_fails_it(tmp_path: Path) -> None:
    with llama_server(tmp_path, model=("--seed", "1")) as (base, _first):
        spec = _spec(tmp_path, command=(), url=base)
        session = ServedSession(served_scenario(tmp_path, server=spec), tmp_path / "cache")
    try:
        port = int(base.rsplit(":", 1)[1])
        with (
            llama_server(tmp_path, model=("--seed", "2"), port=port),
            pytest.raises(ServerError) as info,
        ):
            session.check_unchanged()
    finally:
        session.close()
    message = str(info.value)
    assert "changed while the cell was measured" in message
    assert "models:" in message and "-s1-fp32" in message and "-s2-fp32" in message


# --- served embedding models -------------------------------------------------------------


def _embedder(tmp_path: Path, **fields: object) -> ServedEmbeddings:
    fields.setdefault("command", tuple(tiny_command(server=EMBEDDING_FLAGS)))
    spec = _spec(tmp_path, api="embeddings", **fields)
    return ServedEmbeddings(embedding_scenario(tmp_path, server=spec), tmp_path / "cache")


def test_a_served_embedding_model_embeds_texts_cut_to_the_inputs_tokens(tmp_path: Path) -> None:
    session = _embedder(tmp_path)
    try:
        feeds = {"input": generate_input(session._scenario.model.inputs[0])}
        prepared = session.prepare(feeds)
        body = json.loads(prepared.body)
        assert body["model"] == session.model and len(body["input"]) == 2
        for text in body["input"]:  # the server's own count, asked afresh
            base = session.client.base_url
            assert _count(base, session.model, {"input": text}, "/v1/embeddings") == 24
            assert feeds["input"][body["input"].index(text)].startswith(text)
        assert session.runtime_info["input_tokens"] == [24, 24]
        (vectors,) = session.to_numpy(session.run(prepared))
        assert vectors.shape == (2, 64) and vectors.dtype == np.float32
        assert not np.allclose(vectors[0], vectors[1])
        # Each text's vector is its own, in order: the second text alone gives the second.
        alone = session.prepare({"input": np.array([body["input"][1]], dtype=object)})
        (single,) = session.to_numpy(session.run(alone))
        np.testing.assert_allclose(single[0], vectors[1], rtol=1e-4, atol=1e-5)
        # An accuracy sentence shorter than the tokens is sent whole.
        short = session.prepare({"input": np.array(["a cat", "the dog sat"], dtype=object)})
        assert json.loads(short.body)["input"] == ["a cat", "the dog sat"]
        assert session.runtime_info["input_tokens"] == [24, 24]  # the timing inputs'
        assert session.runtime_info["api"] == "embeddings"
        assert session.runtime_info["connections"] == 1
        assert session.synchronize is None
    finally:
        session.close()


@pytest.mark.parametrize(
    ("reply", "found"),
    [
        ({"data": [{"index": 0, "embedding": [1.0, 2.0]}]}, "returned 1 embeddings for 2 texts"),
        (
            {"data": [{"index": i, "embedding": [[1.0], [2.0]]} for i in range(2)]},
            "one vector per token",
        ),
        (
            {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 2.0]}]},
            "embeddings of sizes [1, 2]",
        ),
        ({"model": "other", "data": []}, "answered as model 'other'"),
        ({"data": [{"index": i, "embedding": "not base64!"} for i in range(2)]}, "'not base64!'"),
    ],
)
def test_a_bad_embeddings_reply_fails_with_what_it_held(
    tmp_path: Path, reply: dict[str, object], found: str
) -> None:
    session = _embedder(tmp_path)
    try:
        raw = json.dumps(reply).encode()
        with pytest.raises(ServerError) as info:
            session.to_numpy(type(session.run(session.prepare(_two())))(raw, 2))
    finally:
        session.close()
    assert found in str(info.value) and "Fix:" in str(info.value)
    if "per token" in found:
        assert "--pooling mean" in str(info.value)


def _two() -> dict[str, np.ndarray]:
    return {"input": np.array(["one text", "another text"], dtype=object)}


def test_base64_embeddings_are_read_as_float32(tmp_path: Path) -> None:
    session = _embedder(tmp_path)
    try:
        sent = np.array([[0.5, -1.25, 3.0], [1.0, 2.0, 4.0]], dtype="<f4")
        data = [
            {"index": i, "embedding": base64.b64encode(row.tobytes()).decode()}
            for i, row in reversed(list(enumerate(sent)))  # out of order: sorted by index
        ]
        embedded = session.run(session.prepare(_two()))
        (vectors,) = session.to_numpy(type(embedded)(json.dumps({"data": data}).encode(), 2))
    finally:
        session.close()
    np.testing.assert_array_equal(vectors, sent)


def test_a_server_without_embeddings_says_so_before_timing(tmp_path: Path) -> None:
    session = _embedder(tmp_path, command=tuple(tiny_command(server=SERVER_FLAGS)))
    try:
        with pytest.raises(ServerError) as info:
            session.prepare(_two())
    finally:
        session.close()
    message = str(info.value)
    assert "POST /v1/embeddings with HTTP" in message and "embedding=True" in message
