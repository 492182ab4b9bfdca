"""Which parts of perfguard's verdict rule earn their keep, measured on a real model.

all-MiniLM-L6-v2 (exported to ONNX, onnxruntime CPU, batch 1, seq 64, 2 threads)
is measured in a fresh process per run, exactly as the plugin would: canary
block, ``timing.measure`` (warm-up 10 / 0.5 s, then N timed requests), canary
block; then a second round in the same process, which is what the plugin's
confirmation re-measurement does.

* Baseline: ``--baseline-launches`` launches, recorded first (as an archived
  baseline would be). The first launch alone is the "single" baseline (what
  pytest-benchmark saves); all of them pooled (samples concatenated, median
  canary, as ``perfguard.baseline.store`` pools launches) are the "pooled" one, and
  their normalised P95s stand in for the stored-commit history of the noise floor.
* A/A: ``--aa`` unchanged runs. A/B: ``--ab`` runs each with an injected
  slowdown of +5%, +10%, +20%: after every model call the worker busy-waits on
  ``perf_counter_ns`` for that fraction of the baseline's median latency (a spin
  slows down with the host, like real extra work). All conditions are shuffled
  together, so a slow spell of the host hits each alike.

Every run is judged by each variant on the same samples:

  a  pytest-benchmark ``mean:5%``  (mean_cur > 1.05 * mean_base, single baseline)
  b  raw P95 point estimate > +5%  (single baseline)
  c  perfguard bound rule, raw     (point > limit AND 99% lower bound > 1)
  d  c + machine-speed (canary) normalisation
  e  d + confirmation: a regression must repeat in round 2
  f0 e against the pooled baseline (no noise floor)
  f  f0 + noise floor (k=2) learned from the baseline launches
  g  f + a round measured while other processes used > 10% of the CPUs
     (``CanaryResult.foreign_cpu``, from /proc/stat) is invalid, not an alarm

A run counts as an alarm when the variant says ``regression``; ``invalid``
(too few samples, unstable or contended run) is counted apart. Targets: <= 1 false alarm in
40 A/A runs, >= 19 of 20 +10% runs caught.

    python benchmarks/verdicts.py            # full run: ~11 min on an idle 2-core
                                             # machine, ~3x that on shared cores
    python benchmarks/verdicts.py --quick    # smoke test, ~1 min

The full run writes ``benchmarks/verdicts-results.md``; ``--quick`` writes under
``.perfguard/benchmarks/`` unless ``--out`` says otherwise (a smoke run is not
evidence and must not overwrite the real table). Every round's raw samples go to
``.perfguard/benchmarks/verdicts-raw[-quick].json``; ``--from-raw FILE``
re-judges them (e.g. after changing a rule) without measuring again.

Measure on an otherwise idle machine: a second test run on the same 2 cores
slows onnxruntime 1.5-5x, which the canary cannot see (see perfguard.measure.canary);
the foreign-CPU diagnostics below say whether that happened.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

# Runnable from a checkout without installing.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfguard.core.policy import GateSpec
from perfguard.core.scenario import LoopSpec
from perfguard.core.stats import noise_floor, percentile
from perfguard.judge.compare import compare_scenario, confirm, needs_confirmation
from perfguard.judge.verdict import ScenarioVerdict, VerdictKind
from perfguard.measure.canary import CanaryProbe
from perfguard.records.figures import CpuShares, RuntimeInfo, summarize
from perfguard.records.results import ScenarioResult

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".perfguard" / "benchmarks"
SEQ_LEN = 64
THREADS = 2
GATES = (GateSpec(metric="p95", limit=0.05),)
SLOWDOWNS = (0.05, 0.10, 0.20)
VARIANTS: tuple[tuple[str, str], ...] = (
    ("a", "pytest-benchmark mean:5%"),
    ("b", "raw P95 point > +5%"),
    ("c", "bound rule (point > 5% and 99% lower bound > 1), raw"),
    ("d", "c + canary normalisation"),
    ("e", "d + confirmation re-measure (2 rounds)"),
    ("f0", "e vs pooled multi-launch baseline"),
    ("f", "f0 + noise floor k=2 from baseline launches"),
    ("g", "f + contended runs (foreign CPU > 10%) invalid"),
)


# --------------------------------------------------------------------------- child processes


def export_model(path: Path) -> None:
    """Export MiniLM to ONNX (run in a child so the parent never imports torch)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from perfguard_examples.minilm import build

    model = build()
    ids = torch.randint(1000, 30000, (1, SEQ_LEN), dtype=torch.int64)
    mask = torch.ones((1, SEQ_LEN), dtype=torch.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    torch.onnx.export(
        model,
        (ids, mask),
        str(tmp),
        input_names=["input_ids", "attention_mask"],
        output_names=["embedding"],
        opset_version=17,
        dynamo=False,
    )
    tmp.replace(path)


def worker(model: Path, spin_ns: int, requests: int, rounds: int) -> dict[str, Any]:
    """One fresh-process run: ``rounds`` x (canary, timing.measure, canary)."""
    import onnxruntime as ort

    from perfguard.measure.timing import measure

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {
        "input_ids": rng.integers(1000, 30000, (1, SEQ_LEN), dtype=np.int64),
        "attention_mask": np.ones((1, SEQ_LEN), dtype=np.int64),
    }
    clock = time.perf_counter_ns

    def call() -> object:
        out = session.run(None, feeds)
        if spin_ns:
            end = clock() + spin_ns
            while clock() < end:
                pass
        return out

    out = []
    for _ in range(rounds):
        probe = CanaryProbe()
        before = probe.sample()
        m = measure(call, None, LoopSpec(10, 0.5), LoopSpec(requests, 0.0))
        after = probe.sample()
        out.append(
            {
                "samples_ns": m.samples_ns.tolist(),
                "canary_ns": probe.result().median_ns,
                "canary_before_ns": float(np.median(before)),
                "canary_after_ns": float(np.median(after)),
                "stable": m.stable,
                "stability_ratio": m.stability_ratio,
                "foreign_cpu": probe.result().foreign_cpu,
                "steal": probe.result().steal,
            }
        )
    return {"rounds": out}


# --------------------------------------------------------------------------- parent


def to_result(data: dict[str, Any], *, contention: bool = False) -> ScenarioResult:
    """One round as the plugin would store it; ``contention`` keeps the foreign-CPU share."""
    samples = tuple(int(s) for s in data["samples_ns"])
    foreign = data.get("foreign_cpu")
    return ScenarioResult(
        id="benchmarks::minilm",
        suite="benchmarks",
        name="minilm",
        backend="onnxruntime",
        device="cpu",
        precision="fp32",
        latency_ns=summarize(samples),
        stable=bool(data["stable"]),
        stability_ratio=float(data["stability_ratio"]),
        canary_ns=float(data["canary_ns"]),
        runtime=RuntimeInfo(cpu=CpuShares(foreign, None))
        if contention and foreign is not None
        else RuntimeInfo(),
        samples_ns=samples,
    )


def launch(model: Path, spin_ns: int, requests: int, rounds: int) -> list[dict[str, Any]]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(model)]
    cmd += ["--spin-ns", str(spin_ns), "--requests", str(requests), "--rounds", str(rounds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rounds_data: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])["rounds"]
    return rounds_data


def pool(results: list[ScenarioResult]) -> ScenarioResult:
    """Pool launches like ``perfguard.baseline.store``: samples concatenated, median canary."""
    samples = tuple(s for r in results for s in r.samples_ns)
    canaries = [r.canary_ns for r in results if r.canary_ns is not None]
    return replace(
        results[-1],
        samples_ns=samples,
        latency_ns=summarize(samples),
        canary_ns=float(statistics.median(canaries)),
        stable=all(r.stable for r in results),
    )


def p95(result: ScenarioResult) -> float:
    return percentile(np.asarray(result.samples_ns, dtype=np.float64), 95.0)


def normalised_p95(data: dict[str, Any]) -> float:
    return p95(to_result(data)) / float(data["canary_ns"])


def state(v: ScenarioVerdict) -> str:
    return "alarm" if v.failed else "invalid" if v.verdict == VerdictKind.INVALID else "ok"


def judge(
    rounds: list[dict[str, Any]],
    single: ScenarioResult,
    pooled: ScenarioResult,
    history: list[float],
) -> dict[str, str]:
    """Each variant's outcome (alarm / invalid / ok) for one run of two rounds."""
    r1, r2 = to_result(rounds[0]), to_result(rounds[1])
    b = np.asarray(single.samples_ns, dtype=np.float64)
    c = np.asarray(r1.samples_ns, dtype=np.float64)
    out = {
        "a": "alarm" if c.mean() > 1.05 * b.mean() else "ok",
        "b": "alarm" if p95(r1) > 1.05 * p95(single) else "ok",
    }

    def cmp(
        cur: ScenarioResult, base: ScenarioResult, hist: list[float], norm: bool = True
    ) -> ScenarioVerdict:
        return compare_scenario(
            cur, base, GATES, baseline_commit="bench", history=hist, normalise=norm
        )

    def confirmed(
        first: ScenarioResult, second: ScenarioResult, base: ScenarioResult, hist: list[float]
    ) -> ScenarioVerdict:
        v = cmp(first, base, hist)
        return confirm([v, cmp(second, base, hist)]) if needs_confirmation(v) else v

    out["c"] = state(cmp(r1, single, [], norm=False))
    out["d"] = state(cmp(r1, single, []))
    out["e"] = state(confirmed(r1, r2, single, []))
    out["f0"] = state(confirmed(r1, r2, pooled, []))
    out["f"] = state(confirmed(r1, r2, pooled, history))
    c1, c2 = (to_result(r, contention=True) for r in rounds[:2])
    out["g"] = state(confirmed(c1, c2, pooled, history))
    return out


def cv(values: list[float]) -> float:
    return float(np.std(values, ddof=1) / np.mean(values)) if len(values) > 1 else float("nan")


def corr(x: list[float], y: list[float]) -> float:
    return (
        float(np.corrcoef(x, y)[0, 1])
        if len(x) > 2 and np.std(x) > 0 and np.std(y) > 0
        else float("nan")
    )


def measure_all(
    model: Path, requests: int, n_base: int, n_aa: int, n_ab: int, seed: int
) -> dict[str, Any]:
    """Baseline launches, then all A/A and A/B runs shuffled together; raw rounds only."""
    print(f"baseline: {n_base} launches x {requests} requests", file=sys.stderr)
    baseline = [launch(model, 0, requests, 2) for _ in range(n_base)]
    pooled_samples = [s for launch_ in baseline for s in launch_[0]["samples_ns"]]
    median_ns = float(np.median(pooled_samples))
    conditions = [0.0] * n_aa + [s for s in SLOWDOWNS for _ in range(n_ab)]
    random.Random(seed).shuffle(conditions)
    runs = []
    for i, slowdown in enumerate(conditions, 1):
        rounds = launch(model, int(slowdown * median_ns), requests, 2)
        runs.append({"slowdown": slowdown, "rounds": rounds})
        last = p95(to_result(rounds[0])) / 1e6
        foreign = rounds[0].get("foreign_cpu")
        busy = f", foreign CPU {foreign:.0%}" if foreign is not None else ""
        print(
            f"run {i}/{len(conditions)} +{slowdown:.0%}: P95 {last:.2f} ms{busy}", file=sys.stderr
        )
    return {"requests": requests, "median_ns": median_ns, "baseline": baseline, "runs": runs}


def analyse(data: dict[str, Any], *, label: str, elapsed_s: float) -> str:
    """The markdown report: counts per variant and condition, then diagnostics."""
    base_results = [to_result(launch_[0]) for launch_ in data["baseline"]]
    single, pooled = base_results[0], pool(base_results)
    history = [normalised_p95(launch_[0]) for launch_ in data["baseline"]]
    runs = data["runs"]
    groups = [0.0, *SLOWDOWNS]
    counts = {(v, g): {"alarm": 0, "invalid": 0, "ok": 0} for v, _ in VARIANTS for g in groups}
    for run in runs:
        for variant, outcome in judge(run["rounds"], single, pooled, history).items():
            counts[(variant, run["slowdown"])][outcome] += 1
    totals = {g: sum(r["slowdown"] == g for r in runs) for g in groups}
    allowed_aa = max(1, totals[0.0] // 40)
    needed_10 = int(np.ceil(0.95 * totals[0.10]))

    def cell(variant: str, g: float) -> str:
        c = counts[(variant, g)]
        return f"{c['alarm']}/{totals[g]}" + (f" (+{c['invalid']} inv)" if c["invalid"] else "")

    def met(variant: str) -> str:
        ok = (
            counts[(variant, 0.0)]["alarm"] <= allowed_aa
            and counts[(variant, 0.10)]["alarm"] >= needed_10
        )
        return "yes" if ok else "no"

    head = [
        "variant",
        "rule",
        "A/A false alarms",
        *(f"+{s:.0%} caught" for s in SLOWDOWNS),
        "targets",
    ]
    rows = [[v, desc, *(cell(v, g) for g in groups), met(v)] for v, desc in VARIANTS]

    aa = [r["rounds"] for r in runs if r["slowdown"] == 0.0]
    raw_p95 = [p95(to_result(r[0])) for r in aa]
    norm1 = [normalised_p95(r[0]) for r in aa]
    norm2 = [normalised_p95(r[1]) for r in aa]
    canaries = [float(r[0]["canary_ns"]) for r in aa]
    every = [x for r in runs for x in r["rounds"]]
    foreign = [float(x["foreign_cpu"]) for x in every if x.get("foreign_cpu") is not None]
    aa_foreign = [float(r[0].get("foreign_cpu") or 0.0) for r in aa]
    steal = [float(x["steal"]) for x in every if x.get("steal") is not None]
    after_before = [x["canary_after_ns"] / x["canary_before_ns"] for x in every]
    median_ns = float(data["median_ns"])
    diag = [
        f"baseline launches P95 (ms): {', '.join(f'{p95(r) / 1e6:.2f}' for r in base_results)}; "
        f"noise floor of their normalised P95 = {noise_floor(history):.1%}",
        f"A/A P95 spread (CV) raw {cv(raw_p95):.1%}, canary-normalised {cv(norm1):.1%}; "
        f"canary CV {cv(canaries):.1%}",
        f"A/A corr(raw P95, canary) = {corr(raw_p95, canaries):+.2f}; "
        f"corr(raw P95, foreign CPU) = {corr(raw_p95, aa_foreign):+.2f}; "
        f"corr(round 1, round 2) of normalised P95 = {corr(norm1, norm2):+.2f}",
        f"canary after/before the timed loop: median {np.median(after_before):.3f}",
        f"rounds flagged unstable: {sum(not x['stable'] for x in every)} of {len(every)}",
    ]
    if foreign:
        diag.append(
            f"foreign CPU per round: median {np.median(foreign):.0%}, max {max(foreign):.0%}, "
            f"> 10% in {sum(f > 0.10 for f in foreign)} of {len(foreign)} rounds; "
            f"steal median {np.median(steal):.1%}, max {max(steal):.1%}"
        )
    diag.append(
        f"spin per call for +10%: {0.10 * median_ns / 1e6:.2f} ms "
        f"(baseline median {median_ns / 1e6:.2f} ms)"
    )
    table = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    md = [
        f"# Verdict rules on MiniLM ({label})",
        "",
        f"measured {data.get('measured_at', '?')}; "
        f"{platform.machine()}, {os.cpu_count()} CPUs; onnxruntime {THREADS} threads, "
        f"batch 1, seq {SEQ_LEN}; {data['requests']} requests per round, "
        f"{len(data['baseline'])} baseline launches, one process per run; "
        f"{elapsed_s / 60:.1f} min.",
        "",
        *table,
        "",
        f"Targets: A/A false alarms <= {allowed_aa} of {totals[0.0]}; "
        f"+10% caught >= {needed_10} of {totals[0.10]}. Invalid runs (inv) are neither.",
        "",
        "Diagnostics:",
        "",
        *(f"- {d}" for d in diag),
        "",
    ]
    return "\n".join(md)


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:2] == ["--mode", "pr"] or "--mode=pr" in args_in[:1]:
        # The pull-request default: archived vs A/B vs screen-then-confirm, busy and quiet.
        import verdicts_pr

        verdicts_pr.main(args_in[2:] if args_in[:1] == ["--mode"] else args_in[1:])
        return 0
    if args_in[:2] == ["--mode", "ab"] or "--mode=ab" in args_in[:1]:
        # Same-run A/B beside the archived gate and pytest-benchmark: verdicts_ab.py.
        import verdicts_ab

        verdicts_ab.main(args_in[2:] if args_in[:1] == ["--mode"] else args_in[1:])
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: few runs")
    parser.add_argument("--requests", type=int, help="timed requests per round (default 200)")
    parser.add_argument("--aa", type=int, help="A/A runs (default 40)")
    parser.add_argument("--ab", type=int, help="runs per slowdown (default 20)")
    parser.add_argument("--baseline-launches", type=int, help="default 5")
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed")
    parser.add_argument("--out", type=Path, help="markdown report path")
    parser.add_argument(
        "--from-raw", type=Path, help="re-analyse a saved raw JSON, measure nothing"
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--export", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--spin-ns", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.export:
        export_model(args.export)
        return 0
    if args.worker:
        print(json.dumps(worker(args.worker, args.spin_ns, args.requests or 200, args.rounds)))
        return 0

    quick = args.quick
    suffix = "-quick" if quick else ""
    out_path = args.out or (
        CACHE / "verdicts-results-quick.md"
        if quick
        else ROOT / "benchmarks" / "verdicts-results.md"
    )
    label = "QUICK smoke run, not evidence" if quick else "full run"
    started = time.monotonic()
    if args.from_raw:
        data = json.loads(args.from_raw.read_text())
        elapsed = float(data.get("elapsed_s", 0.0))
    else:
        model = CACHE / f"minilm-seq{SEQ_LEN}.onnx"
        if not model.exists():
            print(f"exporting MiniLM to {model} ...", file=sys.stderr)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--export", str(model)]
            subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        data = measure_all(
            model,
            requests=args.requests or (120 if quick else 200),
            n_base=args.baseline_launches or (3 if quick else 5),
            n_aa=args.aa if args.aa is not None else (4 if quick else 40),
            n_ab=args.ab if args.ab is not None else (2 if quick else 20),
            seed=args.seed,
        )
        elapsed = time.monotonic() - started
        data["elapsed_s"] = elapsed
        data["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        raw_path = CACHE / f"verdicts-raw{suffix}.json"
        raw_path.parent.mkdir(parents=True, exist_ok=True)
        raw_path.write_text(json.dumps(data))
        print(f"raw rounds saved to {raw_path} (re-analyse with --from-raw)", file=sys.stderr)
    text = analyse(data, label=label, elapsed_s=elapsed)
    print(text)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(text)
    print(f"written to {out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
