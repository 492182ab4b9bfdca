"""`perfguard keys` and `perfguard init`: the grammar as a table, starter suites that load."""

from __future__ import annotations

import contextlib
import importlib
import json
import warnings
from pathlib import Path

import pytest

from perfguard.cli import main
from perfguard.suite import grammar, starter
from perfguard.suite.loader import load_suite
from tests.helpers.hf_models import HF_FACTORIES, preload_transformers

# Imported once, up front: pytester restores sys.modules after each test, and a second
# import of onnx's or torch's C extension in one process aborts it.
for _runtime in ("torch", "onnx", "onnxruntime"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_runtime)
preload_transformers()

TINY_FACTORY = """\
import torch


def build():
    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())


class Pair(torch.nn.Module):
    def forward(self, left, right):
        return left @ right.T


def pair():
    return Pair()


class Fussy(torch.nn.Module):
    def forward(self, image):
        if image.dim() != 4:
            raise ValueError("expected NCHW")
        return image


def fussy():
    return Fussy()
"""


def export_tiny_onnx(path: Path) -> None:
    """An Embedding model with dynamic batch and sequence dims, exported with torch."""
    torch = pytest.importorskip("torch")

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(1000, 8)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.emb(input_ids).mean(dim=1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Tiny().eval(),
            (torch.zeros(2, 16, dtype=torch.int64),),
            str(path),
            dynamo=False,
            input_names=["input_ids"],
            output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}},
        )


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    monkeypatch.chdir(pytester.path)
    return pytester


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- keys


def test_keys_lists_every_grammar_key_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "keys")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["KEY", "TYPE", "DEFAULT", "MEANING"]
    paths = [line.split()[0] for line in lines[1:]]
    assert paths == [row.path for row in grammar.walk()]
    slo = next(line for line in lines if line.startswith("scenarios[].load.slo.p95_ms "))
    assert "number > 0" in slo and "P95 latency in ms" in slo
    p95 = next(line for line in lines if line.startswith("scenarios[].gate.p95 "))
    assert '"+5%"' in p95  # the policy's default gate


def test_keys_json_and_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "keys", "scenarios[].load", "--json")
    assert code == 0
    rows = json.loads(out)
    assert rows[0]["path"] == "scenarios[].load"
    assert all(r["path"].startswith("scenarios[].load") for r in rows)
    threads = json.loads(run(capsys, "keys", "defaults.threads", "--json")[1])
    assert threads == [
        {
            "path": "defaults.threads",
            "type": "int >= 1",
            "default": "the runtime's",
            "doc": "intra-op threads",
        }
    ]


def test_keys_unknown_prefix_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "keys", "scenario.lod")
    assert code == 2 and out == ""
    assert err.startswith("perfguard: error: no suite key starts with 'scenario.lod'")
    assert err.count("\n") == 1


# --------------------------------------------------------------------------- init


def test_init_onnx_reads_the_graph_inputs_and_the_suite_collects(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    export_tiny_onnx(project.path / "tiny.onnx")
    code, out, err = run(capsys, "init", "--onnx", "tiny.onnx")
    assert (code, err) == (0, ""), err
    path = project.path / "suites" / "tiny.yaml"
    assert out.startswith("wrote suites/tiny.yaml (1 input)")
    assert "no pytest settings needed" in out
    text = path.read_text(encoding="utf-8")
    first = text.splitlines()[0]  # perfguard lies outside this project: no path of it
    assert starter.SCHEMA_NAME in first and str(starter.SCHEMA_FILE) not in text
    assert "dim 0 (`batch`) fixed at 1; dim 1 (`sequence`) fixed at 128" in text
    (sc,) = load_suite(path).scenarios
    assert sc.backend == "onnxruntime" and sc.model.onnx == (path.parent / "../tiny.onnx")
    (spec,) = sc.model.inputs
    assert (spec.name, spec.shape, spec.dtype) == ("input_ids", (1, 128), "int64")
    result = project.runpytest("--perfguard", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["suites/tiny.yaml::tiny"])


def test_init_elsewhere_prints_the_suite_pattern(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    export_tiny_onnx(project.path / "tiny.onnx")
    code, out, _ = run(capsys, "init", "--onnx", "tiny.onnx", "-o", "bench/tiny.yaml")
    assert code == 0
    line = 'perfguard_suite_patterns = ["bench/*.yaml"]'
    assert f"[tool.pytest.ini_options]\n{line}" in out
    assert "onnx: ../tiny.onnx" in (project.path / "bench" / "tiny.yaml").read_text()
    project.makeini("[pytest]\nperfguard_suite_patterns = bench/*.yaml\n")
    project.runpytest("--perfguard", "--collect-only", "-q").stdout.fnmatch_lines(
        ["bench/tiny.yaml::tiny"]
    )


def test_init_onnx_falls_back_to_onnxruntime(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    export_tiny_onnx(project.path / "tiny.onnx")
    with_onnx = starter.onnx_inputs(project.path / "tiny.onnx")

    def no_onnx(path: Path) -> list[starter.StarterInput]:
        raise ImportError("onnx")

    monkeypatch.setattr(starter, "_with_onnx", no_onnx)
    assert starter.onnx_inputs(project.path / "tiny.onnx") == with_onnx


def test_init_factory_reads_forward_and_prints_the_ini_lines(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    (project.path / "tinyfactory.py").write_text(TINY_FACTORY)
    code, out, err = run(capsys, "init", "--factory", "tinyfactory:build")
    assert (code, err) == (0, ""), err
    # The module sits at the project root, the suite in suites/: pytest needs the root.
    assert "[tool.pytest.ini_options]" in out
    assert 'pythonpath = ["."]' in out
    path = project.path / "suites" / "tinyfactory.yaml"
    text = path.read_text(encoding="utf-8")
    assert "input: {shape: [1, 8], dtype: float32}  # from its first layer, Linear" in text
    assert "forward() ran on these inputs" in text and "TODO" not in text
    cells = load_suite(path).scenarios
    assert [sc.item_name for sc in cells] == ["tinyfactory[torch]", "tinyfactory[onnxruntime]"]
    project.makeini('[pytest]\npythonpath = "."\n')
    result = project.runpytest("--perfguard", "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        ["suites/tinyfactory.yaml::tinyfactory[[]torch[]]", "*tinyfactory[[]onnxruntime[]]"]
    )


def test_init_factory_marks_what_it_could_not_tell(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    (project.path / "suites").mkdir()
    (project.path / "suites" / "tinyfactory.py").write_text(TINY_FACTORY)
    code, out, _ = run(capsys, "init", "--factory", "tinyfactory:pair", "-o", "suites/pair.yaml")
    assert code == 0
    assert "no pytest settings needed" in out  # the module sits beside the suite
    text = (project.path / "suites" / "pair.yaml").read_text(encoding="utf-8")
    assert "left: {shape: [1, 128], dtype: float32}  # TODO: shape and dtype are a guess" in text
    assert "right: {shape: [1, 128], dtype: float32}" in text
    code, out, _ = run(capsys, "init", "--factory", "tinyfactory:fussy", "-o", "suites/f.yaml")
    assert code == 0 and "TODO line" in out
    text = (project.path / "suites" / "f.yaml").read_text(encoding="utf-8")
    assert "TODO: forward() raised ValueError: expected NCHW on these inputs" in text
    assert len(load_suite(project.path / "suites" / "f.yaml").scenarios) == 2


def test_init_refuses_to_overwrite_without_force(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    export_tiny_onnx(project.path / "tiny.onnx")
    path = project.path / "suites" / "tiny.yaml"
    path.parent.mkdir()
    path.write_text("keep me\n")
    code, out, err = run(capsys, "init", "--onnx", "tiny.onnx")
    assert (code, out) == (2, "")
    assert err == (
        "perfguard: error: suites/tiny.yaml already exists; expected a path with no file yet. "
        "Fix: pass --force to overwrite it, or --out to write another file\n"
    )
    assert path.read_text() == "keep me\n"
    assert run(capsys, "init", "--onnx", "tiny.onnx", "--force")[0] == 0
    assert load_suite(path).scenarios


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["--onnx", "missing.onnx"], "perfguard: error: ONNX file missing.onnx not found"),
        (["--onnx", "bad.onnx"], "perfguard: error: bad.onnx is not an ONNX model"),
        (["--factory", "tinyfactory.build"], "perfguard: error: --factory 'tinyfactory.build'"),
        (["--factory", "nomodule:build"], "perfguard: error: --factory: cannot import"),
        (["--factory", "tinyfactory:nope"], "perfguard: error: --factory: module 'tinyfactory'"),
    ],
)
def test_init_errors_are_one_line_exit_2(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str], argv: list[str], start: str
) -> None:
    (project.path / "bad.onnx").write_text("not a model")
    (project.path / "tinyfactory.py").write_text(TINY_FACTORY)
    code, out, err = run(capsys, "init", *argv)
    assert (code, out) == (2, "")
    assert err.startswith(start), err
    assert err.count("\n") == 1, err
    assert not (project.path / "suites").exists()


def test_suite_names_are_what_the_loader_accepts() -> None:
    assert starter.suite_name("my model (v2)") == "my_model__v2"
    assert starter.suite_name("bert-base.int8") == "bert-base.int8"
    assert starter.suite_name("...") == "model"


# --------------------------------------------------------------------------- Hugging Face


def test_init_bert_factory_reads_its_config_and_runs_under_perfguard(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    (project.path / "suites").mkdir()
    (project.path / "suites" / "hf_factories.py").write_text(HF_FACTORIES)
    code, out, err = run(capsys, "init", "--factory", "hf_factories:bert", "-o", "suites/bert.yaml")
    assert (code, err) == (0, ""), err
    assert out.startswith("wrote suites/bert.yaml (3 inputs)") and "TODO" not in out
    text = (project.path / "suites" / "bert.yaml").read_text(encoding="utf-8")
    assert "forward() names no required input" not in text
    assert "inputs:  # forward() ran on these inputs" in text
    assert "input_ids: {shape: [1, 128], dtype: int64, low: 0, high: 500}" in text
    assert "attention_mask: {shape: [1, 128], dtype: int64, fill: 1}" in text
    assert "token_type_ids: {shape: [1, 128], dtype: int64, fill: 0}" in text
    cells = load_suite(project.path / "suites" / "bert.yaml").scenarios
    assert [sc.backend for sc in cells] == ["torch", "onnxruntime"]
    # The starter runs as written (its torch cell: the measurement, not the export).
    result = project.runpytest(
        "--perfguard",
        "suites/bert.yaml",
        "-k",
        "torch",
        "--perfguard-no-gate",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)


def test_init_generation_loop_factory_proposes_torch_alone(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    (project.path / "hf_factories.py").write_text(HF_FACTORIES)
    code, _, err = run(capsys, "init", "--factory", "hf_factories:generator")
    assert (code, err) == (0, ""), err
    text = (project.path / "suites" / "hf_factories.yaml").read_text(encoding="utf-8")
    assert "backend: torch  # ONNX Runtime left out: forward() calls generate()" in text
    assert "[torch, onnxruntime]" not in text
    assert "input_ids: {shape: [1, 32], dtype: int64, low: 0, high: 300}" in text
    assert "32 tokens: half the config's max_position_embeddings (32)" in text
    (cell,) = load_suite(project.path / "suites" / "hf_factories.yaml").scenarios
    assert cell.backend == "torch"


def test_init_wrapper_taking_kwargs_gets_its_models_inputs(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    (project.path / "hf_factories.py").write_text(HF_FACTORIES)
    code, _, err = run(capsys, "init", "--factory", "hf_factories:encoder", "--name", "enc")
    assert (code, err) == (0, ""), err
    text = (project.path / "suites" / "enc.yaml").read_text(encoding="utf-8")
    assert "TODO" not in text and "forward() ran on these inputs" in text
    (cell, _) = load_suite(project.path / "suites" / "enc.yaml").scenarios
    names = [spec.name for spec in cell.model.inputs]
    assert names == ["input_ids", "attention_mask", "token_type_ids"]


# --------------------------------------------------------------------------- .gitignore


def test_init_without_gitignore_offers_the_lines_and_writes_nothing(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    export_tiny_onnx(project.path / "tiny.onnx")
    code, out, _ = run(capsys, "init", "--onnx", "tiny.onnx")
    assert code == 0
    assert out.endswith(
        ".gitignore is missing: git would not ignore .perfguard/ (the export and "
        "quantization cache) and reports/ (each run's reports and results.json); add these "
        "lines to it (init --gitignore adds them):\n.perfguard/\nreports/\n"
    )
    assert not (project.path / ".gitignore").exists()


def test_init_gitignore_adds_only_the_missing_lines(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    export_tiny_onnx(project.path / "tiny.onnx")
    gitignore = project.path / ".gitignore"
    gitignore.write_text("node_modules/\n/reports")
    code, out, _ = run(capsys, "init", "--onnx", "tiny.onnx")
    assert code == 0
    assert ".gitignore does not ignore .perfguard/ (the export and quantization cache);" in out
    assert "reports/ (" not in out
    assert gitignore.read_text() == "node_modules/\n/reports"  # never written unasked
    code, out, _ = run(capsys, "init", "--onnx", "tiny.onnx", "--force", "--gitignore")
    assert code == 0
    assert "added to .gitignore: .perfguard/ (the export and quantization cache)" in out
    assert gitignore.read_text() == (
        "node_modules/\n/reports\n# perfguard's generated files\n.perfguard/\n"
    )
    code, out, _ = run(capsys, "init", "--onnx", "tiny.onnx", "--force")
    assert code == 0 and ".gitignore" not in out  # all ignored: nothing to say


def test_init_prints_the_schema_it_does_not_write(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    export_tiny_onnx(project.path / "tiny.onnx")
    elsewhere = project.path.parent / "venv" / "perfguard" / "schemas" / "suite.schema.json"
    monkeypatch.setattr(starter, "SCHEMA_FILE", elsewhere)
    code, out, _ = run(capsys, "init", "--onnx", "tiny.onnx")
    assert code == 0
    assert f"editor schema: {elsewhere} (not written into suites/tiny.yaml" in out
    text = (project.path / "suites" / "tiny.yaml").read_text(encoding="utf-8")
    assert str(elsewhere.parent.parent.parent) not in text
