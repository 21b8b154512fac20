"""The pages in a real browser: Debian's chromium, headless, driven by playwright.

Each page is opened from file:// with the network off, and must render every figure (data
traces drawn as SVG) without a console error. Screenshots go to tmp_path, or to
$DASHBOARDS_SCREENSHOT_DIR when set (to look at them). Skipped, saying why, without playwright
(`pip install playwright`; never `playwright install`: the system chromium is used) or without
chromium (`apt-get install chromium`); $CHROMIUM names another binary.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dashboards.pages.ablation import AblationInput, write_ablation_report
from dashboards.pages.compare import write_compare_report
from dashboards.pages.report import write_run_report
from dashboards.pages.sweep import SweepInput, write_sweep_report
from dashboards.pages.techniques import write_techniques_page
from tests.support.browser import (
    CHROMIUM,
    Browser,
    Page,
    browser,
    check_every_figure,
    open_page,
    sync_playwright,
)
from tests.support.dashboards_fakes import A100_ROOFS, make_run

__all__ = ["browser"]  # the fixture (tests.support.browser), imported for the pages' tests

pytestmark = [
    pytest.mark.skipif(
        sync_playwright is None, reason="playwright is not installed (pip install playwright)"
    ),
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)"),
]

# Per figure: traces in its data, main SVGs, trace groups drawn, and whether any drew a shape.


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("DASHBOARDS_SCREENSHOT_DIR")
    folder = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass
class Loaded:
    page: Page
    errors: list[str]


@pytest.fixture(scope="module")
def report(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """A full run's report.html, loaded once for the tests that only look and hover or zoom."""
    run = make_run(tmp_path_factory.mktemp("run"), roofs=A100_ROOFS, slo={"ttft_ms": 60.0})
    page, errors = open_page(browser, write_run_report(run))
    yield Loaded(page, errors)
    page.close()


def test_run_report_renders_every_figure(report: Loaded, shots: Path) -> None:
    check_every_figure(
        report.page,
        {"headline", "latency", "tps", "timeline", "steps", "roofline", "errors", "samples"},
    )
    report.page.screenshot(path=shots / "run-report.png", full_page=True)
    assert report.errors == []


def test_headline_hover_shows_the_definition(report: Loaded) -> None:
    page = report.page
    page.locator("#fig-headline").evaluate("e => e.scrollIntoView({block: 'center'})")
    x, y = page.evaluate(
        """() => { const gd = document.getElementById('fig-headline');
                   const l = gd._fullLayout, r = gd.getBoundingClientRect();
                   const tile = 4;  // TTFT p50
                   return [r.left + l.xaxis._offset + l.xaxis.l2p(gd.data[0].x[tile]),
                           r.top + l.yaxis._offset + l.yaxis.l2p(gd.data[0].y[tile])]; }"""
    )
    page.mouse.move(x, y)
    page.wait_for_selector("#fig-headline .hoverlayer .hovertext")
    text = page.locator("#fig-headline .hoverlayer").text_content() or ""
    assert "TTFT p50" in text and "first content chunk" in text
    assert report.errors == []


_X_RANGES_JS = """() => { const l = document.getElementById('fig-timeline')._fullLayout;
  return Object.keys(l).filter(k => /^xaxis\\d*$/.test(k)).map(k => l[k].range); }"""


def test_zooming_one_timeline_panel_zooms_all(report: Loaded) -> None:
    page = report.page
    before = page.evaluate(_X_RANGES_JS)
    assert len(before) == 7 and all(r == before[0] for r in before)
    # A real mouse drag across 20% of the top panel's width, as a user zooms.
    panel = page.locator("#fig-timeline .nsewdrag").first
    panel.evaluate("e => e.scrollIntoView({block: 'center'})")
    box = panel.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=8)
    page.mouse.up()
    after = page.evaluate(_X_RANGES_JS)
    assert all(r == after[0] for r in after), after
    width_before, width_after = before[0][1] - before[0][0], after[0][1] - after[0][0]
    assert width_after == pytest.approx(0.2 * width_before, rel=0.1)
    assert report.errors == []


def test_bare_run_report_says_what_is_missing(
    browser: Browser, shots: Path, tmp_path: Path
) -> None:
    run = make_run(tmp_path, steps=False, samples=False, summary=False, gpu=False, errors=False)
    page, errors = open_page(browser, write_run_report(run))
    check_every_figure(page, {"headline", "latency", "tps", "timeline"})
    notes = page.locator("header .notes")
    assert notes.is_visible() and "No steps.parquet" in notes.inner_text()
    page.screenshot(path=shots / "bare-report.png", full_page=True)
    assert errors == []
    page.close()


def test_compare_sweep_and_ablation_pages(browser: Browser, shots: Path, tmp_path: Path) -> None:
    runs = [make_run(tmp_path, users=u, requests=6 * u, seed=u, samples=False) for u in (2, 4, 8)]
    pages = {
        "compare": (
            write_compare_report(runs, tmp_path / "compare.html"),
            {"deltas", "latency", "tps", "timeline"},
        ),
        "sweep": (
            write_sweep_report(SweepInput(runs, [2, 4, 8], "users"), tmp_path / "sweep.html"),
            {"tps-ttft", "tradeoff"},
        ),
        "ablation": (
            write_ablation_report(
                AblationInput(
                    runs[:2], ["a=on", "a=off"], extra=[{"x_bytes": 2.0}, {"x_bytes": 1.0}]
                ),
                tmp_path / "ablation.html",
            ),
            {"key", "extra"},
        ),
    }
    for name, (path, expected) in pages.items():
        page, errors = open_page(browser, path)
        check_every_figure(page, expected)
        page.screenshot(path=shots / f"{name}.png", full_page=True)
        assert errors == [], name
        page.close()


# Per figure with an update menu: the on-screen boxes of its toolbar (modebar) and its menus.
_MENU_BOXES_JS = """() => Array.from(document.querySelectorAll('div.figure .js-plotly-plot'))
  .filter(gd => gd.querySelector('g.updatemenu-container'))
  .map(gd => { const box = e => { const r = e.getBoundingClientRect();
                                  return [r.left, r.top, r.right, r.bottom]; };
               return {id: gd.id, modebar: box(gd.querySelector('.modebar')),
                       menus: Array.from(gd.querySelectorAll('g.updatemenu-container'))
                         .map(box)}; })"""


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_menus_are_clear_of_the_toolbar(report: Loaded, shots: Path) -> None:
    page = report.page
    page.locator("#fig-latency").hover()  # the toolbar shows while the pointer is over it
    found = {f["id"]: f for f in page.evaluate(_MENU_BOXES_JS)}
    assert {"fig-latency", "fig-samples"} <= set(found)
    for figure in found.values():
        modebar = figure["modebar"]
        assert modebar[2] > modebar[0] and modebar[3] > modebar[1], figure  # laid out
        assert figure["menus"], figure
        for menu in figure["menus"]:
            assert menu[2] > menu[0] and not _overlap(modebar, menu), figure
    page.locator("#fig-latency").screenshot(path=shots / "latency-menu.png")
    # The roofline names its roofs in drawn text, not only in the figure's data.
    roof_text = page.locator("#fig-roofline .annotation-text").all_text_contents()
    assert any(t.startswith("compute roof") for t in roof_text), roof_text
    assert any(t.startswith("memory roof") for t in roof_text), roof_text
    assert report.errors == []


def _techniques_row(title: str, claimed: list[float | None], measured: float) -> dict[str, Any]:
    return {
        "title": title,
        "claimed": claimed,
        "measured": {"value": measured, "machine_load": {"busy": True, "other_cpu_share": 0.4}},
        "predictions": [{"value": measured * 2}, {"value": None}],
        "text": {"claimed": "~2-4x", "measured": f"{measured:.2f}x", "reason": "agrees",
                 "predicted": [f"{measured * 2:.2f}x", "- (not predicted)"]},
    }  # fmt: skip


def test_techniques_page(browser: Browser, shots: Path, tmp_path: Path) -> None:
    doc = {
        "devices": ["llama-3-8b on a100-80gb", "llama-3-8b on h100-sxm"],
        "hardware": {"cpu": "test cpu", "cpu_count_logical": 2},
        "quick": True,
        "started_utc": "2026-01-01T00:00:00+00:00",
        "rows": [
            _techniques_row("KV cache", [10.0, 100.0], 8.0),
            _techniques_row("Prefix caching", [None, None], 1.5),
        ],
    }
    source = tmp_path / "techniques.json"
    source.write_text(json.dumps(doc))
    page, errors = open_page(browser, write_techniques_page(source, tmp_path / "t.html"))
    check_every_figure(page, {"ratios"})
    rows = page.locator("#table table.data tbody tr")
    assert rows.count() == 2 and "- (not predicted)" in (rows.first.text_content() or "")
    assert "other processes used 40% of the CPU" in page.locator("header .notes").inner_text()
    page.screenshot(path=shots / "techniques.png", full_page=True)
    assert errors == []
    page.close()


# Every header fact's label and value: their on-screen boxes.
# The text's own extent (a Range), not the element's: text overflowing its box is what overlaps.
_FACT_BOXES_JS = """() => Array.from(document.querySelectorAll('.facts > div')).map(div => {
  const text = e => { const r = document.createRange(); r.selectNodeContents(e);
                      const b = r.getBoundingClientRect();
                      return [b.left, b.top, b.right, b.bottom]; };
  const cell = div.getBoundingClientRect();
  return {cell: [cell.left, cell.top, cell.right, cell.bottom],
          dt: text(div.querySelector('dt')), dd: text(div.querySelector('dd'))}; })"""


def test_ablation_header_labels_do_not_overlap_the_paths(
    browser: Browser, shots: Path, tmp_path: Path
) -> None:
    runs = [make_run(tmp_path / f"r{i}", seed=i, samples=False) for i in range(3)]
    settings = [
        "scheduler.max_num_batched_tokens=8192",
        "scheduler.max_num_batched_tokens=2048",
        "kv_cache_dtype=fp8_e4m3,prefix_caching=off",
    ]
    path = write_ablation_report(AblationInput(runs, settings), tmp_path / "ablation.html")
    page, errors = open_page(browser, path)
    facts = page.evaluate(_FACT_BOXES_JS)
    page.screenshot(path=shots / "ablation-header.png")
    assert len(facts) == 3 and errors == []
    boxes = [b for f in facts for b in (f["dt"], f["dd"])]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not _overlap(a, b), (a, b)
    for f in facts:  # each label and path stays in its own cell
        for part in (f["dt"], f["dd"]):
            assert f["cell"][0] - 1 <= part[0] and part[2] <= f["cell"][2] + 1, f
    page.close()


def test_trend_page_draws_each_run_and_a_click_opens_its_report(
    browser: Browser, tmp_path: Path
) -> None:
    from dashboards.pages.trend import build_trend_page, write_trend_page

    for i in range(10):  # each run's report, for the click to open
        (tmp_path / f"run-{i}").mkdir()
        (tmp_path / f"run-{i}" / "report.html").write_text(f"<title>run {i}</title>")
    runs = [
        {
            "run_id": f"run-{i}",
            "path": str(tmp_path / f"run-{i}"),
            "valid": i != 3,
            "usable": True,
            "started_utc": f"2026-01-01 00:{i:02d}:00",
            "value": 10.0 + (i > 5),
            "git_commit": "a" if i <= 5 else "b",
        }
        for i in range(10)
    ]
    change = {
        "metric": "tpot_ms.p50",
        "change_pct": 10.0,
        "pvalue": 1e-5,
        "first_run": runs[6],
        "last_run_before": runs[5],
    }
    path = write_trend_page(
        build_trend_page(runs, "tpot_ms.p50", "git_commit", [change]), tmp_path / "trend.html"
    )
    page, errors = open_page(browser, path)
    figures = check_every_figure(page, {"trend"})
    assert figures[0]["traces"] == 3  # commit a, commit b, the invalid run apart
    point = page.evaluate(
        """() => { const gd = document.getElementById('fig-trend');
                   const l = gd._fullLayout, r = gd.getBoundingClientRect();
                   return [r.left + l.xaxis._offset + l.xaxis.l2p(l.xaxis.d2l(gd.data[1].x[0])),
                           r.top + l.yaxis._offset + l.yaxis.l2p(gd.data[1].y[0])]; }"""
    )
    with page.expect_popup() as popup:
        page.mouse.click(*point)
    assert popup.value.url.endswith("/run-6/report.html")
    assert errors == []
    page.close()


def test_frontier_page_of_two_configurations_draws_both(browser: Browser, tmp_path: Path) -> None:
    from dashboards.pages.frontier import build_frontier_page, write_frontier_page

    def points(scale: float) -> list[dict[str, Any]]:
        speeds = [(40.0, 30.0), (20.0, 90.0), (8.0, 150.0), (10.0, 100.0)]
        return [{"run_id": f"run-{scale}-{i}", "per_user_tok_s": x, "per": "CPU core",
                 "tok_s_per_unit": y * scale, "on_frontier": i < 3}
                for i, (x, y) in enumerate(speeds)]  # fmt: skip

    configs = {"engine A": points(1.0), "engine B": points(1.4)}
    path = write_frontier_page(build_frontier_page(configs), tmp_path / "frontier.html")
    page, errors = open_page(browser, path)
    (figure,) = check_every_figure(page, {"frontier"})
    assert figure["traces"] == 4  # per configuration: its runs, its frontier
    lines = page.evaluate(
        "() => document.getElementById('fig-frontier').data"
        ".filter(t => t.name.endsWith('frontier')).map(t => t.x.length)"
    )
    assert lines == [3, 3]
    assert errors == []
    page.close()
