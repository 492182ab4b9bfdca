"""The HTML report and the PR-comment summary of a run (see ``perfguard.report.model``)."""

from __future__ import annotations

from pathlib import Path

from perfguard.core.atomicio import write_text_atomic
from perfguard.core.resultsio import run_dir_name
from perfguard.report.index import render_index
from perfguard.report.markdown import render_markdown
from perfguard.report.model import ReportInput
from perfguard.report.render import render_html

REPORT_FILENAME = "report.html"
SUMMARY_FILENAME = "summary.md"


def write_report(inp: ReportInput, report_dir: Path) -> Path:
    """Write ``<run dir>/report.html`` and ``summary.md`` atomically (``run_dir_name``:
    ``<commit12>``, ``<commit12>-ab`` for an A/B run), refresh the index.

    Returns the path of ``report.html``.
    """
    run_dir = Path(report_dir) / run_dir_name(inp.run.commit, inp.run.mode)
    html_path = write_report_files(inp, run_dir)
    render_index(Path(report_dir))
    return html_path


def write_report_files(inp: ReportInput, directory: Path) -> Path:
    """Write ``report.html`` and ``summary.md`` into ``directory``; return the HTML path."""
    html_path = Path(directory) / REPORT_FILENAME
    write_text_atomic(html_path, render_html(inp))
    write_text_atomic(html_path.with_name(SUMMARY_FILENAME), render_markdown(inp))
    return html_path


__all__ = [
    "ReportInput",
    "render_html",
    "render_index",
    "render_markdown",
    "write_report",
    "write_report_files",
]
