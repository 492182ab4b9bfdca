"""The HTML report and the PR-comment summary of a run (see ``perfguard.report.model``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfguard.core.atomicio import write_text_atomic
from perfguard.records.resultsfile import run_dir_name
from perfguard.report.index import INDEX_FILENAME, REPORT_FILENAME, render_index
from perfguard.report.markdown import render_markdown
from perfguard.report.model import ReportInput
from perfguard.report.render import render_html

SUMMARY_FILENAME = "summary.md"


@dataclass(frozen=True)
class ReportFile:
    """One file of a run's report: what it is (for a message), where, and how it is made."""

    what: str
    path: Path
    make: Callable[[], object]

    def write(self) -> Path:
        """Write the file (atomically); its path."""
        self.make()
        return self.path


def report_files(
    inp: ReportInput, directory: Path, index_of: Path | None = None
) -> tuple[ReportFile, ...]:
    """The files of ``inp``'s report, report.html first: ``directory/report.html`` and
    ``summary.md``, then (with ``index_of``, a reports folder) that folder's refreshed
    index. Each is written on its own by its ``write()``."""
    html = Path(directory) / REPORT_FILENAME
    summary = html.with_name(SUMMARY_FILENAME)
    files = [
        ReportFile("the report", html, lambda: write_text_atomic(html, render_html(inp))),
        ReportFile(
            "the summary", summary, lambda: write_text_atomic(summary, render_markdown(inp))
        ),
    ]
    if index_of is not None:
        root = Path(index_of)
        index = ReportFile("the report index", root / INDEX_FILENAME, lambda: render_index(root))
        files.append(index)
    return tuple(files)


def run_report_dir(inp: ReportInput, report_dir: Path) -> Path:
    """Where a run's report goes under ``report_dir``: ``run_dir_name`` (``<commit12>``,
    ``<commit12>-ab`` for an A/B run)."""
    return Path(report_dir) / run_dir_name(inp.run.commit, inp.run.mode)


def write_report(inp: ReportInput, report_dir: Path) -> Path:
    """Write report.html and summary.md into the run's folder under ``report_dir`` and
    refresh its index; return the path of ``report.html``."""
    return _write_all(report_files(inp, run_report_dir(inp, report_dir), report_dir))


def write_report_files(inp: ReportInput, directory: Path) -> Path:
    """Write ``report.html`` and ``summary.md`` into ``directory``; return the HTML path."""
    return _write_all(report_files(inp, directory))


def _write_all(files: tuple[ReportFile, ...]) -> Path:
    for file in files:
        file.write()
    return files[0].path


__all__ = [
    "ReportFile",
    "ReportInput",
    "render_html",
    "render_index",
    "render_markdown",
    "report_files",
    "run_report_dir",
    "write_report",
    "write_report_files",
]
