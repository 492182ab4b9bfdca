"""The HTML report, the PR summary, the index and ``perfguard report``."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfguard.baseline.store import Baseline
from perfguard.core.errors import ResultsError
from perfguard.judge.abside import base_results
from perfguard.judge.choice import BaselineChoice
from perfguard.judge.outcome import run_outcome
from perfguard.judge.verdict import (
    ABDetail,
    Decision,
    DecisionKind,
    MetricVerdict,
    ScenarioVerdict,
    VerdictKind,
)
from perfguard.records.figures import CpuShares, QuantFacts, RuntimeInfo, summarize
from perfguard.records.loadfigures import LoadFigures
from perfguard.records.results import Environment, ScenarioResult
from perfguard.records.resultsfile import write_results
from perfguard.report import render_html, render_index, render_markdown, write_report
from perfguard.report.cli_report import report_command
from perfguard.report.comparison import comparison_path, write_comparison
from perfguard.report.markdown import COMMENT_LIMIT, MARKER
from perfguard.report.model import ReportInput
from perfguard.report.plots import ARCHIVED_COLOR, BASELINE_COLOR, CURRENT_COLOR
from perfguard.report.render import FULL_PLOT_BUDGET
from perfguard.run.finish import base_side
from tests.helpers.results import BASE_SHA, SHA, p95_verdict, run_of, scenario

EVIL = "<script>alert(1)</script>\"quoted\" 'single'"


def full_input() -> ReportInput:
    acc = {
        "n": 8,
        "reference": "torch-fp32",
        "report": {
            "reference": "torch-fp32",
            "passed": False,
            "outputs": [
                {
                    "name": "emb",
                    "values": {"cosine_mean": 0.97, "cosine_min": 0.9},
                    "worst_inputs": [3, 1],
                }
            ],
            "checks": [
                {
                    "metric": "cosine_min",
                    "output": "emb",
                    "value": 0.9,
                    "limit": 0.98,
                    "passed": False,
                    "reference": "torch-fp32",
                    "worst_inputs": [3],
                    "message": "cosine similarity min 0.9 < 0.98",
                }
            ],
        },
        "task_metric": {
            "function": "m:f",
            "current": 0.8,
            "reference": 0.9,
            "drop": 0.1,
            "drop_max": 0.05,
            "higher_is_better": True,
        },
        "failures": ["cosine similarity min 0.9 < 0.98 on output emb"],
        "passed": False,
    }
    current = [
        scenario("s::fast", seed=1, scale_ms=1.0),
        scenario("s::slow", seed=2, scale_ms=3.0, accuracy=acc),
        scenario("s::better", seed=3, scale_ms=1.5, backend="torch"),
    ]
    baseline = {
        "s::fast": scenario("s::fast", seed=11, scale_ms=1.0),
        "s::slow": scenario("s::slow", seed=12, scale_ms=2.0),
        "s::better": scenario("s::better", seed=13, scale_ms=2.0, backend="torch"),
    }
    verdicts = (
        p95_verdict("s::fast", VerdictKind.UNCHANGED, 1.0, "P95 latency unchanged +0.0%"),
        p95_verdict("s::slow", VerdictKind.REGRESSION, 1.5, "P95 latency regressed +50.0%"),
        p95_verdict("s::better", VerdictKind.IMPROVEMENT, 0.75, "P95 latency improved -25.0%"),
    )
    history = {
        "s::slow": [(f"{i:040x}", scenario("s::slow", seed=100 + i)) for i in range(5)],
    }
    return ReportInput(
        run=run_of(current),
        verdicts=verdicts,
        baseline=baseline,
        baseline_info={"commit": BASE_SHA, "how": "nearest ancestor on main", "env_diff": {}},
        history=history,
    )


# --------------------------------------------------------------------------- HTML


def test_structure_regressions_first_and_sections() -> None:
    html = render_html(full_input())
    assert html.startswith("<!DOCTYPE html>")
    assert SHA[:12] in html and "nearest ancestor on main" in html
    rows = re.findall(r'<tr class="o-(\w+)" data-outcome="(\w+)" data-verdict="(\w+)"', html)
    # Worst outcome first; class, outcome and verdict of each row agree.
    assert rows == [
        ("regression", "regression", "regression"),
        ("improvement", "improvement", "improvement"),
        ("passed", "passed", "unchanged"),
    ]
    # The regressed cell fails the run (gate on), whatever its stored status says.
    assert 'data-state="failed"' in html and "❌ regression" in html
    assert 'data-backend="torch"' in html and 'data-device="cpu"' in html
    for anchor in ("s0", "s1", "s2"):
        assert f'href="#{anchor}"' in html and f'id="{anchor}"' in html
    assert html.count("<svg") >= 4  # 3 CDFs and the trend of s::slow
    assert "P95 over 6 commits" in html
    assert "cosine similarity min 0.9 &lt; 0.98" in html
    assert "regression: <b>1</b>" in html
    assert "CPUExecutionProvider" in html
    assert "<script>" in html  # the filter/sort script itself


def test_user_strings_are_escaped() -> None:
    sid = f"s::{EVIL}"
    inp = ReportInput(
        run=run_of([scenario(sid)]),
        verdicts=(p95_verdict(sid, VerdictKind.REGRESSION, 1.5, f"regressed {EVIL}"),),
        baseline={sid: scenario(sid, seed=5)},
        baseline_info={"commit": BASE_SHA, "how": EVIL, "env_diff": {EVIL: [EVIL, "x"]}},
    )
    html = render_html(inp)
    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&#34;quoted&#34;" in html or "&quot;quoted&quot;" in html
    assert 'id="env-banner"' in html
    md = render_markdown(inp)
    # Outside code spans nothing is raw HTML; inside one (the scenario id) it is inert.
    outside = re.sub(r"`[^`]*`", "", md)
    assert "<script>" not in outside and "&lt;script&gt;alert\\(1\\)" in md


def test_no_external_urls() -> None:
    html = render_html(full_input())
    without_ns = re.sub(r'\sxmlns(:\w+)?="[^"]*"', "", html)
    assert not re.search(r"https?://", without_ns)
    assert not re.search(r"""(src|href)\s*=\s*["']?//""", without_ns)
    assert not re.search(r"""\bsrc\s*=""", without_ns)


def test_edge_cases_render() -> None:
    # No baseline at all.
    html = render_html(ReportInput(run=run_of([scenario("s::a")])))
    assert "s::a" in html and "none" in html
    # Only new scenarios.
    verdict = ScenarioVerdict(
        "s::a", VerdictKind.NEW, messages=("no baseline result for this scenario",)
    )
    html = render_html(ReportInput(run=run_of([scenario("s::a")]), verdicts=(verdict,)))
    assert 'data-verdict="new"' in html
    # Zero scenarios, no commit.
    html = render_html(ReportInput(run=run_of([], sha=None)))
    assert "Scenarios (0)" in html
    # A scenario without samples (errored).
    broken = ScenarioResult(
        "s::e", "s", "e", "torch", "cpu", "fp32", status="error", message="boom"
    )
    assert "boom" in render_html(ReportInput(run=run_of([broken])))


def test_canary_and_env_banners() -> None:
    inp = ReportInput(
        run=run_of([scenario("s::a", canary_ns=1.2e6)]),
        baseline={"s::a": scenario("s::a", canary_ns=1e6)},
        baseline_environment=Environment("f00000000002", {"cpu": "OtherCPU"}, {}),
    )
    html = render_html(inp)
    assert 'id="canary-banner"' in html and "+20.0%" in html
    assert 'id="env-banner"' in html and "OtherCPU -&gt; TestCPU" in html
    quiet = ReportInput(run=run_of([scenario("s::a")]), baseline={"s::a": scenario("s::a")})
    assert 'id="canary-banner"' not in render_html(quiet)


def _busy(result: ScenarioResult, foreign: float) -> ScenarioResult:
    """``result`` measured while other processes used ``foreign`` of all CPUs."""
    return replace(result, runtime=replace(result.runtime, cpu=CpuShares(foreign, 0.0)))


def test_a_canary_read_on_a_busy_host_never_says_the_host_was_faster() -> None:
    """Other processes took 45% of the CPUs (limit 10%) while the canary read 20% faster:
    the report says the host was busy, not that it was faster; so does the summary."""
    current = [_busy(scenario(f"s::{n}", canary_ns=0.8e6), 0.45) for n in "ab"]
    inp = ReportInput(
        run=run_of([*current, scenario("s::c", canary_ns=0.8e6)]),
        baseline={f"s::{n}": scenario(f"s::{n}", canary_ns=1e6) for n in "abc"},
    )
    html = render_html(inp)
    assert 'id="canary-banner"' not in html and "the host was faster" not in html
    banner = re.search(r'<div class="banner" id="busy-banner">(.*?)</div>', html, re.S)
    assert banner is not None
    assert "The host was busy" in banner[1] and "up to 45% of the CPUs" in banner[1]
    assert "2 cells were measured (s::a, s::b; contention limit 10%)" in banner[1]
    md = render_markdown(inp)
    assert "**The host was busy**: other processes used up to 45% of the CPUs" in md
    assert "faster" not in md
    # Under the run's own limit (50%) the host was quiet: the canary speaks again.
    lenient = replace(inp, contention_limit=0.5)
    html = render_html(lenient)
    assert 'id="busy-banner"' not in html and "the host was faster" in html
    # A baseline canary read on a busy host is no measure of the machine either.
    base_busy = ReportInput(
        run=run_of([scenario("s::a", canary_ns=0.8e6)]),
        baseline={"s::a": _busy(scenario("s::a", canary_ns=1e6), 0.3)},
    )
    assert 'id="canary-banner"' not in render_html(base_busy)


def test_a_cells_details_say_what_was_quantized_and_how_busy_the_host_was() -> None:
    """The facts an int8 figure needs beside it: the layers and ops the quantizer changed
    and left in float, and the other processes' share of the CPUs while it ran."""
    applied = QuantFacts(
        tool="onnxruntime.quantization.quantize_dynamic",
        quantized={"MatMul": 72},
        kept={"MatMul": 24, "Gemm": 1},
        ops={"DynamicQuantizeLinear": 48, "MatMulInteger": 72},
        layers=tuple(f"/encoder/layer.{i}/attention/self/query/MatMul" for i in range(30)),
        layer_count=72,
    )
    settings = {"name": "int8", "mode": "dynamic", "applied": applied.to_dict()}
    base = scenario("s::int8")
    cell = replace(
        base,
        precision="int8",
        runtime=RuntimeInfo(
            backend={**base.runtime.backend, "quantization": settings},
            cpu=CpuShares(0.45, 0.0),
        ),
    )
    html = render_html(ReportInput(run=run_of([cell])))
    facts = dict(re.findall(r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>", html))
    assert facts["quantization applied"] == (
        "72 of 96 MatMul quantized, 24 MatMul, 1 Gemm left in float (graph: "
        "DynamicQuantizeLinear 48, MatMulInteger 72; onnxruntime.quantization.quantize_dynamic)"
    )
    assert facts["quantized layers"].startswith("/encoder/layer.0/attention/self/query/MatMul, ")
    assert facts["quantized layers"].endswith(" and 52 more")
    assert facts["contention"].startswith(
        "other processes used 45% of the CPUs while it was measured (contention limit 10%): "
        "the host was busy"
    )
    # The settings keep their row, without the applied facts said above.
    assert "MatMulInteger" not in facts["runtime: quantization"]
    assert "&#39;mode&#39;: &#39;dynamic&#39;" in facts["runtime: quantization"]
    # A quiet host says its share; a cell not quantized has no quantization rows.
    quiet = replace(cell, runtime=replace(base.runtime, cpu=CpuShares(0.02, None)))
    facts = dict(
        re.findall(
            r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>",
            render_html(ReportInput(run=run_of([quiet]))),
        )
    )
    assert facts["contention"] == (
        "other processes used 2% of the CPUs while it was measured (contention limit 10%)"
    )
    assert "quantization applied" not in facts


def test_render_is_deterministic() -> None:
    assert render_html(full_input()) == render_html(full_input())


def _check(metric: str, passed: bool, reference: str, value: float = 0.0) -> dict[str, Any]:
    return {
        "metric": metric,
        "output": "0",
        "value": value,
        "limit": 0.999 if metric != "nonfinite_max" else 0,
        "passed": passed,
        "reference": reference,
        "worst_inputs": [],
        "message": f"{metric} {'ok' if passed else 'failed'} vs {reference}",
    }


def golden_only_failure() -> dict[str, Any]:
    """A cell that matches its reference but not the baseline's golden outputs."""
    out = {"name": "0", "values": {"cosine_mean": 1.0, "cosine_min": 1.0}, "worst_inputs": []}
    ref, gold = "torch-fp32", "baseline bbbbbbb"
    return {
        "n": 8,
        "reference": ref,
        "report": {
            "reference": ref,
            "passed": True,
            "outputs": [out],
            "checks": [_check("cosine_min", True, ref, 1.0), _check("nonfinite_max", True, ref)],
        },
        "baseline": {
            "reference": gold,
            "passed": False,
            "outputs": [out],
            "checks": [
                _check("baseline_cosine_min", False, gold, -0.38),
                _check("nonfinite_max", True, gold),
            ],
        },
        "failures": ["baseline_cosine_min failed vs baseline bbbbbbb"],
        "passed": False,
    }


def _accuracy_section(html: str) -> str:
    start = html.index('<h3 class="accuracy">')
    return html[start : html.index("<h3>Run</h3>", start)]


def test_the_accuracy_heading_names_the_check_that_failed() -> None:
    sid = "s::gold"
    html = render_html(ReportInput(run=run_of([scenario(sid, accuracy=golden_only_failure())])))
    section = _accuracy_section(html)
    heading = section[: section.index("</h3>")]
    # The reference check held: it must not read as failed; the golden one did not.
    assert re.search(r"vs reference torch-fp32: <span class=\"pass\">passed</span>", heading)
    assert re.search(
        r"vs golden outputs of baseline bbbbbbb: <span class=\"fail\">FAILED</span>", heading
    )
    assert "Accuracy vs torch-fp32" not in html
    # The scenario table's headline says the same.
    row = html[html.index('<tr class="o-') :]
    assert "vs torch-fp32: ok; golden outputs: 1 failure" in row[: row.index("</tr>")]
    # And a reference failure still reads as one, with the golden check passed.
    flipped = golden_only_failure()
    flipped["report"]["checks"][0] = _check("cosine_min", False, "torch-fp32", 0.5)
    flipped["baseline"]["checks"][0] = _check("baseline_cosine_min", True, "baseline bbbbbbb", 1)
    heading = _accuracy_section(
        render_html(ReportInput(run=run_of([scenario(sid, accuracy=flipped)])))
    ).split("</h3>")[0]
    assert re.search(r"vs reference torch-fp32: <span class=\"fail\">FAILED</span>", heading)
    assert re.search(r"baseline bbbbbbb: <span class=\"pass\">passed</span>", heading)


def test_a_degenerate_reference_reads_inconclusive_not_passed() -> None:
    why = (
        "accuracy on output logits not checked: reference torch-fp32 is degenerate "
        "(near zero: its largest |value| is 2e-09, below 1e-06)"
    )
    acc = {
        "n": 8,
        "reference": "torch-fp32",
        "report": {
            "reference": "torch-fp32",
            "passed": True,
            "outputs": [
                {
                    "name": "logits",
                    "values": {"cosine_mean": 0.0, "cosine_min": 0.0},
                    "worst_inputs": [],
                    "degenerate": "near zero",
                }
            ],
            "checks": [_check("nonfinite_max", True, "torch-fp32", 0)],
            "task_metric": None,
            "inconclusive": [why],
        },
        "failures": [],
        "inconclusive": [why],
        "passed": True,
    }
    inp = ReportInput(run=run_of([scenario("s::q", accuracy=acc)]))
    html = render_html(inp)
    section = _accuracy_section(html)
    heading = section[: section.index("</h3>")]
    assert 'vs reference torch-fp32: <span class="warn">inconclusive</span>' in heading
    assert "logits (degenerate reference)" in section
    assert "vs torch-fp32: inconclusive" in html  # the scenario table's headline
    assert "inconclusive: <b>1</b>" in html  # the counts
    assert "**Inconclusive (1)**" in render_markdown(inp)


def test_the_checks_table_lists_each_check_once_with_what_it_compared() -> None:
    html = render_html(
        ReportInput(run=run_of([scenario("s::gold", accuracy=golden_only_failure())]))
    )
    table = _accuracy_section(html).split("<caption>checks</caption>", 1)[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>(\w+)</td><td>(\w*)</td><td>([^<]*)</td>", table)
    assert rows == [
        ("cosine_min", "0", "reference torch-fp32"),
        ("nonfinite_max", "0", "this run&#39;s outputs"),  # the same count, checked once
        ("baseline_cosine_min", "0", "golden outputs of baseline bbbbbbb"),
    ]


def _figures(html: str, kind: str) -> list[tuple[str, str]]:
    return re.findall(
        rf'<figure class="{kind}">(<svg.*?</svg>)<figcaption>(.*?)</figcaption>', html, re.S
    )


def test_cdf_captions_name_only_the_curves_drawn() -> None:
    base = {"s::a": scenario("s::a", seed=9)}
    for baseline in (base, {}):
        html = render_html(ReportInput(run=run_of([scenario("s::a")]), baseline=baseline))
        ((svg, caption),) = _figures(html, "cdf")
        assert ("baseline (blue)" in caption) == bool(baseline) == (BASELINE_COLOR in svg)
        assert "current (red)" in caption and CURRENT_COLOR in svg
    # Many cells: sparklines past the budget, captioned the same way.
    many = [scenario(f"s::{i:03}", seed=i) for i in range(FULL_PLOT_BUDGET + 2)]
    html = render_html(ReportInput(run=run_of(many), baseline={many[-1].id: many[0]}))
    figures = _figures(html, "cdf")
    assert len(figures) == len(many)
    for svg, caption in figures:
        assert ("baseline (blue)" in caption) == (BASELINE_COLOR in svg)
    # A cell of the baseline not measured in this run: its curve is the baseline's.
    html = render_html(
        ReportInput(
            run=run_of([scenario("s::a")]),
            baseline={"s::gone": scenario("s::gone")},
            verdicts=(ScenarioVerdict("s::gone", VerdictKind.MISSING, messages=("gone",)),),
        )
    )
    gone = html[html.index("<h2>s::gone") :]
    ((svg, caption),) = _figures(gone[: gone.index("</section>")], "cdf")
    assert "baseline (blue)" in caption and "current" not in caption
    assert BASELINE_COLOR in svg and CURRENT_COLOR not in svg
    # No trend for it either: the trend's red point is this run's.
    assert not _figures(gone[: gone.index("</section>")], "trend")


def _ab_trend_input(others: int = 0) -> ReportInput:
    """GPT-2 judged by same-run A/B (base ~130 ms, head ~240 ms: +83%) with five archived
    runs from a busy machine (~650 ms); ``others`` regressed cells sort before it."""
    sid = "s::gpt2"
    head = scenario(sid, seed=1, scale_ms=240.0)
    samples_a = scenario(sid, seed=2, scale_ms=130.0).samples_ns
    decision = Decision(True, DecisionKind.REGRESSION, 1.83, 1.7, 1.9, 40, "regression")
    ab = ABDetail(BASE_SHA, "HEAD~1", decision, 5.0, (), samples_a)
    verdict = ScenarioVerdict(sid, VerdictKind.REGRESSION, mode="ab", ab=ab)
    history = {sid: [(f"{i:040x}", scenario(sid, seed=10 + i, scale_ms=650.0)) for i in range(5)]}
    extra = [scenario(f"s::a{i:03}", seed=i) for i in range(others)]
    verdicts = [p95_verdict(r.id, VerdictKind.REGRESSION, 1.5, "+50%") for r in extra]
    return ReportInput(
        run=run_of([*extra, head]),
        verdicts=(*verdicts, verdict),
        baseline=base_results({sid: verdict}, {sid: head}),
        history=history,
    )


def _gpt2_trend(html: str) -> tuple[str, str]:
    section = html[html.index("<h2>s::gpt2") :]
    ((svg, caption),) = _figures(section[: section.index("</section>")], "trend")
    return svg, caption


def _strokes(svg: str, colour: str) -> list[int]:
    """The vertices of each solid or dotted line drawn in ``colour`` (legend keys too)."""
    paths = re.findall(rf'<path d="([^"]*)"[^>]*style="[^"]*stroke: {colour}[;"]', svg)
    return [d.count("L") + 1 for d in paths]


def test_an_ab_cells_trend_keeps_archived_points_apart_from_its_ab_figures() -> None:
    """Archived busy-machine P95s (~650 ms) are not one series with the A/B run: they are
    drawn and labelled as archived, and no line joins them to the A/B figures."""
    svg, caption = _gpt2_trend(render_html(_ab_trend_input()))
    assert "5 archived commits" in caption and "archived, other run conditions" in caption
    assert "the A/B base (blue) and this run (red)" in caption
    assert "archived, other run conditions" in svg and "same-run A/B: base" in svg
    # The archived line joins the five archived points only (and its legend key's 3);
    # the blue line the A/B base and this run only.
    assert sorted(_strokes(svg, ARCHIVED_COLOR)) == [2, 3, 5]  # separator, legend, points
    assert _strokes(svg, BASELINE_COLOR) == [2]
    # Past the budget of full figures, the sparkline keeps them apart too.
    svg, caption = _gpt2_trend(render_html(_ab_trend_input(others=FULL_PLOT_BUDGET)))
    assert 'class="spark"' in svg and "archived, other run conditions" in caption
    lines = re.findall(r'<polyline fill="none" stroke="(#\w+)"[^>]*points="([^"]*)"', svg)
    assert [(c, len(pts.split())) for c, pts in lines] == [(ARCHIVED_COLOR, 5), (BASELINE_COLOR, 2)]
    # A cell judged against the archive keeps its one series.
    html = render_html(full_input())
    assert "P95 over 6 commits, oldest first; this run in red" in html
    assert "archived, other run conditions" not in html


#: The base side's last round of a closed-loop level (``LoadFigures.to_dict()``).
LOAD_A: dict[str, Any] = {
    "mode": "closed",
    "level": "c2",
    "concurrency": 2,
    "rate_asked": None,
    "rate_sent": None,
    "rate_achieved": None,
    "arrivals": None,
    "workers": 1,
    "sessions": "shared",
    "requests": 100,
    "completed": 100,
    "failed": 0,
    "unserved": 0,
    "duration_s": 0.11,
    "throughput": 900.0,
    "uncorrected_ns": None,
    "queue_share": 0.01,
    "late": {
        "count": 0,
        "share": 0.0,
        "limit_ms": 1.0,
        "max_share": 0.05,
        "lag_p99_ms": None,
        "lag_max_ms": None,
    },
    "errors": {},
}


def test_the_ab_base_side_of_a_load_cell_has_the_base_figures(tmp_path: Path) -> None:
    base_run = run_of([scenario("s::slo", seed=4)], sha=BASE_SHA)
    archived = Baseline(base_run.environment.fingerprint, base_run.commit, (base_run,), None)
    choice = BaselineChoice(archived, "nearest ancestor")
    head = LoadFigures.from_dict({**LOAD_A, "throughput": 300.0, "queue_share": 0.2})
    current = replace(scenario("s::load", seed=1, scale_ms=6.0), throughput=300.0, load=head)
    samples_a = scenario("s::load", seed=2, scale_ms=2.0).samples_ns
    decision = Decision(True, DecisionKind.REGRESSION, 3.0, 2.8, 3.2, 10, "regression")
    verdicts = {
        "s::load": ScenarioVerdict(
            "s::load",
            VerdictKind.REGRESSION,
            mode="ab",
            ab=ABDetail(BASE_SHA, "HEAD~1", decision, 5.0, (), samples_a, 900.0, LOAD_A),
        ),
        # An SLO search: A/B judged it against the archived baseline.
        "s::slo": p95_verdict("s::slo", VerdictKind.REGRESSION, 1.12, "+12.0%"),
    }
    run = run_of([current, scenario("s::slo", seed=5)])
    side = base_side(
        choice.to_dict(), archived, run, verdicts, history={}, ab_base=(BASE_SHA, "HEAD~1")
    )
    load = side.results["s::load"]
    assert load.samples_ns == samples_a and load.throughput == 900.0
    assert load.load is not None and load.load.to_dict() == LoadFigures.from_dict(LOAD_A).to_dict()
    assert side.results["s::slo"] == archived.pooled("s::slo")
    # In the report: the base's figures beside the head's, for both cells.
    html = render_html(
        ReportInput(run=run, verdicts=tuple(verdicts.values()), baseline=side.results)
    )
    table = html[
        html.index('<table id="scenarios">') : html.index(
            "</table>", html.index('<table id="scenarios">')
        )
    ]
    assert "<span>- -&gt;</span>" not in table
    # A verdict written before the base's load figures were kept borrows none of the head's.
    old = replace(
        verdicts["s::load"], ab=replace(verdicts["s::load"].ab, throughput_a=None, load_a=None)
    )
    (result,) = base_results({"s::load": old}, {"s::load": current}).values()
    assert result.throughput is None and result.load is None and result.samples_ns == samples_a


def test_the_ab_base_side_has_side_a_s_memory_never_the_head_s() -> None:
    """Same-run A/B measures each side's memory alone; the report's base column takes
    side A's figure from the verdict's memory gate, and none without one."""
    head = replace(scenario("s::m", seed=3), peak_memory_mib=600.0, gpu_peak_memory_mib=90.0)
    samples_a = scenario("s::m", seed=4).samples_ns
    decision = Decision(True, DecisionKind.REGRESSION, 1.3, 1.2, 1.4, 400, "memory")
    ab = ABDetail(BASE_SHA, "HEAD~1", decision, 5.0, (), samples_a)
    memory = MetricVerdict(
        metric="peak_memory", verdict=VerdictKind.REGRESSION, message="", rule="",
        baseline=288.0, current=600.0,
    )  # fmt: skip
    gated = ScenarioVerdict("s::m", VerdictKind.REGRESSION, (memory,), mode="ab", ab=ab)
    (base,) = base_results({"s::m": gated}, {"s::m": head}).values()
    assert base.peak_memory_mib == 288.0 and base.gpu_peak_memory_mib is None
    ungated = replace(gated, metrics=())
    (base,) = base_results({"s::m": ungated}, {"s::m": head}).values()
    assert base.peak_memory_mib is None and base.gpu_peak_memory_mib is None


# --------------------------------------------------------------------------- Markdown


def test_markdown_marker_and_lines() -> None:
    md = render_markdown(full_input(), link="report.html")
    assert md.splitlines()[0] == MARKER
    assert "P95 latency regressed +50.0%" in md
    assert "P95 latency improved -25.0%" in md
    assert "s::fast" not in md  # unchanged ones are left out
    # s::slow regressed and failed its accuracy check: a row in each table.
    assert "cosine similarity min 0.9 &lt; 0.98 on output emb" in md and "(report.html)" in md
    assert "beside its regression: cosine similarity min 0.9 &lt; 0.98" in md
    assert md.splitlines()[1].startswith("### perfguard ❌ regression: `aaaaaaaaaaaa`")


def test_markdown_stays_small_for_500_scenarios() -> None:
    verdicts = tuple(
        p95_verdict(
            f"suite::scenario-{i:03d}" + "x" * 80,
            VerdictKind.REGRESSION if i % 2 else VerdictKind.NEW,
            1.5,
            "P95 latency regressed " + "y" * 400,
        )
        for i in range(500)
    )
    md = render_markdown(ReportInput(run=run_of([]), verdicts=verdicts))
    assert len(md.encode()) < 60_000
    assert "... and 210 more" in md and "250 new" in md


def _escape_heavy_input(n: int, name_len: int, message: str) -> ReportInput:
    """``n`` regressions and ``n`` improvements with long names and messages."""
    verdicts = tuple(
        p95_verdict(
            f"s::{i:03d}-" + "n" * name_len,
            VerdictKind.REGRESSION if i % 2 else VerdictKind.IMPROVEMENT,
            1.5 if i % 2 else 0.5,
            message,
        )
        for i in range(2 * n)
    )
    return ReportInput(run=run_of([]), verdicts=verdicts)


def test_markdown_fits_githubs_comment_limit_after_escaping() -> None:
    # Rows were cut before escaping: 300 characters of `&` become 1,500 of `&amp;`, and
    # 40 such rows a table passed GitHub's limit, which then refused the comment.
    md = render_markdown(
        _escape_heavy_input(45, 180, "P95 latency regressed " + "&" * 400), link="report.html"
    )
    assert len(md) <= COMMENT_LIMIT
    assert md.splitlines()[0] == MARKER
    last = md.rstrip().splitlines()[-1]
    assert last.startswith("**Summary cut at GitHub's comment limit: ")
    assert "[full report](report.html)" in last
    # Whole lines only: every table row that is left ends its row.
    rows = [line for line in md.splitlines() if line.startswith("| `s::")]
    assert rows and all(row.endswith(" |") for row in rows)


def test_markdown_under_the_limit_is_not_cut() -> None:
    md = render_markdown(_escape_heavy_input(3, 20, "P95 latency regressed & more"))
    assert "comment limit" not in md and md.count("| `s::") == 6


@given(
    n=st.integers(0, 60),
    name_len=st.integers(0, 400),
    message=st.text(alphabet="&<>_x", min_size=100, max_size=600),
)
@settings(max_examples=25, deadline=None)
def test_markdown_never_passes_the_comment_limit(n: int, name_len: int, message: str) -> None:
    md = render_markdown(_escape_heavy_input(n, name_len, message), link="https://x/r.html")
    assert len(md) <= COMMENT_LIMIT
    assert md.splitlines()[0] == MARKER


# --------------------------------------------------------------------------- files


def _store(report_dir: Path, sha: str, created: str, verdicts: list[str]) -> None:
    run = run_of([scenario("s::a")], sha=sha, created_at=created)
    write_results(run, report_dir)
    data = {
        "schema_version": 1,
        "baseline": {"commit": BASE_SHA, "how": "test"},
        "gate": True,
        "verdicts": [ScenarioVerdict(f"s::{i}", kind).to_dict() for i, kind in enumerate(verdicts)],
    }
    (report_dir / sha[:12] / "comparison.json").write_text(json.dumps(data))


def test_write_report_and_index(tmp_path: Path) -> None:
    _store(tmp_path, "1" * 40, "2026-01-01T00:00:00+00:00", [VerdictKind.UNCHANGED])
    _store(
        tmp_path,
        "2" * 40,
        "2026-03-01T00:00:00+00:00",
        [VerdictKind.REGRESSION, VerdictKind.UNCHANGED],
    )
    _store(tmp_path, "3" * 40, "2026-02-01T00:00:00+00:00", [VerdictKind.IMPROVEMENT])
    (tmp_path / "corrupt000000").mkdir()
    (tmp_path / "corrupt000000" / "results.json").write_text("{not json")
    inp = full_input()
    write_results(inp.run, tmp_path)  # the session writes results.json; the report sits beside
    path = write_report(inp, tmp_path)
    assert path == tmp_path / SHA[:12] / "report.html"
    assert (path.parent / "summary.md").read_text().startswith(MARKER)
    index = (tmp_path / "index.html").read_text()
    order = re.findall(r'data-commit="(\w+)"', index)
    # full_input() is 2026-01-02: between the first and the third.
    assert order == ["2" * 12, "3" * 12, SHA[:12], "1" * 12]
    assert 'href="aaaaaaaaaaaa/report.html"' in index
    assert "corrupt000000" in index and "Unreadable" in index
    assert "FAILED" in index
    assert render_index(tmp_path) == tmp_path / "index.html"


def test_the_index_links_only_the_report_of_the_run_beside_it(tmp_path: Path) -> None:
    first = full_input()
    write_results(first.run, tmp_path)
    html = write_report(first, tmp_path)
    link = f'href="{SHA[:12]}/report.html"'
    assert link in (tmp_path / "index.html").read_text()

    # A second run of the commit whose report.html could not be written (a full disk):
    # its results.json landed, the first run's report.html is still there.
    second = replace(first, run=replace(first.run, created_at="2026-01-03T00:00:00+00:00"))
    write_results(second.run, tmp_path)
    render_index(tmp_path)
    index = (tmp_path / "index.html").read_text()
    assert link not in index
    assert f"{html} is not this run&#39;s report" in index and "not linked" in index

    html.unlink()  # nothing there at all: no link, no complaint
    render_index(tmp_path)
    index = (tmp_path / "index.html").read_text()
    assert link not in index and "not linked" not in index and "(no report)" in index

    write_report(second, tmp_path)
    index = (tmp_path / "index.html").read_text()
    assert link in index and "not linked" not in index


def test_report_command(tmp_path: Path) -> None:
    run = run_of([scenario("s::a", scale_ms=3.0), scenario("s::b")])
    results = write_results(run, tmp_path / "reports")
    base = run_of([scenario("s::a", seed=9), scenario("s::gone")], sha=BASE_SHA)
    base_path = tmp_path / "base.json"
    base_path.write_text(json.dumps(base.to_dict()))
    html_path = report_command(results, base_path, None)
    assert html_path == results.parent / "report.html"
    html = html_path.read_text()
    assert 'data-verdict="regression"' in html and 'data-verdict="missing"' in html
    assert (results.parent.parent / "index.html").is_file()
    out = report_command(results, None, tmp_path / "out")
    assert out == tmp_path / "out" / "report.html"


def test_report_command_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "results.json"
    with pytest.raises(ResultsError, match=re.escape(str(missing))):
        report_command(missing, None, None)
    corrupt = tmp_path / "results.json"
    corrupt.write_text('{"schema_version": 1, "created_at": ')
    with pytest.raises(ResultsError, match=re.escape(str(corrupt))):
        report_command(corrupt, None, None)
    good = write_results(run_of([scenario("s::a")]), tmp_path / "r")
    bad_base = tmp_path / "base.json"
    bad_base.write_text("[1, 2]")
    with pytest.raises(ResultsError, match=re.escape(str(bad_base))):
        report_command(good, bad_base, None)
    (good.parent / "comparison.json").write_text('{"schema_version": 1, "verdicts": [1]}')
    with pytest.raises(ResultsError, match=r"comparison\.json"):
        report_command(good, None, None)


def test_report_command_with_baseline_archive(tmp_path: Path) -> None:
    from perfguard.baseline.store import DirectoryStore

    base = run_of([scenario("s::a", seed=9, scale_ms=1.0)], sha=BASE_SHA)
    archive = DirectoryStore(tmp_path / "baselines").save(base)
    assert archive is not None
    run = run_of([scenario("s::a", scale_ms=3.0)])
    results = write_results(run, tmp_path / "reports")
    html = report_command(results, archive, None).read_text()
    assert 'data-verdict="regression"' in html
    assert BASE_SHA[:12] in html


@pytest.mark.parametrize(
    ("version", "hint"), [(2, "upgrade perfguard"), (0, "re-run"), ("1", "re-run")]
)
def test_a_comparison_file_of_another_schema_version_says_whose_it_is(
    tmp_path: Path, version: object, hint: str
) -> None:
    from perfguard.core.errors import ResultsError
    from perfguard.report.comparison import read_comparison

    path = tmp_path / "comparison.json"
    path.write_text(json.dumps({"schema_version": version, "verdicts": []}))
    with pytest.raises(ResultsError, match="comparison schema_version") as info:
        read_comparison(path)
    assert str(path) in str(info.value) and hint in str(info.value)


def test_report_command_refuses_to_rejudge_an_ab_run_but_renders_its_own_verdicts(
    tmp_path: Path,
) -> None:
    ab = replace(run_of([scenario("s::a", scale_ms=3.0)]), mode="ab")
    results = write_results(ab, tmp_path / "reports")
    assert results.parent.name == f"{ab.commit.short}-ab"
    base_path = tmp_path / "base.json"
    base_path.write_text(json.dumps(run_of([scenario("s::a")], sha=BASE_SHA).to_dict()))
    with pytest.raises(ResultsError, match="same-run A/B") as refused:
        report_command(results, base_path, None)
    assert str(results) in str(refused.value)
    html_path = report_command(results, None, None)  # its own comparison (none here)
    assert html_path == results.parent / "report.html"
    assert (results.parent.parent / "index.html").is_file()  # <commit12>-ab is a run dir


def test_report_command_shows_an_ab_runs_base_side(tmp_path: Path) -> None:
    ab = replace(run_of([scenario("s::a", scale_ms=3.0)]), mode="ab")
    results = write_results(ab, tmp_path / "reports")
    samples_a = scenario("s::a", seed=7).samples_ns
    decision = Decision(True, DecisionKind.REGRESSION, 1.5, 1.4, 1.6, 200, "regression")
    verdict = replace(
        p95_verdict("s::a", VerdictKind.REGRESSION, 1.5, "P95 latency +50.0%"),
        mode="ab",
        ab=ABDetail(BASE_SHA, "HEAD~1", decision, 2.0, (), samples_a),
    )
    write_comparison(
        comparison_path(results), baseline={"commit": BASE_SHA}, gate=True, verdicts=[verdict]
    )
    html = report_command(results, None, None).read_text()
    row = html[html.index('<tr class="o-') :]
    row = row[: row.index("</tr>")]
    p50 = summarize(samples_a).p50 / 1e6
    assert f"<span>{p50:.3f} -&gt;</span>" in row and "<span>- -&gt;</span>" not in row


def test_report_command_keeps_the_runs_exit_status_unless_it_rejudges(tmp_path: Path) -> None:
    """A run that pytest failed for a reason no cell shows (another test, a crash in a
    hook) is rendered as failed from its stored files, as it ended; re-judged against
    another baseline, the old exit status says nothing about the new verdicts."""
    results = write_results(run_of([scenario("s::a")]), tmp_path / "reports")
    write_comparison(comparison_path(results), baseline={}, gate=True, verdicts=(), exit_status=1)
    html = report_command(results, None, None).read_text()
    assert 'id="outcome" data-state="failed"' in html and "pytest exit status 1" in html
    base_path = tmp_path / "base.json"
    base_path.write_text(json.dumps(run_of([scenario("s::a", seed=9)], sha=BASE_SHA).to_dict()))
    rejudged = report_command(results, base_path, tmp_path / "out").read_text()
    assert 'id="outcome" data-state="failed"' not in rejudged
    assert "pytest exit status" not in rejudged


def test_the_outcome_is_decided_once_for_every_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfguard.report import model

    calls = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return run_outcome(*args, **kwargs)

    monkeypatch.setattr(model, "run_outcome", counted)
    inp = full_input()
    html, md = render_html(inp), render_markdown(inp)
    assert "regression" in html and md.startswith(MARKER)
    render_markdown(inp)  # rendered twice on GitHub
    assert len(calls) == 1


def test_a_runtime_fact_that_changed_since_the_base_says_what_it_was() -> None:
    sid = "s::served"

    def served(seed: int, command: str, ready_s: float) -> ScenarioResult:
        facts = {"command": command, "served_model": "m.gguf", "ready_s": ready_s}
        return dataclasses.replace(
            scenario(sid, seed=seed, backend="server"), runtime=RuntimeInfo(backend=facts)
        )

    head = served(1, "llama-server -m m.gguf --port {port} -t 2", 0.8)
    inp = ReportInput(
        run=run_of([head]),
        verdicts=(p95_verdict(sid, VerdictKind.REGRESSION, 1.5, "P95 latency regressed"),),
        baseline={sid: served(2, "llama-server -m m.gguf --port {port} -t 1", 0.4)},
        baseline_info={"commit": BASE_SHA, "how": "nearest ancestor on main", "env_diff": {}},
    )
    html = render_html(inp)
    assert (
        "llama-server -m m.gguf --port {port} -t 2 (base: llama-server -m m.gguf --port "
        "{port} -t 1)" in html
    )
    assert "<td>m.gguf</td>" in html  # unchanged: as it is
    assert "(base: 0.4)" not in html  # a time to get ready is no change of the server
