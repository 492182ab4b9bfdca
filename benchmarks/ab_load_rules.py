"""Replay recorded load-level A/B rounds through candidate rules, side by side.

``python benchmarks/ab_load_rules.py DIR`` reads the recordings of
``benchmarks/ab_load_record.py`` (every round of each cell, no early stop) and
applies each rule as ``perfguard.ab.rounds.run_rounds`` would have, look by look
(from 10 usable rounds, every 2, up to 40): the same rounds, so the rules differ
only in how they judge them. Rules:

* ``median``: the rule before issue 26, the median of each round's P95 figure
  (``decide`` with ``q=50`` on per-round figures);
* ``pooled``: P95 of every request of the rounds so far, bounded by the cluster
  bootstrap over rounds (``decide_pooled``);
* ``pooled x2``: the same on rounds twice as long (two recorded rounds merged,
  5 to 20 of them): what longer rounds would give at the same cost;
* ``median /2`` and ``pooled /2``: the rules on rounds half as long (each recorded
  round cut in two by send order, a side's samples being in send order: 10 to 40 of
  the halves, at half the measuring time).

A recording of interleaved levels (``ab_load_record.py --levels interleaved``) replays
the same way: a round is then one level of both sides.

Prints a Markdown table: per concurrency, condition and rule, the regression
verdicts, the median rounds to the verdict and the median measuring seconds; then,
per concurrency and condition, what the rounds themselves show whatever the rule: the
spread of the rounds' P95 ratios (standard deviation of their logarithm, the median
over cells) and each side's P50 and P95 over all of a cell's rounds (B/A, the median
over cells, and the cells whose all-rounds P95 moved less than the +5% limit).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfguard.ab.paired import StoppingRule, decide, decide_pooled
from perfguard.core.stats import percentile


def load(path: Path) -> tuple[dict[str, Any], list[np.ndarray], list[np.ndarray]]:
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        n = len(meta["a_first"])
        return meta, [z[f"a{i}"] for i in range(n)], [z[f"b{i}"] for i in range(n)]


def rule(min_rounds: int, max_rounds: int, q: float) -> StoppingRule:
    return StoppingRule(limit=0.05, q=q, min_pairs=min_rounds, max_pairs=max_rounds,
                        check_every=2 if max_rounds > 20 else 1, max_seconds=1e9,
                        unit="rounds")  # fmt: skip


def halves(rounds: list[np.ndarray]) -> list[np.ndarray]:
    """Each round cut in two by send order (its first and second half of requests)."""
    return [part for x in rounds for part in (x[: x.size // 2], x[x.size // 2 :])]


def replay(kind: str, a: list[np.ndarray], b: list[np.ndarray]) -> tuple[str, int, float | None]:
    if kind.endswith("/2"):
        a, b = halves(a), halves(b)
    if kind == "pooled x2":
        a = [np.concatenate(a[i : i + 2]) for i in range(0, len(a) - 1, 2)]
        b = [np.concatenate(b[i : i + 2]) for i in range(0, len(b) - 1, 2)]
    lo, hi = (5, 20) if kind == "pooled x2" else (10, 40)
    r = rule(lo, hi, 50.0 if kind.startswith("median") else 95.0)
    n = lo
    while True:
        n = min(n, len(a))
        # a recording shorter than the round cap ends the cell there
        cap = "the recording ends" if n >= len(a) else None
        if kind.startswith("median"):
            fa = [percentile(x, 95.0) for x in a[:n]]
            fb = [percentile(x, 95.0) for x in b[:n]]
            d = decide(r, fa, fb, 0.0, cap=cap)
        else:
            d = decide_pooled(r, a[:n], b[:n], 0.0, cap=cap)
        if d.stop:
            scale = 2 if kind == "pooled x2" else 0.5 if kind.endswith("/2") else 1
            return d.verdict.value, round(n * scale), d.ratio
        n += r.check_every


def main() -> None:
    folder = Path(sys.argv[1])
    rows: dict[tuple[int, float, bool, str], list[tuple[str, int, float | None, float]]]
    rows = defaultdict(list)
    for path in sorted(folder.glob("[0-9]*.npz")):
        meta, a, b = load(path)
        per_round_s = meta["seconds"] / len(a)
        for kind in ("median", "pooled", "pooled x2", "median /2", "pooled /2"):
            verdict, used, ratio = replay(kind, a, b)
            key = (meta["concurrency"], meta["slowdown"], meta["busy"], kind)
            rows[key].append((verdict, used, ratio, used * per_round_s))
    print("| concurrency | condition | rule | cells | regression verdicts | median rounds "
          "| median s | median ratio |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (c, slowdown, busy, kind), got in sorted(rows.items()):
        n = len(got)
        flagged = sum(v == "regression" for v, *_ in got)
        what = "false alarms" if slowdown == 0 else "caught"
        rounds = float(np.median([u for _, u, _, _ in got]))
        secs = float(np.median([s for *_, s in got]))
        ratio = float(np.median([r for _, _, r, _ in got if r is not None]))
        cond = f"{'+' + format(slowdown, '.0%') if slowdown else 'unchanged'}, " + (
            "busy" if busy else "quiet"
        )
        print(f"| {c} | {cond} | {kind} | {n} | {what} {flagged}/{n} | {rounds:.0f} "
              f"| {secs:.1f} | {ratio:.3f} |")  # fmt: skip

    print()
    print("| concurrency | condition | cells | round P95 ratio spread (sd of log) | "
          "all-rounds P50 B/A | all-rounds P95 B/A | cells with P95 B/A < 1.05 |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    spread: dict[tuple[int, float, bool], list[tuple[float, float, float]]] = defaultdict(list)
    for path in sorted(folder.glob("[0-9]*.npz")):
        meta, a, b = load(path)
        ratios = [percentile(y, 95.0) / percentile(x, 95.0) for x, y in zip(a, b, strict=True)]
        whole_a, whole_b = np.concatenate(a), np.concatenate(b)
        p50 = percentile(whole_b, 50.0) / percentile(whole_a, 50.0)
        p95 = percentile(whole_b, 95.0) / percentile(whole_a, 95.0)
        key3 = (meta["concurrency"], meta["slowdown"], meta["busy"])
        spread[key3].append((float(np.std(np.log(ratios))), p50, p95))
    for (c, slowdown, busy), got in sorted(spread.items()):
        cond = f"{'+' + format(slowdown, '.0%') if slowdown else 'unchanged'}, " + (
            "busy" if busy else "quiet"
        )
        sd = float(np.median([g[0] for g in got]))
        p50 = float(np.median([g[1] for g in got]))
        p95 = float(np.median([g[2] for g in got]))
        under = sum(g[2] < 1.05 for g in got) if slowdown else "-"
        print(f"| {c} | {cond} | {len(got)} | {sd:.3f} | {p50:.3f} | {p95:.3f} | {under} |")


if __name__ == "__main__":
    main()
