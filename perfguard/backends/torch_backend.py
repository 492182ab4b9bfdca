"""The PyTorch backend: a factory's ``nn.Module``, eager or ``torch.compile``d.

Precisions: fp32; fp16/bf16 cast the model and its floating inputs; int8 is
dynamic quantization of the ``nn.Linear`` layers (CPU only). On CUDA the
session synchronises the model's own stream, can time each request with CUDA
events, replay CUDA graphs and set cuDNN's autotuner (``perfguard.backends.torch_cuda``).
"""

from __future__ import annotations

import functools
import gc
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perfguard.backends.torch_cuda import (
    CudaRuntime,
    compile_module,
    describe_oom,
    first_compiled_call,
    forget_frames,
)
from perfguard.core.errors import CellError
from perfguard.core.scenario import Scenario
from perfguard.models.factory import check_forward_inputs, feeds_positionally, load_factory
from perfguard.models.quantize import quantize_torch_int8

if TYPE_CHECKING:
    import torch

__all__ = ["TorchBackend", "TorchSession", "parse_torch_device"]

_INSTALL_HINT = "PyTorch is not installed (pip install 'perfguard[torch]')"


class TorchBackend:
    """Runs ``factory:`` models with PyTorch."""

    name = "torch"

    def unavailable_reason(self) -> str | None:
        return None if importlib.util.find_spec("torch") is not None else _INSTALL_HINT

    def open(
        self,
        scenario: Scenario,
        feeds: Mapping[str, np.ndarray],
        cache_dir: Path,
        *,
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    ) -> TorchSession:
        """``calibration`` is ignored: torch int8 is dynamic quantization."""
        return TorchSession(scenario, feeds)


def parse_torch_device(scenario: Scenario) -> torch.device:
    """``cpu``/``cuda``/``cuda:N`` as a ``torch.device``, checked against this machine."""
    import torch

    text = scenario.device.strip().lower()
    index: int | None = None
    if text.startswith("cuda:"):
        suffix = text.partition(":")[2]
        if not suffix.isdigit():
            raise _bad_device(scenario)
        index = int(suffix)
    elif text not in ("cpu", "cuda"):
        raise _bad_device(scenario)
    if text == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise CellError(
            f"device {scenario.device!r} requested but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, built with CUDA {torch.version.cuda or 'none'})",
            expected="a CUDA build of PyTorch and a visible NVIDIA GPU",
            fix="install a CUDA build of torch, check CUDA_VISIBLE_DEVICES and the driver, "
            "or run this cell with `device: cpu`",
            location=scenario.location,
        )
    count = torch.cuda.device_count()
    if index is None:
        index = torch.cuda.current_device()
    if index >= count:
        raise CellError(
            f"device {scenario.device!r} requested but only {count} CUDA device(s) are visible",
            expected=f"cuda:0 .. cuda:{count - 1}",
            fix="pick a visible device index or check CUDA_VISIBLE_DEVICES",
            location=scenario.location,
        )
    return torch.device("cuda", index)


def _bad_device(scenario: Scenario) -> CellError:
    return CellError(
        f"unknown device {scenario.device!r} for the torch backend",
        expected="cpu, cuda or cuda:N",
        fix="set `device:` to cpu, cuda or cuda:<index>",
        location=scenario.location,
    )


class TorchSession:
    """A factory's module on one device at one precision.

    Beyond the ``Session`` protocol (all no-ops or ``None`` on the CPU):
    ``start_device_timing``/``stop_device_timing`` (per-request device time from
    CUDA events), ``reset_device_peak``/``device_peak_mib`` (the CUDA caching
    allocator's peak), ``describe_oom`` (a ``torch.cuda.OutOfMemoryError`` as one
    line) and ``worker_calls`` (one stream per concurrent load worker).
    """

    def __init__(self, scenario: Scenario, feeds: Mapping[str, np.ndarray]) -> None:
        import torch

        self._scenario = scenario
        self._previous_threads: int | None = None
        self._positional = False
        self._cuda: CudaRuntime | None = None
        self._compile_pending = False
        self.synchronize: Callable[[], None] | None = None
        self.runtime_info: dict[str, Any] = {}
        if scenario.model.factory is None:
            raise CellError(
                f"model {scenario.model.name!r} is an ONNX file; the torch backend needs a "
                "`factory:`",
                expected="`factory: module:function` returning a torch.nn.Module",
                fix="run this model with `backend: onnxruntime`, or add a factory",
                location=scenario.location,
            )
        if scenario.precision not in ("fp32", "fp16", "bf16", "int8"):
            raise CellError(
                f"unknown precision {scenario.precision!r} for the torch backend",
                expected="fp32, fp16, bf16 or int8",
                fix="set `precision:` to a supported value",
                location=scenario.location,
            )
        self.device = parse_torch_device(scenario)
        if scenario.precision == "int8" and self.device.type != "cpu":
            raise CellError(
                f"precision int8 on {scenario.device} is not supported by the torch backend",
                expected="int8 (dynamic quantization of nn.Linear) on device cpu",
                fix="run int8 with `device: cpu`, or use fp16/bf16 on the GPU",
                location=scenario.location,
            )
        if self.device.type == "cuda":
            CudaRuntime.check(scenario)
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(
            scenario.precision, torch.float32
        )
        if scenario.threads is not None:
            self._previous_threads = torch.get_num_threads()
            torch.set_num_threads(scenario.threads)
        try:
            self._module = self._build(scenario, feeds)
            self._call: Callable[..., Any] = self._module
            if scenario.gpu.compile_mode is not None:
                self._call = compile_module(torch, self._module, scenario)
                self._compile_pending = True  # compiled by the first call, in prepare()
            self.runtime_info = {
                "torch": torch.__version__,
                "device": str(self.device),
                "dtype": str(self.dtype).removeprefix("torch."),
                "precision": scenario.precision,
                "threads": torch.get_num_threads(),
            }
            if scenario.gpu.compile_mode is not None:
                self.runtime_info["compile_mode"] = scenario.gpu.compile_mode
            if self.device.type == "cuda":
                self.runtime_info["cuda"] = torch.version.cuda
                self.runtime_info["gpu"] = torch.cuda.get_device_name(self.device)
                self._cuda = CudaRuntime(
                    torch, self.device, scenario, self._forward, self.runtime_info
                )
                # The model's stream, not the whole device: other work on the GPU
                # (another session, a load worker's stream) is not waited for.
                self.synchronize = self._cuda.synchronize
        except BaseException:
            self._restore_threads()
            raise

    def _build(self, scenario: Scenario, feeds: Mapping[str, np.ndarray]) -> torch.nn.Module:
        module = load_factory(scenario.model)
        module.eval()
        self._positional = feeds_positionally(module, list(feeds))
        check_forward_inputs(module, list(feeds), scenario.model.location)
        if scenario.precision == "int8":
            module = quantize_torch_int8(module, scenario.model.name, scenario.location)
        elif scenario.precision in ("fp16", "bf16"):
            module = module.to(self.dtype)
        return module.to(self.device)

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """numpy -> tensors on the device; floats cast to the precision's dtype.

        Also outside any timing: the first call of a ``torch.compile``d model
        (``runtime_info["compile_s"]``), and with ``cuda_graph`` the capture of
        the first request of each input shape (the result then carries its graph).
        """
        import torch

        bf16_inputs = {
            spec.name for spec in self._scenario.model.inputs if spec.dtype == "bfloat16"
        }
        prepared: dict[str, torch.Tensor] = {}
        for name, array in feeds.items():
            tensor = torch.from_numpy(np.array(array, copy=True, order="C"))
            if tensor.is_floating_point():
                if self.dtype != torch.float32:
                    tensor = tensor.to(self.dtype)
                elif name in bf16_inputs:
                    tensor = tensor.to(torch.bfloat16)
            prepared[name] = tensor.to(self.device)
        if self._compile_pending:
            self._compile_pending = False
            self.runtime_info["compile_s"] = first_compiled_call(
                torch, self._forward, prepared, self.synchronize, self._scenario
            )
        if self._cuda is not None and self._cuda.graphed:
            return self._cuda.graph_inputs(prepared)
        return prepared

    def run(self, prepared: Any) -> Any:
        cuda = self._cuda
        if cuda is not None:  # events while timing, graph replay, OOM clean-up
            return cuda.run(prepared)
        import torch

        with torch.inference_mode():
            if self._positional:  # a lone input into a single-input forward()
                return self._call(*prepared.values())
            return self._call(**prepared)

    def _forward(self, prepared: Mapping[str, Any]) -> Any:
        """One eager (or compiled) model call: no events, no graph."""
        import torch

        with torch.inference_mode():
            if self._positional:
                return self._call(*prepared.values())
            return self._call(**prepared)

    def start_device_timing(self) -> None:
        """From now on every ``run`` is timed on the device too (CUDA only).

        ``run`` records a CUDA event on the model's stream before and after the
        model call: two ``cudaEventRecord`` calls, a few microseconds of host time
        per request, inside the timed region. Nothing is read until
        ``stop_device_timing``. Load workers' calls are never event-timed.
        """
        if self._cuda is not None:
            self._cuda.timer.start()

    def stop_device_timing(self) -> list[int] | None:
        """Device time in ns of each ``run`` since ``start_device_timing``, in call
        order (cold start and warm-up included when they came after the start);
        read after synchronising the model's stream. ``None`` on the CPU."""
        return self._cuda.timer.stop() if self._cuda is not None else None

    def reset_device_peak(self) -> None:
        """Restart the CUDA allocator's peak (``torch.cuda.reset_peak_memory_stats``)."""
        if self._cuda is not None:
            self._cuda.reset_peak()

    def device_peak_mib(self) -> float | None:
        """Peak device memory held by tensors since the last reset (MiB); ``None`` on CPU."""
        return self._cuda.peak_mib() if self._cuda is not None else None

    def describe_oom(self, exc: BaseException) -> str:
        """A ``torch.cuda.OutOfMemoryError`` from this session as one line with the
        device's memory figures (``torch_cuda.describe_oom``)."""
        return describe_oom(exc, self.device)

    def worker_calls(
        self, prepared: Mapping[int, Any]
    ) -> tuple[dict[int, Callable[[], Any]], Callable[[], None] | None]:
        """Calls for one concurrent load worker (``prepared`` per batch size).

        On CUDA each worker gets its own stream, so workers' kernels can overlap
        as a multi-stream server's do, and the worker synchronises that stream
        only. With ``cuda_graph`` each worker also gets its own graphs and static
        buffers, captured here on its stream. Elsewhere the calls are plain
        ``run`` calls.
        """
        calls: dict[int, Callable[[], Any]]
        if self.device.type != "cuda":
            calls = {k: functools.partial(self.run, p) for k, p in prepared.items()}
            return calls, None
        if self._cuda is not None and self._cuda.graphed:
            return self._cuda.graph_worker_calls(prepared)
        import torch

        stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        forward = self._forward

        def on_stream(inputs: Any) -> Any:
            try:
                with torch.cuda.stream(stream):
                    return forward(inputs)
            except torch.cuda.OutOfMemoryError as exc:
                forget_frames(exc)
                raise

        calls = {k: functools.partial(on_stream, p) for k, p in prepared.items()}
        sync: Callable[[], None] = stream.synchronize
        return calls, sync

    def to_numpy(self, outputs: Any) -> list[np.ndarray]:
        arrays: list[np.ndarray] = []
        _flatten(outputs, arrays)
        return arrays

    def close(self) -> None:
        """Release the model, graphs and events; restore threads and cuDNN's setting.

        Safe after a ``torch.cuda.OutOfMemoryError`` from ``run``: the failed
        call's frames were cleared, and the allocator's cache is emptied here.
        """
        import torch

        module = getattr(self, "_module", None)
        if module is not None:
            del self._module
            self._call = _closed
        cuda = self._cuda
        if cuda is not None:
            cuda.close()
        if self.device.type == "cuda":
            if cuda is not None:
                gc.collect()  # reference cycles (a failed request's traceback) hold memory
            torch.cuda.empty_cache()
        self._restore_threads()

    def _restore_threads(self) -> None:
        import torch

        if self._previous_threads is not None:
            torch.set_num_threads(self._previous_threads)
            self._previous_threads = None


def _closed(*_: Any, **__: Any) -> Any:
    raise RuntimeError("the torch session is closed")


def _flatten(value: Any, out: list[np.ndarray]) -> None:
    import torch

    if value is None:
        return
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.float()
        out.append(tensor.cpu().numpy())
    elif hasattr(value, "to_tuple") and callable(value.to_tuple):  # transformers ModelOutput
        _flatten(value.to_tuple(), out)
    elif isinstance(value, Mapping):
        for item in value.values():
            _flatten(item, out)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _flatten(item, out)
    elif isinstance(value, np.ndarray):
        out.append(value.astype(np.float32) if value.dtype == np.float16 else value)
    else:
        out.append(np.asarray(value))
