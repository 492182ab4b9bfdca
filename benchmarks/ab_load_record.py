"""Record the rounds of load-level A/B cells, to compare ways of judging them offline.

``python benchmarks/ab_load_record.py --out DIR`` runs, for each condition
(concurrency 2 and 4; unchanged and +10%; quiet and busy), cells of
``--rounds`` A/B rounds with no early stop, as ``--perfguard-ab`` measures them
(one worker, slots ``a`` and ``b``, ``perfguard.ab.abrun.run_load_rounds``; ``--levels``
``interleaved``, the default since issue 26, or ``alternating``, the rounds before), and
writes every round's corrected samples of both sides to ``DIR/<n>.npz``. The
model and busy neighbour are those of ``benchmarks/ab_load.py``.
``benchmarks/ab_load_rules.py`` replays the recordings through each candidate rule.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ab_load import BASE_PRODUCTS, MODEL, ROOT, loadavg, neighbour, suite

from perfguard.ab.abrun import Slot, load_round_length, run_load_rounds, worker_env
from perfguard.ab.rounds import RoundPlan
from perfguard.suite.loader import load_suite
from perfguard.worker.client import WorkerProcess


def record(
    folder: Path,
    products: int,
    concurrency: int,
    rounds: int,
    seed: int,
    base: int = BASE_PRODUCTS,
    interleaved: bool = True,
) -> dict:
    path = suite(folder, products, concurrency)
    scenario = load_suite(path).scenarios[0]
    seconds, iterations = load_round_length(scenario)
    plan = RoundPlan.make(q=95.0, limit=0.05, throughput_limit=None, seconds=seconds,
                          iterations=iterations, seed=seed, min_rounds=rounds,
                          max_rounds=rounds, max_seconds=1e9,
                          interleaved=interleaved)  # fmt: skip
    cell = f"cell[c{concurrency}]"
    with WorkerProcess(cwd=ROOT, name="A/B", env=worker_env()) as w:
        for slot, p in (("a", base), ("b", products)):
            w.request(
                "open",
                timeout_s=300,
                slot=slot,
                suite=str(suite(folder, p, concurrency)),
                cell=cell,
                rootdir=str(folder),
                cache_dir=str(ROOT / ".perfguard" / "cache"),
            )
        t0 = time.perf_counter()
        _warm, got, _decisions, _elapsed = run_load_rounds(
            Slot(w, "a"), Slot(w, "b"), scenario, plan, seed=seed
        )
        return {"rounds": got, "seconds": time.perf_counter() - t0, "round_s": seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per", type=int, default=6, help="cells per condition")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--levels", choices=("interleaved", "alternating"), default="interleaved")
    ap.add_argument(
        "--products",
        type=int,
        default=BASE_PRODUCTS,
        help="the model's matrix products per request",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folder = args.out / "suite"
    folder.mkdir(exist_ok=True)
    (folder / "load_model.py").write_text(MODEL)
    conditions = [(c, s, b) for c in args.concurrency for s in (0.0, 0.10) for b in (False, True)
                  for _ in range(args.per)]  # fmt: skip
    random.Random(args.seed).shuffle(conditions)
    for i, (c, slowdown, busy) in enumerate(conditions, 1):
        target = args.out / f"{i:03d}.npz"
        if target.exists():
            continue
        products = round(args.products * (1 + slowdown))
        before = loadavg()
        with neighbour(busy):
            got = record(folder, products, c, args.rounds, args.seed + i, args.products,
                         interleaved=args.levels == "interleaved")  # fmt: skip
        rs = got["rounds"]
        meta = {"concurrency": c, "slowdown": slowdown, "busy": busy, "seconds": got["seconds"],
                "levels": args.levels,
                "round_s": got["round_s"], "a_first": [r.a_first for r in rs],
                "loadavg": [before, loadavg()],
                "dropped": [r.dropped for r in rs]}  # fmt: skip
        arrays = {f"a{j}": r.a.samples_ns for j, r in enumerate(rs)}
        arrays |= {f"b{j}": r.b.samples_ns for j, r in enumerate(rs)}
        tmp = target.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, meta=np.asarray(json.dumps(meta)), **arrays)
        tmp.rename(target)
        print(f"{i}/{len(conditions)} c{c} +{slowdown:.0%} {'busy' if busy else 'quiet'} "
              f"{got['seconds']:.1f}s", file=sys.stderr, flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
