"""Load cells in the terminal table, the HTML report and the PR summary."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest

from perfguard.judge.verdict import ScenarioVerdict, VerdictKind
from perfguard.records.accuracyfigures import AccuracyFigures
from perfguard.records.figures import summarize
from perfguard.records.loadfigures import (
    GoodputFigures,
    LevelMemory,
    LoadFigures,
    SloSearch,
    SloStep,
)
from perfguard.records.results import ScenarioResult, Status
from perfguard.records.tokenfigures import TokenFigures
from perfguard.report import render_html, render_markdown
from perfguard.report.model import ReportInput
from perfguard.report.plots import BASELINE_COLOR
from perfguard.report.tables import (
    LOAD_HEADERS,
    load_group,
    load_lines,
    memory_growth,
    short_invalid,
)
from tests.helpers.results import load_dict, p95_verdict, run_of, scenario
from tests.helpers.tokens import token_times

SUITE = "suites/x.yaml"
INVALID = (
    "the generator fell behind: 12% of requests were dispatched more than 1 ms late "
    "(limit 5%); asked 5000/s, sent 3100/s"
)


def _summary(scale_ms: float, seed: int, n: int = 300) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return summarize(rng.lognormal(np.log(scale_ms * 1e6), 0.3, n).astype(np.int64)).to_dict()


def load_cell(
    level: str, scale_ms: float, thrpt: float, seed: int, *, axes: str = "onnxruntime", **load: Any
) -> ScenarioResult:
    base = scenario(f"{SUITE}::minilm[{axes}-{level}]", seed=seed, scale_ms=scale_ms)
    return ScenarioResult(
        id=base.id,
        suite=SUITE,
        name="minilm",
        backend=base.backend,
        device=base.device,
        precision=base.precision,
        latency_ns=base.latency_ns,
        throughput=thrpt,
        samples_ns=base.samples_ns,
        load=LoadFigures.from_dict(load_dict(level, throughput=thrpt, **load)),
    )


BATCHING: dict[str, Any] = {
    "max_batch": 8,
    "max_wait_ms": 2.0,
    "batches": 260,
    "mean_batch": 3.8,
    "sizes": {"1": 40, "2": 60, "8": 20},
    "wait_ns": _summary(0.9, 7),
    "service_ms_batch1": 4.1,
    "service_ms_max_batch": 9.0,
    "capacity_unbatched": 243.9,
    "capacity_batched": 888.9,
    "gain": 3.64,
}
SLO: dict[str, Any] = {
    "percentile": 95.0,
    "target_ms": 50.0,
    "over": "rate",
    "best_level": 340.0,
    "best_throughput": 338.1,
    "best_p_ms": 47.2,
    "steps": [
        {"level": 20.0, "p_ms": 3.1, "throughput": 19.9, "ok": True, "invalid": None},
        {"level": 320.0, "p_ms": 31.0, "throughput": 318.0, "ok": True, "invalid": None},
        {"level": 640.0, "p_ms": 480.0, "throughput": 402.0, "ok": False, "invalid": None},
        {"level": 340.0, "p_ms": 47.2, "throughput": 338.1, "ok": True, "invalid": None},
    ],
}


def load_results(seed: int = 0) -> list[ScenarioResult]:
    closed = [
        load_cell(f"c{c}", 2.0 * c**0.5, 400.0 * c**0.8, seed + c, concurrency=c)
        for c in (4, 1, 2)  # out of order: the table sorts the levels
    ]
    opened = [
        load_cell(
            f"r{rate}",
            scale,
            rate * 0.99,
            seed + rate,
            mode="open",
            rate_asked=float(rate),
            rate_sent=rate * 0.999,
            rate_achieved=rate * 0.99,
            arrivals="poisson",
            uncorrected_ns=_summary(scale * 0.6, seed + rate + 1),
            queue_share=0.12,
            late={**load_dict("x")["late"], "count": 3, "share": 0.003},
            failed=2,
            errors={"RuntimeError: not thread safe": 2},
        )
        for rate, scale in ((100, 2.5), (200, 4.0))
    ]
    batched = load_cell(
        "r400", 6.0, 396.0, seed + 3, mode="open", rate_asked=400.0, rate_achieved=396.0,
        rate_sent=399.0, arrivals="constant", batching=BATCHING,
    )  # fmt: skip
    invalid = load_cell(
        "r5000", 90.0, 3050.0, seed + 4, mode="open", rate_asked=5000.0, rate_achieved=3050.0,
        rate_sent=3100.0, arrivals="poisson", invalid=INVALID,
    )  # fmt: skip
    slo = load_cell(
        "slo", 20.0, 338.1, seed + 5, mode="open", rate_asked=340.0, rate_achieved=338.1,
        rate_sent=339.5, arrivals="poisson", slo=SLO,
    )  # fmt: skip
    other = load_cell("c1", 1.0, 900.0, seed + 6, axes="torch", concurrency=1)
    return [*closed, *opened, batched, invalid, slo, other]


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def ms(value_ns: float) -> str:
    return f"{value_ns / 1e6:.3f}"


# --------------------------------------------------------------------------- terminal


def test_group_strips_the_level_only() -> None:
    r = load_cell("c4", 1.0, 10.0, 0, concurrency=4)
    assert load_group(r) == f"{SUITE}::minilm[onnxruntime]"
    assert load_group(load_cell("r200", 1.0, 10.0, 0, axes="torch-fp16")) == (
        f"{SUITE}::minilm[torch-fp16]"
    )
    alone = ScenarioResult(
        f"{SUITE}::m[slo]", SUITE, "m", "b", "c", "p", load=LoadFigures.from_dict(load_dict("slo"))
    )
    assert load_group(alone) == f"{SUITE}::m"
    assert load_group(scenario("s::plain")) == "s::plain"


def test_load_lines_rows_and_columns() -> None:
    results = load_results()
    lines = load_lines([scenario("s::plain"), *results])
    assert _cells(lines[0]) == list(LOAD_HEADERS)
    rows = {_cells(line)[0]: _cells(line) for line in lines[1:]}
    assert len(rows) == len(results) and "s::plain" not in rows
    # Levels in order within a group: closed by clients, open by rate, the SLO cell last.
    ids = [_cells(line)[0] for line in lines[1:]]
    levels = [i.rsplit("-", 1)[1].rstrip("]") for i in ids if "onnxruntime" in i]
    assert levels == ["c1", "c2", "c4", "r100", "r200", "r400", "r5000", "slo"]
    by_id = {r.id: r for r in results}
    col = {name: i for i, name in enumerate(LOAD_HEADERS)}
    for sid, cells in rows.items():
        r = by_id[sid]
        assert r.latency_ns is not None and r.load is not None and r.throughput is not None
        assert cells[col["level"]] == r.load.level
        for key in ("p50", "p90", "p95", "p99"):
            assert cells[col[f"{key.upper()} ms"]] == ms(getattr(r.latency_ns, key))
        assert cells[col["thrpt/s"]] == f"{r.throughput:.1f}"
        assert cells[col["queue %"]] == f"{r.load.queue_share * 100:.1f}"
        assert cells[col["failed"]] == str(r.load.failed)
        unc = r.load.uncorrected_ns
        if r.load.mode == "open":
            assert cells[col["asked/s"]] == f"{r.load.rate_asked:.1f}"
            assert cells[col["achvd/s"]] == f"{r.load.rate_achieved:.1f}"
            assert cells[col["unc P95"]] == (ms(unc.p95) if unc else "-")
        else:
            assert cells[col["asked/s"]] == cells[col["achvd/s"]] == cells[col["unc P95"]] == "-"
        late = r.load.late
        if late.count:
            assert cells[col["late"]] == f"{late.count} ({late.share * 100:.1f}%)"
    # Numbers are right-aligned: each figure ends where its header ends.
    line = next(line for line in lines if "r200" in line)
    r200 = by_id[f"{SUITE}::minilm[onnxruntime-r200]"]
    for name in ("P95 ms", "thrpt/s", "failed"):
        end = lines[0].index(name) + len(name)
        assert line[:end].endswith(rows[r200.id][col[name]])


def test_load_lines_notes() -> None:
    lines = load_lines(load_results())
    note = {_cells(line)[0]: line for line in lines[1:]}
    batched = note[f"{SUITE}::minilm[onnxruntime-r400]"]
    wait_p95 = BATCHING["wait_ns"]["p95"] / 1e6
    expected = (
        f"batch {BATCHING['mean_batch']:.1f} avg, x{BATCHING['gain']:.2f} capacity, "
        f"wait P95 {wait_p95:.3g} ms"
    )
    assert expected in batched
    slo = note[f"{SUITE}::minilm[onnxruntime-slo]"]
    assert (
        f"SLO P{SLO['percentile']:g}<={SLO['target_ms']:g} ms: "
        f"best {SLO['best_level']:g}/s -> {SLO['best_throughput']:.1f}/s"
    ) in slo
    invalid = note[f"{SUITE}::minilm[onnxruntime-r5000]"]
    assert "INVALID: " + short_invalid(INVALID) in invalid
    assert short_invalid(INVALID) == "the generator fell behind"
    assert len(short_invalid("x" * 200)) == 60


def test_no_load_no_lines() -> None:
    assert load_lines([scenario("s::a"), scenario("s::b")]) == []
    assert load_lines([]) == []


# --------------------------------------------------------------------------- report


def _report(with_baseline: bool = True) -> str:
    current = [scenario("s::plain"), *load_results()]
    baseline = {r.id: r for r in load_results(seed=50)} if with_baseline else {}
    return render_html(ReportInput(run=run_of(current), baseline=baseline))


def _section(html: str, key: str) -> str:
    start = html.index(f"<h3>Load: {key}</h3>")
    return html[start : html.index("</section>", start)]


def test_html_load_section() -> None:
    html = _report()
    assert 'id="load"' in html and "Load (2 scenarios)" in html
    section = _section(html, f"{SUITE}::minilm[onnxruntime]")
    assert "<svg" in section and "latency vs throughput" in section
    # The caption counts the baseline levels the curve draws: not its SLO search, nor an
    # invalid level (drawn for this run only).
    key = f"{SUITE}::minilm[onnxruntime]"
    drawn = [
        r
        for r in load_results(seed=50)
        if load_group(r) == key and r.load is not None and r.load.slo is None
        if not r.load.invalid
    ]
    assert len(drawn) < len([r for r in load_results(seed=50) if load_group(r) == key])
    assert f"baseline&#39;s {len(drawn)} levels fainter in blue" in section
    # The level table carries the terminal figures.
    r200 = load_results()[4]
    assert r200.latency_ns is not None and r200.load is not None
    for figure in (
        ms(r200.latency_ns.p95),
        ms(r200.load.uncorrected_ns.p95),  # type: ignore[union-attr]
        f"{r200.load.rate_asked:.1f}",
    ):
        assert f'<td class="num">{figure}</td>' in section
    assert "RuntimeError: not thread safe (x2)" in section
    # Invalid: in the group's banner and at the top of the report, in full.
    assert section.count(INVALID) >= 1 and 'class="banner invalid"' in section
    top = html[: html.index("<h2>Scenarios")]
    assert 'id="load-banner"' in top and INVALID in top
    # Batching: throughput gained and latency paid.
    gain = f"x{BATCHING['gain']:.2f} capacity"
    assert "throughput gained" in section and gain in section
    assert f"{BATCHING['capacity_unbatched']:.1f}/s -&gt; {BATCHING['capacity_batched']:.1f}/s" in (
        section
    )
    assert "latency paid" in section and f"mean batch {BATCHING['mean_batch']:.1f}" in section
    assert f"P95 {BATCHING['wait_ns']['p95'] / 1e6:.3g} ms" in section
    assert section.count('class="bar"') == len(BATCHING["sizes"])
    # SLO: the search's outcome and steps, met vs missed.
    assert "SLO search" in section and "best 340/s -&gt; 338.1/s" in section
    assert section.count(">met</td>") == 3 and section.count(">missed</td>") == 1
    # The other group (torch) is its own section, with a curve of one level.
    assert "<svg" in _section(html, f"{SUITE}::minilm[torch]")
    # A load cell's own section says its latencies are corrected.
    assert "latencies are corrected" in html


def test_html_without_baseline_and_deterministic() -> None:
    html = _report(with_baseline=False)
    assert "baseline&#39;s" not in html and "baseline's" not in _section(
        html, f"{SUITE}::minilm[onnxruntime]"
    )
    assert _report() == _report()


def _figures(html: str, kind: str) -> list[tuple[str, str]]:
    """(svg, caption) of each ``<figure class="kind">``."""
    return re.findall(
        rf'<figure class="{kind}">(<svg.*?</svg>)<figcaption>(.*?)</figcaption>', html, re.S
    )


@pytest.mark.parametrize("with_baseline", [True, False])
def test_load_curve_captions_name_only_what_is_drawn(with_baseline: bool) -> None:
    # Each part of a caption stands for a series of the SVG (matplotlib writes a legend
    # entry per labelled series): no baseline curve, no baseline in the caption.
    figures = _figures(_report(with_baseline), "loadcurve")
    assert len(figures) == 2
    for svg, caption in figures:
        for words, legend in (
            ("in blue", "baseline P95"),
            ("uncorrected P95 dashed", "P95 uncorrected"),
            ("invalid levels", "invalid level"),
            ("SLO target", "SLO target"),
            ("circle met", "step met"),
            ("cross missed", "step missed"),
            ("square invalid", "step invalid"),
        ):
            assert (words in caption) == (legend in svg), (words, caption)
        assert ("blue" in caption) == (with_baseline and BASELINE_COLOR in svg)
    # The onnxruntime group has an open loop, an invalid level and an SLO search.
    caption = figures[0][1]
    assert "uncorrected" in caption and "invalid levels" in caption and "SLO" in caption
    assert "uncorrected" not in figures[1][1]  # the torch group: closed loop only


def test_no_load_no_section() -> None:
    html = render_html(ReportInput(run=run_of([scenario("s::a"), scenario("s::b")])))
    assert 'id="load"' not in html and "Load:" not in html and 'id="load-banner"' not in html
    assert "**Load" not in render_markdown(ReportInput(run=run_of([scenario("s::a")])))


def test_markdown_lists_invalid_and_slo_cells() -> None:
    md = render_markdown(ReportInput(run=run_of(load_results())))
    assert "**Load (2)**" in md
    assert "onnxruntime-r5000" in md and "the generator fell behind" in md
    assert "onnxruntime-slo" in md and "best 340/s -&gt; 338.1/s" in md
    load_table = md.split("**Load (2)**", 1)[1].split("\n\n", 2)[1]
    assert "onnxruntime-c4" not in load_table  # valid plain levels are left out


def _with_memory(
    result: ScenarioResult, idle: float, peak: float, streams: int, *, isolated: bool = True
) -> ScenarioResult:
    assert result.load is not None
    memory = LevelMemory(idle_mib=idle, level_peak_mib=peak, streams=streams)
    return dataclasses.replace(
        result,
        load=dataclasses.replace(result.load, memory=memory),
        runtime=dataclasses.replace(result.runtime, isolated=isolated),
    )


def _levels(held: dict[int, float], idle: float = 300.0, isolated: bool = True) -> list:
    return [
        _with_memory(
            load_cell(f"c{c}", 2.0, 400.0, c, concurrency=c), idle, idle + mib, c, isolated=isolated
        )
        for c, mib in held.items()
    ]


def test_memory_growth_is_the_slope_of_held_memory_over_streams() -> None:
    """Held memory 3 + 5 x streams MiB (a fixed 3 MiB and 5 MiB per client, each level in
    a process of its own, so the idle figures differ): 5 MiB per added client."""
    levels = [
        _with_memory(load_cell(f"c{c}", 2.0, 400.0, c, concurrency=c), idle, idle + 3 + 5 * c, c)
        for c, idle in ((4, 310.0), (1, 290.0), (2, 301.5))
    ]
    growth = memory_growth(levels)
    assert growth is not None
    assert growth.per_stream_mib == pytest.approx(5.0)
    assert [streams for _, streams, _ in growth.levels] == [1, 2, 4]
    assert growth.own_process and growth.unit == "client"
    assert "+5.0 MiB per added client" in growth.text()
    assert "pytest process" not in growth.text()


def test_memory_growth_needs_two_stream_counts_and_says_where_it_was_measured() -> None:
    assert memory_growth(_levels({2: 10.0})) is None
    assert memory_growth([*_levels({1: 2.0, 2: 7.0})[:1], load_cell("c2", 2.0, 1.0, 2)]) is None
    shared = memory_growth(_levels({1: 2.0, 4: 2.0}, isolated=False))
    assert shared is not None and shared.per_stream_mib == pytest.approx(0.0)
    assert "pytest process" in shared.text() and "gate peak_memory" in shared.text()


def test_the_html_load_section_shows_the_memory_per_stream_and_each_level() -> None:
    levels = _levels({1: 8.0, 2: 18.0, 4: 38.0})
    html = render_html(ReportInput(run=run_of([scenario("s::plain"), *levels])))
    section = _section(html, f"{SUITE}::minilm[onnxruntime]")
    assert "host memory +10.0 MiB per added client" in section
    assert "idle 300.0 MiB, level peak 338.0 MiB: 38.0 MiB held for 4 clients" in section
    plain = render_html(ReportInput(run=run_of([scenario("s::plain"), *load_results()])))
    assert "per added client" not in plain  # no memory figures, no line


# --------------------------------------------------------------------------- status notes


def _failed_levels() -> tuple[list[ScenarioResult], tuple[ScenarioVerdict, ...]]:
    """A regressed level (0 failed requests), one whose requests failed, one no SLO
    level met, and one the accuracy gate failed: all stored with status ``failed``."""
    regressed = dataclasses.replace(
        load_cell("c4", 6.0, 300.0, 1, concurrency=4),
        status=Status.FAILED,
        message="P95 latency regressed +83.0% (limit +5%)",
    )
    broken = dataclasses.replace(
        load_cell("c8", 6.0, 300.0, 2, concurrency=8, failed=3),
        status=Status.FAILED,
        message="3 requests failed",
    )
    missed = dataclasses.replace(
        load_cell(
            "slo", 9.0, 20.0, 3, mode="open", rate_asked=20.0, slo={**SLO, "best_level": None}
        ),
        status=Status.FAILED,
        message="no level met P95 <= 50 ms",
    )
    accuracy = {"n": 4, "failures": ["cosine min 0.9 < 0.98"], "passed": False}
    inaccurate = dataclasses.replace(
        load_cell("c1", 2.0, 400.0, 4, concurrency=1),
        status=Status.FAILED,
        message="cosine min 0.9 < 0.98",
        accuracy=AccuracyFigures.from_dict(accuracy),
    )
    verdict = p95_verdict(regressed.id, VerdictKind.REGRESSION, 1.83, "P95 latency regressed")
    return [regressed, broken, missed, inaccurate], (verdict,)


def test_a_levels_note_says_what_failed_never_a_bare_failed_beside_0_failed_requests() -> None:
    results, verdicts = _failed_levels()
    inp = ReportInput(run=run_of(results), verdicts=verdicts)
    # The report's level table: what happened to each level, in words.
    section = _section(render_html(inp), f"{SUITE}::minilm[onnxruntime]")
    for note in ("regressed (gated)", "3 requests failed", "accuracy gate not met"):
        assert f"<td>{note}</td>" in section
    assert "<td>failed" not in section
    # The terminal's load table words them the same, from the run's outcome.
    col = LOAD_HEADERS.index("failed")
    lines = load_lines(results, inp.outcome)
    rows = {_cells(line)[0]: _cells(line) for line in lines[1:]}
    notes = {sid.rsplit("-", 1)[1].rstrip("]"): row[-1] for sid, row in rows.items()}
    assert notes["c4"] == "regressed (gated)" and rows[results[0].id][col] == "0"
    assert notes["c8"] == "3 requests failed" and rows[results[1].id][col] == "3"
    assert notes["slo"].startswith("SLO P95<=50 ms: no level met it")
    assert notes["c1"] == "accuracy gate not met"
    for level in ("c4", "slo", "c1"):
        assert "failed" not in notes[level]


def generative_level(clients: int, decode_ms: float, good: int, seed: int) -> ScenarioResult:
    """A generative closed-loop level: 120 requests of 8 tokens, ``good`` of them good."""
    times = token_times(120, 8, seed, prefill_ms=4.0 * clients, decode_ms=decode_ms)
    cell = load_cell(f"c{clients}", 20.0, 10.0 * clients, seed, axes="torch-p48")
    load = dataclasses.replace(
        cell.load,  # type: ignore[arg-type]
        concurrency=clients,
        requests=120,
        goodput=GoodputFigures(
            ttft_ms=10, tpot_ms=2, good=good, per_s=good / 5.0, share=good / 120
        ),
        shortfall="achieved 7/s of the 10/s asked (70%): the level is overloaded"
        if good < 60
        else None,
    )
    tokens = TokenFigures.of(times, prompt_tokens=48, batch=1)
    return dataclasses.replace(cell, load=load, tokens=tokens)


def test_a_generative_scenario_s_levels_show_their_token_figures_and_goodput() -> None:
    current = [generative_level(1, 1.0, 120, 1), generative_level(4, 2.5, 30, 2)]
    baseline = {
        r.id: r for r in (generative_level(1, 1.0, 120, 3), generative_level(4, 1.2, 110, 4))
    }
    html = render_html(ReportInput(run=run_of(current), baseline=baseline))
    section = _section(html, f"{SUITE}::minilm[torch-p48]")
    assert "Token figures per level" in section
    rows = re.findall(r"<tr><td>(c\d)</td>(.*?)</tr>", section)
    assert [level for level, _ in rows] == ["c1", "c4"]
    c4 = re.findall(r'<td class="num">(.*?)</td>', rows[1][1])
    old, new = baseline[current[1].id].tokens, current[1].tokens
    assert old is not None and new is not None
    tpot = f"{old.tpot_ns.p50 / 1e6:.3f} -&gt; {new.tpot_ns.p50 / 1e6:.3f}"  # type: ignore[union-attr]
    assert c4[2] == tpot  # TPOT P50, baseline -> this run: the decode slowdown at 4 clients
    assert c4[5] == "22.0 -&gt; 6.0 (25%)"  # goodput/s 110/5 -> 30/5, 30 of 120 good
    assert "30 of 120 requests (25.0%) within TTFT 10 ms and TPOT 2 ms: 6/s" in section
    assert "fell short" in section and "achieved 7/s of the 10/s asked" in section


def test_a_goodput_search_shows_the_share_of_good_requests_per_step() -> None:
    steps = (
        SloStep(level=1, p_ms=20.0, throughput=30.0, ok=True, invalid=None, good_share=1.0),
        SloStep(level=2, p_ms=45.0, throughput=31.0, ok=False, invalid=None, good_share=0.85),
    )
    search = SloSearch(
        percentile=95.0, target_ms=None, over="concurrency", best_level=1.0,
        best_throughput=30.0, best_p_ms=20.0, goodput_share=0.9, steps=steps,
    )  # fmt: skip
    cell = generative_level(1, 1.0, 120, 5)
    cell = dataclasses.replace(
        cell,
        id=cell.id.replace("-c1]", "-slo]"),
        load=dataclasses.replace(cell.load, level="slo", slo=search),  # type: ignore[arg-type]
    )
    html = render_html(ReportInput(run=run_of([cell]), baseline={}))
    section = _section(html, f"{SUITE}::minilm[torch-p48]")
    assert "SLO good share&gt;=90%: best c1 -&gt; 30.0/s" in section
    assert "<th>good share</th>" in section
    assert '<td class="num">85.0%</td>' in section and "missed" in section
