"""Served models in a suite (``models: {m: {server: ...}}``, ``backend: server``): what
the loader takes, and each refusal's place and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfguard.core.errors import SuiteError
from perfguard.core.scenario import Scenario
from perfguard.suite.loader import load_suite
from tests.helpers.served import served_suite

GEN = "generate: {prompt_tokens: 16, new_tokens: 8}\n"
COMMAND = 'command: [serve, --port, "{port}", -t, "{threads}"]\n'


def cells(tmp_path: Path, text: str) -> list[Scenario]:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    return list(load_suite(path).scenarios)


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(SuiteError) as info:
        cells(tmp_path, text)
    return str(info.value)


def test_a_served_models_cells_carry_its_server(tmp_path: Path) -> None:
    text = served_suite(
        COMMAND + "api: chat\nmodel: m1\nenv: {OMP_NUM_THREADS: '1'}\nrequest: {top_k: 1}\n",
        GEN + "matrix: {threads: [1, 2]}\n",
    )
    got = cells(tmp_path, text)
    assert [c.item_name for c in got] == ["tiny-served[1-p16]", "tiny-served[2-p16]"]
    assert all(c.error is None for c in got)
    server = got[0].model.server
    assert server is not None
    assert server.command == ("serve", "--port", "{port}", "-t", "{threads}")
    assert server.api == "chat" and server.model == "m1" and server.stream
    assert server.env == (("OMP_NUM_THREADS", "1"),) and server.request == (("top_k", 1),)
    assert server.location.line == 3 and server.placeholders == {"port", "threads"}
    assert not server.exclusive
    (alone,) = cells(tmp_path, served_suite(COMMAND + "exclusive: true\n", GEN + "threads: 1\n"))
    assert alone.model.server is not None and alone.model.server.exclusive


def test_a_command_string_is_split_like_a_shell(tmp_path: Path) -> None:
    text = served_suite("command: \"vllm serve 'my model' --port {port}\"\n", GEN)
    (got,) = cells(tmp_path, text)
    assert got.model.server is not None
    assert got.model.server.command == ("vllm", "serve", "my model", "--port", "{port}")


@pytest.mark.parametrize(
    ("server", "found"),
    [
        ("command: [serve]\n", "has no {port}"),
        ('command: [serve, --port, "{port}", "{model}"]\n', "the placeholder {model}"),
        ('command: [serve, --port, "{port}", "--api-key=abc"]\n', "seems to hold a secret"),
        ('command: "serve --port {port} \'open"\n', "cannot be split into arguments"),
        ("url: http://h:8000/v1\n", "ends with /v1"),
        ("url: ftp://h\n", "an http:// or https:// URL"),
        ("url: http://me:pw@h:8000\n", "holds credentials"),
        ("url: http://h:8000\nenv: {A: b}\n", "has `url` and `env`"),
        ("url: http://h:8000\nstart_timeout_s: 5\n", "has `url` and `start_timeout_s`"),
        ("url: http://h:8000\nexclusive: true\n", "has `url` and `exclusive`"),
        ("url: http://h:8000\nhealth: health\n", "write `/health`"),
        ("url: http://h:8000\nrequest: {max_tokens: 5}\n", "sets `max_tokens`"),
        ("url: http://h:8000\nrequest: {api_key: x}\n", "looks like a secret"),
        ("url: http://h:8000\napi: responses\n", "`api`"),
        ("url: http://h:8000\ncommand: [x]\n", "both `url` and `command`"),
    ],
)
def test_a_bad_server_is_refused_at_its_line(tmp_path: Path, server: str, found: str) -> None:
    message = refusal(tmp_path, served_suite(server, GEN))
    assert found in message, message
    assert "s.yaml:" in message and "Fix:" in message


@pytest.mark.parametrize(
    ("scenario", "found"),
    [
        (GEN + "matrix: {precision: [fp16, int8]}\n", "the matrix varies `precision`"),
        ("generate: {prompt_tokens: 16, new_tokens: 8, batch: 2}\n", "batches of 2 prompts"),
        (GEN + "accuracy: {}\n", "checks the accuracy of a served model"),
    ],
)
def test_a_cell_a_server_cannot_serve_fails_alone(
    tmp_path: Path, scenario: str, found: str
) -> None:
    text = served_suite(
        COMMAND, scenario + "threads: 1\n" if "matrix" not in scenario else scenario
    )
    got = cells(tmp_path, text)
    assert all(c.error is not None and found in c.error for c in got), [c.error for c in got]


def test_a_command_using_threads_needs_a_threads_value(tmp_path: Path) -> None:
    (got,) = cells(tmp_path, served_suite(COMMAND, GEN))
    assert got.error is not None and "uses {threads}" in got.error


def test_a_served_model_runs_on_backend_server_only(tmp_path: Path) -> None:
    text = served_suite("url: http://h:8000\n", GEN).replace("backend: server", "backend: torch")
    (got,) = cells(tmp_path, text)
    assert got.error is not None and "a served model, on `torch`" in got.error
    text = (
        "models:\n  lm:\n    factory: pkg.mod:build\nscenarios:\n"
        "  - {name: s, model: lm, backend: server, generate: {prompt_tokens: 8, new_tokens: 4}}\n"
    )
    (got,) = cells(tmp_path, text)
    assert got.error is not None and "a model with `server:`" in got.error


def test_a_served_model_without_generate_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, served_suite("url: http://h:8000\n"))
    assert "a served model that generates (`api: completions`), and generates nothing" in message
    assert "s.yaml:7" in message and "`server.api: embeddings`" in message


def test_a_prompts_file_needs_no_tokenizer_for_a_served_model(tmp_path: Path) -> None:
    scenario = "generate: {prompt_tokens: 16, new_tokens: 8, file: p.jsonl}\n"
    (got,) = cells(tmp_path, served_suite("url: http://h:8000\n", scenario))
    assert got.error is None and got.generate is not None
    assert got.generate.file == tmp_path / "p.jsonl" and got.generate.tokenizer is None


def test_a_load_level_may_allow_a_share_of_failed_requests(tmp_path: Path) -> None:
    scenario = GEN + "load: {concurrency: [1, 4], errors_max: 0.02}\n"
    got = cells(tmp_path, served_suite("url: http://h:8000\n", scenario))
    assert [c.load.errors_max for c in got if c.load is not None] == [0.02, 0.02]
    message = refusal(
        tmp_path,
        served_suite("url: http://h:8000\n", GEN + "load: {concurrency: 2, errors_max: 1}\n"),
    )
    assert "`errors_max`" in message and "s.yaml:10" in message


EMBED = "url: http://h:8000\napi: embeddings\n"
TEXTS = "inputs:\n  input: {shape: [4, 32], dtype: text}\n"


def test_a_served_embedding_model_takes_texts_and_is_checked_for_accuracy(
    tmp_path: Path,
) -> None:
    scenario = "matrix: {precision: [fp32, int8]}\naccuracy: {reference: {precision: fp32}}\n"
    command = 'command: [serve, --port, "{port}", --dtype, "{precision}"]\napi: embeddings\n'
    got = cells(tmp_path, served_suite(command, scenario, model_yaml=TEXTS))
    assert [c.item_name for c in got] == ["tiny-served[fp32]", "tiny-served[int8]"]
    assert all(c.error is None for c in got), [c.error for c in got]
    (spec,) = got[1].model.inputs
    assert (spec.name, spec.shape, spec.dtype) == ("input", (4, 32), "text")
    assert got[1].model.output_names == ("embedding",)
    assert got[1].accuracy is not None and got[1].generate is None


@pytest.mark.parametrize(
    ("server", "model", "scenario", "found", "line"),
    [
        (EMBED, "", "", "a served embedding model with no `inputs`", 2),
        (EMBED, "inputs:\n  ids: {shape: [1, 8], dtype: int64}\n", "", "with inputs ids", 3),
        (EMBED, "inputs_file: x.npz\n", "", "with no `inputs`", 2),
        (EMBED, TEXTS + "outputs: [a, b]\n", "", "with outputs a, b", 5),
        (EMBED, "inputs:\n  t: {shape: [4, 32, 2], dtype: text}\n", "", "shape [texts, tokens]", 4),
        (EMBED, "inputs:\n  t: {shape: [4, 32], dtype: text, fill: 1}\n", "", "and `fill`", 4),
        (EMBED, TEXTS, GEN, "generates on model `tiny`, a served embedding model", 12),
        ("url: http://h:8000\n", TEXTS.replace("text", "int64"), GEN, "has `inputs`", 3),
        ("url: http://h:8000\n", "inputs_file: x.npz\n", GEN, "has `inputs_file`", 3),
    ],
)
def test_a_served_model_whose_inputs_do_not_fit_its_api_is_refused_at_its_line(
    tmp_path: Path, server: str, model: str, scenario: str, found: str, line: int
) -> None:
    message = refusal(tmp_path, served_suite(server, scenario, model_yaml=model))
    assert found in message and f"s.yaml:{line}:" in message and "Fix:" in message, message


def test_text_inputs_belong_to_served_embedding_models_only(tmp_path: Path) -> None:
    text = (
        "models:\n  m:\n    factory: pkg.mod:build\n    inputs:\n"
        "      t: {shape: [1, 8], dtype: text}\n"
        "scenarios:\n  - {name: s, model: m}\n"
    )
    message = refusal(tmp_path, text)
    assert "input `t` of model `m` has dtype text" in message and "s.yaml:5:" in message
    assert "`server: {api: embeddings}`" in message


def test_perfguard_batching_is_refused_for_a_server(tmp_path: Path) -> None:
    scenario = "load: {concurrency: 2, batching: {max_batch: 4, max_wait_ms: 1}}\n"
    (got,) = cells(tmp_path, served_suite(EMBED, scenario, model_yaml=TEXTS))
    assert got.error is not None and "`load.batching`" in got.error
    assert "the server's own batching flags" in got.error


def test_a_served_models_operators_are_not_profiled(tmp_path: Path) -> None:
    (got,) = cells(tmp_path, served_suite(EMBED, "profile: true\n", model_yaml=TEXTS))
    assert got.error is not None and "profiles the operators of a served model" in got.error
    assert "the engine's own profiler" in got.error
