"""The report in a real headless Chromium (Debian's, driven by Playwright): it loads
with no console errors and no network, the failing test's section shows its
kernels and their source, the failed-only filter and links to tests work.
scripts/install-browser.sh installs the browser; in CI (CI set) a missing browser
fails the test rather than skipping it."""
import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "reports" / "screenshots"


def _need(ok: bool, why: str) -> None:
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"{why} (run scripts/install-browser.sh)")
        pytest.skip(f"{why}: run scripts/install-browser.sh")


@pytest.fixture
def page(tmp_path):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    _need(sync_playwright is not None, "the playwright package is not installed")
    _need(shutil.which(CHROMIUM) is not None, f"{CHROMIUM} is not installed")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, args=FLAGS, headless=True,
            viewport={"width": 1440, "height": 900}, offline=True)
        page = ctx.pages[0] if ctx.pages else ctx.new_page()
        page.problems = []
        page.on("console", lambda m: page.problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
        page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "about:"))
                else page.problems.append(f"request: {r.url}"))
        try:
            yield page
        finally:
            ctx.close()


def test_report_in_chromium(page, tiny_run):
    doc = tiny_run["doc"]
    failing = next(t for t in doc["tests"] if t["nodeid"] == tiny_run["failing"])
    kernel_names = [k["name"] for g in failing["graphs"] for k in g["kernels"]]
    page.goto(tiny_run["html"].as_uri())
    page.wait_for_load_state("load")

    # the failing test: open, its verdict, kernels (in the table and the picture) and their source
    section = page.locator(f'details.test[data-nodeid="{tiny_run["failing"]}"]')
    assert section.get_attribute("open") is not None
    assert section.locator("tr.failed td.marker").inner_text() == "expect_kernels"
    assert section.locator("table.kernels td.kname a").all_inner_texts() == kernel_names
    assert section.locator("svg[aria-label^='fusion groups'] g.node.kernel").count() >= len(kernel_names)
    sources = section.locator("details.kernel > pre.src")
    assert all(name in sources.nth(i).inner_text() for i, name in enumerate(kernel_names))
    assert sources.first.is_visible()
    assert section.locator("ul.why li").count() >= 1
    page.screenshot(path=str(_screenshot("report-top.png")))
    section.screenshot(path=str(_screenshot("report-failing-test.png")))

    # failed only
    passing = page.locator(f'details.test[data-nodeid="{tiny_run["passing"]}"]')
    assert passing.is_visible()
    page.click("#filter-failed")
    assert not passing.is_visible() and section.is_visible()
    assert page.locator("details.test:visible").count() == doc["summary"]["failed"] + doc["summary"]["errors"]
    assert page.locator("#shown").inner_text().startswith(f"{doc['summary']['failed']} of ")

    # following a link to a test the filter hides: the filter gives way and the section opens
    uid = passing.get_attribute("id")
    assert passing.get_attribute("open") is None
    page.evaluate(f"location.hash = '#{uid}'")
    page.wait_for_function(f"document.getElementById('{uid}').open")
    assert passing.is_visible()
    assert page.evaluate("location.hash") == f"#{uid}"

    assert page.problems == []


def _screenshot(name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / name
