"""`bench ab` end to end against real engines on 127.0.0.1: two `bench serve` URLs (one slowed
by its step delay), settings sides on fresh reference engines, --until-decided stopping at a
verdict or at its cap, and rev sides from this repository's HEAD in their cached virtualenv.
Each A/B is kept to a few short runs of a tiny scenario."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfmodel.cache import revisions_dir
from tests.support.paths import REPO_ROOT
from tests.support.server_fixture import ServeProcess, bench_serve

SCENARIO = """
name = "ab-test"
seed = 3
users = 4
num_requests = 40
api = "completions"
ignore_eos = true
temperature = 0.0
warmup_s = 0.2
[input_len]
kind = "uniform"
low = 24
high = 40
[output_len]
kind = "fixed"
value = 12
[engine]
preset = "tiny"
dtype = "float32"
num_threads = 1
"""
RULES = """
min_samples = 20
[metrics]
"tpot_ms.mean" = { max_rise_pct = 20 }
"""
# Rules no A/B here can satisfy, whatever the machine's noise: each side needs more measured
# requests than the test sends, so every verdict is inconclusive ("too few samples").
TOO_TIGHT = """
min_samples = 1000000
[metrics]
"tpot_ms.mean" = { max_rise_pct = 0.01 }
"""
# 4 to 15 times the tiny model's step on 2 cores (the more the other jobs, the longer the step):
# a slowdown that other jobs on the machine cannot hide, even at 3 pairs.
SLOW_MS = "100"
# The engine's CPU work per token beside a wall-clock rule that a spin also fails. A run of
# the fast side lasts a second or two: one CPU work window each.
CPU_RULES = """
min_samples = 20
min_windows = 2
[metrics]
"tpot_ms.mean" = { max_rise_pct = 20 }
"probes.cpu_work.engine_cpu_s_per_output_token" = { max_rise_pct = 20 }
"""
# CPU milliseconds burnt per step: several times the tiny model's own work per step.
SPIN_MS = "30"


def _files(tmp_path: Path, rules: str = RULES) -> tuple[Path, Path]:
    scenario, rules_path = tmp_path / "s.toml", tmp_path / "rules.toml"
    scenario.write_text(SCENARIO)
    rules_path.write_text(rules)
    return scenario, rules_path


def _ab(
    tmp_path: Path, *args: str, rules: str = RULES, probes: bool = False
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    scenario, rules_path = _files(tmp_path, rules)
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "ab", "--scenario", str(scenario), "--rules",
         str(rules_path), "--runs-dir", str(tmp_path / "runs"),
         "--probes" if probes else "--no-probes", *args],
        capture_output=True, text=True, timeout=900, cwd=REPO_ROOT,
    )  # fmt: skip
    found = list((tmp_path / "runs").glob("*-ab-test-ab/ab.json"))
    return proc, json.loads(found[0].read_text()) if found else None


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServeProcess, ServeProcess]]:
    logs = tmp_path_factory.mktemp("servers")
    slowed = ("--num-threads", "1", "--step-delay-ms", SLOW_MS)
    with (
        bench_serve(logs / "a.log", "--num-threads", "1") as fast,
        bench_serve(logs / "b.log", *slowed) as slow,
    ):
        yield fast, slow


def test_a_slowed_url_fails_with_the_gates_reports(
    tmp_path: Path, servers: tuple[ServeProcess, ServeProcess]
) -> None:
    fast, slow = servers
    junit, markdown = tmp_path / "ci" / "ab.xml", tmp_path / "ci" / "ab.md"
    proc, doc = _ab(
        tmp_path, "--a-url", fast.url, "--b-url", slow.url, "--tokenizer", "tiny",
        "--pairs", "2", "--until-decided", "--max-pairs", "6", "--junit", str(junit),
        "--markdown", str(markdown),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert doc is not None and doc["verdict"] == "fail" and doc["exit_code"] == 1
    # It stopped at the first pair count that decided.
    pairs = doc["pairs_run"]
    assert doc["decided_after_pairs"] == pairs and 2 <= pairs <= 6
    assert f"decided (fail) after {pairs} pair(s)" in proc.stdout
    assert [p["order"] for p in doc["pairs"]] == ["AB", "BA", "AB", "BA", "AB", "BA"][:pairs]
    (tpot,) = doc["metrics"]
    assert tpot["verdict"] == "fail" and len(tpot["pair_ratios"]) == pairs
    assert min(tpot["pair_ratios"]) > 1.2 and tpot["ci_low_pct"] > 20
    folder = next((tmp_path / "runs").glob("*-ab-test-ab"))
    for pair in doc["pairs"]:
        for key in ("a_run", "b_run"):
            # Every run is a whole run folder, its dashboard included, as a `bench run`'s.
            assert (folder / pair[key] / "run.json").is_file()
            assert (folder / pair[key] / "report.html").is_file()
    assert doc["sides"]["B"]["url"] == slow.url and doc["sides"]["A"]["kind"] == "url"
    xml = (folder / "junit.xml").read_text()
    assert '<failure message="regression' in xml and junit.read_text() == xml
    md = (folder / "report.md").read_text()
    assert md.startswith("### A/B gate: ❌ fail") and markdown.read_text() == md
    assert f"decided (fail) after {pairs} pair(s)" in md
    page = (folder / "ab.html").read_text()
    assert "per-pair B / A" in page and "A (pair 1)" in page
    assert "FAIL" in proc.stdout


def test_until_decided_stops_at_the_cap_and_says_so(
    tmp_path: Path, servers: tuple[ServeProcess, ServeProcess]
) -> None:
    fast, _ = servers
    proc, doc = _ab(
        tmp_path, "--a-url", fast.url, "--b-url", fast.url, "--tokenizer", "tiny",
        "--pairs", "2", "--until-decided", "--max-pairs", "3", "--allow-inconclusive",
        rules=TOO_TIGHT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert doc is not None and doc["verdict"] == "inconclusive" and doc["exit_code"] == 2
    assert doc["pairs_run"] == 3 and doc["decided_after_pairs"] is None
    assert "not decided after 3 pair(s), the cap (--max-pairs)" in proc.stdout
    assert "allowed by --allow-inconclusive" in proc.stdout


def test_until_decided_keeps_to_the_time_budget(
    tmp_path: Path, servers: tuple[ServeProcess, ServeProcess]
) -> None:
    fast, _ = servers
    proc, doc = _ab(
        tmp_path, "--a-url", fast.url, "--b-url", fast.url, "--tokenizer", "tiny",
        "--pairs", "2", "--until-decided", "--max-pairs", "5", "--budget-s", "1",
        rules=TOO_TIGHT,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # --pairs always run; a third pair would end past the budget.
    assert doc is not None and doc["pairs_run"] == 2 and doc["stopped_by"] == "budget"
    assert "not decided after 2 pair(s): one more would pass --budget-s" in proc.stdout


def test_settings_sides_on_fresh_engines(tmp_path: Path) -> None:
    proc, doc = _ab(tmp_path, "--b-set", f"step_delay_ms={SLOW_MS}", "--pairs", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert doc is not None and doc["verdict"] == "fail" and doc["pairs_run"] == 3
    assert "fail after 3 pair(s)" in proc.stdout
    assert doc["sides"]["B"]["settings"] == {"step_delay_ms": float(SLOW_MS)}
    folder = next((tmp_path / "runs").glob("*-ab-test-ab"))
    # Every run started its own engine, and B's ran with the side's setting.
    for pair in doc["pairs"]:
        for key, delay in (("a_run", 0.0), ("b_run", float(SLOW_MS))):
            engine = json.loads((folder / pair[key] / "run.json").read_text())["engine"]
            assert engine["launched"] is True and engine["startup_s"] > 0
            assert engine["settings"].get("step_delay_ms", 0.0) == delay


def test_a_spin_fails_on_cpu_work_from_each_runs_summary(tmp_path: Path) -> None:
    proc, doc = _ab(
        # A sleep on both sides, which CPU time does not see, keeps each load several seconds
        # long on a fast idle box: the CPU figure needs a window of at least 1 s of readings.
        tmp_path, "--a-set", "step_delay_ms=40", "--b-set", f"step_spin_ms={SPIN_MS}",
        "--b-set", "step_delay_ms=40", "--pairs", "3", "--allow-busy",
        rules=CPU_RULES, probes=True,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert doc is not None and doc["verdict"] == "fail"
    metric = "probes.cpu_work.engine_cpu_s_per_output_token"
    cpu = next(m for m in doc["metrics"] if m["metric"] == metric)
    assert cpu["verdict"] == "fail" and min(cpu["pair_ratios"]) > 1.2, cpu
    folder = next((tmp_path / "runs").glob("*-ab-test-ab"))
    for pair in doc["pairs"]:
        for key in ("a_run", "b_run"):
            summary = json.loads((folder / pair[key] / "summary.json").read_text())
            work = summary["probes"]["cpu_work"]
            assert work["available"] and work["engine_cpu_s_per_output_token"] > 0, work
    assert metric in proc.stdout


def test_rev_sides_run_heads_engine_from_its_cached_virtualenv(tmp_path: Path) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    proc, doc = _ab(tmp_path, "--a-rev", "HEAD", "--b-rev", "HEAD", "--pairs", "1")
    # One pair measures no spread between pairs: inconclusive, exit 2.
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert doc is not None and doc["verdict"] == "inconclusive", (doc, proc.stdout[-3000:])
    assert ">= 2 pairs" in doc["metrics"][0]["reason"]
    assert doc["sides"]["A"]["commit"] == doc["sides"]["B"]["commit"] == head
    python = revisions_dir() / head / "venv" / "bin" / "python"
    assert (revisions_dir() / head / "ready").is_file()
    folder = next((tmp_path / "runs").glob("*-ab-test-ab"))
    run_json = json.loads((folder / doc["pairs"][0]["a_run"] / "run.json").read_text())
    assert run_json["engine"]["launch_command"][:2] == [str(python), "-I"]
    summary = json.loads((folder / doc["pairs"][0]["a_run"] / "summary.json").read_text())
    assert summary["usability"]["usable"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--a-rev", "no-such-rev-xyz"], "--a-rev 'no-such-rev-xyz': no such commit"),
        (["--b-set", "bogus=1"], "--b-set 'bogus=1'"),
        (["--pairs", "4", "--max-pairs", "2"], "--max-pairs 2 is below --pairs 4"),
        (["--a-url", "http://127.0.0.1:1", "--a-set", "step_delay_ms=1"], "--a-set sets"),
    ],
)
def test_bad_options_exit_2_with_one_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    proc, doc = _ab(tmp_path, *args)
    assert proc.returncode == 2
    assert fragment in " ".join(proc.stdout.split())
    assert "Traceback" not in proc.stdout + proc.stderr and doc is None
