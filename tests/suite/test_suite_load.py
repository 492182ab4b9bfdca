"""Tests for perfguard.suite.sections.load: `load:` levels, `shapes:` buckets, their cells
and errors."""

from __future__ import annotations

import dataclasses
import re
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfguard.accuracy.checker import find_reference
from perfguard.core.errors import Location, SuiteError
from perfguard.core.policy import LOAD_MAX_CLIENTS, GateSpec
from perfguard.core.scenario import BatchingSpec, LoadSpec, Scenario, SloSpec
from perfguard.judge.compare import samples_needed
from perfguard.suite.loader import load_suite
from perfguard.suite.sections import load as suite_load
from tests.helpers.load_cases import ERROR_CASES, LOAD_AT, scen
from tests.helpers.models import TINY_MODELS
from tests.helpers.suites import write_suite

P95 = GateSpec("p95", 0.05)


def marked_line(text: str) -> int:
    """The 1-based line carrying the `# <-` marker: where the error must point."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if "# <-" in line)


def cells_of(pytester: pytest.Pytester, text: str) -> list[Scenario]:
    return list(load_suite(write_suite(pytester, "load", text)).scenarios)


def by_id(cells: list[Scenario]) -> dict[str, Scenario]:
    return {sc.cell_id: sc for sc in cells}


# --------------------------------------------------------------------------- happy paths


def test_the_tiny_models_are_the_ones_named() -> None:
    assert "def mlp(" in TINY_MODELS and "def two_inputs(" in TINY_MODELS


def test_concurrency_list_gives_one_closed_cell_per_level(suite_writer: pytest.Pytester) -> None:
    cells = cells_of(suite_writer, scen("load: {concurrency: [1, 2, 4, 8]}\n"))
    assert [sc.item_name for sc in cells] == ["s[c1]", "s[c2]", "s[c4]", "s[c8]"]
    for sc, n in zip(cells, (1, 2, 4, 8), strict=True):
        assert sc.load == LoadSpec(mode="closed", level=float(n))
        assert sc.matrix_values == (("load", f"c{n}"),)
        assert sc.shape_bucket == ""
        assert sc.gates == (P95,)
        assert sc.model == cells[0].model and sc.model.inputs[0].shape == (1, 8)


def test_single_concurrency_and_rate_are_one_level(suite_writer: pytest.Pytester) -> None:
    (sc,) = cells_of(suite_writer, scen("load: {concurrency: 3}\n"))
    assert (sc.cell_id, sc.load) == ("c3", LoadSpec("closed", 3.0))
    (sc,) = cells_of(suite_writer, scen('load: {rate: "250/s"}\n'))
    assert (sc.cell_id, sc.load) == ("r250", LoadSpec("open", 250.0))


def test_rate_list_and_every_option(suite_writer: pytest.Pytester) -> None:
    text = scen(
        """\
        load:
          rate: ["100/s", 200, 62.5, "1.5e3 / s", 3e3]  # YAML 1.1 reads 3e3 as a string
          arrivals: constant
          seed: 7
          workers: 3
          sessions: per_worker
          batching: {max_batch: 8, max_wait_ms: 2.5}
          late_ms: 0.5
          late_max: 0
        """
    )
    cells = cells_of(suite_writer, text)
    assert [sc.cell_id for sc in cells] == ["r100", "r200", "r62.5", "r1500", "r3000"]
    expected = LoadSpec(
        mode="open", level=0.0, arrivals="constant", seed=7, workers=3, sessions="per_worker",
        batching=BatchingSpec(max_batch=8, max_wait_ms=2.5), late_ms=0.5, late_max=0.0,
    )  # fmt: skip
    for sc, rate in zip(cells, (100.0, 200.0, 62.5, 1500.0, 3000.0), strict=True):
        assert sc.load == dataclasses.replace(expected, level=rate)
        assert sc.matrix_values == (("load", f"r{rate:g}"),)


def test_shapes_times_load_times_matrix(suite_writer: pytest.Pytester) -> None:
    text = scen(
        """\
        shapes:
          one: {x: [1, 8]}
          four.b+: {x: [4, 8], scale: [4]}
        load: {concurrency: [1, 2]}
        matrix:
          backend: [torch, onnxruntime]
          precision: [fp32, fp16]
        exclude: [{backend: onnxruntime, precision: fp16}]
        """,
        model="two",
    )
    cells = cells_of(suite_writer, text)
    assert [sc.cell_id for sc in cells] == [
        f"{cell}-{bucket}-{level}"
        for cell in ("torch-fp32", "torch-fp16", "onnxruntime-fp32")
        for bucket in ("one", "four.b+")
        for level in ("c1", "c2")
    ]
    cell = by_id(cells)["onnxruntime-fp32-four.b+-c2"]
    assert cell.matrix_values == (
        ("backend", "onnxruntime"),
        ("precision", "fp32"),
        ("shape", "four.b+"),
        ("load", "c2"),
    )
    assert (cell.backend, cell.precision, cell.shape_bucket) == ("onnxruntime", "fp32", "four.b+")
    assert cell.load == LoadSpec("closed", 2.0)
    shapes = {sc.cell_id: [(i.name, i.shape) for i in sc.model.inputs] for sc in cells}
    assert shapes["torch-fp16-one-c1"] == [("x", (1, 8)), ("scale", ())]  # scale kept
    assert shapes["onnxruntime-fp32-four.b+-c2"] == [("x", (4, 8)), ("scale", (4,))]
    # Only the shapes change: the rest of the model (and its input specs) is the suite's.
    base = cells[0].model
    for sc in cells:
        inputs = tuple(
            dataclasses.replace(i, shape=b.shape)
            for i, b in zip(sc.model.inputs, base.inputs, strict=True)
        )
        assert dataclasses.replace(sc.model, inputs=inputs) == base
        assert sc.error is None


def test_shapes_without_load_and_load_without_matrix(suite_writer: pytest.Pytester) -> None:
    cells = cells_of(suite_writer, scen("shapes:\n  a: {x: [2, 8]}\n  b: {x: [3, 8]}\n"))
    assert [(sc.item_name, sc.load) for sc in cells] == [("s[a]", None), ("s[b]", None)]
    assert [sc.matrix_values for sc in cells] == [(("shape", "a"),), (("shape", "b"),)]
    assert [sc.model.inputs[0].shape for sc in cells] == [(2, 8), (3, 8)]


def test_slo_adds_one_search_cell(suite_writer: pytest.Pytester) -> None:
    text = scen(
        """\
        measure: {seconds: 10}
        gate: {p99: "+2ms", p50: "+3%", peak_memory: "+50MiB"}
        load:
          rate: [100, 50]
          slo: {p90_ms: 20, factor: 1.5, refine: 2, max: 400}
        matrix: {backend: [torch, onnxruntime]}
        """
    )
    cells = by_id(cells_of(suite_writer, text))
    assert list(cells) == [
        "torch-r100", "torch-r50", "torch-slo", "onnxruntime-r100", "onnxruntime-r50",
        "onnxruntime-slo",
    ]  # fmt: skip
    slo = cells["torch-slo"]
    # The search starts at the lowest listed level, whatever its place in the list.
    spec = SloSpec(percentile=90.0, target_ms=20.0, start=50.0, factor=1.5, refine=2, max_level=400)
    assert slo.load == LoadSpec("open", 50.0, slo=spec)
    assert slo.load.level_id == "slo" and slo.matrix_values[-1] == ("load", "slo")
    # Latency gates dropped; throughput gated at -10%; other gates kept.
    assert slo.gates == (
        GateSpec("peak_memory", 50.0, relative=False),
        GateSpec("throughput", 0.10, relative=True, higher_is_worse=False),
    )
    # The listed levels keep every gate.
    assert {g.metric for g in cells["torch-r50"].gates} == {"p95", "p99", "p50", "peak_memory"}
    assert cells["onnxruntime-r100"].load == LoadSpec("open", 100.0)


def test_slo_keeps_a_user_throughput_gate_and_closed_loop(suite_writer: pytest.Pytester) -> None:
    text = scen(
        """\
        gate: {throughput: "-3%"}
        load:
          concurrency: [4, 2]
          slo: {p50_ms: 5}
        """
    )
    cells = by_id(cells_of(suite_writer, text))
    assert list(cells) == ["c4", "c2", "slo"]
    slo = cells["slo"]
    assert slo.load == LoadSpec("closed", 2.0, slo=SloSpec(50.0, 5.0, start=2.0))
    assert slo.gates == (GateSpec("throughput", 0.03, relative=True, higher_is_worse=False),)


def test_defaults_load_merges_key_by_key(suite_writer: pytest.Pytester) -> None:
    head = "defaults:\n  load: {late_ms: 2, late_max: 0.1, arrivals: constant}\n"
    text = scen("load: {rate: 100, late_max: 0.2}\n", head=head)
    text += "  - name: plain\n    model: mlp\n"
    sc, plain = cells_of(suite_writer, text)
    assert sc.load == LoadSpec("open", 100.0, arrivals="constant", late_ms=2.0, late_max=0.2)
    # A `defaults` load without a level only sets options for scenarios with `load:`.
    assert (plain.item_name, plain.load, plain.matrix_values) == ("plain", None, ())


def test_defaults_load_with_a_level_and_false(suite_writer: pytest.Pytester) -> None:
    head = "defaults:\n  load: {concurrency: [1, 2]}\n"
    text = scen("load: false\n", head=head) + "  - name: inherits\n    model: mlp\n"
    off, *inherited = cells_of(suite_writer, text)
    assert (off.item_name, off.load) == ("s", None)
    assert [sc.item_name for sc in inherited] == ["inherits[c1]", "inherits[c2]"]


def test_open_loop_options_from_defaults_skip_closed_loops(suite_writer: pytest.Pytester) -> None:
    head = "defaults:\n  load: {arrivals: constant, workers: 4}\n"
    batching = "batching: {max_batch: 4, max_wait_ms: 1}"
    text = scen("load: {concurrency: 2}\n", head=head)
    text += f"  - name: batched\n    model: mlp\n    load: {{concurrency: 2, {batching}}}\n"
    text += "  - name: open\n    model: mlp\n    load: {rate: 100}\n"
    closed, batched, open_ = cells_of(suite_writer, text)
    assert closed.load == LoadSpec("closed", 2.0)  # arrivals and workers ignored
    assert batched.load == LoadSpec("closed", 2.0, workers=4, batching=BatchingSpec(4, 1.0))
    assert open_.load == LoadSpec("open", 100.0, arrivals="constant", workers=4)


def test_accuracy_reference_resolves_within_shape_and_level(
    suite_writer: pytest.Pytester,
) -> None:
    text = scen(
        """\
        shapes:
          seq32: {x: [1, 8]}
          seq128: {x: [2, 8]}
        load: {concurrency: [1, 2]}
        matrix: {backend: [torch, onnxruntime]}
        accuracy: {reference: {backend: torch}}
        """
    )
    cells = cells_of(suite_writer, text)
    ids = by_id(cells)
    ort = ids["onnxruntime-seq32-c2"]
    assert ort.accuracy is not None and ort.accuracy.reference == (("backend", "torch"),)
    torch = ids["torch-seq32-c2"]
    assert torch.accuracy is not None and torch.accuracy.reference == ()  # it is the reference
    assert find_reference(ort, cells) is torch
    for sc in cells:
        if sc.backend == "onnxruntime":
            ref = find_reference(sc, cells)
            assert ref is not None and ref.cell_id == sc.cell_id.replace("onnxruntime", "torch")


def test_a_reference_to_a_missing_cell_still_fails(suite_writer: pytest.Pytester) -> None:
    text = scen(
        """\
        shapes: {a: {x: [1, 8]}}
        load: {concurrency: [1, 2]}
        matrix: {backend: [torch, onnxruntime]}
        accuracy: {reference: {backend: torch, precision: fp16}}  # <-
        """
    )
    path = write_suite(suite_writer, "load", text)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert info.value.location == Location(path, marked_line(text))
    assert "reference cell backend=torch precision=fp16" in info.value.problem
    assert info.value.fix is not None and "fp16" in info.value.fix


def test_scenarios_without_load_or_shapes_are_unchanged(suite_writer: pytest.Pytester) -> None:
    cells = cells_of(suite_writer, scen("matrix: {backend: [torch, onnxruntime]}\n"))
    assert [(sc.cell_id, sc.load, sc.shape_bucket) for sc in cells] == [
        ("torch", None, ""),
        ("onnxruntime", None, ""),
    ]
    assert [sc.matrix_values for sc in cells] == [
        (("backend", "torch"),),
        (("backend", "onnxruntime"),),
    ]


def test_the_documented_example_loads(suite_writer: pytest.Pytester) -> None:
    doc = suite_load.__doc__ or ""
    example = textwrap.dedent(doc.split("Format::\n")[1].split("\nRules:")[0])
    models = (
        "models:\n  minilm:\n    factory: 'a:b'\n    inputs:\n"
        "      input_ids: {shape: [1, 64], dtype: int64}\n"
        "      attention_mask: {shape: [1, 64], dtype: int64}\n"
    )
    cells = cells_of(suite_writer, models + example)
    assert [sc.item_name for sc in cells] == [
        *(f"minilm[{b}-c{n}]" for b in ("seq32", "seq128") for n in (1, 2, 4)),
        "minilm-open[r100]",
        "minilm-open[r200]",
        "minilm-open[slo]",
    ]
    assert cells[0].load is not None and cells[0].load.late_ms == 2.0
    assert cells[-1].load is not None and cells[-1].load.slo is not None
    assert all(sc.error is None for sc in cells)


def test_pytest_collects_the_cells(suite_writer: pytest.Pytester) -> None:
    write_suite(
        suite_writer, "load", scen("shapes: {b1: {x: [1, 8]}}\nload: {concurrency: [1, 2]}\n")
    )
    result = suite_writer.runpytest("--perfguard", "--collect-only", "-q", "-k", "c2")
    result.stdout.fnmatch_lines(["suites/load.yaml::s[[]b1-c2[]]"])
    assert "b1-c1" not in result.stdout.str()


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("body", "problem", "fix", "more"), ERROR_CASES)
def test_errors_point_at_the_line(
    suite_writer: pytest.Pytester, body: str, problem: str, fix: str, more: tuple[str, ...]
) -> None:
    check_error(suite_writer, scen(body), problem, fix, *more)


def check_error(pytester: pytest.Pytester, text: str, problem: str, fix: str, *more: str) -> None:
    path = write_suite(pytester, "load", text)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    error, message = info.value, str(info.value)
    line = marked_line(text)
    assert error.location == Location(path, line), message
    assert message.startswith(f"{path}:{line}: "), message
    assert problem in error.problem, message
    assert error.fix is not None and fix in error.fix, message
    assert error.expected, message
    for fragment in more:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_scenario_errors_name_the_line_in_defaults(suite_writer: pytest.Pytester) -> None:
    # A level in `defaults` too short for the P95 gate: the error points at `defaults`.
    head = "defaults:\n  load: {rate: 20}  # <-\n"
    check_error(suite_writer, scen("", head=head), "rate 20/s", "measure.seconds >= 4.5")
    # `both`: the scenario's key is the one to look at; the fix says where the other is.
    head = "defaults:\n  load: {rate: 100}\n"
    check_error(
        suite_writer,
        scen("load:\n  concurrency: 2  # <-\n", head=head),
        "has both `concurrency` and `rate`",
        "`rate` comes from `defaults`",
    )
    # Open-loop options next to a `defaults` level of a closed loop are errors there.
    head = "defaults:\n  load:\n    concurrency: 2\n    arrivals: constant  # <-\n"
    check_error(suite_writer, scen("", head=head), "`arrivals` is set", "use `rate:`")
    head = "defaults:\n  shapes: {a: {x: [1, 8]}}  # <-\n"
    check_error(
        suite_writer,
        scen("", head=head),
        "unknown key `shapes` in `defaults`",
        "set `shapes` on each scenario; `defaults` cannot hold it",
    )


def test_the_request_count_boundary(suite_writer: pytest.Pytester) -> None:
    assert samples_needed(95, 0.99) == 90 and samples_needed(99, 0.99) == 459
    # Open loop: round(rate * measure.seconds) requests, P95 needs 90.
    (sc,) = cells_of(suite_writer, scen("load: {rate: 45}\n"))
    assert sc.load == LoadSpec("open", 45.0)
    check_error(
        suite_writer,
        scen(LOAD_AT + "  rate: 44.5\n"),
        "schedules 89 requests",
        ">= 2.03, raise the rate to >= 45/s",
    )
    # Closed loop: measure.iterations requests.
    (sc,) = cells_of(suite_writer, scen("measure: {iterations: 90}\nload: {concurrency: 8}\n"))
    assert sc.load == LoadSpec("closed", 8.0)
    body = "measure: {iterations: 89}\n" + LOAD_AT + "  concurrency: 8\n"
    check_error(suite_writer, scen(body), "runs 89 requests at concurrency 8", ">= 90")
    # The `slo` cell: its own target's percentile at its start level.
    (*_, slo) = cells_of(suite_writer, scen("load: {rate: 229.5, slo: {p99_ms: 9}}\n"))
    assert slo.load is not None and slo.load.slo == SloSpec(99.0, 9.0, start=229.5)
    body = LOAD_AT + "  rate: 229\n  slo: {p99_ms: 9}\n"
    check_error(suite_writer, scen(body), "schedules 458 requests", "rate to >= 229.5/s")


def test_shapes_need_declared_inputs(suite_writer: pytest.Pytester) -> None:
    text = scen("backend: onnxruntime\nshapes:  # <-\n  a: {x: [1, 8]}\n", model="file")
    check_error(
        suite_writer,
        text,
        "`shapes` of scenario `s` reshapes inputs, but model `file` reads `inputs_file`",
        "declare the model's inputs under `inputs:`, or remove `shapes`",
    )
    text = scen("shapes:\n  a: {scal: [1]}  # <-\n", model="two")
    check_error(suite_writer, text, "names input `scal`", "did you mean `scale`?")


def test_batching_needs_a_batch_axis(suite_writer: pytest.Pytester) -> None:
    batching = "  batching: {max_batch: 4, max_wait_ms: 1}  # <-\n"
    check_error(
        suite_writer,
        scen("load:\n  rate: 100\n" + batching, model="two"),
        "stacks requests on a leading batch axis, but input `scale` of model `two` is a scalar",
        "give `scale` a leading batch dimension",
        "every input with at least one dimension",
    )
    # A bucket can take the batch axis away, or give it back.
    text = scen("shapes: {flat: {x: []}}\nload:\n  rate: 100\n" + batching)
    check_error(suite_writer, text, "input `x` of model `mlp` (shape bucket `flat`)", "`[1]`")
    text = scen("shapes: {b: {scale: [1]}}\nload:\n  rate: 100\n" + batching, model="two")
    (sc,) = cells_of(suite_writer, text)
    assert sc.load is not None and sc.load.batching == BatchingSpec(4, 1.0)
    # inputs_file models cannot be checked when the suite loads.
    text = scen("backend: onnxruntime\nload:\n  rate: 100\n" + batching, model="file")
    assert cells_of(suite_writer, text)[0].load is not None


# --------------------------------------------------------------------------- properties

FAST = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FAST
@given(levels=st.lists(st.integers(1, LOAD_MAX_CLIENTS), min_size=1, max_size=8, unique=True))
def test_any_distinct_concurrencies_give_those_cells(
    suite_writer: pytest.Pytester, levels: list[int]
) -> None:
    cells = cells_of(suite_writer, scen(f"load: {{concurrency: {levels}}}\n"))
    assert [sc.cell_id for sc in cells] == [f"c{n}" for n in levels]
    assert [sc.load for sc in cells] == [LoadSpec("closed", float(n)) for n in levels]
    assert [sc.matrix_values for sc in cells] == [(("load", f"c{n}"),) for n in levels]


rates = st.floats(min_value=45.0, max_value=1e6, allow_nan=False, allow_infinity=False)


@FAST
@given(
    values=st.lists(rates, min_size=1, max_size=5, unique_by=lambda r: f"{r:g}"),
    forms=st.lists(st.sampled_from(['"{}/s"', '"{} / s"', "{}", "'{}/s'"]), min_size=5),
)
def test_any_rate_round_trips_through_n_per_s(
    suite_writer: pytest.Pytester, values: list[float], forms: list[str]
) -> None:
    written = ", ".join(
        form.format(repr(v)) for v, form in zip(values, forms[: len(values)], strict=True)
    )
    cells = cells_of(suite_writer, scen(f"load: {{rate: [{written}]}}\n"))
    assert [sc.load for sc in cells] == [LoadSpec("open", v) for v in values]
    assert [sc.cell_id for sc in cells] == [f"r{v:g}" for v in values]


@FAST
@given(
    levels=st.lists(st.integers(1, 64), min_size=1, max_size=6, unique=True),
    bad=st.sampled_from(["0", "-3", "1.5", "x"]),
    at=st.integers(0, 6),
)
def test_a_bad_level_is_reported_on_its_own_line(
    suite_writer: pytest.Pytester, levels: list[int], bad: str, at: int
) -> None:
    items = [str(n) for n in levels]
    at = min(at, len(items))
    items.insert(at, f"{bad}  # <-")
    body = "load:\n  concurrency:\n" + "".join(f"    - {item}\n" for item in items)
    check_error(suite_writer, scen(body), f"item {at + 1} of `concurrency`", ">= 1")


def open_loop(seconds: str, q: int, rate: str) -> str:
    # max_seconds: the fix may ask for more seconds than the default cap of 300.
    measure = f"measure: {{seconds: {seconds}, max_seconds: 3600}}"
    return scen(f'{measure}\ngate: {{p{q}: "+5%"}}\nload: {{rate: {rate}}}\n')


@FAST
@given(
    rate=st.floats(1.0, 1000.0), seconds=st.floats(0.1, 20.0), q=st.sampled_from([50, 90, 95, 99])
)
def test_too_few_requests_fail_exactly_below_samples_needed(
    suite_writer: pytest.Pytester, rate: float, seconds: float, q: int
) -> None:
    path = write_suite(suite_writer, "load", open_loop(repr(seconds), q, repr(rate)))
    needed = max(samples_needed(q, 0.99), samples_needed(95, 0.99))  # p95 is always gated
    if round(rate * seconds) >= needed:
        assert load_suite(path).scenarios[0].load == LoadSpec("open", rate)
        return
    with pytest.raises(SuiteError, match="requests for a 99% bound") as info:
        load_suite(path)
    # The fix's numbers are enough: either one alone makes the suite load.
    fix = info.value.fix or ""
    match = re.search(r"measure\.seconds >= ([0-9.e+]+), raise the rate to >= ([0-9.e+]+)/s", fix)
    assert match is not None, fix
    for new_seconds, new_rate in ((match[1], repr(rate)), (repr(seconds), match[2])):
        path = write_suite(suite_writer, "load", open_loop(new_seconds, q, new_rate))
        assert load_suite(path).scenarios[0].load
