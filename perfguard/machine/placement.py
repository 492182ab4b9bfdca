"""Where a parallel worker measures: its CPU cores, its device, its intra-op threads.

Under pytest-xdist several workers measure at once in one box. Two workers must never
measure on the same cores, and each GPU worker gets a device of its own, so each
worker is *placed* before it imports any runtime:

* **cores**: the controller's CPU set (``os.sched_getaffinity(0)``) is cut into
  ``workercount`` disjoint, contiguous slices (:func:`partition_cpus`); worker ``i``
  gets slice ``i`` through ``os.sched_setaffinity``. More workers than cores is
  refused: a worker would share a core.
* **device**: worker ``i`` gets ``devices[i mod len(devices)]`` through
  ``CUDA_VISIBLE_DEVICES`` (the device list setting, else one per visible GPU,
  :func:`visible_devices`; none visible: no binding).
* **threads**: a scenario without ``threads:`` runs with one intra-op thread per core
  of its slice (:func:`inherited_threads`, read by ``perfguard.measure.opencell``).

The placement travels to the worker's children (isolated workers, A/B workers) the way
a process's environment does: the affinity is inherited, and the environment variables
below are set in the worker's ``os.environ``. ``PERFGUARD_RUN_PID`` names the run's
controller, so the contention check (``perfguard.measure.canary``) counts the CPU time
of the whole run (:func:`run_cpu_ns`) as its own, not as a busy neighbour.

Pure functions and frozen records; nothing here imports a runtime.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from perfguard.machine.telemetry import load_nvml

__all__ = [
    "RUN_PID_ENV",
    "THREADS_ENV",
    "Placement",
    "first_visible_device",
    "inherited_threads",
    "nvml_index",
    "parse_devices",
    "partition_cpus",
    "place_worker",
    "run_cpu_ns",
    "run_root_pid",
    "visible_devices",
    "worker_index",
]

#: The intra-op threads of a scenario without ``threads:`` in a placed worker.
THREADS_ENV = "PERFGUARD_WORKER_THREADS"
#: The pid of the run's controller: its process tree is the run, not a neighbour.
RUN_PID_ENV = "PERFGUARD_RUN_PID"
CUDA_ENV = "CUDA_VISIBLE_DEVICES"

_PROC = Path("/proc")


@dataclass(frozen=True)
class Placement:
    """One worker's share of the box: ``cpus`` (disjoint from every other worker's),
    ``device`` (a ``CUDA_VISIBLE_DEVICES`` entry, or None: no GPU binding)."""

    worker: str  # the xdist worker id, e.g. "gw0"
    index: int
    count: int
    cpus: tuple[int, ...]
    device: str | None = None

    @property
    def threads(self) -> int:
        """Intra-op threads of a scenario that does not set ``threads:``."""
        return len(self.cpus)

    def describe(self) -> str:
        """``gw0: cores 0-1 (2 threads), device 1``."""
        device = f"device {self.device}" if self.device is not None else "no device"
        plural = "s" if self.threads != 1 else ""
        cores = cpu_ranges(self.cpus)
        return f"{self.worker}: cores {cores} ({self.threads} thread{plural}), {device}"

    def environment(self) -> dict[str, str]:
        """The variables a placed worker sets for itself and its children."""
        env = {THREADS_ENV: str(self.threads)}
        if self.device is not None:
            env[CUDA_ENV] = self.device
        return env


def partition_cpus(cpus: Iterable[int], count: int) -> tuple[tuple[int, ...], ...]:
    """``cpus`` cut into ``count`` disjoint slices that cover them all, deterministically.

    Sorted, then cut into contiguous runs (neighbouring core numbers usually share a
    cache); the first ``len % count`` slices take one core more. Raises ValueError when
    there are fewer cores than slices (a worker would share a core) or ``count < 1``.
    """
    ordered = sorted(set(cpus))
    if count < 1:
        raise ValueError(f"worker count must be >= 1, got {count}")
    if count > len(ordered):
        raise ValueError(f"{count} workers need at least {count} cores, found {len(ordered)}")
    size, extra = divmod(len(ordered), count)
    slices = []
    start = 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        slices.append(tuple(ordered[start:end]))
        start = end
    return tuple(slices)


def place_worker(
    worker: str, count: int, cpus: Iterable[int], devices: tuple[str, ...]
) -> Placement:
    """The placement of xdist worker ``worker`` (``gw<i>``) among ``count`` workers."""
    index = worker_index(worker)
    if not 0 <= index < count:
        raise ValueError(f"worker {worker} is outside a run of {count} workers")
    share = partition_cpus(cpus, count)[index]
    device = devices[index % len(devices)] if devices else None
    return Placement(worker=worker, index=index, count=count, cpus=share, device=device)


def worker_index(worker: str) -> int:
    """``gw3`` -> 3 (pytest-xdist names its workers ``gw<index>``)."""
    digits = worker[2:] if worker.startswith("gw") else worker
    if not digits.isdigit():
        raise ValueError(f"not a pytest-xdist worker id: {worker!r} (expected gw<index>)")
    return int(digits)


def parse_devices(text: str) -> tuple[str, ...]:
    """A device list setting (``0,1`` or GPU UUIDs, comma or space separated)."""
    return tuple(part for part in text.replace(",", " ").split() if part)


def visible_devices(
    environ: Mapping[str, str] | None = None,
    gpu_count: Callable[[], int] | None = None,
) -> tuple[str, ...]:
    """One entry per GPU this process may use, found without importing a runtime.

    ``CUDA_VISIBLE_DEVICES`` when set (its entries as given; empty: none); else
    ``0 .. n-1`` for the ``n`` GPUs NVML sees; else none.
    """
    env = os.environ if environ is None else environ
    if CUDA_ENV in env:
        entries = parse_devices(env[CUDA_ENV])
        # CUDA stops at the first invalid entry; "-1" is the usual way to hide all.
        kept: list[str] = []
        for entry in entries:
            if entry.startswith("-"):
                break
            kept.append(entry)
        return tuple(kept)
    count = (gpu_count or _nvml_gpu_count)()
    return tuple(str(i) for i in range(count))


def first_visible_device(environ: Mapping[str, str] | None = None) -> str | None:
    """The entry CUDA calls device 0 (``CUDA_VISIBLE_DEVICES``'s first), or None when
    the variable is unset (device 0 is then GPU 0)."""
    env = os.environ if environ is None else environ
    if CUDA_ENV not in env:
        return None
    entries = parse_devices(env[CUDA_ENV])
    return entries[0] if entries else None


def nvml_index(cuda_index: int, environ: Mapping[str, str] | None = None) -> int:
    """The NVML (physical) index of the GPU CUDA calls ``cuda_index`` in this process.

    ``CUDA_VISIBLE_DEVICES`` renumbers the GPUs CUDA sees; NVML does not. A numeric
    entry is the physical index (in PCI order: set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` when
    the GPUs differ); a UUID entry is looked up through NVML. Unset, or an entry NVML
    cannot resolve: ``cuda_index`` itself.
    """
    env = os.environ if environ is None else environ
    if CUDA_ENV not in env:
        return cuda_index
    entries = parse_devices(env[CUDA_ENV])
    if not 0 <= cuda_index < len(entries):
        return cuda_index
    entry = entries[cuda_index]
    if entry.isdigit():
        return int(entry)
    nvml, _ = load_nvml()
    if nvml is None:
        return cuda_index
    try:
        return int(nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByUUID(entry)))
    except Exception:  # an unknown UUID or a MIG instance: the best guess stays
        return cuda_index
    finally:
        nvml.nvmlShutdown()


def _nvml_gpu_count() -> int:
    nvml, _ = load_nvml()
    if nvml is None:
        return 0
    try:
        return int(nvml.nvmlDeviceGetCount())
    except Exception:  # a driver that answers nothing: no GPU to bind
        return 0
    finally:
        nvml.nvmlShutdown()


def inherited_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """The intra-op threads a placed worker (or its child) gives a scenario without
    ``threads:``; None outside a placed worker (the runtime's own default)."""
    raw = (os.environ if environ is None else environ).get(THREADS_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def run_root_pid(environ: Mapping[str, str] | None = None) -> int | None:
    """The pid of the run's controller in a placed worker (or its child), else None."""
    raw = (os.environ if environ is None else environ).get(RUN_PID_ENV, "")
    return int(raw) if raw.isdigit() else None


def cpu_ranges(cpus: Iterable[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``0-2,5``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def run_cpu_ns(root: int, skip: int, proc: Path = _PROC) -> int:
    """CPU time (user + system, ns) of ``root`` and all its descendants but ``skip``.

    The run's own processes: the controller, its xdist workers and their children
    (isolated and A/B workers). Read from ``/proc/<pid>/stat`` (clock ticks); 0 where
    there is no ``/proc``. A process that exits between two readings takes its CPU
    time with it (the difference then reads as a neighbour's, as it did before).
    """
    try:
        tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 0
    parents: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    try:
        entries = list(proc.iterdir())
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.isdigit():
            continue
        stat = _read_stat(entry / "stat")
        if stat is None:
            continue
        ppid, ticks = stat
        pid = int(entry.name)
        parents.setdefault(ppid, []).append(pid)
        times[pid] = ticks
    total = 0
    stack = [root]
    seen: set[int] = set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if pid != skip:
            total += times.get(pid, 0)
        stack.extend(parents.get(pid, ()))
    return total * tick_ns


def _read_stat(path: Path) -> tuple[int, int] | None:
    """(ppid, utime + stime in ticks) of one ``/proc/<pid>/stat``, or None."""
    try:
        text = path.read_text()
    except OSError:  # the process exited meanwhile
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    _, _, rest = text.rpartition(")")
    fields = rest.split()
    try:
        # After the name: state(0) ppid(1) ... utime(11) stime(12)
        return int(fields[1]), int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None
