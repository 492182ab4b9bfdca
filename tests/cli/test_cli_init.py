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

# Imported once, up front: pytester restores sys.modules after each test, and a second
# import of onnx's or torch's C extension in one process aborts it.
for _runtime in ("torch", "onnx", "onnxruntime"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_runtime)

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
    first = text.splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    assert first.endswith("perfguard/schemas/suite.schema.json")
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
