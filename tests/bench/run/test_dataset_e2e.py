"""A user's own chat JSONL with their request fields, replayed by `bench run` against a real
`bench serve` on 127.0.0.1 through a proxy that records every body: the fields arrive (a row's
own over [request] and --extra-body, which win over the defaults), every role is sent, the rows
that cannot be sent are refused and counted before the load, ignore_eos is checked before it,
and a file that does not parse is a one-line refusal naming its line (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from tests.support.paths import REPO_ROOT
from tests.support.server_fixture import bench_serve
from tests.support.threaded_http import Reply, SeenRequest, threaded_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SCENARIO = """
name = "mine"
users = 2
num_requests = {n}
api = "chat"
ignore_eos = true
[workload]
kind = "dataset"
path = "{path}"
[dataset.columns]
max_tokens = "answer_tokens"
[request]
top_k = 4
min_tokens = 1
"""


def chat_rows() -> list[dict[str, Any]]:
    """Six conversations a user might replay (system prompts, multi-part content, a tool turn, a
    row's own field), and two that cannot be sent."""
    rows: list[dict[str, Any]] = []
    for i in range(6):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": f"You are assistant number {i}."},
            {"role": "user", "content": [{"type": "text", "text": f"Question {i}: "},
                                         {"type": "text", "text": "why is the sky blue?"}]},
        ]  # fmt: skip
        if i % 3 == 2:
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}",
                 "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "Rayleigh scattering."},
            ]  # fmt: skip
        row: dict[str, Any] = {"messages": messages, "answer_tokens": 5 + i}
        if i == 1:
            row["request"] = {"min_tokens": 3}
        rows.append(row)
    rows.append({"messages": [{"role": "robot", "content": "beep"}], "answer_tokens": 4})
    rows.append({"messages": [{"role": "user", "content": "no length"}]})
    return rows


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with bench_serve(log, "--max-model-len", "512") as server:
        yield server.url


def forwarding(target: str):  # type: ignore[no-untyped-def]
    """A proxy to ``target`` that records every request (bodies included)."""

    def route(request: SeenRequest) -> Reply:
        with httpx.Client(base_url=target, timeout=60) as client:
            answer = client.request(
                request.method, request.path, content=request.body or None,
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
        kept = {k: v for k, v in answer.headers.items() if k.lower() == "content-type"}
        return answer.status_code, kept, answer.content

    return threaded_server(route)


def bench_run(tmp_path: Path, url: str, data: str, *options: str, n: int = 8):  # type: ignore[no-untyped-def]
    path = tmp_path / "chats.jsonl"
    path.write_text(data, encoding="utf-8")
    scenario = tmp_path / "mine.toml"
    scenario.write_text(SCENARIO.format(n=n, path=path.name))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", str(scenario), "--url", url,
         "--tokenizer", "tiny", "--no-live", "--no-calibrate", "--no-probes",
         "--runs-dir", str(tmp_path / "runs"), *options],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def test_a_chat_jsonl_replays_with_its_request_fields(tmp_path: Path, served: str) -> None:
    data = "".join(json.dumps(r) + "\n" for r in chat_rows())
    with forwarding(served) as (url, seen):
        proc = bench_run(tmp_path, url, data, "--extra-body", '{"skip_special_tokens": false}')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 of 8 rows refused: unknown role 'robot'" in proc.stdout
    assert "6 usable rows repeated to make 8 requests (2 requests reuse a row)" in proc.stdout
    posts = [json.loads(r.body) for r in seen if r.method == "POST"]
    check, load = posts[0], posts[1:]
    assert check["stream"] is False and check["ignore_eos"] is True  # before the load
    assert len(load) == 8 and all(b["stream"] is True for b in load)
    for body in load:
        assert body["top_k"] == 4 and body["skip_special_tokens"] is False
        assert body["ignore_eos"] is True
        assert [m["role"] for m in body["messages"]][:2] == ["system", "user"]
        assert body["messages"][1]["content"][1]["text"] == "why is the sky blue?"
    by_system = {b["messages"][0]["content"]: b for b in load}
    assert by_system["You are assistant number 1."]["min_tokens"] == 3  # the row's own wins
    assert by_system["You are assistant number 0."]["min_tokens"] == 1
    tool_turn = by_system["You are assistant number 2."]["messages"]
    assert [m["role"] for m in tool_turn] == ["system", "user", "assistant", "tool"]
    assert tool_turn[3]["tool_call_id"] == "c2"
    folder = next((tmp_path / "runs").glob("*-mine-*"))
    run = json.loads((folder / "run.json").read_text())
    assert run["load"]["rows"]["refused"] == {
        "no output length (a max_tokens column, an answer, output_len)": 1,
        "unknown role 'robot'": 1,
    }
    assert run["load"]["request_fields"]["every_request"] == {
        "top_k": 4,
        "skip_special_tokens": False,
    }
    assert run["load"]["request_fields"]["per_request"] == {"min_tokens": 8}
    assert run["load"]["request_check"]["ignore_eos"] == "kept"
    assert run["scenario"]["request"] == {"top_k": 4, "min_tokens": 1, "skip_special_tokens": False}
    requests = pd.read_parquet(folder / "requests.parquet")
    assert (requests["status"] == "ok").all()
    asked = sorted(b["max_tokens"] for b in load)
    assert sorted(requests["output_tokens"].tolist()) == asked  # ignore_eos: as asked


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ('{"messages": [{"role": "user", "content": "a"}]}\n{"messages": [\n', "line 2: not JSON"),
        ('{"messages": [{"role": "robot", "content": "a"}], "answer_tokens": 3}\n',
         "no row can be sent (refused 1: unknown role 'robot')"),
    ],
)  # fmt: skip
def test_a_file_that_cannot_be_sent_is_refused_before_the_load(
    tmp_path: Path, served: str, data: str, said: str
) -> None:
    proc = bench_run(tmp_path, served, data)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
