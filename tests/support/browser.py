"""A real headless chromium driven by playwright, for the tests of the pages.

Debian's chromium (or $CHROMIUM), never `playwright install`'s; each page is opened from
file:// with every network request refused, and its console errors are collected. Where
playwright or chromium is missing, :data:`BROWSER_MISSING` says why (the tests skip with it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # BROWSER_MISSING says so
    sync_playwright = None  # type: ignore[assignment]
    Browser = Page = Any  # type: ignore[misc,assignment]

__all__ = [
    "BROWSER_MISSING",
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "FIGURES_JS",
    "Browser",
    "Page",
    "browser",
    "check_every_figure",
    "evaluate_figure",
    "open_page",
    "sync_playwright",
]

CHROMIUM = (
    os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
)
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BROWSER_MISSING: str | None = (
    "playwright is not installed (pip install playwright)"
    if sync_playwright is None
    else "no chromium on PATH (apt-get install chromium)"
    if CHROMIUM is None
    else None
)


def open_page(browser: Browser, path: Path) -> tuple[Page, list[str]]:
    """``path`` loaded from file:// with every network request refused; returns the console
    errors (and uncaught exceptions) collected so far and from then on."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("http*://**", lambda route: route.abort())
    page.goto(path.resolve().as_uri(), wait_until="load")
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('div.figure .js-plotly-plot'))"
        ".every(gd => gd._fullLayout)"
    )
    return page, errors


FIGURES_JS = """() => Array.from(document.querySelectorAll('div.figure')).map(box => {
  const gd = box.querySelector('.js-plotly-plot');
  return {key: box.dataset.figure, rendered: !!(gd && gd._fullLayout),
          traces: gd && gd.data ? gd.data.length : 0,
          svgs: gd ? gd.querySelectorAll('svg.main-svg').length : 0,
          drawn: gd ? gd.querySelectorAll('g.trace').length : 0,
          shapes: gd ? Array.from(gd.querySelectorAll('g.trace path, g.trace text'))
            .filter(e => (e.getAttribute('d') || e.textContent || '').length > 3).length : 0};
})"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert sync_playwright is not None and CHROMIUM is not None
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def check_every_figure(page: Page, expected: set[str]) -> list[dict[str, Any]]:
    figures = page.evaluate(FIGURES_JS)
    assert {f["key"] for f in figures} == expected
    for f in figures:
        assert f["rendered"] and f["traces"] > 0 and f["svgs"] >= 1, f
        assert f["drawn"] > 0 and f["shapes"] > 0, f
    return figures


def evaluate_figure(path: Path, figure_id: str, script: str) -> Any:
    """``script``, a JavaScript function of the figure's plotly div (``gd => ...``), evaluated
    in headless chromium on the page at ``path`` once every figure is drawn; the page must
    raise no error. Skips the calling test, saying why, where there is no browser, so a test
    checks the page's text before it calls this."""
    if BROWSER_MISSING is not None:
        pytest.skip(f"the page is not opened in a browser: {BROWSER_MISSING}")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page, errors = open_page(launched, path)
        result = page.evaluate(f"() => ({script})(document.getElementById('{figure_id}'))")
        launched.close()
    assert errors == []
    return result
