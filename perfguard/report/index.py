"""``report_dir/index.html``: every stored report, newest first, with its outcome.

Each run's state and counts come from ``perfguard.judge.outcome``, the same model
the run's own report and terminal summary used: a run whose cells failed (or whose
pytest exit status, stored in ``comparison.json``, was non-zero) never reads "ok".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from perfguard.core.atomicio import write_text_atomic
from perfguard.core.errors import PerfguardError
from perfguard.judge.outcome import OUTCOMES, run_outcome
from perfguard.judge.verdict import ScenarioVerdict
from perfguard.records.results import RunResult
from perfguard.records.resultsfile import RESULTS_FILENAME, read_results
from perfguard.report.comparison import comparison_path, read_comparison
from perfguard.report.render import environment, run_token

INDEX_FILENAME = "index.html"
REPORT_FILENAME = "report.html"  # named here: the index links it
_TOKEN_RE = re.compile(rb'<meta name="perfguard-run" content="([0-9a-f]+)">')
_HEAD_BYTES = 4096


@dataclass
class Entry:
    name: str
    created_at: str = ""
    sha: str = ""
    branch: str = ""
    dirty: bool = False
    scenarios: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    gate: str = ""
    state: str = ""
    headline: str = ""
    href: str | None = None
    problem: str | None = None


def _when(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _own_report(directory: Path, run: RunResult) -> tuple[str | None, str | None]:
    """The link to ``directory``'s report.html when it is ``run``'s (see ``run_token``),
    else None and why it is not linked (None when there is no report at all)."""
    html = directory / REPORT_FILENAME
    try:
        with html.open("rb") as f:
            head = f.read(_HEAD_BYTES)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{html} cannot be read ({exc.strerror or exc}): not linked"
    found = _TOKEN_RE.search(head)
    if found is None or found.group(1).decode() != run_token(run):
        return None, (
            f"{html} is not this run's report (left by an earlier run; this run's could "
            "not be written): not linked"
        )
    return f"{quote(directory.name)}/{REPORT_FILENAME}", None


def _entry(directory: Path) -> Entry:
    entry = Entry(name=directory.name)
    try:
        run = read_results(directory / RESULTS_FILENAME)
    except PerfguardError as exc:
        entry.problem = str(exc)
        return entry
    entry.href, entry.problem = _own_report(directory, run)
    entry.created_at = run.created_at
    entry.sha = (run.commit.sha or "")[:12]
    entry.branch = run.commit.branch or ""
    entry.dirty = run.commit.dirty
    entry.scenarios = len(run.scenarios)
    comparison = comparison_path(directory / RESULTS_FILENAME)
    verdicts: tuple[ScenarioVerdict, ...] = ()
    exit_status: int | None = None
    gate = True
    if comparison.is_file():
        try:
            stored = read_comparison(comparison)
        except PerfguardError as exc:
            entry.problem = str(exc)  # names the file
            return entry
        verdicts, exit_status, gate = stored.verdicts, stored.exit_status, stored.gate
    outcome = run_outcome(run.scenarios, verdicts, exit_status=exit_status, gate=gate)
    entry.counts = {o.value: n for o, n in outcome.counts.items()}
    entry.state = outcome.state
    entry.headline = outcome.headline()
    entry.gate = {"failed": "FAILED", "warnings": "warnings", "passed": "passed"}[outcome.state]
    if not gate:
        entry.gate += " (gate off)"
    return entry


def render_index(report_dir: Path) -> Path:
    """Write ``report_dir/index.html`` listing each ``*/results.json``; return its path."""
    report_dir = Path(report_dir)
    entries = [_entry(p.parent) for p in sorted(report_dir.glob(f"*/{RESULTS_FILENAME}"))]
    readable = sorted(
        (e for e in entries if e.created_at),
        key=lambda e: (_when(e.created_at), e.name),
        reverse=True,
    )
    broken = [e for e in entries if not e.created_at]
    html = (
        environment()
        .get_template("index.html.j2")
        .render(entries=readable, broken=broken, kinds=[(o.value, o.label) for o in OUTCOMES])
    )
    path = report_dir / INDEX_FILENAME
    write_text_atomic(path, html)
    return path
