"""`bench ab`'s page: the per-pair ratios with their interval and allowance, then the compare
page of the first pair, from real run folders (synthetic requests, the real writers)."""

from __future__ import annotations

from pathlib import Path

from dashboards.pages.ab import PairRatios, build_ab_page, pair_ratios_figure, write_ab_page
from dashboards.pages.page import render_page
from tests.support.gate_fakes import write_fake_run

TPOT = PairRatios("tpot_ms.mean", "ms", False, (1.31, 1.28, 1.35), 31.3, 24.0, 39.1, 10.0, "fail")
THROUGHPUT = PairRatios(
    "throughput.output_tok_s", "tok/s", True, (0.76, 0.79), -22.5, None, None, 10.0, "inconclusive"
)


def test_the_figure_draws_each_pair_the_band_and_the_allowance_on_the_worse_side() -> None:
    fig = pair_ratios_figure([TPOT, THROUGHPUT])
    assert fig is not None
    points = [t for t in fig.data if t.mode == "markers+lines"]
    assert [list(t.y) for t in points] == [
        [100 * (r - 1) for r in TPOT.ratios],
        [100 * (r - 1) for r in THROUGHPUT.ratios],
    ]
    limits = [t for t in fig.data if t.name.endswith("allowed")]
    # A rise for lower-is-better TPOT, a drop for throughput.
    assert [list(t.y) for t in limits] == [[10.0, 10.0], [-10.0, -10.0]]
    bands = [t for t in fig.data if t.name.endswith(" CI")]
    assert len(bands) == 1 and min(bands[0].y) == 24.0 and max(bands[0].y) == 39.1
    assert pair_ratios_figure([]) is None


def test_the_page_opens_with_the_verdict_and_holds_the_first_pairs_comparison(
    tmp_path: Path,
) -> None:
    a = [write_fake_run(tmp_path / "A", seed=i) for i in range(3)]
    b = [write_fake_run(tmp_path / "B", seed=10 + i, slowdown=1.3) for i in range(3)]
    sides = ("A: this checkout", "B: this checkout + step_delay_ms=2.0")
    page = build_ab_page("fail", sides, [TPOT], a, b)
    assert page.title == "A/B: fail"
    assert [s.key for s in page.sections][:2] == ["pairs", "deltas"]
    html = render_page(page)
    assert "Verdict: fail, over 3 pair(s)" in html
    assert "1.310, 1.280, 1.350" in html and "rise &lt;= 10%" in html
    assert "A (pair 1)" in html and "B (pair 1)" in html
    assert "step_delay_ms=2.0" in html
    path = write_ab_page(tmp_path / "ab.html", "fail", sides, [TPOT], a, b)
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_the_page_says_why_each_inconclusive_verdict_is_so(tmp_path: Path) -> None:
    a = [write_fake_run(tmp_path / "A", seed=i) for i in range(2)]
    b = [write_fake_run(tmp_path / "B", seed=10 + i) for i in range(2)]
    busy = PairRatios(
        "ttft_ms.p99", "ms", False, (1.0, 1.01), 0.5, -1.0, 2.0, 10.0, "inconclusive",
        "not judged (busy machine); by the CI alone: the whole 95% CI is within rise <= 10%",
    )  # fmt: skip
    few = PairRatios(
        "tpot_ms.p50", "ms", False, (1.0, 1.0), None, None, None, 10.0, "inconclusive",
        "too few samples: the side A has 12 requests with a tpot_ms value, at least 20 needed",
    )  # fmt: skip
    passed = PairRatios("e2el_ms.p50", "ms", False, (1.0, 1.0), 0.0, -1, 1, 10.0, "pass", "in")
    sides = ("A: this checkout", "B: this checkout + step_delay_ms=2.0")
    html = render_page(build_ab_page("inconclusive", sides, [busy, few, passed], a, b))
    assert "not judged (busy machine)" in html and "the side A has 12 requests" in html
    assert "<th>why</th>" in html
    section = html.split('<section id="pairs">')[1].split("</section>")[0]
    assert "baseline" not in section and "candidate" not in section
