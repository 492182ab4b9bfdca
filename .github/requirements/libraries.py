"""Record the shared libraries the GPU lock's native code needs and what provides them.

`make lock` runs this after compiling the locks (or alone: `python
.github/requirements/libraries.py`; needs `pyelftools` and the PyPI index). For each
package pinned in perfguard-gpu.txt it finds the wheel whose sha256 the lock allows
(PyPI's simple JSON API), and reads the wheel's file list through HTTP range requests,
never downloading the multi-GB CUDA wheels whole:

- ``provides``: the shared libraries the wheel ships (``lib*.so*`` file names);
- ``needs``: for the extension modules whose loading perfguard depends on (ONNX Runtime's
  execution providers, the TensorRT bindings), their ELF ``DT_NEEDED`` entries, read
  with pyelftools from the member itself.

It writes perfguard-gpu.libs.json. tests/project/test_workflows.py checks, without the network,
that every wheel of the lock is recorded under the hash the lock pins (a lock changed
without `make lock` fails), that none is a source distribution (which would run code
and may download from another index at install time), and that every library needed
is shipped by a locked wheel or is one the runner provides (``RUNNER_LIBRARIES``,
docs/ci.md): ONNX Runtime 1.31's TensorRT provider linking ``libnvinfer.so.10`` beside
TensorRT 11 bindings linking ``libnvinfer.so.11`` cannot pass.
"""

from __future__ import annotations

import io
import json
import re
import sys
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOCK = HERE / "perfguard-gpu.txt"
RECORD = HERE / "perfguard-gpu.libs.json"
SIMPLE = "https://pypi.org/simple"

#: What the GPU runner provides itself: the C runtime, the NVIDIA driver, and TensorRT's
#: native libraries of the major the lock's bindings and ONNX Runtime's TensorRT
#: provider link (PyPI has them only as placeholders that download from NVIDIA's index).
RUNNER_LIBRARIES: dict[str, str] = {
    "libc.so.6": "glibc 2.28 or newer",
    "libm.so.6": "glibc",
    "libdl.so.2": "glibc",
    "libpthread.so.0": "glibc",
    "librt.so.1": "glibc",
    "ld-linux-x86-64.so.2": "glibc",
    "libstdc++.so.6": "the system's libstdc++",
    "libgcc_s.so.1": "the system's libgcc",
    "libcuda.so.1": "the NVIDIA driver",
    "libnvinfer.so.10": "TensorRT 10 for CUDA 13 (the runner image)",
    "libnvinfer_plugin.so.10": "TensorRT 10 for CUDA 13 (the runner image)",
    "libnvonnxparser.so.10": "TensorRT 10 for CUDA 13 (the runner image)",
}

#: Members whose ELF dependencies are recorded: they are what perfguard loads.
INSPECTED = re.compile(
    r"(onnxruntime/capi/libonnxruntime_providers_[a-z_]+\.so|tensorrt[a-z_]*/tensorrt\.so"
    r"|onnxruntime_genai/libonnxruntime-genai-cuda\.so)$"
)
_SONAME = re.compile(r"(?:^|/)(lib[^/]*\.so(?:\.[0-9]+)*)$")
_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^ \\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def locked_pins(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """``{name: (version, sha256s)}`` of a hash-locked requirements file."""
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    name = version = ""
    hashes: set[str] = set()
    for line in text.splitlines():
        pin = _PIN.match(line)
        if pin:
            if name:
                pins[name] = (version, frozenset(hashes))
            name, version, hashes = pin.group(1).lower(), pin.group(2), set()
        hashes.update(_HASH.findall(line))
    if name:
        pins[name] = (version, frozenset(hashes))
    return pins


class _RangeFile(io.RawIOBase):
    """A remote file read through HTTP range requests: what zipfile needs to list a
    wheel and read one member without fetching the rest."""

    def __init__(self, url: str, size: int) -> None:
        self.url, self.size, self.pos = url, size, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"})
        with urllib.request.urlopen(request, timeout=120) as response:
            data: bytes = response.read()
        self.pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _needed(elf_bytes: bytes) -> list[str]:
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(elf_bytes))
    return sorted(
        tag.needed
        for section in elf.iter_sections()
        if isinstance(section, DynamicSection)
        for tag in section.iter_tags()
        if tag.entry.d_tag == "DT_NEEDED"
    )


def _wheel_for(name: str, version: str, hashes: frozenset[str]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{SIMPLE}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        files = json.load(response)["files"]
    allowed = [f for f in files if f.get("hashes", {}).get("sha256") in hashes]
    wheels = [
        f
        for f in allowed
        if f["filename"].endswith(".whl")
        and re.search(r"(manylinux[^.]*x86_64|-any)\.whl$", f["filename"])
        and re.search(r"-(cp311|py3|py2\.py3|cp3[0-9]*-abi3)-|-none-", f["filename"])
    ]
    if not wheels:
        kinds = ", ".join(f["filename"] for f in allowed) or "nothing"
        raise SystemExit(
            f"{name}=={version}: no Linux x86_64 wheel among the locked hashes ({kinds})"
        )
    return wheels[0]


def record(name: str, version: str, hashes: frozenset[str]) -> dict[str, Any]:
    wheel = _wheel_for(name, version, hashes)
    remote = zipfile.ZipFile(
        io.BufferedReader(_RangeFile(wheel["url"], int(wheel["size"])), 1 << 20)
    )
    members = remote.namelist()
    provides = sorted({m.group(1) for m in map(_SONAME.search, members) if m})
    needs = {member: _needed(remote.read(member)) for member in members if INSPECTED.search(member)}
    return {
        "version": version,
        "wheel": wheel["filename"],
        "sha256": wheel["hashes"]["sha256"],
        "provides": provides,
        "needs": needs,
    }


def unmet(recorded: dict[str, Any]) -> list[str]:
    """Each library a recorded member needs that no locked wheel ships and the runner
    does not provide, as ``"package: member needs soname"``."""
    wheels = recorded["wheels"]
    shipped = {lib for wheel in wheels.values() for lib in wheel["provides"]}
    return [
        f"{name}: {member} needs {lib}"
        for name, wheel in sorted(wheels.items())
        for member, libs in sorted(wheel["needs"].items())
        for lib in libs
        if lib not in shipped and lib not in RUNNER_LIBRARIES
    ]


def main() -> int:
    pins = locked_pins(LOCK.read_text(encoding="utf-8"))
    wheels = {}
    for name, (version, hashes) in sorted(pins.items()):
        print(f"  {name}=={version}", file=sys.stderr)
        wheels[name] = record(name, version, hashes)
    text = json.dumps({"lock": LOCK.name, "wheels": wheels}, indent=1, sort_keys=True) + "\n"
    RECORD.write_text(text, encoding="utf-8")
    print(f"wrote {RECORD.relative_to(HERE.parent.parent)}: {len(wheels)} wheels")
    missing = unmet(json.loads(text))
    for line in missing:
        print(f"not provided: {line}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
