"""A trace replayed against a real server on 127.0.0.1: the sends follow the arrival plan, and
shared hash ids come back as prefix-cache hits."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine.config import EngineConfig
from results.folder.arrival_plan import read_arrival_plan
from results.folder.run_folder import load_run
from tests.support.traces import write_azure_trace, write_mooncake_trace

pytestmark = pytest.mark.timeout(180)

SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=256)
)
BLOCK = 32


def replay(tmp_path: Path, url: str, trace: Path, table: str) -> tuple[Path, dict]:
    toml = tmp_path / f"{trace.stem}.toml"
    toml.write_text(
        f'name = "{trace.stem}"\nusers = 4\nignore_eos = true\n'
        f'[workload]\nkind = "trace"\npath = "{trace.name}"\n[trace]\n{table}\n'
    )
    opts = RunOptions(
        load_scenario(toml), url, "reference", None, "tiny", tmp_path / "runs", live=False
    )
    return run_benchmark(opts, Console(file=io.StringIO()))


def check_sends_follow_plan(folder: Path) -> None:
    data = load_run(folder)
    plan = read_arrival_plan(folder)
    assert plan is not None and data.run_json["load"]["arrival_plan"] == "arrival_plan.parquet"
    req = data.requests.set_index("request_id").loc[plan["request_id"]]
    assert (req["status"] == "ok").all(), req["error"].tolist()
    due = req["scheduled_s"].to_numpy()
    assert due - due[0] == pytest.approx(plan["planned_offset_s"].to_numpy(), abs=1e-9)
    assert (req["sent_s"].to_numpy() >= due).all()
    # The server counts the prompt with its special tokens (a BOS): the same few for each.
    extra = set(req["prompt_tokens"].to_numpy() - plan["prompt_tokens"].to_numpy())
    assert len(extra) == 1 and extra <= {0, 1}
    assert (req["output_tokens"].to_numpy() == plan["output_length"].to_numpy()).all()


def test_shared_hash_ids_hit_the_prefix_cache(tmp_path: Path, base_url: str) -> None:
    # Ten conversations over two system prompts (ids 0-1 and 0-2, sharing block 0), each with
    # its own last block: the second and later of each share their first blocks.
    lines = [(50 * i, 3 * BLOCK, 4, (0, 1 + i % 2, 100 + i)) for i in range(10)]
    trace = write_mooncake_trace(tmp_path / "mooncake.jsonl", lines)
    folder, summary = replay(tmp_path, base_url, trace, f"block_tokens = {BLOCK}\nspeed = 2.0")
    check_sends_follow_plan(folder)
    plan = read_arrival_plan(folder)
    assert plan is not None and plan["planned_offset_s"].tolist() == pytest.approx(
        [0.025 * i for i in range(10)]
    )
    assert (plan["num_hash_ids"] == 3).all()
    reuse = summary["prefix_cache"]
    assert reuse is not None and reuse["hit_share"] > 0.3


def test_a_trace_without_hash_ids_shares_nothing(tmp_path: Path, base_url: str) -> None:
    rows = [(0.02 * i, 3 * BLOCK, 4) for i in range(10)]
    trace = write_azure_trace(tmp_path / "azure.csv", rows)
    folder, summary = replay(tmp_path, base_url, trace, "target_rate_rps = 100.0")
    check_sends_follow_plan(folder)
    plan = read_arrival_plan(folder)
    assert plan is not None and plan["planned_offset_s"].iloc[-1] == pytest.approx(0.09)
    assert (plan["num_hash_ids"] == 0).all()
    reuse = summary["prefix_cache"]
    assert reuse is not None and reuse["prefix_cache_hit_tokens"] == 0
