"""Fixtures and collection hooks of perfguard's tests; what tests share besides fixtures lives
in tests/helpers/."""

from __future__ import annotations

import contextlib
import importlib
import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def suite_writer(pytester: pytest.Pytester) -> pytest.Pytester:
    # Keep perf runs inside the pytester directory (cache, reports).
    pytester.makeini("[pytest]\n")
    return pytester


def _no_gpu_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return f"needs an NVIDIA GPU: torch {torch.__version__} ({build}) sees no CUDA device"
    return None


#: Fixtures of end-to-end tests: each runs pytest (the plugin) in a subprocess.
_END_TO_END_FIXTURES = frozenset({"pytester"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` are skipped, with the reason, where there is no GPU; tests
    that run pytest in a subprocess (through ``pytester``, directly or by a fixture of
    theirs) are marked ``slow``, so ``-m "not slow"`` is the fast loop."""
    for item in items:
        if _END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    reason = _no_gpu_reason() if gpu_items else None
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", autouse=True)
def _interactive_sigint() -> Iterator[None]:
    """SIGINT handled as in an interactive run, for the tests of Ctrl-C handling.

    A job started in the background by a non-interactive shell (``cmd &``, as some CI
    runners and ``nohup`` do) inherits SIGINT ignored (POSIX), and perfguard leaves an
    ignored signal ignored on purpose; those tests are about the usual case.
    """
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Import the runtimes before a test that runs pytest through pytester sets up.

    pytester restores sys.modules after each test (its snapshot is taken when the fixture
    is set up), and re-importing torch/onnxruntime in one process crashes inside their
    native extensions: imported here first, they stay. Only those tests need them in this
    process, so a run of other tests does not import torch.
    """
    if _END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())):
        for name in ("onnxruntime", "torch"):
            with contextlib.suppress(ImportError):  # the runtimes are test extras
                importlib.import_module(name)
