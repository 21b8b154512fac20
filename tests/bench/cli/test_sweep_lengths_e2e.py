"""`bench sweep --lengths` end to end: real runs of the reference engine at two users counts and
two length pairs, then `bench frontier` over the sweep (one series per pair, the terminal listing
each series' frontier points) and the sweep's own frontier page in headless chromium."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.browser import (
    CHROMIUM,
    browser,
    check_every_figure,
    open_page,
    sync_playwright,
)
from tests.support.paths import REPO_ROOT

__all__ = ["browser"]  # the fixture, imported for the page's test

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SCENARIO = """
name = "lengths"
seed = 0
users = 1
num_requests = 4
api = "completions"
ignore_eos = true
temperature = 0.0
[input_len]
kind = "uniform"
low = 8
high = 64
[output_len]
kind = "uniform"
low = 2
high = 16
[engine]
preset = "tiny"
dtype = "float32"
num_threads = 1
"""
PAIRS = {"16:8": 8, "40:4": 4}


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=800,
        cwd=REPO_ROOT, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep")
    (tmp / "s.toml").write_text(SCENARIO)
    proc = bench(
        "sweep", "--scenario", str(tmp / "s.toml"), "--users", "1,2", "--lengths",
        ",".join(PAIRS), "--requests-per-user", "4", "--runs-dir", str(tmp / "runs"),
        "--no-live", "--no-probes", "--no-calibrate", "--no-history",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "in:out" in proc.stdout
    (folder,) = (tmp / "runs").glob("*-sweep-lengths-users")
    return folder


def test_each_point_runs_at_its_lengths(sweep_folder: Path) -> None:
    body = json.loads((sweep_folder / "sweep.json").read_text())
    shapes = [(p["lengths"], p["value"]) for p in body["points"]]
    assert shapes == [([16, 8], 1), ([16, 8], 2), ([40, 4], 1), ([40, 4], 2)]
    for point in body["points"]:
        folder = Path(point["folder"])
        scenario = json.loads((folder / "run.json").read_text())["scenario"]
        assert scenario["input_len"] == {"kind": "fixed", "value": point["lengths"][0]}
        requests = pd.read_parquet(folder / "requests.parquet")
        assert (requests["output_tokens"] == point["lengths"][1]).all()
    pages = {p.name for p in sweep_folder.glob("report*.html")}
    assert pages == {"report.html", "report-in16-out8.html", "report-in40-out4.html"}


def test_bench_frontier_draws_one_series_per_pair(sweep_folder: Path, tmp_path: Path) -> None:
    page = tmp_path / "frontier.html"
    proc = bench("frontier", str(sweep_folder), "--label", "tiny", "-o", str(page))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    assert "Pareto frontier points" in out
    for pair in PAIRS:
        assert f"tiny {pair}" in out
        assert f"tiny {pair}: frontier" in page.read_text()


@pytest.mark.skipif(sync_playwright is None or CHROMIUM is None, reason="no playwright/chromium")
def test_the_sweeps_frontier_page_in_a_browser(browser: Any, sweep_folder: Path) -> None:
    page, errors = open_page(browser, sweep_folder / "report.html")
    (figure,) = check_every_figure(page, {"frontier"})
    assert figure["traces"] == 2 * len(PAIRS)  # per pair: its runs, its frontier
    names = page.evaluate("() => document.getElementById('fig-frontier').data.map(t => t.name)")
    assert {f"{pair} tokens: frontier" for pair in PAIRS} <= set(names)
    assert errors == []
    page.close()
