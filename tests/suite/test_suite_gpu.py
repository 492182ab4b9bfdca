"""The `gpu:` block of a suite, backend `tensorrt`, and the `gpu_mem` gate."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from perfguard.core.errors import SuiteError
from perfguard.core.policy import GateSpec
from perfguard.core.scenario import GpuSpec, Scenario, TensorRTSpec
from perfguard.suite.loader import load_suite
from tests.helpers.gpu_cases import BAD_GPU_VALUES, MODELS


def cells(tmp_path: Path, text: str) -> list[Scenario]:
    path = tmp_path / "gpu.yaml"
    path.write_text(textwrap.dedent(text))
    return list(load_suite(path).scenarios)


def fails(tmp_path: Path, text: str, *needles: str) -> str:
    text = textwrap.dedent(text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "# <-" in row)
    with pytest.raises(SuiteError) as info:
        cells(tmp_path, text)
    message = str(info.value)
    assert f"gpu.yaml:{line}:" in message, message
    for needle in needles:
        assert needle in message, message
    return message


def test_gpu_block_fills_the_spec_and_merges_with_defaults(tmp_path: Path) -> None:
    (cell,) = cells(
        tmp_path,
        MODELS
        + """\
defaults:
  gpu: {allow_throttle: true, compile: default}
scenarios:
  - name: s
    model: mlp
    device: cuda:1
    gpu:
      cuda_graph: true
      cudnn_benchmark: false
      compile: reduce-overhead
      ort_provider: tensorrt
      provider_options: {cudnn_conv_algo_search: EXHAUSTIVE, trt_fp16_enable: true, n: 2}
      include_copies: true
      exclusive: true
      tensorrt:
        workspace_mib: 2048
        builder_optimization_level: 5
        timing_cache: false
        profiles:
          x: {min: [1, 8], opt: [4, 8], max: [16, 8]}
""",
    )
    assert cell.gpu == GpuSpec(
        cuda_graph=True,
        cudnn_benchmark=False,
        compile_mode="reduce-overhead",  # the scenario's value wins over defaults
        ort_provider="tensorrt",
        provider_options=(
            ("cudnn_conv_algo_search", "EXHAUSTIVE"),
            ("trt_fp16_enable", "1"),
            ("n", "2"),
        ),
        include_copies=True,
        allow_throttle=True,  # from defaults, merged key by key
        exclusive=True,
        tensorrt=TensorRTSpec(
            workspace_mib=2048,
            builder_optimization_level=5,
            timing_cache=False,
            profiles=(("x", (1, 8), (4, 8), (16, 8)),),
        ),
    )


def test_no_gpu_block_is_the_default_spec_and_compile_false_turns_it_off(
    tmp_path: Path,
) -> None:
    plain, eager = cells(
        tmp_path,
        MODELS
        + """\
defaults:
  gpu: {compile: max-autotune}
scenarios:
  - name: plain
    model: mlp
  - name: eager
    model: mlp
    gpu: {compile: false}
""",
    )
    assert plain.gpu == GpuSpec(compile_mode="max-autotune")
    assert eager.gpu == GpuSpec()


@pytest.mark.parametrize(("block", "needles"), BAD_GPU_VALUES)
def test_bad_gpu_values_fail_at_their_line(
    tmp_path: Path, block: str, needles: tuple[str, ...]
) -> None:
    fails(tmp_path, MODELS + f"scenarios:\n  - name: s\n    model: mlp\n    {block}\n", *needles)


def test_tensorrt_needs_a_gpu_and_int8_on_gpu_is_allowed_only_there(tmp_path: Path) -> None:
    found = {
        sc.cell_id: sc
        for sc in cells(
            tmp_path,
            MODELS
            + """\
scenarios:
  - name: s
    model: mlp
    matrix:
      backend: [tensorrt, onnxruntime]
      device: [cpu, cuda]
      precision: [int8]
""",
        )
    }
    assert "TensorRT runs on NVIDIA GPUs" in (found["tensorrt-cpu-int8"].error or "")
    assert found["tensorrt-cuda-int8"].error is None
    assert "int8" in (found["onnxruntime-cuda-int8"].error or "")
    assert found["onnxruntime-cpu-int8"].error is None


def test_gpu_mem_gate_in_mib(tmp_path: Path) -> None:
    (cell,) = cells(
        tmp_path,
        MODELS + 'scenarios:\n  - name: s\n    model: mlp\n    gate: {gpu_mem: "+1GiB"}\n',
    )
    assert GateSpec("gpu_mem", 1024.0, relative=False, higher_is_worse=True) in cell.gates
    fails(
        tmp_path,
        MODELS + 'scenarios:\n  - name: s\n    model: mlp\n    gate: {gpu_mem: "-10%"}  # <-\n',
        "wrong sign",
    )
