"""The real TensorRT Python bindings, importable on a machine without a GPU.

``make tools`` downloads the bindings wheels of TensorRT 10 and 11
(``tensorrt-cu13-bindings`` 10.16, the GPU lock's, and 11.4: 1.3 MB each) into
``.perfguard/tools/tensorrt/``. Their extension module links ``libnvinfer``,
``libnvinfer_plugin`` and ``libnvonnxparser`` (hundreds of MB, not all on PyPI);
here those are stood in for by tiny libraries of the same sonames, compiled with
the machine's C compiler, whose entry points return NULL: every enum, class,
method and property of the real module is there to inspect, and whatever would
reach the native library behaves as TensorRT does without a usable GPU (no
builder, no runtime).

Each version is imported in a process of its own (both are the module
``tensorrt_bindings``): :func:`probe` runs a snippet there and returns what it
prints as JSON.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".perfguard" / "tools" / "tensorrt"
_WHEEL = re.compile(r"tensorrt_cu\d+_bindings-(?P<version>\d+(?:\.\d+)+)-.*\.whl$")
# What the bindings call in the native libraries when imported or asked for a builder.
_STUB_SOURCE = """
void *createInferBuilder_INTERNAL(void *logger, int version) { return 0; }
void *createInferRefitter_INTERNAL(void *engine, void *logger, int version) { return 0; }
void *createInferRuntime_INTERNAL(void *logger, int version) { return 0; }
void *getBuilderPluginRegistry(int capability) { return 0; }
void *getPluginRegistry(void) { return 0; }
void *createNvOnnxParser_INTERNAL(void *network, void *logger, int version) { return 0; }
void *createNvOnnxParserRefitter_INTERNAL(void *refitter, void *logger, int version) { return 0; }
int getNvOnnxParserVersion(void) { return 0; }
int initLibNvInferPlugins(void *logger, const char *namespace_) { return 0; }
"""
_LIBRARIES = ("libnvinfer", "libnvinfer_plugin", "libnvonnxparser")


@dataclass(frozen=True)
class RealTensorRT:
    """One unpacked bindings wheel and its stand-in native libraries."""

    version: str
    site: Path  # holds the package tensorrt_bindings
    stubs: Path  # libnvinfer.so.<major> and friends

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (required in CI: .ci/run runs `make tools`)")
    pytest.skip(reason)


def _stubs(folder: Path, major: int) -> Path:
    stubs = folder / "stubs"
    if all((stubs / f"{lib}.so.{major}").is_file() for lib in _LIBRARIES):
        return stubs
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        _missing("no C compiler to build the TensorRT stand-in libraries")
    stubs.mkdir(parents=True, exist_ok=True)
    source = stubs / "stubs.c"
    source.write_text(_STUB_SOURCE)
    for lib in _LIBRARIES:
        name = f"{lib}.so.{major}"
        subprocess.run(
            [str(compiler), "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", str(stubs / name),
             str(source)],
            check=True,
            capture_output=True,
        )  # fmt: skip
    return stubs


def real_tensorrts() -> list[RealTensorRT]:
    """Every downloaded bindings wheel, unpacked (once) with its stubs; skips without."""
    wheels = sorted(TOOLS.glob("tensorrt_cu*_bindings-*.whl")) if TOOLS.is_dir() else []
    if not sys.platform.startswith("linux"):
        pytest.skip("the TensorRT bindings wheels are Linux builds")
    if not wheels:
        _missing(f"no TensorRT bindings wheels in {TOOLS} (run `make tools`)")
    found: list[RealTensorRT] = []
    for wheel in wheels:
        match = _WHEEL.search(wheel.name)
        if match is None:
            continue
        version = match.group("version")
        folder = TOOLS / f"tensorrt-{version}"
        site = folder / "site"
        if not (site / "tensorrt_bindings" / "__init__.py").is_file():
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
        found.append(RealTensorRT(version, site, _stubs(folder, int(version.split(".")[0]))))
    return found


def probe(real: RealTensorRT, code: str, *, stubs: Path | None = None) -> Any:
    """Run ``code`` with ``trt`` the real bindings of ``real``; what it prints, as JSON.

    ``code`` sees ``trt``, ``json`` and perfguard (the repository is on the path) and
    must print one JSON document. ``stubs``: another folder of stand-in libraries (one
    left out, say); the bindings are then not imported up front.
    """
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        filter(None, [str(stubs or real.stubs), env.get("LD_LIBRARY_PATH")])
    )
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(real.site), str(ROOT), env.get("PYTHONPATH")])
    )
    script = "import json\n" + ("" if stubs else "import tensorrt_bindings as trt\n") + code
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"TensorRT {real.version} probe failed:\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])
