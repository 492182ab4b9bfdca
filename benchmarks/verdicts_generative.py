"""Does the archived gate on token figures cry wolf, and does it catch a real slowdown?

The example generative cell (``examples/generative/tinylm.yaml``'s model: Llama-shaped,
4 layers, width 256, seeded weights; prompt 48 tokens, 16 new tokens, 100 timed requests,
one thread) is measured in a fresh process per run, as the plugin would (warm-up, then
the timed requests, then a second round in the same process: the confirmation
re-measurement). A baseline launch is recorded first. Then, shuffled together so a slow
spell of the host hits each alike:

* ``aa``: unchanged runs;
* ``decode+10%`` / ``decode+20%``: a busy-wait before every decode step of that fraction
  of the baseline's median TPOT (``perfguard_examples.tinylm``'s ``decode_spin_us``);
* ``prefill+20%``: a busy-wait before every prompt pass of 20% of the baseline's median
  TTFT (``prefill_spin_us``).

Each run is judged against the baseline by perfguard's archived rule
(``perfguard.judge.compare``: point beyond +5% and one-sided 99% bound beyond 1, each
round; a regression must repeat in round 2) on ``ttft_p95``, ``itl_p95`` and
``tpot_p50``, with the contention check (``invalid`` when other processes used > 10% of
the CPUs). ``--busy`` runs a busy-loop process beside every run. Targets (issue 29):
false alarms on unchanged runs <= 1/40, a +10% per-token cost caught >= 19/20, a +20%
prefill caught on TTFT and not reported on ITL, and the converse.

    python benchmarks/verdicts_generative.py --out benchmarks/verdicts-generative-results.md
    python benchmarks/verdicts_generative.py --busy --aa 20 --decode10 10 --prefill20 0 \\
        --decode20 0 --out benchmarks/verdicts-generative-busy-results.md

This is a report, not a test: it always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

# Runnable from a checkout without installing.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import planted  # noqa: E402  (beside this script)

GATES = ("ttft_p95", "itl_p95", "tpot_p50")


def child(prefill_us: float, decode_us: float, requests: int) -> None:
    """One run: two rounds of the cell in this process; prints both results as JSON."""
    from perfguard.core.errors import Location
    from perfguard.core.scenario import GenerateSpec, LoopSpec, ModelSpec, Scenario
    from perfguard.measure.opencell import RunContext
    from perfguard.measure.runner import ScenarioRun

    here = Path(__file__).resolve()
    model = ModelSpec(
        name="tinyllama",
        location=Location(here),
        base_dir=here.parent,
        factory="perfguard_examples.tinylm:build",
        factory_kwargs=(
            ("kind", "llama"),
            ("prefill_spin_us", prefill_us),
            ("decode_spin_us", decode_us),
        ),
    )
    scenario = Scenario(
        suite=here,
        name="tinyllama",
        cell_id="p48",
        model=model,
        location=model.location,
        threads=1,
        warmup=LoopSpec(5, 0.5),
        measure=LoopSpec(requests, 0.0),
        stability_tolerance=0.5,
        generate=GenerateSpec(prompt_tokens=48, new_tokens=16),
    )
    ctx = RunContext(ROOT, ROOT / ".perfguard" / "cache")
    with ScenarioRun(scenario, ctx) as run:
        rounds = [run.measure().to_dict(), run.measure().to_dict()]
    print(json.dumps(rounds))


def launch(prefill_us: float, decode_us: float, requests: int) -> list[dict[str, Any]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(prefill_us), str(decode_us), str(requests)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def judge(rounds: list[dict[str, Any]], base: dict[str, Any]) -> dict[str, str]:
    """Each gate's verdict: regression only when both rounds regress."""
    from perfguard.core.policy import GateSpec
    from perfguard.judge.compare import compare_scenario
    from perfguard.records.results import ScenarioResult

    baseline = ScenarioResult.from_dict(base)
    out: dict[str, str] = {}
    for gate in GATES:
        verdicts = [
            compare_scenario(
                ScenarioResult.from_dict(r),
                baseline,
                (GateSpec(gate, 0.05),),
                baseline_commit="0" * 40,
            )
            .metrics[0]
            .verdict.value
            for r in rounds
        ]
        if "invalid" in verdicts:
            out[gate] = "invalid"
        elif all(v == "regression" for v in verdicts):
            out[gate] = "regression"
        else:
            out[gate] = verdicts[0] if verdicts[0] != "regression" else "unconfirmed"
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    planted.add_arguments(parser)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()

    started = time.monotonic()
    base_rounds = launch(0.0, 0.0, args.requests)
    base = base_rounds[0]
    tokens = base["tokens"]
    ttft_ms = tokens["ttft_ns"]["p50"] / 1e6
    tpot_ms = tokens["tpot_ns"]["p50"] / 1e6
    conditions = planted.conditions(args, ttft_ms * 1e3, tpot_ms * 1e3)
    tallies: dict[str, Counter[str]] = {}
    per_run = []
    raw: list[dict[str, Any]] = [{"condition": "baseline", "rounds": base_rounds}]
    for i, (name, prefill_us, decode_us) in enumerate(conditions):
        with planted.neighbour(args.busy):
            rounds = launch(prefill_us, decode_us, args.requests)
        verdicts = judge(rounds, base)
        per_run.append((name, verdicts))
        raw.append({"condition": name, "rounds": rounds})
        counter = tallies.setdefault(name, Counter())
        for gate, v in verdicts.items():
            counter[f"{gate}:{v}"] += 1
        print(f"[{i + 1}/{len(conditions)}] {name}: {verdicts}", file=sys.stderr)
    elapsed = time.monotonic() - started

    lines = [
        "# Archived gate on token figures: false alarms and detection",
        "",
        f"`python benchmarks/verdicts_generative.py {' '.join(sys.argv[1:])}`"
        f" ({'busy neighbour beside every run' if args.busy else 'quiet machine'}; "
        f"{len(conditions) + 1} launches in {elapsed / 60:.1f} min)",
        "",
        f"Baseline: TTFT P50 {ttft_ms:.3f} ms, TPOT P50 {tpot_ms:.3f} ms "
        f"(prompt 48, 16 new tokens, {args.requests} requests, 1 thread). Each cell: "
        "regression (confirmed in round 2) / unconfirmed / invalid (contended, unstable) "
        "out of the runs.",
        "",
        "| condition | runs | " + " | ".join(GATES) + " |",
        "|---|---|" + "---|" * len(GATES),
    ]
    for name in planted.CONDITIONS:
        if name not in tallies:
            continue
        n = sum(1 for run_name, _ in per_run if run_name == name)
        cells = []
        for gate in GATES:
            c = tallies[name]
            cells.append(
                f"{c[f'{gate}:regression']} / {c[f'{gate}:unconfirmed']} / {c[f'{gate}:invalid']}"
            )
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    planted.finish(args, text, "verdicts-generative", raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
