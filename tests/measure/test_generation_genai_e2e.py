"""End to end: a generative cell on ONNX Runtime GenAI (``backend: onnxruntime``) through
`pytest --perfguard`: the example model (perfguard_examples.tinylm, a real transformers
Llama with seeded weights) built by the real model builder, cached, timed token by token
and archived; then a commit that drops its int4 quantization (the same cell at fp32,
whose decode steps are about twice as long on this CPU) fails ITL/TPOT and not TTFT
(the prompt pass costs the same at both). Limits are wide (+50%): the plumbing is
tested, not the machine.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.git_repos import SpinRepo

pytest.importorskip("onnxruntime_genai")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

INI = "[pytest]\nperfguard_contention_limit = 1.01\n"


def suite(precision: str) -> str:
    return f"""\
models:
  lm:
    factory: perfguard_examples.tinylm:build
    kwargs: {{kind: llama, seed: 0}}
scenarios:
  - name: gen
    model: lm
    backend: onnxruntime
    precision: {precision}
    threads: 1
    generate: {{prompt_tokens: 48, new_tokens: 32}}
    warmup: {{iterations: 5, seconds: 0.2}}
    measure: {{iterations: 100, seconds: 0.5, max_seconds: 10}}
    gate: {{p95: "+50%", ttft_p95: "+50%", itl_p95: "+50%", tpot_p50: "+50%"}}
"""


def test_dropping_int4_fails_the_decode_gates_and_not_ttft(pytester: pytest.Pytester) -> None:
    repo = SpinRepo(pytester, INI)
    base = repo.commit_suite(suite("int4"), "int4")
    saved = pytester.runpytest("--perfguard", "--perfguard-save", "-rA")
    saved.assert_outcomes(passed=1)
    saved.stdout.fnmatch_lines(["*ONNX Runtime GenAI builder, int4*", "*built in *"])
    assert next((repo.path / "baselines").glob(f"*/{base}.json"))
    results = json.loads((repo.path / "reports" / base[:12] / "results.json").read_text())
    (cell,) = results["scenarios"]
    runtime = cell["runtime"]
    assert runtime["builder_precision"] == "int4" and runtime["onnxruntime-genai"]
    assert cell["tokens"]["new_tokens"] == 32 and cell["tokens"]["ttft_ns"]["p50"] > 0
    cache = [p.name for p in (repo.path / ".perfguard" / "cache").iterdir()]
    assert [n for n in cache if n.startswith("lm-genai-int4-") and not n.endswith(".lock")]

    again = pytester.runpytest("--perfguard", "-rA")  # the build is cached: not run again
    again.assert_outcomes(passed=1)
    assert "ONNX Runtime GenAI builder" not in again.stdout.str()

    repo.commit_suite(suite("fp32"), "drop int4")
    dropped = pytester.runpytest("--perfguard", "-rA")
    dropped.assert_outcomes(failed=1)
    dropped.stdout.fnmatch_lines([f"*ITL P95 regressed +*vs baseline {base[:7]} (limit +50%)*"])
    sha = repo.git("rev-parse", "HEAD")
    comparison = json.loads((repo.path / "reports" / sha[:12] / "comparison.json").read_text())
    (verdict,) = comparison["verdicts"]
    got = {m["metric"]: m["verdict"] for m in verdict["metrics"]}
    assert got["itl_p95"] == "regression" and got["tpot_p50"] == "regression"
    assert got["ttft_p95"] == "unchanged"
