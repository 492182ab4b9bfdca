"""Real reports from real runs, opened in headless Chromium (Debian's package).

The first run saves a baseline, makes the model 3x slower and runs again, so the
report holds a regression. In the browser: no console error, no request other
than the file itself, and the regression row visible; a screenshot is kept.

The second builds what a new user meets at 1280 px: an archived report with a
regressed cell, a load cell, an SLO search and accuracy cells whose golden-output
check fails while the reference check holds, and a same-run A/B report of the same
commits. Nothing may be cut off (every table fits its box, or the outcome column
stays in view; no element is wider than the page), every caption names only
series its plot draws, and each accuracy heading names the check that failed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from perfguard.report.plots import BASELINE_COLOR, CURRENT_COLOR
from perfguard.report.profilediff import change_colour
from tests.helpers.browser import FLAGS
from tests.helpers.gate_repo import Repo
from tests.helpers.git_repos import run_git
from tests.helpers.models import SLEEPY_MODEL, TINY_MODELS

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


def test_report_in_a_real_browser(pytester: pytest.Pytester, tmp_path: Path) -> None:
    repo = Repo(pytester)
    repo.commit(200, "base")
    repo.run("--perfguard-save").assert_outcomes(passed=1)
    sha = repo.commit(600, "three times slower")
    repo.run().assert_outcomes(failed=1)
    report = repo.path / "reports" / sha[:12] / "report.html"
    assert report.is_file()

    console: list[tuple[str, str]] = []
    requests: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda message: console.append((message.type, message.text)))
            page.on("pageerror", lambda error: console.append(("error", str(error))))
            page.on("request", lambda request: requests.append(request.url))
            page.goto(report.as_uri())
            page.wait_for_load_state("load")
            row = page.locator('tr[data-verdict="regression"]').first
            assert row.is_visible()
            assert "suites/s.yaml::spin" in row.inner_text()
            # PERFGUARD_SCREENSHOT=docs/report.png keeps the picture (the README's).
            shot = Path(os.environ.get("PERFGUARD_SCREENSHOT") or tmp_path / "report.png")
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        finally:
            browser.close()
    assert [m for m in console if m[0] == "error"] == []
    assert requests == [report.as_uri()]


# --------------------------------------------------------------------------- at 1280 px

WIDTH = 1280

MODELS = TINY_MODELS + SLEEPY_MODEL

# A long scenario name (ids wrap, they do not push the outcome column off the page); a
# model six times slower in the second commit (2 -> 12 ms: a regression on a busy host);
# the accuracy cells' weights change with SEED, so each matches its reference and
# misses the baseline's golden outputs.
SUITE = """\
defaults:
  warmup: {iterations: 2, seconds: 0}
  measure: {iterations: 100, seconds: 0}
  threads: 1
  stability_tolerance: 0.99
  gate: {p95: "+50%"}
models:
  sleepy:
    factory: models:sleepy
    kwargs: {ms: MS}
    inputs:
      x: {shape: [1, 8], dtype: float32}
  mlp:
    factory: models:mlp
    kwargs: {width: 64, seed: SEED}
    inputs:
      x: {shape: [4, 8], dtype: float32, seed: 1}
scenarios:
  - name: a-scenario-with-a-rather-long-descriptive-name-of-its-own
    model: sleepy
  - name: busy
    model: sleepy
    load: {concurrency: 2}
    measure: {iterations: 100, seconds: 0.3}
  - name: search
    model: sleepy
    load: {concurrency: 1, slo: {p95_ms: 50, factor: 2, max: 2}}
    measure: {iterations: 100, seconds: 0.3}
  - name: mlp
    model: mlp
    matrix:
      backend: [torch, onnxruntime]
    accuracy:
      inputs: {count: 8, seed: 5}
      reference: {backend: torch, precision: fp32}
      gate: {cosine_min: 0.999, baseline_cosine_min: 0.999}
"""

# Run in the page: what sticks out. A table fits its box, or (the scenario table, in its
# scroll box) its outcome column is in view; any other element ends inside the page.
LAYOUT_JS = """() => {
  const W = window.innerWidth, out = {tables: [], wide: [], outcome: null};
  const visible = (el) => { const r = el.getBoundingClientRect(); return r.width > 0; };
  document.querySelectorAll("table").forEach((t) => {
    if (!visible(t)) return;
    const box = t.parentElement;
    if (t.scrollWidth > box.clientWidth) {
      out.tables.push([t.id || t.className, t.scrollWidth, box.clientWidth]);
    }
  });
  const head = document.querySelector("#scenarios thead th:last-child");
  if (head) {
    const r = head.getBoundingClientRect();
    out.outcome = [head.textContent, r.left, r.right];
  }
  document.querySelectorAll("body *").forEach((el) => {
    if (!visible(el) || el.closest(".scroll")) return;
    const r = el.getBoundingClientRect();
    const name = el.id || el.className.baseVal || el.className;
    if (r.right > W + 0.5) out.wide.push([el.tagName, name, Math.round(r.right)]);
  });
  out.page = [document.documentElement.scrollWidth, W];
  return out;
}"""

# Each figure's caption and what its SVG draws: colours of its lines and markers, the
# legend's texts.
FIGURES_JS = """() => Array.from(document.querySelectorAll("figure")).map((f) => ({
  kind: f.className,
  caption: (f.querySelector("figcaption") || {}).textContent || "",
  svg: (f.querySelector("svg") || {}).outerHTML || "",
}))"""


def _commit(path: Path, ms: float, seed: int, message: str) -> str:
    text = SUITE.replace("MS", str(ms)).replace("SEED", str(seed))
    (path / "suites" / "s.yaml").write_text(text)
    run_git(path, "add", "-A")
    run_git(path, "commit", "-qm", message)
    return run_git(path, "rev-parse", "HEAD")


def _layout_problems(page: Any) -> list[str]:
    found = page.evaluate(LAYOUT_JS)
    problems = [f"table {t[0]!r}: {t[1]} px in a {t[2]} px box" for t in found["tables"]]
    problems += [f"{w[0]} {w[1]!r} ends at {w[2]} px" for w in found["wide"]]
    if found["page"][0] > found["page"][1]:
        problems.append(f"the page is {found['page'][0]} px wide in a {WIDTH} px window")
    label, left, right = found["outcome"]
    if label != "outcome" or left < 0 or right > WIDTH:
        problems.append(f"the outcome column is at {left}..{right} px ({label!r})")
    return problems


#: An icicle box without a base profile to compare with.
ICICLE_GREY = change_colour(None, 1.0)


def _caption_problems(figures: list[dict[str, str]]) -> list[str]:
    """Each claim of a caption checked against the SVG beside it."""
    problems = []
    for f in figures:
        caption, svg = f["caption"], f["svg"].replace(" ", "")
        blue, red = BASELINE_COLOR in svg, CURRENT_COLOR in svg
        claims: list[tuple[str, bool, bool]] = []
        if f["kind"] == "cdf":
            claims += [("(blue)", "(blue)" in caption, blue), ("(red)", "(red)" in caption, red)]
        elif f["kind"] == "loadcurve":
            claims += [
                ("in blue", "in blue" in caption, blue and "baselineP95" in svg),
                ("uncorrected", "uncorrected" in caption, "P95uncorrected" in svg),
                ("SLO target", "SLO target" in caption, "SLOtarget" in svg),
                ("circle met", "circle met" in caption, "stepmet" in svg),
                ("cross missed", "cross missed" in caption, "stepmissed" in svg),
                ("in red", "in red" in caption, red),
            ]
        elif f["kind"] in ("trend", "scatter"):
            claims.append(("in red", "in red" in caption or "(red)" in caption, red))
            marked = "changepoint" in svg or 'class="change"' in f["svg"]
            claims.append(("change point", "change point" in caption, marked))
        elif f["kind"] == "icicle":
            # Grey only when there is no base profile; else boxes coloured by change.
            fills = set(re.findall(r'fill="(#[0-9a-fA-F]{6})"', f["svg"]))
            coloured = bool(fills - {ICICLE_GREY, "#ffffff", "#000000"})
            claims.append(("all grey", "all grey" in caption, not coloured))
        else:
            problems.append(f"a figure of unknown kind {f['kind']!r}: {caption!r}")
        problems += [
            f"{f['kind']} caption {caption!r} {'names' if said else 'omits'} {what!r}"
            for what, said, drawn in claims
            if said != drawn
        ]
    return problems


def _open(browser: Any, report: Path, shot: Path) -> tuple[Any, list[str]]:
    errors: list[str] = []
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(report.as_uri())
    page.wait_for_load_state("load")
    page.screenshot(path=str(shot), full_page=True)
    return page, errors


def test_reports_read_right_at_1280_px(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini("[pytest]\nperfguard_contention_limit = 1.01\n")
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "models.py").write_text(MODELS)
    (pytester.path / ".gitignore").write_text(
        "reports/\n.perfguard/\n__pycache__/\nstdout\nstderr\nrunpytest-*\n"
    )
    run_git(pytester.path, "init", "-q", "-b", "main")
    _commit(pytester.path, 2, 0, "base")
    pytester.runpytest("--perfguard", "--perfguard-save").assert_outcomes(passed=6)
    head = _commit(pytester.path, 12, 7, "six times slower, new weights")
    archived = pytester.runpytest("--perfguard")
    assert archived.ret != 0
    ab = pytester.runpytest("--perfguard", "--perfguard-ab=HEAD~1", "-k", "busy or search")
    assert ab.ret != 0
    reports = pytester.path / "reports"
    comparison = json.loads((reports / f"{head[:12]}-ab" / "comparison.json").read_text())
    verdicts = {v["scenario_id"]: v for v in comparison["verdicts"]}
    assert verdicts["suites/s.yaml::busy[c2]"]["mode"] == "ab"
    assert verdicts["suites/s.yaml::search[slo]"]["mode"] != "ab"  # judged on the archive

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page, errors = _open(browser, reports / head[:12] / "report.html", tmp_path / "a.png")
            assert _layout_problems(page) == []
            assert _caption_problems(page.evaluate(FIGURES_JS)) == []
            outcomes = page.eval_on_selector_all(
                "#scenarios tbody tr", "rows => rows.map(r => r.dataset.outcome)"
            )
            assert {"regression", "accuracy"} <= set(outcomes), outcomes
            onnx = page.locator("section.scenario", has_text="mlp[onnxruntime]").first
            heading = onnx.locator("h3.accuracy").inner_text()
            assert re.search(r"vs reference torch\S*: passed", heading), heading
            assert re.search(r"vs golden outputs of baseline \w+: FAILED", heading), heading
            checks = onnx.locator("table", has_text="checks").first.inner_text()
            assert checks.count("nonfinite_max") == 1, checks
            assert errors == []

            page, errors = _open(
                browser, reports / f"{head[:12]}-ab" / "report.html", tmp_path / "b.png"
            )
            assert _layout_problems(page) == []
            assert _caption_problems(page.evaluate(FIGURES_JS)) == []
            for sid in ("suites/s.yaml::busy[c2]", "suites/s.yaml::search[slo]"):
                row = page.locator("#scenarios tbody tr", has_text=sid).first
                pairs = row.locator("td.pair span").all_inner_texts()
                # Each figure's base side is a figure, as the terminal's change is.
                assert pairs and "-" not in [p.replace("->", "").strip() for p in pairs], pairs
            assert errors == []
        finally:
            browser.close()
