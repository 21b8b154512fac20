"""Figure builders on run folders the tests make: what each figure holds, and what it says
when the run did not record its data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dashboards.definitions import DEFINITIONS
from dashboards.figures.errors import errors_figure
from dashboards.figures.headline import headline_figure, headline_tiles, utilization_missing
from dashboards.figures.latency import latency_cdf_figure
from dashboards.figures.samples_figure import samples_figure
from dashboards.figures.steps import MAX_RAW_STEPS, steps_figure
from dashboards.figures.timeline import timeline_figure
from dashboards.figures.user_tps import per_user_tps_figure, user_ranking
from dashboards.runview import RunView, load_run_view
from tests.support.dashboards_fakes import NASTY_ERROR, make_run


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> RunView:
    run = make_run(
        tmp_path_factory.mktemp("full"),
        slo={"ttft_ms": 60.0, "tpot_ms": 12.0},
        attribution={"mfu": 0.412, "mbu": 0.733},
    )
    return load_run_view(run)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> RunView:
    run = make_run(
        tmp_path_factory.mktemp("bare"), steps=False, samples=False, gpu=False, errors=False, seed=3
    )
    return load_run_view(run)


def test_headline_tiles_carry_the_summary_and_their_definitions(full: RunView) -> None:
    tiles = {t.key: t for t in headline_tiles(full.summary)}
    tput = full.summary["throughput"]["output_tok_s"]
    assert tiles["output_tok_s"].value.startswith(f"{tput:,.0f}")
    assert "meet ttft_ms ≤ 60, tpot_ms ≤ 12" in tiles["goodput"].detail
    assert tiles["mfu"].value == "41.2%" and tiles["mbu"].value == "73.3%"
    assert tiles["error_rate"].detail.startswith("2 failed · 1 cancelled")
    fig = headline_figure(full.summary)
    hover = " ".join(fig.data[0].hovertext)
    # Every tile's hover holds its definition (words from docs/metrics.md's definitions).
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "per_user_tps", "goodput"):
        assert DEFINITIONS[key].text.split()[0] in hover
    assert "first content chunk − sent" in hover
    assert len(fig.data[0].x) == len(tiles)


def test_headline_says_why_mfu_and_mbu_are_missing() -> None:
    why = "no roofs: no calibration of this CPU: run `bench calibrate` for a CPU run's roofs"
    tiles = {t.key: t for t in headline_tiles({"attribution": {"available": True, "mfu": None,
                                                               "mfu_reason": why}})}  # fmt: skip
    assert tiles["mfu"].value == tiles["mbu"].value == "–"
    assert tiles["mfu"].detail == "no roofs" and tiles["mbu"].why == why
    fig = headline_figure({"attribution": {"available": True, "mfu": None, "mfu_reason": why}})
    assert "no calibration of this CPU" in " ".join(fig.data[0].hovertext)
    remote = {"available": False, "reason": "no steps.parquet: the engine records no steps"}
    assert (
        utilization_missing({"attribution": remote}) == f"no time attribution: {remote['reason']}"
    )
    assert utilization_missing({}) is None


def test_headline_of_an_empty_summary_shows_dashes() -> None:
    tiles = headline_tiles({})
    assert tiles[0].value == "– tok/s"
    assert any(t.key == "goodput" and t.value == "no SLO" for t in tiles)


def test_latency_cdfs_mark_the_summary_percentiles(full: RunView) -> None:
    fig = latency_cdf_figure([full])
    marks = [t for t in fig.data if t.mode == "markers+text"]
    assert len(marks) == 4
    ttft = full.summary["ttft_ms"]
    assert list(marks[0].x) == [ttft["p50"], ttft["p90"], ttft["p99"]]
    curves = [t for t in fig.data if t.mode == "lines"]
    assert all(np.asarray(c.y)[-1] == 1.0 for c in curves)
    assert max(np.asarray(curves[0].x)) == pytest.approx(ttft["max"])
    # The log/linear switch changes all four x axes at once.
    (menu,) = fig.layout.updatemenus
    assert set(menu.buttons[1].args[0]) == {
        "xaxis.type",
        "xaxis2.type",
        "xaxis3.type",
        "xaxis4.type",
    }


def test_overlays_give_each_run_a_color_and_a_legend_entry(full: RunView, bare: RunView) -> None:
    fig = latency_cdf_figure([full, bare])
    legend = [t.name for t in fig.data if t.showlegend]
    assert legend == [full.label, bare.label]
    assert fig.layout.showlegend
    tps = per_user_tps_figure([full, bare])
    assert {t.legendgroup for t in tps.data} == {full.label, bare.label}


def test_user_ranking_is_fastest_first(full: RunView) -> None:
    users, mean_tps, counts = user_ranking(full)
    assert len(users) == 8 and counts.sum() == full.requests["measured"].sum()
    assert np.all(np.diff(mean_tps) <= 0)


def test_user_ranking_draws_at_most_its_points_keeping_both_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashboards.figures import user_tps

    view = load_run_view(make_run(tmp_path, users=40, requests=200, steps=False, samples=False))
    users, mean_tps, _ = user_ranking(view)
    assert users.size == 40
    monkeypatch.setattr(user_tps, "RANKING_POINTS", 9)
    (ranking,) = [t for t in per_user_tps_figure([view]).data if t.xaxis == "x2"]
    assert len(ranking.x) == 9 and ranking.x[0] == 1 and ranking.x[-1] == 40
    assert list(ranking.y) == [mean_tps[r - 1] for r in ranking.x]
    assert "of 40 users (9 ranks drawn)" in ranking.hovertemplate


def test_timeline_bins_every_line_including_kv(tmp_path: Path) -> None:
    view = load_run_view(make_run(tmp_path, requests=1000, samples=False))
    fig, _ = timeline_figure([view])
    kv = [t for t in fig.data if str(t.name).startswith("KV blocks used")]
    assert kv and len(view.steps) > len(kv[0].x)
    # Each line has one value a bin, never one a step against the bins' centers.
    assert all(len(t.x) == len(t.y) for t in fig.data if t.y is not None and t.x is not None)


def test_timeline_shares_one_x_axis_and_names_missing_panels(full: RunView, bare: RunView) -> None:
    fig, missing = timeline_figure([full])
    assert missing == []
    axes = [k for k in fig.layout if k.startswith("xaxis")]
    assert len(axes) == 7
    # Shared x: every axis matches one (the bottom one), so zooming one panel zooms them all.
    matches = {a: fig.layout[a].matches for a in axes}
    (base,) = [a for a, m in matches.items() if m is None]
    assert all(m == "x" + base.removeprefix("xaxis") for a, m in matches.items() if a != base)
    names = {t.name for t in fig.data}
    assert {
        "in flight (client)",
        "running (engine)",
        "output tok/s",
        "KV blocks used (of 512)",
        "GPU util [gpu=0]",
        "DRAM GB/s [gpu=0]",
        "Power W [gpu=0]",
        "read delay, mean",
        "read delay, max",
    } <= names
    # Bytes/s wins over % of peak: one unit per panel.
    assert not any(n.startswith("DRAM bandwidth used") for n in names)
    bare_fig, bare_missing = timeline_figure([bare])
    assert "GPU power" in bare_missing and "KV cache occupancy" in bare_missing
    assert len([k for k in bare_fig.layout if k.startswith("xaxis")]) == 3


def test_timeline_read_delay_is_read_s_minus_the_kernel_stamp(full: RunView) -> None:
    fig, _ = timeline_figure([full])
    (worst,) = [t for t in fig.data if t.name == "read delay, max"]
    (mean,) = [t for t in fig.data if t.name == "read delay, mean"]
    drawn = np.asarray(worst.y, dtype=np.float64)
    # The fake reads each chunk 0.2 to 1.0 ms after its stamp.
    assert np.nanmax(drawn) == pytest.approx(1.0) and np.nanmin(mean.y) >= 0.2 - 1e-9


def test_timeline_in_flight_matches_the_requests(full: RunView) -> None:
    fig, _ = timeline_figure([full])
    (in_flight,) = [t for t in fig.data if t.name == "in flight (client)"]
    # Eight closed-loop users: never more than eight in flight, eight most of the time.
    values = np.asarray(in_flight.y)
    assert values.max() <= 8.0 + 1e-9 and np.median(values) > 7.0


def test_steps_figure_draws_every_step_or_bins_long_runs(full: RunView, tmp_path: Path) -> None:
    assert full.steps is not None
    fig = steps_figure(full.steps)
    assert len(fig.data[0].x) == len(full.steps)
    assert "one point per step" in fig.layout.title.text
    long_run = load_run_view(make_run(tmp_path, requests=400, samples=False, step_s=0.001))
    assert long_run.steps is not None and len(long_run.steps) > MAX_RAW_STEPS
    binned = steps_figure(long_run.steps)
    assert len(binned.data[0].x) <= 600 and "means over" in binned.layout.title.text


def test_errors_figure_counts_kinds_and_escapes_messages(full: RunView, bare: RunView) -> None:
    fig = errors_figure(full)
    assert fig is not None
    counts = dict(zip(fig.data[0].y, fig.data[0].x, strict=True))
    assert sum(counts.values()) == 3
    labels = " ".join(counts)
    assert "<script>" not in labels and "&lt;script&gt;" in labels
    assert "HTTP 500" in labels and "connection refused" in labels
    assert {t.name for t in fig.data[1:]} == {"error", "cancelled"}
    assert NASTY_ERROR not in fig.to_json()
    assert errors_figure(bare) is None


def test_samples_figure_offers_every_series(full: RunView, bare: RunView) -> None:
    fig = samples_figure(full)
    assert fig is not None
    recorded = full.samples.groupby(["source", "name", "labels"]).ngroups
    assert len(fig.data) == recorded == len(fig.layout.updatemenus[0].buttons)
    assert [t.visible for t in fig.data].count(True) == 1
    assert samples_figure(bare) is None
