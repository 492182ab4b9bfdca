"""The ``gpu:`` part of a suite file: GPU options of a cell (``perfguard.core.scenario.GpuSpec``).

``perfguard.suite.loader`` calls in here; errors are the same located ``SuiteError``.
The keys, their types and defaults are declared in :data:`perfguard.suite.grammar.GPU`.
Every key is optional; the whole mapping may sit in ``defaults`` and merges key by key
with a scenario's, ``tensorrt`` and ``provider_options`` as a whole. The options only act
on a ``cuda`` device; on the CPU they are accepted and ignored (a ``defaults`` block can
serve both). A TensorRT profile needs ``min``, ``opt`` and ``max`` of one rank with
``min <= opt <= max`` in every dimension.
"""

from __future__ import annotations

from typing import Any

from perfguard.core.scenario import COMPILE_MODES, ORT_GPU_PROVIDERS, GpuSpec, TensorRTSpec
from perfguard.suite import grammar
from perfguard.suite.rules import check_section, integer
from perfguard.suite.yamlpos import PosDict, Reader, found

__all__ = ["GPU", "gpu_spec", "parse_gpu"]

GPU = "gpu"
_BOOLS = tuple(k.name for k in grammar.GPU.keys if k.type == grammar.Scalar("boolean"))
_PROFILE_KEYS = grammar.PROFILE.names


def _shape(rd: Reader, value: object, line: int, what: str) -> tuple[int, ...]:
    dims = rd.as_list(value, line, what)
    return tuple(
        integer(rd, d, dims.item_line(i), f"dimension {i} of {what}", grammar.DIMENSION)
        for i, d in enumerate(dims)
    )


def _profiles(
    rd: Reader, value: object, line: int, where: str
) -> tuple[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]:
    what = f"`tensorrt.profiles` in {where}"
    m = rd.as_map(value, line, what)
    out = []
    for name, raw in m.items():
        at = m.key_line(name)
        entry = rd.as_map(raw, at, f"the profile of input `{name}` in {where}")
        rd.keys(entry, _PROFILE_KEYS, f"the profile of input `{name}`")
        check_section(rd, entry, grammar.PROFILE, at, f"the profile of input `{name}`")
        shapes = [
            _shape(rd, entry[k], entry.key_line(k), f"`{k}` of input `{name}`")
            for k in _PROFILE_KEYS
        ]
        lo, mid, hi = shapes
        if not len(lo) == len(mid) == len(hi):
            fix = "give min, opt and max the same number of dimensions"
            rd.fail(at, f"the profile of input `{name}` mixes ranks", "one rank", fix)
        if not all(a <= b <= c for a, b, c in zip(lo, mid, hi, strict=True)):
            problem = f"the profile of input `{name}` is not ordered: min {list(lo)}, opt "
            problem += f"{list(mid)}, max {list(hi)}"
            rd.fail(at, problem, "min <= opt <= max in every dimension", "reorder the shapes")
        out.append((str(name), lo, mid, hi))
    return tuple(out)


def _tensorrt(rd: Reader, value: object, line: int, where: str) -> TensorRTSpec:
    what = f"`gpu.tensorrt` in {where}"
    m = rd.as_map(value, line, what)
    rd.keys(m, grammar.TENSORRT.names, what)
    spec: dict[str, Any] = {}
    for key, raw in m.items():
        at = m.key_line(key)
        if key in ("workspace_mib", "builder_optimization_level"):
            spec[key] = integer(rd, raw, at, f"`{key}` in {what}", grammar.TENSORRT.scalar(key))
        elif key == "timing_cache":
            spec[key] = rd.as_bool(raw, at, f"`{key}` in {what}")
        else:
            spec[key] = _profiles(rd, raw, at, where)
    return TensorRTSpec(**spec)


def parse_gpu(rd: Reader, value: object, line: int, where: str) -> dict[str, object]:
    """A validated ``gpu:`` mapping as GpuSpec field values (merged later, key by key)."""
    what = f"`gpu` in {where}"
    m: PosDict = rd.as_map(value, line, what)
    rd.keys(m, grammar.GPU.names, what)
    out: dict[str, object] = {}
    for key, raw in m.items():
        at = m.key_line(key)
        name = f"`gpu.{key}` in {where}"
        if key in _BOOLS:
            out[key] = rd.as_bool(raw, at, name)
        elif key == "compile":
            if raw is False:
                out["compile_mode"] = None
            else:
                out["compile_mode"] = rd.as_choice(raw, at, name, COMPILE_MODES)
        elif key == "ort_provider":
            out[key] = rd.as_choice(raw, at, name, ORT_GPU_PROVIDERS)
        elif key == "provider_options":
            opts = rd.as_map(raw, at, name)
            for k, v in opts.items():
                if not isinstance(v, str | int | float | bool):
                    problem = f"option `{k}` of {name} is {found(v)}"
                    rd.fail(opts.key_line(k), problem, "a string, number or boolean", "quote it")
            out[key] = tuple((str(k), _text(v)) for k, v in opts.items())
        else:
            out[key] = _tensorrt(rd, raw, at, where)
    return out


def _text(value: object) -> str:
    # ONNX Runtime's provider options are strings; booleans as it spells them.
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def gpu_spec(values: object) -> GpuSpec:
    """The GpuSpec of merged ``gpu`` values (``None``/absent: the defaults)."""
    if not isinstance(values, dict) or not values:
        return GpuSpec()
    return GpuSpec(**values)
