"""A content-hashed cache of exported, quantized and fp16-converted ONNX models.

Files live under ``<rootdir>/.perfguard/cache`` and are named
``<model>-<key>.onnx``; the key is a sha256 over everything that changes the
exported graph (weights, architecture, input signature, opset, output names,
torch version), so a model is exported again only when one of those changes.
Writes go to a temporary name in the same folder and are renamed into place
under a file lock: concurrent pytest workers never export the same key twice
and never see a half-written file. The int8 and fp16 variants are made in
``perfguard.models.quantize`` and cached the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from filelock import FileLock

from perfguard.core import progress
from perfguard.core.errors import Location, ModelError
from perfguard.core.scenario import ModelSpec, Scenario
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
    "cache_key_of",
    "export_key",
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


def export_key(
    module: torch.nn.Module,
    feeds: Mapping[str, np.ndarray],
    model: ModelSpec,
    dynamic_batch: bool = False,
) -> str:
    """The sha256 (hex) that names ``module``'s export for these inputs."""
    import torch

    digest = hashlib.sha256()

    def add(*parts: object) -> None:
        for part in parts:
            digest.update(str(part).encode())
            digest.update(b"\0")

    add("perfguard-export-v1", torch.__version__, model.opset, tuple(model.output_names))
    if dynamic_batch:  # added only when set, so existing cache keys stay valid
        add("dynamic-batch")
    for name, array in feeds.items():
        add("input", name, tuple(np.shape(array)), np.asarray(array).dtype.str)
    add("architecture", repr(module))
    for name, value in module.state_dict().items():
        if isinstance(value, torch.Tensor):
            add("tensor", name, value.dtype, tuple(value.shape))
            digest.update(_tensor_bytes(value))
        else:
            add("extra", name, repr(value))
    return digest.hexdigest()


def _tensor_bytes(tensor: torch.Tensor) -> bytes | memoryview:
    import torch

    data = tensor.detach()
    if data.is_quantized:
        data = data.int_repr()
    data = data.to("cpu").contiguous().reshape(-1)
    if data.dtype == torch.bool:
        data = data.to(torch.uint8)
    try:
        raw: np.ndarray = data.view(torch.uint8).numpy()
        return raw.data  # no copy: hashlib reads the buffer
    except (RuntimeError, TypeError):  # exotic dtypes: fall back to the printed values
        return repr(data.tolist()).encode()


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
    """The cached ONNX export of ``module`` for ``feeds``; exported only on a key change.

    ``dynamic_batch`` makes axis 0 of every input (and named output) symbolic,
    so one session serves the batches a dynamic batcher forms.
    """
    key = export_key(module, feeds, model, dynamic_batch)
    target = Path(cache_dir) / f"{safe_name(model.name)}-{key[:KEY_CHARS]}.onnx"

    def write(tmp: Path) -> None:
        # Export may take a minute for a large model: say so on the terminal.
        started = time.monotonic()
        progress.report("export", 0, cell=model.name, detail=f"to ONNX, opset {model.opset}")
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

    return build_once(target, write, model.location, f"export of factory {model.factory}")


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
    # cells neither copy the model nor hash its weights again.
    # Everything export_key hashes besides the weights, and the file's name: two models
    # of one factory may differ in opset or outputs.
    signature = (
        "onnx-export",
        str(cache_dir),
        model.name,
        model.opset,
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
    was_training = module.training
    module.eval()
    try:
        with _EXPORT_LOCK, quiet(), torch.no_grad():
            torch.onnx.export(
                module,
                args,
                str(tmp),
                kwargs=kwargs,
                dynamo=False,
                opset_version=model.opset,
                input_names=names,
                output_names=list(model.output_names) or None,
                do_constant_folding=True,
                dynamic_axes=dynamic_axes,
            )
    except Exception as exc:
        raise ModelError(
            f"exporting factory {model.factory} to ONNX (opset {model.opset}) failed: "
            f"{type(exc).__name__}: {exc}",
            expected="a model torch.onnx.export (TorchScript exporter, fixed shapes) can trace",
            fix="try another `opset:`, run this model on the torch backend, or export it "
            "yourself and point `onnx:` at the file",
            location=model.location,
        ) from exc
    finally:
        module.train(was_training)


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
