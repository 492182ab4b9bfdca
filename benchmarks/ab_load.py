"""Same-run A/B of a cell under load: false alarms and detection, quiet and busy.

``python benchmarks/ab_load.py`` (``--quick``: a smoke test). The cell is a closed
loop of 2 clients (``--concurrency 2 4``: each of those) on a small CPU model whose cost
is a count of 96x96 float32 matrix products per request (100, about 5 ms) (torch, 1
thread: real work that slows down with the host).
Conditions, shuffled together in one schedule:

* **unchanged**: A and B the same model (every regression verdict is a false alarm);
* **+10%** and **+20%**: B does 10% / 20% more products per request;

each **quiet** or **busy**: for a busy cell the script starts one neighbour process
(``python -c "while True: pass"``), kills it (by its pid) when the cell is done.

Each cell is measured as ``--perfguard-ab`` measures it: both cells open in slots
``a`` and ``b`` of one fresh worker process (``perfguard.worker``), warmed up at
their level, then rounds judged by ``perfguard.ab.rounds`` at the default +5% P95 limit
(``perfguard.ab.abrun.load_plan``, ``run_load_rounds``): ``--levels interleaved`` (the
default since issue 26: one level per round, A's and B's requests alternating on every
client) or ``alternating`` (a whole level of each side, one after the other: the rule
before). Then a **plain load run** of B (the ``result`` op: warm-up and one level of
``measure.seconds``, as the plugin measures a load cell outside A/B) gives the time to
compare with (``--plain-every N``: for every N-th cell only). Times exclude the
worker's start-up and the model's first open.

Writes ``benchmarks/ab_load-results.md`` (``--out``; ``--quick``: under
``.perfguard/``), with ``/proc/loadavg`` before and after: the machine is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfguard.ab.abrun import Slot, load_plan, run_load_rounds, worker_env
from perfguard.suite.loader import load_suite
from perfguard.worker.client import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
BASE_PRODUCTS = 100
MODEL = """\
import torch


class Products(torch.nn.Module):
    def __init__(self, products):
        super().__init__()
        self.products = int(products)
        self.w = torch.nn.Parameter(torch.randn(96, 96) / 10, requires_grad=False)

    def forward(self, x):
        for _ in range(self.products):
            x = torch.tanh(x @ self.w)
        return x


def build(products=100):
    torch.manual_seed(0)
    return Products(products).eval()
"""
SUITE = """\
defaults:
  warmup: {{iterations: 20, seconds: 0.5}}
  measure: {{iterations: 300, seconds: 2}}
  threads: 1
models:
  m:
    factory: load_model:build
    kwargs: {{products: {products}}}
    inputs:
      x: {{shape: [96, 96], dtype: float32, seed: 0}}
scenarios:
  - name: cell
    model: m
    load: {{concurrency: {concurrency}}}
"""
CELL = "cell[c2]"


def suite(folder: Path, products: int, concurrency: int = 2) -> Path:
    """The cell's suite at ``products`` matrix products per request (cell
    ``cell[c<concurrency>]``)."""
    path = folder / f"load-{products}-c{concurrency}.yaml"
    if not path.exists():
        path.write_text(SUITE.format(products=products, concurrency=concurrency))
    return path


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "n/a"


@contextlib.contextmanager
def neighbour(busy: bool, settle_s: float = 0.0) -> Iterator[None]:
    """A busy neighbour process for the length of the block (``busy``), else nothing;
    ``settle_s``: let it run that long before the block starts."""
    if not busy:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(settle_s)
        yield
    finally:
        proc.kill()
        proc.wait()


def open_cell(
    w: WorkerProcess, folder: Path, products: int, slot: str, concurrency: int = 2
) -> None:
    w.request("open", timeout_s=300, slot=slot, suite=str(suite(folder, products, concurrency)),
              cell=f"cell[c{concurrency}]", rootdir=str(folder),
              cache_dir=str(ROOT / ".perfguard" / "cache"))  # fmt: skip


def ab(
    folder: Path, products: int, seed: int, concurrency: int = 2, interleaved: bool = True
) -> dict[str, Any]:
    """As ``--perfguard-ab`` does: both cells in slots of one worker, rounds of levels."""
    scenario = load_suite(suite(folder, products, concurrency)).scenarios[0]
    plan = load_plan(scenario, seed, interleaved)
    with WorkerProcess(cwd=ROOT, name="A/B", env=worker_env()) as w:
        open_cell(w, folder, BASE_PRODUCTS, "a", concurrency)
        open_cell(w, folder, products, "b", concurrency)
        t0 = time.perf_counter()
        _warm, rounds, decisions, _elapsed = run_load_rounds(
            Slot(w, "a"), Slot(w, "b"), scenario, plan, seed=seed
        )
        d = decisions["latency"]
        return {
            "verdict": d.verdict.value,
            "ratio": d.ratio,
            "lo": d.lo,
            "rounds": len(rounds),
            "used": d.pairs,
            "seconds": time.perf_counter() - t0,
            "round_s": plan.seconds,
        }


def plain(folder: Path, products: int, concurrency: int = 2) -> float:
    """A plain load run of the cell (warm-up and one level): its seconds."""
    with WorkerProcess(cwd=ROOT, name="plain", env=worker_env()) as w:
        open_cell(w, folder, products, "main", concurrency)
        t0 = time.perf_counter()
        w.request("result", timeout_s=600)
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unchanged", type=int, default=10, help="cells per quiet/busy")
    parser.add_argument("--plus10", type=int, default=10, help="cells per quiet/busy")
    parser.add_argument("--plus20", type=int, default=5, help="cells per quiet/busy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[2])
    parser.add_argument("--levels", choices=("interleaved", "alternating"), default="interleaved")
    parser.add_argument("--plain-every", type=int, default=1, help="a plain run every N cells")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.unchanged, args.plus10, args.plus20 = 1, 1, 0
    out = args.out or (
        ROOT / ".perfguard" / "benchmarks" / "ab_load-quick.md"
        if args.quick
        else ROOT / "benchmarks" / "ab_load-results.md"
    )
    folder = Path(tempfile.mkdtemp(prefix="perfguard-ab-load-bench-"))
    (folder / "load_model.py").write_text(MODEL)
    conditions = [
        (concurrency, slowdown, busy)
        for concurrency in args.concurrency
        for busy in (False, True)
        for slowdown, count in ((0.0, args.unchanged), (0.10, args.plus10), (0.20, args.plus20))
        for _ in range(count)
    ]
    random.Random(args.seed).shuffle(conditions)
    load_before = loadavg()
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:
        for i, (concurrency, slowdown, busy) in enumerate(conditions, 1):
            products = round(BASE_PRODUCTS * (1 + slowdown))
            interleaved = args.levels == "interleaved"
            with neighbour(busy):
                same = ab(folder, products, args.seed + i, concurrency, interleaved)
                plain_s = (
                    plain(folder, products, concurrency) if i % args.plain_every == 0 else None
                )
            rows.append({"concurrency": concurrency, "slowdown": slowdown, "busy": busy,
                         "plain_s": plain_s, **same})  # fmt: skip
            shown = f"{plain_s:.1f} s" if plain_s is not None else "-"
            print(
                f"cell {i}/{len(conditions)} c{concurrency} +{slowdown:.0%} "
                f"{'busy' if busy else 'quiet'}: {same['verdict']} "
                f"(ratio {same['ratio'] or float('nan'):.3f}, {same['rounds']} rounds, "
                f"{same['seconds']:.1f} s vs plain {shown})",
                file=sys.stderr,
                flush=True,
            )
            out.parent.mkdir(parents=True, exist_ok=True)
            out.with_suffix(".partial.md").write_text(
                report(rows, args, load_before, loadavg(), time.perf_counter() - started)
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report(rows, args, load_before, loadavg(), time.perf_counter() - started))
    out.with_suffix(".partial.md").unlink(missing_ok=True)
    print(out.read_text())


def report(rows: list[dict[str, Any]], args: Any, before: str, after: str, elapsed: float) -> str:
    def median(values: list[float]) -> float:
        values = sorted(values)
        return values[len(values) // 2] if values else float("nan")

    concurrencies = " ".join(str(c) for c in args.concurrency)
    lines = [
        "# Same-run A/B of a cell under load: false alarms and detection",
        "",
        f"`python benchmarks/ab_load.py --unchanged {args.unchanged} --plus10 {args.plus10} "
        f"--plus20 {args.plus20} --seed {args.seed} --concurrency {concurrencies} "
        f"--levels {args.levels} --plain-every {args.plain_every}`: {len(rows)} cells, "
        f"{elapsed / 60:.1f} min in all.",
        "",
        f"Cell: closed loop of 2 or 4 clients, a model of {BASE_PRODUCTS} 96x96 matrix "
        f"products per request (torch, 1 thread); +10% / +20%: {round(BASE_PRODUCTS * 1.1)} / "
        f"{round(BASE_PRODUCTS * 1.2)} products. Gate: P95 +5% (corrected), "
        f"rounds of {args.levels} levels judged by `perfguard.ab.rounds`. Busy: one "
        '`python -c "while True: pass"` neighbour for the length of the cell.',
        "",
        f"Machine load (`/proc/loadavg`) before: `{before}`; after: `{after}` "
        "(a 2-core machine shared with other jobs).",
        "",
        "| concurrency | condition | cells | regression verdicts | unchanged | "
        "invalid (undecided) | median rounds | median A/B s | median plain s | A/B / plain |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for concurrency in args.concurrency:
        for busy in (False, True):
            for slowdown in (0.0, 0.10, 0.20):
                group = [
                    r
                    for r in rows
                    if r["slowdown"] == slowdown
                    and r["busy"] == busy
                    and r.get("concurrency", 2) == concurrency
                ]
                if not group:
                    continue
                n = len(group)
                alarms = sum(r["verdict"] == "regression" for r in group)
                calm = sum(r["verdict"] in ("unchanged", "improvement") for r in group)
                undecided = sum(r["verdict"] == "undecided" for r in group)
                what = "false alarms" if slowdown == 0 else "caught"
                ab_s = median([r["seconds"] for r in group])
                plain_s = median([r["plain_s"] for r in group if r["plain_s"] is not None])
                lines.append(
                    f"| {concurrency} | "
                    f"{'+' + format(slowdown, '.0%') if slowdown else 'unchanged'}, "
                    f"{'busy' if busy else 'quiet'} | {n} | {what} {alarms}/{n} | {calm}/{n} | "
                    f"{undecided}/{n} | {median([r['rounds'] for r in group]):.0f} | "
                    f"{ab_s:.1f} | {plain_s:.1f} | {ab_s / plain_s:.1f}x |"
                )
    lines += [
        "",
        "Times: from the A/B cells' warm-up to the verdict, against a plain load run's "
        "warm-up and level (`measure.seconds` = 2 s); worker start-up and model open "
        "excluded from both.",
        "",
        "## Every cell",
        "",
        "| # | c | condition | verdict | ratio | 99% lower bound | rounds | A/B s | plain s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(rows, 1):
        lo = f"{(r['lo'] - 1) * 100:+.1f}%" if r["lo"] is not None else "-"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        plain_s = f"{r['plain_s']:.1f}" if r["plain_s"] is not None else "-"
        lines.append(
            f"| {i} | {r.get('concurrency', 2)} | +{r['slowdown']:.0%} "
            f"{'busy' if r['busy'] else 'quiet'} | {r['verdict']} "
            f"| {ratio} | {lo} | {r['rounds']} | {r['seconds']:.1f} | {plain_s} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
