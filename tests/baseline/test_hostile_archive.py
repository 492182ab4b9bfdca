"""An archive that trusts none of its files (issue 15).

The baselines branch is writable by every collaborator and unpacked with ``tar -x``, and
results and comparison files travel as CI artifacts: each test here is one way such a
file or directory was found to hurt (a link followed out of the archive, a decompression
bomb, a value no perfguard writes reaching a report or a file name, a traceback instead
of a message, litter committed by the workflow), and checks that it is now refused with
a message naming the file, or cleaned up.

Modules are imported whole (``store.check_save_target``) so that, run against an older
perfguard, each test fails on its own rather than the file failing to import.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from perfguard import cli
from perfguard.baseline import read as baseline_read
from perfguard.baseline import store as store_mod
from perfguard.core import policy
from perfguard.core.errors import PerfguardError, ResultsError, StoreError
from perfguard.core.stats import throughput
from perfguard.judge import stored as judge_stored
from perfguard.judge.verdict import MetricVerdict, ScenarioVerdict, VerdictKind
from perfguard.records import arrays, resultsfile
from perfguard.records.figures import summarize
from perfguard.records.results import CommitInfo, RunResult, ScenarioResult
from perfguard.records.resultsfile import read_results, write_results
from perfguard.report import cli_report
from perfguard.report import comparison as comparison_mod
from perfguard.report.comparison import comparison_path, read_comparison, write_comparison
from tests.helpers.envs import fp, stored_env
from tests.helpers.paths import RECORDS

FP = fp()
SID = "suites/lin.yaml::lin[torch-cpu-fp32]"
SHA_A, SHA_B = "a" * 40, "b" * 40


def a_run(sha: str, *, n: int = 200, seed: int = 0) -> RunResult:
    samples = tuple(1_000_000 + (i * 7919 + seed * 31) % 50_000 for i in range(n))
    scenario = ScenarioResult(
        id=SID,
        suite="suites/lin.yaml",
        name="lin[torch-cpu-fp32]",
        backend="torch",
        device="cpu",
        precision="fp32",
        latency_ns=summarize(samples),
        throughput=throughput(samples, 1),
        canary_ns=100_000.0,
        samples_ns=samples,
    )
    return RunResult(
        commit=CommitInfo(sha=sha, branch="main", dirty=False),
        environment=stored_env(hostname="box"),
        scenarios=(scenario,),
        created_at="2026-01-01T00:00:00Z",
        perfguard_version="0.1.0",
    )


def results_file(tmp_path: Path, sha: str = SHA_B) -> Path:
    return write_results(a_run(sha, seed=1), tmp_path / "reports")


def baseline_file(root: Path, sha: str = SHA_A) -> Path:
    path = store_mod.DirectoryStore(root).save(a_run(sha))
    assert path is not None
    return path


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str], *names: str) -> str:
    """Run the CLI: exit status 2, one ``perfguard: error:`` line naming the file."""
    status = cli.main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfguard: error: "), err
    assert "Traceback" not in err
    assert any(name in lines[0] for name in names), (names, err)
    return lines[0]


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# -- links in the archive ------------------------------------------------------------


def test_a_symlinked_fingerprint_directory_is_refused_on_save_and_on_read(
    tmp_path: Path,
) -> None:
    root, elsewhere = tmp_path / "baselines", tmp_path / "elsewhere"
    elsewhere.mkdir()
    baseline_file(tmp_path / "donor")
    shutil.copy(tmp_path / "donor" / FP / f"{SHA_A}.json", elsewhere / f"{SHA_A}.json")
    root.mkdir()
    (root / FP).symlink_to(elsewhere, target_is_directory=True)
    before = listing(elsewhere)
    store = store_mod.DirectoryStore(root)
    with pytest.raises(StoreError, match="symbolic link") as info:
        store.save(a_run(SHA_B))
    assert str(root / FP) in str(info.value) and "replace the link" in str(info.value)
    assert listing(elsewhere) == before  # nothing written through the link
    with pytest.raises(StoreError, match="symbolic link"):
        store.load(FP, SHA_A)
    with pytest.raises(StoreError, match="symbolic link"):
        store.fingerprints()


def test_a_symlinked_locks_directory_is_refused(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "baselines", tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir()
    (root / ".locks").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(StoreError, match="symbolic link") as info:
        store_mod.DirectoryStore(root).save(a_run(SHA_A))
    assert str(root / ".locks") in str(info.value)
    assert listing(elsewhere) == set()  # no lock file, no .gitignore written there


def test_a_symlinked_lock_file_or_baseline_file_is_refused(tmp_path: Path) -> None:
    root, victim = tmp_path / "baselines", tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (root / ".locks").mkdir(parents=True)
    (root / ".locks" / f"{FP}-{SHA_A}.lock").symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        store_mod.DirectoryStore(root).save(a_run(SHA_A))
    assert victim.read_text() == "precious\n"  # not truncated by opening the lock
    (root / FP).mkdir()
    (root / FP / f"{SHA_B}.json").symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        store_mod.DirectoryStore(root).load(FP, SHA_B)


# -- bounded decompression -------------------------------------------------------------


def bomb_blob(declared: int, inflated_bytes: int) -> dict[str, Any]:
    data = zlib.compress(bytes(inflated_bytes), 9)
    return {
        "encoding": arrays.SAMPLES_ENCODING,
        "n": declared,
        "data": base64.b64encode(data).decode(),
    }


def test_a_decompression_bomb_in_a_baseline_fails_fast_without_inflating(tmp_path: Path) -> None:
    path = baseline_file(tmp_path / "baselines")
    # 128 MiB of zeros compress to ~128 KiB; the file declares 200 samples (1600 bytes).
    edit_json(
        path,
        lambda d: d["launches"][0]["scenarios"][0].update(samples_ns=bomb_blob(200, 128 << 20)),
    )
    tracemalloc.start()
    try:
        with pytest.raises(ResultsError, match="n=200 but its data holds more") as info:
            store_mod.DirectoryStore(tmp_path / "baselines").load(FP, SHA_A)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value)
    assert peak < 32 << 20, f"peak {peak / 2**20:.0f} MiB: the blob was inflated"


def test_a_samples_block_declaring_too_many_samples_is_refused_before_inflating() -> None:
    blob = bomb_blob(arrays.MAX_STORED_SAMPLES + 1, 1024)
    with pytest.raises(ResultsError, match="over the limit"):
        arrays.decode_samples(blob, source="x.json")


def test_negative_samples_are_refused() -> None:
    blob = arrays.encode_samples([5, -3, 7])
    with pytest.raises(ResultsError, match="negative latency"):
        arrays.decode_samples(blob, source="x.json")
    with pytest.raises(ResultsError, match=r"x\.json"):
        arrays.decode_samples([5, -3], source="x.json")


def test_a_golden_output_bomb_is_refused() -> None:
    data = base64.b64encode(zlib.compress(bytes(64 << 20), 9)).decode()
    blob = {"dtype": "float32", "shape": [4], "encoding": arrays.ENCODING, "data": data}
    with pytest.raises(ResultsError, match="cannot be decoded"):
        arrays.decode_array(blob, source="x.json")
    huge = {**blob, "shape": [1 << 20, 1 << 20]}
    with pytest.raises(ResultsError, match="over the limit"):
        arrays.decode_array(huge, source="x.json")


# -- hostile values in results.json, baselines and comparison.json -------------------------

HOSTILE: dict[str, Callable[[dict[str, Any]], None]] = {
    "path-like sha": lambda d: d["commit"].update(sha="../../../../x"),
    "path-like fingerprint": lambda d: d["environment"].update(fingerprint="../../xx"),
    "negative p95": lambda d: d["scenarios"][0]["latency_ns"].update(p95=-1),
    "unknown status": lambda d: d["scenarios"][0].update(status="weird"),
    "scenarios not a list": lambda d: d.update(scenarios="nope"),
    "scenario not an object": lambda d: d.update(scenarios=["nope"]),
    "tags not a list": lambda d: d["scenarios"][0].update(tags=5),
    "string figure": lambda d: d["scenarios"][0].update(throughput="fast"),
    "boolean count": lambda d: d["scenarios"][0].update(batch_size=True),
    "comparable not a map": lambda d: d["environment"].update(comparable=[1]),
}


@pytest.mark.parametrize("mutate", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_results_file_is_refused_by_name(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mutate: Callable[[dict[str, Any]], None],
) -> None:
    monkeypatch.chdir(tmp_path)
    base, current = baseline_file(tmp_path / "baselines"), results_file(tmp_path)
    edit_json(current, mutate)
    with pytest.raises(ResultsError) as info:
        read_results(current)
    assert str(current) in str(info.value)
    one_error_line(capsys, ["compare", str(base), str(current)], str(current))
    one_error_line(capsys, ["report", str(current)], str(current))
    one_error_line(capsys, ["export", "--format", "pytest-benchmark", str(current)], str(current))


@pytest.mark.parametrize("mutate", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_baseline_launch_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Callable[[dict[str, Any]], None]
) -> None:
    path = baseline_file(tmp_path / "baselines")
    edit_json(path, lambda d: mutate(d["launches"][0]))
    with pytest.raises(ResultsError) as info:
        store_mod.DirectoryStore(tmp_path / "baselines").load(FP, SHA_A)
    assert str(path) in str(info.value)
    current = results_file(tmp_path)
    one_error_line(capsys, ["compare", str(path), str(current)], str(path))


@pytest.mark.parametrize(
    ("field", "value"),
    [("fingerprint", "../../xx"), ("commit", {"sha": "../../../../x", "branch": None})],
)
def test_a_baseline_file_naming_a_path_is_refused(tmp_path: Path, field: str, value: Any) -> None:
    # Read by path (--perfguard-baseline=FILE, compare, report), a baseline is checked
    # against the names it states itself: those must be names, not paths.
    path = baseline_file(tmp_path / "baselines")
    edit_json(path, lambda d: d.update({field: value}))
    with pytest.raises(ResultsError, match=r"\.\./") as info:
        baseline_read.read_baseline_file(path)
    assert str(path) in str(info.value)


RAW: dict[str, Callable[[str], str]] = {
    "1e400 (reads as inf)": lambda t: t.replace('"throughput": ', '"throughput": 1e400, "x": ', 1),
    "NaN": lambda t: t.replace('"throughput": ', '"throughput": NaN, "x": ', 1),
    "100000 brackets": lambda t: "[" * 100_000,
    "deep but parseable": lambda t: t.replace(
        '"runtime": ', '"runtime": ' + "[" * 200 + "]" * 200 + ', "x": ', 1
    ),
    "a 40-digit integer": lambda t: t.replace('"batch_size": 1', '"batch_size": ' + "9" * 40, 1),
    "truncated": lambda t: t[: len(t) // 2],
}


@pytest.mark.parametrize("edit", list(RAW.values()), ids=list(RAW))
def test_hostile_json_text_is_refused_by_name(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    edit: Callable[[str], str],
) -> None:
    monkeypatch.chdir(tmp_path)
    base, current = baseline_file(tmp_path / "baselines"), results_file(tmp_path)
    for path in (base, current):
        text = path.read_text(encoding="utf-8")
        path.write_text(edit(text), encoding="utf-8")
        assert path.read_text(encoding="utf-8") != text
    with pytest.raises(ResultsError) as info:
        read_results(current)
    assert str(current) in str(info.value)
    with pytest.raises(ResultsError) as info:
        store_mod.DirectoryStore(tmp_path / "baselines").load(FP, SHA_A)
    assert str(base) in str(info.value)
    one_error_line(capsys, ["compare", str(base), str(current)], str(base), str(current))
    one_error_line(capsys, ["report", str(current)], str(current))


def a_comparison(tmp_path: Path) -> tuple[Path, Path]:
    current = results_file(tmp_path)
    metric = MetricVerdict(
        metric="p95",
        verdict=VerdictKind.UNCHANGED,
        message="P95 unchanged",
        rule="bound",
        baseline=1e6,
        current=1e6,
        ratio=1.0,
        ratio_raw=1.0,
        lower=0.99,
        upper=1.01,
    )
    verdict = ScenarioVerdict(SID, VerdictKind.UNCHANGED, (metric,), baseline_commit=SHA_A)
    path = comparison_path(current)
    write_comparison(path, baseline={"commit": SHA_A, "how": "test"}, gate=True, verdicts=[verdict])
    read_comparison(path)  # valid as written
    return current, path


COMPARISON: dict[str, Callable[[dict[str, Any]], None]] = {
    "unknown verdict": lambda d: d["verdicts"][0].update(verdict="weird"),
    "negative ratio": lambda d: d["verdicts"][0]["metrics"][0].update(ratio=-1),
    "path-like baseline commit": lambda d: d["verdicts"][0].update(baseline_commit="../x"),
    "verdicts not a list": lambda d: d.update(verdicts="nope"),
    "metric not an object": lambda d: d["verdicts"][0].update(metrics=[3]),
    "string figure": lambda d: d["verdicts"][0]["metrics"][0].update(current="big"),
    "baseline not an object": lambda d: d.update(baseline=[1]),
    "exit status a word": lambda d: d.update(exit_status="bad"),
    "env_diff a list": lambda d: d["verdicts"][0].update(env_diff=[1]),
}


@pytest.mark.parametrize("mutate", list(COMPARISON.values()), ids=list(COMPARISON))
def test_a_hostile_comparison_file_is_refused_by_name(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mutate: Callable[[dict[str, Any]], None],
) -> None:
    monkeypatch.chdir(tmp_path)
    current, path = a_comparison(tmp_path)
    edit_json(path, mutate)
    with pytest.raises(ResultsError) as info:
        cli_report.report_command(current, None, None)
    assert str(path) in str(info.value)
    one_error_line(capsys, ["report", str(current)], str(path))


def test_a_stored_scenario_id_never_reads_a_suite_outside_the_rootdir(tmp_path: Path) -> None:
    (tmp_path / "outside.yaml").write_text("models: [unclosed\n")
    root = tmp_path / "project"
    root.mkdir()
    assert judge_stored.suite_gates(["../outside.yaml::x[torch-cpu-fp32]"], root) == {}


# -- paths and sizes a stored file names (issue 24) -------------------------------------------


def comparison_naming(tmp_path: Path, baseline: Path) -> tuple[Path, Path]:
    """A run whose comparison.json names ``baseline`` as the file it was judged against."""
    current, path = a_comparison(tmp_path)
    edit_json(path, lambda d: d["baseline"].update(path=str(baseline)))
    return current, path


def spy_on_baseline_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The baseline files ``perfguard report`` reads, as it reads them."""
    read: list[Path] = []

    def reading(path: Path) -> Any:
        read.append(Path(path))
        return baseline_read.read_baseline_file(path)

    monkeypatch.setattr(cli_report, "read_baseline_file", reading)
    return read


def test_report_never_follows_a_stored_baseline_path_out_of_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # comparison.json travels as a CI artifact: its baseline.path may name any file of the
    # user's, which `perfguard report` used to read whole.
    monkeypatch.chdir(tmp_path)
    read = spy_on_baseline_reads(monkeypatch)
    elsewhere = baseline_file(tmp_path / "elsewhere")
    current, comparison = comparison_naming(tmp_path, elsewhere)
    with pytest.raises(ResultsError) as info:
        cli_report.report_command(current, None, None)
    message = str(info.value)
    assert str(comparison) in message and str(elsewhere) in message
    assert "outside the baseline archive" in message
    assert str(Path("baselines")) in message  # what was expected
    assert "--baseline-dir" in message and "--baseline FILE" in message  # the fix
    one_error_line(capsys, ["report", str(current)], str(comparison))
    assert read == []
    # The fix works: named, the archive it is in is the archive in use, and it is read.
    assert cli.main(["report", str(current), "--baseline-dir", str(tmp_path / "elsewhere")]) == 0
    assert read == [elsewhere]


def test_a_link_in_the_archive_does_not_carry_a_stored_path_out_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    outside = baseline_file(tmp_path / "elsewhere")
    (tmp_path / "baselines").mkdir()
    link = tmp_path / "baselines" / "b.json"
    link.symlink_to(outside)
    read = spy_on_baseline_reads(monkeypatch)
    current, _ = comparison_naming(tmp_path, link)
    with pytest.raises(ResultsError, match="outside the baseline archive") as info:
        cli_report.report_command(current, None, None)
    assert str(outside) in str(info.value)  # where the link leads
    assert read == []


def sparse_file(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk space (and no time) to make."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)
    return path


def just_too_big() -> int:
    """One byte over the stored-file cap (looked up when a test runs: see the docstring)."""
    return int(policy.MAX_STORED_FILE_BYTES) + 1


def assert_too_large(info: pytest.ExceptionInfo[ResultsError], path: Path) -> None:
    message = str(info.value)
    assert str(path) in message, message
    assert f"{just_too_big()} bytes" in message, message
    assert str(policy.MAX_STORED_FILE_BYTES) in message, message
    assert "Fix:" in message


STORED_READERS: dict[str, Callable[[Path], object]] = {
    "results.json": read_results,
    "comparison.json": read_comparison,
    "a baseline or results file": baseline_read.read_baseline_file,
}


@pytest.mark.parametrize("reader", list(STORED_READERS.values()), ids=list(STORED_READERS))
def test_a_stored_file_over_the_size_cap_is_refused_without_reading_it(
    tmp_path: Path, reader: Callable[[Path], object]
) -> None:
    big = sparse_file(tmp_path / "big.json", just_too_big())
    tracemalloc.start()
    try:
        with pytest.raises(ResultsError) as info:
            reader(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert_too_large(info, big)
    assert peak < 32 << 20, f"peak {peak / 2**20:.0f} MiB: the file was read"


def test_an_archived_baseline_over_the_size_cap_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "baselines"
    path = baseline_file(root)
    sparse_file(path, just_too_big())  # the file grew to 1 GiB and a byte
    with pytest.raises(ResultsError) as info:
        store_mod.DirectoryStore(root).load(FP, SHA_A)
    assert_too_large(info, path)
    assert [p.sha for p in store_mod.DirectoryStore(root).scan(FP)] == [SHA_A]
    one_error_line(capsys, ["compare", str(path), str(results_file(tmp_path))], str(path))


def test_report_with_a_huge_stored_baseline_renders_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The case: a 6 GB file named by comparison.json ended in a MemoryError.
    monkeypatch.chdir(tmp_path)
    big = sparse_file(tmp_path / "baselines" / FP / f"{SHA_A}.json", 6 * 1024**3)
    current, _ = comparison_naming(tmp_path, big)
    tracemalloc.start()
    try:
        html = cli_report.report_command(current, None, None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert html.is_file()
    assert peak < 256 << 20, f"peak {peak / 2**20:.0f} MiB: the file was read"


# -- the save target, checked before measuring ---------------------------------------------


def test_check_save_target_passes_a_fresh_or_readable_archive(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    assert store_mod.check_save_target(root, FP, SHA_A) == root / FP / f"{SHA_A}.json"
    assert not root.exists()  # it creates nothing
    path = baseline_file(root)
    assert store_mod.check_save_target(root, FP, SHA_A.upper()) == path


@pytest.mark.parametrize("damage", ["truncated", "directory", "empty", "newer"])
def test_check_save_target_refuses_what_the_save_would_refuse(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "baselines"
    path = baseline_file(root)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:300])
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        edit_json(path, lambda d: d.update(schema_version=99))
    with pytest.raises(ResultsError) as info:
        store_mod.check_save_target(root, FP, SHA_A)
    assert str(path) in str(info.value)
    # ...and what the save at the end of the run would have hit:
    with pytest.raises(PerfguardError):
        store_mod.DirectoryStore(root).save(a_run(SHA_A))


def test_check_save_target_refuses_a_file_for_a_root_and_links(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        store_mod.check_save_target(tmp_path / "file", FP, SHA_A)
    root = tmp_path / "baselines"
    root.mkdir()
    (root / FP).symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(StoreError, match="symbolic link"):
        store_mod.check_save_target(root, FP, SHA_A)
    with pytest.raises(StoreError, match="full commit sha"):
        store_mod.check_save_target(root, FP, "../../x")


# -- temporary files of a killed saver ------------------------------------------------------


def test_a_killed_savers_temporary_files_are_swept_by_the_next_save(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    folder = root / FP
    folder.mkdir(parents=True)
    old = time.time() - 3600
    mine = folder / f".{SHA_A}.json.k1ll3d_0.tmp"  # this commit's: swept under its lock
    stale = folder / f".{SHA_B}.json.k1ll3d_1.tmp"  # another commit's, an hour old
    fresh = folder / f".{SHA_B}.json.w0rk1ng2.tmp"  # another saver may be writing it now
    keep = folder / "notes.tmp"  # not the temporary-file pattern
    for path in (mine, stale, fresh, keep):
        path.write_bytes(b"x" * 4096)
    os.utime(stale, (old, old))
    store = store_mod.DirectoryStore(root)
    store.save(a_run(SHA_A))
    assert not mine.exists() and not stale.exists()
    assert fresh.exists() and keep.exists()
    assert sorted(store.swept) == sorted([mine, stale])


def test_temporary_files_are_ignored_by_git_in_the_archive(tmp_path: Path) -> None:
    # The workflow commits the archive with `git add -A` in baselines/ as the work tree.
    root = tmp_path / "baselines"
    store_mod.DirectoryStore(root).save(a_run(SHA_A))
    litter = root / FP / f".{SHA_A}.json.abcd1234.tmp"
    litter.write_bytes(b"x")
    git = ["git", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(root)], check=True)
    subprocess.run([*git, "-C", str(root), "add", "-A", "."], check=True)
    staged = subprocess.run(
        [*git, "-C", str(root), "diff", "--cached", "--name-only"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert f"{FP}/{SHA_A}.json" in staged
    assert not any(name.endswith(".tmp") for name in staged), staged
    # An existing .gitignore is kept and extended, once.
    (root / ".gitignore").write_text("custom\n")
    store_mod.DirectoryStore(root).save(a_run(SHA_B))
    store_mod.DirectoryStore(root).save(a_run(SHA_B))
    lines = (root / ".gitignore").read_text().splitlines()
    assert lines[0] == "custom" and lines.count(".*.tmp") == 1


def test_the_comparison_schema_describes_every_recorded_comparison_file() -> None:
    # The schema read-side checks use is a real JSON Schema: every comparison.json
    # perfguard recorded (A/B, load, accuracy, crashes) is valid against it in full.
    jsonschema = pytest.importorskip("jsonschema")
    schema = resultsfile.load_schema(comparison_mod.SCHEMA_RESOURCE)
    jsonschema.Draft202012Validator.check_schema(schema)
    records = sorted(RECORDS.glob("*/comparison.json"))
    assert records
    for path in records:
        jsonschema.Draft202012Validator(schema).validate(json.loads(path.read_text()))


# Found by tests/core/test_fuzz_stored.py: the load figures' nested objects were open in the
# schema, and `perfguard report` rendered what they held (a TypeError or ValueError
# traceback instead of an error line).
FUZZ_FOUND: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "batching capacity a list": (
        "load_batching",
        lambda d: d["scenarios"][0]["load"]["batching"].update(capacity_unbatched=[1]),
    ),
    "batching gain a list": (
        "load_batching",
        lambda d: d["scenarios"][0]["load"]["batching"].update(gain=["nope"]),
    ),
    "batch size count a path": (
        "load_batching",
        lambda d: d["scenarios"][0]["load"]["batching"]["sizes"].update({"4": "../x"}),
    ),
    "batch size not a number": (
        "load_batching",
        lambda d: d["scenarios"][0]["load"]["batching"].update(sizes={"four": 1}),
    ),
    "slo step latency a word": (
        "load_slo",
        lambda d: d["scenarios"][1]["load"]["slo"]["steps"][0].update(p_ms="weird"),
    ),
}


@pytest.mark.parametrize("record, mutate", list(FUZZ_FOUND.values()), ids=list(FUZZ_FOUND))
def test_hostile_load_figures_are_refused_not_rendered(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record: str,
    mutate: Callable[[dict[str, Any]], None],
) -> None:
    shutil.copytree(RECORDS / record, tmp_path / record)
    results = tmp_path / record / "results.json"
    edit_json(results, mutate)
    one_error_line(capsys, ["report", str(results), "--out", str(tmp_path / "out")], str(results))
    assert not (tmp_path / "out").exists()
