"""The HTML files: self-contained (plotly.js once, nothing fetched), escaped, one per run,
comparison, sweep and ablation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dashboards.pages.ablation import AblationInput, ablation_input_from_json, write_ablation_report
from dashboards.pages.compare import unique_labels, write_compare_report
from dashboards.pages.deltas import delta_rows
from dashboards.pages.page import Page, Section, render_page
from dashboards.pages.report import REPORT_HTML, write_run_report
from dashboards.pages.sweep import SweepInput, knee_index, write_sweep_report
from tests.support.dashboards_fakes import A100_ROOFS, NASTY_ERROR, make_run

# A string from the plotly.js bundle's header: counts how many copies a page embeds.
PLOTLY_JS_MARKER = "plotly.js v"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("runs")
    return [make_run(root, users=u, requests=8 * u, seed=u, samples=u == 4) for u in (2, 4, 8)]


def assert_self_contained(html: str) -> None:
    assert html.count(PLOTLY_JS_MARKER) == 1
    # Nothing is loaded from elsewhere: no external scripts, stylesheets, fonts or images.
    assert not re.search(r"<script[^>]+src=", html)
    assert not re.search(r"<link[^>]+href=", html)
    assert "cdn.plot.ly" not in html.split("</script>", 2)[-1]


def test_run_report_is_one_offline_file_with_every_section(tmp_path: Path) -> None:
    run = make_run(tmp_path, roofs=A100_ROOFS)
    path = write_run_report(run)
    assert path == run / REPORT_HTML
    html = path.read_text(encoding="utf-8")
    assert_self_contained(html)
    for key in ("headline", "latency", "tps", "timeline", "steps", "roofline", "errors", "samples"):
        assert f'data-figure="{key}"' in html, key
    assert "What this run did not record" not in html
    # A hostile error message is escaped everywhere (figure JSON and page alike).
    assert NASTY_ERROR not in html and "<script>alert" not in html
    assert len(html) < 6_000_000


def test_a_bare_run_says_plainly_what_it_lacks(tmp_path: Path) -> None:
    run = make_run(tmp_path, steps=False, samples=False, summary=False, gpu=False, errors=False)
    html = write_run_report(run).read_text(encoding="utf-8")
    assert_self_contained(html)
    assert "What this run did not record" in html
    for said in (
        "No steps.parquet",
        "No samples.parquet",
        "No GPU",
        "summary.json is missing",
        "No request failed or was cancelled",
        "Panels without data in this run",
    ):
        assert said in html, said
    assert 'data-figure="steps"' not in html and 'data-figure="timeline"' in html


def test_an_unusable_run_says_why_under_its_headline_and_its_causes_under_errors(
    tmp_path: Path,
) -> None:
    # 1 failure in 12 requests: 8.3 %, above the default 5 %; 2 in 60 (3.3 %) are below it.
    html = write_run_report(make_run(tmp_path / "bad", requests=12)).read_text(encoding="utf-8")
    assert "run not usable: 1 of 12 requests failed (8.3%), above --max-error-rate 0.05" in html
    assert "1 (8.3% of requests): HTTP 500: " in html
    assert NASTY_ERROR not in html and "<script>alert" not in html
    good = write_run_report(make_run(tmp_path / "good", requests=60)).read_text(encoding="utf-8")
    assert "not usable" not in good


def test_compare_page_overlays_runs_and_tabulates_deltas(runs: list[Path], tmp_path: Path) -> None:
    out = write_compare_report(runs[:2], tmp_path / "c.html", labels=["two", "four"])
    html = out.read_text(encoding="utf-8")
    assert_self_contained(html)
    assert "<th>Δ four</th>" in html
    for key in ("deltas", "latency", "tps", "timeline"):
        assert f'data-figure="{key}"' in html
    assert 'class="better"' in html or 'class="worse"' in html
    with pytest.raises(ValueError, match="at least two"):
        write_compare_report(runs[:1], tmp_path / "x.html")


def test_deltas_mark_direction_by_what_is_better() -> None:
    base = {"throughput": {"output_tok_s": 100.0}, "ttft_ms": {"p50": 50.0}}
    other = {"throughput": {"output_tok_s": 150.0}, "ttft_ms": {"p50": 75.0}}
    rows = {r.metric.label: r for r in delta_rows([base, other])}
    assert set(rows) == {"Output throughput", "TTFT p50"}
    assert rows["Output throughput"].change_pct[1] == pytest.approx(50.0)
    assert rows["Output throughput"].verdict(1) == "better"
    assert rows["TTFT p50"].verdict(1) == "worse"
    assert delta_rows([{"ttft_ms": {"p50": 0.0}}, base])[0].change_pct[1] is None


def test_unique_labels() -> None:
    paths = [Path("a/run"), Path("b/run"), Path("c/other")]
    assert unique_labels(paths) == ["run", "run #2", "other"]
    with pytest.raises(ValueError, match="one per run"):
        unique_labels(paths, ["x"])


def test_knee_is_the_point_of_highest_throughput_per_latency() -> None:
    # Throughput saturates at 1000 tok/s while latency keeps growing: the knee is where it bends.
    throughput = [100.0, 400.0, 800.0, 950.0, 1000.0]
    latency = [100.0, 110.0, 130.0, 300.0, 900.0]
    assert knee_index(throughput, latency) == 2
    assert knee_index([None, 5.0], [1.0, None]) is None


def test_sweep_page(runs: list[Path], tmp_path: Path) -> None:
    sweep = SweepInput(runs=list(reversed(runs)), values=[8, 4, 2], parameter="users")
    html = write_sweep_report(sweep, tmp_path / "s.html").read_text(encoding="utf-8")
    assert_self_contained(html)
    assert 'data-figure="tps-ttft"' in html and 'data-figure="tradeoff"' in html
    assert "knee: users =" in html
    with pytest.raises(ValueError, match="one value per run"):
        SweepInput(runs=runs, values=[1], parameter="users")


def test_ablation_page(runs: list[Path], tmp_path: Path) -> None:
    ablation = AblationInput(
        runs=runs[:2],
        settings=["batching=continuous", "batching=static"],
        extra=[{"weight_bytes": 2e6, "prefix_hit_rate": 0.5}, {"weight_bytes": 1e6}],
    )
    html = write_ablation_report(ablation, tmp_path / "a.html").read_text(encoding="utf-8")
    assert_self_contained(html)
    assert 'data-figure="key"' in html and 'data-figure="extra"' in html
    assert "×0.50" in html  # weight bytes halved
    with pytest.raises(ValueError, match="one setting label per run"):
        AblationInput(runs=runs, settings=["a"])


def test_ablation_page_from_bench_ablates_json(runs: list[Path], tmp_path: Path) -> None:
    doc = {
        "switches": {"batching": ["continuous", "static"]},
        "columns": [
            {"key": "output_tok_s", "title": "out tok/s", "unit": "tok/s"},
            {"key": "weight_bytes", "title": "weight bytes", "unit": "bytes"},
            {"key": "acceptance_rate", "title": "spec acceptance", "unit": "fraction"},
        ],
        "rows": [
            {
                "label": "batching=continuous",
                "run": str(runs[0]),
                "output_tok_s": 9.0,
                "weight_bytes": 4e6,
                "acceptance_rate": None,
            },
            {
                "label": "batching=static",
                "run": str(runs[1]),
                "output_tok_s": 3.0,
                "weight_bytes": 4e6,
                "acceptance_rate": None,
            },
        ],
    }
    path = tmp_path / "ablation.json"
    path.write_text(json.dumps(doc))
    ablation = ablation_input_from_json(path)
    assert ablation.settings == ["batching=continuous", "batching=static"]
    assert ablation.title == "Ablation: batching=continuous/static"
    assert ablation.extra == [{"weight bytes (bytes)": 4e6, "spec acceptance (fraction)": None}] * 2
    html = write_ablation_report(ablation, tmp_path / "a.html").read_text(encoding="utf-8")
    assert "weight bytes (bytes)" in html and "spec acceptance" not in html
    with pytest.raises(ValueError, match=r"not an ablation\.json"):
        ablation_input_from_json(tmp_path / "a.html")


def test_page_escapes_everything_it_is_given() -> None:
    page = Page(
        title="<b>t</b>",
        facts=[("k", "<i>")],
        notes=["<x>"],
        sections=[Section("s", "<h>", intro="a & b", notes=["<n>"])],
    )
    html = render_page(page)
    body = html.split("</head>", 1)[1]
    assert "<b>t</b>" not in body and "&lt;b&gt;t&lt;/b&gt;" in body
    assert "<i>" not in body and "<x>" not in body and "<n>" not in body
    assert "a &amp; b" in body


def test_run_sections_are_one_table_of_rows_each_with_a_builder() -> None:
    from dashboards.pages.report import RUN_SECTIONS

    keys = [row.key for row in RUN_SECTIONS]
    assert keys == [
        "headline", "endpoints", "models", "latency", "tps", "reasoning", "sessions", "images",
        "timeline", "steps", "roofline", "errors", "validity", "samples",
    ]  # fmt: skip
    assert all(callable(row.build) and callable(row.applies) for row in RUN_SECTIONS)


def test_not_recorded_here_lists_only_what_was_not_recorded(tmp_path: Path) -> None:
    good = write_run_report(make_run(tmp_path / "good", errors=False)).read_text(encoding="utf-8")
    # That nothing failed is a finding, not a gap in the records.
    boxes = good.split("<h3>Not recorded here</h3>")[1:]
    assert all("No request failed or was cancelled" not in box.split("</div>")[0] for box in boxes)
    assert '<ul class="findings"><li>No request failed or was cancelled.</li>' in good
    bad = write_run_report(make_run(tmp_path / "bad", requests=12)).read_text(encoding="utf-8")
    boxes = bad.split("<h3>Not recorded here</h3>")[1:]
    assert all("not usable" not in box.split("</div>")[0] for box in boxes)
    assert "run not usable" in bad


def test_ablation_page_carries_the_busy_machine_banner(tmp_path: Path) -> None:
    import json

    quiet, busy = make_run(tmp_path / "q"), make_run(tmp_path / "b", seed=1)
    summary = json.loads((busy / "summary.json").read_text())
    summary["machine_load"] = {"busy": True, "message": "other processes used 61% of the CPU"}
    (busy / "summary.json").write_text(json.dumps(summary))
    ablation = AblationInput(runs=[quiet, busy], settings=["quiet", "loaded"])
    html = write_ablation_report(ablation, tmp_path / "a.html").read_text(encoding="utf-8")
    assert '<p class="banner">loaded: busy machine: other processes used 61% of the CPU</p>' in html
    assert "quiet: busy machine" not in html
