"""The ``--perfguard*`` options and ``perfguard_*`` ini keys, and nothing else.

``perfguard.plugin.hooks`` (the ``pytest11`` entry point) imports this module in every
pytest run, with or without ``--perfguard``, so it imports nothing heavy: only pytest
and the policy's defaults (no numpy, scipy, jinja2, yaml or runtimes).

Option precedence, for every setting: command line > ini key in
``[tool.pytest.ini_options]`` (or pytest.ini/tox.ini/setup.cfg) > built-in default;
``perfguard.plugin.settings`` reads them once.
"""

from __future__ import annotations

import pytest

from perfguard.core.gitignore import CACHE_DIR, REPORT_DIR
from perfguard.core.policy import (
    BASELINE,
    BASELINE_DIR,
    CONFIRM_ROUNDS,
    CONTENTION_LIMIT,
    INCONCLUSIVE,
    INCONCLUSIVE_CHOICES,
    INCONCLUSIVE_ROUNDS,
    MAX_INPUT_MIB,
    OPEN_TIMEOUT_S,
    TARGET_BRANCH,
)
from perfguard.suite.files import SUITE_PATTERNS


def enabled(config: pytest.Config) -> bool:
    """Whether this run asked for perfguard (``--perfguard``)."""
    return bool(config.getoption("perfguard"))


def add_options(parser: pytest.Parser) -> None:
    """Register the command-line options and their ini twins."""
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
        f"(default: ini perfguard_report_dir, else '{REPORT_DIR}').",
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
        help=f"the baseline archive (default: ini perfguard_baseline_dir, else '{BASELINE_DIR}').",
    )
    group.addoption(
        "--perfguard-save",
        action="store_true",
        default=False,
        help="archive this run as the baseline of HEAD (refused on a dirty tree).",
    )
    group.addoption(
        "--perfguard-save-invalid",
        action="store_true",
        default=False,
        help="with --perfguard-save: save even when cells stayed contaminated (measured "
        "beside other processes, or unstable), marking them in the baseline (by default "
        "such a save is refused).",
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
        help=f"branch whose merge-base 'auto' prefers (default: ini, else '{TARGET_BRANCH}').",
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
        help="re-measurements a suspected regression must survive (default: ini, else "
        f"{CONFIRM_ROUNDS}).",
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
        "--perfguard-inconclusive",
        metavar="|".join(INCONCLUSIVE_CHOICES),
        default=None,
        help="what a cell still invalid after waiting for quiet and "
        f"{INCONCLUSIVE_ROUNDS} re-measurements does: 'fail' fails its item, 'warn' "
        f"passes it with a warning (default: ini, else {INCONCLUSIVE}).",
    )
    group.addoption(
        "--perfguard-max-input-mib",
        metavar="MIB",
        type=float,
        default=None,
        help="the most memory one cell's generated inputs (timing tensors and accuracy "
        "samples) may declare; a cell over it fails before anything is allocated "
        f"(default: ini, else {MAX_INPUT_MIB}).",
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
    group.addoption(
        "--perfguard-profile",
        action="store_true",
        default=False,
        help="take an operator profile of every cell after its timed measurement, with "
        "a Chrome trace in reports/<commit12>/traces/ (default: ini perfguard_profile, "
        "else only cells with `profile: true` and cells whose latency regressed).",
    )
    group.addoption(
        "--perfguard-open-timeout",
        metavar="SECONDS",
        type=float,
        default=None,
        help="how long opening a model (export, quantization included) and its warm-up may "
        "take before the cell fails with the stacks dumped; in-process and isolated "
        f"(default: ini, else {OPEN_TIMEOUT_S:g}).",
    )
    group.addoption(
        "--perfguard-shard",
        metavar="K/N",
        default=None,
        help="measure only the K-th of N cost-balanced subsets of the cells (a CI matrix "
        "of N runners; merge their outputs with `perfguard merge`). Default: the "
        "environment variable PERFGUARD_SHARD, else ini perfguard_shard, else all cells.",
    )
    group.addoption(
        "--perfguard-shard-plan",
        metavar="FILE",
        default=None,
        help="with --perfguard-shard: follow the shard plan in FILE (written once per run "
        "by --perfguard-shard-plan-out) instead of planning from this runner's archive, so "
        "every shard agrees on who measures what; the collected tests must be exactly the "
        "plan's. Default: the environment variable PERFGUARD_SHARD_PLAN, else ini "
        "perfguard_shard_plan, else plan here.",
    )
    group.addoption(
        "--perfguard-shard-plan-out",
        metavar="FILE",
        default=None,
        help="with --perfguard-shard: plan as usual and write the whole plan to FILE for "
        "the shards' --perfguard-shard-plan (e.g. in a plan job: pytest --perfguard "
        "--collect-only -q --perfguard-shard=1/N --perfguard-shard-plan-out=plan.json).",
    )
    group.addoption(
        "--perfguard-devices",
        metavar="LIST",
        default=None,
        help="under pytest-xdist: the devices the workers are bound to, one each in turn "
        "through CUDA_VISIBLE_DEVICES (e.g. '0,1' or GPU UUIDs; 'none': no device binding; "
        "'auto': one per visible GPU; default: ini perfguard_devices, else auto).",
    )
    parser.addini(
        "perfguard_open_timeout",
        help="perfguard: the twin of --perfguard-open-timeout (seconds).",
        default=f"{OPEN_TIMEOUT_S:g}",
    )
    parser.addini(
        "perfguard_contention_limit",
        help="perfguard: the twin of --perfguard-contention-limit.",
        default=str(CONTENTION_LIMIT),
    )
    parser.addini(
        "perfguard_inconclusive",
        help="perfguard: the twin of --perfguard-inconclusive.",
        default=INCONCLUSIVE,
    )
    parser.addini(
        "perfguard_max_input_mib",
        help="perfguard: the twin of --perfguard-max-input-mib.",
        default=str(MAX_INPUT_MIB),
    )
    parser.addini(
        "perfguard_normalise",
        type="bool",
        help="perfguard: the twin of --perfguard-normalise.",
        default=False,
    )
    parser.addini(
        "perfguard_profile",
        help="perfguard: the twin of --perfguard-profile (true or false).",
        default="false",
    )
    parser.addini(
        "perfguard_baseline",
        help="perfguard: the twin of --perfguard-baseline.",
        default=BASELINE,
    )
    parser.addini(
        "perfguard_baseline_dir",
        help="perfguard: the twin of --perfguard-baseline-dir.",
        default=BASELINE_DIR,
    )
    parser.addini(
        "perfguard_target_branch",
        help="perfguard: the twin of --perfguard-target-branch.",
        default=TARGET_BRANCH,
    )
    parser.addini(
        "perfguard_confirm_rounds",
        help="perfguard: the twin of --perfguard-confirm-rounds.",
        default=str(CONFIRM_ROUNDS),
    )
    parser.addini(
        "perfguard_report_dir",
        help="perfguard: report directory (the twin of --perfguard-report-dir).",
        default=REPORT_DIR,
    )
    parser.addini(
        "perfguard_suite_patterns",
        type="linelist",
        help="perfguard: glob patterns (relative to rootdir) of suite files; files "
        "named on the command line are always collected.",
        default=list(SUITE_PATTERNS),
    )
    parser.addini(
        "perfguard_cache_dir",
        help=f"perfguard: where exported/quantized models are cached (default {CACHE_DIR}).",
        default=CACHE_DIR,
    )
    parser.addini(
        "perfguard_shard",
        help="perfguard: the twin of --perfguard-shard (K/N).",
        default=None,
    )
    parser.addini(
        "perfguard_shard_plan",
        help="perfguard: the twin of --perfguard-shard-plan (a file).",
        default=None,
    )
    parser.addini(
        "perfguard_devices",
        help="perfguard: the twin of --perfguard-devices.",
        default="auto",
    )
