"""What does perfguard cost a pytest run that does not ask for it, and where does a
``--perfguard`` run spend its time?

1. Idle overhead: a plain ``pytest`` run of a one-test file in a temporary folder, with
   the plugin (installed, not asked for) and without it (``-p no:perfguard``). The two
   alternate (ABBA) over ``--repeats`` rounds, so a slow spell of a shared host hits
   both; the figure is the median with minus the median without. Target: <= 30 ms.

2. Where a warm-cache run goes: ``pytest --perfguard suites/`` in the repository, run
   twice (the first fills the export/quantization cache), the second measured: the
   share of its session spent in warm-up plus timed measurement, from its
   ``results.json`` (``warmup_ns``, the sum of ``samples_ns``, a load level's
   ``duration_s``). Target: >= 85%. The run uses ``--perfguard-baseline=none`` and a
   temporary report folder: no confirmation rounds (they re-measure, outside
   ``results.json``) and nothing written into the repository but the model cache.

This is a report, not a test: it always exits 0.

    python benchmarks/plugin_overhead.py --repeats 15
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
IDLE_TARGET_MS = 30.0
SHARE_TARGET = 0.85


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # This checkout's perfguard, in the child pytest too.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("GITHUB_ACTIONS", None)
    return env


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_cpu(cmd: list[str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, CPU s of the child: user + system, the finished process)."""
    cpu0 = _cpu_children()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, _cpu_children() - cpu0, proc


def _timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    seconds, _cpu, proc = _timed_cpu(cmd, cwd)
    return seconds, proc


def idle_overhead(repeats: int) -> dict[str, float]:
    """Medians (s) of wall and CPU time with and without the plugin, and of the paired
    wall-time differences. CPU time moves far less than wall time on a shared host."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "pytest.ini").write_text("[pytest]\n")
        (folder / "test_one.py").write_text("def test_one():\n    assert True\n")
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_one.py"]
        variants = {"with": base, "without": [*base, "-p", "no:perfguard"]}
        wall: dict[str, list[float]] = {"with": [], "without": []}
        cpu: dict[str, list[float]] = {"with": [], "without": []}
        _timed(base, folder)  # warm the file system cache and .pyc files
        for i in range(repeats):
            order = ("with", "without") if i % 2 == 0 else ("without", "with")
            for name in order:
                seconds, cpu_s, proc = _timed_cpu(variants[name], folder)
                if proc.returncode != 0:
                    raise SystemExit(f"pytest ({name} the plugin) failed:\n{proc.stdout}")
                wall[name].append(seconds)
                cpu[name].append(cpu_s)
    diffs = [a - b for a, b in zip(wall["with"], wall["without"], strict=True)]
    return {
        "with": statistics.median(wall["with"]),
        "without": statistics.median(wall["without"]),
        "paired": statistics.median(diffs),
        "cpu_with": statistics.median(cpu["with"]),
        "cpu_without": statistics.median(cpu["without"]),
    }


def _measured_ns(scenario: dict[str, Any]) -> tuple[int, int]:
    """(warm-up ns, timed measurement ns) of one cell of results.json."""
    warmup = int(scenario.get("warmup_ns") or 0)
    load = scenario.get("load")
    if isinstance(load, dict) and load.get("duration_s") is not None:
        return warmup, int(float(load["duration_s"]) * 1e9)
    samples = scenario.get("samples_ns") or []
    return warmup, int(sum(samples))


def suite_share(suites: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        reports = Path(tmp) / "reports"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--perfguard",
            suites,
            "--perfguard-baseline=none",
            f"--perfguard-report-dir={reports}",
        ]
        _timed(cmd, REPO)  # fills the model cache
        for old in reports.glob("*/results.json"):
            old.unlink()
        wall, proc = _timed(cmd, REPO)
        found = list(reports.glob("*/results.json"))
        if not found:
            raise SystemExit(f"no results.json:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        data = json.loads(found[0].read_text())
    match = re.search(r" in ([0-9.]+)s", proc.stdout)
    session = float(match.group(1)) if match else wall
    warmup = measured = 0
    for scenario in data["scenarios"]:
        w, m = _measured_ns(scenario)
        warmup += w
        measured += m
    return {
        "cells": float(len(data["scenarios"])),
        "wall_s": wall,
        "session_s": session,
        "warmup_s": warmup / 1e9,
        "measure_s": measured / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--suites", default="suites/")
    parser.add_argument("--skip-suite", action="store_true", help="only the idle overhead")
    args = parser.parse_args()

    idle = idle_overhead(args.repeats)
    added_ms = (idle["with"] - idle["without"]) * 1e3
    added_cpu_ms = (idle["cpu_with"] - idle["cpu_without"]) * 1e3
    print(f"idle overhead, one-test file, {args.repeats} interleaved runs each (median):")
    print(f"  {'':<34} {'wall':>9}    {'CPU':>9}")
    for label, key in (("with perfguard", "with"), ("-p no:perfguard", "without")):
        print(f"  {label:<34} {idle[key] * 1e3:9.1f} ms {idle['cpu_' + key] * 1e3:9.1f} ms")
    verdict = "ok" if added_ms <= IDLE_TARGET_MS else "over target"
    label = "added (difference of medians)"
    print(f"  {label:<34} {added_ms:9.1f} ms {added_cpu_ms:9.1f} ms  (target <= 30 ms: {verdict})")
    print(f"  {'added (median paired difference)':<34} {idle['paired'] * 1e3:9.1f} ms")
    if args.skip_suite:
        return
    fig = suite_share(args.suites)
    timed = fig["warmup_s"] + fig["measure_s"]
    print()
    print(f"warm-cache `pytest --perfguard {args.suites}` ({int(fig['cells'])} cells), 2nd run:")
    print(f"  {'process wall time':<34} {fig['wall_s']:9.2f} s")
    print(f"  {'pytest session (its own figure)':<34} {fig['session_s']:9.2f} s")
    print(f"  {'warm-up':<34} {fig['warmup_s']:9.2f} s")
    print(f"  {'timed measurement':<34} {fig['measure_s']:9.2f} s")
    for label, total in (("of the session", fig["session_s"]), ("of the wall time", fig["wall_s"])):
        share = timed / total if total else 0.0
        verdict = "ok" if share >= SHARE_TARGET else "under target"
        print(f"  {'warm-up + measurement ' + label:<34} {share:9.1%}  (target >= 85%: {verdict})")


if __name__ == "__main__":
    main()
