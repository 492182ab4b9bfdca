"""Precision variants of an ONNX model for ONNX Runtime, cached like exports.

``quantize_int8`` makes an int8 copy with ``onnxruntime.quantization``:
dynamic (weights ahead of time, activations on the fly) or static (activation
ranges fixed from calibration feeds, QDQ format). ``convert_fp16`` makes a
float16 copy whose inputs and outputs stay float32, so feeds do not change.
``quantize_torch_int8`` is the torch backend's int8: torch's dynamic quantization of
the ``nn.Linear`` layers, in memory.

Each variant is named ``<model>-<variant>-<key>.onnx`` in the cache folder, the
key a sha256 over the source file's bytes, every setting that changes the
result, the onnxruntime version and, for static quantization, the calibration
data. ORT's quantizer writes an ``-inferred`` copy next to its input and an
augmented model for calibration: it works on a private copy of the source in
a temporary folder inside the cache, removed afterwards, so nothing lands next
to a user's ``onnx:`` file and concurrent builds never share a scratch name.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perfguard.core import progress
from perfguard.core.blame import blame
from perfguard.core.errors import CellError, InputError, Location, ModelError, PerfguardError
from perfguard.core.scenario import QuantSpec
from perfguard.machine.env import u8s8_saturates
from perfguard.models.cache import (
    KEY_CHARS,
    KEY_SUFFIX,
    build_once,
    quiet,
    safe_name,
    source_digest,
)
from perfguard.records.figures import QuantFacts

if TYPE_CHECKING:
    import torch

# Dynamic int8 with onnxruntime.quantization's defaults (a frozen value, safe to share).
DEFAULT_QUANT = QuantSpec()

__all__ = [
    "DEFAULT_QUANT",
    "calibration_samples",
    "check_quant_spec",
    "convert_fp16",
    "onnx_quant_facts",
    "ort_quant_tool",
    "quant_settings",
    "quantize_int8",
    "quantize_key",
    "quantize_torch_int8",
    "torch_quant_facts",
    "reduce_range",
    "require_calibration",
]

Feeds = Mapping[str, np.ndarray]

_MODES = ("dynamic", "static")
_QUANT_TYPES = {"qint8": "QInt8", "quint8": "QUInt8"}
_CALIBRATIONS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
_FP16_SETTINGS = "convert_float_to_float16:keep_io_types=True"


def reduce_range(quant: QuantSpec) -> bool:
    """``quant.reduce_range``, or for ``auto`` (None) whether ONNX Runtime's CPU
    kernels need 7-bit weights here: int8 weights on a CPU whose uint8-by-int8 kernels
    saturate (``machine.env.u8s8_saturates``). Signed activations go through the same
    kernels (shifted to uint8): measured on an AVX2-only EPYC, static int8 with qint8
    activations was off by 12% (23% symmetric) with 8-bit weights, by 0.8% with 7-bit.
    uint8 weights never saturate. A graph for TensorRT asks for its own value."""
    if quant.reduce_range is not None:
        return quant.reduce_range
    return quant.weight_type == "qint8" and u8s8_saturates()


def quant_settings(quant: QuantSpec) -> dict[str, Any]:
    """The fields of ``quant`` that change the quantized model (not the preset name),
    ``reduce_range`` as this machine resolves it."""
    settings: dict[str, Any] = {
        "mode": quant.mode,
        "per_channel": quant.per_channel,
        "reduce_range": reduce_range(quant),
        "weight_type": quant.weight_type,
    }
    if quant.mode == "static":
        settings["activation_type"] = quant.activation_type
        settings["calibration"] = quant.calibration
        settings["calibration_samples"] = quant.calibration_samples
        if quant.symmetric:  # only when set, so existing cache keys stay valid
            settings["symmetric"] = True
    return settings


def check_quant_spec(quant: QuantSpec, location: Location | None = None) -> None:
    """Raise ``CellError`` for a value ``onnxruntime.quantization`` cannot do."""
    problems: list[str] = []
    if quant.mode not in _MODES:
        problems.append(f"mode {quant.mode!r} (dynamic | static)")
    if quant.weight_type not in _QUANT_TYPES:
        problems.append(f"weight_type {quant.weight_type!r} (qint8 | quint8)")
    if quant.mode == "static":
        if quant.activation_type not in _QUANT_TYPES:
            problems.append(f"activation_type {quant.activation_type!r} (qint8 | quint8)")
        elif quant.activation_type == "qint8" and quant.weight_type == "quint8":
            problems.append("activation_type qint8 with weight_type quint8 (ORT rejects it)")
        if quant.calibration not in _CALIBRATIONS:
            problems.append(f"calibration {quant.calibration!r} (minmax | entropy | percentile)")
        if quant.calibration_samples is not None and quant.calibration_samples < 1:
            problems.append(f"calibration_samples {quant.calibration_samples} (at least 1)")
    if problems:
        raise CellError(
            f"quantization preset {quant.name!r} has unsupported value(s): " + "; ".join(problems),
            expected="values onnxruntime.quantization supports (shown in parentheses)",
            fix="change the preset under `quantization:`",
            location=location,
        )


def calibration_samples(
    quant: QuantSpec, calibration: Sequence[Feeds] | None
) -> list[Feeds] | None:
    """The calibration feeds static quantization uses: the first ``calibration_samples``."""
    if quant.mode != "static" or calibration is None:
        return None
    samples = list(calibration)
    if quant.calibration_samples is not None:
        samples = samples[: quant.calibration_samples]
    return samples or None


def require_calibration(
    quant: QuantSpec, calibration: Sequence[Feeds] | None, location: Location | None = None
) -> None:
    """Raise ``CellError`` when static quantization has no calibration data."""
    if quant.mode != "static" or calibration_samples(quant, calibration):
        return
    raise CellError(
        f"int8 quantization preset {quant.name!r} is static and needs calibration data, "
        "but this scenario has no accuracy inputs",
        expected="calibration feeds for static quantization: the scenario's accuracy inputs",
        fix="add `accuracy: {inputs: ...}` to the scenario (the accuracy inputs are the "
        "calibration data), or use `mode: dynamic` in the quantization preset",
        location=location,
    )


def _add(digest: hashlib._Hash, *parts: object) -> None:
    for part in parts:
        digest.update(b"\0")
        digest.update(str(part).encode())


def quantize_key(
    onnx_path: Path,
    quant: QuantSpec = DEFAULT_QUANT,
    calibration: Sequence[Feeds] | None = None,
    location: Location | None = None,
) -> str:
    """The sha256 (hex) naming the int8 copy of ``onnx_path`` under ``quant``.

    It covers the source's bytes, ``quant_settings(quant)``, the onnxruntime
    version and, for static quantization, the calibration samples' bytes.
    """
    import onnxruntime

    digest = source_digest(onnx_path, location, f"int8 quantization of {onnx_path}")
    settings = json.dumps(quant_settings(quant), sort_keys=True)
    _add(digest, "perfguard-int8-v2", onnxruntime.__version__, settings)
    for index, feed in enumerate(calibration_samples(quant, calibration) or ()):
        for name in sorted(feed):
            array = np.ascontiguousarray(feed[name])
            _add(digest, "calibration", index, name, array.dtype.str, array.shape)
            digest.update(array.tobytes())
    return digest.hexdigest()


def quantize_int8(
    onnx_path: Path,
    cache_dir: Path,
    location: Location | None = None,
    quant: QuantSpec = DEFAULT_QUANT,
    calibration: Sequence[Feeds] | None = None,
) -> Path:
    """An int8 copy of ``onnx_path`` made as ``quant`` says, cached by content.

    Static quantization calibrates on ``calibration`` (the first
    ``quant.calibration_samples`` feeds, or all) and raises ``CellError``
    without it; dynamic quantization ignores it.
    """
    check_quant_spec(quant, location)
    require_calibration(quant, calibration, location)
    samples = calibration_samples(quant, calibration)
    what = f"int8 quantization ({quant.mode}) of {onnx_path}"
    key = quantize_key(onnx_path, quant, calibration, location)
    variant = "int8-static" if quant.mode == "static" else "int8"
    target = _target(onnx_path, cache_dir, variant, key)

    cell = Path(onnx_path).stem
    total = len(samples) if samples is not None else None

    def step(done: int, detail: str = "", *, final: bool = False) -> None:
        progress.report("quantize", done, total, cell=cell, detail=detail, final=final)

    def write(tmp: Path) -> None:
        started = time.monotonic()
        step(0, f"int8 {quant.mode}" + (", calibrating" if samples is not None else ""))
        try:
            with _scratch(tmp) as scratch, _silent():
                source, inputs = _stage(onnx_path, scratch)
                if samples is None:
                    _dynamic(source, tmp, quant)
                else:
                    feeds = _calibration_feeds(inputs, samples, location)
                    _static(source, tmp, quant, feeds, lambda n: step(n, "calibration batches"))
            step(total or 1, f"done in {time.monotonic() - started:.1f} s", final=True)
        except (InputError, CellError):
            step(0, f"failed after {time.monotonic() - started:.1f} s", final=True)
            raise
        except Exception as exc:
            step(0, f"failed after {time.monotonic() - started:.1f} s", final=True)
            raise ModelError(
                f"{what} failed: {type(exc).__name__}: {exc}",
                expected=f"a model onnxruntime.quantization.quantize_{quant.mode} accepts",
                fix="run this model at fp32, try another quantization preset, or quantize "
                "it yourself and point `onnx:` at it",
                location=location,
            ) from exc

    return build_once(target, write, location, what)


def quantize_torch_int8(
    module: torch.nn.Module, model_name: str, location: Location | None = None
) -> torch.nn.Module:
    """``module`` with its ``nn.Linear`` layers quantized to int8 by torch's dynamic
    quantization; a failure is the model's ``ModelError`` (its frames, the fix)."""
    import torch

    try:
        with quiet():  # torch.ao.quantization warns that it is deprecated
            quantize: Callable[..., torch.nn.Module] = torch.ao.quantization.quantize_dynamic
            return quantize(module, {torch.nn.Linear}, dtype=torch.qint8)
    except PerfguardError:  # perfguard's own (a watchdog's timeout): already located
        raise
    except Exception as exc:
        raise blame(
            exc,
            doing="quantizing it to int8 (torch.ao.quantization.quantize_dynamic, which "
            "deep-copies the model first)",
            culprit=f"model {model_name!r}",
            expected="a model that copy.deepcopy can copy and torch can quantize",
            fix="make the model deep-copyable (a tensor attribute computed from parameters "
            "is not a graph leaf: register it with register_buffer or compute it in "
            "forward), or run this model at `precision: fp32`, or quantize it with ONNX "
            "Runtime instead (`backend: onnxruntime`, `precision: int8`)",
            location=location,
        ) from exc


#: Op types a quantizer turns into integer arithmetic (ONNX Runtime's dynamic and static
#: quantizers): the nodes counted as quantized or left in float.
QUANTIZABLE_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose", "Attention", "LSTM")
#: Nodes a quantizer adds: the (de)quantization steps and the integer kernels.
_QUANT_NODE_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "MatMulInteger",
        "ConvInteger",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
        "DynamicQuantizeLSTM",
        "QGemm",
        "QAttention",
    }
)


def _op_counts(ops: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    return counts


@functools.lru_cache(maxsize=64)
def onnx_quant_facts(source: Path, quantized: Path, tool: str) -> QuantFacts:
    """What quantizing ``source`` into ``quantized`` did, read from the two graphs (once
    per process: the quantized file's name holds a digest of the source and settings).

    A quantizable node of the source (``QUANTIZABLE_OPS``) is left in float when the
    quantized graph still has it, by name and op type, with no input from a
    ``DequantizeLinear``; otherwise it was quantized (replaced by an integer kernel,
    ``MatMulInteger``/``QLinearConv``..., or fed by Q/DQ pairs the runtime fuses)."""
    import onnx

    before = onnx.load(str(source), load_external_data=False).graph.node
    after = onnx.load(str(quantized), load_external_data=False).graph.node
    dequantized = {out for n in after if n.op_type == "DequantizeLinear" for out in n.output}
    floating = {(n.name, n.op_type) for n in after if not any(i in dequantized for i in n.input)}
    quantized_ops: list[str] = []
    kept_ops: list[str] = []
    layers: list[str] = []
    for node in before:
        if node.op_type not in QUANTIZABLE_OPS:
            continue
        if (node.name, node.op_type) in floating:
            kept_ops.append(node.op_type)
        else:
            quantized_ops.append(node.op_type)
            layers.append(node.name)
    added = [
        n.op_type for n in after if n.op_type in _QUANT_NODE_OPS or n.op_type.startswith("QLinear")
    ]
    return QuantFacts(
        tool=tool,
        quantized=_op_counts(quantized_ops),
        kept={op: n for op, n in _op_counts(kept_ops).items()},
        ops=_op_counts(added),
        layers=tuple(layers),
        layer_count=len(layers),
    )


def ort_quant_tool(quant: QuantSpec) -> str:
    """How ``quantize_int8`` quantizes under ``quant``: the onnxruntime function and format."""
    if quant.mode == "static":
        return "onnxruntime.quantization.quantize_static, QDQ"
    return "onnxruntime.quantization.quantize_dynamic"


def torch_quant_facts(module: torch.nn.Module) -> QuantFacts:
    """What ``quantize_torch_int8`` did: the ``nn.Linear`` modules of ``module`` (its
    result) torch replaced by dynamically quantized ones, and those left in float."""
    import torch

    quantized: list[str] = []
    kept = 0
    for name, child in module.named_modules():
        if type(child).__module__.startswith("torch.ao.nn.quantized") and hasattr(child, "weight"):
            quantized.append(name)
        elif isinstance(child, torch.nn.Linear):
            kept += 1
    return QuantFacts(
        tool="torch.ao.quantization.quantize_dynamic",
        quantized={"Linear": len(quantized)} if quantized else {},
        kept={"Linear": kept} if kept else {},
        ops={},
        layers=tuple(quantized),
        layer_count=len(quantized),
    )


def convert_fp16(
    onnx_path: Path,
    cache_dir: Path,
    location: Location | None = None,
    *,
    keep_fp32: Sequence[str] = (),
) -> Path:
    """A float16 copy of ``onnx_path`` (inputs/outputs stay float32), cached by content.

    ``keep_fp32``: op types (``LayerNormalization``) or node names left in float32
    beside ``onnxruntime.transformers.float16``'s own block list.
    """
    import onnxruntime

    what = f"fp16 conversion of {onnx_path}"
    digest = source_digest(onnx_path, location, what)
    _add(digest, "perfguard-fp16-v1", onnxruntime.__version__, _FP16_SETTINGS)
    if keep_fp32:  # only when set, so existing cache keys stay valid
        _add(digest, "keep-fp32", *sorted(keep_fp32))
    target = _target(onnx_path, cache_dir, "fp16", digest.hexdigest())

    def write(tmp: Path) -> None:
        import onnx

        try:
            with _silent():
                from onnxruntime.transformers.float16 import (
                    DEFAULT_OP_BLOCK_LIST,
                    convert_float_to_float16,
                )

                model = onnx.load(str(onnx_path))
                blocked = [*DEFAULT_OP_BLOCK_LIST, *keep_fp32] if keep_fp32 else None
                converted = convert_float_to_float16(
                    model,
                    keep_io_types=True,
                    op_block_list=blocked,
                    node_block_list=list(keep_fp32) or None,
                )
                onnx.save_model(converted, str(tmp))
        except Exception as exc:
            raise ModelError(
                f"{what} failed: {type(exc).__name__}: {exc}",
                expected="a float32 model onnxruntime.transformers.float16 can convert",
                fix="run this model at fp32, or convert it to float16 yourself, point "
                "`onnx:` at it and use `precision: fp32`",
                location=location,
            ) from exc

    return build_once(target, write, location, what)


def _target(onnx_path: Path, cache_dir: Path, variant: str, key: str) -> Path:
    stem = KEY_SUFFIX.sub("", Path(onnx_path).stem)
    return Path(cache_dir) / f"{safe_name(stem)}-{variant}-{key[:KEY_CHARS]}.onnx"


@contextlib.contextmanager
def _silent() -> Iterator[None]:
    """``quiet()``, and ``print`` too: ORT's histogram calibrators print their progress."""
    with quiet(), contextlib.redirect_stdout(io.StringIO()):
        yield


@contextlib.contextmanager
def _scratch(tmp: Path) -> Iterator[Path]:
    """A private folder beside ``tmp`` (so inside the cache), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=f"{tmp.stem}.", suffix=".work", dir=tmp.parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _stage(onnx_path: Path, scratch: Path) -> tuple[Path, dict[str, np.dtype[Any]]]:
    """Copy the source into ``scratch`` (with its external data); its inputs' dtypes."""
    import onnx
    from onnx.external_data_helper import uses_external_data
    from onnx.helper import tensor_dtype_to_np_dtype

    staged = scratch / "source.onnx"
    model = onnx.load(str(onnx_path), load_external_data=False)
    if any(uses_external_data(tensor) for tensor in model.graph.initializer):
        onnx.load_external_data_for_model(model, str(Path(onnx_path).parent))
        onnx.save_model(
            model,
            str(staged),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="source.onnx.data",
        )
    else:
        shutil.copyfile(onnx_path, staged)
    constants = {init.name for init in model.graph.initializer}
    inputs: dict[str, np.dtype[Any]] = {}
    for value in model.graph.input:
        if value.name not in constants:
            inputs[value.name] = np.dtype(
                tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
            )
    return staged, inputs


def _calibration_feeds(
    inputs: Mapping[str, np.dtype[Any]], samples: Sequence[Feeds], location: Location | None
) -> list[dict[str, np.ndarray]]:
    """Each sample's arrays for the model's inputs, in the dtypes the model declares."""
    feeds: list[dict[str, np.ndarray]] = []
    for index, sample in enumerate(samples):
        missing = [name for name in inputs if name not in sample]
        if missing:
            raise InputError(
                f"calibration sample {index} has no input(s) {', '.join(missing)} "
                f"(it has: {', '.join(sample) or 'nothing'})",
                expected=f"every model input in each accuracy input: {', '.join(inputs)}",
                fix="make the scenario's `accuracy: {inputs: ...}` provide every model input",
                location=location,
            )
        feeds.append(
            {
                name: np.ascontiguousarray(np.asarray(sample[name]).astype(dtype, copy=False))
                for name, dtype in inputs.items()
            }
        )
    return feeds


def _dynamic(source: Path, output: Path, quant: QuantSpec) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(source),
        str(output),
        per_channel=quant.per_channel,
        reduce_range=reduce_range(quant),
        weight_type=getattr(QuantType, _QUANT_TYPES[quant.weight_type]),
    )


def _static(
    source: Path,
    output: Path,
    quant: QuantSpec,
    feeds: list[dict[str, np.ndarray]],
    on_batch: Callable[[int], None] | None = None,
) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class FeedReader(CalibrationDataReader):  # type: ignore[misc]
        """The calibration feeds, one per ``get_next``."""

        def __init__(self) -> None:
            self._start, self._end, self._next = 0, len(feeds), 0

        def get_next(self) -> dict[str, np.ndarray] | None:
            if self._next >= self._end:
                return None
            self._next += 1
            if on_batch is not None:
                on_batch(self._next)
            return feeds[self._next - 1]

        def __len__(self) -> int:
            return len(feeds)

        def set_range(self, start_index: int, end_index: int) -> None:
            self._start, self._end, self._next = start_index, end_index, start_index

    quantize_static(
        str(source),
        str(output),
        calibration_data_reader=FeedReader(),
        quant_format=QuantFormat.QDQ,
        per_channel=quant.per_channel,
        reduce_range=reduce_range(quant),
        activation_type=getattr(QuantType, _QUANT_TYPES[quant.activation_type]),
        weight_type=getattr(QuantType, _QUANT_TYPES[quant.weight_type]),
        calibrate_method=getattr(CalibrationMethod, _CALIBRATIONS[quant.calibration]),
        extra_options=(
            {"ActivationSymmetric": True, "WeightSymmetric": True} if quant.symmetric else None
        ),
    )
