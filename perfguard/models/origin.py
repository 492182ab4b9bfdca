"""Which checkout a side's model code came from, and the check that refuses the wrong one.

Same-run A/B (and bisect) measures two revisions of one repository in one process or
two: the base from a git worktree, the head from the working tree. The worker switches
its import system to the tree of the side it opens (:mod:`perfguard.worker.codetree`)
and records that tree here (:func:`use_tree`). After a factory module is imported on a
side, :func:`check_origins` looks at where its modules were loaded from: every module
of the factory's top-level package, and every module loaded from any checkout of the
repository, must lie inside the side's own tree. A module from another checkout (the
head's ``src/`` on the base side, say) means the side would measure the other
revision's code: the cell is refused with a ``ModelError`` naming the module, its file,
the tree expected and the fix. Modules from outside every checkout (the standard
library, site-packages) are shared by both sides and are fine.

Outside A/B no tree is set and nothing is checked.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from perfguard.core.errors import Location, ModelError

__all__ = [
    "HARNESS",
    "CodeTree",
    "active_tree",
    "check_origins",
    "in_environment",
    "module_paths",
    "resolved",
    "use_tree",
]

#: perfguard's own package: the harness both sides share, never switched or checked.
HARNESS = "perfguard"

FIX = (
    "perfguard switches sys.path entries, pytest's `pythonpath` ini, PYTHONPATH, .pth "
    "entries and setuptools' editable finders into the tree measured; a path written out "
    "in full in code or in a .pth file, or another build backend's import hook, is not "
    "switched: make such paths relative to the module's own file (Path(__file__)), or "
    "install the project with `pip install -e .` (setuptools) or put its folder on "
    "pytest's `pythonpath` ini (docs/ab.md, 'What the base side imports')"
)


@dataclass(frozen=True)
class CodeTree:
    """The tree one side's model code must come from.

    ``root``: the side's checkout (resolved); ``others``: the repository's other
    checkouts (the main one, linked worktrees); ``label``: how messages name the side
    (e.g. "the base revision 1a2b3c4 (worktree)")."""

    root: Path
    others: tuple[Path, ...]
    label: str

    def owner(self, path: str) -> Path | None:
        """The checkout (``root`` or one of ``others``) holding ``path``, the innermost
        when they nest; None outside all of them, and inside an installed environment
        kept in a checkout (:func:`in_environment`): a ``.venv`` in the repository holds
        the packages both sides share, not either side's code."""
        real = _real(path)
        best: Path | None = None
        for tree in (self.root, *self.others):
            text = str(tree)
            if (real == text or real.startswith(text.rstrip(os.sep) + os.sep)) and (
                best is None or len(text) > len(str(best))
            ):
                best = tree
        if best is not None and in_environment(best, real):
            return None
        return best


#: Folders that hold installed packages, wherever they lie.
_PACKAGE_FOLDERS = frozenset({"site-packages", "dist-packages"})


def in_environment(checkout: Path, real: str) -> bool:
    """Whether ``real`` (a resolved path inside ``checkout``) lies in an installed Python
    environment kept there: below a virtual environment's root (a folder holding
    ``pyvenv.cfg``, as ``python -m venv .venv`` makes) or a ``site-packages`` /
    ``dist-packages`` folder (``pip install --target``)."""
    parts = Path(os.path.relpath(real, checkout)).parts
    if _PACKAGE_FOLDERS.intersection(parts):
        return True
    folder = checkout
    for part in parts[:-1]:
        folder = folder / part
        if _is_venv(str(folder)):
            return True
    return False


_VENV: dict[str, bool] = {}


def _is_venv(folder: str) -> bool:
    found = _VENV.get(folder)
    if found is None:
        found = _VENV[folder] = (Path(folder) / "pyvenv.cfg").is_file()
    return found


_active: list[CodeTree] = []


def use_tree(tree: CodeTree | None) -> None:
    """Make ``tree`` the one the next factory imports are checked against (None: none)."""
    _active.clear()
    if tree is not None:
        _active.append(tree)


def active_tree() -> CodeTree | None:
    return _active[0] if _active else None


_REAL: dict[str, str] = {}


def _real(path: str) -> str:
    found = _REAL.get(path)
    if found is None:
        found = _REAL[path] = os.path.realpath(path)
    return found


def module_paths(module: ModuleType) -> list[str]:
    """Where ``module`` was loaded from: its file, or a namespace package's folders;
    absolute paths only (a relative ``__file__``, such as ``torch.ops``'s, or a path
    hook's placeholder names no folder)."""
    file = getattr(module, "__file__", None)
    if isinstance(file, str) and file:
        found = [file]
    else:
        path = getattr(module, "__path__", None)
        try:
            found = [p for p in path if isinstance(p, str)] if path is not None else []
        except Exception:  # a broken custom __path__: nothing to say where it came from
            found = []
    return [p for p in found if Path(p).is_absolute()]


def check_origins(
    module_name: str, location: Location | None = None, tree: CodeTree | None = None
) -> None:
    """Refuse (``ModelError``) when the side's code came from another checkout.

    Checked against ``tree`` (default: the active one; nothing without): no module
    loaded so far (the factory module, what it imported, what was imported before it)
    may come from a checkout other than ``tree.root``; perfguard's own modules are
    the shared harness and are left out.
    """
    tree = tree if tree is not None else active_tree()
    if tree is None:
        return
    for name, module in list(sys.modules.items()):
        if module is None or name == HARNESS or name.startswith(HARNESS + "."):
            continue
        for path in module_paths(module):
            owner = tree.owner(path)
            if owner is not None and owner != tree.root:
                raise _wrong_tree(module_name, name, path, owner, tree, location)


def _wrong_tree(
    factory_module: str,
    name: str,
    path: str,
    owner: Path,
    tree: CodeTree,
    location: Location | None,
) -> ModelError:
    try:
        rel = Path(_real(path)).relative_to(owner).as_posix()
    except ValueError:
        rel = path
    own = tree.root / rel
    return ModelError(
        f"{tree.label}: module {name!r} (imported with factory module {factory_module!r}) "
        f"was loaded from {path}, in another checkout ({owner}), not from this side's "
        f"tree {tree.root}; measuring it would time the other revision's code",
        expected=f"every module of the factory's code from {tree.root}"
        + (f" (here {own})" if own.exists() else ""),
        fix=FIX,
        location=location,
    )


def resolved(trees: Iterable[Path]) -> tuple[Path, ...]:
    """``trees`` resolved, duplicates dropped, in order."""
    out: list[Path] = []
    for tree in trees:
        real = Path(_real(str(tree)))
        if real not in out:
            out.append(real)
    return tuple(out)
