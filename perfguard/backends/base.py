"""The small protocol every runtime implements (one module per runtime).

A ``Backend`` is stateless and cheap to create; it imports its runtime lazily,
so a missing runtime costs nothing until a cell needs it. ``open`` returns a
``Session``: a model loaded on one device at one precision, ready to run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
