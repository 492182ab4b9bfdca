"""Why an export stopped: the exporters' own failure texts read into perfguard's error.

The texts below were captured from the real exporters (torch 2.13, onnxscript 0.7.2,
transformers 5.25) on the models each comment names; ``test_*_live`` run the exporters
again, so a torch that words its failures differently shows here first.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfguard.core.errors import BackendUnavailable, ExportError, Location
from perfguard.core.scenario import ModelSpec
from perfguard.models.exportfailure import (
    export_error,
    is_generation_loop,
    read_blocker,
)

# Captured texts (type of the exception, then the model that raised it).
# The TorchScript exporter on torch.diff at opset 17 (GPT-2's attention mask code, too,
# once use_cache=False).
TS_DIFF = "Exporting the operator 'aten::diff' to ONNX opset version 17 is not supported"

# A torch.tril model at opset 13.
TS_TRIL_OPSET13 = (
    "Exporting the operator 'aten::tril' to ONNX opset version 13 is not supported. Support"
    " for this operator was added in version 14, try exporting with this version"
)

# transformers.GPT2LMHeadModel itself (its output holds a DynamicCache), TorchScript.
TS_DYNAMIC_CACHE = (
    "Only tuples, lists and Variables are supported as JIT inputs/outputs. Dictionaries and"
    " strings are also accepted, but their usage is not recommended. Here, received an inpu"
    "t of unsupported type: DynamicCache"
)

# A custom op pg::myop (torch.library, no ONNX translation), TorchScript.
TS_CUSTOM_OP = (
    "ONNX export failed on an operator with unrecognized namespace pg::myop. If you are try"
    "ing to export a custom operator, make sure you registered it with the right domain and"
    " version."
)

# GPT2LMHeadModel itself, the dynamo exporter (TorchExportError).
DYNAMO_DYNAMIC_CACHE = (
    "Failed to export the model with torch.export. \x1b[96mThis is step 1/3\x1b[0m of expor"
    "ting the model to ONNX. Next steps:\n"
    "- Modify the model code for `torch.export.export` to succeed. Refer to https://pytorch"
    ".org/docs/stable/generated/exportdb/index.html for more information.\n"
    "- Debug `torch.export.export` and submit a PR to PyTorch.\n"
    "- Create an issue in the PyTorch GitHub repository against the \x1b[96m*torch.export*"
    "\x1b[0m component and attach the full error stack as well as reproduction scripts.\n"
    "\n"
    "## Exception summary\n"
    "\n"
    "<class 'RuntimeError'>: Found <class 'transformers.cache_utils.DynamicCache'> in outpu"
    "t, which is not a known type. If this type holds tensors, you need to register a pytre"
    "e for it. See https://github.com/pytorch/functorch/issues/475 for a brief explanation "
    "why. If you don't need to register a pytree, please leave a comment explaining your us"
    "e case and we'll make this more ergonomic to deal with\n"
    "\n"
    "(Refer to the full stack trace above for more information.)"
)

# The custom op pg::myop, the dynamo exporter (ConversionError).
DYNAMO_CUSTOM_OP = (
    "Failed to convert the exported program to an ONNX model. \x1b[96mThis is step 3/3\x1b["
    "0m of exporting the model to ONNX. Next steps:\n"
    "- If there is a missing ONNX function, implement it and register it to the registry.\n"
    "- If there is an internal error during ONNX conversion, debug the error and submit a P"
    "R to PyTorch.\n"
    "- Create an error report with `torch.onnx.export(..., report=True)`, and save the Expo"
    "rtedProgram as a pt2 file. Create an issue in the PyTorch GitHub repository against th"
    "e \x1b[96m*onnx*\x1b[0m component. Attach the error report and the pt2 model.\n"
    "\n"
    "## Exception summary\n"
    "\n"
    "<class 'torch.onnx._internal.exporter._errors.DispatchError'>: No ONNX function found "
    "for <OpOverload(op='pg.myop', overload='default')>. Failure message: No decompositions"
    " registered for the real-valued input\n"
    "⬆️\n"
    "<class 'torch.onnx._internal.exporter._errors.ConversionError'>: Error when translatin"
    "g node %myop : [num_users=1] = call_function[target=torch.ops.pg.myop.default](args = "
    "(%x,), kwargs = {}). See the stack trace for more information.\n"
    "\n"
    "(Refer to the full stack trace above for more information.)"
)

# `if x.sum() > 0:` in forward, the dynamo exporter (TorchExportError).
DYNAMO_DATA_DEPENDENT = (
    "Failed to export the model with torch.export. \x1b[96mThis is step 1/3\x1b[0m of expor"
    "ting the model to ONNX. Next steps:\n"
    "- Modify the model code for `torch.export.export` to succeed. Refer to https://pytorch"
    ".org/docs/stable/generated/exportdb/index.html for more information.\n"
    "- Debug `torch.export.export` and submit a PR to PyTorch.\n"
    "- Create an issue in the PyTorch GitHub repository against the \x1b[96m*torch.export*"
    "\x1b[0m component and attach the full error stack as well as reproduction scripts.\n"
    "\n"
    "## Exception summary\n"
    "\n"
    "<class 'torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode'>: Could not"
    " guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1)).  (Size-like symbo"
    "ls: none)\n"
    "\n"
    "consider using data-dependent friendly APIs such as guard_or_false, guard_or_true and "
    "statically_known_true.\n"
    "Caused by: (_export/non_strict_utils.py:1205 in __torch_function__)\n"
    'For more information, run with TORCH_LOGS="dynamic"\n'
    "For extended logs when we create symbols, also add TORCHDYNAMO_EXTENDED_DEBUG_CREATE_S"
    'YMBOL="u0"\n'
    "If you suspect the guard was triggered from C++, add TORCHDYNAMO_EXTENDED_DEBUG_CPP=1"
    "\n"
    "For more debugging help, see https://docs.google.com/document/d/1HSuTTVvYH1pTew89Rtpeu"
    "84Ht3nQEFTYhAX3Ypa_xJs/edit?usp=sharing\n"
    "\n"
    "For C++ stack trace, run with TORCHDYNAMO_EXTENDED_DEBUG_CPP=1\n"
    "\n"
    "The following call raised this error:\n"
    '  File "/tmp/i28/capture4.py", line 23, in forward\n'
    "    if x.sum() > 0: return x * 2\n"
    "\n"
    "\n"
    "The error above occurred when calling torch.export.export. If you would like to view s"
    "ome more information about this error, and get a list of all other errors that may occ"
    "ur in your export call, you can replace your `export()` call with `draft_export()`.\n"
    "\n"
    "(Refer to the full stack trace above for more information.)"
)

# A module whose forward calls GPT-2's generate(), the dynamo exporter (TorchExportError).
DYNAMO_GENERATE = (
    "Failed to export the model with torch.export. \x1b[96mThis is step 1/3\x1b[0m of expor"
    "ting the model to ONNX. Next steps:\n"
    "- Modify the model code for `torch.export.export` to succeed. Refer to https://pytorch"
    ".org/docs/stable/generated/exportdb/index.html for more information.\n"
    "- Debug `torch.export.export` and submit a PR to PyTorch.\n"
    "- Create an issue in the PyTorch GitHub repository against the \x1b[96m*torch.export*"
    "\x1b[0m component and attach the full error stack as well as reproduction scripts.\n"
    "\n"
    "## Exception summary\n"
    "\n"
    "<class 'torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode'>: Could not"
    " guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1)).  (Size-like symbo"
    "ls: none)\n"
    "\n"
    "consider using data-dependent friendly APIs such as guard_or_false, guard_or_true and "
    "statically_known_true.\n"
    "Caused by: (_export/non_strict_utils.py:1205 in __torch_function__)\n"
    'For more information, run with TORCH_LOGS="dynamic"\n'
    "For extended logs when we create symbols, also add TORCHDYNAMO_EXTENDED_DEBUG_CREATE_S"
    'YMBOL="u0"\n'
    "If you suspect the guard was triggered from C++, add TORCHDYNAMO_EXTENDED_DEBUG_CPP=1"
    "\n"
    "For more debugging help, see https://docs.google.com/document/d/1HSuTTVvYH1pTew89Rtpeu"
    "84Ht3nQEFTYhAX3Ypa_xJs/edit?usp=sharing\n"
    "\n"
    "For C++ stack trace, run with TORCHDYNAMO_EXTENDED_DEBUG_CPP=1\n"
    "\n"
    "The following call raised this error:\n"
    '  File "/work/main/.venv/lib/python3.11/site-packages/transformers/generation/utils.py'
    '", line 2902, in generate\n'
    "    if (\n"
    "\n"
    "\n"
    "The error above occurred when calling torch.export.export. If you would like to view s"
    "ome more information about this error, and get a list of all other errors that may occ"
    "ur in your export call, you can replace your `export()` call with `draft_export()`.\n"
    "\n"
    "(Refer to the full stack trace above for more information.)"
)


def spec(tmp_path: Path, **overrides: Any) -> ModelSpec:
    fields: dict[str, Any] = {
        "name": "lm",
        "location": Location(tmp_path / "suite.yaml", 3),
        "base_dir": tmp_path,
        "factory": "lm:prefill",
    }
    fields.update(overrides)
    return ModelSpec(**fields)


@pytest.mark.parametrize(
    ("text", "kind", "name"),
    [
        pytest.param(TS_DIFF, "operator", "aten::diff", id="ts-operator"),
        pytest.param(TS_TRIL_OPSET13, "operator", "aten::tril", id="ts-operator-later-opset"),
        pytest.param(TS_CUSTOM_OP, "operator", "pg::myop", id="ts-custom-op"),
        pytest.param(TS_DYNAMIC_CACHE, "type", "DynamicCache", id="ts-kv-cache"),
        pytest.param(DYNAMO_DYNAMIC_CACHE, "type", "DynamicCache", id="dynamo-kv-cache"),
        pytest.param(DYNAMO_CUSTOM_OP, "operator", "pg.myop", id="dynamo-custom-op"),
        pytest.param(
            DYNAMO_DATA_DEPENDENT, "capture", "GuardOnDataDependentSymNode", id="dynamo-capture"
        ),
        pytest.param(DYNAMO_GENERATE, "generation", "generate", id="dynamo-generate"),
        pytest.param("something else broke", "unknown", "RuntimeError", id="unknown"),
    ],
)
def test_the_blocker_is_read_from_the_exporters_text(text: str, kind: str, name: str) -> None:
    blocker = read_blocker(RuntimeError(text))
    assert (blocker.kind, blocker.name) == (kind, name)
    assert "\x1b" not in blocker.detail and "\n" not in blocker.detail
    assert len(blocker.detail) <= 300


def test_an_operator_no_torchscript_opset_has_points_at_the_dynamo_exporter(
    tmp_path: Path,
) -> None:
    error = export_error(RuntimeError(TS_DIFF), spec(tmp_path))
    assert isinstance(error, ExportError) and error.location == Location(tmp_path / "suite.yaml", 3)
    assert error.problem == (
        "exporting factory lm:prefill to ONNX (torchscript exporter, opset 17) stopped at "
        "operator `aten::diff`: Exporting the operator 'aten::diff' to ONNX opset version 17 "
        "is not supported"
    )
    assert "another `opset:` does not help" in str(error.expected)
    assert str(error.fix).startswith("write `exporter: dynamo`")


def test_an_operator_of_a_later_opset_names_that_opset(tmp_path: Path) -> None:
    error = export_error(RuntimeError(TS_TRIL_OPSET13), spec(tmp_path, opset=13))
    assert "stopped at operator `aten::tril`" in error.problem
    assert str(error.fix).startswith("write `opset: 14`")


def test_a_kv_cache_object_asks_for_use_cache_false(tmp_path: Path) -> None:
    for text, exporter in ((TS_DYNAMIC_CACHE, "torchscript"), (DYNAMO_DYNAMIC_CACHE, "dynamo")):
        error = export_error(RuntimeError(text), spec(tmp_path, exporter=exporter, opset=18))
        assert "stopped at a value of type `DynamicCache`" in error.problem
        assert "neither exporter takes a KV-cache object" in str(error.expected)
        assert "`use_cache=False`" in str(error.fix)
    # The tracer may then stop at an operator the dynamo exporter gets past.
    assert "`exporter: dynamo`" in str(
        export_error(RuntimeError(TS_DYNAMIC_CACHE), spec(tmp_path)).fix
    )


def test_the_dynamo_exporters_failures_name_the_operator_or_the_line(tmp_path: Path) -> None:
    dynamo = spec(tmp_path, exporter="dynamo", opset=18)
    op = export_error(RuntimeError(DYNAMO_CUSTOM_OP), dynamo)
    assert op.problem.startswith(
        "exporting factory lm:prefill to ONNX (dynamo exporter, opset 18) stopped at operator "
        "`pg.myop`: DispatchError: No ONNX function found for <OpOverload(op='pg.myop'"
    )
    assert "`exporter: torchscript`" in str(op.fix)
    capture = export_error(RuntimeError(DYNAMO_DATA_DEPENDENT), dynamo)
    assert (
        "torch.export could not capture forward at /tmp/i28/capture4.py:23 "
        "(if x.sum() > 0: return x * 2): GuardOnDataDependentSymNode: Could not guard on "
        "data-dependent expression"
    ) in capture.problem
    assert "`exporter: torchscript` (it traces the one path these inputs take)" in str(capture.fix)


def test_an_export_failing_in_generation_code_says_a_loop_cannot_be_exported(
    tmp_path: Path,
) -> None:
    error = export_error(RuntimeError(DYNAMO_GENERATE), spec(tmp_path, exporter="dynamo"))
    assert "gives a Python generation loop" in error.problem
    assert "cannot be exported to ONNX" in error.problem
    assert "torch backend" in str(error.fix) and "use_cache=False" in str(error.fix)


def test_a_bound_generate_method_is_a_generation_loop() -> None:
    class LM:
        def generate(self) -> None: ...

        def forward(self) -> None: ...

    def generate() -> None: ...

    assert is_generation_loop(LM().generate)
    assert not is_generation_loop(LM().forward)
    assert not is_generation_loop(generate)  # a plain function is no model's loop
    assert not is_generation_loop(LM)


# --------------------------------------------------------------------------- live exporters

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")


class Diff(torch.nn.Module):  # type: ignore[misc]
    def forward(self, x: Any) -> Any:
        return torch.diff(x, dim=-1)


FEEDS = {"x": np.ones((2, 4), np.float32)}


def test_the_torchscript_exporters_operator_failure_live(tmp_path: Path) -> None:
    from perfguard.models.cache import export_onnx

    with pytest.raises(ExportError, match=r"stopped at operator `aten::diff`") as info:
        export_onnx(Diff(), FEEDS, spec(tmp_path), tmp_path / "cache")
    assert "`exporter: dynamo`" in str(info.value.fix)
    assert not list((tmp_path / "cache").iterdir())


def test_the_dynamo_exporter_needs_onnxscript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfguard.models.cache import export_onnx

    real = importlib.util.find_spec

    def without_onnxscript(name: str, *args: Any) -> Any:
        return None if name == "onnxscript" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_onnxscript)
    with pytest.raises(BackendUnavailable, match="needs the onnxscript package") as info:
        export_onnx(Diff(), FEEDS, spec(tmp_path, exporter="dynamo", opset=18), tmp_path / "c")
    assert "pip install 'onnxscript>=0.5'" in str(info.value.fix)


GENERATING = """
import torch
import transformers


def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=64, vocab_size=1000, n_positions=128
    )
    return transformers.GPT2LMHeadModel(config).eval()


class Generate(torch.nn.Module):
    def __init__(self, from_prompt=False):
        super().__init__()
        self.lm = gpt2()
        self.from_prompt = from_prompt

    def forward(self, input_ids):
        # The issue's: a minimum length read from the prompt, a tensor once traced.
        least = input_ids.shape[1] + 32 if self.from_prompt else 8
        return self.lm.generate(input_ids, max_new_tokens=40, min_length=least, do_sample=False)


def loop():
    return gpt2().generate


def wrapped(from_prompt=False):
    return Generate(from_prompt)
"""


@pytest.fixture
def generating(tmp_path: Path) -> Any:
    pytest.importorskip("transformers")
    from perfguard.models.factory import forget_factory_models

    (tmp_path / "generating.py").write_text(GENERATING)
    yield tmp_path
    forget_factory_models()
    sys.modules.pop("generating", None)


def test_a_factory_returning_generate_is_told_a_loop_cannot_be_exported(
    generating: Path,
) -> None:
    from perfguard.models.factory import load_factory

    with pytest.raises(ExportError) as info:
        load_factory(spec(generating, factory="generating:loop"))
    assert info.value.problem == (
        "factory generating:loop gives a Python generation loop (it returned a bound `generate` "
        "method): a loop of forward passes with Python stopping rules and sampling cannot be "
        "exported to ONNX, and ONNX Runtime has no generate()"
    )


def test_exporting_a_forward_that_calls_generate_is_told_the_same(generating: Path) -> None:
    from perfguard.models.cache import export_onnx
    from perfguard.models.factory import load_factory

    model = spec(generating, factory="generating:wrapped")
    module = load_factory(model)
    feeds = {"input_ids": np.arange(8, dtype=np.int64).reshape(1, 8)}
    with pytest.raises(ExportError, match="gives a Python generation loop") as info:
        export_onnx(module, feeds, model, generating / "cache")
    # The tracer fails after the loop, in its graph code (an internal assert about
    # aten::full): the generate() call it ran is what tells.
    assert "(forward called GPT2LMHeadModel.generate(); the export then failed with " in (
        info.value.problem
    )
    assert not any("generate" in vars(sub) for sub in module.modules())  # unwrapped again


def test_the_issues_min_length_failure_is_told_the_same(generating: Path) -> None:
    """The TorchScript tracer on generate(min_length=prompt length + 32) with a 16-token
    prompt: transformers' own ValueError, which said nothing about export."""
    from perfguard.models.cache import export_onnx
    from perfguard.models.factory import load_factory

    model = spec(generating, factory="generating:wrapped", factory_kwargs=(("from_prompt", True),))
    feeds = {"input_ids": np.arange(16, dtype=np.int64).reshape(1, 16)}
    with pytest.raises(ExportError) as info:
        export_onnx(load_factory(model), feeds, model, generating / "cache")
    assert (
        "gives a Python generation loop (the export failed in transformers' generation code: "
        "ValueError: `min_length` has to be a non-negative integer, but is 48)"
    ) in info.value.problem
