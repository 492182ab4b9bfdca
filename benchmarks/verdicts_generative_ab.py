"""Same-run A/B on token figures: does it cry wolf, and does it catch a real slowdown?

The example generative cell (``examples/generative/tinylm.yaml``'s model: Llama-shaped,
4 layers, width 256, seeded weights; prompt 48 tokens, 16 new tokens, one thread) is
compared with itself the way ``--perfguard-ab`` does it: one fresh worker process per
run holding side A (unchanged) and side B (the condition), both warmed up, then pairs of
requests in seeded random order, each request's token times kept, until every gated
figure's sequential rule stops (``perfguard.ab.abrun.run_token_pairs``; the gates
``p95``, ``ttft_p95``, ``itl_p95``, ``tpot_p50`` at +5%, judged as
``perfguard.ab.tokenpairs`` judges them). Conditions, shuffled together:

* ``aa``: B unchanged;
* ``decode+10%`` / ``decode+20%``: a busy-wait before every decode step of B of that
  fraction of the model's median TPOT (``perfguard_examples.tinylm``'s
  ``decode_spin_us``), measured once at the start;
* ``prefill+20%``: a busy-wait before every prompt pass of B of 20% of the median TTFT
  (``prefill_spin_us``).

``--busy`` keeps a busy-loop process running beside every run (the CI runner's normal
state). Targets (issue 29): false alarms on ITL P95 of unchanged runs <= 1/40, a +10%
per-token cost caught on ITL P95 >= 19/20, also beside a busy neighbour; a +20% prefill
cost caught on TTFT and not reported on ITL, and a +20% decode cost the converse.

    python benchmarks/verdicts_generative_ab.py --out benchmarks/verdicts-generative-ab-results.md
    python benchmarks/verdicts_generative_ab.py --busy --decode20 0 --prefill20 0 \\
        --out benchmarks/verdicts-generative-ab-busy-results.md

This is a report, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import planted  # noqa: E402  (beside this script)

from perfguard.ab.abrun import Slot, run_token_pairs, worker_env  # noqa: E402
from perfguard.ab.tokenpairs import token_gates  # noqa: E402
from perfguard.suite.loader import load_suite  # noqa: E402
from perfguard.worker.client import WorkerProcess  # noqa: E402

GATES = ("p95", "ttft_p95", "itl_p95", "tpot_p50")
NEW_TOKENS = 16
WARMUP = {"iterations": 5, "seconds": 0.5}
SUITE = """\
models:
  lm:
    factory: perfguard_examples.tinylm:build
    kwargs: {{kind: llama, prefill_spin_us: {prefill!r}, decode_spin_us: {decode!r}}}
scenarios:
  - name: gen
    model: lm
    threads: 1
    generate: {{prompt_tokens: 48, new_tokens: {new}}}
    gate: {{ttft_p95: "+5%", itl_p95: "+5%", tpot_p50: "+5%"}}
"""


def suite(folder: Path, prefill_us: float, decode_us: float) -> Path:
    path = folder / f"gen-{prefill_us:.1f}-{decode_us:.1f}.yaml"
    if not path.exists():
        path.write_text(SUITE.format(prefill=prefill_us, decode=decode_us, new=NEW_TOKENS))
    return path


def open_side(worker: WorkerProcess, slot: str, path: Path, folder: Path) -> None:
    worker.request(
        "open",
        timeout_s=300,
        slot=slot,
        suite=str(path),
        cell="gen[p48]",
        rootdir=str(folder),
        cache_dir=str(ROOT / ".perfguard" / "cache"),
    )
    worker.request("warmup", timeout_s=300, slot=slot, **WARMUP)


def calibrate(folder: Path) -> tuple[float, float]:
    """The unchanged model's median TTFT and TPOT, in us (100 requests)."""
    with WorkerProcess(cwd=ROOT, name="calibrate", env=worker_env()) as w:
        open_side(w, "main", suite(folder, 0.0, 0.0), folder)
        rows = w.request("measure", timeout_s=300, k=100)["tokens"]
    ttft = statistics.median(r[0] for r in rows) / 1e3
    tpot = statistics.median((r[-1] - r[0]) / (len(r) - 1) for r in rows) / 1e3
    return ttft, tpot


def one_run(folder: Path, prefill_us: float, decode_us: float, seed: int) -> dict[str, Any]:
    """Side A unchanged, side B the condition, in one worker, as the plugin does."""
    path_b = suite(folder, prefill_us, decode_us)
    (scenario,) = load_suite(path_b).scenarios
    gates = token_gates(scenario, seed=seed)
    with WorkerProcess(cwd=ROOT, name="A/B", env=worker_env()) as w:
        open_side(w, "a", suite(folder, 0.0, 0.0), folder)
        open_side(w, "b", path_b, folder)
        t0 = time.perf_counter()
        pairs, looks, _elapsed = run_token_pairs(
            Slot(w, "a"), Slot(w, "b"), gates, NEW_TOKENS, seed=seed
        )
        measure_s = time.perf_counter() - t0
    return {
        "pairs": len(pairs),
        "measure_s": measure_s,
        "decisions": {m: d.to_dict() for m, d in looks.decisions.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    planted.add_arguments(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="pg-gen-ab-"))
    ttft_us, tpot_us = calibrate(folder)
    conditions = planted.conditions(args, ttft_us, tpot_us)
    tallies: dict[str, Counter[str]] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    raw: list[dict[str, Any]] = []
    for i, (name, prefill_us, decode_us) in enumerate(conditions):
        with planted.neighbour(args.busy):
            run = one_run(folder, prefill_us, decode_us, seed=args.seed + i)
        raw.append({"condition": name, **run})
        runs.setdefault(name, []).append(run)
        counter = tallies.setdefault(name, Counter())
        verdicts = {m: d["verdict"] for m, d in run["decisions"].items()}
        for gate, v in verdicts.items():
            counter[f"{gate}:{v}"] += 1
        ratios = {m: round(d["ratio"], 3) for m, d in run["decisions"].items() if d["ratio"]}
        print(
            f"[{i + 1}/{len(conditions)}] {name}: {verdicts} ratios {ratios}, "
            f"{run['pairs']} pairs, {run['measure_s']:.1f} s",
            file=sys.stderr,
        )
    elapsed = time.monotonic() - started

    lines = [
        "# Same-run A/B on token figures: false alarms and detection",
        "",
        f"`python benchmarks/verdicts_generative_ab.py {' '.join(sys.argv[1:])}`"
        f" ({'busy-loop process beside every run' if args.busy else 'quiet machine'}; "
        f"{len(conditions)} runs in {elapsed / 60:.1f} min, 2-core VM)",
        "",
        f"Model: TTFT P50 {ttft_us / 1e3:.3f} ms, TPOT P50 {tpot_us / 1e3:.3f} ms (prompt 48, "
        f"{NEW_TOKENS} new tokens, 1 thread). Each cell: runs judged `regression` (of the "
        "runs); every gate at +5% (P95 is end to end); a run stops when every gate's rule "
        "has stopped.",
        "",
        "| condition | runs | " + " | ".join(GATES) + " | pairs (median) | measuring s (median) |",
        "|---|---|" + "---|" * len(GATES) + "---|---|",
    ]
    for name in planted.CONDITIONS:
        if name not in tallies:
            continue
        done = runs[name]
        cells = [f"{tallies[name][f'{gate}:regression']}/{len(done)}" for gate in GATES]
        pairs = statistics.median(r["pairs"] for r in done)
        seconds = statistics.median(r["measure_s"] for r in done)
        lines.append(
            f"| {name} | {len(done)} | " + " | ".join(cells) + f" | {pairs:g} | {seconds:.1f} |"
        )
    lines += ["", "Median B/A ratio per gate (min .. max):", ""]
    for name in planted.CONDITIONS:
        if name not in runs:
            continue
        parts = []
        for gate in GATES:
            values = [r["decisions"][gate]["ratio"] for r in runs[name]]
            values = [v for v in values if v]
            if values:
                parts.append(
                    f"{gate} {statistics.median(values):.3f} ({min(values):.3f} .. "
                    f"{max(values):.3f})"
                )
        lines.append(f"- {name}: " + "; ".join(parts))
    text = "\n".join(lines) + "\n"
    planted.finish(args, text, "verdicts-generative-ab", raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
