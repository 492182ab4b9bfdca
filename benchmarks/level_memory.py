"""Memory per added stream over load levels, against what each request holds.

``python benchmarks/level_memory.py`` writes a model whose every request in flight
holds a planted buffer (``HOLD`` MiB, touched, freed when it returns) and whose open
passes through 200 MiB more than serving ever holds, then runs ``pytest --perfguard``
on a ``concurrency: [1, 2, 4]`` matrix of it for each planted size, the cells gating
``peak_memory`` (each level in a worker of its own) and not (the pytest process).
Prints, per run, each level's held memory (its peak above the idle model), the
report's slope (``perfguard.report.tables.memory_growth``), and beside it the slope of
the cells' own ``peak_memory_mib`` (the whole cell from the model's open: what a
figure without a per-level high-water mark would give).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

MODEL = textwrap.dedent(
    """
    import time

    import numpy as np
    import torch


    class Holding(torch.nn.Module):
        def __init__(self, hold_mib):
            super().__init__()
            self.hold = max(1, hold_mib * 2**20)
            self.lin = torch.nn.Linear(8, 4)

        def forward(self, x):
            held = np.ones(self.hold, dtype=np.uint8)
            time.sleep(0.02)
            return self.lin(x) + float(held[-1])


    def build(hold_mib=16):
        scratch = np.ones(200 * 2**20, dtype=np.uint8)  # the open's transient
        del scratch
        torch.manual_seed(0)
        return Holding(hold_mib).eval()
    """
)

HOLDS = (0, 16, 48)
LEVELS = (1, 2, 4)


def suite(hold: int, gate: str) -> str:
    return textwrap.dedent(
        f"""\
        defaults:
          warmup: {{iterations: 8, seconds: 0}}
          measure: {{iterations: 90, seconds: 0}}
          threads: 1
        models:
          holding:
            factory: streams:build
            kwargs: {{hold_mib: {hold}}}
            inputs: {{x: {{shape: [1, 8], dtype: float32}}}}
        scenarios:
          - name: held
            model: holding
            load: {{concurrency: [{", ".join(str(c) for c in LEVELS)}]}}
            {gate}
        """
    )


def run(folder: Path) -> dict[int, dict]:
    for old in (folder / "reports").glob("*/results.json"):
        old.unlink()
    subprocess.run(
        [sys.executable, "-m", "pytest", "--perfguard", "--perfguard-baseline=none",
         "-p", "no:randomly", "-q"],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    (path,) = (folder / "reports").glob("*/results.json")
    cells = json.loads(path.read_text())["scenarios"]
    return {int(c["load"]["concurrency"]): c for c in cells}


def slope(points: dict[int, float]) -> float:
    xs = sorted(points)
    return float(np.polyfit(xs, [points[x] for x in xs], 1)[0])


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="perfguard-level-memory-"))
    (folder / "suites").mkdir()
    (folder / "suites" / "streams.py").write_text(MODEL)
    print(
        "| planted MiB per request | measured in | held at c=1 / 2 / 4 MiB "
        "| per added client (report) | slope of the cells' peak_memory_mib |"
    )
    print("| --- | --- | --- | --- | --- |")
    for gate, where in (('gate: {peak_memory: "+50%"}', "own worker"), ("", "pytest process")):
        for hold in HOLDS:
            (folder / "suites" / "load.yaml").write_text(suite(hold, gate))
            cells = run(folder)
            held = {
                c: cell["load"]["memory"]["level_peak_mib"] - cell["load"]["memory"]["idle_mib"]
                for c, cell in cells.items()
            }
            peaks = {c: float(cell["peak_memory_mib"]) for c, cell in cells.items()}
            shown = " / ".join(f"{held[c]:.1f}" for c in LEVELS)
            print(
                f"| {hold} | {where} | {shown} | {slope(held):+.1f} | {slope(peaks):+.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
