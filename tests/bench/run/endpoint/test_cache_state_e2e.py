"""A scenario's [prefix_cache] state against a real server on 127.0.0.1: flush, prime, leave,
each recorded in run.json with the load's own hit rate."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from bench.run.endpoint.cache_state import reset_prefix_cache
from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import ScenarioError, load_scenario, scenario_from_dict
from engine.config import EngineConfig
from engine_adapters.registry import get_adapter
from results.folder.run_folder import load_run

pytestmark = pytest.mark.timeout(300)

SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=256)
)
# Eight distinct prompts (one seed: the same eight every run), so hits come only from what an
# earlier run or the priming pass left in the cache.
SCENARIO = """
name = "cache-{state}"
users = 4
num_requests = 8
ignore_eos = true
seed = 9
[input_len]
kind = "fixed"
value = 64
[output_len]
kind = "fixed"
value = 2
"""


def run(tmp_path: Path, url: str, table: str = "") -> dict[str, Any]:
    path = tmp_path / "cache.toml"
    path.write_text(SCENARIO.format(state="x") + table)
    opts = RunOptions(
        load_scenario(path), url, "reference", None, "tiny", tmp_path / "runs", live=False
    )
    folder, summary = run_benchmark(opts, Console(file=io.StringIO()))
    data = load_run(folder)
    assert (data.requests["status"] == "ok").all()
    record = data.run_json["prefix_cache"]
    # The window's figure agrees with the engine's own counters in run.json (summary).
    assert record["hit_tokens"] == summary["prefix_cache"]["prefix_cache_hit_tokens"]
    return record


def test_flush_prime_and_leave(tmp_path: Path, base_url: str) -> None:
    first = run(tmp_path, base_url)
    assert first["state"] == "leave" and "reset" not in first
    # Left warm by the first run: the same prompts hit.
    warm = run(tmp_path, base_url, '[prefix_cache]\nstate = "leave"\n')
    assert warm["hit_rate"] > 0.5
    flushed = run(tmp_path, base_url, '[prefix_cache]\nstate = "flush"\n')
    assert flushed["reset"] == {
        "supported": True, "endpoint": "/reset_prefix_cache", "http_status": 200,
        "success": True,
    }  # fmt: skip
    assert flushed["hit_rate"] == 0 and flushed["queried_tokens"] > 0
    # Primed with the first four of the eight: those four hit, the other four do not.
    primed = run(tmp_path, base_url, '[prefix_cache]\nstate = "prime"\nprime_requests = 4\n')
    assert primed["reset"]["success"] is True and primed["prime"]["ok"] == 4
    assert 0.3 < primed["hit_rate"] < 0.7


def test_an_engine_without_a_reset_endpoint_is_recorded() -> None:
    assert reset_prefix_cache(get_adapter("tgi"), "http://127.0.0.1:9") == {
        "supported": False, "note": "not supported by tgi",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"state": "flsh"}, r"key 'prefix_cache.state': expected one of .*did you mean 'flush'"),
        ({"state": "flush", "prime_requests": 2}, r"'prefix_cache.prime_requests': is for state"),
        ({"state": "prime", "prime_requests": 0}, r"'prefix_cache.prime_requests': must be >= 1"),
        ({"stat": "flush"}, r"key 'prefix_cache.state': missing"),
    ],
)
def test_bad_prefix_cache_keys_name_the_key(table: dict, match: str) -> None:
    fixed = {"kind": "fixed", "value": 4}
    data = {"name": "t", "users": 1, "num_requests": 1, "input_len": fixed, "output_len": fixed}
    with pytest.raises(ScenarioError, match=match):
        scenario_from_dict({**data, "prefix_cache": table}, source="t.toml")
