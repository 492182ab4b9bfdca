"""A content-addressed cache of exported, quantized and fp16-converted ONNX models.

Files live under ``<rootdir>/.perfguard/cache``. A factory's model is exported
to ONNX once per session (once per model, opset, exporter, outputs and input
signature: every cell of the model shares it) and the file is named by its own
bytes, ``<model>-<sha256[:16]>.onnx``. Nothing is keyed on a guess at what the model
runs: the name *is* the graph ONNX Runtime will run, so a change to any code
``forward`` reaches (a loop, a helper in another module, a monkeypatched
function, a library upgrade) gives another name, and the int8/fp16 variants
(``perfguard.models.quantize``) and TensorRT engines, which are keyed on the
source file's bytes, are built again from it. An unchanged model exports to the
same bytes (both exporters are deterministic; the dynamo exporter is told to keep
the weights inside the file: its side file would be named after the temporary
file), so its derived files stay cache hits.

The exporter (``exporter:``, TorchScript by default) is part of the key: a graph the
dynamo exporter wrote is named by its bytes *and* the exporter, so the two never
share an export (the default's names are those of before); what derives from an
export is keyed on the graph's bytes, which are what runs. An export that fails
raises :class:`~perfguard.core.errors.ExportError` naming what stopped it
(:mod:`perfguard.models.exportfailure`). Exports go to a temporary name in the cache
folder and are renamed into place: concurrent workers never see a half-written file,
and two that export the same graph write the same name.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import os
import re
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from filelock import FileLock

from perfguard.core import progress
from perfguard.core.errors import BackendUnavailable, Location, ModelError
from perfguard.core.scenario import ModelSpec, Scenario
from perfguard.models.exportfailure import GenerateCalls, export_error, watch_generate
from perfguard.models.factory import (
    check_forward_inputs,
    check_onnx_file,
    derived_from_build,
    feeds_positionally,
    load_factory,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "KEY_CHARS",
    "KEY_SUFFIX",
    "build_once",
    "make_cache_folder",
    "safe_name",
    "source_digest",
    "cache_key_of",
    "file_sha256",
    "export_onnx",
    "ordered_input_names",
    "quiet",
]

KEY_CHARS = 16
_KEY_IN_NAME = re.compile(r"-([0-9a-f]{16})\.onnx$")
KEY_SUFFIX = re.compile(r"-[0-9a-f]{16}$")
_NOISY_LOGGERS = (
    "torch.onnx",
    "torch._dynamo",
    "torch.export",
    "onnxscript",
    "onnx_ir",
    "onnxruntime",
    "onnxruntime.quantization",
)
# torch's TorchScript exporter keeps global state: one export at a time per process.
_EXPORT_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence warnings and library logging around an export or quantization.

    The legacy exporter warns that it is deprecated and ONNX Runtime's
    quantizer logs to the *root* logger; neither is the user's concern.
    """
    root = logging.getLogger()
    saved = {name: logging.getLogger(name).level for name in _NOISY_LOGGERS}
    saved_root = root.level
    # logging.warning() on a handler-less root would install a stderr handler for good.
    guard = logging.NullHandler() if not root.handlers else None
    if guard is not None:
        root.addHandler(guard)
    try:
        for name in _NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
        root.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(saved_root)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
        if guard is not None:
            root.removeHandler(guard)


def ordered_input_names(module: torch.nn.Module, names: list[str]) -> list[str]:
    """``names`` in the order of ``module.forward``'s parameters.

    The exporter numbers graph inputs in signature order, whatever the order
    of the keyword arguments, so ``input_names`` must follow that order.
    """
    try:
        params = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return list(names)
    position = {name: index for index, name in enumerate(params)}
    return sorted(names, key=lambda name: (position.get(name, len(params)), names.index(name)))


def cache_key_of(path: Path) -> str | None:
    """The key part of a cached file's name, ``None`` for a file outside the cache."""
    match = _KEY_IN_NAME.search(Path(path).name)
    return match.group(1) if match else None


def export_onnx(
    module: torch.nn.Module,
    feeds: Mapping[str, np.ndarray],
    model: ModelSpec,
    cache_dir: Path,
    *,
    dynamic_batch: bool = False,
) -> Path:
    """Export ``module`` for ``feeds`` and return the cache file holding that graph.

    The module is exported on every call and the file named by the export's
    sha256, so the cached graph is always the one this code produces: see the
    module docstring. ``dynamic_batch`` makes axis 0 of every input (and named
    output) symbolic, so one session serves the batches a dynamic batcher forms.
    """
    folder = Path(cache_dir)
    make_cache_folder(folder, model.location, "model cache")
    stem = safe_name(model.name)
    handle, name = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp.onnx", dir=folder)
    os.close(handle)
    tmp = Path(name)
    try:
        _timed_export(module, feeds, model, tmp, dynamic_batch)
        if not tmp.is_file() or tmp.stat().st_size == 0:
            raise ModelError(
                f"the export of factory {model.factory} wrote no file",
                expected=f"an ONNX file at {tmp}",
                fix="check the disk space and permissions of the cache folder",
                location=model.location,
            )
        digest = source_digest(tmp, model.location, f"the export of factory {model.factory}")
        if model.exporter != "torchscript":  # the default's names stay as they were
            digest.update(f"\0exporter={model.exporter}".encode())
        target = folder / f"{stem}-{digest.hexdigest()[:KEY_CHARS]}.onnx"
        # Same name, same bytes: an earlier export of this graph stays as it is, so
        # sessions and engines built from it keep their file.
        if not (target.is_file() and target.stat().st_size == tmp.stat().st_size):
            tmp.replace(target)  # atomic: same folder
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return target


def file_sha256(path: Path) -> hashlib._Hash:
    """The sha256 of a file's bytes, read a MiB at a time (the caller adds to it)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest


def source_digest(path: Path, location: Location | None, what: str) -> hashlib._Hash:
    """``file_sha256`` of an ONNX file a cache entry derives from; ModelError if unreadable."""
    try:
        return file_sha256(path)
    except OSError as exc:
        raise ModelError(
            f"{what} cannot read {path}: {exc}",
            expected="a readable ONNX file",
            fix="check the path and its permissions (for `onnx:`, the suite's path)",
            location=location,
        ) from exc


def _timed_export(
    module: torch.nn.Module,
    feeds: Mapping[str, np.ndarray],
    model: ModelSpec,
    tmp: Path,
    dynamic_batch: bool,
) -> None:
    """``_export``, said on the terminal: a large model's export may take a minute."""
    started = time.monotonic()
    how = f"to ONNX, opset {model.opset}"
    if model.exporter != "torchscript":
        how += f", {model.exporter} exporter"
    progress.report("export", 0, cell=model.name, detail=how)
    try:
        _export(module, feeds, model, tmp, dynamic_batch)
    except BaseException:
        elapsed = time.monotonic() - started
        progress.report(
            "export", 0, cell=model.name, detail=f"failed after {elapsed:.1f} s", final=True
        )
        raise
    elapsed = time.monotonic() - started
    progress.report("export", 1, cell=model.name, detail=f"done in {elapsed:.1f} s", final=True)


def onnx_file_of(
    scenario: Scenario, feeds: Mapping[str, np.ndarray], cache_dir: Path
) -> tuple[Path, bool]:
    """The cell's ONNX file and whether it was exported: its ``onnx:`` file (checked),
    or its factory exported for these inputs (a dynamic batch axis for batching cells)."""
    model = scenario.model
    if model.onnx is not None:
        return check_onnx_file(model.base_dir / model.onnx, model.location), False
    dynamic = scenario.load is not None and scenario.load.batching is not None
    # Cells of one model share its build; once it was exported for these inputs, later
    # cells neither copy the model nor export it again. Everything an export depends on
    # besides the module: two models of one factory may differ in opset, exporter or outputs.
    signature = (
        "onnx-export",
        str(cache_dir),
        model.name,
        model.opset,
        model.exporter,
        tuple(model.output_names),
        tuple((name, np.shape(a), np.asarray(a).dtype.str) for name, a in feeds.items()),
        dynamic,
    )
    known = derived_from_build(model)
    exported = known.get(signature) if known is not None else None
    if isinstance(exported, Path) and exported.is_file():
        return exported, True
    module = load_factory(model)
    module.eval()
    check_forward_inputs(module, list(feeds), model.location)
    path = export_onnx(module, feeds, model, cache_dir, dynamic_batch=dynamic)
    known = derived_from_build(model)
    if known is not None:
        known[signature] = path
    return path, True


def _export(
    module: torch.nn.Module,
    feeds: Mapping[str, np.ndarray],
    model: ModelSpec,
    tmp: Path,
    dynamic_batch: bool = False,
) -> None:
    import torch

    names = ordered_input_names(module, list(feeds))
    tensors = {name: torch.from_numpy(np.array(feeds[name], copy=True)) for name in names}
    positional = feeds_positionally(module, names)
    args = tuple(tensors.values()) if positional else ()
    kwargs = None if positional else tensors
    dynamic_axes = (
        {name: {0: "batch"} for name in [*names, *model.output_names]} if dynamic_batch else None
    )
    dynamo = model.exporter == "dynamo"
    if dynamo:
        _need_onnxscript(model)
    was_training = module.training
    module.eval()
    calls = GenerateCalls()  # the generate() calls forward made: a generation loop
    try:
        with _EXPORT_LOCK, quiet(), torch.no_grad(), watch_generate(module, calls):
            extra: dict[str, object] = (
                # Weights inside the file: it is renamed into place, a side file would not be.
                {"external_data": False, "verbose": False} if dynamo else {}
            )
            torch.onnx.export(
                module,
                args,
                str(tmp),
                kwargs=kwargs,
                dynamo=dynamo,
                opset_version=model.opset,
                input_names=names,
                output_names=list(model.output_names) or None,
                do_constant_folding=True,
                dynamic_axes=dynamic_axes,
                **extra,  # type: ignore[arg-type]
            )
    except Exception as exc:
        raise export_error(exc, model, calls) from exc
    finally:
        module.train(was_training)


def _need_onnxscript(model: ModelSpec) -> None:
    """BackendUnavailable unless the dynamo exporter's onnxscript is installed."""
    import importlib.util

    if importlib.util.find_spec("onnxscript") is None:
        raise BackendUnavailable(
            f"model {model.name!r} asks for `exporter: dynamo`, which needs the onnxscript "
            "package; it is not installed",
            expected="onnxscript installed beside torch",
            fix="pip install 'onnxscript>=0.5' (perfguard's `onnx` extra has it), or write "
            "`exporter: torchscript`",
            location=model.location,
        )


def build_once(
    target: Path, write: Callable[[Path], None], location: Location | None, what: str
) -> Path:
    """Create ``target`` with ``write`` unless it exists; atomic and process-safe."""
    if target.is_file():
        return target
    make_cache_folder(target.parent, location, "model cache")
    with FileLock(str(target) + ".lock"):
        if target.is_file():  # another process built it while we waited
            return target
        tmp = target.with_name(f".{target.stem}.{os.getpid()}.tmp.onnx")
        try:
            write(tmp)
            if not tmp.is_file():
                raise ModelError(
                    f"{what} wrote no file",
                    expected=f"an ONNX file at {tmp}",
                    fix="check the disk space and permissions of the cache folder",
                    location=location,
                )
            tmp.replace(target)  # atomic: same folder
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    return target


def make_cache_folder(folder: Path, location: Location | None, what: str) -> None:
    """Create a cache folder (``what``: "model cache", "engine cache"); ModelError if not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(
            f"cannot create the {what} folder {folder}: {exc}",
            expected="a writable folder",
            fix="make the project folder writable or remove a file blocking the path",
            location=location,
        ) from exc


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name).strip("._") or "model"
