"""The installed distributions a project's model factories import, found without
importing anything.

A factory builds its model with libraries (``transformers``, ``torchvision``, ``timm``,
...) whose upgrade changes the model's layers, kernels or defaults, and so its figures,
without a commit of the project. Which ones a factory uses is read from source: the
factory module's ``import`` statements, and those of the project's own modules it
imports (found under the factory's suite folder or the project root), each followed to
the installed top-level package it names, which ``importlib.metadata`` maps to its
distribution. Standard-library modules and what cannot be found are left out; what
the environment does with the distributions is :mod:`perfguard.machine.env`'s.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from importlib import metadata
from pathlib import Path

__all__ = ["imported_distributions", "normalized"]


def normalized(distribution: str) -> str:
    """A distribution's name as packaging compares it (``Sentence_Transformers`` ->
    ``sentence-transformers``)."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _locate(dotted: str, search: Sequence[Path]) -> Path | None:
    """The project's source file of module ``dotted`` (``a/b.py`` or ``a/b/__init__.py``
    under one of ``search``), or None: not the project's own."""
    parts = dotted.split(".")
    for root in search:
        for candidate in (
            root.joinpath(*parts[:-1], f"{parts[-1]}.py"),
            root.joinpath(*parts, "__init__.py"),
        ):
            if candidate.is_file():
                return candidate
    return None


def _imports(path: Path, module: str) -> Iterator[str]:
    """The absolute names the module ``module`` (its source at ``path``) imports, at any
    depth (lazy imports inside functions too); ``from a import b`` names ``a`` and
    ``a.b`` (``b`` may be a submodule)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                keep = len(parts) - (node.level - 1)
                if keep < 0 or (keep == 0 and not node.module):
                    continue
                base = ".".join([*parts[:keep], *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if not base:
                continue
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def _external_tops(factories: Iterable[tuple[str, Path]], roots: Sequence[Path]) -> set[str]:
    """The top-level names of everything outside the project the factory modules import,
    directly or through the project's own modules."""
    tops: set[str] = set()
    seen: set[Path] = set()
    queue: list[tuple[str, Path, tuple[Path, ...]]] = []
    for module, base_dir in factories:
        search = tuple(dict.fromkeys([Path(base_dir), *roots]))
        found = _locate(module, search)
        if found is not None:
            queue.append((module, found, search))
    while queue:
        module, path, search = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path, module):
            top = name.partition(".")[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if _locate(top, search) is None:
                tops.add(top)
                continue
            found = _locate(name, search)
            if found is not None:
                queue.append((name, found, search))
    return tops


def imported_distributions(
    factories: Iterable[tuple[str, Path]], roots: Sequence[Path] = ()
) -> tuple[str, ...]:
    """The installed distributions (normalised names, sorted) that the factory modules
    import: ``factories`` are ``(module, suite folder)`` pairs; a project module is
    looked for in its suite folder first, then in ``roots`` (the project root)."""
    tops = _external_tops(factories, roots)
    if not tops:
        return ()
    owners = metadata.packages_distributions()
    found = {normalized(dist) for top in tops for dist in owners.get(top, ())}
    return tuple(sorted(found))
