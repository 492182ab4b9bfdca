"""A real llama.cpp server for the tests of served models (``backend: server``).

``perfguard_examples.tinyserver`` writes the example GGUF model (seeded random weights,
``perfguard_examples.tinygguf``) and ``exec``s llama.cpp's own OpenAI-compatible server
(``llama_cpp.server``, from the ``llama-cpp-python[server]`` package that ``make install``
builds): the tests talk to the real engine, never to a mock of it.
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

from perfguard.core.errors import Location
from perfguard.core.scenario import GenerateSpec, InputSpec, ModelSpec, Scenario, ServerSpec
from perfguard.serving.process import ServerProcess, free_port, server_env

#: The model's shape flags (``tinyserver``) and llama.cpp's server flags before ``--port``.
MODEL_FLAGS: tuple[str, ...] = ("--layers", "2")
SERVER_FLAGS: tuple[str, ...] = ("--n_threads", "1", "--n_ctx", "512")
#: llama.cpp's server flags of an embedding model (the tiny model pools by its mean).
EMBEDDING_FLAGS: tuple[str, ...] = (*SERVER_FLAGS, "--embedding", "True")


def tiny_command(
    *,
    model: Sequence[str] = MODEL_FLAGS,
    server: Sequence[str] = SERVER_FLAGS,
    port: str = "{port}",
) -> list[str]:
    """The command that serves the tiny model on ``port`` (``{port}``: a suite's placeholder)."""
    python = sys.executable if port != "{port}" else "{python}"
    return [
        python, "-m", "perfguard_examples.tinyserver", *model, "--", "--port", port, *server,
    ]  # fmt: skip


@contextlib.contextmanager
def llama_server(
    tmp_path: Path,
    *,
    model: Sequence[str] = MODEL_FLAGS,
    server: Sequence[str] = SERVER_FLAGS,
    env: dict[str, str] | None = None,
    port: int | None = None,
) -> Iterator[tuple[str, ServerProcess]]:
    """A running llama.cpp server (on ``port``, else a free one); yields (its base URL,
    its process), stopped at the end."""
    port = port or free_port()
    proc = ServerProcess(
        tiny_command(model=model, server=server, port=str(port)),
        cwd=tmp_path,
        env=server_env(env or {}),
        log=tmp_path / f"server-{port}.log",
        name="the test's llama.cpp server",
    )
    proc.start()
    try:
        base = f"http://127.0.0.1:{port}"
        key = (env or {}).get("API_KEY")
        auth = {"Authorization": f"Bearer {key}"} if key else None
        proc.wait_ready(base + "/v1/models", 60.0, headers=auth)
        yield base, proc
    finally:
        proc.stop()


def served_scenario(
    tmp_path: Path,
    *,
    server: ServerSpec,
    prompt_tokens: int = 16,
    new_tokens: int = 8,
    prompts: int = 2,
    threads: int | None = None,
) -> Scenario:
    """A generative cell of a served model, as the loader would build it."""
    where = Location(tmp_path / "suite.yaml", 3)
    return Scenario(
        suite=tmp_path / "suite.yaml",
        name="served",
        cell_id="",
        model=ModelSpec("tiny", where, tmp_path, server=server),
        location=where,
        backend="server",
        threads=threads,
        generate=GenerateSpec(prompt_tokens=prompt_tokens, new_tokens=new_tokens, prompts=prompts),
    )


def embedding_scenario(
    tmp_path: Path, *, server: ServerSpec, texts: int = 2, tokens: int = 24
) -> Scenario:
    """A cell of a served embedding model (``api: embeddings``), as the loader would build
    it: one text input of ``texts`` texts of ``tokens`` tokens."""
    where = Location(tmp_path / "suite.yaml", 3)
    model = ModelSpec(
        "tiny-embedder",
        where,
        tmp_path,
        inputs=(InputSpec("input", (texts, tokens), "text"),),
        output_names=("embedding",),
        server=server,
    )
    return Scenario(
        suite=tmp_path / "suite.yaml",
        name="embed",
        cell_id="",
        model=model,
        location=where,
        backend="server",
    )


def served_suite(
    server_yaml: str, scenario_yaml: str = "", *, defaults: str = "", model_yaml: str = ""
) -> str:
    """A suite text with model ``tiny`` served by ``server_yaml`` (the ``server:`` mapping's
    lines; the model's other keys: ``model_yaml``) and one scenario ``tiny-served`` (extra
    lines: ``scenario_yaml``)."""
    return (
        textwrap.dedent(defaults)
        + "models:\n  tiny:\n"
        + textwrap.indent(textwrap.dedent(model_yaml), "    ")
        + "    server:\n"
        + textwrap.indent(textwrap.dedent(server_yaml), "      ")
        + "scenarios:\n  - name: tiny-served\n    model: tiny\n    backend: server\n"
        + textwrap.indent(textwrap.dedent(scenario_yaml), "    ")
    )
