"""Whose exception is it, and which of its frames are worth showing.

An exception that escapes a step of a cell (factory, export, quantization, warm-up,
timing, accuracy) is owned by one of three parties, decided from its traceback:

* **perfguard** when the innermost frame (where it was raised) is in perfguard's own
  package, except a backend's ``run``/``_forward`` (they call straight into the
  runtime with the user's model) or an exception class of a runtime library: an
  :class:`~perfguard.core.errors.InternalError`, a bug to report, never "check your
  inputs".
* **memory** for a ``MemoryError`` wherever it was raised: the host ran out of memory
  (:class:`~perfguard.core.errors.HostMemoryError`), a matter of the cell's size.
* **the model** otherwise (the user's code, or a runtime library it called): a located
  ``ModelError`` whose fix fits the step.

Shown to the user is a short traceback. A frame is *the user's* unless its file lies
in perfguard's package, pytest (``pytest``, ``_pytest``), ``pluggy``, the Python
standard library (``<frozen ...>`` included), site-packages (installed libraries:
``torch``, ``onnxruntime``, ``transformers``, ...) or one of the runtime libraries
wherever they are installed (``torch``, ``onnxruntime``, ``onnx``, ``numpy``,
``scipy``, ``tensorrt``). A project installed editable (``pip install -e``) stays the
user's: its files are in the project. A model's trace keeps the user's frames (the
innermost few) and the exception line, so it ends at the model's own file and line;
with no frame of the user's (an ``nn.Sequential`` of torch layers, a model in an
installed library) there is no trace, the message's first line says it all.
perfguard's trace keeps perfguard's frames too. ``pytest --tb=long`` still shows
every frame.
"""

from __future__ import annotations

import importlib.util
import os
import site
import sysconfig
import traceback
from collections.abc import Callable
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import Literal

from perfguard.core.errors import (
    REPORT_FIX,
    HostMemoryError,
    InternalError,
    Location,
    ModelError,
    PerfguardError,
)

__all__ = [
    "HOST_MEMORY_FIX",
    "Owner",
    "RemoteTraceback",
    "blame",
    "failure_text",
    "first_line",
    "is_users_frame",
    "model_trace",
    "owner",
    "perfguard_trace",
    "trace_of",
]

Owner = Literal["perfguard", "model", "memory"]

#: Libraries whose frames are folded away: the test runner and the model runtimes.
FOLDED_PACKAGES = ("pytest", "_pytest", "pluggy", "torch", "onnxruntime", "onnx", "numpy",
                   "scipy", "tensorrt")  # fmt: skip
#: An exception of a class defined in one of these came from the runtime, not perfguard.
_RUNTIMES = frozenset({"torch", "onnxruntime", "onnx", "tensorrt"})
#: perfguard functions that hand the user's model to the runtime (backends/*.py).
_MODEL_CALLS = frozenset({"run", "_forward"})
_USER_FRAMES = 6  # innermost user frames shown of a model's exception
_PERFGUARD_FRAMES = 12  # innermost frames shown of perfguard's own exception
_EXCEPTION_LINES = 10
_LINE_CHARS = 400

HOST_MEMORY_FIX = (
    "use smaller input shapes or a smaller batch, run fewer cells at once (fewer "
    "pytest-xdist workers, a lower `load:` concurrency), or a machine with more memory"
)

_PACKAGE_DIR = os.path.realpath(Path(__file__).resolve().parents[1])
_BACKENDS_DIR = str(Path(_PACKAGE_DIR) / "backends")


class RemoteTraceback(Exception):
    """An exception's traceback from another process (a worker), as text.

    Set as the ``__cause__`` of the error rebuilt from a worker's reply (as
    ``concurrent.futures`` does): ``short`` is the folded trace shown under the
    message, ``full`` every frame (what ``--tb=long`` prints as the cause).
    """

    def __init__(self, short: str, full: str = "") -> None:
        super().__init__(full or short)
        self.short = short
        self.full = full

    def __str__(self) -> str:
        return self.full or self.short


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


@lru_cache(maxsize=1)
def _roots() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(folded package folders, standard library folders, site-packages folders)."""
    folded = [_PACKAGE_DIR]
    for name in FOLDED_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            folded.extend(os.path.realpath(p) for p in spec.submodule_search_locations)
        elif spec.origin:  # a single-file module (pytest.py in some versions)
            folded.append(os.path.realpath(spec.origin))
    paths = sysconfig.get_paths()
    stdlib = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib") if key in paths}
    sites = {os.path.realpath(paths[key]) for key in ("purelib", "platlib") if key in paths}
    with suppress(AttributeError):  # virtualenv's old site module has no getsitepackages
        sites.update(os.path.realpath(p) for p in site.getsitepackages())
    sites.add(os.path.realpath(site.getusersitepackages()))
    return tuple(folded), tuple(sorted(stdlib)), tuple(sorted(sites))


@lru_cache(maxsize=4096)
def _where(filename: str) -> Literal["perfguard", "folded", "user"]:
    if filename.startswith("<"):
        return "folded" if filename.startswith("<frozen") else "user"
    path = os.path.realpath(filename)
    folded, stdlib, sites = _roots()
    if _under(path, (_PACKAGE_DIR,)):
        return "perfguard"
    if _under(path, folded) or _under(path, stdlib) or _under(path, sites):
        return "folded"
    return "user"


def is_users_frame(filename: str) -> bool:
    """Whether a frame in ``filename`` is the user's (see the module docstring)."""
    return _where(filename) == "user"


def _is_perfguard_frame(filename: str) -> bool:
    return _where(filename) == "perfguard"


def owner(exc: BaseException, *, calls_user: bool = False) -> Owner:
    """Who raised ``exc``: ``perfguard``, ``memory`` (the host ran out) or ``model``.

    ``calls_user``: ``exc`` was caught in the frame that calls the user's function, so
    an exception raised in that frame itself (its traceback has that one frame) comes
    from the call: arguments the function does not take are the user's to fix.
    """
    if isinstance(exc, MemoryError):
        return "memory"
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or (calls_user and len(frames) == 1):
        return "model"
    last = frames[-1]
    if not _is_perfguard_frame(last.filename):
        return "model"
    in_backend = _under(os.path.realpath(last.filename), (_BACKENDS_DIR,))
    if in_backend and last.name in _MODEL_CALLS:
        return "model"
    if type(exc).__module__.split(".")[0] in _RUNTIMES:
        return "model"
    return "perfguard"


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= _LINE_CHARS else text[: _LINE_CHARS - 3] + "..."


def _exception_lines(exc: BaseException) -> list[str]:
    lines = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n").splitlines()
    if len(lines) > _EXCEPTION_LINES:
        lines = [*lines[: _EXCEPTION_LINES - 1], f"... ({len(lines) - _EXCEPTION_LINES + 1} more)"]
    return [ln if len(ln) <= _LINE_CHARS else ln[: _LINE_CHARS - 3] + "..." for ln in lines]


def _trace(exc: BaseException, keep: Callable[[str], bool], limit: int, *, need_one: bool) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    kept = [frame for frame in frames if keep(frame.filename)]
    if not kept and need_one:
        return ""
    hidden = len(frames) - len(kept)
    more = max(0, len(kept) - limit)
    kept = kept[len(kept) - limit :] if more else kept
    parts = []
    if hidden:
        folded = "pytest, pluggy, runtime libraries"
        folded += "" if keep is _shows_perfguard else " and perfguard"
        parts.append(f"{hidden} frame(s) of {folded} folded away")
    if more:
        parts.append(f"{more} more not shown")
    parts.append("--tb=long shows every frame")
    header = f"Traceback ({'; '.join(parts)}):"
    body = "".join(traceback.StackSummary.from_list(kept).format()).rstrip("\n")
    return "\n".join([header, *([body] if body else []), *_exception_lines(exc)])


def _shows_perfguard(filename: str) -> bool:
    return _where(filename) != "folded"


def model_trace(exc: BaseException) -> str:
    """The user's innermost frames of ``exc`` and its exception line: ends at the
    user's own file and line. Empty when no frame is the user's (a runtime-only model
    such as ``nn.Sequential``: the message's first line says it all)."""
    return _trace(exc, is_users_frame, _USER_FRAMES, need_one=True)


def perfguard_trace(exc: BaseException) -> str:
    """perfguard's and the user's innermost frames of ``exc``, and its exception line."""
    return _trace(exc, _shows_perfguard, _PERFGUARD_FRAMES, need_one=False)


def trace_of(exc: BaseException) -> str:
    """The short traceback to show under a ``PerfguardError``'s message: that of the
    exception it was raised from (perfguard's frames for an ``InternalError``, the
    user's otherwise), or a worker's, or empty."""
    seen = {id(exc)}
    cause = exc.__cause__
    # Through chains of perfguard errors (a cycle, however made, ends the walk).
    while isinstance(cause, PerfguardError) and id(cause) not in seen:
        seen.add(id(cause))
        exc, cause = cause, cause.__cause__
    if cause is None or id(cause) in seen:
        return ""
    if isinstance(cause, RemoteTraceback):
        return cause.short
    if isinstance(exc, InternalError):
        return perfguard_trace(cause)
    return model_trace(cause)


def failure_text(exc: BaseException) -> str:
    """``exc``'s message with its short traceback under it (see :func:`trace_of`)."""
    trace = trace_of(exc)
    return f"{exc}\n{trace}" if trace else str(exc)


def blame(
    exc: BaseException,
    *,
    doing: str,
    culprit: str,
    fix: str,
    expected: str | None = None,
    location: Location | None = None,
    calls_user: bool = False,
    whole_message: bool = False,
) -> PerfguardError:
    """The error to raise (``from exc``) for ``exc``, which escaped while ``doing``
    (e.g. "timing it on torch/cpu/fp32"): perfguard's own (``InternalError``), out of
    host memory (``HostMemoryError``) or ``culprit``'s (e.g. "model 'lin'"):
    a ``ModelError`` with the step's ``fix``. ``calls_user``: see :func:`owner`;
    ``whole_message`` quotes all of ``exc``'s message, not only its first line."""
    what = f"{type(exc).__name__}: {exc if whole_message else first_line(exc)}"
    kind = owner(exc, calls_user=calls_user)
    if kind == "memory":
        return HostMemoryError(
            f"out of host memory while {doing} ({what})",
            expected="the model, its inputs and the cells running at once to fit in memory",
            fix=HOST_MEMORY_FIX,
            location=location,
        )
    if kind == "perfguard":
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"at {Path(frames[-1].filename).name}:{frames[-1].lineno}, " if frames else ""
        return InternalError(
            f"perfguard itself raised {what} while {doing} ({where}not in {culprit})",
            fix=REPORT_FIX,
            location=location,
        )
    return ModelError(
        f"{culprit} raised {what} while {doing}", expected=expected, fix=fix, location=location
    )
