"""perfguard's TensorRT code and its fakes against the real bindings of TensorRT 10 and 11.

No GPU: the real ``tensorrt_bindings`` of each version is imported with stand-in
native libraries (tests/helpers/tensorrt_real.py), so every name is the real one and
whatever reaches the native library behaves as TensorRT does without a usable GPU.
The chain this guards: the code calls only what the fakes offer (the fake tests fail
otherwise), and here the fakes offer only what the real modules have.
"""

from __future__ import annotations

import ast
import enum
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from perfguard.backends import tensorrt_backend, tensorrt_build
from perfguard.backends.tensorrt_build import OPTIONAL_MEMBERS
from tests.helpers import fake_tensorrt
from tests.helpers.tensorrt_real import RealTensorRT, probe, real_tensorrts

SOURCES = [Path(tensorrt_build.__file__), Path(tensorrt_backend.__file__)]
# The fake of each major, checked against the real bindings of that major.
FAKE_OF_MAJOR = {10: "10.3.0", 11: "11.4.0"}


@pytest.fixture(scope="module")
def reals() -> list[RealTensorRT]:
    found = real_tensorrts()
    majors = {real.major for real in found}
    assert {10, 11} <= majors, f"expected TensorRT 10 and 11 bindings, found {sorted(majors)}"
    return found


def direct_names(path: Path) -> set[str]:
    """Every ``trt.A`` / ``trt.A.B`` chain read in ``path`` (``trt`` the module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        chain: list[str] = []
        current: ast.expr = node
        while isinstance(current, ast.Attribute):
            chain.append(current.attr)
            current = current.value
        if isinstance(current, ast.Name) and current.id == "trt":
            names.add(".".join(reversed(chain)))
    # Keep the longest chains only: trt.A.B covers trt.A.
    return {n for n in names if not any(o.startswith(n + ".") for o in names)}


_RESOLVE = """
wanted = json.loads({wanted!r})
missing = []
for name in wanted:
    obj = trt
    for part in name.split("."):
        if not hasattr(obj, part):
            missing.append(name)
            break
        obj = getattr(obj, part)
print(json.dumps(missing))
"""


def test_every_name_perfguard_reads_directly_exists_in_tensorrt_10_and_11(
    reals: list[RealTensorRT],
) -> None:
    """``trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH`` used to be read before every
    build; TensorRT 11 has no such member, so every TensorRT cell raised AttributeError."""
    names = set().union(*(direct_names(path) for path in SOURCES))
    assert "Builder" in names and "MemoryPoolType.WORKSPACE" in names  # the scan works
    for real in reals:
        missing = probe(real, _RESOLVE.format(wanted=json.dumps(sorted(names))))
        # A name a version lacks is read only behind the capability that says so.
        unguarded = [n for n in missing if n.split(".")[0] not in OPTIONAL_MEMBERS]
        assert not unguarded, f"TensorRT {real.version} has no {unguarded}"


_CAPABILITIES = """
import dataclasses
from perfguard.backends import tensorrt_build as build
from perfguard.core.errors import CellError
caps = build.capabilities(trt)
plans = {}
for precision in ("fp32", "fp16", "bf16", "int8"):
    for user_graph in (False, True):
        try:
            plan = build.precision_plan(caps, precision, user_graph=user_graph, location=None)
            plans[f"{precision}/{user_graph}"] = dataclasses.asdict(plan)
        except CellError as exc:
            plans[f"{precision}/{user_graph}"] = "CellError: " + str(exc)
optional = {name: hasattr(trt, name) for name in build.OPTIONAL_MEMBERS}
fields = dataclasses.asdict(caps)
fields["precision_flags"] = sorted(fields["precision_flags"])
print(json.dumps({"caps": fields, "plans": plans, "optional": optional}))
"""


def test_capabilities_and_precision_plans_on_the_real_modules(reals: list[RealTensorRT]) -> None:
    for real in reals:
        got = probe(real, _CAPABILITIES)
        caps, plans = got["caps"], got["plans"]
        assert caps["version"] == real.version
        assert caps["strongly_typed"] and caps["detailed_profiling"]
        # An optional member exists exactly where its capability says it does.
        for name, present in got["optional"].items():
            assert caps[OPTIONAL_MEMBERS[name]] == present, (real.version, name)
        if real.major == 10:
            assert caps["precision_flags"] == ["bf16", "fp16", "int8"] and caps["implicit_int8"]
            assert plans["fp16/False"]["typing"] == "weak"
            assert plans["fp16/False"]["builder_flag"] == "FP16"
            assert plans["int8/False"]["calibrator"] is True
            assert plans["bf16/False"]["builder_flag"] == "BF16"
        else:
            assert caps["precision_flags"] == [] and not caps["implicit_int8"]
            assert plans["fp16/False"] == {
                "precision": "fp16", "typing": "strong", "builder_flag": None,
                "graph": "fp16", "calibrator": False,
            }  # fmt: skip
            assert plans["int8/False"]["graph"] == "int8-qdq"
            assert plans["bf16/False"].startswith("CellError: ")
            assert f"TensorRT {real.version}" in plans["bf16/False"]
            assert plans["bf16/True"]["typing"] == "strong"
        assert plans["fp32/False"]["typing"] == "weak"


_BUILD = """
from perfguard.backends import tensorrt_build as build
from perfguard.core.errors import BackendUnavailable
out = {}
for typing in ("weak", "strong"):
    spec = build.EngineSpec(
        onnx_sha256="0" * 64, tensorrt=trt.__version__, gpu="none", capability=(0, 0),
        precision="fp16", workspace_mib=64, optimization_level=None, profiles=(),
        input_shapes=(), typing=typing,
    )
    out[typing] = build._network_flags(trt, spec)
logger = build.trt_logger(trt)  # a subclass of the real ILogger
logger.log(trt.ILogger.Severity.ERROR, "CUDA initialization failure with error: 35")
try:
    build._builder(trt, logger, spec, 0)
except BackendUnavailable as exc:
    out["builder"] = str(exc)
out["verbosity"] = hasattr(trt.IBuilderConfig, "profiling_verbosity")
out["strong_bit"] = int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
print(json.dumps(out))
"""


def test_network_flags_logger_and_a_builder_tensorrt_cannot_make(
    reals: list[RealTensorRT],
) -> None:
    """Without a usable GPU ``trt.Builder`` raises a bare TypeError; perfguard says so with
    TensorRT's own log line, as an unavailable backend (skipped, not a model error)."""
    for real in reals:
        got = probe(real, _BUILD)
        assert got["weak"] == 0  # explicit batch: ignored by 10, absent from 11
        assert got["strong"] == 1 << got["strong_bit"]
        assert got["verbosity"]
        text = got["builder"]
        assert f"TensorRT {real.version} cannot create a builder" in text
        assert "factory function returned nullptr" in text
        assert "CUDA initialization failure with error: 35" in text


def _members(obj: Any) -> dict[str, Any]:
    """What a fake offers: an enum's members (with int values), a class's public names."""
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return {
            m.name: int(m.value) if isinstance(m, enum.IntEnum) else None  # type: ignore[misc]
            for m in obj
        }
    return {
        name: None
        for name, _ in inspect.getmembers(obj)
        if not name.startswith("_") and name != "Severity"
    }


def fake_surface(version: str) -> dict[str, dict[str, Any]]:
    """Real class or enum name -> the members the fake of ``version`` offers for it."""
    trt = fake_tensorrt.fake_trt(version)
    builder = trt.Builder(None)
    config = builder.create_builder_config()
    engine_class = fake_tensorrt.Engine
    classes: dict[str, Any] = {
        "Builder": type(builder),
        "OnnxParser": trt.OnnxParser,
        "Runtime": trt.Runtime,
        "IBuilderConfig": type(config),
        "INetworkDefinition": type(builder.create_network(0)),
        "IOptimizationProfile": type(builder.create_optimization_profile()),
        "ITimingCache": type(config.create_timing_cache(b"")),
        "ICudaEngine": engine_class,
        "IExecutionContext": fake_tensorrt.Context,
        "EngineInspector": fake_tensorrt.Inspector,
        "IProfiler": trt.IProfiler,
        "ILogger.Severity": fake_tensorrt.Severity,
    }
    for name in dir(trt):
        value = getattr(trt, name)
        if name[:1].isupper() and isinstance(value, type) and name not in classes:
            classes[name] = value
    surface = {name: _members(cls) for name, cls in classes.items()}
    # Fake-only bookkeeping (what was asked of it, the script) is not TensorRT's.
    for bookkeeping in ("calibration_profile", "pools", "profiles", "timing_cache"):
        surface["IBuilderConfig"].pop(bookkeeping, None)
    return surface


_SURFACE = """
wanted = json.loads({wanted!r})
problems = []
for owner, members in wanted.items():
    obj = trt
    for part in owner.split("."):
        obj = getattr(obj, part, None)
    if obj is None:
        problems.append(f"no {{owner}}")
        continue
    for member, value in members.items():
        if not hasattr(obj, member):
            problems.append(f"no {{owner}}.{{member}}")
        elif value is not None and int(getattr(obj, member)) != value:
            problems.append(f"{{owner}}.{{member}} is {{int(getattr(obj, member))}}, not {{value}}")
print(json.dumps(problems))
"""


def test_each_fake_offers_only_what_the_real_tensorrt_of_its_major_has(
    reals: list[RealTensorRT],
) -> None:
    by_major = {real.major: real for real in reals}
    for major, version in FAKE_OF_MAJOR.items():
        surface = fake_surface(version)
        assert "set_calibration_profile" in surface["IBuilderConfig"] or major >= 11
        problems = probe(by_major[major], _SURFACE.format(wanted=json.dumps(surface)))
        assert not problems, f"the fake of TensorRT {version}: {problems}"


_IMPORT = """
from perfguard.backends.tensorrt_backend import import_problem
try:
    import tensorrt_bindings
except ImportError as exc:
    print(json.dumps(str(import_problem(exc))))
else:
    print(json.dumps("imported"))
"""


def test_bindings_whose_parser_library_is_missing_say_so(
    reals: list[RealTensorRT], tmp_path: Path
) -> None:
    """It used to say "TensorRT is not installed" for a missing libnvonnxparser."""
    for real in reals:
        partial = tmp_path / real.version
        partial.mkdir()
        for lib in real.stubs.glob("*.so.*"):
            if not lib.name.startswith("libnvonnxparser"):
                (partial / lib.name).symlink_to(lib)
        text = probe(real, _IMPORT, stubs=partial)
        assert text.startswith("TensorRT is installed but does not import: "), text
        assert f"libnvonnxparser.so.{real.major}" in text
