"""Switching a worker's import system to one side's tree (same-run A/B, bisect).

Before a cell of one side is opened (the ``code`` field of ``open``), the worker makes
every import that reaches into the repository read that side's checkout, whatever
the project's layout:

* every ``sys.path`` entry inside another checkout of the repository maps to the
  same relative path in this side's tree: the working directory, ``PYTHONPATH``
  (relative entries were made absolute from the worker's directory at start-up), the
  folders ``.pth`` files added (a src-layout ``pip install -e .`` adds ``<repo>/src``);
* pytest's ``pythonpath`` ini entries (``pythonpath``: as the head's pytest resolved
  them) go first on ``sys.path``, mapped the same way, then the side's root;
* setuptools' editable finders (the ``__editable___<name>_finder`` modules behind a
  ``pip install -e .``): their ``MAPPING`` and ``NAMESPACES`` entries pointing into
  another checkout are remapped;
* modules already imported from another checkout are forgotten (their
  ``sys.modules`` entries; a namespace package by its ``__path__``), so the next
  import reads this tree. A cell already open keeps its own objects alive.

The mapping goes both ways: the base side's switch maps the head checkout into the
base worktree, the head side's maps the worktree back. perfguard's own modules (the
harness both sides share) are never forgotten. Then the tree is recorded
(:func:`perfguard.models.origin.use_tree`), and each factory import checks where its
modules came from.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from perfguard.core.errors import ProtocolError
from perfguard.models.origin import HARNESS, CodeTree, module_paths, resolved, use_tree

__all__ = ["parse_tree", "switch_to"]

_EDITABLE_PREFIX = "__editable___"
_EDITABLE_SUFFIX = "_finder"


def parse_tree(field: Any) -> tuple[CodeTree, tuple[str, ...]]:
    """The ``code`` field of ``open``: ``{"root", "others", "label", "pythonpath"}``
    -> (the tree, pytest's ``pythonpath`` entries)."""
    if not isinstance(field, Mapping) or not isinstance(field.get("root"), str):
        raise ProtocolError(
            f"request `open` has code={field!r}",
            expected='`code`: {"root": <path>, "others": [<path>, ...], "label": <text>, '
            '"pythonpath": [<path>, ...]}',
            fix="send `open` with perfguard.ab.abrun's code switch",
        )
    others = [str(p) for p in field.get("others") or [] if isinstance(p, str)]
    root = resolved([Path(field["root"])])[0]
    tree = CodeTree(
        root=root,
        others=tuple(p for p in resolved(Path(o) for o in others) if p != root),
        label=str(field.get("label") or root),
    )
    pythonpath = tuple(str(p) for p in field.get("pythonpath") or [] if isinstance(p, str))
    return tree, pythonpath


def map_path(path: str, tree: CodeTree) -> str:
    """``path`` moved into ``tree.root`` when it lies in another checkout, else as is."""
    where = path or str(Path.cwd())  # "" on sys.path: the working directory
    owner = tree.owner(where)
    if owner is None or owner == tree.root:
        return path
    rel = os.path.relpath(os.path.realpath(where), owner)
    return str(tree.root) if rel == os.curdir else str(tree.root / rel)


def switch_to(tree: CodeTree, pythonpath: tuple[str, ...] = ()) -> None:
    """Make imports read ``tree`` (see the module docstring), then record it."""
    _switch_sys_path(tree, pythonpath)
    for finder in _editable_finders():
        _remap_finder(finder, tree)
    _forget_other_trees(tree)
    importlib.invalidate_caches()
    use_tree(tree)


def _switch_sys_path(tree: CodeTree, pythonpath: tuple[str, ...]) -> None:
    first = [map_path(p, tree) for p in pythonpath]
    rest = [map_path(p, tree) for p in sys.path]
    out: list[str] = []
    for entry in (str(tree.root), *first, *rest):
        if entry not in out:
            out.append(entry)
    sys.path[:] = out


def _editable_finders() -> list[ModuleType]:
    """The modules of setuptools' editable finders loaded in this process."""
    return [
        module
        for name, module in list(sys.modules.items())
        if module is not None
        and name.startswith(_EDITABLE_PREFIX)
        and name.endswith(_EDITABLE_SUFFIX)
        and isinstance(getattr(module, "MAPPING", None), dict)
    ]


def _is_harness(name: str) -> bool:
    return name == HARNESS or name.startswith(HARNESS + ".")


def _remap_finder(finder: ModuleType, tree: CodeTree) -> None:
    """Point a setuptools editable finder's ``MAPPING`` (package -> folder) and
    ``NAMESPACES`` (namespace package -> folders) at ``tree``, in place (the finder's
    classes read the module's globals on every lookup)."""
    mapping: dict[str, Any] = finder.MAPPING
    for name, folder in list(mapping.items()):
        if isinstance(folder, str) and not _is_harness(name):
            mapping[name] = map_path(folder, tree)
    namespaces = getattr(finder, "NAMESPACES", None)
    if isinstance(namespaces, dict):
        for name, folders in list(namespaces.items()):
            if isinstance(folders, list) and not _is_harness(name):
                namespaces[name] = [map_path(f, tree) if isinstance(f, str) else f for f in folders]


def _forget_other_trees(tree: CodeTree) -> None:
    """Drop the ``sys.modules`` entries of modules loaded from another checkout."""
    for name, module in list(sys.modules.items()):
        if module is None or _is_harness(name):
            continue
        for path in module_paths(module):
            owner = tree.owner(path)
            if owner is not None and owner != tree.root:
                del sys.modules[name]
                break
