"""pytest hooks only: options, ini keys, and the hand-off to ``PerfguardSession``.

Without ``--perfguard`` nothing here collects or runs anything: a plain
``pytest`` never sees a perf scenario. With it, one ``PerfguardSession`` is
registered for the run and keeps all state (see ``perfguard.plugin.session``).

Option precedence, for every setting: command line > ini key in
``[tool.pytest.ini_options]`` (or pytest.ini/tox.ini/setup.cfg) > built-in default.
"""

from __future__ import annotations

import pytest

from perfguard.core.policy import CONTENTION_LIMIT
from perfguard.interop.benchmark_bridge import register_bridge
from perfguard.plugin import hookspecs
from perfguard.plugin.session import STATE_KEY, PerfguardSession


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perfguard", "perfguard: performance-regression tests of ML models")
    group.addoption(
        "--perfguard",
        action="store_true",
        default=False,
        help="collect and run the model scenarios of suites/*.yaml (off by default).",
    )
    group.addoption(
        "--perfguard-report-dir",
        metavar="DIR",
        default=None,
        help="where reports/<commit12>/results.json is written "
        "(default: ini perfguard_report_dir, else 'reports').",
    )
    group.addoption(
        "--perfguard-baseline",
        metavar="auto|REF|PATH|none",
        default=None,
        help="what to compare with: 'auto' (nearest ancestor commit with a stored "
        "baseline; default), a git ref, a results/baseline JSON file, or 'none'.",
    )
    group.addoption(
        "--perfguard-baseline-dir",
        metavar="DIR",
        default=None,
        help="the baseline archive (default: ini perfguard_baseline_dir, else 'baselines').",
    )
    group.addoption(
        "--perfguard-save",
        action="store_true",
        default=False,
        help="archive this run as the baseline of HEAD (refused on a dirty tree).",
    )
    group.addoption(
        "--perfguard-allow-dirty",
        action="store_true",
        default=False,
        help="allow --perfguard-save with uncommitted changes.",
    )
    group.addoption(
        "--perfguard-target-branch",
        metavar="BRANCH",
        default=None,
        help="branch whose merge-base 'auto' prefers (default: ini, else 'main').",
    )
    group.addoption(
        "--perfguard-no-gate",
        action="store_true",
        default=False,
        help="measure, compare and report, but never fail a scenario on a regression.",
    )
    group.addoption(
        "--perfguard-confirm-rounds",
        metavar="N",
        type=int,
        default=None,
        help="re-measurements a suspected regression must survive (default: ini, else 2).",
    )
    group.addoption(
        "--perfguard-normalise",
        action="store_true",
        default=None,
        help="gate on latencies normalised by the machine-speed canary (default: ini "
        "perfguard_normalise, else off); both figures are always reported.",
    )
    group.addoption(
        "--perfguard-contention-limit",
        metavar="SHARE",
        type=float,
        default=None,
        help="share of all CPUs other processes may use while a cell is measured (1: any) "
        f"before its figures are invalid (default: ini, else {CONTENTION_LIMIT:g}).",
    )
    group.addoption(
        "--perfguard-ab",
        metavar="REF",
        default=None,
        help="same-run A/B: measure REF (a branch's merge base with HEAD, a tag or a sha) "
        "again in this run, interleaved request by request with the working tree, and "
        "gate on the paired comparison instead of an archived baseline (~2x the time).",
    )
    group.addoption(
        "--perfguard-ab-python",
        metavar="PATH",
        default=None,
        help="the Python interpreter (e.g. venv/bin/python) of the base revision's worker, "
        "when its dependencies differ (default: this interpreter).",
    )
    group.addoption(
        "--perfguard-isolate",
        action="store_true",
        default=False,
        help="measure every scenario in its own worker process (a crash fails only that cell).",
    )
    parser.addini(
        "perfguard_contention_limit",
        help="perfguard: the twin of --perfguard-contention-limit.",
        default=str(CONTENTION_LIMIT),
    )
    parser.addini(
        "perfguard_normalise",
        type="bool",
        help="perfguard: the twin of --perfguard-normalise.",
        default=False,
    )
    parser.addini(
        "perfguard_baseline",
        help="perfguard: the twin of --perfguard-baseline.",
        default="auto",
    )
    parser.addini(
        "perfguard_baseline_dir",
        help="perfguard: the twin of --perfguard-baseline-dir.",
        default="baselines",
    )
    parser.addini(
        "perfguard_target_branch",
        help="perfguard: the twin of --perfguard-target-branch.",
        default="main",
    )
    parser.addini(
        "perfguard_confirm_rounds",
        help="perfguard: the twin of --perfguard-confirm-rounds.",
        default="2",
    )
    parser.addini(
        "perfguard_report_dir",
        help="perfguard: report directory (the twin of --perfguard-report-dir).",
        default="reports",
    )
    parser.addini(
        "perfguard_suite_patterns",
        type="linelist",
        help="perfguard: glob patterns (relative to rootdir) of suite files; files "
        "named on the command line are always collected.",
        default=["suites/*.yaml", "suites/*.yml", "*/suites/*.yaml", "*/suites/*.yml"],
    )
    parser.addini(
        "perfguard_cache_dir",
        help="perfguard: where exported/quantized models are cached (default .perfguard/cache).",
        default=".perfguard/cache",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perfguard: a perfguard model scenario cell")
    if not config.getoption("perfguard"):
        return
    session = PerfguardSession(config)
    config.stash[STATE_KEY] = session
    config.pluginmanager.register(session, "perfguard-session")
    # pytest-benchmark tests join the same results, comparison and gate.
    register_bridge(config, session.on_benchmark)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(STATE_KEY, None)
    if session is not None:
        if session.ab is not None:  # however the session ended, the worktree goes
            session.ab.close()
        del config.stash[STATE_KEY]
        config.pluginmanager.unregister(session)
