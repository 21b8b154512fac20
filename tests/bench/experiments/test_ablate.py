"""`bench ablate`: switch parsing, the settings grid, and a real two-setting ablation."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.experiments.ablate import AblationError, Switch, parse_switch, settings_grid
from bench.scenario.scenario import load_scenario

SCENARIO = """
name = "ablate-small"
users = 6
num_requests = 18
ignore_eos = true
seed = 2
[input_len]
kind = "uniform"
low = 40
high = 60
[output_len]
kind = "fixed"
value = 12
"""


def test_parse_switch_converts_by_the_settings_type() -> None:
    assert parse_switch("batching=continuous,static") == Switch(
        "batching", ("continuous", "static")
    )
    assert parse_switch("enable-prefix-caching=on,off").values == (True, False)
    assert parse_switch("max_num_seqs=8,64").values == (8, 64)
    assert parse_switch("draft_num_layers=none,2").values == (None, 2)
    assert parse_switch("gpu_memory_utilization=1,0.5").values == (1.0, 0.5)
    assert parse_switch("speculative=off,ngram").values == ("off", "ngram")
    assert parse_switch("kv-cache=on,off").values == (True, False)
    assert parse_switch("attention_backend=native,torch,naive").values == (
        "native",
        "torch",
        "naive",
    )


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("batching", "expected NAME=V1,V2"),
        ("batchin=static", "batchin is not an engine setting; did you mean 'batching'?"),
        ("max_num_seqs=eight", "max_num_seqs must be an integer, got 'eight'"),
        ("enable_prefix_caching=maybe", "must be on/off"),
        ("batching=dynamic", "batching must be one of continuous, static, got 'dynamic'"),
        ("block_size=16,12", "block_size must be a power of two, got 12"),
        ("served_model_name=a,b", "changes no figure"),
    ],
)
def test_bad_switches_name_the_problem(spec: str, fragment: str) -> None:
    with pytest.raises(AblationError, match=re.escape(fragment)):
        parse_switch(spec)


def test_grid_is_every_combination_baseline_first_and_checked() -> None:
    grid = settings_grid(
        [parse_switch("batching=continuous,static"), parse_switch("kv_layout=paged,contiguous")],
        load_scenario("1-user"),
    )
    assert grid[0] == {"batching": "continuous", "kv_layout": "paged"}
    assert len(grid) == 4
    with pytest.raises(AblationError, match="needs kv_layout='paged'"):
        settings_grid(
            [parse_switch("kv_layout=contiguous"), parse_switch("enable_prefix_caching=on")],
            load_scenario("1-user"),
        )


def test_grid_takes_the_kv_cache_and_attention_switches_together() -> None:
    grid = settings_grid(
        [parse_switch("kv_cache=on,off"), parse_switch("attention_backend=torch,naive")],
        load_scenario("1-user"),
    )
    assert grid[0] == {"kv_cache": True, "attention_backend": "torch"}
    assert {"kv_cache": False, "attention_backend": "naive"} in grid
    with pytest.raises(AblationError, match="needs kv_cache on"):
        settings_grid(
            [parse_switch("kv_cache=off"), parse_switch("speculative=ngram")],
            load_scenario("1-user"),
        )


def test_grid_is_checked_over_the_scenarios_engine_table(tmp_path: Path) -> None:
    path = tmp_path / "contiguous.toml"
    path.write_text(SCENARIO + '\n[engine]\nkv_layout = "contiguous"\n')
    with pytest.raises(
        AblationError, match=r"setting enable_prefix_caching=True: .*needs kv_layout"
    ):
        settings_grid([parse_switch("enable_prefix_caching=off,on")], load_scenario(path))


def test_ablation_runs_each_setting_on_a_fresh_engine(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "ablate", "--scenario", str(scenario),
         "--switch", "kv_layout=paged,contiguous", "--runs-dir", str(tmp_path / "runs"),
         "--no-live"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = (tmp_path / "runs").glob("*-ablate-ablate-small/ablation.json")
    doc = json.loads(path.read_text())
    paged, contiguous = doc["rows"]
    assert paged["setting"] == {"kv_layout": "paged"}
    for row in doc["rows"]:
        assert Path(row["run"]).is_dir()
        # Every setting's run has its dashboard, as a `bench run` has.
        assert (Path(row["run"]) / "report.html").is_file()
        assert row["output_tok_s"] > 0
    assert paged["ratios"]["output_tok_s"] == 1.0
    # Contiguous reserves max_model_len per request; paged about what is used.
    assert contiguous["kv_reserved_peak_bytes"] > 10 * paged["kv_reserved_peak_bytes"]
    assert contiguous["kv_waste"] > 0.9 > paged["kv_waste"]
    assert "Ablation" in proc.stdout
    # The quality column: contiguous KV changes where K/V live, never what is computed.
    quality = contiguous["quality"]
    assert quality["kind"] == "exact" and quality["right"] and quality["greedy_identical"]
    assert quality["against_off"]["rel_error"] <= 1e-4
    assert "quality" in proc.stdout and "right (exact)" in proc.stdout
