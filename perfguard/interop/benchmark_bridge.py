"""pytest-benchmark tests as perfguard results: one results file, one gate, one report.

With ``--perfguard``, a test that uses pytest-benchmark's ``benchmark`` fixture
becomes a :class:`~perfguard.records.results.ScenarioResult` once its body has run, and
is recorded, compared and gated exactly like a YAML scenario (the session's
callback does that; see :func:`register_bridge`).

What a sample is
----------------
pytest-benchmark times *rounds*: each round calls the function ``iterations``
times back to back (``iterations`` is found by its calibration, or given to
``benchmark.pedantic``) and ``Metadata.update`` stores
``round duration / iterations`` in ``fixture.stats.stats.data``, in seconds.
So each entry is already a per-call time: the **mean** per call over one round.
perfguard takes each entry as one sample, ``round(seconds * 1e9)`` nanoseconds,
and nothing else: ``n == rounds``. When ``iterations > 1`` the samples are round
means, so percentiles describe round means, and tails are narrower than those of
single calls; ``runtime.benchmark.iterations`` records this so a reader can tell.

What does not apply
-------------------
pytest-benchmark owns the timing loop; the bridge never re-measures. So the
session judges these results with ``Gatekeeper.judge``: confirmation rounds
(``--perfguard-confirm-rounds``) do not apply, and a suspected regression stands
on the one measurement. No warm-up figures, cold start, canary or peak memory
are recorded for them.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from perfguard.core.paths import display_path
from perfguard.core.stats import is_stable, stability_ratio, throughput
from perfguard.records.figures import BenchmarkFacts, RuntimeInfo, summarize
from perfguard.records.results import ScenarioResult, Status

__all__ = [
    "BRIDGE_PLUGIN_NAME",
    "DEFAULT_STABILITY_TOLERANCE",
    "BenchmarkBridge",
    "benchmark_available",
    "benchmark_result",
    "register_bridge",
]

BRIDGE_PLUGIN_NAME = "perfguard-benchmark-bridge"
FIXTURE_NAME = "benchmark"
# The same default as a YAML scenario's ``stability_tolerance``.
DEFAULT_STABILITY_TOLERANCE = 0.10

OnResult = Callable[[pytest.Item, ScenarioResult], None]


def benchmark_available() -> bool:
    """True when pytest-benchmark can be imported."""
    return importlib.util.find_spec("pytest_benchmark") is not None


def _is_benchmark_fixture(fixture: Any) -> bool:
    """True for pytest-benchmark's own fixture (not a user fixture that shares its name)."""
    try:
        from pytest_benchmark.fixture import BenchmarkFixture
    except ImportError:
        return False
    return isinstance(fixture, BenchmarkFixture)


def _jsonable(value: Any) -> Any:
    """``value`` with anything JSON cannot hold (ids, objects) turned into its repr."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)


def benchmark_result(item: pytest.Item, fixture: Any, rootdir: Path) -> ScenarioResult | None:
    """The result of a finished ``benchmark`` fixture; None when it measured nothing.

    None when the test never called the fixture (``fixture.stats is None``), when
    benchmarking was disabled (``--benchmark-disable``), when the benchmarked
    function raised, or when no round was recorded. See the module docstring for
    how the per-call nanoseconds are derived.
    """
    metadata = getattr(fixture, "stats", None)
    if metadata is None or getattr(fixture, "has_error", False):
        return None
    data = list(getattr(metadata.stats, "data", ()) or ())
    if not data:
        return None
    samples = tuple(round(float(seconds) * 1e9) for seconds in data)
    iterations = int(getattr(metadata, "iterations", 1) or 1)
    total = sum(samples)
    ratio = float(stability_ratio(samples))
    return ScenarioResult(
        id=item.nodeid,
        suite=display_path(Path(item.path), rootdir),
        name=item.name,
        backend="python",
        device="cpu",
        precision="-",
        status=Status.PASSED,
        batch_size=1,
        threads=None,
        latency_ns=summarize(samples),
        throughput=throughput(samples, 1) if total > 0 else None,
        cold_start_ns=None,
        stable=bool(is_stable(samples, DEFAULT_STABILITY_TOLERANCE)),
        stability_ratio=ratio if math.isfinite(ratio) else None,
        runtime=RuntimeInfo(
            benchmark=BenchmarkFacts(
                source="pytest-benchmark",
                rounds=len(samples),
                iterations=iterations,
                sample="mean per call over one round of `iterations` calls",
                group=_jsonable(getattr(fixture, "group", None)),
                params=_jsonable(getattr(fixture, "params", None)),
                extra_info=_jsonable(getattr(fixture, "extra_info", None) or {}),
            )
        ),
        tags=(),
        samples_ns=samples,
    )


class BenchmarkBridge:
    """Plugin object: turns each finished ``benchmark`` test into a result for ``on_result``.

    ``on_result`` runs inside the item's call phase, so an exception it raises
    (the session raises ``GateFailure`` on a regression) fails that test.
    """

    def __init__(self, rootdir: Path, on_result: OnResult) -> None:
        self.rootdir = Path(rootdir)
        self.on_result = on_result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        # An exception from the test body propagates out of ``yield``: nothing is built.
        result: None = yield
        funcargs: dict[str, Any] = getattr(item, "funcargs", None) or {}
        fixture = funcargs.get(FIXTURE_NAME)
        if fixture is not None and _is_benchmark_fixture(fixture):
            scenario = benchmark_result(item, fixture, self.rootdir)
            if scenario is not None:
                self.on_result(item, scenario)
        return result


def register_bridge(config: pytest.Config, on_result: OnResult) -> None:
    """Register a :class:`BenchmarkBridge` as ``perfguard-benchmark-bridge``.

    Does nothing when pytest-benchmark is not installed, or when the bridge is
    already registered.
    """
    if not benchmark_available():
        return
    if config.pluginmanager.get_plugin(BRIDGE_PLUGIN_NAME) is not None:
        return
    config.pluginmanager.register(
        BenchmarkBridge(Path(config.rootpath), on_result), BRIDGE_PLUGIN_NAME
    )
