"""`bench run` of the Responses API, Anthropic Messages, embeddings and rerank against a real
`bench serve` (its engine core in its own process): the real client, the run folder,
summary.json, the terminal and report.html, each API with its own figures."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine_adapters.launcher import free_port, launch
from results.folder.run_folder import load_run
from results.run_summary import summarize_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
REQUESTS = 8
OUTPUT = 6
INPUTS = 2
SCENARIO = """
name = "{api}"
api = "{api}"
users = 2
num_requests = {requests}
ignore_eos = true
seed = 3
{extra}
[input_len]
kind = "uniform"
low = 8
high = 20

[output_len]
kind = "fixed"
value = {output}
"""


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = free_port()
    serve = [
        sys.executable, "-m", "bench", "serve", "--port", str(port), "--model", "tiny",
        "--dtype", "float32", "--device", "cpu", "--max-model-len", "128",
    ]  # fmt: skip
    with launch(serve, f"http://127.0.0.1:{port}", timeout_s=180) as engine:
        yield engine.base_url


@pytest.fixture(scope="module")
def runs(server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """One `bench run` (the CLI, as a user types it) per API, against the one server."""
    out: dict[str, tuple[Path, str]] = {}
    for api in ("responses", "messages", "embeddings", "rerank"):
        tmp = tmp_path_factory.mktemp(api)
        extra = f"inputs_per_request = {INPUTS}\n" if api in ("embeddings", "rerank") else ""
        scenario = tmp / f"{api}.toml"
        scenario.write_text(SCENARIO.format(api=api, requests=REQUESTS, extra=extra, output=OUTPUT))
        proc = subprocess.run(
            [sys.executable, "-m", "bench", "run", "--url", server, "--tokenizer", "tiny",
             "--scenario", str(scenario), "--runs-dir", str(tmp / "runs"), "--no-live"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "160"},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (folder,) = (tmp / "runs").iterdir()
        out[api] = (folder, proc.stdout)
    return out


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_a_generation_api_gives_ttft_itl_and_tpot_from_its_events(
    runs: dict[str, tuple[Path, str]], api: str
) -> None:
    folder, stdout = runs[api]
    run = load_run(folder)
    summary = run.summary
    assert summary is not None and summary == summarize_run(run)
    assert summary["counts"]["all"]["ok"] == REQUESTS, summary["errors"]
    assert summary["ttft_ms"]["count"] == REQUESTS and summary["tpot_ms"]["count"] == REQUESTS
    assert summary["itl_ms"]["count"] == REQUESTS * (OUTPUT - 1)
    assert summary["tokens"]["output_tokens"] == REQUESTS * OUTPUT
    assert summary["tokens"]["output_tokens_source"] == "usage"
    assert "pooling" not in summary
    requests = run.requests
    assert (requests["usage_prompt_tokens"] > 0).all()
    assert run.tokens.groupby("request_id")["n_tokens"].sum().eq(OUTPUT).all()
    assert requests["inputs"].isna().all()
    rows = {line.split()[0] for line in stdout.splitlines() if line.split()}
    assert {"TTFT", "ITL", "TPOT"} <= rows


@pytest.mark.parametrize("api", ["embeddings", "rerank"])
def test_a_pooling_api_gives_latency_inputs_and_input_tokens_and_no_ttft(
    runs: dict[str, tuple[Path, str]], api: str
) -> None:
    folder, stdout = runs[api]
    run = load_run(folder)
    summary = run.summary
    assert summary is not None and summary == summarize_run(run)
    assert summary["counts"]["all"]["ok"] == REQUESTS, summary["errors"]
    for absent in ("ttft_ms", "itl_ms", "tpot_ms", "per_user_tps", "per_user_tps_by_phase"):
        assert absent not in summary
    pooling = summary["pooling"]
    requests = run.requests
    assert pooling["inputs"] == REQUESTS * INPUTS and (requests["inputs"] == INPUTS).all()
    # The server's own count (with each input's BOS), as usage gave it.
    assert pooling["input_tokens"] == int(requests["usage_prompt_tokens"].sum())
    assert (requests["usage_prompt_tokens"] >= requests["client_prompt_tokens"]).all()
    duration = summary["window"]["duration_s"]
    assert pooling["inputs_per_s"] == pytest.approx(REQUESTS * INPUTS / duration)
    assert pooling["latency_ms"]["count"] == REQUESTS and pooling["latency_ms"]["p50"] > 0
    assert run.tokens.empty and requests["first_token_s"].isna().all()
    assert "Input throughput" in stdout
    rows = {line.split()[0] for line in stdout.splitlines() if line.split()}
    assert "E2EL" in rows and not {"TTFT", "ITL", "TPOT"} & rows
    html = (folder / "report.html").read_text()
    assert "Input throughput" in html and 'id="tps"' not in html


def test_the_server_embeds_alike_texts_alike(server: str) -> None:
    body = {"model": "tiny", "input": ["kalo strings", "kalo strings", "pro mine"]}
    answer = httpx.post(server + "/v1/embeddings", json=body, timeout=60).json()
    vectors = [item["embedding"] for item in answer["data"]]
    assert vectors[0] == vectors[1] != vectors[2]
    assert math.isclose(sum(x * x for x in vectors[2]), 1.0, rel_tol=1e-4)
    assert answer["usage"]["prompt_tokens"] > 3


def test_the_server_ranks_the_query_itself_first(server: str) -> None:
    body = {"model": "tiny", "query": "kalo strings", "top_n": 2,
            "documents": ["pro mine", "kalo strings", "tra la"]}  # fmt: skip
    answer = httpx.post(server + "/v1/rerank", json=body, timeout=60).json()
    results = answer["results"]
    assert len(results) == 2 and results[0]["index"] == 1
    assert results[0]["relevance_score"] == pytest.approx(1.0, abs=1e-4)
    assert results[0]["relevance_score"] >= results[1]["relevance_score"]
    assert answer["usage"]["prompt_tokens"] > 0


def test_the_server_answers_responses_and_messages_whole(server: str) -> None:
    turns = [{"role": "user", "content": "kalo strings"}]
    responses = httpx.post(
        server + "/v1/responses",
        json={"model": "tiny", "input": turns, "max_output_tokens": 3, "ignore_eos": True},
        timeout=60,
    ).json()
    assert responses["status"] == "incomplete" and responses["usage"]["output_tokens"] == 3
    messages = httpx.post(
        server + "/v1/messages",
        json={"model": "tiny", "messages": turns, "max_tokens": 3, "ignore_eos": True,
              "system": "be brief"},
        timeout=60,
    ).json()  # fmt: skip
    assert messages["stop_reason"] == "max_tokens" and messages["usage"]["output_tokens"] == 3
    assert messages["content"][0]["type"] == "text"
    refused = httpx.post(server + "/v1/messages", json={"model": "tiny", "messages": turns})
    assert refused.status_code in (400, 422)
