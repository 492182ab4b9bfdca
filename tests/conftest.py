"""Shared fixtures: tiny real models and suites for end-to-end runs through pytester."""

from __future__ import annotations

import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

# Import the runtimes once, up front: pytester's in-process runs restore
# sys.modules afterwards, and re-importing torch/onnxruntime in one process
# crashes inside their native extensions.
try:
    import onnxruntime  # noqa: F401
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - the runtimes are test extras
    pass

TINY_MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    def mlp(width=16, seed=0):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4)).eval()


    def first_mean(outputs, labels):
        return float(outputs[0].mean())


    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 4)

        def forward(self, x, scale):
            return self.proj(x) * scale


    def two_inputs():
        torch.manual_seed(0)
        return TwoInputs().eval()


    class Nan(nn.Module):
        def forward(self, x):
            return x * float("nan")


    def nan_model():
        return Nan()


    def not_a_module():
        return 42


    def explodes():
        raise RuntimeError("weights file is corrupt")
    """
)

FAST_DEFAULTS = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 30, seconds: 0}
  threads: 1
"""


def write_suite(pytester: pytest.Pytester, name: str, body: str, *, models: bool = True) -> Path:
    """Write ``suites/<name>.yaml`` (with the tiny models module beside it)."""
    suites = pytester.path / "suites"
    suites.mkdir(exist_ok=True)
    if models:
        (suites / "tinymodels.py").write_text(TINY_MODELS)
    path = suites / f"{name}.yaml"
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture
def suite_writer(pytester: pytest.Pytester) -> pytest.Pytester:
    # Keep perf runs inside the pytester directory (cache, reports).
    pytester.makeini("[pytest]\n")
    return pytester


def run_git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` with a throwaway identity; returns stripped stdout."""
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


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


# A torch model that busy-waits `us` microseconds per call: a planted, exact slowdown
# for the gate's end-to-end tests.
SPIN_MODEL = """
import time
import torch


class Spin(torch.nn.Module):
    def __init__(self, us):
        super().__init__()
        self.us = us
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        end = time.perf_counter_ns() + self.us * 1000
        while time.perf_counter_ns() < end:
            pass
        return self.lin(x)


def spin(us=200):
    torch.manual_seed(0)
    return Spin(us).eval()
"""


class SpinRepo:
    """A git repository for end-to-end runs of the gate: ``suites/`` holding the spin
    model, the given pytest.ini, and a .gitignore for what runs leave behind (pytester
    keeps its own capture files in the directory: not part of the repo)."""

    def __init__(self, pytester: pytest.Pytester, ini: str, *, ignore: str = "") -> None:
        self.pytester = pytester
        self.path = pytester.path
        (self.path / "suites").mkdir()
        (self.path / "suites" / "spinmodel.py").write_text(SPIN_MODEL)
        pytester.makeini(ini)
        (self.path / ".gitignore").write_text(
            f"reports/\n{ignore}.perfguard/\n__pycache__/\nstdout\nstderr\nrunpytest-*\n"
        )
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        return run_git(self.path, *args)

    def commit_suite(self, text: str, message: str) -> str:
        """Commit ``suites/s.yaml`` with ``text``; the new commit's sha."""
        (self.path / "suites" / "s.yaml").write_text(text)
        self.git("add", "-A")
        self.git("commit", "-qm", message)
        return self.git("rev-parse", "HEAD")


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
