"""The starter suite of `perfguard init`: Hugging Face models' inputs from their config,
torch alone for a generation loop, a schema line that works in any checkout; every
starter loads with the suite loader."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from perfguard.suite import starter
from perfguard.suite.loader import load_suite
from perfguard.suite.pretrained import find_pretrained, generation_loop, pretrained_inputs
from tests.helpers.hf_models import hf_factories

pytest.importorskip("torch")


def write_and_load(
    root: Path, name: str, inputs: list[starter.StarterInput], torch_only: str | None = None
) -> str:
    """The starter's text, written to ``root/suites/<name>.yaml`` and loaded."""
    out = Path("suites") / f"{name}.yaml"
    factory = f"hf_factories:{name}"
    text = starter.render(name, out, inputs, root=root, factory=factory, torch_only=torch_only)
    (root / "suites").mkdir(exist_ok=True)
    (root / out).write_text(text, encoding="utf-8")
    assert load_suite(root / out).scenarios
    return text


def forward_names(module: Any) -> list[str]:
    return list(inspect.signature(module.forward).parameters)


def test_bert_gets_token_inputs_from_its_config(tmp_path: Path) -> None:
    models = hf_factories(tmp_path)
    bert = models.bert()
    assert find_pretrained(bert) is bert
    inputs = pretrained_inputs(bert, forward_names(bert))
    specs = [(i.name, i.shape, i.dtype, i.low, i.high, i.fill) for i in inputs]
    assert specs == [
        ("input_ids", (1, 128), "int64", 0, 500, None),  # high: the config's vocab_size
        ("attention_mask", (1, 128), "int64", None, None, 1),
        ("token_type_ids", (1, 128), "int64", None, None, 0),  # the config's type_vocab_size
    ]
    assert "at most the config's max_position_embeddings (512)" in inputs[0].note
    text = write_and_load(tmp_path, "bert", inputs)
    assert "input_ids: {shape: [1, 128], dtype: int64, low: 0, high: 500}" in text
    assert "TODO" not in text and "backend: [torch, onnxruntime]" in text


def test_gpt2_has_no_token_types_and_a_short_context_bounds_the_length(tmp_path: Path) -> None:
    models = hf_factories(tmp_path)
    gpt2 = models.gpt2()  # its forward takes token_type_ids, its config has no type_vocab_size
    inputs = pretrained_inputs(gpt2, forward_names(gpt2))
    assert [(i.name, i.shape) for i in inputs] == [
        ("input_ids", (1, 64)),
        ("attention_mask", (1, 64)),
    ]
    assert inputs[0].high == 300
    assert inputs[0].note.startswith("64 tokens: the config's max_position_embeddings (64)")
    write_and_load(tmp_path, "gpt2", inputs)


def test_a_vision_model_gets_pixel_values_of_its_config(tmp_path: Path) -> None:
    models = hf_factories(tmp_path)
    vit = models.vit()  # its forward also takes attention_mask: not an input of an image
    inputs = pretrained_inputs(vit, forward_names(vit))
    assert [(i.name, i.shape, i.dtype) for i in inputs] == [
        ("pixel_values", (1, 3, 32, 32), "float32")
    ]
    write_and_load(tmp_path, "vit", inputs)


def test_a_wrapper_exposes_its_model_and_a_generation_loop_runs_in_torch_alone(
    tmp_path: Path,
) -> None:
    models = hf_factories(tmp_path)
    wrapper = models.generator()
    assert find_pretrained(wrapper) is wrapper.lm
    reason = generation_loop(wrapper)
    assert reason == "forward() calls generate(), a generation loop"
    assert generation_loop(models.bert()) is None and generation_loop(models.encoder()) is None
    inputs = pretrained_inputs(wrapper.lm, forward_names(wrapper), generating=True)
    # A prompt leaves room for the tokens generated: half the context of 64.
    assert [(i.name, i.shape) for i in inputs] == [
        ("input_ids", (1, 32)),
        ("attention_mask", (1, 32)),
    ]
    text = write_and_load(tmp_path, "generator", inputs, torch_only=reason)
    assert "onnxruntime" not in text.replace("ONNX Runtime left out", "")
    assert "backend: torch  # ONNX Runtime left out: forward() calls generate()" in text
    (cell,) = load_suite(tmp_path / "suites" / "generator.yaml").scenarios
    assert cell.backend == "torch"


def test_a_while_loop_in_forward_is_a_generation_loop() -> None:
    torch = pytest.importorskip("torch")

    class Decode(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            while x.sum() < 10:
                x = x + 1
            return x

    assert generation_loop(Decode()) == (
        "forward() loops with `while`, a length only known as it runs"
    )
    assert generation_loop(torch.nn.Linear(2, 2)) is None  # a for loop over layers is fine


def test_no_transformers_model_is_found_in_a_plain_module() -> None:
    torch = pytest.importorskip("torch")
    assert find_pretrained(torch.nn.Linear(2, 2)) is None


def test_the_schema_line_never_names_this_machines_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    installed = tmp_path / "venv" / "site-packages" / "perfguard" / "schemas"
    monkeypatch.setattr(starter, "SCHEMA_FILE", installed / "suite.schema.json")
    line = starter.schema_comment(Path("suites/m.yaml"), project)
    assert str(tmp_path) not in line and "$schema=" not in line
    assert starter.SCHEMA_NAME in line
    # A perfguard inside the project (a .venv there): relative to the suite file.
    inside = project / ".venv" / "perfguard" / "schemas" / "suite.schema.json"
    monkeypatch.setattr(starter, "SCHEMA_FILE", inside)
    line = starter.schema_comment(Path("suites/m.yaml"), project)
    assert line == "# yaml-language-server: $schema=../.venv/perfguard/schemas/suite.schema.json"
