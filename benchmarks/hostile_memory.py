"""What does hostile input cost perfguard: peak memory and time of each bomb.

Each probe runs in a child process under an address-space limit (``--limit-gib``,
default 8), so an unbounded reader fails there instead of taking the machine; the
figures are the child's peak resident memory (``ru_maxrss`` from ``wait4``), its
wall time and the first line of what it printed.

1. ``alias bomb``: a suite whose model ``kwargs`` hold ten levels of
   ``&aN [*a(N-1) x9]`` (10^10 nodes once expanded), loaded by the real loader.
2. ``deep nesting``: a suite whose ``tags:`` nest 900 lists deep.
3. ``decompression bomb``: a baseline file of one launch whose every scenario's
   samples block claims a few hundred samples but inflates to ``--bomb-mib`` MiB
   (default 1536, the probe's 1.5 GiB), read by ``perfguard compare``.

The results file the bomb is built from comes from a real ``pytest --perfguard``
run of a tiny torch model in a temporary git repository (about half a minute).

This is a report, not a test: it always exits 0.

    python benchmarks/hostile_memory.py
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHUNK = 1 << 24

SUITE_HEAD = """\
models:
  lin:
    factory: tinymodel:lin
    inputs:
      x: {shape: [1, 8], dtype: float32}
"""

TINY_MODEL = """\
import torch


def lin(**kwargs):
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4).eval()
"""

TINY_SUITE = """\
models:
  lin:
    factory: tinymodel:lin
    inputs:
      x: {shape: [1, 8], dtype: float32}
scenarios:
  - name: lin
    model: lin
    backend: torch
    warmup: {iterations: 5}
    measure: {iterations: 200}
"""


@dataclass(frozen=True)
class Probe:
    name: str
    outcome: str
    peak_mib: float
    wall_s: float


SOURCE = [REPO]  # the checkout whose perfguard the probes run (``--src``)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE[0]), env.get("PYTHONPATH")]))
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("GITHUB_ACTIONS", None)
    return env


def _limited(limit_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def run_probe(name: str, code: str, cwd: Path, limit_gib: float, timeout_s: float) -> Probe:
    """Run ``code`` in a child under the memory limit: its peak RSS, wall time and
    the first line of its error (the child reports its own ``ru_maxrss``)."""
    limit = int(limit_gib * (1 << 30))
    cmd = [sys.executable, "-c", PROBE_WRAPPER, code]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=lambda: _limited(limit),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Probe(name, f"still running after {timeout_s:g} s (killed)", float("nan"), timeout_s)
    wall = time.perf_counter() - t0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    peaks = [int(ln.split()[1]) for ln in lines if ln.startswith(PEAK_MARK)]
    lines = [ln for ln in lines if not ln.startswith(PEAK_MARK)]
    outcome = lines[0].strip()[:200] if lines else "loaded without an error"
    peak = peaks[0] / 1024 if peaks else float("nan")
    return Probe(name, f"rc {proc.returncode}: {outcome}", peak, wall)


PEAK_MARK = "__PEAK_KIB__"
PROBE_WRAPPER = textwrap.dedent(
    f"""
    import resource, sys
    try:
        exec(compile(sys.argv[1], "<probe>", "exec"))
    except BaseException as exc:
        text = str(exc).strip().splitlines()
        print(f"{{type(exc).__name__}}: {{text[0] if text else ''}}")
    finally:
        print("{PEAK_MARK}", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """
)


def alias_bomb(levels: int = 10, fan: int = 9) -> str:
    lines = ["      a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    for level in range(1, levels):
        items = ", ".join([f"*a{level - 1}"] * fan)
        lines.append(f"      a{level}: &a{level} [{items}]")
    return SUITE_HEAD + "    kwargs:\n" + "\n".join(lines) + "\n" + _scenario()


def deep_tags(depth: int = 900) -> str:
    return SUITE_HEAD + _scenario() + "    tags: " + "[" * depth + "x" + "]" * depth + "\n"


def _scenario() -> str:
    return "scenarios:\n  - name: lin\n    model: lin\n    backend: torch\n"


def make_results(work: Path) -> Path:
    """A real results.json of a tiny run (in a throwaway git repository)."""
    (work / "suites").mkdir(parents=True)
    (work / "suites" / "tinymodel.py").write_text(TINY_MODEL)
    (work / "suites" / "tiny.yaml").write_text(TINY_SUITE)
    (work / "pytest.ini").write_text("[pytest]\n")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-qm", "tiny"], cwd=work, check=True)
    subprocess.run(
        [sys.executable, "-m", "pytest", "--perfguard", "-q", "-p", "no:cacheprovider"],
        cwd=work,
        env=_env(),
        check=False,
        capture_output=True,
    )
    found = sorted((work / "reports").glob("*/results.json"))
    if not found:
        raise SystemExit(f"the tiny run wrote no results.json under {work / 'reports'}")
    return found[0]


def bomb_blob(inflated_mib: int) -> str:
    """zlib of ``inflated_mib`` MiB of zeros, base64'd, built chunk by chunk."""
    comp = zlib.compressobj(9)
    parts = [comp.compress(bytes(CHUNK)) for _ in range(inflated_mib * (1 << 20) // CHUNK)]
    parts.append(comp.flush())
    return base64.b64encode(b"".join(parts)).decode("ascii")


def make_bomb(results: Path, out_dir: Path, inflated_mib: int) -> Path:
    """A baseline file of one launch whose samples inflate to ``inflated_mib`` MiB."""
    sys.path.insert(0, str(REPO))
    from perfguard.baseline.fileformat import encode_document, encode_launch
    from perfguard.records.results import RunResult

    run = RunResult.from_dict(json.loads(results.read_text()), source=str(results))
    launch = encode_launch(run)
    blob = bomb_blob(inflated_mib)
    for scenario in launch["scenarios"]:
        scenario["samples_ns"]["data"] = blob
    doc = encode_document(run.environment.fingerprint, run.commit, [launch])
    path = out_dir / run.environment.fingerprint / f"{run.commit.sha}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gib", type=float, default=8.0)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--bomb-mib", type=int, default=1536)
    parser.add_argument(
        "--src", type=Path, default=REPO, help="checkout whose perfguard to probe (e.g. an old one)"
    )
    args = parser.parse_args()
    SOURCE[0] = args.src.resolve()
    probes: list[Probe] = []
    with tempfile.TemporaryDirectory(prefix="pg-hostile-") as tmp:
        work = Path(tmp)
        for name, text in (("alias bomb", alias_bomb()), ("deep nesting", deep_tags())):
            suite = work / f"{name.replace(' ', '_')}.yaml"
            suite.write_text(text)
            code = (
                "from pathlib import Path\n"
                "from perfguard.suite.loader import load_suite\n"
                f"load_suite(Path({str(suite)!r}))\n"
            )
            probes.append(run_probe(name, code, work, args.limit_gib, args.timeout_s))
        results = make_results(work / "tiny")
        bomb = make_bomb(results, work / "baselines", args.bomb_mib)
        size_mib = bomb.stat().st_size / (1 << 20)
        code = (
            f"from perfguard.cli import main\nmain(['compare', {str(bomb)!r}, {str(results)!r}])\n"
        )
        name = f"decompression bomb ({size_mib:.1f} MiB file)"
        probes.append(run_probe(name, code, work, args.limit_gib, args.timeout_s))
    print(f"perfguard from {SOURCE[0]}; limit: {args.limit_gib:g} GiB address space per probe\n")
    print("| probe | outcome | peak RSS | wall |")
    print("|---|---|---|---|")
    for p in probes:
        print(f"| {p.name} | {p.outcome} | {p.peak_mib:.0f} MiB | {p.wall_s:.1f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
