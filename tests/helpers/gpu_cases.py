"""The `gpu:` block's error cases, shared by the loader's tests and the schema's."""

from __future__ import annotations

MODELS = """\
models:
  mlp:
    factory: tinymodels:mlp
    inputs:
      x: {shape: [1, 8]}
"""


BAD_GPU_VALUES = [
    ("gpu: {cuda_graf: true}  # <-", ("cuda_graf", "cuda_graph")),
    ("gpu: {cuda_graph: yes please}  # <-", ("`true` or `false`",)),
    ("gpu: {compile: fastest}  # <-", ("`fastest`", "reduce-overhead")),
    ("gpu: {ort_provider: rocm}  # <-", ("`rocm`", "tensorrt")),
    ("gpu: {provider_options: {a: [1, 2]}}  # <-", ("option `a`", "quote it")),
    ("gpu: {tensorrt: {workspace_mib: 0}}  # <-", ("workspace_mib",)),
    ("gpu: {tensorrt: {builder_optimization_level: 7}}  # <-", ("0..5",)),
    (
        "gpu: {tensorrt: {profiles: {x: {min: [4, 8], opt: [1, 8], max: [8, 8]}}}}  # <-",
        ("not ordered", "min <= opt <= max"),
    ),
    (
        "gpu: {tensorrt: {profiles: {x: {min: [1, 8], max: [8, 8]}}}}  # <-",
        ("has no `opt`", "`opt: [...]`"),
    ),
]
