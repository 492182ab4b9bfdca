"""What does exporting every session cost, against the old cache hit that could go stale?

Since issue 24 a factory model that an ONNX Runtime or TensorRT cell runs is exported
to ONNX once per session and named by the export's sha256 (``perfguard.models.cache``):
the cached graph is always the one today's code produces. Before, a cache hit only
hashed the module's ``repr`` and ``state_dict`` (the old ``export_key``), which could
not see a change to the code ``forward`` runs. This measures, per model of the example
suite that an ONNX Runtime cell exports, side by side in interleaved rounds:

* **old hit**: what a cache hit cost before, the old key: sha256 over the torch
  version, opset, outputs, input shapes, ``repr(module)`` and every ``state_dict``
  tensor's bytes (restated here: the key is gone from perfguard);
* **export**: what a session pays now, ``export_onnx`` into a warm cache: the
  TorchScript export to a temporary file, its sha256, and the rename (or, as here from
  the second round on, finding the equal file already there);

and, once, the wall time of ``pytest --perfguard suites/examples.yaml`` (no baseline,
a temporary report folder, the model cache warm) for scale: every model is exported once
per session, whatever the number of its cells. Medians of the rounds; a report, not a
test: exit 0.

    HF_HUB_OFFLINE=1 python benchmarks/export_cache_cost.py [--rounds 5] [--no-suite]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perfguard.core.scenario import ModelSpec  # noqa: E402
from perfguard.models.cache import export_onnx  # noqa: E402
from perfguard.models.factory import load_factory  # noqa: E402
from perfguard.models.inputs import make_inputs  # noqa: E402
from perfguard.suite.loader import load_suite  # noqa: E402

SUITE = REPO / "suites" / "examples.yaml"


def old_hit_key(module: object, feeds: Mapping[str, np.ndarray], model: ModelSpec) -> str:
    """The pre-issue-24 export key: what a cache hit computed, and all it saw."""
    import torch

    digest = hashlib.sha256()
    for part in ("perfguard-export-v1", torch.__version__, model.opset, model.output_names):
        digest.update(str(part).encode() + b"\0")
    for name, array in feeds.items():
        digest.update(f"{name}{np.shape(array)}{array.dtype.str}".encode())
    digest.update(repr(module).encode())
    assert isinstance(module, torch.nn.Module)
    for name, value in module.state_dict().items():
        digest.update(name.encode())
        if isinstance(value, torch.Tensor):
            digest.update(value.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


def exported_models() -> dict[str, tuple[ModelSpec, dict[str, np.ndarray]]]:
    """Each model an ONNX Runtime cell of the example suite exports, with its feeds."""
    models: dict[str, tuple[ModelSpec, dict[str, np.ndarray]]] = {}
    for cell in load_suite(SUITE).scenarios:
        if cell.backend == "onnxruntime" and cell.model.onnx is None:
            models.setdefault(cell.model.name, (cell.model, make_inputs(cell.model)))
    return models


def suite_seconds() -> float:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.pop("GITHUB_ACTIONS", None)
    with tempfile.TemporaryDirectory() as reports:
        command = [
            sys.executable, "-m", "pytest", "--perfguard", str(SUITE), "-q", "-p",
            "no:cacheprovider", "--perfguard-baseline=none", f"--perfguard-report-dir={reports}",
        ]  # fmt: skip
        started = time.perf_counter()
        subprocess.run(command, cwd=REPO, env=env, check=False, capture_output=True)
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-suite", action="store_true", help="skip the example-suite run")
    args = parser.parse_args()
    models = exported_models()
    old: dict[str, list[float]] = {name: [] for name in models}
    new: dict[str, list[float]] = {name: [] for name in models}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as cache:
        built = {name: load_factory(spec).eval() for name, (spec, _) in models.items()}
        for _ in range(args.rounds):
            for name, (spec, feeds) in models.items():
                started = time.perf_counter()
                old_hit_key(built[name], feeds, spec)
                old[name].append(time.perf_counter() - started)
                started = time.perf_counter()
                path = export_onnx(built[name], feeds, spec, Path(cache))
                new[name].append(time.perf_counter() - started)
                sizes[name] = path.stat().st_size
    total = 0.0
    print(f"{'model':<10} {'ONNX MB':>8} {'old hit s':>10} {'export s':>9} {'ratio':>7}")
    for name in models:
        hit, export = statistics.median(old[name]), statistics.median(new[name])
        total += export - hit
        print(
            f"{name:<10} {sizes[name] / 1e6:>8.1f} {hit:>10.3f} {export:>9.3f} "
            f"{export / hit:>6.1f}x"
        )
    print(f"added per session (every model exported once): {total:.2f} s")
    if not args.no_suite:
        wall = suite_seconds()
        print(f"pytest --perfguard suites/examples.yaml: {wall:.1f} s; the added time is "
              f"{total / wall:.0%} of it")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
