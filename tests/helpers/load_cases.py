"""The `load:` section's error cases (suite body, problem, fix), shared by the loader's
tests and the schema's."""

from __future__ import annotations

import textwrap

import pytest

# Factories of tests/helpers/models.py's TINY_MODELS, which write_suite puts beside the suite.
MODELS = """\
models:
  mlp:
    factory: tinymodels:mlp
    inputs:
      x: {shape: [1, 8]}
  two:
    factory: tinymodels:two_inputs
    inputs:
      x: {shape: [1, 8]}
      scale: {shape: []}
  file:
    onnx: m.onnx
    inputs_file: real.npz
"""


def scen(body: str, model: str = "mlp", head: str = "") -> str:
    """A suite of one scenario `s` of ``model`` with ``body`` as its extra keys."""
    lines = textwrap.indent(textwrap.dedent(body), "    ")
    return f"{head}{MODELS}scenarios:\n  - name: s\n    model: {model}\n{lines}"


def case(text: str, problem: str, fix: str, *more: str) -> object:
    return pytest.param(text, problem, fix, more, id=problem[:40])


LOAD_AT = "load:  # <-\n"


ERROR_CASES = [
    # concurrency
    case(
        "load: {concurrency: 0}  # <-\n",
        "`concurrency` of `load` in scenario `s` is `0` (int)",
        "a whole number >= 1",
        "an integer >= 1",
    ),
    case(
        "load:\n  concurrency:\n    - 1\n    - -2  # <-\n",
        "item 2 of `concurrency`",
        ">= 1",
        "`-2`",
    ),
    case("load: {concurrency: [1, 2.5]}  # <-\n", "`2.5` (float)", "whole number", "integer"),
    case("load: {concurrency: '4'}  # <-\n", "`4` (str)", "whole number"),
    case("load: {concurrency: []}  # <-\n", "is an empty list", "`[1, 4]`"),
    case(
        "load:\n  concurrency:\n    - 4\n    - 1\n    - 4  # <-\n",
        "lists 4 twice (first at line 19)",
        "remove the repeat",
        "distinct levels",
    ),
    # rate
    case("load: {rate: 0}  # <-\n", "`rate` of `load` in scenario `s` is `0` (int)", "> 0"),
    case("load: {rate: '-5/s'}  # <-\n", "`-5/s` (str)", "set a rate > 0"),
    case("load: {rate: '200 per s'}  # <-\n", "`200 per s` (str)", 'write `"200/s"`', '"100/s"'),
    case("load: {rate: .nan}  # <-\n", "`nan` (float)", "/s"),
    case("load: {rate: true}  # <-\n", "`True` (bool)", "/s"),
    case(
        "load: {rate: '2e6/s'}  # <-\n",
        "is 2e+06/s",
        "lower the rate to 1e6/s or less",
        "perfguard's load generator is a Python thread; beyond ~1e6/s",
    ),
    case("load: {rate: 0.00001}  # <-\n", "is 1e-05/s", "raise it", "at least 0.0001/s"),
    case(
        "load:\n  rate:\n    - '100/s'\n    - 100  # <-\n",
        "lists 100/s twice (first at line 19)",
        "remove the repeat",
    ),
    case(
        "load:\n  rate:\n    - 100000.4\n    - 100000.1  # <-\n",
        "100000.4/s and 100000.1/s, which share cell id `r100000`",
        "6 significant digits",
    ),
    # keys and options
    case("load: 4  # <-\n", "`load` in scenario `s` is `4` (int)", "as a mapping", "`concurrency`"),
    case(
        "load:\n  concurency: 4  # <-\n", "unknown key `concurency`", "did you mean `concurrency`?"
    ),
    case("load: {rate: 1, arrivals: poison}  # <-\n", "`poison`", "did you mean `poisson`?"),
    case("load: {rate: 1, sessions: each}  # <-\n", "`each`", "`per_worker`"),
    case("load: {rate: 100, late_ms: 0}  # <-\n", "`late_ms`", "a number > 0"),
    case("load: {rate: 100, late_max: 1}  # <-\n", "`late_max`", "0 <= x < 1"),
    case("load: {rate: 100, workers: 0}  # <-\n", "`workers`", ">= 1"),
    case("load: {rate: 100, seed: -1}  # <-\n", "`seed`", ">= 0"),
    case(
        "load:\n  concurrency: 2\n  rate: 100  # <-\n",
        "`load` of scenario `s` has both `concurrency` and `rate`",
        "remove one of them",
        "exactly one of `concurrency` (closed loop) and `rate` (open loop)",
    ),
    case(
        "load: {seed: 3}  # <-\n",
        "`load` of scenario `s` has neither `concurrency` nor `rate`",
        "add e.g. `concurrency: [1, 4]`",
    ),
    case(
        "load:\n  concurrency: 2\n  arrivals: constant  # <-\n",
        "`arrivals` is set in `load` of scenario `s`, which runs a closed loop",
        "remove `arrivals`, or use `rate:` for an open loop",
    ),
    case(
        "load:\n  concurrency: 2\n  workers: 2  # <-\n",
        "`workers` is set in `load` of scenario `s`, a closed loop without `batching`",
        "or add `batching`",
        "batching server with `workers` model instances",
    ),
    # batching
    case(
        "load:\n  rate: 100\n  batching: {max_batch: 4}  # <-\n",
        "has no `max_wait_ms`",
        "add `max_wait_ms: 2`",
    ),
    case(
        "load:\n  rate: 100\n  batching: {max_batch: 1, max_wait_ms: 1}  # <-\n",
        "`max_batch`",
        ">= 2",
    ),
    case(
        "load:\n  rate: 100\n  batching: {max_batch: 2, max_wait: 1}  # <-\n",
        "unknown key `max_wait`",
        "did you mean `max_wait_ms`?",
    ),
    # slo
    case("load:\n  rate: 100\n  slo: {factor: 2}  # <-\n", "has none of `p50_ms`", "`p95_ms: 50`"),
    case(
        "load:\n  rate: 100\n  slo:\n    p95_ms: 50\n    p99_ms: 80  # <-\n",
        "has both `p95_ms` and `p99_ms`",
        "keep only one of them",
        "`p50_ms`, `p90_ms`, `p95_ms`, `p99_ms`",
    ),
    case("load:\n  rate: 100\n  slo: {p95_ms: 0}  # <-\n", "`p95_ms`", "a number > 0"),
    case("load:\n  rate: 100\n  slo: {p95_ms: 5, factor: 1}  # <-\n", "`factor`", "a number > 1"),
    case("load:\n  rate: 100\n  slo: {p95_ms: 5, refine: -1}  # <-\n", "`refine`", ">= 0"),
    case("load:\n  rate: 100\n  slo: {p95_ms: 5, p96_ms: 1}  # <-\n", "`p96_ms`", "did you mean"),
    case(
        "load:\n  rate: [200, 100]\n  slo:\n    p95_ms: 5\n    max: 100  # <-\n",
        "`max` of `slo` in `load` of scenario `s` is 100, not above its start",
        "set `max` above 100",
        "the lowest listed `rate` (100)",
    ),
    # too few requests for the gated percentile
    case(
        LOAD_AT + "  rate: 20\n",
        "rate 20/s for measure.seconds 2 schedules 40 requests, but a P95 gate needs at least "
        "90 requests for a 99% bound",
        "set measure.seconds >= 4.5, raise the rate to >= 45/s, or gate a lower percentile",
    ),
    case(
        'gate: {p99: "+5%"}\n' + LOAD_AT + "  rate: [1000, 100]\n",
        "rate 100/s for measure.seconds 2 schedules 200 requests, but a P99 gate needs at least "
        "459 requests",
        "set measure.seconds >= 4.59, raise the rate to >= 229.5/s, or gate a lower percentile",
    ),
    case(
        "measure: {seconds: 0}\n" + LOAD_AT + "  rate: 100\n",
        "schedules 0 requests, but a P95 gate needs at least 90",
        "set measure.seconds >= 0.9, or gate a lower percentile",
    ),
    case(
        "measure: {iterations: 50}\n" + LOAD_AT + "  concurrency: [1, 2]\n",
        "measure.iterations 50 runs 50 requests at concurrency 1, but a P95 gate needs at least "
        "90 requests for a 99% bound",
        "set measure.iterations >= 90, or gate a lower percentile",
    ),
    case(
        LOAD_AT + "  rate: [100, 400]\n  slo: {p99_ms: 50}\n",
        "the `slo` search's start rate 100/s for measure.seconds 2 schedules 200 requests, but "
        "its P99 target needs at least 459 requests",
        "set measure.seconds >= 4.59, raise the lowest listed rate to >= 229.5/s, or target a "
        "lower percentile",
    ),
    case(
        LOAD_AT + "  concurrency: 1\n  slo: {p99_ms: 50}\n",
        "measure.iterations 100 runs 100 requests at the `slo` search's start concurrency 1, but "
        "its P99 target needs at least 459",
        "set measure.iterations >= 459, or target a lower percentile",
    ),
    # shapes
    case("shapes: {}  # <-\n", "`shapes` of scenario `s` is empty", "remove `shapes`"),
    case("shapes:\n  seq-32: {x: [1, 8]}  # <-\n", "`seq-32` (str)", "rename it, e.g. `seq_32`"),
    case("shapes:\n  128: {x: [1, 8]}  # <-\n", "`128` (int)", "`s128`", "`-` joins"),
    case(
        "shapes:\n  a: {y: [1, 8]}  # <-\n",
        "shape bucket `a` of scenario `s` names input `y` (str), which model `mlp` lacks",
        "name an input declared under the model's `inputs:`",
        "one of `x`",
    ),
    case("shapes:\n  a: {x: [1, 0]}  # <-\n", "dimension 1 of `x` in shape bucket `a`", ">= 1"),
    case("shapes:\n  a: {x: 8}  # <-\n", "the shape of `x` in shape bucket `a`", "`[a, b]`"),
    case(
        "shapes:\n  a: {}  # <-\n", "shape bucket `a` of scenario `s` is empty", "remove the bucket"
    ),
    case("shapes: [a]  # <-\n", "`shapes` of scenario `s` is a list", "as indented `key: value`"),
    case("matrix:\n  shapes: [a]  # <-\n", "`shapes` is not a matrix axis", "move `shapes` out"),
    case("matrix:\n  load: [a]  # <-\n", "`load` is not a matrix axis", "move `load` out"),
    case(
        "matrix: {backend: [torch]}\nexclude:\n  - {load: c1}  # <-\nload: {concurrency: 1}\n",
        "`exclude` names axis `load`",
        "remove `load`",
    ),
]
