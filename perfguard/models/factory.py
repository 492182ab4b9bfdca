"""Loading the models a suite names: a Python factory or an ONNX file.

A factory is ``module:function``; the module is imported with the suite's
directory (``ModelSpec.base_dir``) first on ``sys.path``, so a ``models.py``
beside the suite file is found without installing anything.

In same-run A/B each side checks, after the import and after the build, that no module
came from another checkout of the repository (:mod:`perfguard.models.origin`).

A factory model is built once per process and session, not once per cell: the
last one built is kept (pristine, never handed out) and every caller gets a deep
copy of it, so a cell may ``eval()``, ``half()``, quantize, compile or move its
model without touching another's. The copy is made only while the factory function
is the very object that built it (a re-imported module builds afresh);
``forget_factory_models`` drops the kept model (the plugin calls it when a session ends).
"""

from __future__ import annotations

import copy
import difflib
import importlib
import importlib.util
import inspect
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from perfguard.core.blame import blame
from perfguard.core.errors import InputError, Location, ModelError, PerfguardError
from perfguard.core.scenario import ModelSpec
from perfguard.models.exportfailure import generation_loop_error, is_generation_loop
from perfguard.models.origin import check_origins

if TYPE_CHECKING:
    import torch

__all__ = [
    "check_forward_inputs",
    "check_onnx_file",
    "feeds_positionally",
    "forget_factory_models",
    "forget_shadowed",
    "forward_parameters",
    "load_factory",
    "on_sys_path",
    "split_factory",
]


def split_factory(factory: str, location: Location | None = None) -> tuple[str, str]:
    """``"pkg.mod:make"`` -> ``("pkg.mod", "make")``."""
    module_name, sep, function_name = factory.partition(":")
    module_name, function_name = module_name.strip(), function_name.strip()
    if not sep or not module_name or not function_name or ":" in function_name:
        raise ModelError(
            f"factory {factory!r} is not of the form module:function",
            expected="e.g. `factory: models:make_mlp` (module importable from the suite's folder)",
            fix="write the factory as <module>:<function>",
            location=location,
        )
    return module_name, function_name


@dataclass(frozen=True)
class _Built:
    """The last factory model built in this process, and what built it."""

    key: tuple[str, str, str]  # (factory, suite folder, kwargs)
    function: Callable[..., Any]  # the factory object itself: a re-import builds afresh
    module: torch.nn.Module  # pristine: only copies of it are handed out
    # What was derived from this build (e.g. its export file per input signature): it is
    # as valid as the kept model itself and goes with it.
    derived: dict[object, object] = field(default_factory=dict)


# One model at a time: a suite's cells of one model run one after the other, and
# keeping more would hold their weights in memory for the rest of the session.
_built: list[_Built] = []


def forget_factory_models() -> None:
    """Drop the kept factory model (its memory goes; the next call builds again)."""
    _built.clear()


def _build_key(model: ModelSpec) -> tuple[str, str, str]:
    return (str(model.factory), str(Path(model.base_dir).resolve()), repr(model.factory_kwargs))


def derived_from_build(model: ModelSpec) -> dict[object, object] | None:
    """A dict that lives as long as the kept build of ``model``'s factory, for facts
    derived from it (an export's file), or None when no build of it is kept."""
    key = _build_key(model)
    return next((built.derived for built in _built if built.key == key), None)


def load_factory(model: ModelSpec) -> torch.nn.Module:
    """Import ``model.factory``, call it with ``factory_kwargs`` and return the module.

    The model is built once per process and session (see the module docstring):
    each call returns a module of its own, a deep copy of the one built.
    """

    if model.factory is None:
        raise ModelError(
            f"model {model.name!r} has no `factory:`",
            expected="`factory: module:function` returning a torch.nn.Module",
            fix="add a factory, or use a backend that runs the `onnx:` file",
            location=model.location,
        )
    module_name, function_name = split_factory(model.factory, model.location)
    entry = str(Path(model.base_dir).resolve())
    # The suite's folder stays on sys.path while the factory runs: it may import lazily.
    with on_sys_path(entry):
        module = _import_module(module_name, entry, model.location)
        function = _factory_function(module, module_name, function_name, model)
        key = _build_key(model)
        for built in _built:
            if built.key == key and built.function is function:
                return copy.deepcopy(built.module)
        _built.clear()  # before building: two models' weights are never kept at once
        result = _call_factory(function, model)
        check_origins(module_name, model.location)  # what the factory imported as it ran
    try:
        handed_out = copy.deepcopy(result)
    except Exception:  # a model that cannot be copied is built per call
        return result
    _built.append(_Built(key, function, result))
    return handed_out


def import_function(spec: str, base_dir: Path, location: Location) -> Callable[..., Any]:
    """Import ``module:function`` (the suite's folder importable) and return the callable.

    Used for user functions other than factories: accuracy inputs, task metrics.
    """
    module_name, function_name = split_factory(spec, location)
    entry = str(Path(base_dir).resolve())
    with on_sys_path(entry):
        module = _import_module(module_name, entry, location)
    function = getattr(module, function_name, None)
    if function is None or not callable(function):
        names = [name for name in dir(module) if not name.startswith("_")]
        close = difflib.get_close_matches(function_name, names, n=5, cutoff=0.5)
        raise ModelError(
            f"module {module_name!r} ({_module_file(module)}) has no function {function_name!r}",
            expected=f"a callable `{function_name}`",
            fix=f"check the name in `{spec}`"
            + (f" (close names: {', '.join(close)})" if close else ""),
            location=location,
        )
    return cast("Callable[..., Any]", function)


def _factory_function(
    module: ModuleType, module_name: str, function_name: str, model: ModelSpec
) -> Callable[..., Any]:
    function = getattr(module, function_name, None)
    if function is None or not callable(function):
        names = [name for name in dir(module) if not name.startswith("_")]
        close = difflib.get_close_matches(function_name, names, n=5, cutoff=0.5)
        hint = f"close names: {', '.join(close)}" if close else _callables_hint(module)
        what = "has no attribute" if function is None else "has a non-callable attribute"
        raise ModelError(
            f"module {module_name!r} ({_module_file(module)}) {what} {function_name!r}",
            expected=f"a function {function_name}(**factory_kwargs) returning a torch.nn.Module",
            fix=f"check the function name in `factory: {model.factory}` ({hint})",
            location=model.location,
        )
    return cast("Callable[..., Any]", function)


def _call_factory(function: Callable[..., Any], model: ModelSpec) -> torch.nn.Module:
    import torch

    kwargs: dict[str, Any] = dict(model.factory_kwargs)
    try:
        result = function(**kwargs)
    except PerfguardError:  # perfguard's own (a watchdog's timeout): already located
        raise
    except Exception as exc:
        raise blame(
            exc,
            calls_user=True,  # a TypeError of this very call is about `factory_kwargs`
            whole_message=True,
            doing="building the model",
            culprit=f"factory {model.factory}",
            expected="the factory to build the model without raising",
            fix=f"fix the factory or its `factory_kwargs` ({_kwargs_text(kwargs)})",
            location=model.location,
        ) from exc
    if is_generation_loop(result):
        raise generation_loop_error(model, "it returned a bound `generate` method")
    if not isinstance(result, torch.nn.Module):
        raise ModelError(
            f"factory {model.factory} returned {type(result).__module__}."
            f"{type(result).__qualname__}, not a torch.nn.Module",
            expected="a torch.nn.Module instance",
            fix="return the model object itself (not a class, tuple or path) from the factory",
            location=model.location,
        )
    return result


def code_paths(model: ModelSpec) -> tuple[Path, ...]:
    """The files and folders whose contents decide what ``model`` runs, found without
    importing anything: its suite's folder (where factory modules are imported from),
    its ONNX and inputs files, and the factory's top-level package folder or module
    file as Python would find it from there. A saved baseline must describe them all
    (:func:`perfguard.baseline.git.untracked_files`)."""
    found = [model.base_dir, *(p for p in (model.onnx, model.inputs_file) if p is not None)]
    if model.factory:
        top = model.factory.partition(":")[0].partition(".")[0]
        with on_sys_path(str(model.base_dir)):
            try:
                importlib.invalidate_caches()
                spec = importlib.util.find_spec(top)
            except (ImportError, ValueError):  # unfindable: the run itself said so
                spec = None
        if spec is not None:
            found.extend(Path(p) for p in spec.submodule_search_locations or ())
            if spec.has_location and spec.origin:
                found.append(Path(spec.origin))
    return tuple(dict.fromkeys(found))


@contextmanager
def on_sys_path(entry: str) -> Iterator[None]:
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with suppress(ValueError):
            sys.path.remove(entry)


def _import_module(module_name: str, entry: str, location: Location) -> ModuleType:
    try:
        importlib.invalidate_caches()
        forget_shadowed(module_name, Path(entry))
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise _not_found(module_name, exc, entry, location) from None
        # The module was found; one of its own imports was not: the user's line.
        raise blame(
            exc,
            doing="importing it",
            culprit=f"factory module {module_name!r}",
            expected=f"{missing!r} to be importable where the module imports it",
            fix=f"install {missing!r} in this environment, or fix that import",
            location=location,
        ) from exc
    except PerfguardError:  # perfguard's own (a watchdog's timeout): already located
        raise
    except Exception as exc:  # raised by the module's own code while importing
        raise blame(
            exc,
            doing="importing it",
            culprit=f"factory module {module_name!r}",
            expected="a module that imports cleanly",
            fix="fix the error in the module (its line is the last one of the traceback below)",
            location=location,
        ) from exc
    # In A/B, a side must run its own tree's code (perfguard.models.origin).
    check_origins(module_name, location)
    return module


# Files that mark a project's root (where pytest's ini usually sits): the search for a
# module that is not on sys.path goes no further up than this.
_ROOT_MARKERS = (".git", "pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini")


def _not_found(
    module_name: str, exc: ModuleNotFoundError, entry: str, location: Location
) -> ModelError:
    """``module_name`` (or its package ``exc.name``) is nowhere on sys.path: name the
    folders searched, and where the module sits if it is in a folder above the suite."""
    missing = exc.name or module_name
    top = missing.split(".")[0]
    searched = [entry, *(p for p in _project_paths() if p != entry)]
    parent, _, last = missing.rpartition(".")
    package = sys.modules.get(parent) if parent else None
    found, root = _find_above(top, Path(entry))
    if package is not None:  # the package imported; it has no such submodule
        where = ", ".join(getattr(package, "__path__", None) or [_module_file(package)])
        fix = (
            f"check the module name in `factory:`: package {parent!r} ({where}) has no "
            f"module {last!r}"
        )
    elif found is not None:
        rel = Path(os.path.relpath(found, root)).as_posix() if root is not None else str(found)
        fix = (
            f'{top!r} is in {found}, which is not on sys.path: add `pythonpath = ["{rel}"]` '
            f"to pytest's ini{'' if root is None else f' in {root}'} ([tool.pytest.ini_options] "
            "in pyproject.toml, or [pytest] in pytest.ini) so that pytest puts that folder "
            "on sys.path, or move the module beside the suite"
        )
    else:
        fix = (
            f"check the module name in `factory:`; put {top}.py (or the {top}/ package) "
            "beside the suite, or add the folder holding it to pytest's `pythonpath` ini "
            '(e.g. `pythonpath = ["."]` under [tool.pytest.ini_options] for a package at '
            "the repository root); an installed package: install it in this environment"
        )
    return ModelError(
        f"cannot import factory module {module_name!r} ({exc}): not found in the suite's "
        f"folder {entry} nor on sys.path ({', '.join(searched[1:]) or 'installed packages'})",
        expected=f"{module_name.replace('.', '/')}.py beside the suite, in a folder on "
        "sys.path, or an installed module",
        fix=fix,
        location=location,
    )


def _project_paths() -> list[str]:
    """The folders of sys.path that hold a project's code (not the standard library,
    site-packages or zip files): those a user can add a module to."""
    paths = sysconfig.get_paths()
    system = {
        os.path.realpath(paths[key])
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if key in paths
    }
    # The interpreter's own folders (a venv's bin/, where the `pytest` script sits).
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    system.update(p for p in prefixes if p != os.sep)
    seen: list[str] = []
    for raw in sys.path:
        folder = os.path.realpath(raw or Path.cwd())
        if not Path(folder).is_dir() or folder in seen:
            continue
        if any(folder == s or folder.startswith(s + os.sep) for s in system):
            continue
        if any(part in ("site-packages", "dist-packages") for part in Path(folder).parts):
            continue
        seen.append(folder)
    return seen


def _find_above(top: str, start: Path) -> tuple[Path | None, Path | None]:
    """(the folder above ``start`` holding ``top``.py or the ``top``/ package, the
    project's root), each None when not found before the root or the filesystem's top."""
    root: Path | None = None
    found: Path | None = None
    for folder in [start, *start.parents]:
        if found is None and ((folder / f"{top}.py").is_file() or (folder / top).is_dir()):
            found = folder
        if any((folder / marker).exists() for marker in _ROOT_MARKERS):
            root = folder
            break
    return found, root


def forget_shadowed(module_name: str, base_dir: Path) -> None:
    """Drop a cached module of the same name that lives outside ``base_dir``.

    Two suites in different folders may both have a ``models.py``; without this
    the second would silently get the first one's module from ``sys.modules``.
    """
    top = module_name.split(".")[0]
    cached = sys.modules.get(top)
    if cached is None:
        return
    local = base_dir / f"{top}.py"
    local_pkg = base_dir / top / "__init__.py"
    if not (local.is_file() or local_pkg.is_file()):
        return
    cached_file = getattr(cached, "__file__", None)
    if cached_file is not None and Path(cached_file).resolve() in (
        local.resolve(),
        local_pkg.resolve(),
    ):
        return
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]


def _module_file(module: ModuleType) -> str:
    return str(getattr(module, "__file__", None) or module.__name__)


def _callables_hint(module: ModuleType) -> str:
    names = sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and callable(value)
        and getattr(value, "__module__", None) == module.__name__
    )
    return f"functions defined there: {', '.join(names)}" if names else "it defines no functions"


def _kwargs_text(kwargs: dict[str, Any]) -> str:
    if not kwargs:
        return "called with no arguments"
    return "called with " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def check_onnx_file(path: Path, location: Location | None = None) -> Path:
    """``path`` if it is a readable ONNX model, else a ``ModelError``."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(
            f"ONNX file {path} not found",
            expected="an existing .onnx file (relative paths are resolved from the suite's folder)",
            fix="check `onnx:` or export the model first",
            location=location,
        )
    try:
        import onnx
    except ImportError:  # onnxruntime alone can still load it; it reports bad files itself
        return path
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise ModelError(
            f"{path} is not an ONNX model ({type(exc).__name__}: {exc})",
            expected="a serialized onnx.ModelProto",
            fix="re-export the model (torch.onnx.export) and point `onnx:` at the .onnx file",
            location=location,
        ) from exc
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.graph.output:
        raise ModelError(
            f"{path} is not an ONNX model (no IR version or graph)",
            expected="a serialized onnx.ModelProto with a graph",
            fix="re-export the model (torch.onnx.export) and point `onnx:` at the .onnx file",
            location=location,
        )
    return path


def forward_parameters(module: torch.nn.Module) -> tuple[list[str], list[str], bool]:
    """(accepted keyword names, required names, takes ``**kwargs``) of ``module.forward``."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return [], [], True
    names: list[str] = []
    required: list[str] = []
    var_kw = False
    for param in signature.parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
        elif param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        else:
            if param.kind is not inspect.Parameter.POSITIONAL_ONLY:
                names.append(param.name)
            if param.default is inspect.Parameter.empty:
                required.append(param.name)
    return names, required, var_kw


def feeds_positionally(module: torch.nn.Module, names: list[str]) -> bool:
    """Whether a lone suite input should be passed to ``forward`` by position.

    Inputs are passed by keyword; the one exception is a single input whose
    name ``forward`` does not accept, into a ``forward`` that takes exactly one
    required positional argument (``nn.Sequential.forward(input)``,
    ``forward(self, x, /)``, ``forward(self, *args)``): there the name cannot
    be wrong, so it only labels the input.
    """
    if len(names) != 1:
        return False
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    kinds = inspect.Parameter
    if any(p.kind is kinds.VAR_KEYWORD for p in params):
        return False
    keyword_names = {
        p.name for p in params if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)
    }
    if names[0] in keyword_names:
        return False
    positional = [
        p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    required = [
        p for p in params if p.default is kinds.empty and p.kind is not kinds.VAR_POSITIONAL
    ]
    if not positional:
        return any(p.kind is kinds.VAR_POSITIONAL for p in params) and not required
    return required == [positional[0]]


def check_forward_inputs(module: torch.nn.Module, names: list[str], location: Location) -> None:
    """``InputError`` unless the suite's input ``names`` can be passed to ``forward``."""
    if feeds_positionally(module, names):
        return
    accepted, required, var_kw = forward_parameters(module)
    unknown = [name for name in names if name not in accepted and not var_kw]
    missing = [name for name in required if name not in names]
    if not unknown and not missing:
        return
    problems = []
    if unknown:
        problems.append(f"forward() has no parameter(s) {', '.join(unknown)}")
    if missing:
        problems.append(f"required parameter(s) {', '.join(missing)} get no input")
    raise InputError(
        f"inputs do not match {type(module).__name__}.forward: {'; '.join(problems)} "
        f"(model parameters: {', '.join(accepted) or 'none'}; suite inputs: {', '.join(names)})",
        expected="one suite input per forward() parameter, by name",
        fix="rename the suite's inputs to the forward() parameter names",
        location=location,
    )
