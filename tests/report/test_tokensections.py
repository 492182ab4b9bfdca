"""The Token timing section of a generative cell in report.html
(``perfguard.report.tokensections``): the figures beside the baseline, the gated ones'
verdicts, which phase moved, and the distributions and timeline."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np

from perfguard.core.policy import GateSpec
from perfguard.judge.compare import compare_scenario
from perfguard.records.tokenfigures import TokenFigures
from perfguard.report import render_html
from perfguard.report.model import ReportInput
from perfguard.report.tokensections import median_request, token_view
from tests.helpers.results import run_of
from tests.helpers.tokens import generative_result, token_times

SID = "suites/gen.yaml::tinyllama[fp32-p48]"
GATES = (GateSpec("ttft_p95", 0.05), GateSpec("itl_p95", 0.05))
BASE = generative_result(token_times(120, 16, 0, request_sigma=0.02), sid=SID)  # type: ignore[arg-type]
SLOW_DECODE = generative_result(  # type: ignore[arg-type]
    token_times(120, 16, 1, decode_ms=1.3, request_sigma=0.02), sid=SID
)


def section(html: str) -> str:
    found = re.search(r'<section class="tokens" id="s0-tokens">(.*?)</section>', html, re.S)
    assert found, "no Token timing section"
    return found.group(1)


def rows(part: str) -> dict[str, list[str]]:
    table = re.search(r'<table class="tokens">.*?</table>', part, re.S)
    assert table
    out = {}
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(0), re.S):
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        if cells:
            out[cells[0]] = cells[1:]
    return out


def html_of(current: object, base: object | None) -> str:
    verdict = compare_scenario(current, base, GATES, baseline_commit="a" * 40)  # type: ignore[arg-type]
    baseline = {SID: base} if base is not None else {}
    return render_html(ReportInput(run=run_of([current]), verdicts=(verdict,), baseline=baseline))  # type: ignore[list-item, dict-item]


def test_a_decode_slowdown_shows_in_itl_and_the_decode_share() -> None:
    part = section(html_of(SLOW_DECODE, BASE))
    table = rows(part)
    itl = table["ITL P95 (ms)"]
    assert itl[3] == "regression" and itl[2].startswith("+")
    assert table["TTFT P95 (ms)"][3] == "unchanged"
    assert table["TPOT P50 (ms)"][3] == ""  # not gated: no verdict
    assert table["output tokens/s"][2].startswith("-")
    where = re.search(r'<p class="where-tokens">(.*?)</p>', part, re.S)
    assert where
    decode = re.search(r"decode ([+-][0-9.]+)%", where.group(1))
    prompt = re.search(r"prompt pass ([+-][0-9.]+)%", where.group(1))
    assert decode and prompt and float(decode.group(1)) > 20 > abs(float(prompt.group(1)))


def test_the_figures_are_well_formed_svg_naming_their_curves() -> None:
    part = section(html_of(SLOW_DECODE, BASE))
    svgs = re.findall(r"<svg\b.*?</svg>", part, re.S)
    assert len(svgs) == 3  # TTFT CDF, ITL CDF, median-request timeline
    for svg in svgs:
        ET.fromstring(svg)
    assert "inter-token gap (ms)" in part and "tokens received" in part
    assert "baseline (blue) and current (red)" in part


def test_without_a_baseline_only_the_current_figures() -> None:
    part = section(html_of(SLOW_DECODE, None))
    table = rows(part)
    assert table["ITL P95 (ms)"][0] == "-" and table["ITL P95 (ms)"][2] == "-"
    assert "current (red)" in part and "baseline (blue)" not in part


def test_no_section_for_a_cell_that_generates_nothing() -> None:
    from dataclasses import replace

    plain = replace(SLOW_DECODE, tokens=None)
    assert 'class="tokens"' not in html_of(plain, None)
    assert token_view(plain, None, None, full=True) is None


def test_the_median_request_is_the_nearest_rank_median_by_end_to_end() -> None:
    times = np.array([[1, 9], [1, 3], [1, 5], [1, 7]])
    tokens = TokenFigures.of(times, prompt_tokens=2, batch=1)
    assert median_request(tokens).tolist() == [1, 5]  # e2e 3, 5, 7, 9: rank 2 of 4
