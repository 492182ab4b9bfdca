"""The settings of one ``pytest --perfguard`` run, read once from options and ini keys.

Every setting follows one precedence: command line > ini key > built-in default
(the options and keys are declared in ``perfguard.plugin.options``). A value that
cannot be honoured is a ``pytest.UsageError`` at start-up, before anything is measured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from perfguard.ab.abrun import ABConfig
from perfguard.core.errors import ShardError
from perfguard.core.policy import INCONCLUSIVE_CHOICES, MAX_INPUT_MIB, OPEN_TIMEOUT_S
from perfguard.judge.gatekeeper import GateSettings
from perfguard.shard.plan import (
    SHARD_ENV,
    SHARD_PLAN_ENV,
    FixedPlan,
    ShardSpec,
    read_plan_file,
)

MIB = 1024 * 1024
# The words a boolean ini key takes (as pytest's own ``type="bool"`` does).
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0", "")


@dataclass(frozen=True)
class RunSettings:
    """What the command line and ini asked of this run."""

    rootdir: Path
    report_dir: Path
    cache_dir: Path
    suite_patterns: tuple[str, ...]
    explicit_args: frozenset[Path]  # files named on the command line: always collected
    judging: GateSettings  # the baseline to compare with, the gate and its limits
    isolate: bool = False
    profile: bool = False  # --perfguard-profile: an operator profile of every cell
    ab: ABConfig | None = None  # --perfguard-ab: same-run A/B against this ref
    is_worker: bool = False  # a pytest-xdist worker: measures, writes no files
    max_input_bytes: int = MAX_INPUT_MIB * MIB  # generated inputs per cell, at most
    open_timeout_s: float = OPEN_TIMEOUT_S  # model open and warm-up, in-process or isolated
    shard: ShardSpec | None = None  # --perfguard-shard: measure only this shard's cells
    shard_plan: FixedPlan | None = None  # --perfguard-shard-plan: the plan, made before
    shard_plan_out: Path | None = None  # --perfguard-shard-plan-out: write the plan here
    pythonpath: tuple[str, ...] = ()  # pytest's `pythonpath` ini entries, absolute

    @classmethod
    def from_config(cls, config: pytest.Config) -> RunSettings:
        rootdir = Path(config.rootpath)
        cache = Path(str(config.getini("perfguard_cache_dir")))
        ab_ref = config.getoption("perfguard_ab")
        shard = _shard(config)
        shard_plan, shard_plan_out = _shard_plan(config, rootdir, shard)
        return cls(
            rootdir=rootdir,
            report_dir=_path_setting(config, rootdir, "perfguard_report_dir"),
            cache_dir=cache if cache.is_absolute() else rootdir / cache,
            suite_patterns=tuple(config.getini("perfguard_suite_patterns")),
            explicit_args=_explicit_args(config),
            pythonpath=_ini_pythonpath(config),
            judging=GateSettings(
                baseline=str(
                    config.getoption("perfguard_baseline") or config.getini("perfguard_baseline")
                ),
                baseline_dir=_path_setting(config, rootdir, "perfguard_baseline_dir"),
                target_branch=str(
                    config.getoption("perfguard_target_branch")
                    or config.getini("perfguard_target_branch")
                ),
                save=bool(config.getoption("perfguard_save")),
                allow_dirty=bool(config.getoption("perfguard_allow_dirty")),
                gate=not config.getoption("perfguard_no_gate"),
                confirm_rounds=_confirm_rounds(config),
                normalise=bool(
                    config.getoption("perfguard_normalise") or config.getini("perfguard_normalise")
                ),
                contention_limit=_contention_limit(config),
                inconclusive=_inconclusive(config),
                save_invalid=_save_invalid(config),
            ),
            isolate=bool(config.getoption("perfguard_isolate")),
            profile=_profile(config),
            ab=(
                ABConfig(
                    ref=str(ab_ref),
                    python=config.getoption("perfguard_ab_python"),
                    pythonpath=_ini_pythonpath(config),
                )
                if ab_ref
                else None
            ),
            is_worker=hasattr(config, "workerinput"),
            max_input_bytes=int(
                _positive(
                    config,
                    "perfguard_max_input_mib",
                    "max input size",
                    "MiB",
                    "the most memory one cell's generated inputs may declare",
                )
                * MIB
            ),
            open_timeout_s=_positive(
                config,
                "perfguard_open_timeout",
                "open timeout",
                "seconds",
                "how long opening a model and its warm-up may take before the cell fails",
            ),
            shard=shard,
            shard_plan=shard_plan,
            shard_plan_out=shard_plan_out,
        )


def _path_setting(config: pytest.Config, rootdir: Path, name: str) -> Path:
    """A directory setting (option and ini key of the same name); relative to rootdir."""
    value = config.getoption(name) or str(config.getini(name))
    path = Path(value)
    return path if path.is_absolute() else rootdir / path


def _option_or_ini(config: pytest.Config, name: str) -> Any:
    """The command-line value of ``name`` when given, else its ini twin's (same name)."""
    value = config.getoption(name)
    return value if value is not None else config.getini(name)


def _contention_limit(config: pytest.Config) -> float:
    raw = _option_or_ini(config, "perfguard_contention_limit")
    try:
        limit = float(raw)
    except ValueError:
        limit = -1.0
    if not limit >= 0.0:  # also refuses NaN
        raise pytest.UsageError(
            f"perfguard: contention limit is {raw!r}; expected a share of all CPUs >= 0 "
            "(0.1: other processes may use 10% of the CPUs; 1 or more: never invalid). "
            "Fix: set --perfguard-contention-limit or ini perfguard_contention_limit"
        )
    return limit


def _positive(config: pytest.Config, name: str, what: str, unit: str, meaning: str) -> float:
    """The option-or-ini ``name`` as a finite number above 0, or a usage error."""
    raw = _option_or_ini(config, name)
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 < value < float("inf"):  # also refuses NaN
        option = "--" + name.replace("_", "-")
        raise pytest.UsageError(
            f"perfguard: {what} is {raw!r}; expected a number of {unit} > 0 ({meaning}). "
            f"Fix: set {option} or ini {name}"
        )
    return value


def _inconclusive(config: pytest.Config) -> str:
    raw = _option_or_ini(config, "perfguard_inconclusive")
    choice = str(raw).strip().lower()
    if choice not in INCONCLUSIVE_CHOICES:
        raise pytest.UsageError(
            f"perfguard: inconclusive policy is {raw!r}; expected one of "
            f"{', '.join(INCONCLUSIVE_CHOICES)} ('fail': a cell still invalid after its "
            "re-measurements fails its item; 'warn': it passes with a warning). "
            "Fix: set --perfguard-inconclusive or ini perfguard_inconclusive"
        )
    return choice


def _profile(config: pytest.Config) -> bool:
    """``--perfguard-profile`` (it can only switch profiling on), else ini ``perfguard_profile``."""
    if config.getoption("perfguard_profile"):
        return True
    raw = str(config.getini("perfguard_profile")).strip()
    word = raw.lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    where = f" in {config.inipath}" if config.inipath is not None else ""
    raise pytest.UsageError(
        f"perfguard: ini perfguard_profile{where} is {raw!r}; expected true or false "
        "(true: take an operator profile of every cell). Fix: write "
        "perfguard_profile = true (or false), or pass --perfguard-profile"
    )


def _save_invalid(config: pytest.Config) -> bool:
    wanted = bool(config.getoption("perfguard_save_invalid"))
    if wanted and not config.getoption("perfguard_save"):
        raise pytest.UsageError(
            "perfguard: --perfguard-save-invalid was given without --perfguard-save; it "
            "only lets a save go ahead when cells are inconclusive. Fix: add "
            "--perfguard-save, or drop --perfguard-save-invalid"
        )
    return wanted


def _shard(config: pytest.Config) -> ShardSpec | None:
    """``--perfguard-shard``, else ``$PERFGUARD_SHARD``, else ini ``perfguard_shard``.

    The variable sits between the two: a CI matrix sets it for one job of one run,
    which says more than a project-wide ini key, and less than a command line.
    """
    sources = (
        ("--perfguard-shard", config.getoption("perfguard_shard")),
        (f"${SHARD_ENV}", os.environ.get(SHARD_ENV, "")),
        ("ini perfguard_shard", str(config.getini("perfguard_shard") or "")),
    )
    for source, value in sources:
        if value and str(value).strip():
            try:
                return ShardSpec.parse(str(value), source=source)
            except ShardError as exc:
                raise pytest.UsageError(f"perfguard: {exc}") from exc
    return None


def _shard_plan(
    config: pytest.Config, rootdir: Path, shard: ShardSpec | None
) -> tuple[FixedPlan | None, Path | None]:
    """``--perfguard-shard-plan`` (else ``$PERFGUARD_SHARD_PLAN``, else ini
    ``perfguard_shard_plan``: the same order as ``_shard``), read now, and
    ``--perfguard-shard-plan-out``.

    Relative paths are the rootdir's, as every path setting's. A plan that cannot be
    used stops the run here: falling back to planning from this runner's archive is
    what lets two shards disagree.
    """
    sources = (
        ("--perfguard-shard-plan", config.getoption("perfguard_shard_plan")),
        (f"${SHARD_PLAN_ENV}", os.environ.get(SHARD_PLAN_ENV, "")),
        ("ini perfguard_shard_plan", str(config.getini("perfguard_shard_plan") or "")),
    )
    given = next(((s, str(v).strip()) for s, v in sources if v and str(v).strip()), None)
    out_value = config.getoption("perfguard_shard_plan_out")
    out = None if not out_value else rootdir / Path(str(out_value))
    wanted = given[0] if given is not None else "--perfguard-shard-plan-out" if out else None
    if wanted is not None and shard is None:
        raise pytest.UsageError(
            f"perfguard: {wanted} was given without a shard; a plan is of N shards. "
            f"Fix: add --perfguard-shard=K/N (or {SHARD_ENV}=K/N), e.g. "
            "--perfguard-shard=1/N in the plan job"
        )
    if given is None or shard is None:
        return None, out
    source, value = given
    if out is not None:
        raise pytest.UsageError(
            f"perfguard: {source} ({value}) and --perfguard-shard-plan-out were both given; "
            "a run either makes the plan (the plan job) or follows one (a shard). Fix: drop "
            f"one (in the plan job, unset {SHARD_PLAN_ENV})"
        )
    path = rootdir / Path(value)
    try:
        plan = read_plan_file(path, source=source, shard=shard)
    except ShardError as exc:
        raise pytest.UsageError(f"perfguard: {exc}") from exc
    return FixedPlan(path, source, plan), None


def _confirm_rounds(config: pytest.Config) -> int:
    raw = _option_or_ini(config, "perfguard_confirm_rounds")
    try:
        rounds = int(raw)
    except ValueError:
        rounds = -1
    if rounds < 0:
        raise pytest.UsageError(f"perfguard_confirm_rounds must be an integer >= 0, given: {raw!r}")
    return rounds


def _explicit_args(config: pytest.Config) -> frozenset[Path]:
    base = Path(config.invocation_params.dir)
    found = set()
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        found.add((path if path.is_absolute() else base / path).resolve())
    return frozenset(found)


def _ini_pythonpath(config: pytest.Config) -> tuple[str, ...]:
    """pytest's ``pythonpath`` ini entries, absolute (A/B maps them into each side's tree)."""
    try:
        entries = config.getini("pythonpath")
    except ValueError:  # a pytest without the setting
        return ()
    return tuple(str(Path(p).resolve()) for p in entries or ())
