"""Same-run A/B beside the archived-baseline gate and pytest-benchmark, in one run.

``python benchmarks/verdicts.py --mode ab`` (or this file directly). The model is
the example CNN (``perfguard_examples.convnet``, batch 4 of 64x64 RGB, torch,
2 threads) with an injected slowdown (``benchmarks/ab_model.py``: a busy-wait of
a fraction of the baseline's median latency after every forward pass). Every
measurement goes through perfguard's own worker processes
(``perfguard.worker``), fresh ones per run, as the plugin does.

* Baseline: ``--baseline-launches`` plain launches of the unchanged model
  (warm-up, then ``--requests`` timed requests, twice: the plugin's confirmation
  round). The first is pytest-benchmark's saved baseline; all of them pooled,
  with their P95 spread as the noise floor, are the archived gate's baseline.
* Conditions, shuffled together so a slow spell of the host hits each alike:
  ``--aa`` unchanged runs and ``--ab`` runs each at +5%, +10% and +20%.
* Each run is measured twice: (1) **same-run A/B**: workers A (unchanged) and B
  (this condition), warmed up, alternating single requests in random order
  under ``perfguard.ab.paired``'s stopping rule (``perfguard.ab.abrun.run_pairs``) at the
  default +5% limit, and at +2% for the +5% condition as the issue asks (at a
  +5% limit a true +5% sits on the boundary); (2) a **plain run** of B, judged by
  pytest-benchmark's ``mean:5%`` against the single baseline and by perfguard's
  archived gate (P95 bound rule, pooled baseline, noise floor, confirmation).
* Time: the measuring time of each A/B run (settling pairs included, worker
  start-up and warm-up excluded, as for the plain run) against the plain run's.

    python benchmarks/verdicts.py --mode ab          # ~20 min on an idle 2-core machine
    python benchmarks/verdicts.py --mode ab --quick  # smoke test

Writes ``benchmarks/verdicts-ab-results.md`` (``--quick``: under ``.perfguard/``).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfguard.ab.abrun import Slot, run_pairs, worker_env
from perfguard.ab.paired import StoppingRule
from perfguard.core.policy import GateSpec
from perfguard.core.stats import percentile
from perfguard.judge.compare import compare_scenario, confirm, needs_confirmation
from perfguard.judge.verdict import ScenarioVerdict, VerdictKind
from perfguard.records.figures import summarize
from perfguard.records.results import ScenarioResult
from perfguard.worker.client import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
GATES = (GateSpec(metric="p95", limit=0.05),)
SLOWDOWNS = (0.05, 0.10, 0.20)
WARMUP = {"iterations": 20, "seconds": 0.5}
SUITE = """\
models:
  cnn:
    factory: ab_model:build
    kwargs: {{{kwargs}}}
    inputs:
      image: {{shape: [4, 3, 64, 64], dtype: float32, seed: 0}}
scenarios:
  - name: cnn
    model: cnn
    threads: {threads}
"""


def suite(folder: Path, spin_ns: int, spin_frac: float = 0.0, threads: int = 2) -> Path:
    """The benchmark suite with a fixed (``spin_ns``) or proportional (``spin_frac``)
    slowdown, at ``threads`` intra-op threads."""
    path = folder / f"cnn-{spin_ns}-{spin_frac:g}-t{threads}.yaml"
    if not path.exists():
        kwargs = f"spin_ns: {spin_ns}, spin_frac: {spin_frac!r}"
        path.write_text(SUITE.format(kwargs=kwargs, threads=threads))
    return path


@contextlib.contextmanager
def worker(folder: Path, spin_ns: int, name: str) -> Iterator[WorkerProcess]:
    """A fresh worker process with the cell open and warmed up (a plain run)."""
    with WorkerProcess(cwd=ROOT, name=name) as w:
        w.request("open", timeout_s=300, suite=str(suite(folder, spin_ns)), cell="cnn",
                  rootdir=str(folder), cache_dir=str(ROOT / ".perfguard" / "cache"))  # fmt: skip
        w.request("warmup", timeout_s=300, **WARMUP)
        yield w


def plain(folder: Path, spin_ns: int, requests: int) -> dict[str, Any]:
    """A fresh worker: warm-up, then two rounds of ``requests`` (confirmation)."""
    with worker(folder, spin_ns, "plain") as w:
        t0 = time.perf_counter()
        rounds = [w.request("measure", timeout_s=300, k=requests)["samples_ns"] for _ in "ab"]
        return {"rounds": rounds, "measure_s": (time.perf_counter() - t0) / 2}


def ab(
    folder: Path, spin_ns: int, limit: float, seed: int, spin_frac: float = 0.0, threads: int = 2
) -> dict[str, Any]:
    """As the plugin does: both cells in slots of one worker process, interleaved."""
    with WorkerProcess(cwd=ROOT, name="A/B", env=worker_env()) as w:
        for slot, spin, frac in (("a", 0, 0.0), ("b", spin_ns, spin_frac)):
            path = suite(folder, spin, frac, threads)
            w.request("open", timeout_s=300, slot=slot, suite=str(path),
                      cell="cnn", rootdir=str(folder),
                      cache_dir=str(ROOT / ".perfguard" / "cache"))  # fmt: skip
            w.request("warmup", timeout_s=300, slot=slot, **WARMUP)
        a, b = Slot(w, "a"), Slot(w, "b")
        t0 = time.perf_counter()
        a_ns, _b_ns, decision, _elapsed = run_pairs(a, b, StoppingRule(limit=limit), seed=seed)
        return {
            "decision": decision.to_dict(),
            "pairs": int(a_ns.size),
            "measure_s": time.perf_counter() - t0,
        }


def result(samples: list[int]) -> ScenarioResult:
    s = tuple(int(x) for x in samples)
    return ScenarioResult(
        id="bench::cnn", suite="bench", name="cnn", backend="torch", device="cpu",
        precision="fp32", latency_ns=summarize(s), samples_ns=s,
    )  # fmt: skip


def p95(samples: list[int]) -> float:
    return float(percentile(np.asarray(samples, dtype=np.float64), 95.0))


def archived(run: dict[str, Any], pooled: ScenarioResult, history: list[float]) -> str:
    def cmp(samples: list[int]) -> ScenarioVerdict:
        return compare_scenario(
            result(samples), pooled, GATES, baseline_commit="bench", history=history,
            normalise=False,
        )  # fmt: skip

    first = cmp(run["rounds"][0])
    final = confirm([first, cmp(run["rounds"][1])]) if needs_confirmation(first) else first
    return "alarm" if final.failed else "invalid" if final.verdict == VerdictKind.INVALID else "ok"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--aa", type=int, default=40)
    parser.add_argument("--ab", type=int, default=20)
    parser.add_argument("--requests", type=int, default=None, help="default: >= 150 and 2 s")
    parser.add_argument("--baseline-launches", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.aa, args.ab, args.baseline_launches = 2, 1, 2
    out = args.out or (
        ROOT / ".perfguard" / "benchmarks" / "verdicts-ab-quick.md"
        if args.quick
        else ROOT / "benchmarks" / "verdicts-ab-results.md"
    )
    folder = Path(tempfile.mkdtemp(prefix="perfguard-ab-bench-"))
    shutil.copy(Path(__file__).with_name("ab_model.py"), folder / "ab_model.py")
    started = time.perf_counter()
    try:
        # One plain run measures what the plugin's example default does
        # (`measure: {iterations: 150, seconds: 2}`): at least 150 requests and 2 s.
        probe = plain(folder, 0, 50)
        median_ns = float(np.median(probe["rounds"][0]))
        if args.requests is None:
            args.requests = max(150, int(2e9 / median_ns))
        base = [plain(folder, 0, args.requests) for _ in range(args.baseline_launches)]
        single = result(base[0]["rounds"][0])
        pooled = result([s for launch in base for s in launch["rounds"][0]])
        history = [p95(launch["rounds"][0]) for launch in base]
        conditions = [0.0] * args.aa + [s for s in SLOWDOWNS for _ in range(args.ab)]
        random.Random(args.seed).shuffle(conditions)
        rows = []
        for i, slowdown in enumerate(conditions, 1):
            spin = int(slowdown * median_ns)
            limit = 0.02 if slowdown == 0.05 else 0.05
            same = ab(folder, spin, limit, seed=args.seed + i)
            run = plain(folder, spin, args.requests)
            cur = run["rounds"][0]
            rows.append(
                {
                    "slowdown": slowdown,
                    "ab": "alarm" if same["decision"]["verdict"] == "regression" else "ok",
                    "ab_ratio": same["decision"]["ratio"],
                    "ab_pairs": same["pairs"],
                    "ab_s": same["measure_s"],
                    "plain_s": run["measure_s"],
                    "archived": archived(run, pooled, history),
                    "pytest_benchmark": "alarm"
                    if np.mean(cur) > 1.05 * np.mean(single.samples_ns)
                    else "ok",
                }
            )
            rows[-1]["line"] = (
                f"run {i}/{len(conditions)} +{slowdown:.0%}: A/B {rows[-1]['ab']} "
                f"(ratio {same['decision']['ratio']:.3f}, {same['pairs']} pairs, "
                f"{same['measure_s']:.1f} s vs plain {run['measure_s']:.1f} s), "
                f"archived {rows[-1]['archived']}, "
                f"pytest-benchmark {rows[-1]['pytest_benchmark']}"
            )
            print(rows[-1]["line"], file=sys.stderr, flush=True)
            # Partial results survive an interrupted run.
            out.parent.mkdir(parents=True, exist_ok=True)
            out.with_suffix(".partial.md").write_text(
                report(rows, median_ns, time.perf_counter() - started, args)
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report(rows, median_ns, time.perf_counter() - started, args))
    out.with_suffix(".partial.md").unlink(missing_ok=True)
    print(out.read_text())


def report(rows: list[dict[str, Any]], median_ns: float, elapsed: float, args: Any) -> str:
    groups = [0.0, *SLOWDOWNS]

    def count(key: str, g: float) -> str:
        sel = [r for r in rows if r["slowdown"] == g]
        alarms = sum(r[key] == "alarm" for r in sel)
        invalid = sum(r[key] == "invalid" for r in sel)
        return f"{alarms}/{len(sel)}" + (f" (+{invalid} inv)" if invalid else "")

    per_run = [r["ab_s"] / r["plain_s"] for r in rows]
    ratio = statistics.median(per_run)
    mean_ratio = sum(r["ab_s"] for r in rows) / sum(r["plain_s"] for r in rows)
    lines = [
        "# Same-run A/B vs archived gate vs pytest-benchmark",
        "",
        f"`python benchmarks/verdicts.py --mode ab` (example CNN, torch, 2 threads; median "
        f"latency {median_ns / 1e6:.2f} ms; {args.requests} requests per plain round; "
        f"{args.baseline_launches} baseline launches; total {elapsed / 60:.1f} min).",
        "",
        "| variant | A/A false alarms | +5% | +10% | +20% |",
        "|---|---|---|---|---|",
        "| pytest-benchmark `mean:5%` (single baseline) | "
        + " | ".join(count("pytest_benchmark", g) for g in groups)
        + " |",
        "| archived gate (P95 bound rule, pooled baseline, noise floor, confirmation) | "
        + " | ".join(count("archived", g) for g in groups)
        + " |",
        "| **same-run A/B** (limit +5%; +2% for the +5% column) | "
        + " | ".join(count("ab", g) for g in groups)
        + " |",
        "",
        f"A/B measuring time vs one plain run: median over runs **{ratio:.2f}x**, "
        f"total over all runs **{mean_ratio:.2f}x**, worst run {max(per_run):.1f}x; "
        f"A/B pairs used (median): {statistics.median(r['ab_pairs'] for r in rows):.0f}.",
        "",
        "Per condition, A/B ratio of P95s (median, min, max):",
        "",
    ]
    for g in groups:
        sel = [r["ab_ratio"] for r in rows if r["slowdown"] == g and r["ab_ratio"] is not None]
        if sel:
            times = [r["ab_s"] / r["plain_s"] for r in rows if r["slowdown"] == g]
            lines.append(
                f"- +{g:.0%}: {statistics.median(sel):.3f} ({min(sel):.3f} .. {max(sel):.3f}); "
                f"time vs plain: median {statistics.median(times):.2f}x"
            )
    lines += ["", "Every run, in the order measured:", "", "```", *(r["line"] for r in rows), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
