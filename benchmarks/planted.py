"""What the token-figure verdict benchmarks share: the planted conditions, the busy
neighbour, and where a run's raw figures are kept.

``verdicts_generative.py`` (archived gate) and ``verdicts_generative_ab.py`` (same-run
A/B) plant the same slowdowns (a busy-wait of a fraction of the model's median TPOT
before each decode step, or of its median TTFT before each prompt pass) and tally
them the same way; only how one run is measured and judged differs.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: The conditions in the order the tables list them.
CONDITIONS = ("aa", "decode+10%", "decode+20%", "prefill+20%")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Runs per condition, ``--busy``, ``--seed`` and ``--out``."""
    parser.add_argument("--aa", type=int, default=40)
    parser.add_argument("--decode10", type=int, default=20)
    parser.add_argument("--decode20", type=int, default=10)
    parser.add_argument("--prefill20", type=int, default=10)
    parser.add_argument("--busy", action="store_true", help="a busy-loop process beside runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)


def conditions(
    args: argparse.Namespace, ttft_us: float, tpot_us: float
) -> list[tuple[str, float, float]]:
    """``(name, prefill_spin_us, decode_spin_us)`` per run, shuffled with ``--seed``."""
    runs = (
        [("aa", 0.0, 0.0)] * args.aa
        + [("decode+10%", 0.0, round(0.10 * tpot_us, 1))] * args.decode10
        + [("decode+20%", 0.0, round(0.20 * tpot_us, 1))] * args.decode20
        + [("prefill+20%", round(0.20 * ttft_us, 1), 0.0)] * args.prefill20
    )
    random.Random(args.seed).shuffle(runs)
    return runs


@contextmanager
def neighbour(busy: bool) -> Iterator[None]:
    """A busy-loop process beside the block when ``busy`` (the CI runner's normal state)."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        yield
    finally:
        if process is not None:
            process.kill()
            process.wait()


def finish(args: argparse.Namespace, text: str, name: str, raw: list[dict[str, Any]]) -> None:
    """Print the table, write it to ``--out``, and keep every run's raw figures under
    ``.perfguard/benchmarks/`` (to judge again by another rule without measuring)."""
    print(text)
    if args.out:
        args.out.write_text(text)
    kept = ROOT / ".perfguard" / "benchmarks" / f"{name}-raw{'-busy' if args.busy else ''}.json"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(raw))
