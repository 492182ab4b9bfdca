"""The machine a run was measured on: what must match to compare, and what is just noted.

Two runs are only comparable when the hardware and the runtime stack match, so
``comparable`` holds exactly those facts and ``fingerprint`` hashes them. Facts
that change from run to run without changing speed in a systematic way
(hostname, load, kernel build) go to ``recorded`` and never block a comparison.

Nothing here imports torch, onnxruntime or tensorrt: importing them costs
seconds and may initialise a GPU; their installed versions come from package
metadata instead. GPU facts come from NVML (``pynvml``) or, failing that, from
``nvidia-smi``; a machine without a GPU has no GPU fields, and ``recorded`` says why
(``gpu_absent``: NVML's reason with its fix, and nvidia-smi's), so a GPU runner whose
driver is down does not pass for a CPU machine in silence.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from perfguard import __version__ as perfguard_version
from perfguard.machine.libraries import normalized
from perfguard.machine.placement import nvml_index
from perfguard.machine.telemetry import load_nvml, nvml_fix, static_info
from perfguard.records.results import Environment

ABSENT = "absent"

# Module-level so tests can point them at fixture files.
CPUINFO_PATH = Path("/proc/cpuinfo")
MEMINFO_PATH = Path("/proc/meminfo")
GOVERNOR_PATH = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")

NVIDIA_SMI_TIMEOUT_S = 10.0
#: A helper program's first line of output is cut to this many characters in a reason.
_SAID_MAX = 200

#: Runtime packages whose version changes measured speed; each is looked up under
#: the distribution names it ships as (the GPU builds are separate distributions).
RUNTIME_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "numpy": ("numpy",),
    # The `tensorrt` meta package pulls in `tensorrt-cu12`; either may be alone.
    "tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu11"),
}
#: Runtimes that enter the fingerprint only where installed: added after archives were
#: fingerprinted without them, so a machine without one keeps its fingerprint (and one
#: that installs it starts a new one, as a new runtime version should).
OPTIONAL_RUNTIMES: dict[str, tuple[str, ...]] = {
    "onnxruntime-genai": ("onnxruntime-genai", "onnxruntime-genai-cuda"),
}
#: Model libraries whose version changes the figures of the models built with them
#: (their layers, kernels, defaults): when a project's factory imports one (or one that
#: requires it, as sentence-transformers requires transformers), its version enters the
#: fingerprint. Any other distribution a factory imports is only recorded
#: (``model_libraries``); a project whose factories import none keeps its fingerprint.
MODEL_LIBRARIES = frozenset(
    {
        "diffusers",
        "open-clip-torch",
        "optimum",
        "peft",
        "sentence-transformers",
        "timm",
        "torchaudio",
        "torchvision",
        "transformers",
    }
)
#: Families whose distributions exclude each other: two of them installed side by
#: side is a broken setup (one shadows the other) worth seeing in a diff.
EXCLUSIVE_FAMILIES = frozenset({"onnxruntime"})


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _cpu_model() -> str:
    text = _read_text(CPUINFO_PATH)
    if text:
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name" and value.strip():
                # cpuinfo pads some names with runs of spaces; normalise them.
                return " ".join(value.split())
    if platform.system() == "Darwin":
        # platform.processor() says only "arm" on Apple silicon, hiding M1 vs M3.
        brand = _run_quiet(["sysctl", "-n", "machdep.cpu.brand_string"], timeout=5.0)
        if brand and brand.strip():
            return " ".join(brand.split())
    return platform.processor() or platform.machine() or "unknown"


#: x86 flags of the instructions that multiply uint8 by int8 into int32 directly.
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
_X86 = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})


def cpu_flags() -> frozenset[str]:
    """The first CPU's ``flags`` in ``/proc/cpuinfo`` (empty where there is none)."""
    text = _read_text(CPUINFO_PATH)
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def u8s8_saturates() -> bool:
    """Whether ONNX Runtime's uint8-by-int8 CPU kernels saturate here.

    On x86 without VNNI they sum pairs of products in int16 (``pmaddubsw``), which
    overflows for 8-bit weights: on an AVX2-only AMD EPYC a dynamic int8 MLP was
    off by 16% (relative L2), and by 1% with 7-bit weights (``reduce_range``), as
    ONNX Runtime's quantization guide advises for such machines. Unknown (no
    ``/proc/cpuinfo`` flags) or not x86: False.
    """
    if platform.machine().lower() not in _X86:
        return False
    flags = cpu_flags()
    return bool(flags) and not flags & INT8_DOT_FLAGS


def _run_quiet(args: list[str], timeout: float) -> str | None:
    """stdout of a helper program, or None when it is missing, fails or hangs."""
    return _run(args, timeout)[0]


def _run(args: list[str], timeout: float) -> tuple[str | None, str]:
    """``(stdout, "")`` of a helper program that succeeded, or ``(None, why)``: its exit
    status and first line of output, or why it did not run."""
    try:
        proc = subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None, f"gave no answer in {timeout:g} s"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"could not run: {exc}"
    if proc.returncode == 0:
        return proc.stdout, ""
    said = next(
        (line.strip() for line in (proc.stdout + "\n" + proc.stderr).splitlines() if line.strip()),
        "",
    )
    return None, f"exit status {proc.returncode}" + (f": {said[:_SAID_MAX]}" if said else "")


def package_version(names: tuple[str, ...], *, report_all: bool = False) -> str:
    """Installed version of the first distribution found, from metadata only.

    A build other than the first name is marked (``1.18.0 (onnxruntime-gpu)``)
    because it performs differently from the plain build of the same version;
    with ``report_all`` every one found is listed, joined by `` + ``. ``absent``
    when none is installed.
    """
    found: list[str] = []
    for name in names:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        found.append(version if name == names[0] else f"{version} ({name})")
        if not report_all:
            break
    return " + ".join(found) if found else ABSENT


def _decode(value: object) -> str:
    if isinstance(value, bytes):  # older pynvml returns bytes
        return value.decode("utf-8", "replace").strip()
    return str(value).strip()


def _gpu_from_nvml(pynvml: Any) -> dict[str, str]:
    """Device 0's name, driver and CUDA driver version from an initialised NVML (the
    caller shuts it down); empty when NVML sees no GPU; raises on any failure.

    Device 0 as CUDA numbers it: under ``CUDA_VISIBLE_DEVICES`` (a pytest-xdist worker
    bound to GPU 1) that GPU's facts, not physical GPU 0's. The index itself is never
    a fact: identical GPUs give one fingerprint and share baselines.
    """
    count = int(pynvml.nvmlDeviceGetCount())
    if count < 1:
        return {}
    index = nvml_index(0)
    handle = pynvml.nvmlDeviceGetHandleByIndex(index if index < count else 0)
    facts = {
        "gpu_model": _decode(pynvml.nvmlDeviceGetName(handle)),
        "gpu_driver": _decode(pynvml.nvmlSystemGetDriverVersion()),
        "gpu_count": str(count),
    }
    try:
        total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except Exception:  # an NVML without the call, or one that refuses it
        total = 0
    if total > 0:
        facts["gpu_memory_gib"] = _gib(total)
    # An int such as 12040 for CUDA 12.4.
    cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
    if cuda > 0:
        facts["cuda_major"] = str(cuda // 1000)
    return facts


def _nvml_probe() -> tuple[dict[str, str], str | None]:
    """``(facts, None)`` from NVML, or ``({}, why)``: NVML's reason, with its fix."""
    pynvml, why = load_nvml()
    if pynvml is None:
        return {}, why
    try:
        facts = _gpu_from_nvml(pynvml)
    except Exception as error:  # a driver that answers the start but not the reads
        fix = nvml_fix(error, pynvml)
        return {}, f"NVML could not read the GPU: {error}. Fix: {fix}"
    finally:
        # NVML counts starts; a failed shutdown changes no fact.
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    if not facts.get("gpu_model"):
        return {}, "NVML started but sees no GPU (nvmlDeviceGetCount is 0)"
    return facts, None


_CUDA_VERSION_RE = re.compile(r"CUDA Version\s*:\s*(\d+)")
_MIB_RE = re.compile(r"^\s*(\d+)\s*MiB\s*$")


def _gib(total_bytes: int) -> str:
    """A GPU's memory in whole GiB, as NVML and nvidia-smi both give it (80 for an
    80 GB part that reports 79.6 GiB): identity, not a measurement."""
    return str(round(total_bytes / 2**30))


def _gpu_from_nvidia_smi() -> tuple[dict[str, str], str | None]:
    """The same facts from ``nvidia-smi``, for machines without ``nvidia-ml-py``:
    ``(facts, None)``, or ``({}, why)``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}, "not on PATH"
    out, why = _run(
        [exe, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
        timeout=NVIDIA_SMI_TIMEOUT_S,
    )
    if out is None:
        return {}, why
    lines = [line for line in out.splitlines() if line.strip()]
    # The name may itself contain a comma; memory and driver are the last two fields.
    fields = lines[0].rsplit(",", 2) if lines else []
    if len(fields) != 3 or not fields[0].strip():
        return {}, "listed no GPU"
    name, memory, driver = (f.strip() for f in fields)
    facts = {"gpu_model": name, "gpu_driver": driver, "gpu_count": str(len(lines))}
    mib = _MIB_RE.match(memory)
    if mib:
        facts["gpu_memory_gib"] = _gib(int(mib.group(1)) * 2**20)
    # The query interface has no CUDA field; the plain banner shows it. Without it
    # the fingerprint would differ from the NVML path on the same machine.
    banner = _run_quiet([exe], timeout=NVIDIA_SMI_TIMEOUT_S) or ""
    match = _CUDA_VERSION_RE.search(banner)
    if match:
        facts["cuda_major"] = match.group(1)
    return facts, None


def probe_gpu() -> tuple[dict[str, str], str | None]:
    """``(gpu_facts(), None)`` where a GPU was found, else ``({}, why)``: what NVML and
    ``nvidia-smi`` each said (``NVML could not start: Driver Not Loaded. Fix: ...;
    nvidia-smi: exit status 9: NVIDIA-SMI has failed ...``)."""
    facts, nvml_why = _nvml_probe()
    if facts:
        return facts, None
    facts, smi_why = _gpu_from_nvidia_smi()
    if facts:
        return facts, None
    return {}, f"{nvml_why}; nvidia-smi: {smi_why}"


def gpu_facts() -> dict[str, str]:
    """``gpu_model``, ``gpu_memory_gib``, ``gpu_driver``, ``gpu_count`` and ``cuda_major``;
    empty without a GPU (``probe_gpu`` says why)."""
    return probe_gpu()[0]


def _meminfo_bytes(field: str) -> int | None:
    """``field`` of ``/proc/meminfo`` (e.g. ``MemTotal``) in bytes; None where unknown."""
    text = _read_text(MEMINFO_PATH)
    match = re.search(rf"^{field}:\s*(\d+)\s*kB", text, re.MULTILINE) if text else None
    return int(match.group(1)) * 1024 if match else None


def available_memory() -> int | None:
    """Bytes this process could still allocate: ``MemAvailable`` of ``/proc/meminfo``,
    lowered to the room left under a cgroup (v2) memory limit; None where unknown."""
    found = [b for b in (_meminfo_bytes("MemAvailable"),) if b is not None]
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            found.append(max(0, int(limit) - int((cgroup / "memory.current").read_text())))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def _memory_total() -> str | None:
    total = _meminfo_bytes("MemTotal")
    if total is not None:
        return str(total)
    try:
        return str(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # Windows, or an unknown name
        return None


def _load_average() -> str | None:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):  # not on Windows
        return None


def _affinity_count() -> str | None:
    # In a container or under taskset fewer CPUs may be usable than exist.
    try:
        return str(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return None


def cuda_libraries() -> dict[str, str]:
    """``cuda_runtime`` and ``cudnn`` versions torch was built with (a GPU machine only).

    They change kernels and so speed; empty when torch or its CUDA build is absent.
    """
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return {}
    try:
        import torch

        facts: dict[str, str] = {}
        if torch.version.cuda:
            facts["cuda_runtime"] = str(torch.version.cuda)
        backend = torch.backends.cudnn
        cudnn = backend.version() if backend.is_available() else None  # type: ignore[no-untyped-call]
        if cudnn:
            facts["cudnn"] = str(cudnn)
        return facts
    except Exception:  # a broken CUDA install must not stop the run; it shows as absent
        return {}


def _requirements(distribution: str) -> set[str]:
    """The normalised names of what ``distribution`` requires (extras' included)."""
    try:
        lines = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return set()
    return {normalized(m[0]) for line in lines if (m := re.match(r"[A-Za-z0-9._-]+", line))}


def model_libraries(distributions: Iterable[str]) -> dict[str, str]:
    """``{distribution: version}`` of the installed ``distributions`` a factory imports,
    with the :data:`MODEL_LIBRARIES` they require; perfguard and the runtimes (already
    in the fingerprint) left out."""
    runtimes = {normalized(d) for names in RUNTIME_DISTRIBUTIONS.values() for d in names}
    wanted = {normalized(d) for d in distributions} - runtimes - {"perfguard"}
    queue = sorted(wanted & MODEL_LIBRARIES)
    while queue:
        needed = _requirements(queue.pop()) & MODEL_LIBRARIES - wanted
        wanted |= needed
        queue += sorted(needed)
    found: dict[str, str] = {}
    for name in sorted(wanted):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def collect_environment(
    extra: Mapping[str, str] | None = None, libraries: Iterable[str] = ()
) -> Environment:
    """Fingerprint this machine. ``extra`` adds comparable fields and wins on a clash.

    ``libraries``: the distributions the project's factories import
    (:func:`perfguard.machine.libraries.imported_distributions`); those of
    :data:`MODEL_LIBRARIES` enter the fingerprint, every one is recorded."""
    gpu, gpu_absent = probe_gpu()
    comparable: dict[str, str] = {
        "cpu_model": _cpu_model(),
        "cpu_count": str(os.cpu_count() or 0),
        "machine": platform.machine() or "unknown",
        "os": platform.system() or "unknown",
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }
    for key, names in RUNTIME_DISTRIBUTIONS.items():
        comparable[key] = package_version(names, report_all=key in EXCLUSIVE_FAMILIES)
    for key, names in OPTIONAL_RUNTIMES.items():
        if (version := package_version(names)) != ABSENT:
            comparable[key] = version
    if gpu.get("gpu_model"):
        comparable["gpu_model"] = gpu["gpu_model"]
        if gpu.get("gpu_memory_gib"):
            comparable["gpu_memory_gib"] = gpu["gpu_memory_gib"]
        driver = gpu.get("gpu_driver", "")
        if driver:
            comparable["gpu_driver_major"] = driver.split(".")[0]
        if gpu.get("cuda_major"):
            comparable["cuda_major"] = gpu["cuda_major"]
        comparable.update(cuda_libraries())
    models = model_libraries(libraries)
    comparable.update({k: v for k, v in models.items() if k in MODEL_LIBRARIES})
    if extra:
        comparable.update({str(k): str(v) for k, v in extra.items()})

    optional: dict[str, str | None] = {
        "hostname": socket.gethostname() or platform.node(),
        "platform": platform.platform(),
        "python_full": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "perfguard": perfguard_version,
        "gpu_driver": gpu.get("gpu_driver"),
        "gpu_count": gpu.get("gpu_count"),
        # Why the fingerprint has no GPU: NVML's and nvidia-smi's own words.
        "gpu_absent": gpu_absent,
        "cpu_governor": (_read_text(GOVERNOR_PATH) or "").strip() or None,
        "cpu_affinity_count": _affinity_count(),
        "load_average": _load_average(),
        "memory_total_bytes": _memory_total(),
        # Every distribution the factories import, the fingerprint's and the others.
        "model_libraries": ", ".join(f"{k} {v}" for k, v in models.items()) or None,
    }
    if gpu.get("gpu_model"):
        # Power limit, persistence mode, application/max clocks: informative only.
        optional.update(
            {k: v for k, v in static_info(nvml_index(0)).items() if k not in comparable}
        )
    recorded = {k: v for k, v in optional.items() if v}
    return Environment.of(comparable, recorded)


def diff_comparable(a: Environment, b: Environment) -> dict[str, tuple[str | None, str | None]]:
    """Comparable fields that differ, as ``{key: (value in a, value in b)}``, sorted by key.

    A field present on one side only shows ``None`` on the other.
    """
    keys = sorted(set(a.comparable) | set(b.comparable))
    return {
        key: (a.comparable.get(key), b.comparable.get(key))
        for key in keys
        if a.comparable.get(key) != b.comparable.get(key)
    }
