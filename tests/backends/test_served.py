"""Served models' sessions (perfguard.backends.served) against a real llama.cpp server:
prompts cut to the server's own token count, fixed-length streamed requests, identity,
API keys kept out of everything written, and each failure's message."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from perfguard.backends.served import ServedSession
from perfguard.core.errors import InputError, Location, ServerError
from perfguard.core.scenario import ServerSpec
from perfguard.models.prompts import make_text_prompts
from perfguard.serving.client import OpenAIClient
from tests.helpers.processes import gone
from tests.helpers.served import llama_server, served_scenario, tiny_command


def _spec(tmp_path: Path, **fields: object) -> ServerSpec:
    fields.setdefault("command", tuple(tiny_command()))
    return ServerSpec(Location(tmp_path / "suite.yaml", 4), **fields)  # type: ignore[arg-type]


def _count(base: str, model: str, body: dict[str, object], path: str) -> int:
    client = OpenAIClient(base, name="check")
    try:
        prompt = {k: body[k] for k in ("prompt", "messages") if k in body}
        reply = client.post(path, {**prompt, "model": model, "max_tokens": 1})
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
    assert "models:" in message and "-s1.gguf" in message and "-s2.gguf" in message
