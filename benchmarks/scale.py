"""Scaling figures (issue 16, part 5), one markdown section per figure.

``python benchmarks/scale.py`` prints every section and writes them to
``benchmarks/scale-results.md``; ``--only NAME`` runs one section (names: the keys of
``SECTIONS``), ``--out PATH`` writes elsewhere (``-``: print only). A new figure is a
function ``(args) -> str`` (its markdown section) added to ``SECTIONS``, with its own
options added in ``add_options``.

**parallel**: the example suite (``suites/examples.yaml``) copied with ``threads: 1``
forced on every scenario (so each cell does the same work whether it runs alone or
beside another: one intra-op thread, one core), run in one invocation of this script
serially (``pytest --perfguard``) and with two pytest-xdist workers pinned to one core
each (``-n 2``): the wall-time ratio of the two sessions (target <= 0.6) and, cell by
cell, the P95 in parallel against serial (target within 5%). Both sessions start with
an empty model cache (each pays its ONNX exports and quantization), compare with no
baseline (``--perfguard-baseline none``: no confirmation rounds) and never wait for
quiet (``--perfguard-contention-limit 1``): the machine is shared, and a wait would
time the neighbours instead of perfguard. ``--rounds N`` alternates N serial and N
parallel sessions (serial first) and reports the median wall time and each cell's
median P95.

**plan**: a synthetic zoo of 200 cells with realistic costs (small, BERT-size and
TensorRT-built models, each first cell paying its model open, some cells a load level
or A/B pair at several times the cost) planned by ``perfguard.shard.plan`` for N = 1,
2, 4, 8, 16 runners: the makespan against the ideal (sum of costs / N), target within
10% for N <= 8, also over 20 more zoos; no model is run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from perfguard.shard.plan import Cell, plan_shards, stable_key

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "examples.yaml"
RESULTS = Path(__file__).with_name("scale-results.md")
WALL_TARGET = 0.6
P95_TARGET = 0.05


# -- parallel: serial against two pinned xdist workers ------------------------------------


def threads_one_suite(source: Path, dest: Path) -> dict[str, str]:
    """``source`` copied to ``dest`` with ``threads: 1`` on every scenario; each
    scenario's model, by scenario name."""
    suite = yaml.safe_load(source.read_text(encoding="utf-8"))
    suite.setdefault("defaults", {})["threads"] = 1
    for scenario in suite.get("scenarios", []):
        if "threads" in scenario:
            scenario["threads"] = 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    return {str(s["name"]): str(s["model"]) for s in suite.get("scenarios", [])}


def run_session(project: Path, name: str, extra: list[str]) -> tuple[float, dict[str, Any]]:
    """One ``pytest --perfguard`` session in ``project``: (wall seconds, results.json)."""
    reports = project / f"reports-{name}"
    cache = project / f"cache-{name}"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--perfguard",
        "--perfguard-baseline",
        "none",
        "--perfguard-contention-limit",
        "1",
        "--perfguard-report-dir",
        str(reports),
        "-o",
        f"perfguard_cache_dir={cache}",
        *extra,
        "suites/",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(
            f"{name} session failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    found = sorted(reports.glob("*/results.json"))
    if len(found) != 1:
        raise SystemExit(f"{name} session wrote {len(found)} results.json:\n{proc.stdout}")
    data: dict[str, Any] = json.loads(found[0].read_text(encoding="utf-8"))
    return wall, data


def p95_ms(cell: dict[str, Any]) -> float | None:
    """A cell's P95 in ms: its timed loop's, or (a load level) the level's."""
    latency = cell.get("latency_ns") or {}
    if latency.get("p95") is not None:
        return float(latency["p95"]) / 1e6
    for level in (cell.get("load") or {}).get("levels") or []:
        lat = level.get("latency_ns") or {}
        if lat.get("p95") is not None:
            return float(lat["p95"]) / 1e6
    return None


# A fixed single-threaded workload: torch conv layers on one thread (like the example
# convnet cell), timed in a process pinned to one core; prints the median ms per call.
_CONTROL = """
import os, sys, time, statistics
os.sched_setaffinity(0, {int(sys.argv[1])})
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                          torch.nn.Conv2d(32, 32, 3, padding=1)).eval()
x = torch.randn(4, 3, 64, 64)
with torch.inference_mode():
    for _ in range(5):
        net(x)
    times = []
    end = time.perf_counter() + float(sys.argv[2])
    while time.perf_counter() < end:
        t = time.perf_counter_ns(); net(x); times.append(time.perf_counter_ns() - t)
print(statistics.median(times) / 1e6)
"""


def core_interference(seconds: float = 3.0, repeats: int = 4) -> tuple[list[float], list[float]]:
    """Median ms per call of the control workload on the first core alone, and while a
    twin runs pinned to the second core; ``repeats`` of each, alternating.

    Two pinned workers share no core, but they still share what the cores share
    (caches beyond L2, memory bandwidth, on a VM the host's physical cores): this is
    how much that costs one single-threaded workload here.
    """
    cpus = sorted(os.sched_getaffinity(0))
    alone: list[float] = []
    together: list[float] = []
    if len(cpus) < 2:
        return alone, together

    def start(cpu: int) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-c", _CONTROL, str(cpu), str(seconds)]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)

    for _ in range(repeats):
        alone.append(float(start(cpus[0]).communicate()[0]))
        pair = [start(cpus[0]), start(cpus[1])]
        together.append(float(pair[0].communicate()[0]))
        pair[1].communicate()
    return alone, together


def parallel_figures(args: argparse.Namespace) -> str:
    """The markdown section of serial against ``-n 2`` pinned workers."""
    with tempfile.TemporaryDirectory(prefix="perfguard-scale-") as tmp:
        project = Path(tmp)
        (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        models = threads_one_suite(SUITE, project / "suites" / SUITE.name)
        # Serial sessions: how much of the wall time the cells took, and each model's.
        bounds: list[float] = []
        walls: dict[str, list[float]] = {"serial": [], "parallel": []}
        p95s: dict[str, dict[str, list[float]]] = {"serial": {}, "parallel": {}}
        # Other processes' share of all CPUs while each cell was measured (the run's own
        # workers excluded): how busy the shared machine was.
        foreign: dict[str, dict[str, list[float]]] = {"serial": {}, "parallel": {}}
        placed = ""
        load_before = _loadavg()
        for r in range(args.rounds):
            for name, extra in (("serial", []), ("parallel", ["-p", "xdist", "-n", "2"])):
                wall, data = run_session(project, f"{name}{r}", extra)
                walls[name].append(wall)
                for cell in data["scenarios"]:
                    value = p95_ms(cell)
                    if value is not None:
                        p95s[name].setdefault(cell["id"], []).append(value)
                    share = (cell.get("runtime") or {}).get("foreign_cpu")
                    if share is not None:
                        foreign[name].setdefault(cell["id"], []).append(float(share))
                if name == "serial":
                    bounds.append(grouped_bound(wall, data["scenarios"], models))
                placed = placed or data["environment"]["recorded"].get("xdist_workers", "")
                print(f"  {name} round {r + 1}: {wall:.1f} s", file=sys.stderr)
        load_after = _loadavg()
    alone, together = core_interference()
    serial, parallel = statistics.median(walls["serial"]), statistics.median(walls["parallel"])
    ratio = parallel / serial
    lines = [
        "## Serial against two pinned xdist workers",
        "",
        f"`python benchmarks/scale.py --only parallel --rounds {args.rounds}`: "
        f"`{SUITE.relative_to(ROOT)}` with `threads: 1` on every scenario, "
        f"{args.rounds} serial and {args.rounds} `-n 2` session(s), alternating, serial "
        "first; medians. Each session starts with an empty model cache.",
        "",
        f"Machine: {os.cpu_count()} cores, shared with other engineers' work "
        f"(`/proc/loadavg` {load_before} before, {load_after} after). "
        f"Workers: {placed or '(not recorded)'}.",
        "",
        "| session | wall time s (each round) | median s |",
        "| --- | --- | ---: |",
        f"| serial | {', '.join(f'{w:.1f}' for w in walls['serial'])} | {serial:.1f} |",
        f"| `-n 2` pinned | {', '.join(f'{w:.1f}' for w in walls['parallel'])} | {parallel:.1f} |",
        "",
        f"**Wall-time ratio parallel/serial: {ratio:.2f}** (target <= {WALL_TARGET}: "
        f"{'met' if ratio <= WALL_TARGET else 'missed'}).",
        "",
        "With a model's cells on one worker, the parallel session cannot end before its "
        "costliest model: the serial session's wall time outside its cells, plus that "
        "model's cells (their `wall_ns`), over the serial wall time is the least ratio "
        f"two workers can reach on this suite: **{statistics.median(bounds):.2f}** "
        f"(each serial round: {', '.join(f'{b:.2f}' for b in bounds)}).",
        "",
        "Other processes' share of the CPUs while a cell was measured (`foreign_cpu`, the "
        "run's own workers not counted) is given per session: on a shared machine it is "
        "what moves the P95.",
        "",
        "| cell | P95 serial ms | P95 `-n 2` ms | change | within 5% "
        "| others' CPU serial | others' CPU `-n 2` |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    within = 0
    cells = sorted(set(p95s["serial"]) | set(p95s["parallel"]))
    for cid in cells:
        s_vals, p_vals = p95s["serial"].get(cid), p95s["parallel"].get(cid)
        shares = f"{_share(foreign['serial'].get(cid))} | {_share(foreign['parallel'].get(cid))}"
        if not s_vals or not p_vals:
            lines.append(f"| `{cid}` | {_fmt(s_vals)} | {_fmt(p_vals)} | - | - | {shares} |")
            continue
        s, p = statistics.median(s_vals), statistics.median(p_vals)
        change = p / s - 1.0
        ok = abs(change) <= P95_TARGET
        within += ok
        lines.append(
            f"| `{cid}` | {s:.3f} | {p:.3f} | {change:+.1%} | {'yes' if ok else 'no'} | {shares} |"
        )
    lines += [
        "",
        f"{within} of {len(cells)} cells within {P95_TARGET:.0%}.",
        "",
        "Control (`core_interference`, after the sessions): one single-threaded torch conv "
        f"workload pinned to core {min(os.sched_getaffinity(0))}, median ms per call, "
        "alone and while a twin runs pinned to the other core, alternating: alone "
        f"{_list(alone)}, beside its twin {_list(together)}: what two workers on "
        "disjoint cores still cost each other here, and how much this machine's speed "
        "moves from one run to the next.",
        "",
    ]
    return "\n".join(lines)


def grouped_bound(wall_s: float, cells: list[dict[str, Any]], models: dict[str, str]) -> float:
    """The least parallel/serial ratio with each model's cells on one worker, from one
    serial session: (wall time outside the cells + the costliest model's cells) / wall."""
    per_model: dict[str, float] = {}
    for cell in cells:
        scenario = cell["id"].split("::", 1)[1].split("[", 1)[0]
        model = models.get(scenario, scenario)
        per_model[model] = per_model.get(model, 0.0) + (cell.get("wall_ns") or 0) / 1e9
    outside = wall_s - sum(per_model.values())
    return (outside + max(per_model.values(), default=0.0)) / wall_s


def _fmt(values: list[float] | None) -> str:
    return f"{statistics.median(values):.3f}" if values else "-"


def _list(values: list[float]) -> str:
    if not values:
        return "(one core: not measured)"
    shown = ", ".join(f"{v:.2f}" for v in values)
    return f"{shown} (median {statistics.median(values):.2f})"


def _share(values: list[float] | None) -> str:
    return f"{statistics.median(values):.0%}" if values else "-"


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


# -- plan: the shard plan's makespan against the ideal -----------------------------------

#: (share of models, cells per model, seconds per cell (median), model open seconds)
ZOO_CLASSES = (
    (0.5, (3, 6), 8.0, 10.0),  # small CNNs and encoders: a quick export
    (0.35, (4, 8), 30.0, 60.0),  # BERT-size models: export, quantization, calibration
    (0.15, (4, 8), 90.0, 240.0),  # large models with TensorRT engine builds
)
ZOO_CELLS = 200
PLAN_SHARDS = (1, 2, 4, 8, 16)
PLAN_TARGET = 0.10
ZOO_SEEDS = 20  # other zoos, for the worst case beside the one shown


def synthetic_zoo(seed: int, cells: int = ZOO_CELLS) -> list[Cell]:
    """A model zoo of ``cells`` cells: each model's cells cost a lognormal spread around
    its class's median (a load level or an A/B cell costs several times a plain one),
    plus its opening (its session and inputs, and on its first cell the model open), as
    ``wall_ns`` records them."""
    rng = random.Random(seed)
    zoo: list[Cell] = []
    model = 0
    while len(zoo) < cells:
        weights = [kind[0] for kind in ZOO_CLASSES]
        _, (low, high), median, open_s = rng.choices(ZOO_CLASSES, weights)[0]
        model += 1
        for k in range(rng.randint(low, high)):
            if len(zoo) == cells:
                break
            heavy = 3.0 if rng.random() < 0.2 else 1.0  # load levels, A/B pairs
            timed = median * heavy * rng.lognormvariate(0.0, 0.5)
            # Outside the timed requests: the cell's session and inputs, and the model
            # open on its first cell.
            opening = rng.uniform(0.5, 3.0) + (open_s if k == 0 else 0.0)
            zoo.append(
                Cell(
                    f"suites/zoo.yaml::m{model}[c{k}]", f"m{model}", timed + opening, True, opening
                )
            )
    return zoo


def hash_split_makespan(zoo: list[Cell], total: int) -> float:
    """What a plan blind to cost gives: each cell to shard hash(id) mod N (not even
    counting the model opens it repeats on every shard that holds a model's cells)."""
    loads = [0.0] * total
    for cell in zoo:
        loads[int(stable_key(cell.id), 16) % total] += cell.cost_s or 0.0
    return max(loads)


def over_ideal(zoo: list[Cell], total: int) -> tuple[float, float]:
    """How far the plan's makespan is above sum of costs / N, and above the bound (the
    ideal, or the costliest cell if larger); clamped at 0 against float rounding."""
    ideal = sum(c.cost_s or 0.0 for c in zoo) / total
    bound = max(ideal, max(c.cost_s or 0.0 for c in zoo))
    makespan = plan_shards(zoo, total).makespan_s
    return max(0.0, makespan / ideal - 1.0), max(0.0, makespan / bound - 1.0)


def plan_figures(args: argparse.Namespace) -> str:
    zoo = synthetic_zoo(args.seed)
    others = [synthetic_zoo(args.seed + 1 + k) for k in range(ZOO_SEEDS)]
    total_s = sum(c.cost_s or 0.0 for c in zoo)
    models = len({c.group for c in zoo})
    rows = []
    worst: dict[int, float] = {}
    for n in PLAN_SHARDS:
        started = time.perf_counter()
        plan = plan_shards(zoo, n)
        took = time.perf_counter() - started
        ideal = total_s / n
        bound = max(ideal, max(c.cost_s or 0.0 for c in zoo))
        homes: dict[str, set[int | None]] = {}
        for cell in zoo:
            homes.setdefault(cell.group, set()).add(plan.shard_of(cell.id))
        split = sum(1 for shards in homes.values() if len(shards) > 1)
        figures = [over_ideal(other, n) for other in [zoo, *others]]
        worst[n] = max(f[0] for f in figures)
        rows.append(
            f"| {n} | {ideal / 60:.1f} | {plan.makespan_s / 60:.1f} | "
            f"**{figures[0][0]:+.1%}** | {worst[n]:+.1%} | {max(f[1] for f in figures):+.1%} | "
            f"{bound / ideal - 1:+.1%} | "
            f"{hash_split_makespan(zoo, n) / ideal - 1:+.1%} | {split} | {took * 1000:.0f} |"
        )
    within = all(worst[n] <= PLAN_TARGET for n in PLAN_SHARDS if n <= 8)
    return "\n".join(
        [
            "## The shard plan against the ideal",
            "",
            f"`python benchmarks/scale.py --only plan --seed {args.seed}`: a synthetic zoo of "
            f"{len(zoo)} cells over {models} models ({total_s / 3600:.2f} h of cells in all; "
            "classes of small, BERT-size and TensorRT-built models, each first cell paying "
            "its model open, one cell in five a load level or A/B cell at 3x), planned by "
            "`perfguard.shard.plan.plan_shards` for N runners. Ideal: sum of costs / N. "
            "Bound: the ideal, or the costliest single cell if larger (no plan can beat it). "
            "Hash split: each cell to shard hash(id) mod N, blind to cost (not even counting "
            "the model opens it repeats). Worst: the largest over-ideal "
            f"of this zoo and {ZOO_SEEDS} others (seeds {args.seed + 1}.."
            f"{args.seed + ZOO_SEEDS}).",
            "",
            "| N | ideal min | makespan min | over ideal | worst of "
            f"{ZOO_SEEDS + 1} zoos | worst over its bound | bound over ideal "
            "| hash split over ideal | models split | plan ms |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *rows,
            "",
            f"**Within {PLAN_TARGET:.0%} of the ideal for N <= 8, in all {ZOO_SEEDS + 1} "
            f"zoos: {'yes' if within else 'no'}.**",
            "",
        ]
    )


# -- the figures this script prints ------------------------------------------------------

#: Section name -> the function that measures it and returns its markdown.
SECTIONS: dict[str, Callable[[argparse.Namespace], str]] = {
    "parallel": parallel_figures,
    "plan": plan_figures,
}


def add_options(parser: argparse.ArgumentParser) -> None:
    """Every section's options (a new section adds its own here)."""
    parser.add_argument(
        "--rounds", type=int, default=1, help="parallel: serial/-n 2 session pairs (default 1)"
    )
    parser.add_argument("--seed", type=int, default=16, help="plan: the zoo's seed (default 16)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", choices=sorted(SECTIONS), action="append", help="run this section only"
    )
    parser.add_argument(
        "--out", default=str(RESULTS), help=f"markdown output ('-': print only; default {RESULTS})"
    )
    add_options(parser)
    args = parser.parse_args(argv)
    names = args.only or list(SECTIONS)
    body = "\n".join(SECTIONS[name](args) for name in names)
    text = "# Scaling figures\n\nWritten by `python benchmarks/scale.py`.\n\n" + body
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
