"""A real headless chromium driven by playwright, for the tests of the pages.

Debian's chromium (or $CHROMIUM), never `playwright install`'s; each page is opened from
file:// with every network request refused, and its console errors are collected. Where
playwright or chromium is missing, :data:`BROWSER_MISSING` says why (the tests skip with it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # BROWSER_MISSING says so
    sync_playwright = None  # type: ignore[assignment]
    Browser = Page = Any  # type: ignore[misc,assignment]

__all__ = [
    "BROWSER_MISSING",
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "Browser",
    "Page",
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
