"""A real report from a real run, opened in headless Chromium (Debian's package).

The run saves a baseline, makes the model 3x slower and runs again, so the
report holds a regression. In the browser: no console error, no request other
than the file itself, and the regression row visible; a screenshot is kept.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.test_gate_e2e import Repo

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

# Flags for a closed network: no background traffic to Google's services.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


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
