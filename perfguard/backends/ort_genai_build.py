"""Building and caching ONNX Runtime GenAI models for generative ``onnxruntime`` cells.

ONNX Runtime GenAI runs a *folder* its model builder writes (``genai_config.json``,
``model.onnx`` and its weights): a decoder graph of its own (grouped-query attention
with the rotary embedding fused, a KV cache kept in one buffer), not an export of the
factory's ``forward``. The builder reads a Hugging Face checkpoint, so a factory's model
(a ``transformers`` causal LM) is saved with ``save_pretrained`` into a scratch folder
and the builder run on that.

The cache key is everything the builder reads and is: the checkpoint's bytes (every
file ``save_pretrained`` wrote: the config and the weights), the precision and
execution provider, the builder options, and the versions of onnxruntime-genai (its
commit too), onnxruntime (its quantizer writes the int4/int8 weights) and transformers
(it loads the checkpoint). The model's Python ``forward`` is not in the key because the
builder never runs it: a change to the modelling code changes nothing this cell runs,
and a change to the weights or the config gives another folder. The folder is named
``<model>-genai-<precision>-<key16>``, built under a file lock into a scratch folder and
renamed into place, so workers never build a key twice nor read half a model.

The builder runs in a child process (``python -m perfguard.backends.ort_genai_child``):
it imports torch, transformers and onnxruntime's quantizer, puts its own folder on
``sys.path`` (top-level modules named ``builders``, ``quantization``... that could shadow
the project's), and prints a great deal. The builder also insists on a tokenizer in the
checkpoint (``AutoTokenizer.from_pretrained``), which the child writes as a stand-in
where the checkpoint has none (perfguard's prompts are token ids).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from perfguard.core import progress
from perfguard.core.errors import CellError, ModelError
from perfguard.core.scenario import GENAI_PRECISIONS, Scenario
from perfguard.models.cache import KEY_CHARS, file_sha256, make_cache_folder, safe_name
from perfguard.models.factory import load_factory

__all__ = [
    "BUILDER_OPTIONS",
    "GENAI_CONFIG",
    "GenAIBuild",
    "builder_identity",
    "checkpoint_key",
    "genai_model",
]

#: The file that makes a folder an ONNX Runtime GenAI model.
GENAI_CONFIG = "genai_config.json"
#: The builder options perfguard sets for a quantized model (``extra_options``):
#: 32-weight blocks, and int8 activations in the CPU kernels (``accuracy_level=4``;
#: level 1 runs int8 weights ~30x slower on CPU). Part of the cache key and the facts.
BUILDER_OPTIONS: dict[str, str] = {"block_size": "32", "accuracy_level": "4"}
#: A build's stderr kept for its error message.
_TAIL_CHARS = 2000


@dataclass(frozen=True)
class GenAIBuild:
    """A folder ONNX Runtime GenAI can load, and how it came to be.

    ``built`` is False for a folder the suite gave (``onnx:``) and for a cache hit;
    ``key`` is None for a folder the suite gave; ``options`` are the builder options."""

    folder: Path
    precision: str
    key: str | None
    built: bool
    seconds: float
    options: Mapping[str, str]

    def facts(self) -> dict[str, object]:
        """What the cell's runtime facts say about the model's build."""
        if self.key is None:
            return {"model_folder": str(self.folder)}
        out: dict[str, object] = {"builder_key": self.key, "builder_precision": self.precision}
        if self.precision in ("int8", "int4"):
            out["builder_options"] = dict(self.options)
        return out


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def builder_identity(og_module: object) -> dict[str, str]:
    """The versions a build depends on (the builder, its quantizer, its checkpoint reader)."""
    return {
        "onnxruntime-genai": str(getattr(og_module, "__version__", "unknown")),
        "onnxruntime-genai commit": str(getattr(og_module, "__commit__", "unknown")),
        "onnxruntime": next(
            (v for v in map(_version, ("onnxruntime", "onnxruntime-gpu")) if v != "absent"),
            "absent",
        ),
        "transformers": _version("transformers"),
    }


def checkpoint_key(checkpoint: Path, identity: Mapping[str, str]) -> str:
    """The cache key of a build: every file of the checkpoint (name and bytes) and the
    builder's identity (versions, precision, provider, options)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(checkpoint)).encode() + b"\0")
        digest.update(file_sha256(path).digest())
    digest.update(json.dumps(dict(identity), sort_keys=True).encode())
    return digest.hexdigest()[:KEY_CHARS]


def genai_model(
    scenario: Scenario, cache_dir: Path, provider: str, og_module: object
) -> GenAIBuild:
    """The cell's model as a folder ONNX Runtime GenAI loads: the suite's (``onnx:`` naming
    a builder's folder) or the factory's checkpoint built once per key (module docstring)."""
    model = scenario.model
    if model.onnx is not None:
        return GenAIBuild(_given_folder(scenario), scenario.precision, None, False, 0.0, {})
    supported = GENAI_PRECISIONS[provider]
    if scenario.precision not in supported:
        raise CellError(
            f"precision {scenario.precision} on {scenario.device}: ONNX Runtime GenAI's "
            f"model builder writes {', '.join(supported)} for its {provider} provider",
            expected=f"precision {' / '.join(supported)} for a generative onnxruntime cell "
            f"on {scenario.device}",
            fix="pick one of those precisions (fp16/bf16 are GPU graphs), or run this "
            "precision on `backend: torch`",
            location=scenario.location,
        )
    module = load_factory(model)
    save: Any = getattr(module, "save_pretrained", None)
    if not callable(save) or getattr(module, "config", None) is None:
        raise CellError(
            f"model {model.name!r}: ONNX Runtime GenAI builds its decoder from a Hugging Face "
            f"checkpoint, and the factory returned a {type(module).__name__} without "
            "`save_pretrained` and `config`",
            expected="a transformers causal LM (e.g. LlamaForCausalLM, GPT2LMHeadModel)",
            fix="return a transformers *ForCausalLM from the factory, or give `onnx:` a "
            "folder the model builder wrote (python -m onnxruntime_genai.models.builder)",
            location=model.location,
        )
    folder = Path(cache_dir)
    make_cache_folder(folder, model.location, "model cache")
    options = BUILDER_OPTIONS if scenario.precision in ("int8", "int4") else {}
    with tempfile.TemporaryDirectory(prefix=".genai-src-", dir=folder) as scratch:
        checkpoint = Path(scratch) / "checkpoint"
        save(str(checkpoint))
        identity = {
            **builder_identity(og_module),
            "precision": scenario.precision,
            "provider": provider,
            **{f"option {k}": v for k, v in options.items()},
        }
        key = checkpoint_key(checkpoint, identity)
        target = folder / f"{safe_name(model.name)}-genai-{scenario.precision}-{key}"
        if (target / GENAI_CONFIG).is_file():
            return GenAIBuild(target, scenario.precision, key, False, 0.0, options)
        with FileLock(str(target) + ".lock"):
            if (target / GENAI_CONFIG).is_file():  # another worker built it meanwhile
                return GenAIBuild(target, scenario.precision, key, False, 0.0, options)
            seconds = _build(scenario, checkpoint, target, provider, options)
    return GenAIBuild(target, scenario.precision, key, True, seconds, options)


def _given_folder(scenario: Scenario) -> Path:
    model = scenario.model
    assert model.onnx is not None
    folder = Path(model.base_dir) / model.onnx
    if not (folder / GENAI_CONFIG).is_file():
        what = (
            "a file"
            if folder.is_file()
            else "no such folder"
            if not folder.exists()
            else (f"a folder without {GENAI_CONFIG}")
        )
        raise ModelError(
            f"model {model.name!r}: `onnx: {model.onnx}` is {what}; a generative "
            f"onnxruntime cell runs a folder ONNX Runtime GenAI's model builder wrote",
            expected=f"a folder holding {GENAI_CONFIG} and the model's ONNX file",
            fix="point `onnx:` at the builder's output folder (python -m "
            "onnxruntime_genai.models.builder -i <checkpoint> -o <folder> -p int4 -e cpu), "
            "or give the model a `factory:` returning a transformers causal LM",
            location=model.location,
        )
    return folder


def _architecture(checkpoint: Path) -> str:
    """The checkpoint's ``architectures`` as its config names them (for a message)."""
    try:
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "architecture unknown"
    names = config.get("architectures") if isinstance(config, dict) else None
    return ", ".join(map(str, names)) if isinstance(names, list) and names else "no architecture"


def _build(
    scenario: Scenario, checkpoint: Path, target: Path, provider: str, options: Mapping[str, str]
) -> float:
    """Run the builder in a child process into a scratch folder, then rename it into
    place; ModelError with the builder's last words when it fails."""
    started = time.monotonic()
    name = scenario.model.name
    detail = f"ONNX Runtime GenAI builder, {scenario.precision}"
    progress.report("export", 0, cell=name, detail=detail)
    out = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    hub_cache = out.with_name(out.name + ".hf")  # the builder's download cache: unused
    for scratch in (out, hub_cache):
        shutil.rmtree(scratch, ignore_errors=True)
    request = {
        "checkpoint": str(checkpoint),
        "out": str(out),
        "cache": str(hub_cache),
        "precision": scenario.precision,
        "provider": provider,
        "options": dict(options),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "perfguard.backends.ort_genai_child", json.dumps(request)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not (out / GENAI_CONFIG).is_file():
            tail = (done.stderr or done.stdout or "").strip()[-_TAIL_CHARS:]
            raise ModelError(
                f"ONNX Runtime GenAI's model builder failed on model {name!r} "
                f"({_architecture(checkpoint)}, {scenario.precision}, {provider}; exit "
                f"{done.returncode}):\n{tail}",
                expected=f"a model folder with {GENAI_CONFIG}",
                fix="the builder converts the decoders it lists (Llama, Mistral, Phi, Qwen, "
                "Gemma, Granite, OLMo...; not GPT-2); check the factory's model is one, or "
                "run `python -m onnxruntime_genai.models.builder` by hand for the whole log",
                location=scenario.model.location,
            )
        out.replace(target)  # atomic: same folder; the lock keeps the target absent
    except BaseException:
        elapsed = time.monotonic() - started
        progress.report("export", 0, cell=name, detail=f"failed after {elapsed:.1f} s", final=True)
        raise
    finally:
        for scratch in (out, hub_cache):
            shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started
    progress.report("export", 1, cell=name, detail=f"built in {elapsed:.1f} s", final=True)
    return elapsed
