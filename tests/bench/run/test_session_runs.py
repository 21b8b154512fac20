"""Agent sessions through `bench run`: the shipped trace replayed on closed-loop users and
generated sessions started by an arrival rate, against `bench serve` with its prefix cache on;
tool calls against a stand-in that streams them. The folder records each turn, the delays are
honoured, and the figures per turn and per session reach summary.json and the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from bench.cli.app import app
from engine.config import EngineConfig
from tests.support.agent_sessions import TOOL, tool_call_handler, tool_call_id, write_session_trace
from tests.support.browser import evaluate_figure
from tests.support.openai_fakes import serving

# The engine the module's base_url fixture (tests/conftest.py) serves: the prefix cache on, so
# that later turns find their history cached and the usage says how much.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=1024,
         enable_prefix_caching=True)
)  # fmt: skip
SHIPPED_TRACE = (
    Path(__file__).parents[3] / "bench" / "scenario" / "scenarios" / "agent-sessions.jsonl"
)


def _run(tmp_path: Path, scenario: str, url: str, *extra: str) -> tuple[Path, str]:
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app,
        ["run", "--scenario", scenario, "--url", url, "--tokenizer", "tiny", "--no-live",
         "--no-probes", "--no-calibrate", "--runs-dir", str(runs), *extra],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (folder,) = runs.iterdir()
    return folder, result.output


def _waits(requests: pd.DataFrame) -> list[tuple[str, int, float]]:
    """(session, turn, seconds from the previous turn's end to this turn's send) per later turn."""
    out = []
    for sid, turns in requests.sort_values(["session_id", "turn"]).groupby("session_id"):
        sent, done = turns["sent_s"].to_numpy(), turns["done_s"].to_numpy()
        out += [(str(sid), int(k), float(sent[k] - done[k - 1])) for k in range(1, len(turns))]
    return out


def test_the_shipped_trace_replays_its_turns_delays_and_cached_history(
    tmp_path: Path, base_url: str
) -> None:
    # The shipped scenario as a user runs it: the reference engine calls no tools, but takes
    # the trace's tools (tool_choice left to its default, "auto") into the prompt.
    lines = [json.loads(line) for line in SHIPPED_TRACE.read_text().splitlines()]
    assert any("tools" in line for line in lines)
    folder, output = _run(tmp_path, "agent-sessions", base_url)
    requests = pd.read_parquet(folder / "requests.parquet")
    assert len(requests) == len(lines) and (requests["status"] == "ok").all()
    planned = {}
    for line in lines:
        turns = planned.setdefault(line["session_id"], [])
        turns.append(line.get("delay_s", line.get("delay", 0) / 1000))
    assert {s: len(t) for s, t in planned.items()} == requests.groupby(
        "session_id"
    ).size().to_dict()
    for sid, turn, waited in _waits(requests):
        delay = planned[sid][turn]
        assert delay - 0.01 <= waited < delay + 10.0, (sid, turn, waited)
    # Every later turn resends its history, which the prefix cache holds in part.
    later = requests[requests["turn"] > 0]
    assert (later["cached_tokens"] > 0).all(), later[["session_id", "turn", "cached_tokens"]]
    section = json.loads((folder / "summary.json").read_text())["sessions"]
    by_turn = section["by_turn"]
    assert [row["turn"] for row in by_turn] == [0, 1, 2, 3]
    assert [row["requests"] for row in by_turn] == [3, 3, 2, 1]
    assert all(row["cache_hit_rate"] > 0 for row in by_turn[1:])
    means = [row["prompt_tokens_mean"] for row in by_turn]
    assert means == sorted(means)  # the history grows turn by turn
    per = section["per_session"]
    assert (per["sessions"], per["complete"], per["turns"]["max"]) == (3, 3, 4)
    # The longest session waits 0.4 + 0.9 + 2.0 s between its turns, on top of its answers.
    assert per["duration_s"]["max"] >= 3.3
    assert "Per turn of the sessions" in output and "3 sessions (3 complete)" in output
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert 'data-figure="sessions"' in html and "Prompt tokens by turn" in html
    drawn = evaluate_figure(
        folder / "report.html", "fig-sessions", "gd => gd.querySelectorAll('g.trace').length"
    )
    assert drawn >= 5


GENERATED = """
name = "generated-sessions"
api = "chat"
ignore_eos = true
num_requests = 8
seed = 1

[workload]
kind = "sessions"
system_prompt_tokens = 24

[sessions.turns]
kind = "fixed"
value = 2

[sessions.delay_s]
kind = "fixed"
value = 0.3

[arrival]
kind = "constant"
rate_rps = 4.0

[input_len]
kind = "fixed"
value = 16

[output_len]
kind = "fixed"
value = 4
"""


def test_generated_sessions_start_by_arrival_rate_and_wait_their_delays(
    tmp_path: Path, base_url: str
) -> None:
    scenario = tmp_path / "generated.toml"
    scenario.write_text(GENERATED)
    folder, _ = _run(tmp_path, str(scenario), base_url)
    run_json = json.loads((folder / "run.json").read_text())
    assert (run_json["load"]["mode"], run_json["load"]["sessions"]) == ("open", 4)
    requests = pd.read_parquet(folder / "requests.parquet")
    assert (requests["status"] == "ok").all() and sorted(requests["turn"]) == [
        0,
        0,
        0,
        0,
        1,
        1,
        1,
        1,
    ]
    # Sessions start at the planned times, a quarter second apart (4 sessions per second).
    firsts = requests[requests["turn"] == 0].sort_values("scheduled_s")["scheduled_s"].to_numpy()
    assert np.allclose(np.diff(firsts), 0.25)
    for _, _, waited in _waits(requests):
        assert 0.3 - 0.01 <= waited < 10.0, waited
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["sessions"]["per_session"]["sessions"] == 4


def test_a_run_sends_the_tool_calls_back_as_tool_messages(tmp_path: Path) -> None:
    trace = write_session_trace(tmp_path / "trace.jsonl", [
        {"session_id": "s", "text_input": "read a.py", "output_length": 3, "tools": [TOOL]},
        {"session_id": "s", "delay_s": 0.2, "text_input": "thanks", "output_length": 3,
         "tool_results": ["print('hi')"]},
    ])  # fmt: skip
    scenario = tmp_path / "tools.toml"
    scenario.write_text(
        'name = "tools"\nusers = 1\napi = "chat"\n[workload]\nkind = "sessions"\n'
        f'path = "{trace}"\n'
    )
    handler = tool_call_handler(lambda body: body["messages"][-1].get("content") == "read a.py")
    with serving(handler) as server:
        _run(tmp_path, str(scenario), server.base_url, "--model", "m")
        bodies = [
            r.json() for r in server.requests if r.method == "POST" and r.json().get("stream")
        ]
    assert pd.read_parquet(next((tmp_path / "runs").iterdir()) / "requests.parquet")[
        "num_tool_calls"
    ].tolist() == [1, 0]
    second = bodies[-1]["messages"]
    call_id = tool_call_id({"messages": [None]})
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "user"]
    assert second[1]["tool_calls"][0]["id"] == call_id
    assert second[2] == {"role": "tool", "tool_call_id": call_id, "content": "print('hi')"}


def test_the_locust_driver_refuses_agent_sessions(tmp_path: Path) -> None:
    scenario = tmp_path / "tools.toml"
    scenario.write_text(
        'name = "tools"\nusers = 1\napi = "chat"\nnum_requests = 2\n[workload]\n'
        'kind = "sessions"\n[input_len]\nkind = "fixed"\nvalue = 4\n'
        '[output_len]\nkind = "fixed"\nvalue = 3\n'
    )
    with serving(tool_call_handler(lambda body: False)) as server:
        result = CliRunner().invoke(
            app,
            ["run", "--scenario", str(scenario), "--url", server.base_url, "--model", "m",
             "--tokenizer", "tiny", "--no-live", "--no-probes", "--no-calibrate",
             "--driver", "locust", "--runs-dir", str(tmp_path / "runs")],
        )  # fmt: skip
        streamed = [r for r in server.requests if r.method == "POST" and r.json().get("stream")]
    assert result.exit_code == 2, result.output
    assert "--driver locust does not run agent sessions" in result.output
    assert streamed == []
