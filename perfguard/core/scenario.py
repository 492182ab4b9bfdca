"""Frozen data classes describing what to measure: one ``Scenario`` per matrix cell.

``perfguard.suite.loader`` builds these from YAML; everything downstream only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from perfguard.core.errors import Location
from perfguard.core.paths import display_path
from perfguard.core.policy import DEFAULT_GATES, GateSpec, MetricKind, gate_metric

BACKENDS: tuple[str, ...] = ("torch", "onnxruntime", "tensorrt", "server")
#: The backend of a served model (``models: {name: {server: ...}}``): a running
#: inference server reached over its OpenAI-compatible HTTP API.
SERVER_BACKEND = "server"
# torch's ONNX exporters: ``torch.onnx.export(..., dynamo=False)`` (TorchScript tracing,
# the default) and ``dynamo=True`` (torch.export and onnxscript's translations).
EXPORTERS: tuple[str, ...] = ("torchscript", "dynamo")
#: The lowest opset the dynamo exporter writes itself: it converts a lower one down
#: after the fact, which can leave a graph ONNX Runtime refuses (GPT-2's Split at 17).
DYNAMO_MIN_OPSET = 18
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8", "int4")
GRAPH_OPT_LEVELS: tuple[str, ...] = ("disable", "basic", "extended", "all")
# Numpy dtype names accepted for inputs.
DTYPES: tuple[str, ...] = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
#: The dtype of a served embedding model's input (``backend: server``, ``api:
#: embeddings``): shape ``[texts, tokens]``, the texts of one request, each cut to
#: ``tokens`` of the server's own tokens (an array of ``texts`` strings in the feeds).
TEXT_DTYPE = "text"
#: The one output of a served embedding model: a ``texts x dimension`` float32 array.
EMBEDDING_OUTPUT = "embedding"


@dataclass(frozen=True)
class InputSpec:
    """One model input: a fixed shape and how to fill it, reproducibly.

    Exactly one of (``low``/``high``) and ``fill`` applies; with neither, floats are
    drawn from a standard normal and integers from [0, 100). ``high`` is exclusive
    for integers. The tensor depends only on (seed, name, shape, dtype, range).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    low: float | None = None
    high: float | None = None
    fill: float | None = None
    seed: int = 0


#: The OpenAI-compatible APIs a served model's cells call (``ServerSpec.api``).
#: ``completions`` and ``chat`` generate (``generate:`` cells); ``embeddings`` is a
#: single call (``/v1/embeddings``) on text inputs (``TEXT_DTYPE``).
SERVER_APIS: tuple[str, ...] = ("completions", "chat", "embeddings")
#: The ``SERVER_APIS`` that generate tokens.
GENERATIVE_APIS: tuple[str, ...] = ("completions", "chat")
#: The placeholders a server ``command`` may hold: ``{port}`` (required) is a free port
#: perfguard picks, ``{python}`` the Python perfguard runs in; the others are the cell's
#: values (an axis the matrix varies must appear in it).
SERVER_PLACEHOLDERS: tuple[str, ...] = ("port", "python", "threads", "precision", "device")
#: The request body a generative served cell sends beside ``max_tokens``, so that every
#: request generates exactly ``new_tokens`` (``{new_tokens}`` is replaced): vLLM, SGLang
#: and llama.cpp's servers read both; a suite's ``request:`` overrides or drops them.
FIXED_LENGTH_BODY: tuple[tuple[str, object], ...] = (
    ("ignore_eos", True),
    ("min_tokens", "{new_tokens}"),
)


@dataclass(frozen=True)
class ServerSpec:
    """A served model: an inference server perfguard starts (``command``) or one already
    running (``url``), called over its OpenAI-compatible HTTP API.

    ``command`` is an argument list run in the suite's folder in a process group of its
    own (``SERVER_PLACEHOLDERS`` filled per cell), with ``env`` added to the environment;
    perfguard waits up to ``start_timeout_s`` for ``health`` (a path GET answering 200)
    and stops the group when the cell ends. ``api_key_env`` names the environment
    variable holding the API key (never the key itself). ``model`` is the served model's
    id (None: the first ``/v1/models`` lists); ``api`` one of ``SERVER_APIS``; ``stream``
    whether tokens are streamed (server-sent events) or come in one reply; ``request``
    extra JSON body fields (a None value drops one of ``FIXED_LENGTH_BODY``).
    ``exclusive``: the server needs its device to itself (most of a GPU's memory), so
    same-run A/B starts the two sides' servers one after the other, never side by side.
    """

    location: Location
    command: tuple[str, ...] = ()
    url: str | None = None
    health: str = "/v1/models"
    start_timeout_s: float = 300.0
    env: tuple[tuple[str, str], ...] = ()
    api_key_env: str | None = None
    model: str | None = None
    api: str = "completions"
    stream: bool = True
    request: tuple[tuple[str, object], ...] = ()
    request_timeout_s: float = 60.0
    exclusive: bool = False

    @property
    def generative(self) -> bool:
        """Whether the served model generates (``completions``, ``chat``) rather than
        embeds (``embeddings``)."""
        return self.api in GENERATIVE_APIS

    @property
    def placeholders(self) -> frozenset[str]:
        """The ``SERVER_PLACEHOLDERS`` the command uses."""
        return frozenset(
            name for name in SERVER_PLACEHOLDERS for arg in self.command if f"{{{name}}}" in arg
        )


@dataclass(frozen=True)
class ModelSpec:
    """Where a model comes from: a Python factory, an ONNX file or a server (exactly one)."""

    name: str
    location: Location
    base_dir: Path
    factory: str | None = None  # "module:function" returning a torch.nn.Module
    factory_kwargs: tuple[tuple[str, object], ...] = ()
    onnx: Path | None = None
    inputs: tuple[InputSpec, ...] = ()
    inputs_file: Path | None = None  # .npz of real inputs, keyed by input name
    output_names: tuple[str, ...] = ()
    opset: int = 17
    exporter: str = "torchscript"  # one of EXPORTERS (factory models)
    server: ServerSpec | None = None  # a served model (backend `server`)


@dataclass(frozen=True)
class LoopSpec:
    """A loop that runs until BOTH ``iterations`` and ``seconds`` are reached.

    ``max_seconds`` caps the loop so a slow model cannot run forever; the
    iteration count still wins over it only up to that cap.
    """

    iterations: int
    seconds: float
    max_seconds: float = 300.0


@dataclass(frozen=True)
class QuantSpec:
    """How ``int8`` is produced on ONNX Runtime (``onnxruntime.quantization``).

    ``mode`` ``dynamic`` quantizes weights ahead of time and activations on the
    fly; ``static`` also fixes activation ranges from calibration data (the
    scenario's accuracy inputs) with ``calibration`` = minmax | entropy |
    percentile. ``name`` is the preset's name in the suite (``quantization:``
    axis / key), used in cell ids. ``reduce_range`` None is ``auto``: 7-bit
    weights where ONNX Runtime's uint8-by-int8 kernels saturate
    (``perfguard.models.quantize.reduce_range``).
    """

    name: str = "default"
    mode: str = "dynamic"
    per_channel: bool = False
    reduce_range: bool | None = None  # None: auto
    weight_type: str = "qint8"  # qint8 | quint8
    activation_type: str = "quint8"  # static only: qint8 | quint8
    calibration: str = "minmax"  # static only: minmax | entropy | percentile
    calibration_samples: int | None = None  # None: all accuracy inputs
    #: Static only: zero points of 0 for activations and weights (TensorRT's Q/DQ
    #: networks require it; its backend sets it).
    symmetric: bool = False


@dataclass(frozen=True)
class AccuracyInputs:
    """The N inputs accuracy is checked on, separate from the timing inputs.

    Exactly one source: ``function`` (``module:function`` returning a list of
    feed dicts, a dict of arrays stacked on a new leading axis of length N, or a
    tuple ``(inputs, labels)``), ``file`` (``.npz``, each key an input name with
    a leading axis of length N), or generated from the model's input specs with
    seeds ``seed + i`` (the default). Each sample has the timing inputs' shapes.
    ``labels`` is an optional ``.npy``/``.npz`` file of N labels for the task metric.
    """

    count: int = 32
    seed: int = 1000
    file: Path | None = None
    function: str | None = None
    labels: Path | None = None


@dataclass(frozen=True)
class AccuracyGates:
    """Limits on accuracy figures; ``None`` is not checked.

    Against the reference: ``cosine_min`` (lowest per-sample cosine),
    ``cosine_mean_min``, ``kl_max`` (mean KL(reference || current)),
    ``topk_agreement_min`` (share of samples whose top-``topk`` index sets
    agree, order ignored), ``max_abs_err``, ``mean_abs_err``, ``max_rel_err``
    (see ``perfguard.accuracy.metrics`` for how zeros are treated), ``nonfinite_max``
    (NaN/Inf count, default 0). Against the baseline commit's golden outputs:
    ``baseline_cosine_min``; against its accuracy figures: ``cosine_drift_max``.
    """

    cosine_min: float | None = None
    cosine_mean_min: float | None = None
    kl_max: float | None = None
    topk: int = 1
    topk_agreement_min: float | None = None
    max_abs_err: float | None = None
    mean_abs_err: float | None = None
    max_rel_err: float | None = None
    nonfinite_max: int = 0
    baseline_cosine_min: float | None = 0.999
    # Drift of the figures between commits: the largest allowed drop of
    # cosine_mean (vs the same reference) since the baseline commit.
    cosine_drift_max: float | None = None
    # Generative cells (``perfguard.accuracy.generated``): the lowest share of greedy
    # tokens equal to the reference's, and the largest relative rise of the perplexity
    # on ``AccuracySpec.text`` over the reference's (0.05: +5%).
    token_match_min: float | None = None
    perplexity_rise_max: float | None = None


@dataclass(frozen=True)
class TaskMetricSpec:
    """A user metric ``module:function(outputs, labels) -> float`` and its allowed drop.

    ``outputs`` is the list of output arrays stacked over the N accuracy inputs.
    ``drop_max`` is in the metric's own units (1.0 = one point on a 0-100 scale).
    """

    function: str
    higher_is_better: bool = True
    drop_max: float = 1.0


@dataclass(frozen=True)
class AccuracyText:
    """A generative cell's text set for perplexity (``accuracy.text``): the first
    ``count`` lines of a JSONL ``file`` (``{"prompt": text}`` per line, as
    ``generate.file``) long enough to give ``tokens`` ids by ``tokenizer``."""

    file: Path
    tokenizer: str
    tokens: int = 64
    count: int = 8


@dataclass(frozen=True)
class AccuracySpec:
    """Accuracy checks of one cell.

    ``reference`` holds matrix overrides naming another cell of the same
    scenario (e.g. ``(("backend", "torch"), ("precision", "fp32"))``); empty means
    no reference cell (only the baseline's golden outputs are used). ``golden``
    inputs' outputs are archived with the baseline. ``outputs`` selects outputs
    by name or index (empty: all). ``kl_on`` is ``probabilities`` or ``logits``
    (softmax with ``temperature`` first). ``per_output`` overrides ``gates``
    for named/indexed outputs. ``text`` is a generative cell's perplexity text set.
    """

    inputs: AccuracyInputs = AccuracyInputs()
    reference: tuple[tuple[str, str], ...] = ()
    against_baseline: bool = True
    golden: int = 16
    outputs: tuple[str, ...] = ()
    kl_on: str = "logits"
    temperature: float = 1.0
    gates: AccuracyGates = AccuracyGates()
    per_output: tuple[tuple[str, AccuracyGates], ...] = ()
    task: TaskMetricSpec | None = None
    text: AccuracyText | None = None


ORT_GPU_PROVIDERS: tuple[str, ...] = ("cuda", "tensorrt")
COMPILE_MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class TensorRTSpec:
    """How a TensorRT engine is built (``backend: tensorrt``).

    ``profiles`` holds one optimization profile as ``(input, min, opt, max)``
    shapes; empty means min = opt = max = the input's fixed shape. The engine
    and the timing cache are keyed by the ONNX file's hash, the TensorRT
    version, the GPU model and these settings.
    """

    workspace_mib: int = 1024
    profiles: tuple[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = ()
    timing_cache: bool = True
    builder_optimization_level: int | None = None  # 0..5; None: TensorRT's default (3)


@dataclass(frozen=True)
class GpuSpec:
    """GPU options of a cell (``gpu:`` in a suite); ignored on the CPU.

    torch: ``cuda_graph`` (capture one request, replay it), ``cudnn_benchmark``
    (None: leave torch's setting), ``compile_mode`` (``torch.compile`` mode;
    None: eager). ONNX Runtime: ``ort_provider`` (``cuda`` or ``tensorrt``
    execution provider), ``provider_options`` (passed to it as strings),
    ``iobinding`` (inputs and outputs resident on the device), ``include_copies``
    (time the host->device and device->host copies too), ``allow_cpu_fallback``
    (else any node placed on the CPU provider fails the cell). Telemetry:
    ``allow_throttle`` (a run during power/thermal throttling stays valid),
    ``exclusive`` (refuse the run while other processes use the GPU).
    """

    cuda_graph: bool = False
    cudnn_benchmark: bool | None = None
    compile_mode: str | None = None
    ort_provider: str = "cuda"
    provider_options: tuple[tuple[str, str], ...] = ()
    iobinding: bool = True
    include_copies: bool = False
    allow_cpu_fallback: bool = False
    allow_throttle: bool = False
    exclusive: bool = False
    tensorrt: TensorRTSpec = TensorRTSpec()


LOAD_MODES: tuple[str, ...] = ("closed", "open")
ARRIVALS: tuple[str, ...] = ("poisson", "constant")
SESSION_MODES: tuple[str, ...] = ("shared", "per_worker")


@dataclass(frozen=True)
class BatchingSpec:
    """Dynamic batching as an inference server does it (``perfguard.measure.loadgen``).

    A model worker takes the oldest queued request, then waits for more until it
    holds ``max_batch`` requests or ``max_wait_ms`` has passed since that oldest
    request arrived, and serves them in one model call of ``k x`` the request's
    batch. Each request's latency includes its wait in the queue.
    """

    max_batch: int
    max_wait_ms: float


@dataclass(frozen=True)
class SloSpec:
    """Search for the highest throughput whose latency percentile meets a target.

    The level (rate or concurrency, whichever the load names) starts at
    ``start`` and is multiplied by ``factor`` until the target is missed (or
    ``max_level`` is reached); then ``refine`` bisection steps narrow the gap
    between the last level that met it and the first that did not. The cell is
    gated on the throughput of the best level that met the target.

    A *goodput search* (a generative cell with ``goodput:`` limits) sets
    ``goodput_share`` instead of ``target_ms``: a level meets it when at least that
    share of its requests is good (TTFT and TPOT both within the limits), the SLO
    attainment of DistServe's goodput; ``percentile`` is then only the latency each step
    records.
    """

    percentile: float  # 95.0 for `p95_ms`
    target_ms: float | None  # None: a goodput search
    start: float
    factor: float = 2.0
    refine: int = 4
    max_level: float | None = None
    goodput_share: float | None = None


@dataclass(frozen=True)
class GoodputSpec:
    """When a generative request under load is *good* (``load: goodput:``): its time to
    first token (from its scheduled send) within ``ttft_ms`` and its time per output
    token within ``tpot_ms``, both at once, as MLPerf's and vLLM's goodput count them.
    The level's goodput is its good requests per second."""

    ttft_ms: float
    tpot_ms: float


@dataclass(frozen=True)
class LoadSpec:
    """Concurrent load for one cell (one level of the scenario's `load:`).

    ``mode`` ``closed``: ``level`` clients each send their next request when
    the last one returned. ``open``: requests arrive at ``level`` per second
    (``arrivals`` poisson or constant, seeded), scheduled in advance and sent at
    their times whatever happened to earlier ones; ``workers`` model instances
    serve them from one queue. ``sessions`` says whether the workers share one
    runtime session or each opens its own. A request dispatched more than
    ``late_ms`` after its scheduled time is *late* (default: 1 ms or a quarter of
    the mean gap between arrivals, whichever is larger); more than ``late_max``
    of them makes the level ``invalid`` (the generator, not the model, fell
    behind). See :meth:`late_limit_ms`.
    ``slo`` is set on the one search cell of a scenario (``level`` = its start).
    ``goodput`` (generative cells only): the limits a request must meet to count in the
    level's goodput.
    """

    mode: str
    level: float
    arrivals: str = "poisson"
    seed: int = 0
    workers: int = 1
    sessions: str = "shared"
    batching: BatchingSpec | None = None
    slo: SloSpec | None = None
    late_ms: float | None = None  # None: max(1 ms, a quarter of the mean arrival gap)
    late_max: float = 0.05
    goodput: GoodputSpec | None = None
    #: Share of a level's requests that may fail (an HTTP error, a timeout, a cut stream)
    #: before the cell fails; failed requests are never timed.
    errors_max: float = 0.0

    def late_limit_ms(self) -> float:
        """How late a request may be sent before it counts as late.

        Lateness never flatters a figure (latency runs from the scheduled time);
        it matters when it thins out the offered load, so the default scales with
        the gap between arrivals: at 30/s a 3 ms hiccup of the generator thread
        is 10% of a gap, at 1000/s it is three requests behind.
        """
        if self.late_ms is not None:
            return self.late_ms
        return max(1.0, 250.0 / self.level) if self.mode == "open" else 1.0

    @property
    def level_id(self) -> str:
        """The cell id part: ``c4`` (closed), ``r200`` (open, per second), ``slo``."""
        if self.slo is not None:
            return "slo"
        return f"c{int(self.level)}" if self.mode == "closed" else f"r{self.level:g}"


#: The backends with a generation path (``generate:`` cells; ``backends.generative``).
GENERATIVE_BACKENDS: tuple[str, ...] = ("torch", "onnxruntime", SERVER_BACKEND)
#: The precisions ONNX Runtime GenAI's model builder writes, per execution provider
#: (``cpu``/``cuda``): int8/int4 are weight-only (``MatMulNBits``), fp16 a GPU graph. The
#: loader fails a generative ``onnxruntime`` cell at any other; the build checks it too.
GENAI_PRECISIONS: dict[str, tuple[str, ...]] = {
    "cpu": ("fp32", "int8", "int4"),
    "cuda": ("fp32", "fp16", "int4"),
}
#: How a generative cell's prompts are made (``GenerateSpec.source``).
PROMPT_SOURCES: tuple[str, ...] = ("random", "file")


@dataclass(frozen=True)
class GenerateSpec:
    """A generative cell (``generate:`` in a suite): requests of fixed shape, each a batch
    of ``batch`` prompts of exactly ``prompt_tokens`` tokens that generate exactly
    ``new_tokens`` tokens by greedy decoding (generation never stops early, so every
    request does the same work).

    Prompts: ``prompts`` distinct ones, used in turn. Without ``file`` their token ids are
    drawn with ``seed`` uniformly from ``[0, vocab)`` (``vocab`` None: the model's
    ``config.vocab_size``); with ``file`` (JSONL, one ``{"prompt": text}`` per line) the
    first ``prompts`` lines long enough are encoded by ``tokenizer`` (``module:function``
    returning an object with ``encode(text) -> list[int]``) and cut to ``prompt_tokens``.
    ``prompt_tokens`` is one value per cell: a suite's list of lengths (the prompt-length
    buckets) is one set of cells each, id ``p<length>``.
    """

    prompt_tokens: int
    new_tokens: int
    batch: int = 1
    prompts: int = 8
    seed: int = 0
    vocab: int | None = None
    file: Path | None = None
    tokenizer: str | None = None

    @property
    def bucket_id(self) -> str:
        """The cell id part of this prompt length: ``p64``."""
        return f"p{self.prompt_tokens}"

    @property
    def source(self) -> str:
        return "file" if self.file is not None else "random"


@dataclass(frozen=True)
class Scenario:
    """One matrix cell of one scenario of one suite: everything needed to measure it."""

    suite: Path
    name: str
    cell_id: str  # "" when the scenario has no matrix; else e.g. "onnxruntime-int8"
    model: ModelSpec
    location: Location
    backend: str = "torch"
    device: str = "cpu"
    precision: str = "fp32"
    threads: int | None = None
    graph_optimization_level: str = "all"
    warmup: LoopSpec = LoopSpec(iterations=10, seconds=0.5)
    measure: LoopSpec = LoopSpec(iterations=100, seconds=2.0)
    stability_tolerance: float = 0.10
    tags: tuple[str, ...] = ()
    gates: tuple[GateSpec, ...] = DEFAULT_GATES
    quantization: QuantSpec = QuantSpec()
    accuracy: AccuracySpec | None = None
    # Set when the cell's combination is unsupported: the cell fails with it.
    error: str | None = None
    matrix_values: tuple[tuple[str, str], ...] = field(default=())
    # Concurrent load (perfguard.measure.loadcell); None: one request at a time.
    load: LoadSpec | None = None
    # The `shapes:` bucket this cell's inputs come from ("" without buckets).
    shape_bucket: str = ""
    gpu: GpuSpec = GpuSpec()
    # Measure this cell in a worker process of its own (perfguard.worker.isolate).
    isolate: bool = False
    # Take an operator profile after the timed measurement (perfguard.measure.profiling);
    # a cell whose latency regressed is profiled without it.
    profile: bool = False
    # fp16 from a converted ONNX graph (onnxruntime; TensorRT 11's strongly typed
    # networks): op types or node names left in float32. None: the backend's default
    # (TensorRT: perfguard.backends.tensorrt_build.KEEP_FP32_OPS; onnxruntime: none).
    keep_fp32: tuple[str, ...] | None = None
    # A generative cell: token-level timing of greedy generation (perfguard.measure.generation).
    generate: GenerateSpec | None = None

    @property
    def item_name(self) -> str:
        """The pytest item name, e.g. ``minilm[onnxruntime-int8]``."""
        return f"{self.name}[{self.cell_id}]" if self.cell_id else self.name

    def scenario_id(self, rootdir: Path | None = None) -> str:
        """Stable id used in results and baselines: ``suites/x.yaml::minilm[ort-int8]``."""
        suite = self.suite.as_posix() if rootdir is None else display_path(self.suite, rootdir)
        return f"{suite}::{self.item_name}"

    @property
    def is_gpu(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def own_process(self) -> bool:
        """Whether the cell is measured in a worker process of its own: asked
        (``isolate: true``), or it gates ``peak_memory``. A process's resident memory
        keeps what earlier cells left (their allocators' caches, a leak); resetting the
        high-water mark starts it from there, so only a fresh process gives a cell a
        figure that no cell run before it can move."""
        return self.isolate or any(g.metric == "peak_memory" for g in self.gates)

    @property
    def memory_gates(self) -> tuple[GateSpec, ...]:
        """The cell's gates on a memory figure (``peak_memory``, ``gpu_mem``)."""
        return tuple(
            g
            for g in self.gates
            if (m := gate_metric(g.metric)) is not None and m.kind is MetricKind.MEMORY
        )
