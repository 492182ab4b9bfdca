"""perfguard.measure.generation through ScenarioRun: a generative cell warmed up and timed
token by token on a real transformers model (perfguard_examples.tinylm)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfguard.core.errors import CellError
from perfguard.core.scenario import GenerateSpec, LoopSpec, ModelSpec, Scenario
from perfguard.measure.opencell import RunContext
from perfguard.measure.plant import Plant
from perfguard.measure.runner import ScenarioRun
from tests.helpers.torch_cells import LOCATION

pytest.importorskip("transformers")

SMALL = (
    ("kind", "llama"),
    ("layers", 1),
    ("hidden", 32),
    ("heads", 2),
    ("kv_heads", 1),
    ("vocab", 64),
)


def cell(
    tmp_path: Path, *, spin: tuple[tuple[str, object], ...] = (), **fields: object
) -> Scenario:
    model = ModelSpec(
        name="lm",
        location=LOCATION,
        base_dir=tmp_path,
        factory="perfguard_examples.tinylm:build",
        factory_kwargs=SMALL + spin,
    )
    return Scenario(
        suite=tmp_path / "s.yaml",
        name="gen",
        cell_id="p8",
        model=model,
        location=LOCATION,
        generate=GenerateSpec(prompt_tokens=8, new_tokens=5, batch=2, prompts=3),
        threads=1,
        warmup=LoopSpec(3, 0.0),
        measure=LoopSpec(12, 0.0),
        **fields,  # type: ignore[arg-type]
    )


def measured(tmp_path: Path, sc: Scenario) -> object:
    with ScenarioRun(sc, RunContext(tmp_path, tmp_path / "cache")) as run:
        return run.measure()


def test_every_timed_request_has_its_token_times(tmp_path: Path) -> None:
    result = measured(tmp_path, cell(tmp_path))
    tokens = result.tokens  # type: ignore[attr-defined]
    assert tokens is not None
    assert (tokens.requests, tokens.new_tokens, tokens.batch, tokens.prompt_tokens) == (12, 5, 2, 8)
    times = tokens.times()
    assert np.all(times[:, 0] > 0) and np.all(np.diff(times, axis=1) >= 0)
    # the cell's latency samples are each request's end to end, on the same clock
    assert list(result.samples_ns) == times[:, -1].tolist()  # type: ignore[attr-defined]
    assert result.warmup_iterations == 3 and result.batch_size == 2  # type: ignore[attr-defined]
    assert result.runtime.backend["kv_cache"] == "DynamicCache"  # type: ignore[attr-defined]
    assert tokens.tokens_per_s > 0 and 0 < tokens.prefill_share < 1


def test_a_second_measurement_is_a_fresh_set_of_requests(tmp_path: Path) -> None:
    with ScenarioRun(cell(tmp_path), RunContext(tmp_path, tmp_path / "cache")) as run:
        first, second = run.measure(), run.measure()
    assert first.tokens is not None and second.tokens is not None
    assert first.tokens.requests == second.tokens.requests == 12


def test_a_planted_decode_cost_is_in_every_gap_and_a_prefill_cost_in_the_first_token(
    tmp_path: Path,
) -> None:
    # Lower bounds only (a busy-wait cannot take less than its time): no timing flake.
    decode = measured(tmp_path, cell(tmp_path, spin=(("decode_spin_us", 3000.0),))).tokens  # type: ignore[attr-defined]
    assert decode.itl().min() >= 3_000_000
    prefill = measured(tmp_path, cell(tmp_path, spin=(("prefill_spin_us", 20000.0),))).tokens  # type: ignore[attr-defined]
    assert prefill.ttft().min() >= 20_000_000


def test_a_cell_error_is_raised_before_anything_opens(tmp_path: Path) -> None:
    with pytest.raises(CellError, match="unsupported"):
        ScenarioRun(
            cell(tmp_path, error="cell `gen[p8]` is unsupported here"),
            RunContext(tmp_path, tmp_path / "cache"),
        )


def test_a_planted_generation_waits_in_every_token_of_every_request(tmp_path: Path) -> None:
    """A calibration's plant in a generative cell: one wait per decoding step, inside
    the timed requests (so TTFT, ITL and the request all grow)."""
    plant = Plant(0.5)
    with ScenarioRun(cell(tmp_path), RunContext(tmp_path, tmp_path / "cache"), plant=plant) as run:
        assert run.requests is not None and run.requests.plant is plant
        result = run.measure()
    waits = plant.take()
    tokens = result.tokens  # type: ignore[attr-defined]
    assert tokens is not None
    new_tokens = 5
    assert len(waits) % new_tokens == 0 and len(waits) >= 12 * new_tokens
    assert all(w > 0 for w in waits)
