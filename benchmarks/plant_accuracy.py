"""Does a planted slowdown (``perfguard.measure.plant``) add its stated fraction, on a
quiet machine and beside a busy neighbour?

The example CNN (torch, one thread, batch 1, 3x64x64) serves requests in pairs, plain
and planted in a random order per pair (as same-run A/B interleaves them); the table
gives the ratio of the planted requests' P50 and P95 to the plain ones'. A plant that
added a fixed delay would shrink, in relative terms, on the busy machine, where each
request is slower; one proportional to each request's own time should not.

    python benchmarks/plant_accuracy.py [--pairs 400] [--seed 0] [--out FILE]

Writes ``benchmarks/plant-accuracy-results.md`` with ``--out``. A report, not a test.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_load import neighbour

from perfguard.measure.plant import Plant

FRACTIONS = (0.02, 0.05, 0.10, 0.20)


def _model() -> tuple[object, object]:
    import torch

    from perfguard_examples.convnet import build

    torch.set_num_threads(1)
    model = build()
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    return model, x


def _ratios(fraction: float, pairs: int, seed: int) -> tuple[float, float]:
    import torch

    model, x = _model()

    def request() -> object:
        with torch.inference_mode():
            return model(x)  # type: ignore[operator]

    planted = Plant(fraction).wrap(request, lambda: None)
    for _ in range(30):  # warm-up
        request()
    rng = random.Random(seed)
    clock = time.perf_counter_ns
    plain_ns, planted_ns = [], []
    gc.disable()
    try:
        for _ in range(pairs):
            order = [(request, plain_ns), (planted, planted_ns)]
            rng.shuffle(order)
            for call, into in order:
                t0 = clock()
                call()
                into.append(clock() - t0)
    finally:
        gc.enable()
    a, b = np.asarray(plain_ns), np.asarray(planted_ns)
    return (
        float(np.percentile(b, 50) / np.percentile(a, 50)),
        float(np.percentile(b, 95) / np.percentile(a, 95)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    started = time.monotonic()
    for fraction in FRACTIONS:
        cells = [f"+{fraction:.0%}"]
        for busy in (False, True):
            with neighbour(busy, settle_s=0.5 if busy else 0.0):
                p50, p95 = _ratios(fraction, args.pairs, args.seed)
            cells += [f"{p50:.3f}", f"{p95:.3f}"]
        rows.append("| " + " | ".join(cells) + " |")
    text = "\n".join(
        [
            "# A planted slowdown adds its stated fraction",
            "",
            f"`python benchmarks/plant_accuracy.py --pairs {args.pairs}` (example CNN, torch, "
            f'1 thread; {time.monotonic() - started:.0f} s). *Busy*: a `python -c "while '
            'True: pass"` neighbour on one of the 2 cores. Ratio of planted to plain '
            "requests, interleaved in random order per pair.",
            "",
            "| planted | quiet P50 ratio | quiet P95 ratio | busy P50 ratio | busy P95 ratio |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
