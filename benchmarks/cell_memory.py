"""Peak memory of one cell alone and after ten other cells, gated and not.

``python benchmarks/cell_memory.py`` writes a suite of ten cells (MLPs of different
widths, two of them leaking 100 MiB each into the process that builds them) and a
target cell last, then runs ``pytest --perfguard`` on it four times: the target alone
and after the ten, each with the target gating ``peak_memory`` (a worker process of
its own) and without (the pytest process). Prints the target's ``peak_memory_mib``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn

    _KEPT = []


    def mlp(width=64, leak_mib=0):
        torch.manual_seed(0)
        if leak_mib:
            _KEPT.append(torch.ones(leak_mib * 262144))
        return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 8)).eval()
    """
)


def suite(gate: str) -> str:
    models, cells = [], []
    for i in range(11):
        leak = 100 if i in (3, 7) else 0
        name = f"other{i}" if i < 10 else "target"
        models.append(
            f"  {name}:\n    factory: cells:mlp\n"
            f"    kwargs: {{width: {256 * (i + 1) if i < 10 else 64}, leak_mib: {leak}}}\n"
            "    inputs: {x: {shape: [4, 64], dtype: float32}}\n"
        )
        cells.append(f"  - name: {name}\n    model: {name}\n")
    return (
        "defaults:\n  warmup: {iterations: 5, seconds: 0}\n"
        "  measure: {iterations: 50, seconds: 0}\n  threads: 1\n"
        "models:\n" + "".join(models) + "scenarios:\n" + "".join(cells) + f"    {gate}\n"
    )


def peak(folder: Path, *args: str) -> float:
    for old in (folder / "reports").glob("*/results.json"):
        old.unlink()
    subprocess.run(
        [sys.executable, "-m", "pytest", "--perfguard", "--perfguard-baseline=none",
         "-p", "no:randomly", "-q", *args],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    (path,) = (folder / "reports").glob("*/results.json")
    cells = {s["id"]: s for s in json.loads(path.read_text())["scenarios"]}
    return float(cells["suites/mem.yaml::target"]["peak_memory_mib"])


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="perfguard-cell-memory-"))
    (folder / "suites").mkdir()
    (folder / "suites" / "cells.py").write_text(MODELS)
    print("| target | alone MiB | after 10 cells MiB | difference |")
    print("| --- | --- | --- | --- |")
    for label, gate in (
        ("gates peak_memory (own worker)", 'gate: {peak_memory: "+10%"}'),
        ("no memory gate (pytest process)", ""),
    ):
        (folder / "suites" / "mem.yaml").write_text(suite(gate))
        alone = peak(folder, "-k", "target")
        after = peak(folder)
        print(f"| {label} | {alone:.1f} | {after:.1f} | {(after / alone - 1) * 100:+.1f}% |")


if __name__ == "__main__":
    main()
