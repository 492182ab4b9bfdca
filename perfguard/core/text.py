"""Untrusted text made safe for each place perfguard writes it.

Scenario names come from YAML, messages from models, runtimes and exceptions, branch
names from git: none of it may steer what reads perfguard's output.

* :func:`plain` for a terminal, a log or an annotation: no ANSI/OSC escape sequence,
  no other control character (a lone carriage return would overwrite the line), no
  bidirectional override, and no line that GitHub Actions would run as a workflow
  command (``::add-mask::``, ``::warning``, ``::stop-commands::``; the runner trims
  leading space before it looks, and also honours the old ``##[command]`` form).
* :func:`md_text` for running text in Markdown (a pull-request comment, a job
  summary): :func:`plain`, on one line, with nothing left live: no link, image,
  autolink, ``@mention``, ``#123`` reference, emphasis, table break or raw HTML.
* :func:`md_code` for names (scenario ids, commits, branches) in Markdown: a code
  span, inside which GitHub links and mentions nothing.

Commands and autolinks are broken with a zero-width space (U+200B): the reader sees
the text as it was, the renderer and the runner see no command, link or mention.
"""

from __future__ import annotations

import html
import re

#: Inserted where a sequence must stop being a command, link or mention.
ZWSP = "\u200b"

# ESC-introduced sequences: CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), the
# string commands DCS/SOS/PM/APC (ESC P|X|^|_ ... ST), and two-character escapes.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -/]*[0-~]?"
)
# C0 controls but tab and newline, DEL, C1 controls (U+009B is a one-byte CSI), and
# the bidirectional embeddings, overrides and isolates ("Trojan source").
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_COMMAND_LINE = re.compile(r"^(\s*:):", re.MULTILINE)
_V1_COMMAND = "##["

# Markdown: characters that start emphasis, code, links, images, tables, strikethrough
# or escapes; each is backslash-escaped (CommonMark renders ``\*`` as ``*``).
_MD_PUNCTUATION = re.compile(r"([\\`*_\[\]()!|~{}])")
# GitHub-flavoured autolinks and references, broken after their first character(s).
_MD_LIVE = re.compile(r"(?i)(?<=[a-z0-9+.-]:)(?=//)|(?<=www)(?=\.)|(?<=@)(?=\w)|(?<=#)(?=\d)")


def plain(text: str) -> str:
    """``text`` with no escape sequence, control character or workflow command left.

    Newlines and tabs stay; ``\\r\\n`` and a lone ``\\r`` become ``\\n``.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROLS.sub("", _ESCAPES.sub("", text))
    text = _COMMAND_LINE.sub(rf"\1{ZWSP}:", text)
    return text.replace(_V1_COMMAND, f"##{ZWSP}[")


def one_line(text: str) -> str:
    """:func:`plain`, with every run of whitespace (newlines too) made one space."""
    return " ".join(plain(text).split())


def md_text(text: str, limit: int | None = None) -> str:
    """Running text for a Markdown table cell or paragraph, nothing in it live.

    One line; cut to ``limit`` characters (``...`` marks the cut) before escaping,
    so an escape is never cut in half.
    """
    flat = one_line(text)
    if limit is not None and len(flat) > limit:
        flat = flat[: max(limit - 3, 0)] + "..."
    escaped = html.escape(flat, quote=False)  # & < > : no raw HTML, no autolink <...>
    escaped = _MD_PUNCTUATION.sub(r"\\\1", escaped)
    return _MD_LIVE.sub(ZWSP, escaped)


def md_code(text: str, limit: int | None = None, *, in_table: bool = True) -> str:
    """A name as a Markdown code span, in which GitHub links and mentions nothing.

    The fence is one backtick longer than the longest run inside. In a table cell
    (``in_table``) ``|`` is escaped, since GitHub's tables split on it even inside
    code. An empty name is ``-``.
    """
    flat = one_line(text)
    if limit is not None and len(flat) > limit:
        flat = flat[: max(limit - 3, 0)] + "..."
    if not flat:
        return "-"
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    span = f"{fence}{pad}{flat}{pad}{fence}"
    return span.replace("|", "\\|") if in_table else span


__all__ = ["ZWSP", "md_code", "md_text", "one_line", "plain"]
