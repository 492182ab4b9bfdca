"""The judging policy: which figures can be gated, in which unit and direction, and the
defaults every verdict rests on.

One table (``METRICS``) and one set of defaults, read by the suite loader (which gate
keys a suite may write and in which units), the archived comparison, same-run A/B, load
levels, the CLI and the reports. Nothing else may spell a gateable metric name, a default
limit or a confidence level out again.

Why these defaults:

* ``DEFAULT_GATES``: P95 latency +5%. Users judge a service by its slow requests, and
  +5% is the smallest change our users asked to catch; the confidence bound keeps it
  from firing on sampling noise.
* ``CONFIDENCE``: every bound is one-sided at 99%: a gate that runs on every commit must
  not cry wolf more than about once in a hundred unchanged runs.
* ``CONTENTION_LIMIT``: a measurement is invalid when other processes used more than 10%
  of the CPUs meanwhile (an idle CI machine shows 0-2%, a second job on a 2-core runner
  ~50%; such contention slows a multi-threaded runtime 1.5-5x, and no canary sees it).
  A setting: ``--perfguard-contention-limit`` / ini ``perfguard_contention_limit``.
* ``NORMALISE``: canary normalisation is off by default. The canary is a short
  single-threaded probe; on shared hosts its own noise moved P95 ratios more than the
  machine drift it removes. The plugin, ``perfguard compare`` and ``perfguard report``
  all start from this one default.
* ``NOISE_K`` and ``MIN_HISTORY``: the archived noise floor (std/mean of a scenario's P95
  over stored ancestor commits, at least 3 of them) widens a limit to ``NOISE_K`` times
  itself when the machine cannot resolve the gate's own limit.
* ``SLO_GATE``: an SLO search resolves its level only to its last step (3-6% wide), so
  its throughput is gated at -10%, not -5%.
* Inconclusive cells (``invalid`` verdicts): a cell made invalid by something that
  passes (other processes on the CPUs, an unstable run) waits for quiet and is
  re-measured, at most ``INCONCLUSIVE_ROUNDS`` (2) times. "Quiet" is other processes
  under the contention limit for ``QUIET_SECONDS`` (3 s: three 1 s ``/proc/stat``
  windows, so one lull between two compile jobs does not count) running. A cell waits
  at most ``QUIET_WAIT_S`` (30 s: a pip install, a compile or a neighbour's short test
  is over by then; a second CI job taking minutes is not, and waiting longer would
  only delay the verdict), a session at most ``QUIET_BUDGET_S`` (120 s), so a runner
  that stays busy all session adds at most two minutes however many cells it has. A
  wait that ends without quiet is not followed by a round (re-measuring on a busy
  machine measures the neighbour again). A cell still invalid after that fails its
  item under ``inconclusive = "fail"`` (what CI passes) and warns under ``"warn"``
  (``INCONCLUSIVE``, the local default: a busy laptop must not turn a run red).
* A/B's sequential rule: interim looks stop on a regression only at a 99.9% bound
  (Haybittle-Peto), and stop "no regression" at a 95% upper bound (a stop that can only
  miss, never raise a false alarm).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

__all__ = [
    "CONFIDENCE",
    "CONTENTION_LIMIT",
    "DEFAULT_GATES",
    "DEGENERATE_MAX_ABS",
    "DEGENERATE_SPREAD",
    "FUTILITY_CONFIDENCE",
    "GENERATIVE_METRICS",
    "INCONCLUSIVE",
    "INCONCLUSIVE_CHOICES",
    "INCONCLUSIVE_ROUNDS",
    "INTERIM_CONFIDENCE",
    "LATENCY_QS",
    "LOAD_MAX_CLIENTS",
    "LOOP_MAX_ITERATIONS",
    "LOOP_MAX_SECONDS",
    "MAX_INPUT_MIB",
    "METRICS",
    "MIN_HISTORY",
    "NAME_MAX_CHARS",
    "NOISE_K",
    "NORMALISE",
    "QUIET_BUDGET_S",
    "QUIET_SAMPLE_S",
    "QUIET_SECONDS",
    "QUIET_WAIT_S",
    "REFUSED_METRICS",
    "SAMPLE_SETS",
    "SLO_GATE",
    "SUITE_MAX_BYTES",
    "SUITE_MAX_DEPTH",
    "SUITE_MAX_NODES",
    "THREADS_FLOOR",
    "THREADS_MARGIN",
    "TOKEN_SAMPLES",
    "GENERATE_MAX_TOKENS",
    "GateMetric",
    "GateSpec",
    "MetricKind",
    "gate_metric",
    "limit_unit",
    "samples_needed",
    "threads_limit",
]


class MetricKind(str, Enum):
    """What a gateable figure measures; decides its unit and how it is compared."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"
    MEMORY = "memory"


@dataclass(frozen=True)
class GateSpec:
    """A limit on one figure, compared against the baseline.

    ``metric`` is a name from ``METRICS`` (``p95``, ``throughput``, ``peak_memory``...).
    ``limit`` is a relative change when ``relative`` (0.05 for "+5%"), else an absolute
    amount in the metric's limit unit (ms for latency, MiB for memory, /s for
    throughput). ``higher_is_worse`` says which direction is a regression.
    """

    metric: str
    limit: float
    relative: bool = True
    higher_is_worse: bool = True


@dataclass(frozen=True)
class GateMetric:
    """One gateable figure: its suite key, what it is and how a limit on it is written.

    ``unit`` is the unit of the stored figure (``ns`` per request, ``/s``, ``MiB``);
    ``units`` maps each unit a suite may write an absolute limit in to the factor that
    turns it into ``limit_unit`` (the unit ``GateSpec.limit`` holds). ``quantile`` is the
    percentile a latency metric reads from its ``samples``. ``has`` says which
    runs record the figure; ``examples`` are a relative and an absolute limit, for
    messages and docs.
    """

    name: str
    kind: MetricKind
    label: str
    unit: str
    limit_unit: str
    units: Mapping[str, float]
    higher_is_worse: bool
    has: str
    examples: tuple[str, str]
    quantile: float | None = None
    aliases: tuple[str, ...] = field(default=())
    #: Which per-request samples a latency metric reads (one of ``SAMPLE_SETS``):
    #: ``request`` (each request's latency: a generative request's end to end),
    #: ``ttft``/``tpot`` (one per generative request) or ``itl`` (every gap between two
    #: tokens, grouped by request: its bounds resample whole requests).
    samples: str = "request"

    @property
    def sign(self) -> str:
        """The sign a limit is written with: ``+`` when higher is worse."""
        return "+" if self.higher_is_worse else "-"


_TIME_UNITS: Mapping[str, float] = {"ms": 1.0, "us": 1e-3, "s": 1000.0}
_MEMORY_UNITS: Mapping[str, float] = {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}


#: The sample sets a latency metric may read (``GateMetric.samples``).
SAMPLE_SETS: tuple[str, ...] = ("request", "ttft", "itl", "tpot")
#: What each generative sample set is, for labels, docs and the report.
TOKEN_SAMPLES: Mapping[str, str] = {
    "ttft": "time to first token: from sending a request to its first token",
    "itl": "inter-token latency: each gap between two consecutive tokens of a request",
    "tpot": "time per output token: (end to end - TTFT) / (tokens - 1), one per request",
}
_GENERATIVE_HAS = "generative cells (`generate:`)"


def _latency(name: str, q: float, samples: str = "request") -> GateMetric:
    token = samples != "request"
    return GateMetric(
        name=name,
        kind=MetricKind.LATENCY,
        label=f"{samples.upper()} P{q:g}" if token else f"P{q:g} latency",
        unit="ns",
        limit_unit="ms",
        units=_TIME_UNITS,
        higher_is_worse=True,
        has=_GENERATIVE_HAS if token else "every measured cell (per-request samples)",
        examples=("+5%", "+2ms" if samples == "ttft" or not token else "+0.5ms"),
        quantile=q,
        samples=samples,
    )


METRICS: tuple[GateMetric, ...] = (
    _latency("p50", 50.0),
    _latency("p90", 90.0),
    _latency("p95", 95.0),
    _latency("p99", 99.0),
    _latency("p999", 99.9),
    GateMetric(
        name="throughput",
        kind=MetricKind.THROUGHPUT,
        label="throughput",
        unit="/s",
        limit_unit="/s",
        units={"/s": 1.0},
        higher_is_worse=False,
        has="every measured cell (items/s; a load level's achieved rate)",
        examples=("-5%", "-100/s"),
    ),
    *(
        _latency(f"{samples}_p{q:g}", q, samples)
        for samples in ("ttft", "itl", "tpot")
        for q in (50.0, 90.0, 95.0, 99.0)
    ),
    GateMetric(
        name="tokens_per_s",
        kind=MetricKind.THROUGHPUT,
        label="output tokens/s",
        unit="tokens/s",
        limit_unit="tokens/s",
        units={"tokens/s": 1.0, "/s": 1.0},
        higher_is_worse=False,
        has=_GENERATIVE_HAS,
        examples=("-5%", "-50tokens/s"),
        aliases=("tokens/s", "output_tokens_per_s"),
    ),
    GateMetric(
        name="goodput",
        kind=MetricKind.THROUGHPUT,
        label="goodput",
        unit="/s",
        limit_unit="/s",
        units={"/s": 1.0},
        higher_is_worse=False,
        has=_GENERATIVE_HAS + " under `load:` with `goodput:` limits",
        examples=("-5%", "-2/s"),
    ),
    GateMetric(
        name="peak_memory",
        kind=MetricKind.MEMORY,
        label="peak memory",
        unit="MiB",
        limit_unit="MiB",
        units=_MEMORY_UNITS,
        higher_is_worse=True,
        has="cells whose process peak memory was recorded",
        examples=("+5%", "+50MiB"),
        aliases=("peak_memory_mib", "memory"),
    ),
    GateMetric(
        name="gpu_mem",
        kind=MetricKind.MEMORY,
        label="peak GPU memory",
        unit="MiB",
        limit_unit="MiB",
        units=_MEMORY_UNITS,
        higher_is_worse=True,
        has="cells on a CUDA device",
        examples=("+10%", "+256MiB"),
        aliases=("gpu_peak_memory_mib",),
    ),
)

# Names a user may try that perfguard deliberately does not gate: why, and what to gate.
REFUSED_METRICS: Mapping[str, str] = {
    "mean": (
        "the mean latency is reported but not gated (a few outliers move it, it hides a "
        "slower tail, and it has no distribution-free confidence bound): gate `p50` for "
        "the typical request or `p95` for the tail"
    ),
}

_BY_NAME: dict[str, GateMetric] = {alias: m for m in METRICS for alias in (m.name, *m.aliases)}

#: The request-latency percentiles (``p50``...``p999``): what every cell records, what a
#: ``LatencySummary`` holds and what same-run A/B gates.
LATENCY_QS: Mapping[str, float] = {
    m.name: m.quantile for m in METRICS if m.quantile is not None and m.samples == "request"
}
#: The gates only a generative cell has figures for (its token figures).
GENERATIVE_METRICS: frozenset[str] = frozenset(
    m.name for m in METRICS if m.has.startswith(_GENERATIVE_HAS)
)

# --------------------------------------------------------------------------- defaults

DEFAULT_GATES: tuple[GateSpec, ...] = (GateSpec(metric="p95", limit=0.05),)
SLO_GATE = GateSpec("throughput", 0.10, relative=True, higher_is_worse=False)
CONFIDENCE = 0.99
INTERIM_CONFIDENCE = 0.999
FUTILITY_CONFIDENCE = 0.95
CONTENTION_LIMIT = 0.10
NORMALISE = False
NOISE_K = 2.0
MIN_HISTORY = 3
# Where a run's baseline comes from, and how a suspected regression is confirmed: the
# defaults of --perfguard-baseline, --perfguard-baseline-dir, --perfguard-target-branch
# and --perfguard-confirm-rounds (and their ini twins), of the gatekeeper's settings and
# of the archive.
BASELINE = "auto"  # auto | none | <git ref> | <path to a results/baseline file>
BASELINE_DIR = "baselines"
TARGET_BRANCH = "main"
CONFIRM_ROUNDS = 2

# Inconclusive cells (see above): what a cell still invalid after its rounds does to
# its item, the rounds, and the bounds on waiting for quiet.
INCONCLUSIVE_CHOICES = ("fail", "warn")
INCONCLUSIVE = "warn"
INCONCLUSIVE_ROUNDS = 2
QUIET_SECONDS = 3.0
QUIET_SAMPLE_S = 1.0
QUIET_WAIT_S = 30.0
QUIET_BUDGET_S = 120.0

# Opening a model and warming it up (issue 15, clean process trees). How long one of
# these steps may take before the cell fails: an in-process cell's watchdog
# (perfguard.measure.watchdog) dumps the Python stacks and fails it; an isolated worker
# is killed with its process group. Generous, because exporting, quantizing or compiling
# a model on its first open can take minutes; only a hang should reach it. A setting:
# --perfguard-open-timeout / ini perfguard_open_timeout (seconds).
OPEN_TIMEOUT_S = 600.0


def gate_metric(name: str) -> GateMetric | None:
    """The table's entry for ``name`` (or one of its aliases, any case), else None."""
    return _BY_NAME.get(name.lower())


def limit_unit(unit: str) -> tuple[str, float]:
    """``(limit unit, factor from the stored unit)`` for a stored figure's ``unit``.

    ``ns`` -> ``("ms", 1e-6)``; an unknown or empty unit -> itself with factor 1.
    """
    for m in METRICS:
        if m.unit == unit:
            factor = 1e-6 if m.kind is MetricKind.LATENCY else 1.0
            return m.limit_unit, factor
    return unit, 1.0


def samples_needed(q: float, confidence: float = CONFIDENCE) -> int:
    """Fewest samples for a one-sided order-statistic bound on the q-th percentile.

    The largest of n samples exceeds the true q-quantile with probability
    1 - (q/100)**n; that must reach ``confidence``. P95 at 99% -> 90.
    """
    p = q / 100.0
    if p <= 0.0:
        return 1
    if p >= 1.0:
        raise ValueError(f"percentile q={q} has no finite-sample bound")
    # The small slack keeps an exact integer from being pushed up by float error.
    return max(1, math.ceil(math.log(1.0 - confidence) / math.log(p) - 1e-9))


# -- Input sizes (issue 15: inputs sized before they are made) ------------------------
# The most memory one cell's generated inputs (its timing tensors and its generated
# accuracy samples together) may declare, in MiB, before any of them is allocated. A
# slip such as `shape: [100000, 100000, 8]` (596 GiB) is then one InputError naming the
# input and its bytes, instead of an allocation that fails, or swaps the machine,
# minutes into a run. 4 GiB is over a thousand times the example suites' largest
# inputs and still fits a batch of video frames or long sequences; a larger need is a
# setting away: --perfguard-max-input-mib / ini perfguard_max_input_mib. Independently
# of it, inputs must fit in the memory the host has available (models.inputs).
MAX_INPUT_MIB = 4096


# -- Degenerate accuracy references (issue 28) -----------------------------------------
# A floating reference output that cannot tell a good cell from a bad one makes the
# accuracy checks on that output inconclusive (perfguard.accuracy.metrics.degenerate),
# not passed or failed on noise:
#
# * near zero: its largest finite |value| is below DEGENERATE_MAX_ABS. 1e-6 is about
#   8 float32 ulps at 1.0 (epsilon 1.19e-7): an output that small, computed from inputs
#   and weights of order 1, is the rounding left over from sums that cancelled, not a
#   signal; fp16 holds it only as a subnormal with a few bits and int8 rounds it to 0.
#   (A random-weight mobilenet_v3_small gives logits of ~2e-9: int8 then outputs zeros,
#   cosine and top-1 read 0 while KL and max abs error read ~1e-9, all noise.)
#   Probabilities clear it: the largest of a softmax over V classes is >= 1/V, and V
#   stays below 1e6.
# * constant: every row of its last axis (the whole output when that axis has one value
#   or there is none) spans at most DEGENERATE_SPREAD of its largest |value|, i.e. its
#   values agree to float32 rounding: softmax is uniform, top-k is decided by index
#   order, cosine compares two flat vectors; none of them says anything.
# * non-finite: any NaN/Inf in the reference output.
DEGENERATE_MAX_ABS = 1e-6
DEGENERATE_SPREAD = 1e-6


# --------------------------------------------------------------------------- suite limits
#
# Bounds on what a suite file may ask for (perfguard.suite). A suite is a few KB with a
# few hundred YAML nodes; these caps are 100x beyond that and refuse a hostile or
# mistaken file in well under a second and a few MB, before anything is built from it.
# Each refusal is a SuiteError at file:line that names the cap and the fix.
#
# * SUITE_MAX_BYTES: the file's size (1 MiB).
# * SUITE_MAX_NODES: YAML values the file expands to, counting every use of an alias
#   (`*name`) as a full copy: an "alias bomb" (`&a [*b, *b, ...]` nested ten deep) is a
#   few hundred bytes that expands to 10**10 values.
# * SUITE_MAX_DEPTH: nesting of mappings and lists (also through aliases); the deepest
#   real suite nests about 8 levels.
# * NAME_MAX_CHARS: scenario, model, input, tag, shape-bucket and preset names (they
#   become pytest ids, markers and file names).
# * Threads: at most max(THREADS_FLOOR, os.cpu_count() * THREADS_MARGIN). The floor keeps
#   a suite written for a large server loading on a laptop; beyond it a value is a typo.
# * Loops (`warmup`, `measure`): `iterations` at most LOOP_MAX_ITERATIONS (each request
#   keeps a latency sample), `seconds` and `max_seconds` at most LOOP_MAX_SECONDS; an
#   open-loop level schedules at most LOOP_MAX_ITERATIONS requests. `seconds` above the
#   loop's `max_seconds` is refused rather than quietly cut at the cap.
# * LOAD_MAX_CLIENTS: `concurrency` and `workers` of a `load:` (one thread each).
SUITE_MAX_BYTES = 1024 * 1024
SUITE_MAX_NODES = 100_000
SUITE_MAX_DEPTH = 64
NAME_MAX_CHARS = 200
THREADS_MARGIN = 4
THREADS_FLOOR = 256
LOOP_MAX_ITERATIONS = 10_000_000
LOOP_MAX_SECONDS = 3600.0
LOAD_MAX_CLIENTS = 4096
# * GENERATE_MAX_TOKENS: `prompt_tokens` and `new_tokens` of a `generate:` (a request's
#   tokens each keep a timestamp; a million is far beyond any model's context).
GENERATE_MAX_TOKENS = 1_048_576


def threads_limit() -> int:
    """The most ``threads`` a suite may ask for on this machine (see the suite limits)."""
    return max(THREADS_FLOOR, (os.cpu_count() or 1) * THREADS_MARGIN)


# --- the stored files perfguard reads (issue 15: an archive that trusts none of its
# files). A file read beyond one of these limits is refused with the limit named; each
# sits far above anything a perfguard run writes.
#: Latency samples in one encoded block (one cell of one launch): ten million is over
#: 16 minutes of back-to-back 100 us calls; a block declaring more is refused before
#: it is decompressed.
MAX_STORED_SAMPLES = 10_000_000
#: Bytes of one archived golden-output array once decompressed.
MAX_ARCHIVED_ARRAY_BYTES = 256 * 1024 * 1024
#: Bytes of one stored JSON file (results.json, comparison.json, shard.json, a baseline
#: archive file), checked before it is read: a baseline of five launches of a large
#: suite is tens of MB, so 1 GiB is far above what perfguard writes, while a larger file
#: (a 6 GB file named by a hand-made comparison.json) would be read whole into memory
#: and end in a MemoryError. Every reader goes through ``core.atomicio``'s bounded reads.
MAX_STORED_FILE_BYTES = 1024 * 1024 * 1024
#: Seconds after which a temporary file left by a killed baseline saver is swept by
#: the next save (a live saver writes its temporary file in well under a second, and
#: only under the same lock).
STALE_TEMP_S = 60.0
