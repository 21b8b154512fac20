"""`bench run --scenario tool-calls` against a real local server that answers half the requests
with tool calls (the recorded chat stream of two parallel calls) and half with text: the
scenario's tools sent with every request, each answer's calls counted in requests.parquet, and
the tool-call figures in summary.json, the terminal and report.html, read in a real headless
browser."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from results.folder.run_folder import load_run
from tests.support.browser import (
    BROWSER_MISSING,
    CHROMIUM,
    CHROMIUM_ARGS,
    open_page,
    sync_playwright,
)
from tests.support.http_server import Handler, HttpRequest, Response
from tests.support.openai_fakes import serving
from tests.support.paths import REPO_ROOT
from tests.support.sse_streams import api_events, chat_events

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
REQUESTS = 8
TEXT = chat_events([{"content": " kalo"}, {"content": " mine"}], {"completion_tokens": 2})


def half_calling(bodies: list[dict]) -> Handler:
    """Lists one model; streams every other request the two recorded tool calls, the rest
    text; keeps each body."""

    async def handler(request: HttpRequest, response: Response) -> None:
        if request.method == "GET":
            if request.path.startswith("/v1/models"):
                data = [{"id": "m", "object": "model", "max_model_len": 4096}]
                await response.send_json(200, {"object": "list", "data": data})
            else:
                await response.send_json(404, {"detail": "Not Found"})
            return
        body = request.json()
        bodies.append(body)
        calls = len(bodies) % 2 == 1
        await response.start_stream()
        for event in api_events("chat-tool-calls-stream.sse") if calls else TEXT:
            await response.send(event)
        await response.end()

    return handler


def _bench_run(tmp_path: Path, url: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", "tool-calls", "--url", url,
         "--engine", "openai", "--tokenizer", "tiny", "--num-requests", str(REQUESTS),
         "--users", "2", "--no-live", "--no-calibrate", "--no-probes",
         "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (folder,) = (tmp_path / "runs").glob("*-tool-calls-*")
    return proc, folder


def test_a_tool_call_run_counts_the_calls_everywhere(tmp_path: Path) -> None:
    bodies: list[dict] = []
    with serving(half_calling(bodies)) as server:
        proc, folder = _bench_run(tmp_path, server.base_url)
    streamed = [b for b in bodies if b.get("stream")]
    assert len(streamed) == REQUESTS
    # Every request offered the scenario's two functions and asked for a call.
    for body in streamed:
        assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "get_time"]
        assert body["tool_choice"] == "required"
    run = load_run(folder)
    req = run.requests
    assert (req["status"] == "ok").all(), req["error"].tolist()
    assert sorted(req["num_tool_calls"].tolist()) == [0] * 4 + [2] * 4
    calling = req[req["num_tool_calls"] > 0]
    assert (calling["output_tokens"] == 21).all()
    section = run.summary["tool_calls"]
    assert section["requests"] == REQUESTS and section["requests_with_tool_calls"] == 4
    assert section["share"] == 0.5 and section["tool_calls"] == 8
    assert section["calls_per_request"] == 1.0
    assert section["calls_per_calling_request"]["mean"] == 2.0
    assert section["ttft_ms_calling"]["count"] == 4 == section["ttft_ms_not_calling"]["count"]
    assert run.run_json["scenario"]["tools"]["choice"] == "required"
    out = " ".join(proc.stdout.split())
    assert "tool calls: 4 of 8 requests (50%) answered with tool calls, 8 calls in all" in out
    _check_report(folder / "report.html")


def _check_report(path: Path) -> None:
    """report.html's headline shows the tool-call tiles, drawn without a console error."""
    if BROWSER_MISSING is not None:
        pytest.skip(f"report.html is not opened in a browser: {BROWSER_MISSING}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page, errors = open_page(browser, path)
        headline = page.locator("#fig-headline").inner_text()
        assert "Requests with tool calls" in headline and "50.0%" in headline, headline
        assert "TTFT of tool-calling requests p50" in headline
        assert "4 of 8 · 8 calls, 2 per calling request" in headline, headline
        assert errors == []
        browser.close()


def test_the_reference_engine_refuses_the_tools_before_the_load(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", "tool-calls", "--num-requests", "2",
         "--no-live", "--no-calibrate", "--no-probes", "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, out
    assert "refused a request before the load (HTTP 400: invalid request: tools:" in out
    assert "the reference engine serves text only and calls no tools" in out
    assert "it does not take tools: start it with tool calling on" in out
    assert "Traceback" not in out
