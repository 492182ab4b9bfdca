"""How long ``perfguard baseline list`` takes on a large archive: before and after it
read headers only.

Synthetic: 50 fingerprints x 2,000 commits = 100,000 baseline files (one launch of
``--scenarios`` cells with ``--samples`` samples each, the size a small suite saves) in
a temporary folder. Times, side by side and on the same files:

- *old*: what ``baseline list`` did before: ``scan()`` (every file loaded whole and
  validated) and then every file loaded again to print its row;
- *new*: ``perfguard baseline list`` as it is now (each file's header only), once over
  the whole archive and once with ``--fingerprint`` (one environment of the 50).

Not part of the test suite (it writes ~1 GB and runs for minutes).

    python benchmarks/baseline_list.py [--fingerprints 50] [--commits 2000]
        [--scenarios 3] [--samples 300] [--skip-old] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from perfguard.baseline.fileformat import encode_document, encode_launch
from perfguard.baseline.store import DirectoryStore
from perfguard.cli import main
from perfguard.core.atomicio import dumps_json
from perfguard.records.figures import summarize
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult

PLACEHOLDER_SHA = "f" * 40
PLACEHOLDER_TIME = "1999-01-01T00:00:00+00:00"


def _template(fingerprint: str, scenarios: int, samples: int, seed: int) -> str:
    """One baseline file's text, with a placeholder sha and time to substitute."""
    rng = np.random.default_rng(seed)
    cells = []
    for j in range(scenarios):
        values = tuple(int(v) for v in 2e6 * rng.lognormal(0.0, 0.1, samples))
        cells.append(
            ScenarioResult(
                id=f"suites/bench.yaml::m{j}[torch-cpu-fp32]",
                suite="suites/bench.yaml",
                name=f"m{j}",
                backend="torch",
                device="cpu",
                precision="fp32",
                latency_ns=summarize(values),
                throughput=500.0,
                canary_ns=100_000.0,
                samples_ns=values,
            )
        )
    commit = CommitInfo(sha=PLACEHOLDER_SHA, branch="main", dirty=False)
    run = RunResult(
        commit=commit,
        environment=Environment(fingerprint, {"cpu": fingerprint}, {"host": "bench"}),
        scenarios=tuple(cells),
        created_at=PLACEHOLDER_TIME,
        perfguard_version="bench",
    )
    return dumps_json(encode_document(fingerprint, commit, [encode_launch(run)]))


def build(root: Path, fingerprints: int, commits: int, scenarios: int, samples: int) -> int:
    """Write the archive; return its size in bytes."""
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    size = 0
    for f in range(fingerprints):
        fp = f"bench-{f:02d}-{'0123456789abcdef'[f % 16] * 8}"
        folder = root / fp
        folder.mkdir(parents=True)
        text = _template(fp, scenarios, samples, seed=f)
        for c in range(commits):
            sha = f"{f:04x}{c:036x}"
            when = (start + timedelta(minutes=c)).isoformat()
            body = text.replace(PLACEHOLDER_SHA, sha).replace(PLACEHOLDER_TIME, when)
            (folder / f"{sha}.json").write_text(body, encoding="utf-8")
            size += len(body)
    return size


def old_list(root: Path) -> str:
    """The pre-header ``baseline list``: scan() then a full load of every file."""
    out = io.StringIO()
    store = DirectoryStore(root)
    problems = store.scan()
    for fp in store.fingerprints():
        found = [b for sha in store.commits(fp) if (b := store.load(fp, sha)) is not None]
        found.sort(key=lambda b: (b.created_at, b.sha))
        print(f"environment {fp}: {len(found)} baselines", file=out)
        for b in found:
            row = (b.sha[:12], b.created_at.isoformat(), len(b.launches), len(b.scenario_ids()))
            print(*row, file=out)
    print(len(problems), file=out)
    return out.getvalue()


def new_list(root: Path, *extra: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["baseline", "list", "--baseline-dir", str(root), *extra])
    assert status == 0, out.getvalue()[-2000:]
    return out.getvalue()


def _timed(label: str, func: object, *args: object) -> tuple[float, str]:
    assert callable(func)
    t0 = time.perf_counter()
    text = func(*args)
    seconds = time.perf_counter() - t0
    print(f"{label:<40} {seconds:9.1f} s", flush=True)
    return seconds, str(text)


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fingerprints", type=int, default=50)
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--scenarios", type=int, default=3)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--skip-old", action="store_true", help="time the new listing only")
    parser.add_argument("--dir", help="build the archive here (default: a temporary folder)")
    args = parser.parse_args()

    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="pg-list-"))
    root = base / "baselines"
    try:
        t0 = time.perf_counter()
        size = build(root, args.fingerprints, args.commits, args.scenarios, args.samples)
        files = args.fingerprints * args.commits
        print(
            f"{files} files ({args.fingerprints} fingerprints x {args.commits} commits, "
            f"{args.scenarios} cells x {args.samples} samples each), {size / 1e6:.0f} MB, "
            f"written in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        _, new_text = _timed("new: baseline list (headers)", new_list, root)
        one = DirectoryStore(root).fingerprints()[0]
        _timed("new: baseline list --fingerprint (1 of N)", new_list, root, "--fingerprint", one)
        listed = new_text.splitlines()
        rows = sum(1 for line in listed if line.startswith("  ") and "commit" not in line)
        assert rows == files, (rows, files)
        if not args.skip_old:
            _timed("old: scan() + full load of every file", old_list, root)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    run()
