"""Archiving a run as its commit's baseline, and when that is refused.

Before anything runs, :func:`check_can_save` refuses ``--perfguard-save`` without a
commit or with uncommitted changes, and :func:`untracked_refusal` when untracked files
lie where the run's code and suites come from. After the run, :class:`Saver` refuses a
run with a cell whose figures cannot be trusted as a baseline (contended or unstable
after its rounds), unless ``--perfguard-save-invalid``: then saved with those cells
marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfguard.baseline.store import DirectoryStore
from perfguard.core.errors import StoreError
from perfguard.judge.remeasure import run_problem
from perfguard.records.results import CommitInfo, RunResult


@dataclass(frozen=True)
class SaveOptions:
    """How a command that saves spells its options, for the fixes its refusals name:
    ``pytest --perfguard-save`` (``PLUGIN_SAVE``) and ``perfguard baseline save``
    (``COMMAND_SAVE``) follow one set of rules and say so in their own words."""

    save: str
    allow_dirty: str
    contention_limit: str
    save_invalid: str
    dirty: str  # what a dirty commit means to it
    clean: str  # how to save a clean run instead


PLUGIN_SAVE = SaveOptions(
    save="--perfguard-save",
    dirty="the working tree has uncommitted changes",
    clean="commit or stash them",
    allow_dirty="--perfguard-allow-dirty",
    contention_limit="--perfguard-contention-limit",
    save_invalid="--perfguard-save-invalid",
)
COMMAND_SAVE = SaveOptions(
    save="perfguard baseline save",
    dirty="the run was measured in a working tree with uncommitted changes",
    clean="commit them and measure again",
    allow_dirty="--allow-dirty",
    contention_limit="--contention-limit",
    save_invalid="--allow-inconclusive",
)


def check_can_save(
    commit: CommitInfo, *, save: bool, allow_dirty: bool, options: SaveOptions = PLUGIN_SAVE
) -> str | None:
    """Why a save must be refused before anything runs (``perfguard baseline save``:
    before a measured run is archived), or None."""
    if not save:
        return None
    if commit.sha is None:
        return (
            f"{options.save} needs a commit to file the baseline under, but found "
            f"{commit.note or 'no commit'}; commit first, or run inside a git checkout"
        )
    if commit.dirty and not allow_dirty:
        said = f" ({commit.note})" if commit.note else ""
        return (
            f"{options.save} refused: {options.dirty}{said}, so the "
            f"baseline would not describe commit {commit.sha[:12]}; {options.clean}, "
            f"or pass {options.allow_dirty}"
        )
    return None


#: Untracked files named in a refused save, at most (then how many more).
_UNTRACKED_SHOWN = 5


def untracked_refusal(untracked: Sequence[str], sha: str | None) -> str | None:
    """Why ``--perfguard-save`` saves nothing when untracked files lie where the run's
    code and suites come from, or None when there are none."""
    if not untracked:
        return None
    shown = ", ".join(untracked[:_UNTRACKED_SHOWN])
    more = len(untracked) - _UNTRACKED_SHOWN
    also = f" and {more} more" if more > 0 else ""
    commit = f"commit {sha[:12]}" if sha else "the commit"
    return (
        f"untracked files under the suites' and factories' folders ({shown}{also}) can "
        f"change what this run measured but are in no commit, so the baseline would not describe "
        f"{commit}. Fix: commit them (git add), delete them or list them in .gitignore, "
        f"then run again; or pass --perfguard-allow-dirty"
    )


class Saver:
    """Saves a run to the archive, or says which cells refused it."""

    def __init__(self, store: DirectoryStore, *, contention_limit: float, save_invalid: bool):
        self.store = store
        self.contention_limit = contention_limit
        self.save_invalid = save_invalid
        # Set by save(): the inconclusive cells that refused (or were marked in) the save.
        self.save_refused: dict[str, str] = {}
        self.save_marked: dict[str, str] = {}

    def contaminated_cells(self, run: RunResult) -> dict[str, str]:
        """``{scenario id: why}`` of the cells whose figures cannot be trusted as a
        baseline: a run contended or unstable (after its rounds), whatever its verdict.

        An ``invalid`` verdict for a reason of the gate's own (too few samples for its
        percentile, an unknown metric) or an undecided A/B cell does not count: those
        figures are clean, and the next comparison says again what is missing.
        """
        found: dict[str, str] = {}
        for result in run.scenarios:
            why = run_problem(result, self.contention_limit)
            if why is not None:
                found[result.id] = why
        return found

    def save_target(self, run: RunResult) -> Path:
        """Where :meth:`save` writes ``run`` (the archive's path for its commit), for the
        messages about it; the fingerprint's folder when the commit has no full sha."""
        fingerprint = run.environment.fingerprint
        try:
            return self.store.path_for(fingerprint, run.commit.sha or "")
        except StoreError:
            return self.store.root / fingerprint

    def save(self, run: RunResult) -> Path | None:
        """Archive ``run`` as its commit's baseline, unless a cell is contaminated.

        Refused (nothing written; ``save_refused`` says which cells and why) when any
        cell is (``contaminated_cells``), unless ``save_invalid``: then saved with those
        cells marked (``save_marked``; see ``BaselineStore.save``).
        """
        bad = self.contaminated_cells(run)
        if bad and not self.save_invalid:
            self.save_refused = bad
            return None
        self.save_marked = bad
        return self.store.save(run, inconclusive=bad)


def save_refused_fix(options: SaveOptions = PLUGIN_SAVE) -> str:
    """The fix of a save refused for its inconclusive cells, in ``options``' words."""
    return (
        f"re-run on an idle machine, raise {options.contention_limit} if this machine is "
        f"never quieter, or pass {options.save_invalid} to save with those cells marked"
    )


SAVE_REFUSED_FIX = save_refused_fix(PLUGIN_SAVE)


__all__ = [
    "COMMAND_SAVE",
    "PLUGIN_SAVE",
    "SAVE_REFUSED_FIX",
    "SaveOptions",
    "Saver",
    "check_can_save",
    "save_refused_fix",
    "untracked_refusal",
]
