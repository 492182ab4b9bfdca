"""End to end: a generative cell through `pytest --perfguard`, its baseline saved, then a
commit that slows decoding fails its ITL/TPOT gates and not TTFT, and one that slows the
prompt pass the converse.

The example model (perfguard_examples.tinylm, a real transformers Llama with seeded
weights) busy-waits a set time before each forward pass (``prefill_spin_us``,
``decode_spin_us``), so the figures are dominated by known costs and a slowdown is
planted exactly. Limits are wide (+50%) and slowdowns 3x: the plumbing is tested, not
the machine, so no verdict can flake on a noisy host.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.git_repos import SpinRepo
from tests.helpers.tokens import spin_lm_suite as suite

pytest.importorskip("transformers")

INI = "[pytest]\nperfguard_contention_limit = 1.01\n"


@pytest.fixture
def repo(pytester: pytest.Pytester) -> SpinRepo:
    return SpinRepo(pytester, INI)


def verdicts(repo: SpinRepo) -> dict[str, str]:
    sha = repo.git("rev-parse", "HEAD")
    comparison = json.loads((repo.path / "reports" / sha[:12] / "comparison.json").read_text())
    (cell,) = comparison["verdicts"]
    return {m["metric"]: m["verdict"] for m in cell["metrics"]}


def test_decode_and_prefill_slowdowns_fail_their_own_gates(repo: SpinRepo) -> None:
    base = repo.commit_suite(suite(3000, 1000), "base")
    saved = repo.pytester.runpytest("--perfguard", "--perfguard-save", "-rA")
    saved.assert_outcomes(passed=1)
    stored = json.loads(next((repo.path / "baselines").glob(f"*/{base}.json")).read_text())
    assert "tokens" in json.dumps(stored)  # the token times are archived

    repo.commit_suite(suite(3000, 3000), "decode 3x slower")
    decode = repo.pytester.runpytest("--perfguard", "-rA")
    decode.assert_outcomes(failed=1)
    decode.stdout.fnmatch_lines([f"*ITL P95 regressed +*vs baseline {base[:7]} (limit +50%)*"])
    got = verdicts(repo)
    assert got["itl_p95"] == "regression" and got["tpot_p50"] == "regression"
    assert got["ttft_p95"] == "unchanged"

    repo.commit_suite(suite(9000, 1000), "prefill 3x slower")
    prefill = repo.pytester.runpytest("--perfguard", "-rA")
    prefill.assert_outcomes(failed=1)
    prefill.stdout.fnmatch_lines([f"*TTFT P95 regressed +*vs baseline {base[:7]} (limit +50%)*"])
    got = verdicts(repo)
    assert got["ttft_p95"] == "regression"
    assert got["itl_p95"] == "unchanged" and got["tpot_p50"] == "unchanged"
