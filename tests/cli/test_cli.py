"""The ``perfguard`` command line, run through ``main()`` on hand-built stored files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from perfguard.baseline.store import DirectoryStore
from perfguard.cli import main
from perfguard.core.stats import throughput
from perfguard.records.figures import summarize
from perfguard.records.results import CommitInfo, Environment, RunResult, ScenarioResult, Status
from perfguard.records.results import fingerprint as env_fingerprint
from perfguard.records.resultsfile import write_results

COMPARABLE = {"cpu_model": "test-cpu", "cpu_count": "2", "python": "3.11"}
OTHER_COMPARABLE = {**COMPARABLE, "cpu_model": "other-cpu"}
FP, OTHER_FP = env_fingerprint(COMPARABLE), env_fingerprint(OTHER_COMPARABLE)
SID = "suites/s.yaml::mlp"
OTHER = "suites/s.yaml::other"

SUITE = """\
models:
  m:
    factory: tinymodels:mlp
    inputs:
      x: {shape: [1, 8]}
scenarios:
  - name: mlp
    model: m
    gate: {p95: "+50%"}
"""


def sha(i: int) -> str:
    return f"{i:02x}" * 20  # distinct in the first 12 digits, the reports directory name


def day(d: int, minute: int = 0) -> str:
    return f"2024-01-{d:02d}T00:{minute:02d}:00+00:00"


def samples(n: int, seed: int, scale: float = 1.0) -> tuple[int, ...]:
    rng = np.random.default_rng(seed)
    return tuple(int(x) for x in 3e6 * scale * rng.lognormal(0.0, 0.1, n))


def make_run(
    commit: str,
    *,
    seed: int = 0,
    n: int = 500,
    scale: Mapping[str, float] | None = None,
    ids: tuple[str, ...] = (SID,),
    fp: str = FP,
    comparable: Mapping[str, str] = COMPARABLE,
    created_at: str = day(1),
    canary: float = 100_000.0,
    stable: bool = True,
) -> RunResult:
    scenarios = []
    for j, sid in enumerate(ids):
        s = samples(n, seed * 100 + j, (scale or {}).get(sid, 1.0))
        suite, _, name = sid.partition("::")
        scenarios.append(
            ScenarioResult(
                id=sid,
                suite=suite,
                name=name,
                backend="torch",
                device="cpu",
                precision="fp32",
                latency_ns=summarize(s),
                throughput=throughput(s, 1),
                canary_ns=canary,
                stable=stable,
                samples_ns=s,
            )
        )
    return RunResult(
        commit=CommitInfo(sha=commit, branch="main", dirty=False),
        environment=Environment(fp, dict(comparable), {"hostname": "box"}),
        scenarios=tuple(scenarios),
        created_at=created_at,
        perfguard_version="0.1.0",
    )


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    proc = subprocess.run(
        ["git", *ident, *args], cwd=cwd, check=True, capture_output=True, text=True
    )
    return proc.stdout.strip()


@pytest.fixture
def nogit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory that is certainly not inside a git checkout."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


# --------------------------------------------------------------------------- compare


def test_compare_unchanged_exits_0(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_results(make_run(sha(1), seed=1), tmp_path / "reports")
    cur = write_results(make_run(sha(2), seed=2), tmp_path / "reports")
    status, out, _ = run_cli(capsys, "compare", base, cur)
    lines = out.splitlines()
    assert status == 0
    assert lines[0].startswith(f"unchanged    {SID}: P95 latency unchanged")
    assert "limit +5%" in lines[0]
    assert lines[-1] == "1 scenario: 1 unchanged"


def test_compare_regression_exits_1_listed_first_with_limit(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    base = write_results(make_run(sha(1), seed=1, ids=(OTHER, SID)), reports)
    slower = make_run(sha(2), seed=2, ids=(OTHER, SID), scale={SID: 1.3})
    status, out, _ = run_cli(capsys, "compare", base, write_results(slower, reports))
    lines = out.splitlines()
    assert status == 1
    assert lines[0].startswith(f"regression   {SID}: P95 latency regressed +")
    assert f"vs baseline {sha(1)[:7]} (limit +5%)" in lines[0]
    assert lines[1].startswith(f"unchanged    {OTHER}:")
    assert lines[-1] == "2 scenarios: 1 regression, 1 unchanged"


def test_compare_reads_the_gate_from_the_suite_file(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "s.yaml").write_text(SUITE, encoding="utf-8")
    base = write_results(make_run(sha(1), seed=1), tmp_path / "reports")
    cur = write_results(make_run(sha(2), seed=2, scale={SID: 1.3}), tmp_path / "reports")

    # From the work directory the suite is not found: default P95 +5% gate.
    assert run_cli(capsys, "compare", base, cur)[0] == 1
    # With the suite's directory as rootdir (or cwd) its +50% gate applies.
    status, out, _ = run_cli(capsys, "compare", base, cur, "--rootdir", tmp_path)
    assert status == 0
    assert out.startswith(f"unchanged    {SID}: P95 latency unchanged +")
    assert "(limit +50%)" in out
    (nogit / "suites").mkdir()
    shutil.copy(tmp_path / "suites" / "s.yaml", nogit / "suites" / "s.yaml")
    assert run_cli(capsys, "compare", base, cur)[0] == 0


def test_compare_baseline_files_pool_their_launches(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = DirectoryStore(tmp_path / "baselines")
    store.save(make_run(sha(1), seed=1, n=250, created_at=day(1)))
    store.save(make_run(sha(1), seed=2, n=250, created_at=day(2)))
    store.save(make_run(sha(2), seed=3, scale={SID: 1.3}))
    base, cur = store.path_for(FP, sha(1)), store.path_for(FP, sha(2))

    status, out, _ = run_cli(capsys, "compare", base, cur, "--json")
    assert status == 1
    [verdict] = json.loads(out)
    assert verdict["scenario_id"] == SID
    assert verdict["verdict"] == "regression"
    assert verdict["baseline_commit"] == sha(1)
    assert verdict["metrics"][0]["n_baseline"] == 500  # both launches pooled
    assert verdict["metrics"][0]["n_current"] == 500

    copy = tmp_path / "elsewhere.json"  # a copy outside the archive reads the same
    shutil.copy(base, copy)
    status, out_copy, _ = run_cli(capsys, "compare", copy, cur, "--json")
    assert status == 1
    assert json.loads(out_copy) == json.loads(out)


def test_compare_other_environment_is_incomparable_and_passes(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_results(make_run(sha(1), seed=1, stable=False), tmp_path / "reports")
    slower = make_run(sha(2), seed=2, scale={SID: 1.3}, fp=OTHER_FP, comparable=OTHER_COMPARABLE)
    status, out, _ = run_cli(capsys, "compare", base, write_results(slower, tmp_path / "reports"))
    assert status == 0
    assert out.startswith(f"incomparable {SID}: environment differs")
    assert "cpu_model: test-cpu -> other-cpu" in out
    assert out.count("environment differs") == 1  # the metric's repeat of it is not shown
    assert f"; baseline {sha(1)[:7]} was measured unstable" in out  # every other message is
    assert out.splitlines()[-1] == "1 scenario: 1 incomparable"


def test_compare_normalises_by_the_canary_only_when_asked(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_results(make_run(sha(1), seed=1), tmp_path / "reports")
    # The whole host was 30% slower: model and canary alike.
    spell = make_run(sha(2), seed=2, scale={SID: 1.3}, canary=130_000.0)
    cur = write_results(spell, tmp_path / "reports")
    status, out, _ = run_cli(capsys, "compare", base, cur, "--normalise")
    assert status == 0
    assert "machine-speed normalised" in out
    assert run_cli(capsys, "compare", base, cur)[0] == 1


def test_missing_file_is_an_error_naming_the_path(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cur = write_results(make_run(sha(2)), tmp_path / "reports")
    missing = tmp_path / "reports" / "nothere" / "results.json"
    status, out, err = run_cli(capsys, "compare", missing, cur)
    assert status == 2
    assert out == ""
    assert err.startswith("perfguard: error: ")
    assert str(missing) in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "only-one.json"],
        ["compare", "a.json", "b.json", "--confidence", "1.5"],
        ["baseline"],
        ["baseline", "prune"],  # --keep is required
        ["baseline", "prune", "--keep", "-1"],
        ["baseline", "prune", "--keep", "1", "--fingerprint", FP, "--all-fingerprints"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage: perfguard" in capsys.readouterr().err


# --------------------------------------------------------------------------- baseline


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_baseline_list_and_a_corrupt_file_left_untouched(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "baselines"
    store = DirectoryStore(root)
    store.save(make_run(sha(1), seed=1, created_at=day(3)))
    store.save(make_run(sha(1), seed=2, created_at=day(3, 5)))
    store.save(make_run(sha(2), seed=3, created_at=day(2), ids=(SID, OTHER)))
    store.save(make_run(sha(3), fp=OTHER_FP, comparable=OTHER_COMPARABLE))
    corrupt = root / FP / f"{sha(4)}.json"
    corrupt.write_bytes(b'{"schema_version": 1, "kind": "perfguard-baseline", "laun')
    before = _snapshot(root)

    status, out, _ = run_cli(capsys, "baseline", "list", "--dir", root)
    assert status == 0
    lines = out.splitlines()
    assert f"environment {FP}: 2 baselines" in lines
    assert f"environment {OTHER_FP}: 1 baseline" in lines
    rows = [line.split() for line in lines]
    newer = rows.index([sha(1)[:12], "2024-01-03T00:05:00+00:00", "2", "1"])
    older = rows.index([sha(2)[:12], "2024-01-02T00:00:00+00:00", "1", "2"])
    assert older < newer  # oldest first
    assert "unreadable baseline files (1, left untouched):" in lines
    [problem] = [line for line in lines if str(corrupt) in line]
    assert "corrupt or truncated" in problem
    assert _snapshot(root) == before  # nothing written, the corrupt file byte-identical


def test_baseline_list_reads_headers_and_filters_by_fingerprint(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "baselines"
    store = DirectoryStore(root)
    store.save(make_run(sha(1), seed=1, created_at=day(3), ids=(SID, OTHER)))
    store.save(make_run(sha(2), fp=OTHER_FP, comparable=OTHER_COMPARABLE))
    # Samples broken past the header: list shows the header; show reads the file whole.
    path = store.path_for(FP, sha(1))
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: text.index('"samples_ns"')], encoding="utf-8")

    status, out, _ = run_cli(capsys, "baseline", "list", "--dir", root, "--fingerprint", FP)
    assert status == 0
    lines = out.splitlines()
    assert f"environment {FP}: 1 baseline" in lines
    assert [sha(1)[:12], "2024-01-03T00:00:00+00:00", "1", "2"] in [ln.split() for ln in lines]
    assert not any(OTHER_FP in line for line in lines)
    assert "unreadable" not in out
    status, _, err = run_cli(capsys, "baseline", "show", sha(1), "--dir", root, "--fingerprint", FP)
    assert status == 2 and "corrupt or truncated" in err

    status, _, err = run_cli(capsys, "baseline", "list", "--dir", root, "--fingerprint", "nope")
    assert status == 2
    assert "no baselines for environment nope" in err and FP in err and OTHER_FP in err


@pytest.mark.parametrize(
    "argv",
    [
        ["baseline", "list"],
        ["baseline", "show", sha(1), "--fingerprint", FP],
        ["baseline", "prune", "--keep", "0", "--fingerprint", FP, "--dry-run"],
        ["history", SID, "--fingerprint", FP],
    ],
    ids=lambda argv: "-".join(a for a in argv[:2] if not a.startswith("0")),
)
def test_every_archive_command_takes_baseline_dir_and_dir_is_a_deprecated_alias(
    argv: list[str], tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "elsewhere"
    DirectoryStore(root).save(make_run(sha(1), seed=1))
    status, out, err = run_cli(capsys, *argv, "--baseline-dir", root)
    assert status == 0, err
    assert sha(1)[:12] in out and err == ""
    status, old_out, err = run_cli(capsys, *argv, "--dir", root)
    assert status == 0 and old_out == out
    assert "perfguard: warning: --dir is deprecated" in err and "use --baseline-dir" in err


def test_baseline_show_pooled_figures(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "baselines"
    store = DirectoryStore(root)
    store.save(make_run(sha(1), seed=1, n=250, canary=100_000.0, created_at=day(1)))
    store.save(make_run(sha(1), seed=2, n=250, canary=110_000.0, created_at=day(2)))
    pooled = samples(250, 100) + samples(250, 200)
    lat = summarize(pooled)

    for ref in (sha(1), sha(1)[:10]):  # a full sha, or a unique stored prefix outside git
        status, out, _ = run_cli(
            capsys, "baseline", "show", ref, "--dir", root, "--fingerprint", FP
        )
        assert status == 0
        lines = out.splitlines()
        assert lines[0] == (
            f"baseline {sha(1)[:12]} (main), environment {FP}, 2 launches, "
            "newest 2024-01-02T00:00:00+00:00"
        )
        [row] = [line.split() for line in lines if line.startswith(SID)]
        assert row == [
            SID,
            "500",
            f"{lat.p50 / 1e6:.3f}",
            f"{lat.p95 / 1e6:.3f}",
            f"{lat.p99 / 1e6:.3f}",
            f"{throughput(pooled, 1):.1f}",
            "105.0",  # median of the launches' canaries, in us
        ]


def test_baseline_show_defaults_to_this_machine_and_names_stored_fingerprints(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "baselines"
    DirectoryStore(root).save(make_run(sha(1)))
    status, out, err = run_cli(capsys, "baseline", "show", sha(1), "--dir", root)
    assert (status, out) == (2, "")
    assert "(this machine)" in err
    assert f"pass --fingerprint with one of: {FP}" in err
    status, _, err = run_cli(capsys, "baseline", "show", sha(2), "--dir", root, "--fingerprint", FP)
    assert status == 2
    assert f"no baseline for commit {sha(2)[:12]}" in err


def test_baseline_show_resolves_a_git_ref(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    head = git(repo, "rev-parse", "HEAD")
    monkeypatch.chdir(repo)
    root = tmp_path / "baselines"
    DirectoryStore(root).save(make_run(head))
    status, out, _ = run_cli(capsys, "baseline", "show", "HEAD", "--dir", root, "--fingerprint", FP)
    assert status == 0
    assert out.startswith(f"baseline {head[:12]} (main)")


def test_prune_dry_run_keeps_files_then_prunes_the_oldest(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "baselines"
    store = DirectoryStore(root)
    for i, d in ((1, 3), (2, 1), (3, 4), (4, 2)):  # created_at order: 2, 4, 1, 3
        store.save(make_run(sha(i), seed=i, n=100, created_at=day(d)))
    corrupt = root / FP / f"{sha(5)}.json"
    corrupt.write_bytes(b"not json at all")
    before = _snapshot(root)
    args = ("baseline", "prune", "--keep", "2", "--dir", root, "--fingerprint", FP)

    status, out, _ = run_cli(capsys, *args, "--dry-run")
    assert status == 0
    assert f"environment {FP}: would delete 2, kept 2 (--keep 2)" in out
    for i in (2, 4):
        assert f"would delete {store.path_for(FP, sha(i))}" in out
    assert f"skipped unreadable {corrupt}:1: baseline file is corrupt" in out
    assert _snapshot(root) == before

    status, out, _ = run_cli(capsys, *args)
    assert status == 0
    assert f"environment {FP}: deleted 2, kept 2 (--keep 2)" in out
    assert store.commits(FP) == sorted([sha(1), sha(3), sha(5)])
    assert corrupt.read_bytes() == b"not json at all"


# --------------------------------------------------------------------------- history


def _history_json(capsys: pytest.CaptureFixture[str], root: Path) -> list[dict[str, object]]:
    status, out, _ = run_cli(capsys, "history", SID, "--dir", root, "--fingerprint", FP, "--json")
    assert status == 0
    entries: list[dict[str, object]] = json.loads(out)
    return entries


def test_history_by_created_at_outside_git_with_figures(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "baselines"
    store = DirectoryStore(root)
    plan = {1: (2, 1.0, 100_000.0), 2: (1, 1.1, 100_000.0), 3: (3, 1.2, 120_000.0)}
    for i, (d, scale, canary) in plan.items():
        store.save(make_run(sha(i), seed=i, scale={SID: scale}, canary=canary, created_at=day(d)))

    entries = _history_json(capsys, root)
    assert [e["commit"] for e in entries] == [sha(2), sha(1), sha(3)]
    for e in entries:
        i = int(str(e["commit"])[:2], 16)
        lat = summarize(samples(500, i * 100, plan[i][1]))
        assert e["created_at"] == day(plan[i][0])
        assert e["n"] == 500
        assert e["p95_ms"] == pytest.approx(lat.p95 / 1e6)
        assert e["p95_per_canary"] == pytest.approx(lat.p95 / plan[i][2])

    status, out, _ = run_cli(capsys, "history", SID, "--dir", root, "--fingerprint", FP)
    assert status == 0
    lines = out.splitlines()
    assert "by created_at (not in a git checkout)" in lines[0]
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == [sha(2)[:12], sha(1)[:12], sha(3)[:12]]
    lat3 = summarize(samples(500, 300, 1.2))
    assert rows[2][3:8] == [  # after commit and date (2 words)
        "500",
        f"{lat3.p50 / 1e6:.3f}",
        f"{lat3.p95 / 1e6:.3f}",
        f"{lat3.p99 / 1e6:.3f}",
        f"{throughput(samples(500, 300, 1.2), 1):.1f}",
    ]
    assert rows[2][-1] == f"{lat3.p95 / 120_000.0:.2f}"

    status, _, err = run_cli(
        capsys, "history", "suites/s.yaml::nope", "--dir", root, "--fingerprint", FP
    )
    assert status == 2
    assert "holds scenario 'suites/s.yaml::nope'" in err


def test_history_follows_the_ancestry_of_head_in_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    chain = []
    for name in ("one", "two", "three"):
        git(repo, "commit", "-q", "--allow-empty", "-m", name)
        chain.append(git(repo, "rev-parse", "HEAD"))
    monkeypatch.chdir(repo)
    root = tmp_path / "baselines"
    store = DirectoryStore(root)
    # created_at order (two, three, one) differs from ancestry (one, two, three);
    # sha(9) is no ancestor of HEAD and must not appear.
    for commit, d in zip([*chain, sha(9)], (3, 1, 2, 4), strict=True):
        store.save(make_run(commit, created_at=day(d)))

    assert [e["commit"] for e in _history_json(capsys, root)] == chain
    status, out, _ = run_cli(capsys, "history", SID, "--dir", root, "--fingerprint", FP)
    assert status == 0
    assert f"by ancestry of HEAD {chain[-1][:12]}" in out.splitlines()[0]


# --------------------------------------------------------------------------- env


def test_env_json_is_this_machines_fingerprint(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "env", "--json")
    assert status == 0
    data = json.loads(out)
    assert set(data) == {"fingerprint", "comparable", "recorded"}
    assert data["fingerprint"] == env_fingerprint(data["comparable"])
    assert data["comparable"]["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    status, out, _ = run_cli(capsys, "env")
    assert status == 0
    assert out.splitlines()[0] == f"fingerprint {data['fingerprint']}"


def test_env_has_the_model_libraries_of_the_current_directorys_factories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    plain = json.loads(run_cli(capsys, "env", "--json")[1])
    assert "transformers" not in plain["comparable"]
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "text.py").write_text("from transformers import BertModel\n")
    (suites / "text.yaml").write_text(
        'models:\n  m: {factory: "text:build", inputs: {x: {shape: [1, 8]}}}\n'
        "scenarios:\n  - {name: m, model: m, backend: torch}\n"
    )
    data = json.loads(run_cli(capsys, "env", "--json")[1])
    assert data["comparable"] == {
        **plain["comparable"],
        "transformers": metadata.version("transformers"),
    }
    assert data["recorded"]["model_libraries"].startswith("transformers ")


def test_env_says_why_no_gpu_is_in_the_fingerprint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    monkeypatch.setenv("PATH", "")
    status, out, _ = run_cli(capsys, "env")
    assert status == 0
    assert out.splitlines()[1] == (
        "no GPU in the fingerprint: nvidia-ml-py is not installed "
        "(pip install 'perfguard[gpu]'); nvidia-smi: not on PATH"
    )


def test_compare_refuses_a_same_run_ab_run_naming_the_file_and_the_fix(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    base = write_results(make_run(sha(1), seed=1), reports)
    ab = replace(make_run(sha(2), seed=2), mode="ab")
    ab_path = write_results(ab, reports)
    assert ab_path.parent.name == f"{sha(2)[:12]}-ab"  # beside the plain run, not over it
    for argv in ((base, ab_path), (ab_path, base)):
        status, out, err = run_cli(capsys, "compare", *argv)
        assert status == 2 and out == ""
        assert f"{ab_path}" in err and "same-run A/B" in err
        assert "perfguard report" in err  # the fix: read the run's own A/B verdicts
    # The same two plain runs compare as usual.
    plain = write_results(make_run(sha(2), seed=2), reports)
    assert plain.parent.name == sha(2)[:12] and ab_path.is_file()
    assert run_cli(capsys, "compare", base, plain)[0] == 0


def test_compare_shows_a_cell_that_failed_to_measure_as_failed(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    base = write_results(make_run(sha(1), seed=1, ids=(OTHER, SID)), reports)
    current = make_run(sha(2), seed=2, ids=(OTHER, SID))
    broken = replace(
        current.scenarios[1],
        status=Status.ERROR,
        message="RuntimeError: \x1b[31mCUDA out of memory\x1b[0m",
        latency_ns=None,
        throughput=None,
        samples_ns=(),
    )
    current = replace(current, scenarios=(current.scenarios[0], broken))
    status, out, _ = run_cli(capsys, "compare", base, write_results(current, reports))
    lines = out.splitlines()
    assert lines[0] == f"error        {SID}: RuntimeError: CUDA out of memory"  # no escapes
    assert lines[1].startswith(f"unchanged    {OTHER}:")
    assert lines[-1] == "2 scenarios: 1 unchanged, 1 error"
    assert status == 0  # exit 1 is for a regression; the error is listed first


def test_report_out_writes_where_its_help_says(
    tmp_path: Path, nogit: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = write_results(make_run(sha(1)), tmp_path / "reports")
    out_dir = tmp_path / "elsewhere"
    status, out, err = run_cli(capsys, "report", results, "--out", out_dir)
    assert status == 0, err
    assert out.strip() == f"wrote {out_dir / 'report.html'}"
    assert sorted(p.name for p in out_dir.iterdir()) == ["report.html", "summary.md"]
    status, usage, _ = run_cli(capsys, "report", "--help")
    text = " ".join(usage.split())
    assert "--out DIR write DIR/report.html and DIR/summary.md (default: beside RESULTS)" in text
