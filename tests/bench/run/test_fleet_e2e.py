"""`bench run --url A --url B`: one run against two real `bench serve` on 127.0.0.1, one slowed.

The slow replica sleeps in every engine step (`bench serve --step-delay-ms`), so its requests
take several times longer than the fast one's. Round-robin then still splits the requests
evenly, least-outstanding sends more to the fast one, and every per-endpoint figure shows the
slow one slower; the probes scrape both, the dashboard draws both, `bench compare` and
`bench gate` read a fleet run as any other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from results.folder.run_folder import load_run
from tests.support.browser import evaluate_figure
from tests.support.openai_fakes import openai_handler, serving
from tests.support.paths import REPO_ROOT
from tests.support.server_fixture import bench_serve

# Long enough that a slow request takes several fast ones' time on a loaded machine too.
SLOW_STEP_DELAY_MS = 60
SCENARIO = """
name = "fleet"
users = 4
num_requests = {requests}
ignore_eos = true
seed = 5

[input_len]
kind = "uniform"
low = 16
high = 48

[output_len]
kind = "fixed"
value = 16
"""


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(fast, slow): the base URLs of two `bench serve --model tiny`, the second slowed."""
    logs = tmp_path_factory.mktemp("replicas")
    with (
        bench_serve(logs / "fast.log") as fast,
        bench_serve(logs / "slow.log", "--step-delay-ms", str(SLOW_STEP_DELAY_MS)) as slow,
    ):
        yield fast.url, slow.url


def bench(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


def fleet_run(
    tmp_path: Path, urls: list[str], *options: str, requests: int = 24
) -> tuple[subprocess.CompletedProcess[str], Path | None]:
    """`bench run` of the module's scenario against ``urls``; its output and run folder."""
    scenario = tmp_path / "fleet.toml"
    scenario.write_text(SCENARIO.format(requests=requests))
    runs = tmp_path / "runs"
    url_options = [part for url in urls for part in ("--url", url)]
    proc = bench(
        tmp_path, "run", "--scenario", str(scenario), *url_options, "--tokenizer", "tiny",
        "--no-live", "--no-calibrate", "--runs-dir", str(runs), *options,
    )  # fmt: skip
    folders = sorted(runs.glob("*-fleet-*")) if runs.is_dir() else []
    return proc, folders[-1] if folders else None


def split(folder: Path) -> dict[str, int]:
    requests = pd.read_parquet(folder / "requests.parquet")
    return {str(k): int(v) for k, v in requests["endpoint"].value_counts().items()}


def by_endpoint(folder: Path) -> dict[str, dict]:
    summary = json.loads((folder / "summary.json").read_text())
    return summary["endpoints"]["by_endpoint"]


def test_round_robin_splits_evenly_and_the_slow_replica_shows_slower(
    tmp_path: Path, replicas: tuple[str, str]
) -> None:
    fast, slow = replicas
    proc, folder = fleet_run(tmp_path, [fast, slow], "--route", "round-robin")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert folder is not None
    # One client routing in turn: exactly half each.
    assert split(folder) == {fast: 12, slow: 12}
    run = load_run(folder)
    assert (run.requests["status"] == "ok").all()
    assert run.run_json["engine"]["endpoints"] == [fast, slow]
    assert run.run_json["engine"]["route"] == "round-robin"
    figures = by_endpoint(folder)
    assert list(figures) == [fast, slow]
    # Every token of the slow replica waits out its step delay (TTFT only one step's: left out,
    # since one step's delay can drown in a loaded machine's noise).
    for key in ("itl_ms", "tpot_ms", "e2el_ms"):
        assert figures[slow][key]["p50"] > figures[fast][key]["p50"], key
    assert figures[fast]["share"] == figures[slow]["share"] == 0.5
    # The replicas' parts add up to the run's totals, over the same window.
    summary = run.summary
    assert summary is not None
    for name in ("requests", "ok", "error"):
        parts = sum(f["counts"]["window"][name] for f in figures.values())
        assert parts == summary["counts"]["window"][name]
    parts_tok_s = sum(f["throughput"]["output_tok_s"] for f in figures.values())
    assert parts_tok_s == pytest.approx(summary["throughput"]["output_tok_s"])
    # The terminal table names both replicas beside the total.
    assert "Per endpoint (route round-robin" in proc.stdout
    assert fast in proc.stdout and slow in proc.stdout
    # The probes scraped both replicas, each series labelled with its endpoint.
    assert run.samples is not None
    engine = run.samples[run.samples["source"] == "engine"]
    labelled = {json.loads(text).get("endpoint") for text in engine["labels"].unique()}
    assert labelled == {fast, slow}
    assert {f"engine {fast}", f"engine {slow}"} <= set(run.run_json["probes"]["samplers"])
    # Each replica's engine figures come from its own series: both generated tokens.
    generated = [figures[url]["engine"]["generation_tokens"] for url in (fast, slow)]
    assert all(g is not None and g > 0 for g in generated)
    assert figures[slow]["engine"]["num_requests_running"] is not None
    # Both replicas' processes are the run's own, each its own CPU group.
    groups = run.run_json["probes"]["samplers"]["cpu"]["processes"]
    assert {"client", "engine-1", "engine-2"} <= set(groups)
    assert run.summary["attribution"]["reason"].endswith("a fleet run records no engine steps")


def test_least_outstanding_sends_more_to_the_fast_replica(
    tmp_path: Path, replicas: tuple[str, str]
) -> None:
    fast, slow = replicas
    proc, folder = fleet_run(tmp_path, [fast, slow], "--route", "least-outstanding")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert folder is not None
    counts = split(folder)
    assert counts[fast] > counts[slow] > 0, counts
    assert sum(counts.values()) == 24
    figures = by_endpoint(folder)
    assert figures[slow]["tpot_ms"]["p50"] > figures[fast]["tpot_ms"]["p50"]
    assert figures[fast]["share"] > figures[slow]["share"]


@pytest.mark.parametrize(
    "driver", [["--workers", "2"], ["--driver", "locust", "--workers", "2"]], ids=str
)
def test_every_driver_routes_and_names_the_endpoint(
    tmp_path: Path, replicas: tuple[str, str], driver: list[str]
) -> None:
    fast, slow = replicas
    proc, folder = fleet_run(tmp_path, [fast, slow], "--no-probes", *driver, requests=16)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert folder is not None
    counts = split(folder)
    # Each of the two client processes takes the replicas in turn over its own requests.
    assert set(counts) == {fast, slow} and sum(counts.values()) == 16
    assert abs(counts[fast] - counts[slow]) <= 2, counts
    assert (pd.read_parquet(folder / "requests.parquet")["status"] == "ok").all()
    # run.json says, per client and connection, whose clock timed the chunks.
    # Every driver's clients (asyncio worker processes, Locust workers) read their sockets
    # with the raw client: per worker and replica, its connections.
    stamps = json.loads((folder / "run.json").read_text())["load"]["receive_stamps"]
    source = "kernel" if sys.platform.startswith("linux") else "user"
    assert stamps["source"] == source
    assert {c["endpoint"] for c in stamps["clients"]} == {fast, slow}
    assert {c["worker"] for c in stamps["clients"]} == {0, 1} and len(stamps["clients"]) == 4
    assert stamps["connections"] >= 4 and all(
        conn["stamps"] == source for c in stamps["clients"] for conn in c["connections"]
    )
    assert set(pd.read_parquet(folder / "requests.parquet")["stamps"]) == {source}


def test_one_replica_refusing_stops_the_run_naming_it(
    tmp_path: Path, replicas: tuple[str, str]
) -> None:
    fast, _ = replicas
    other = [{"id": "other-model", "object": "model", "max_model_len": 2048}]
    with serving(openai_handler(other)) as server:
        wrong = server.base_url
        proc, folder = fleet_run(tmp_path, [fast, wrong], "--no-probes")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert folder is None
    message = " ".join((proc.stdout + proc.stderr).split())
    assert f"replica 2 of 2 ({wrong})" in message and "does not serve it" in message


def test_bad_fleet_options_are_one_line_errors(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9"
    proc, _ = fleet_run(tmp_path, [url, url + "/"])
    assert proc.returncode == 2 and f"--url {url} is given twice" in proc.stdout + proc.stderr
    proc, _ = fleet_run(tmp_path, [url, "http://127.0.0.1:10"], "--route", "random")
    assert proc.returncode == 2 and "--route 'random'" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_one_url_keeps_the_run_as_it_was(tmp_path: Path, replicas: tuple[str, str]) -> None:
    fast, _ = replicas
    proc, folder = fleet_run(tmp_path, [fast], "--no-probes", requests=8)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert folder is not None
    run = load_run(folder)
    assert "endpoints" not in run.run_json["engine"] and "route" not in run.run_json["engine"]
    assert run.summary is not None and "endpoints" not in run.summary
    assert (run.requests["endpoint"] == fast).all()
    assert "Per endpoint" not in proc.stdout
    assert 'data-figure="endpoints"' not in (folder / "report.html").read_text(encoding="utf-8")


def test_dashboard_compare_and_gate_read_a_fleet_run(
    tmp_path: Path, replicas: tuple[str, str]
) -> None:
    fast, slow = replicas
    folders = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        proc, folder = fleet_run(tmp_path / name, [fast, slow], "--no-probes", requests=16)
        assert proc.returncode in (0, 1) and folder is not None, proc.stdout + proc.stderr
        folders.append(folder)
    compared = bench(tmp_path, "compare", str(folders[0]), str(folders[1]))
    assert compared.returncode == 0, compared.stdout + compared.stderr
    baseline = tmp_path / "fleet.json"
    saved = bench(tmp_path, "baseline", "save", str(folders[0]), "--name", "fleet",
                  "-o", str(baseline))  # fmt: skip
    assert saved.returncode == 0, saved.stdout + saved.stderr
    gated = bench(tmp_path, "gate", str(folders[1]), "--baseline", str(baseline))
    # One run against one: the gate judges the totals (pass, fail or inconclusive), no crash.
    assert gated.returncode in (0, 1, 2) and "Traceback" not in gated.stderr, gated.stderr
    assert "ttft" in gated.stdout.lower()
    _check_replicas_drawn(folders[0] / "report.html", [fast, slow])


def _check_replicas_drawn(report: Path, urls: list[str]) -> None:
    """The report's replicas figure in the real browser: one bar trace per replica per panel."""
    html = report.read_text(encoding="utf-8")
    assert 'data-figure="endpoints"' in html
    drawn = evaluate_figure(
        report,
        "fig-endpoints",
        "gd => ({traces: gd.data.map(t => t.name),"
        " bars: gd.querySelectorAll('g.trace.bars path').length})",
    )
    assert drawn["traces"] == [u for u in urls for _ in range(3)]
    # Every replica's bars are drawn: requests and tok/s, and six latency percentiles each.
    assert drawn["bars"] >= len(urls) * 8
