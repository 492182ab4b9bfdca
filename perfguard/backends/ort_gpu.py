"""ONNX Runtime on NVIDIA GPUs: the CUDA and TensorRT execution providers.

``GpuPlan`` turns a cell's ``device: cuda[:N]`` and ``gpu:`` options into the
provider list, proves where the nodes really run, and ``BoundIO`` keeps inputs
and outputs on the device with an ``IOBinding``.

Placement is proved twice, from the runtime's own information:

* unless ``gpu.allow_cpu_fallback``, the session is created with the config
  entry ``session.disable_cpu_ep_fallback = 1``, so ONNX Runtime itself refuses
  a graph with any node left to the CPU provider (the refusal names no node, so
  a second session with the CPU allowed is profiled to name them);
* the session is created with profiling on and runs the inputs once before any
  timing; each node's profiling event carries the provider that executed it
  (``args.provider``). ``end_profiling()`` ends profiling, so the timed runs
  are not profiled. This also sees nodes inside control-flow subgraphs that ran,
  which the creation check does not inspect.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfguard.core.errors import CellError, ProviderFallbackError
from perfguard.core.scenario import Scenario

__all__ = ["CPU_EP", "CUDA_EP", "DISABLE_CPU_FALLBACK", "TRT_EP", "BoundIO", "GpuPlan", "Placement"]

CUDA_EP = "CUDAExecutionProvider"
TRT_EP = "TensorrtExecutionProvider"
CPU_EP = "CPUExecutionProvider"
DISABLE_CPU_FALLBACK = "session.disable_cpu_ep_fallback"
_PROVIDERS = {"cuda": CUDA_EP, "tensorrt": TRT_EP}
# ONNX Runtime inserts MemcpyFromHost/MemcpyToHost nodes where a tensor crosses
# between host and device (graph inputs and outputs on the host, CPU-only
# shape computations). They copy data and compute nothing, so they are never
# counted as a compute fallback, whichever provider they are assigned to.
_MEMCPY_OPS = frozenset({"MemcpyFromHost", "MemcpyToHost"})
# Ops the CUDA provider deliberately leaves on the CPU when they only compute shapes.
_SHAPE_OPS = frozenset(
    {"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Reshape", "Range"}
    | {"ConstantOfShape", "Size", "Equal", "Where", "Expand", "Add", "Sub", "Mul", "Div"}
)
# What ONNX Runtime says when disable_cpu_ep_fallback refuses a graph.
_REFUSALS = ("assigned to the default CPU EP", "fallback to CPU EP has been explicitly disabled")
_SHOWN = 10
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
# TensorRT booleans that are not named trt_*_enable. Its Python binding accepts
# only "True"/"False" for booleans (not "1"/"0").
_TRT_FLAGS = frozenset(
    {
        "trt_int8_use_native_calibration_table",
        "trt_dump_subgraphs",
        "trt_force_sequential_engine_build",
        "trt_layer_norm_fp32_fallback",
        "trt_force_timing_cache",
        "trt_detailed_build_log",
        "trt_dump_ep_context_model",
        "trt_engine_hw_compatible",
    }
)


def _flag(value: str) -> bool | None:
    low = value.strip().lower()
    return True if low in _TRUE else False if low in _FALSE else None


def _normalize(provider: str, key: str, value: str) -> str:
    """A user's option value in the spelling the provider's parser accepts."""
    flag = _flag(value)
    if provider == TRT_EP and (
        key in _TRT_FLAGS or (key.startswith("trt_") and key.endswith("_enable"))
    ):
        return value if flag is None else ("True" if flag else "False")
    if provider == CUDA_EP and flag is not None and not value.strip().isdigit():
        return "1" if flag else "0"  # CUDA booleans parse 0/1/true/false; yes/on do not
    return value


@dataclass(frozen=True)
class GpuPlan:
    """How one cell uses ONNX Runtime on ``cuda:<index>``."""

    scenario: Scenario
    index: int
    provider: str  # the requested (first) execution provider
    providers: list[str | tuple[str, dict[str, str]]]
    strict: bool  # CPU fallback refused
    iobinding: bool
    include_copies: bool

    @classmethod
    def build(cls, scenario: Scenario, index: int, cache_dir: Path, ort_version: str) -> GpuPlan:
        gpu = scenario.gpu
        kind = gpu.ort_provider.strip().lower()
        if kind not in _PROVIDERS:
            raise CellError(
                f"unknown gpu.ort_provider {gpu.ort_provider!r} for the onnxruntime backend",
                expected="cuda or tensorrt",
                fix="set `gpu: {ort_provider: cuda}` or `gpu: {ort_provider: tensorrt}`",
                location=scenario.location,
            )
        provider = _PROVIDERS[kind]
        device = {"device_id": str(index)}
        user: dict[str, str] = {}
        for key, value in gpu.provider_options:
            text = str(value)
            if key == "device_id" and text.strip() != str(index):
                raise CellError(
                    f"gpu.provider_options sets device_id {text} but the cell runs on "
                    f"{scenario.device}",
                    expected=f"no device_id, or device_id {index}",
                    fix="choose the GPU with `device: cuda:<index>` and drop device_id from "
                    "`provider_options`",
                    location=scenario.location,
                )
            user[key] = _normalize(provider, key, text)
        providers: list[str | tuple[str, dict[str, str]]]
        if provider == CUDA_EP:
            providers = [(CUDA_EP, {**device, **user})]
        else:
            # TensorRT leaves the subgraphs it cannot build to the CUDA provider:
            # that stays on the GPU and is not a CPU fallback.
            cache = cache_dir / "ort-tensorrt" / re.sub(r"[^A-Za-z0-9_.-]", "_", ort_version)
            cache.mkdir(parents=True, exist_ok=True)
            trt = {
                **device,
                "trt_engine_cache_enable": "True",
                "trt_engine_cache_path": str(cache),
                "trt_timing_cache_enable": "True",
                "trt_timing_cache_path": str(cache),
            }
            if scenario.precision == "fp16":
                trt["trt_fp16_enable"] = "True"
            elif scenario.precision == "int8" and scenario.quantization.mode == "static":
                trt["trt_int8_enable"] = "True"  # explicit Q/DQ scales; no calibration table
            providers = [(TRT_EP, {**trt, **user}), (CUDA_EP, dict(device))]
        if gpu.allow_cpu_fallback:
            # Listing the CPU provider while fallback is disabled is refused by
            # ONNX Runtime ("Conflicting session configuration"); it is then
            # added implicitly and only a refusal can show it was needed.
            providers.append(CPU_EP)
        return cls(
            scenario=scenario,
            index=index,
            provider=provider,
            providers=providers,
            strict=not gpu.allow_cpu_fallback,
            iobinding=gpu.iobinding,
            include_copies=gpu.include_copies,
        )

    @property
    def options(self) -> dict[str, str]:
        """The options passed to the requested provider."""
        first = self.providers[0]
        return dict(first[1]) if isinstance(first, tuple) else {}

    def configure(self, options: Any, profile_prefix: str) -> None:
        """Refuse CPU placement (unless allowed) and profile the placement check run."""
        if self.strict:
            options.add_session_config_entry(DISABLE_CPU_FALLBACK, "1")
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix

    def create(
        self, ort: Any, path: Path, options: Any, diagnose: Callable[[], Placement | None]
    ) -> Any:
        """The session; a refusal to place nodes becomes a ``ProviderFallbackError``."""
        try:
            # enable_fallback=0: the Python wrapper would otherwise retry a
            # provider that failed to initialise on another provider list.
            return ort.InferenceSession(
                str(path), sess_options=options, providers=self.providers, enable_fallback=0
            )
        except Exception as exc:
            if not any(words in str(exc) for words in _REFUSALS):
                raise
            try:
                found = diagnose()
            except Exception:  # the diagnosis is a courtesy; the refusal stands
                found = None
            raise self._refused(exc, found) from exc

    def diagnose(
        self,
        ort: Any,
        path: Path,
        options: Any,
        profile_prefix: str,
        host_feeds: Callable[[Any], Mapping[str, np.ndarray]],
    ) -> Placement | None:
        """Which nodes the refused graph would put on the CPU: one profiled run, CPU allowed."""
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
        providers = [*self.providers, CPU_EP] if CPU_EP not in self.providers else self.providers
        session = ort.InferenceSession(
            str(path), sess_options=options, providers=providers, enable_fallback=0
        )
        actual = list(session.get_providers())
        if not actual or actual[0] != self.provider:
            return Placement(loaded=False, providers=actual)
        session.run(None, dict(host_feeds(session)))
        return Placement.from_profile(session.end_profiling())

    def prove(self, session: Any, host_feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Run once with profiling, read each node's provider; raise on CPU nodes (if refused)."""
        session.run(None, dict(host_feeds))
        placement = Placement.from_profile(session.end_profiling())
        sc = self.scenario
        policy = (
            f"refused ({DISABLE_CPU_FALLBACK}=1)"
            if self.strict
            else "allowed (gpu.allow_cpu_fallback)"
        )
        if placement is None:
            if self.strict:
                raise ProviderFallbackError(
                    "the placement of the model's nodes could not be read: onnxruntime wrote no "
                    "profile for the check run",
                    expected=f"a profile naming the provider of every node ({self.provider})",
                    fix="make sure the temporary directory is writable, or set "
                    "`gpu: {allow_cpu_fallback: true}` to run without the check",
                    location=sc.location,
                )
            return {"checked": False, "cpu_fallback": policy}
        if placement.cpu_nodes and self.strict:
            raise ProviderFallbackError(
                f"{placement.describe_cpu()} run on {CPU_EP} instead of {self.provider} "
                f"(onnxruntime profile of one run on {sc.device})",
                expected=f"every node on {self.provider} (Memcpy nodes excepted)",
                fix=self._node_fix(placement),
                location=sc.location,
            )
        return {**placement.summary(), "checked": True, "cpu_fallback": policy}

    def _refused(self, exc: Exception, found: Placement | None) -> ProviderFallbackError:
        sc = self.scenario
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if found is not None and not found.loaded:
            return ProviderFallbackError(
                f"{sc.device} requested {self.provider}, but it did not load: a session with "
                f"the CPU allowed runs on {', '.join(found.providers) or 'nothing'}, and the one "
                f"without refused every node ({first})",
                expected=f"{self.provider} as the session's first provider",
                fix="install onnxruntime-gpu (and uninstall the CPU-only onnxruntime), put the "
                "CUDA, cuDNN (and TensorRT) libraries it was built for on the library path "
                "(LD_LIBRARY_PATH)",
                location=sc.location,
            )
        named = (
            f": {found.describe_cpu()} would run on {CPU_EP}"
            if found is not None and found.cpu_nodes
            else " (onnxruntime does not name them)"
        )
        return ProviderFallbackError(
            f"onnxruntime refused to create the session on {self.provider} because nodes of "
            f"the model can only run on the CPU{named} ({first})",
            expected=f"every node on {self.provider}",
            fix=self._node_fix(found),
            location=sc.location,
        )

    def _node_fix(self, found: Placement | None) -> str:
        fix = (
            f"export the model with an opset and operators that {self.provider} supports "
            "(replace or remove the listed ops), or set `gpu: {allow_cpu_fallback: true}` to "
            "measure the mixed placement (it is recorded in the results)"
        )
        ops = {op for _, op in found.cpu_nodes} if found is not None else set()
        if ops and ops <= _SHAPE_OPS:
            fix += (
                "; these look like shape computations, which onnxruntime keeps on the CPU on "
                "purpose — allow_cpu_fallback is the usual answer for them"
            )
        return fix

    def io(self, ort: Any, session: Any) -> BoundIO | None:
        """The IOBinding runner, or ``None`` for plain ``session.run`` with host arrays."""
        if not self.iobinding:
            return None
        return BoundIO(ort, session, self.index, include_copies=self.include_copies)

    def runtime_info(self, session: Any) -> dict[str, Any]:
        """What the results say about the GPU setup (the applied options as ORT reports them)."""
        applied: Any = None
        get = getattr(session, "get_provider_options", None)
        if get is not None:
            applied = dict(get()).get(self.provider)
        copies_timed = self.include_copies or not self.iobinding
        if not self.iobinding:
            io = "session.run with host numpy arrays: host->device and device->host copies timed"
        elif self.include_copies:
            io = (
                "IOBinding, host inputs bound on every run and outputs copied to the host "
                "inside the timed region"
            )
        else:
            io = (
                f"IOBinding, inputs resident on cuda:{self.index} (copied once in prepare) and "
                "outputs left on the device: copies not timed"
            )
        return {
            "device": f"cuda:{self.index}",
            "provider_options": self.options,
            "provider_options_applied": applied,
            "iobinding": self.iobinding,
            "copies_timed": copies_timed,
            "io": io,
        }


@dataclass
class Placement:
    """Nodes per execution provider, as the profile of one run records them."""

    per_provider: dict[str, int] = field(default_factory=dict)
    memcpy: int = 0
    cpu_nodes: list[tuple[str, str]] = field(default_factory=list)  # (node name, op type)
    loaded: bool = True
    providers: list[str] = field(default_factory=list)

    @classmethod
    def from_profile(cls, path: str | None) -> Placement | None:
        """Parse ``end_profiling()``'s JSON; ``None`` when there is no profile."""
        if not path or not Path(path).is_file():
            return None
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        events = data.get("traceEvents", []) if isinstance(data, dict) else data
        placement = cls()
        seen: set[str] = set()
        for event in events if isinstance(events, list) else []:
            if not isinstance(event, dict) or event.get("cat") != "Node":
                continue
            name = str(event.get("name", ""))
            if not name.endswith("_kernel_time"):  # fence_before/after events repeat the node
                continue
            node = name.removesuffix("_kernel_time")
            if node in seen:  # a node inside a Loop/Scan body runs many times
                continue
            seen.add(node)
            args = event.get("args") or {}
            op = str(args.get("op_name", "?"))
            if op in _MEMCPY_OPS:
                placement.memcpy += 1
                continue
            provider = str(args.get("provider") or "unknown")
            placement.per_provider[provider] = placement.per_provider.get(provider, 0) + 1
            if provider == CPU_EP:
                placement.cpu_nodes.append((node, op))
        return placement

    def describe_cpu(self) -> str:
        shown = ", ".join(f"{node} ({op})" for node, op in self.cpu_nodes[:_SHOWN])
        more = len(self.cpu_nodes) - _SHOWN
        count = len(self.cpu_nodes)
        tail = f", and {more} more" if more > 0 else ""
        return f"{count} node{'s' if count != 1 else ''} [{shown}{tail}]"

    def summary(self) -> dict[str, Any]:
        return {
            "source": "onnxruntime profiling of one run (args.provider of each node)",
            "nodes": dict(sorted(self.per_provider.items())),
            "memcpy_nodes": self.memcpy,
            "cpu_node_count": len(self.cpu_nodes),
            "cpu_nodes": [f"{node} ({op})" for node, op in self.cpu_nodes[:_SHOWN]],
        }


@dataclass
class Bound:
    """Prepared inputs for the IOBinding runner."""

    host: dict[str, np.ndarray]
    device: dict[str, Any] | None  # OrtValues on the GPU; None when copies are timed
    binding: Any


class BoundIO:
    """Runs a session through ``IOBinding`` on ``cuda:<index>``.

    Copies excluded (default): ``prepare`` copies the inputs to the device once
    (``OrtValue.ortvalue_from_numpy(array, "cuda", index)``) and binds them and
    the outputs (to the device, allocated by ONNX Runtime); ``run`` is
    ``run_with_iobinding``. Copies included: every run binds the host arrays
    (``bind_cpu_input`` copies them to the device) and copies the outputs to
    the host (``copy_outputs_to_cpu``), both inside the timed region.
    """

    def __init__(self, ort: Any, session: Any, index: int, *, include_copies: bool) -> None:
        self._ort = ort
        self._session = session
        self._index = index
        self.include_copies = include_copies
        self._outputs = [output.name for output in session.get_outputs()]
        # IOBinding.synchronize_outputs syncs the providers of the graph's outputs
        # (the CUDA provider: cudaDeviceSynchronize); any binding of the session will do.
        self._sync_binding = session.io_binding()
        self.synchronize: Callable[[], None] = self._sync_binding.synchronize_outputs

    def _binding(self, device: Mapping[str, Any] | None) -> Any:
        binding = self._session.io_binding()
        if device is not None:
            for name, value in device.items():
                binding.bind_ortvalue_input(name, value)
        for name in self._outputs:
            binding.bind_output(name, "cuda", self._index)
        return binding

    def prepare(self, host: dict[str, np.ndarray]) -> Bound:
        device = None
        if not self.include_copies:
            to_device = self._ort.OrtValue.ortvalue_from_numpy
            device = {name: to_device(array, "cuda", self._index) for name, array in host.items()}
        return Bound(host=host, device=device, binding=self._binding(device))

    def _resident(self, binding: Any) -> Any:
        self._session.run_with_iobinding(binding)
        return binding  # outputs stay on the device; to_numpy copies them

    def _copying(self, binding: Any, host: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        for name, array in host.items():
            binding.bind_cpu_input(name, array)
        self._session.run_with_iobinding(binding)
        outputs: list[np.ndarray] = binding.copy_outputs_to_cpu()
        return outputs

    def call(self, prepared: Bound, binding: Any = None) -> Callable[[], Any]:
        binding = prepared.binding if binding is None else binding
        if self.include_copies:
            return functools.partial(self._copying, binding, prepared.host)
        return functools.partial(self._resident, binding)

    def run(self, prepared: Bound) -> Any:
        if self.include_copies:
            return self._copying(prepared.binding, prepared.host)
        return self._resident(prepared.binding)

    def worker_calls(
        self, prepared: Mapping[int, Bound]
    ) -> tuple[dict[int, Callable[[], Any]], Callable[[], None] | None]:
        """One worker's calls, each on a new IOBinding of its own (bindings are per thread).

        The sync is ``None``: ``run_with_iobinding`` returns after ONNX Runtime
        synchronised the run's own stream (the provider's OnRunEnd), while
        ``synchronize_outputs`` is a device-wide synchronisation that would
        make every worker wait for the other workers' kernels.
        """
        calls = {k: self.call(p, self._binding(p.device)) for k, p in prepared.items()}
        return calls, None

    @staticmethod
    def to_host(outputs: Any) -> Sequence[Any]:
        """Outputs of ``run`` on the host: a binding's outputs are copied now."""
        if hasattr(outputs, "copy_outputs_to_cpu"):
            copied: Sequence[Any] = outputs.copy_outputs_to_cpu()
            return copied
        return outputs  # type: ignore[no-any-return]
