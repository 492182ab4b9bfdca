"""The baseline archive: measured runs kept per environment and commit.

Layout: ``<root>/<fingerprint>/<commit-sha>.json``, one plain JSON file per
(environment fingerprint, commit) so a reviewer can read and diff it. A baseline
pools several process launches of the same commit, because one launch's samples
do not show the launch-to-launch noise (address layout, clocks, caches)::

    {"schema_version": 1, "kind": "perfguard-baseline", "fingerprint": "...",
     "commit": {...}, "launches": [<RunResult.to_dict(), samples encoded>, ...]}

A cell saved although its figures could not be trusted (``--perfguard-save-invalid``)
is *marked*: its ``stable`` is false, so every later comparison against it notes a
baseline "measured unstable or on a busy machine", and its scenario object carries
``"inconclusive": "<why>"`` for a reader of the file (older perfguards ignore the key).

``DirectoryStore`` is the real archive; ``MemoryStore`` is its in-memory twin
(like Hypothesis's example databases). Both share every rule here and differ only
in where the bytes live, so tests can check that they agree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import socket
import stat
import statistics
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

import filelock

from perfguard.baseline import git as gitinfo
from perfguard.baseline.fileformat import (
    FINGERPRINT_RE,
    MOVE_AWAY_FIX,
    Header,
    decode_document,
    encode_document,
    encode_launch,
    parse_time,
    read_header,
)
from perfguard.core import progress
from perfguard.core.atomicio import (
    TEMP_FILE_GLOB,
    dumps_json,
    read_capped,
    sweep_temp_files,
    write_text_atomic,
)
from perfguard.core.errors import GitError, Location, ResultsError, StoreError
from perfguard.core.policy import BASELINE_DIR, STALE_TEMP_S, TARGET_BRANCH
from perfguard.core.stats import throughput
from perfguard.core.text import one_line
from perfguard.records.figures import summarize
from perfguard.records.results import CommitInfo, RunResult, ScenarioResult
from perfguard.records.tokenfigures import pooled_tokens

DEFAULT_ROOT = Path(BASELINE_DIR)
DEFAULT_MAX_LAUNCHES = 5
LOCK_DIR = ".locks"
# Beside each lock while it is held: "pid N on HOST since TIME", for whoever waits.
HOLDER_SUFFIX = ".holder"
# The progress step a saver waiting for another's lock reports.
LOCK_STEP = "seconds waiting for the baseline lock"
# The key that marks a cell saved although inconclusive (--perfguard-save-invalid).
INCONCLUSIVE_KEY = "inconclusive"


@dataclass(frozen=True)
class StoreProblem:
    """A baseline file that could not be read; it is reported and left untouched."""

    fingerprint: str
    sha: str
    path: Path | None
    message: str


@dataclass(frozen=True)
class Baseline:
    """The launches saved for one commit in one environment (oldest launch first)."""

    fingerprint: str
    commit: CommitInfo
    launches: tuple[RunResult, ...]
    path: Path | None

    @property
    def sha(self) -> str:
        assert self.commit.sha is not None  # guaranteed by save() and the reader
        return self.commit.sha

    @property
    def created_at(self) -> datetime:
        """When the newest launch was measured: how fresh this baseline is."""
        return max(parse_time(launch.created_at) for launch in self.launches)

    def scenario_ids(self) -> list[str]:
        """Every scenario id in any launch, in first-seen order."""
        return list(dict.fromkeys(s.id for launch in self.launches for s in launch.scenarios))

    def scenario_launches(self, scenario_id: str) -> list[ScenarioResult]:
        """That scenario's result in each launch that has it, oldest first."""
        return [s for launch in self.launches for s in launch.scenarios if s.id == scenario_id]

    def pooled(self, scenario_id: str) -> ScenarioResult | None:
        """One result pooling every launch's samples, with the summary recomputed.

        Launches without samples (skipped, errored) add nothing; if no launch has
        samples, the newest launch's result is returned as is so a caller can see
        why. ``canary_ns`` is the median of the launches' canaries, so a baseline
        normalises against its typical machine speed rather than one launch's. The
        operator profile is the most recent launch's that has one (profiles are not
        pooled: each is a median over its own pass); a generative cell's token times
        are pooled like its samples.
        """
        results = self.scenario_launches(scenario_id)
        if not results:
            return None
        measured = [r for r in results if r.samples_ns]
        if not measured:
            return results[-1]
        samples = tuple(v for r in measured for v in r.samples_ns)
        canaries = [r.canary_ns for r in measured if r.canary_ns is not None]
        newest = measured[-1]
        rates = [r.throughput for r in measured if r.throughput is not None]
        if newest.load is not None:
            # Under load, throughput is requests per second of wall time, not
            # batch / mean latency: pool the launches' own figures.
            rate: float | None = float(statistics.median(rates)) if rates else None
        else:
            try:
                rate = throughput(samples, newest.batch_size)
            except ValueError:  # zero total time: keep what the launch said
                rate = newest.throughput
        return dataclasses.replace(
            newest,
            samples_ns=samples,
            latency_ns=summarize(samples),
            throughput=rate,
            canary_ns=float(statistics.median(canaries)) if canaries else None,
            stable=all(r.stable for r in measured),
            profile=next((r.profile for r in reversed(results) if r.profile is not None), None),
            tokens=pooled_tokens([r.tokens for r in measured if r.tokens is not None]),
        )


def _check_names(fingerprint: str, sha: str) -> str:
    """Validate both path components (they become file names); return the sha lower-cased."""
    if not isinstance(fingerprint, str) or not FINGERPRINT_RE.fullmatch(fingerprint):
        raise StoreError(
            f"environment fingerprint {fingerprint!r} cannot name a baseline directory",
            expected="letters, digits, '.', '_' or '-' (not starting with '.')",
            fix="use Environment.fingerprint as perfguard computes it",
        )
    low = sha.lower() if isinstance(sha, str) else ""
    if not gitinfo.FULL_SHA_RE.fullmatch(low):
        raise StoreError(
            f"{sha!r} is not a full commit sha",
            expected="40 (or 64) hexadecimal digits",
            fix="resolve the ref first, e.g. `git rev-parse <ref>`",
        )
    return low


class BaselineStore(ABC):
    """Where baselines live. Subclasses provide bytes, listing, deletion and a lock."""

    def __init__(self, *, max_launches: int = DEFAULT_MAX_LAUNCHES) -> None:
        if max_launches < 1:
            raise ValueError(f"max_launches={max_launches}; expected an integer >= 1")
        self.max_launches = max_launches
        # Unreadable files met by the helpers below (which skip them rather than fail),
        # so the plugin can tell the user; load() raises instead.
        self.problems: list[StoreProblem] = []

    # -- storage primitives --------------------------------------------------------
    @abstractmethod
    def _read_bytes(self, fingerprint: str, sha: str) -> bytes | None:
        """The stored bytes, or None when there is no such baseline."""

    @abstractmethod
    def _header(self, fingerprint: str, sha: str) -> Header | None:
        """The file's header (read_header), or None when there is no such baseline."""

    @abstractmethod
    def _write_text(self, fingerprint: str, sha: str, text: str) -> Path | None:
        """Replace the baseline atomically; return its path (None when not on disk)."""

    @abstractmethod
    def _locked(self, fingerprint: str, sha: str) -> contextlib.AbstractContextManager[None]:
        """Exclusive access to one baseline across threads and processes."""

    @abstractmethod
    def _path(self, fingerprint: str, sha: str) -> Path | None:
        """Where the baseline lives, for messages and Baseline.path."""

    @abstractmethod
    def commits(self, fingerprint: str) -> list[str]:
        """Shas that have a baseline file for ``fingerprint`` (sorted; files are not read)."""

    @abstractmethod
    def fingerprints(self) -> list[str]:
        """Fingerprints that hold at least one baseline (sorted)."""

    @abstractmethod
    def delete(self, fingerprint: str, sha: str) -> bool:
        """Remove one baseline; False when there was none."""

    # -- reading and writing ------------------------------------------------------
    def _parse(self, raw: bytes, fingerprint: str, sha: str) -> tuple[Baseline, list[Any]]:
        """Decode and validate a whole file; ResultsError (path, line, fix) otherwise."""
        path = self._path(fingerprint, sha)
        where = path if path is not None else Path(f"memory:{fingerprint}/{sha}.json")
        commit, launches, raw_launches = decode_document(raw, fingerprint, sha, where)
        return Baseline(fingerprint, commit, tuple(launches), path), raw_launches

    def load(self, fingerprint: str, sha: str) -> Baseline | None:
        """The baseline for ``sha``; None if absent. Raises ResultsError if unreadable."""
        sha = _check_names(fingerprint, sha)
        raw = self._read_bytes(fingerprint, sha)
        return None if raw is None else self._parse(raw, fingerprint, sha)[0]

    def headers(self, fingerprint: str) -> tuple[list[Header], list[StoreProblem]]:
        """Every baseline's header, oldest first, and the files whose header cannot be
        read: what ``perfguard baseline list`` shows, without reading any samples (a
        file broken only past its header is found by load() or scan())."""
        found, problems = [], []
        for sha in self.commits(fingerprint):
            try:
                header = self._header(fingerprint, sha)
            except ResultsError as exc:
                path = self._path(fingerprint, sha)
                problems.append(StoreProblem(fingerprint, sha, path, exc.message))
                continue
            if header is not None:
                found.append(header)
        return sorted(found, key=lambda h: (h.measured_at, h.sha)), problems

    def save(
        self,
        run: RunResult,
        *,
        replace: bool = False,
        inconclusive: Mapping[str, str] | None = None,
    ) -> Path | None:
        """Add ``run`` as a launch of its commit's baseline (``replace``: start afresh).

        ``inconclusive`` (``{scenario id: why}``) marks cells saved although their figures
        could not be trusted (see the module docstring).

        The read-modify-write happens under a lock, so concurrent savers all land;
        at most ``max_launches`` launches are kept, the oldest dropped. An existing
        file that cannot be read is never overwritten, not even with ``replace``:
        it may be a newer perfguard's file, or the only copy of a measurement.
        """
        if run.commit.sha is None:
            raise StoreError(
                "cannot save a baseline for a run with no commit"
                + (f" ({run.commit.note})" if run.commit.note else ""),
                expected="a run measured at a git commit",
                fix="commit first, or run inside a git checkout",
            )
        fingerprint = run.environment.fingerprint
        sha = _check_names(fingerprint, run.commit.sha)
        if sha != run.commit.sha:  # keep file name and content in agreement
            run = dataclasses.replace(run, commit=dataclasses.replace(run.commit, sha=sha))
        marks = dict(inconclusive or {})
        if marks:
            run = dataclasses.replace(
                run,
                scenarios=tuple(
                    dataclasses.replace(r, stable=False) if r.id in marks else r
                    for r in run.scenarios
                ),
            )
        launch = encode_launch(run)
        for scenario in launch["scenarios"]:
            if scenario["id"] in marks:
                scenario[INCONCLUSIVE_KEY] = marks[scenario["id"]]
        with self._locked(fingerprint, sha):
            raw = self._read_bytes(fingerprint, sha)
            # Parsed even when replacing: an unreadable file must stop the save.
            kept = [] if raw is None else self._parse(raw, fingerprint, sha)[1]
            launches = ([] if replace else kept) + [launch]
            doc = encode_document(fingerprint, run.commit, launches[-self.max_launches :])
            text = dumps_json(doc, path=self._path(fingerprint, sha))
            return self._write_text(fingerprint, sha, text)

    # -- helpers over the primitives --------------------------------------------
    def _try_load(self, fingerprint: str, sha: str) -> Baseline | None:
        """load() that records an unreadable file in ``problems`` instead of raising."""
        try:
            return self.load(fingerprint, sha)
        except ResultsError as exc:
            sha = sha.lower()
            self.problems.append(
                StoreProblem(fingerprint, sha, self._path(fingerprint, sha), exc.message)
            )
            return None

    def scan(self, fingerprint: str | None = None) -> list[StoreProblem]:
        """Read every baseline (of one fingerprint, or all) and list the unreadable ones."""
        found: list[StoreProblem] = []
        for fp in [fingerprint] if fingerprint else self.fingerprints():
            for sha in self.commits(fp):
                try:
                    self.load(fp, sha)
                except ResultsError as exc:
                    found.append(StoreProblem(fp, sha, self._path(fp, sha), exc.message))
        return found

    def nearest_ancestor(self, fingerprint: str, ancestor_shas: Sequence[str]) -> Baseline | None:
        """The first commit in ``ancestor_shas`` (nearest first) with a readable baseline."""
        have = set(self.commits(fingerprint))
        for sha in ancestor_shas:
            if sha.lower() in have:
                found = self._try_load(fingerprint, sha)
                if found is not None:
                    return found
        return None

    def _readable(self, fingerprint: str) -> list[Baseline]:
        found = (self._try_load(fingerprint, sha) for sha in self.commits(fingerprint))
        return sorted((b for b in found if b is not None), key=lambda b: (b.created_at, b.sha))

    def ordered_baselines(
        self, fingerprint: str, ancestor_shas: Sequence[str] | None = None
    ) -> list[Baseline]:
        """Readable baselines, oldest first: in ancestry order when ``ancestor_shas``
        (nearest first, as git lists them) is given, else by when last measured."""
        if ancestor_shas is None:
            return self._readable(fingerprint)
        have = set(self.commits(fingerprint))
        chosen = [sha.lower() for sha in reversed(ancestor_shas) if sha.lower() in have]
        loaded = (self._try_load(fingerprint, sha) for sha in dict.fromkeys(chosen))
        return [b for b in loaded if b is not None]

    def history(
        self, fingerprint: str, scenario_id: str, ancestor_shas: Sequence[str] | None = None
    ) -> list[tuple[str, ScenarioResult]]:
        """The pooled result per commit, oldest first (see ``ordered_baselines``)."""
        pooled = (
            (b.sha, b.pooled(scenario_id))
            for b in self.ordered_baselines(fingerprint, ancestor_shas)
        )
        return [(sha, result) for sha, result in pooled if result is not None]

    def prune(self, fingerprint: str, keep: int) -> list[str]:
        """Delete all but the ``keep`` most recently measured baselines; return deleted shas.

        Unreadable files are neither counted nor deleted: they are evidence to inspect.
        """
        if keep < 0:
            raise ValueError(f"keep={keep}; expected an integer >= 0")
        baselines = self._readable(fingerprint)
        doomed = [b.sha for b in baselines[: max(0, len(baselines) - keep)]]
        for sha in doomed:
            self.delete(fingerprint, sha)
        return doomed


class DirectoryStore(BaselineStore):
    """Baselines as files under ``root`` (created on the first save, never on read)."""

    def __init__(
        self,
        root: Path | str = DEFAULT_ROOT,
        *,
        max_launches: int = DEFAULT_MAX_LAUNCHES,
        lock_timeout_s: float = 120.0,
        lock_report_s: float = 5.0,
    ) -> None:
        super().__init__(max_launches=max_launches)
        self.root = Path(root)
        self.lock_timeout_s = lock_timeout_s
        self.lock_report_s = lock_report_s
        # Temporary files of killed savers removed by this store's saves.
        self.swept: list[Path] = []

    def _path(self, fingerprint: str, sha: str) -> Path:
        return self.root / fingerprint / f"{sha}.json"

    def path_for(self, fingerprint: str, sha: str) -> Path:
        """Where the baseline for ``sha`` is (or would be) stored."""
        return self._path(fingerprint, _check_names(fingerprint, sha))

    def _refuse_links(self, *paths: Path) -> None:
        """StoreError when any of ``paths`` (each under ``root``) is a symbolic link.

        The archive is unpacked from a branch every collaborator can push to
        (``git archive | tar -x``, a checkout), so it may hold links; following one
        would make a save write, or a read read, outside the archive.
        """
        for path in paths:
            if path.is_symlink():
                raise StoreError(
                    f"{path} is a symbolic link (to {_link_target(path)}) inside the "
                    f"baseline archive {self.root}",
                    expected="plain directories and files under the archive, no links",
                    fix=f"replace the link with a directory or file of its own (`rm {path}`): "
                    "a link could make a save write outside the archive",
                )

    def _read_bytes(self, fingerprint: str, sha: str) -> bytes | None:
        with self._opened(fingerprint, sha) as stream:
            return None if stream is None else read_capped(stream, self._path(fingerprint, sha))

    def _header(self, fingerprint: str, sha: str) -> Header | None:
        with self._opened(fingerprint, sha) as stream:
            path = self._path(fingerprint, sha)
            return None if stream is None else read_header(stream, fingerprint, sha, path)

    @contextlib.contextmanager
    def _opened(self, fingerprint: str, sha: str) -> Iterator[BinaryIO | None]:
        """The baseline file open for reading; None when absent; ResultsError when it is
        not a regular file or cannot be read (StoreError when it is a link)."""
        path = self._path(fingerprint, sha)
        self._refuse_links(path.parent, path)
        try:
            # Checked before opening: opening a FIFO would block.
            if not stat.S_ISREG(path.stat().st_mode):
                raise ResultsError(
                    "baseline is not a regular file",
                    expected="a baseline file written by perfguard",
                    fix=f"{MOVE_AWAY_FIX} (perfguard saves into that path)",
                    location=Location(path),
                )
            stream = path.open("rb")
        except (FileNotFoundError, NotADirectoryError):
            yield None
            return
        except OSError as exc:
            raise self._unreadable(path, exc) from exc
        with stream:
            try:
                yield stream
            except OSError as exc:
                raise self._unreadable(path, exc) from exc

    @staticmethod
    def _unreadable(path: Path, exc: OSError) -> ResultsError:
        return ResultsError(
            f"baseline cannot be read ({exc.strerror or exc})",
            expected="a readable file",
            fix="check that it is a file and that you may read it",
            location=Location(path),
        )

    def _write_text(self, fingerprint: str, sha: str, text: str) -> Path:
        # Called by save() under the lock on (fingerprint, sha).
        path = self._path(fingerprint, sha)
        self._refuse_links(path.parent, path)
        self._ignore_temp_files()
        self._sweep(path.parent, sha)
        write_text_atomic(path, text)
        return path

    def _sweep(self, folder: Path, sha: str) -> None:
        """Remove temporary files a killed saver left in ``folder``: this commit's at any
        age (the caller holds its lock, so no other saver is writing one), other
        commits' once older than ``STALE_TEMP_S`` (their savers hold other locks)."""
        for entry in sweep_temp_files(folder, older_than_s=STALE_TEMP_S):
            self.swept.append(entry)
        mine = f".{sha}.json."
        for entry in sweep_temp_files(folder, older_than_s=-1.0, prefix=mine):
            self.swept.append(entry)

    def _ignore_temp_files(self) -> None:
        """Keep ``<root>/.gitignore`` ignoring ``TEMP_FILE_GLOB``, so a temporary file a
        killed saver left is never committed (the CI workflow commits the archive with
        ``git add -A``); the line is added to an existing file, never replacing it."""
        ignore = self.root / ".gitignore"
        self._refuse_links(ignore)
        try:
            current = ignore.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        except (OSError, UnicodeDecodeError):
            return  # not ours to repair; the save itself does not depend on it
        if current is not None and TEMP_FILE_GLOB in current.splitlines():
            return
        # "x" when creating it, so concurrent first saves (holding other locks) write it once.
        with (
            contextlib.suppress(OSError),
            ignore.open("x" if current is None else "a", encoding="utf-8") as f,
        ):
            if current and not current.endswith("\n"):
                f.write("\n")
            f.write(f"# temporary files of an interrupted save (perfguard)\n{TEMP_FILE_GLOB}\n")

    def locked(self, fingerprint: str, what: str) -> contextlib.AbstractContextManager[None]:
        """The archive's lock on ``what`` of ``fingerprint`` (a commit's baseline, or
        another file kept beside the baselines, such as the runner's calibration), held
        while the block runs; waiting is reported as for a save."""
        return self._locked(fingerprint, what)

    @contextlib.contextmanager
    def _locked(self, fingerprint: str, sha: str) -> Iterator[None]:
        # Locks live apart from the baselines so the reviewed tree stays clean; the
        # directory ignores itself, so nobody has to edit .gitignore.
        locks = self.root / LOCK_DIR
        lock_path = locks / f"{fingerprint}-{sha}.lock"
        self._refuse_links(locks)
        locks.mkdir(parents=True, exist_ok=True)
        self._refuse_links(locks, locks / ".gitignore", lock_path)
        with (
            contextlib.suppress(FileExistsError),
            (locks / ".gitignore").open("x", encoding="utf-8") as f,
        ):
            f.write("*\n")
        lock = filelock.FileLock(lock_path, timeout=self.lock_timeout_s)
        holder = lock_path.with_name(lock_path.name + HOLDER_SUFFIX)
        self._refuse_links(holder)
        self._acquire(lock, holder, sha)
        try:
            with contextlib.suppress(OSError):  # who holds it, for those who wait
                who = f"pid {os.getpid()} on {socket.gethostname()}"
                write_text_atomic(holder, f"{who} since {_now()}\n")
            yield
        finally:
            with contextlib.suppress(OSError):
                holder.unlink()
            lock.release()

    def _acquire(self, lock: filelock.FileLock, holder: Path, sha: str) -> None:
        """Take ``lock``, reporting every ``lock_report_s`` while another saver holds it
        for how long, and who (from its holder file): to ``perfguard.core.progress``'s
        sinks, or to stderr when none listens."""
        start = time.monotonic()
        while True:
            waited = time.monotonic() - start
            left = self.lock_timeout_s - waited
            try:
                # The first try does not wait, so a held lock is reported at once.
                lock.acquire(timeout=0 if waited == 0 else max(0.0, min(self.lock_report_s, left)))
                return
            except filelock.Timeout:
                waited = time.monotonic() - start
                who = _holder(holder)
                if waited >= self.lock_timeout_s:
                    raise StoreError(
                        f"another process ({who}) held the lock on the baseline for "
                        f"{sha[:12]} for over {self.lock_timeout_s:.0f} s",
                        fix=f"wait for the other perfguard run to finish (lock: {lock.lock_file})",
                    ) from None
                event = progress.ProgressEvent(
                    LOCK_STEP, int(waited), int(self.lock_timeout_s), sha[:12], f"held by {who}"
                )
                if progress.listening():
                    progress.report(
                        event.step, event.done, event.total, cell=event.cell, detail=event.detail
                    )
                else:
                    # A save at the end of a run, or in `perfguard merge`, comes after
                    # the terminal's progress display has closed.
                    print(f"perfguard: {event.line()}", file=sys.stderr, flush=True)

    def commits(self, fingerprint: str) -> list[str]:
        folder = self.root / fingerprint
        if not FINGERPRINT_RE.fullmatch(fingerprint):
            return []
        self._refuse_links(folder)
        if not folder.is_dir():
            return []
        return sorted(
            p.name[:-5]
            for p in folder.iterdir()
            if p.name.endswith(".json")
            and gitinfo.FULL_SHA_RE.fullmatch(p.name[:-5])
            and p.is_file()
        )

    def fingerprints(self) -> list[str]:
        if not self.root.is_dir():
            return []
        self._refuse_links(self.root / LOCK_DIR)
        return sorted(
            d.name
            for d in self.root.iterdir()
            if FINGERPRINT_RE.fullmatch(d.name) and self.commits(d.name)
        )

    def delete(self, fingerprint: str, sha: str) -> bool:
        sha = _check_names(fingerprint, sha)
        path = self._path(fingerprint, sha)
        self._refuse_links(path.parent, path)
        if not path.exists():  # checked first so a delete never creates the root
            return False
        with self._locked(fingerprint, sha):
            try:
                path.unlink()
            except FileNotFoundError:
                return False
        # The emptied fingerprint folder stays: removing it would race with a
        # concurrent save into it, and listings ignore empty folders anyway.
        return True


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _holder(path: Path) -> str:
    """What the holder file says (one short line), or that nobody said."""
    try:
        with path.open("rb") as f:
            said = f.read(200).decode("utf-8", "replace").strip()
    except OSError:
        said = ""
    return one_line(said) if said else "holder unknown"


def _link_target(path: Path) -> str:
    try:
        return str(path.readlink())
    except OSError:
        return "?"


def check_save_target(root: Path | str, fingerprint: str, sha: str) -> Path:
    """Check, before anything is measured, that a save of ``sha`` into the archive at
    ``root`` can succeed; return the baseline's path.

    Raises StoreError (a name that cannot be a path, a link in the archive, a root that
    is not a directory) or ResultsError (HEAD's existing baseline is truncated, corrupt,
    of another schema version or not a regular file, which save() would refuse to
    overwrite at the end of the run). Reads only; creates nothing.
    """
    store = DirectoryStore(root)
    sha = _check_names(fingerprint, sha)
    path = store._path(fingerprint, sha)
    for place in (store.root, path.parent):
        if place.exists() and not place.is_dir():
            raise StoreError(
                f"{place} is not a directory",
                expected="the baseline archive's directory (or nothing there yet)",
                fix="point --perfguard-baseline-dir at a directory, or move the file away",
            )
    store._refuse_links(store.root / LOCK_DIR, store.root / LOCK_DIR / f"{fingerprint}-{sha}.lock")
    store.load(fingerprint, sha)  # refuses links, non-files and unreadable files
    return path


class MemoryStore(BaselineStore):
    """In-memory twin of DirectoryStore holding the same bytes; for tests and dry runs."""

    def __init__(self, *, max_launches: int = DEFAULT_MAX_LAUNCHES) -> None:
        super().__init__(max_launches=max_launches)
        self.files: dict[tuple[str, str], bytes] = {}
        self._lock = threading.RLock()

    def _path(self, fingerprint: str, sha: str) -> None:
        return None

    def _read_bytes(self, fingerprint: str, sha: str) -> bytes | None:
        return self.files.get((fingerprint, sha))

    def _header(self, fingerprint: str, sha: str) -> Header | None:
        raw = self.files.get((fingerprint, sha))
        where = Path(f"memory:{fingerprint}/{sha}.json")
        return None if raw is None else read_header(io.BytesIO(raw), fingerprint, sha, where)

    def _write_text(self, fingerprint: str, sha: str, text: str) -> None:
        self.files[(fingerprint, sha)] = text.encode("utf-8")

    def locked(self, fingerprint: str, what: str) -> contextlib.AbstractContextManager[None]:
        """The archive's lock on ``what`` of ``fingerprint`` (a commit's baseline, or
        another file kept beside the baselines, such as the runner's calibration), held
        while the block runs; waiting is reported as for a save."""
        return self._locked(fingerprint, what)

    @contextlib.contextmanager
    def _locked(self, fingerprint: str, sha: str) -> Iterator[None]:
        with self._lock:
            yield

    def commits(self, fingerprint: str) -> list[str]:
        return sorted(sha for fp, sha in self.files if fp == fingerprint)

    def fingerprints(self) -> list[str]:
        return sorted({fp for fp, _ in self.files})

    def delete(self, fingerprint: str, sha: str) -> bool:
        sha = _check_names(fingerprint, sha)
        with self._lock:
            return self.files.pop((fingerprint, sha), None) is not None


def select_auto_baseline(
    store: BaselineStore,
    fingerprint: str,
    cwd: Path,
    target_branch: str = TARGET_BRANCH,
    environ: Mapping[str, str] | None = None,
) -> tuple[Baseline | None, str]:
    """Pick the baseline for ``--perfguard-baseline=auto`` and say how it was chosen.

    HEAD itself is skipped (it is the commit being measured). On a branch off
    ``target_branch`` the merge-base and its ancestors come first: a change is
    judged against what it will merge into, not against its own earlier commits;
    the branch's own commits are the fallback. A shallow clone that finds no baseline
    is a hint locally, but a GitError in CI (``environ``: CI or GITHUB_ACTIONS is
    "true"): there every cell would pass as ``new``, a gate that never gated.
    """
    if gitinfo.repo_root(cwd) is None:
        return None, f"{cwd} is not inside a git checkout, so it has no ancestors to compare with"
    try:
        chain = gitinfo.ancestors(cwd, "HEAD")
    except GitError:
        chain = []
    if not chain:
        return None, "repository has no commits yet"
    head, problems_before = chain[0], len(store.problems)

    base, label = None, target_branch
    for ref in (target_branch, f"origin/{target_branch}"):
        with contextlib.suppress(GitError):
            base, label = gitinfo.merge_base(cwd, "HEAD", gitinfo.resolve(cwd, ref)), ref
            break
    tiers: list[tuple[list[str], str]] = [(chain[1:], "")]
    if base is not None and base != head:  # HEAD is not on the target branch
        tiers = [
            (gitinfo.ancestors(cwd, base), f"merge-base with {label}"),
            (chain[1:], f"on this branch; none at or below the merge-base with {label}"),
        ]
    for shas, how in tiers:
        found = store.nearest_ancestor(fingerprint, shas)
        if found is None:
            continue
        if how.startswith("merge-base") and found.sha != base:
            how = "below the " + how
        detail = ", ".join(part for part in (_how_far(cwd, head, found.sha), how) if part)
        reason = f"nearest ancestor with a baseline: {found.sha[:7]} ({detail})"
        return found, reason + _skipped_note(store.problems[problems_before:])

    searched = len({sha for shas, _ in tiers for sha in shas})
    shallow = gitinfo.is_shallow(cwd)
    if searched == 0 and not shallow:
        reason = f"HEAD ({head[:7]}) has no parent commit to compare with"
    elif not store.commits(fingerprint):
        reason = f"no baseline has been saved for environment {fingerprint} yet"
    else:
        reason = f"no baseline for environment {fingerprint} among {searched} ancestors of HEAD"
    reason += _skipped_note(store.problems[problems_before:])
    if shallow:
        env = os.environ if environ is None else environ
        if "true" in (env.get("CI"), env.get("GITHUB_ACTIONS")):
            raise GitError(
                f"a shallow clone in CI found no baseline: {reason}",
                expected="the history the baselines were saved along (every cell would "
                "otherwise pass as `new`)",
                fix=gitinfo.SHALLOW_FIX,
            )
        reason += f"; this is a shallow clone: {gitinfo.SHALLOW_FIX}"
    return None, reason


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _how_far(cwd: Path, head: str, sha: str) -> str | None:
    """``sha``'s distance from ``head`` along the shortest path over parents, and the
    merges' other parents that path takes: "2 commits back, via the 2nd parent"."""
    with contextlib.suppress(GitError):
        path = gitinfo.parent_path(cwd, head, sha)
        if path is not None:
            back = f"{len(path)} commit{'s' if len(path) != 1 else ''} back"
            turns = [
                f"the {_ordinal(n)} parent" + ("" if commit == head else f" of {commit[:7]}")
                for commit, n in path
                if n > 1
            ]
            return back + (f", via {', then '.join(turns)}" if turns else "")
    return None


def _skipped_note(skipped: Sequence[StoreProblem]) -> str:
    if not skipped:
        return ""
    return "; skipped unreadable baselines: " + ", ".join(str(p.path or p.sha) for p in skipped)
