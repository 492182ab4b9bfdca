"""Does a planted slowdown add its stated fraction to a cell under load and, planted per
token, to a generative cell, on a quiet machine and beside a busy neighbour?

``benchmarks/plant_accuracy.py`` checks the plant in single requests; a calibration also
plants every load client's requests (a wait that sleeps, letting go of the GIL, then
spins its last 200 us) and every decoding step of a generation (``Plant.stamps``). Here
whole measurements of two example cells alternate, plain and planted (as an archived
calibration makes them), and the table gives the planted/plain ratio of their medians
(whole measurements differ from run to run by far more than the plant: the ratios are
the median over the rounds) and, for the generation, each token's wait against that
step's own time, which is the plant's size exactly:

- ``convnet-load[c2]`` of ``suites/examples.yaml`` (ONNX Runtime, one thread, two
  closed-loop clients): the P50 latency under load;
- ``tinyllama[torch-fp32-p48]`` of ``examples/generative/tinylm.yaml`` (48 prompt, 32 new
  tokens): P50 time to first token, inter-token latency and request.

    python benchmarks/plant_cells.py [--rounds 4] [--fraction 0.1] [--out FILE]

A report, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_load import neighbour

from perfguard.core.scenario import Scenario
from perfguard.measure.opencell import RunContext
from perfguard.measure.plant import Plant
from perfguard.measure.runner import ScenarioRun
from perfguard.records.results import ScenarioResult
from perfguard.suite.loader import load_suite

ROOT = Path(__file__).resolve().parents[1]
CELLS = (
    ("suites/examples.yaml", "convnet-load[c2]"),
    ("examples/generative/tinylm.yaml", "tinyllama[torch-fp32-p48]"),
)


def _cell(suite: str, name: str) -> Scenario:
    return next(sc for sc in load_suite(ROOT / suite).scenarios if sc.item_name == name)


def _figures(result: ScenarioResult) -> dict[str, float]:
    if result.tokens is not None:
        t = result.tokens
        figures = {"TTFT P50": t.ttft_ns.p50}
        if t.itl_ns is not None:
            figures["ITL P50"] = t.itl_ns.p50
        if result.latency_ns is not None:
            figures["request P50"] = result.latency_ns.p50
        return figures
    assert result.latency_ns is not None
    return {"latency under load P50": result.latency_ns.p50}


def _measure(scenario: Scenario, plant: Plant | None) -> dict[str, float]:
    ctx = RunContext(ROOT, ROOT / ".perfguard" / "cache")
    with ScenarioRun(scenario, ctx, plant=plant) as run:
        figures = _figures(run.measure())
        if plant is not None and run.requests is not None:
            # Each token's wait against that step's own time (its interval less the wait).
            waits = plant.take()
            own = []
            for start, stamps in run.requests.rows:
                previous = start
                for at in stamps:
                    own.append(at - previous)
                    previous = at
            pairs = list(zip(waits[-len(own) :], own[-len(waits) :], strict=True))
            figures["wait / own step"] = statistics.median(w / (o - w) for w, o in pairs)
        return figures


def _ratios(scenario: Scenario, fraction: float, rounds: int) -> dict[str, float]:
    """Median over ``rounds`` of planted/plain, each round both measured (order
    alternating by round)."""
    per_round: dict[str, list[float]] = {}
    for i in range(rounds):
        order = (None, Plant(fraction)) if i % 2 == 0 else (Plant(fraction), None)
        measured = {p is not None: _measure(scenario, p) for p in order}
        for key, planted in measured[True].items():
            plain = measured[False].get(key)
            value = planted / plain if plain is not None else planted
            per_round.setdefault(key, []).append(value)
    return {key: statistics.median(values) for key, values in per_round.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = [
        "# A planted slowdown in cells under load and in generation",
        "",
        f"`python benchmarks/plant_cells.py --rounds {args.rounds} --fraction {args.fraction}`"
        f" (planted +{args.fraction:.0%}; each ratio the median over {args.rounds} rounds "
        'of planted/plain whole measurements). *Busy*: a `python -c "while True: pass"` '
        "neighbour on one of the 2 cores.",
        "",
        "| cell | figure | quiet | busy |",
        "|---|---|---|---|",
    ]
    for suite, name in CELLS:
        scenario = _cell(suite, name)
        quiet = _ratios(scenario, args.fraction, args.rounds)
        with neighbour(True, settle_s=1.0):
            busy = _ratios(scenario, args.fraction, args.rounds)
        for key in quiet:
            lines.append(f"| `{name}` | {key} | {quiet[key]:.3f} | {busy[key]:.3f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
