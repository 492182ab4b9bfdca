"""The small protocol every runtime implements (one module per runtime).

A ``Backend`` is stateless and cheap to create; it imports its runtime lazily,
so a missing runtime costs nothing until a cell needs it. ``open`` returns a
``Session``: a model loaded on one device at one precision, ready to run.

A session of a runtime outside perfguard's process (a served embedding model) also has
``check_unchanged()``, as ``GenerativeSession`` does: the measuring code calls it after
the timed loop, where a session has it.

A session whose runtime has a profiler also implements ``ProfilingSession``: its
``profiler(prepared)`` starts an ``OperatorProfiler`` pass, run by
``perfguard.measure.profiling`` after (never inside) the timed loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from perfguard.core.scenario import Scenario


class Session(Protocol):
    """A model ready to serve requests on one device and precision."""

    #: What the runtime really used: providers, library versions, thread counts.
    runtime_info: dict[str, Any]
    #: Called inside the timed region after each request when the device is
    #: asynchronous (a GPU); ``None`` on the CPU, where a call returns when done.
    synchronize: Callable[[], None] | None

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Any:
        """Turn numpy inputs into the runtime's own tensors, on the device, once.

        Casting for the precision (fp16/bf16) happens here, outside the timing.
        """

    def run(self, prepared: Any) -> Any:
        """Serve one request; returns the runtime's raw outputs."""

    def to_numpy(self, outputs: Any) -> list[np.ndarray]:
        """The outputs of ``run`` as float32/int numpy arrays, in output order."""

    def close(self) -> None:
        """Release the model and its device memory."""


class GenerativeSession(Protocol):
    """A causal language model ready to generate on one device and precision: the
    runtime's own decoding path with its KV cache (``perfguard.measure.generation``
    times it token by token).

    ``vocab_size`` is the model's vocabulary (None: unknown; the suite then gives it)."""

    runtime_info: dict[str, Any]
    vocab_size: int | None

    def prepare(self, prompt: np.ndarray) -> Any:
        """Token ids (``batch x prompt_tokens`` int64) as the runtime's own tensor, on the
        device, once: outside any timing."""

    def generate(self, prepared: Any, new_tokens: int, stamp: Callable[[], None]) -> Any:
        """Greedy-decode exactly ``new_tokens`` tokens after the prompt (no early stop);
        call ``stamp()`` once per decoding step, as soon as that step's tokens are on
        the host (as a streaming server would send them). Returns the runtime's tokens."""

    def tokens(self, generated: Any) -> np.ndarray | None:
        """What ``generate`` returned as ``batch x new_tokens`` int64 token ids; None
        where the runtime gives text, not ids (a served model: ``generate`` checks each
        request's token count itself)."""

    def logits(self, ids: np.ndarray) -> np.ndarray:
        """Teacher forcing: one pass over ``ids`` (``batch x length`` int64, no cache kept),
        the next-token logits at every position as ``batch x length x vocab`` float32
        (row ``i`` is the distribution of the token after ``ids[:, i]``). For accuracy
        checks, never timed."""

    def check_unchanged(self) -> None:
        """Raise when the runtime changed while the cell was measured (a served model's
        server that another one replaced); a runtime in perfguard's own process cannot."""

    def close(self) -> None:
        """Release the model and its device memory."""


class Backend(Protocol):
    """A runtime (torch, onnxruntime, ...)."""

    name: str

    def unavailable_reason(self) -> str | None:
        """``None`` when the runtime can be imported; else why not, with the install hint."""

    def open(
        self,
        scenario: Scenario,
        feeds: Mapping[str, np.ndarray],
        cache_dir: Path,
        *,
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    ) -> Session:
        """Build/load the scenario's model and return a ready session.

        ``calibration`` holds the feeds (the scenario's accuracy inputs) that
        static int8 quantization calibrates on; a backend that does not
        calibrate ignores it.

        Raises ``ModelError``, ``InputError``, ``CellError`` or
        ``ProviderFallbackError`` with a message naming the suite location.
        """


class GenerativeBackend(Protocol):
    """A runtime's generation path (``generate:`` cells); ``backends.generative`` finds
    a backend's."""

    def open_generative(self, scenario: Scenario, cache_dir: Path) -> GenerativeSession:
        """Build/load the scenario's causal LM, ready to generate."""


# --- operator profiles -------------------------------------------------------------


@dataclass(frozen=True)
class ProfiledRequests:
    """What a runtime's profiler recorded over the recorded requests of one pass.

    ``nodes`` and ``op_types`` hold one mapping per recorded request, in order:
    node (or op type) -> its *self* time in that request, in ns (a node that did not
    run in a request is absent). ``node_info`` gives each node's op type and where it
    ran (execution provider, ``cpu``/``cuda``; ``""`` when unknown). ``trace`` is the
    runtime's Chrome trace as JSON text (an object with ``traceEvents``), ``None``
    when the runtime gives none. ``profiler`` is one of ``records.opprofile.PROFILERS``.
    """

    profiler: str
    nodes: tuple[Mapping[str, float], ...]
    op_types: tuple[Mapping[str, float], ...]
    node_info: Mapping[str, tuple[str, str]]
    trace: str | None = None


class OperatorProfiler(Protocol):
    """One profiling pass over an open session, made by ``ProfilingSession.profiler``.

    The pass starts when the profiler is made (hooks, the runtime's profiler or a
    profiling twin of the session) and ``finish`` always ends it, leaving the session
    as it was; ``perfguard.measure.profiling.profile_session`` drives it, never inside
    the timed loop::

        profiler = session.profiler(prepared)
        try:
            profiler.request(record=False)  # warm requests, not recorded
            profiler.request(record=True)   # each one timed by the caller
        finally:
            recorded = profiler.finish()
    """

    def request(self, *, record: bool) -> None:
        """Serve one request of ``prepared`` under the profiler, waiting for the device.

        Only requests with ``record=True`` count in what ``finish`` returns.
        """

    def finish(self) -> ProfiledRequests:
        """End the pass (profilers off, hooks removed) and return what was recorded.

        Safe to call once after any failure of ``request``; the session keeps serving.
        """


class ProfilingSession(Protocol):
    """A ``Session`` whose runtime can profile its operators (an optional extension).

    torch (``torch.profiler``: the module hierarchy and aten ops), onnxruntime (its
    session profiling, per graph node) and tensorrt (``IProfiler``, per layer)
    implement it; a session without a ``profiler`` method cannot be profiled.
    """

    def profiler(self, prepared: Any) -> OperatorProfiler:
        """Start a profiling pass over requests of ``prepared`` (what ``prepare`` made)."""
