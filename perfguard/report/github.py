"""GitHub Actions output: error annotations and the job's step summary.

Outside GitHub Actions nothing here has any effect: ``in_github_actions()`` is
False and ``write_step_summary`` returns None. The workflow-command format and its
escaping follow ``@actions/core`` (``packages/core/src/command.ts``)::

    ::error file=suites/nlp.yaml,line=12,title=minilm[torch-fp32]::p95 +12% > +5%

In the message, ``%``, ``\\r`` and ``\\n`` are percent-encoded; in property values
(``file``, ``title``) ``:`` and ``,`` are too, since they delimit the command.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePath

from perfguard.core.text import plain

LEVELS: tuple[str, ...] = ("error", "warning", "notice")


def in_github_actions(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this process runs inside a GitHub Actions job."""
    return env.get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    """Escape a workflow command's message (the part after the second ``::``)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command's property value (``file=...``, ``title=...``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def repo_root(env: Mapping[str, str] = os.environ) -> Path:
    """The repository root annotations are relative to: ``$GITHUB_WORKSPACE``, else cwd."""
    workspace = env.get("GITHUB_WORKSPACE")
    return Path(workspace) if workspace else Path.cwd()


def relative_path(path: str | PurePath, env: Mapping[str, str] = os.environ) -> str:
    """``path`` relative to the repository root, with ``/`` separators.

    A relative ``path`` is taken as already relative to the root. A path outside
    the root is returned absolute (GitHub then shows the annotation without a
    file link rather than pointing at a wrong file).
    """
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    root = repo_root(env)
    for candidate_root in (root, root.resolve()):
        for candidate in (p, p.resolve()):
            try:
                return candidate.relative_to(candidate_root).as_posix()
            except ValueError:
                continue
    return p.as_posix()


def annotation(
    path: str,
    line: int | None,
    title: str,
    message: str,
    level: str = "error",
    *,
    env: Mapping[str, str] = os.environ,
) -> str:
    """One workflow command that annotates ``path`` (at ``line``, when known).

    ``level`` is ``error``, ``warning`` or ``notice``. Print the result on a line
    of its own to stdout of a step (pytest's terminal output is fine).
    """
    if level not in LEVELS:
        raise ValueError(f"annotation level must be one of {', '.join(LEVELS)}, not {level!r}")
    # The title and message come from YAML names, models and exceptions: no escape
    # sequence or control character gets into the log line (``plain``; the escaping
    # below then keeps any newline inside the one command).
    path, title, message = plain(str(path)), plain(title), plain(message)
    props = [f"file={escape_property(relative_path(path, env))}"]
    if line is not None:
        if line < 1:
            raise ValueError(f"annotation line must be >= 1, not {line}")
        props.append(f"line={line}")
    if title:
        props.append(f"title={escape_property(title)}")
    return f"::{level} {','.join(props)}::{escape_data(message)}"


def write_step_summary(markdown: str, env: Mapping[str, str] = os.environ) -> Path | None:
    """Append ``markdown`` to the job summary (``$GITHUB_STEP_SUMMARY``).

    Returns the file written, or None when the variable is unset or empty (not in
    GitHub Actions). The file is opened in append mode, as other steps and tools
    write to it too, and the text always ends with a newline.
    """
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    text = markdown if markdown.endswith("\n") else markdown + "\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
    return path
