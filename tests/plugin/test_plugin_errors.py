"""End-to-end: every kind of bad input fails only its own file or cell, with a clear message."""

from __future__ import annotations

import json

import pytest

from tests.helpers.suites import FAST_DEFAULTS, MLP_MODEL, write_suite

GOOD_SUITE = (
    FAST_DEFAULTS
    + MLP_MODEL
    + """\
scenarios:
  - name: good
    model: mlp
"""
)


def _one_model_suite(model_body: str, *, backend: str = "torch") -> str:
    return (
        FAST_DEFAULTS
        + "models:\n  m:\n"
        + "".join(f"    {line}\n" for line in model_body.strip().splitlines())
        + f"scenarios:\n  - name: bad\n    model: m\n    backend: {backend}\n"
    )


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--perfguard", "-rfEs", *args)


def test_malformed_yaml_fails_its_file_and_others_still_run(
    suite_writer: pytest.Pytester,
) -> None:
    write_suite(suite_writer, "good", GOOD_SUITE)
    write_suite(suite_writer, "broken", "scenarios:\n  - name: x\n    model: [unclosed\n")
    result = _run(suite_writer)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*suites/broken.yaml:*"])
    assert "Traceback" not in result.stdout.str()


def test_unknown_key_suggests_nearest(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "typo", GOOD_SUITE.replace("  threads: 1", "  warmpu: {}"))
    result = _run(suite_writer)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "typo.yaml:4" in out
    assert "warmpu" in out
    assert "warmup" in out


def test_negative_count_names_line(suite_writer: pytest.Pytester) -> None:
    write_suite(suite_writer, "neg", GOOD_SUITE.replace("iterations: 30", "iterations: -3"))
    result = _run(suite_writer)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*neg.yaml:3*"])


def test_unsupported_combination_fails_only_that_cell(suite_writer: pytest.Pytester) -> None:
    body = GOOD_SUITE.replace(
        "    model: mlp\n",
        "    model: mlp\n    matrix:\n      backend: [torch, onnxruntime]\n"
        "      precision: [fp32, bf16]\n",
    )
    write_suite(suite_writer, "combo", body)
    result = _run(suite_writer)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["FAILED*good?onnxruntime-bf16?*"])
    assert "bf16" in result.stdout.str()


def test_factory_that_cannot_be_imported(suite_writer: pytest.Pytester) -> None:
    write_suite(
        suite_writer,
        "s",
        _one_model_suite("factory: no_such_module:build\ninputs:\n  x: {shape: [1, 8]}"),
    )
    write_suite(suite_writer, "good", GOOD_SUITE)
    result = _run(suite_writer)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "no_such_module" in out
    assert "s.yaml:" in out


def test_factory_not_returning_a_module(suite_writer: pytest.Pytester) -> None:
    write_suite(
        suite_writer,
        "s",
        _one_model_suite("factory: tinymodels:not_a_module\ninputs:\n  x: {shape: [1, 8]}"),
    )
    result = _run(suite_writer)
    result.assert_outcomes(failed=1)
    assert "int" in result.stdout.str()
    assert "torch.nn.Module" in result.stdout.str()


def test_factory_that_raises(suite_writer: pytest.Pytester) -> None:
    write_suite(
        suite_writer,
        "s",
        _one_model_suite("factory: tinymodels:explodes\ninputs:\n  x: {shape: [1, 8]}"),
    )
    result = _run(suite_writer)
    result.assert_outcomes(failed=1)
    assert "weights file is corrupt" in result.stdout.str()


def test_missing_and_invalid_onnx_files(suite_writer: pytest.Pytester) -> None:
    write_suite(
        suite_writer,
        "missing",
        _one_model_suite(
            "onnx: nowhere.onnx\ninputs:\n  x: {shape: [1, 8]}", backend="onnxruntime"
        ),
    )
    (suite_writer.path / "suites" / "junk.onnx").write_text("this is not a protobuf")
    write_suite(
        suite_writer,
        "junk",
        _one_model_suite("onnx: junk.onnx\ninputs:\n  x: {shape: [1, 8]}", backend="onnxruntime"),
    )
    result = _run(suite_writer)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "nowhere.onnx" in out
    assert "not found" in out
    assert "junk.onnx" in out
    assert "not an ONNX model" in out


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_input_names_that_do_not_match(suite_writer: pytest.Pytester, backend: str) -> None:
    write_suite(
        suite_writer,
        "s",
        _one_model_suite(
            "factory: tinymodels:two_inputs\ninputs:\n  x: {shape: [1, 8]}\n  wrong: {shape: [1]}",
            backend=backend,
        ),
    )
    result = _run(suite_writer)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "wrong" in out
    assert "scale" in out


def test_input_shape_that_does_not_match(suite_writer: pytest.Pytester) -> None:
    write_suite(
        suite_writer,
        "s",
        _one_model_suite("factory: tinymodels:mlp\ninputs:\n  x: {shape: [2, 5]}"),
    )
    result = _run(suite_writer)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "s.yaml:" in out
    assert "shape" in out


def test_nan_output_fails(suite_writer: pytest.Pytester) -> None:
    write_suite(
        suite_writer,
        "s",
        _one_model_suite("factory: tinymodels:nan_model\ninputs:\n  x: {shape: [1, 8]}"),
    )
    result = _run(suite_writer)
    result.assert_outcomes(failed=1)
    assert "NaN/Inf" in result.stdout.str()


def test_missing_runtime_skips_with_install_hint(suite_writer: pytest.Pytester) -> None:
    suite_writer.makeconftest(
        """
        from perfguard.backends.onnxruntime_backend import OnnxRuntimeBackend

        OnnxRuntimeBackend.unavailable_reason = lambda self: (
            "ONNX Runtime is not installed (pip install 'perfguard[onnx]')"
        )
        """
    )
    body = GOOD_SUITE.replace(
        "    model: mlp\n", "    model: mlp\n    matrix:\n      backend: [torch, onnxruntime]\n"
    )
    write_suite(suite_writer, "s", body)
    result = _run(suite_writer)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*perfguard?onnx?*"])


EXITING_MODELS = """\
import argparse
import sys

import torch


def argparse_factory():
    # A factory that reads the command line (pytest's arguments) exits with status 2.
    argparse.ArgumentParser().parse_args(["--no-such-flag"])
    return torch.nn.Linear(8, 8)


class Exits(torch.nn.Module):
    def forward(self, x):
        sys.exit("model gave up")


def exits():
    return Exits()
"""


@pytest.mark.parametrize(
    ("factory", "said"), [("argparse_factory", "SystemExit: 2"), ("exits", "model gave up")]
)
def test_system_exit_from_model_code_is_a_failed_cell_that_stays_listed(
    suite_writer: pytest.Pytester, factory: str, said: str
) -> None:
    # SystemExit is no Exception: the cell vanished from results.json and the summary,
    # so a baseline could be saved without it.
    (suite_writer.path / "suites").mkdir(exist_ok=True)
    (suite_writer.path / "suites" / "exiting.py").write_text(EXITING_MODELS)
    write_suite(
        suite_writer,
        "s",
        _one_model_suite(f"factory: exiting:{factory}\ninputs:\n  x: {{shape: [1, 8]}}"),
    )
    result = _run(suite_writer)
    result.assert_outcomes(failed=1)
    (results,) = suite_writer.path.glob("reports/*/results.json")
    cells = {c["id"].split("::")[-1]: c for c in json.loads(results.read_text())["scenarios"]}
    assert cells["bad"]["status"] == "error" and said in cells["bad"]["message"]
