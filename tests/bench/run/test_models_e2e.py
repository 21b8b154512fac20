"""`bench run` of a scenario with ``[[models]]``: the requests split by share among the models,
each request's model recorded, and every figure per model beside the total.

`bench serve` serves one model and answers any other name with 400 ``model_not_found``, so the
split runs against an OpenAI-compatible server on 127.0.0.1 that lists three models and answers
each with its own number of tokens (vLLM serving a base model and two LoRA adapters does the
same: tests/engine_adapters/test_engine_vllm_cpu_lora.py); against `bench serve`, a
``[[models]]`` name it does not serve is refused before the load.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from engine.config import EngineConfig
from results.folder.run_folder import load_run
from tests.support.http_server import Handler, HttpRequest, Response
from tests.support.openai_fakes import serving
from tests.support.paths import REPO_ROOT
from tests.support.server_fixture import running_server
from tests.support.sse_streams import sse_event

# Tokens each model answers with, so that each model's figures are told apart.
TOKENS = {"base": 4, "a": 2, "b": 6}
SCENARIO = """
name = "models"
users = 3
num_requests = 30
seed = 7

[input_len]
kind = "fixed"
value = 8

[output_len]
kind = "fixed"
value = 8

[[models]]
name = "{first}"
share = 3

[[models]]
name = "{second}"
share = 2

[[models]]
name = "b"
share = 1
"""


def three_models(seen: list[str]) -> Handler:
    """Lists TOKENS' models; streams each request TOKENS[model] one-token chunks."""

    async def handler(request: HttpRequest, response: Response) -> None:
        if request.method == "GET":
            if request.path.startswith("/v1/models"):
                data = [{"id": m, "object": "model", "max_model_len": 512} for m in TOKENS]
                await response.send_json(200, {"object": "list", "data": data})
            else:
                await response.send_json(404, {"detail": "Not Found"})
            return
        model = request.json()["model"]
        seen.append(model)
        await response.start_stream()
        for i in range(TOKENS[model]):
            await response.send(sse_event({"choices": [{"text": f" t{i}", "index": 0}]}))
        usage = {"completion_tokens": TOKENS[model], "prompt_tokens": 8}
        await response.send(sse_event({"choices": [], "usage": usage}) + sse_event("[DONE]"))
        await response.end()

    return handler


def bench_run(
    tmp_path: Path, url: str, first: str = "base", second: str = "a"
) -> tuple[subprocess.CompletedProcess[str], Path | None]:
    """`bench run` of SCENARIO (its first two models named) against ``url``; output, folder."""
    scenario = tmp_path / "models.toml"
    scenario.write_text(SCENARIO.format(first=first, second=second))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", str(scenario), "--url", url,
         "--engine", "openai", "--tokenizer", "tiny", "--no-live", "--no-calibrate",
         "--no-probes", "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    folders = sorted((tmp_path / "runs").glob("*-models-*"))
    return proc, folders[-1] if folders else None


@pytest.mark.slow
def test_requests_split_by_share_and_every_figure_is_given_per_model(tmp_path: Path) -> None:
    seen: list[str] = []
    with serving(three_models(seen)) as server:
        proc, folder = bench_run(tmp_path, server.base_url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert folder is not None
    # Exact counts of the shares 3:2:1, and what the server was sent is what was recorded.
    assert Counter(seen) == {"base": 15, "a": 10, "b": 5}
    run = load_run(folder)
    assert Counter(run.requests["model"]) == Counter(seen)
    assert (run.requests["status"] == "ok").all()
    assert run.run_json["scenario"]["models"][0] == {"name": "base", "share": 3.0}
    assert run.run_json["engine"]["model"] == "base"
    summary = run.summary
    assert summary is not None
    by_model = summary["models"]["by_model"]
    assert list(by_model) == ["base", "a", "b"]
    for name, count in {"base": 15, "a": 10, "b": 5}.items():
        figures = by_model[name]
        assert figures["counts"]["all"]["requests"] == count
        assert figures["tokens"]["output_tokens"] == count * TOKENS[name]
        assert figures["share"] == pytest.approx(count / 30)
        assert figures["planned_share"] == pytest.approx(count / 30)
        assert figures["tpot_ms"]["p50"] is not None
    # The models' parts add up to the run's totals.
    assert (
        sum(f["tokens"]["output_tokens"] for f in by_model.values())
        == (summary["tokens"]["output_tokens"])
    )
    parts_tok_s = sum(f["throughput"]["output_tok_s"] for f in by_model.values())
    assert parts_tok_s == pytest.approx(summary["throughput"]["output_tok_s"])
    # The terminal table and the dashboard name each model beside the total.
    assert "Per model (measured window, ms)" in proc.stdout
    html = (folder / "report.html").read_text()
    assert "Models side by side: 3 models" in html


@pytest.mark.slow
def test_a_model_the_server_does_not_serve_is_refused_before_the_load(tmp_path: Path) -> None:
    config = EngineConfig.from_flat({"model": "tiny", "dtype": "float32"})
    with running_server(config) as url:
        proc, folder = bench_run(tmp_path, url, first="tiny", second="tiny-typo")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "[[models]] name 'tiny-typo':" in out and "it serves 'tiny'" in out
    assert folder is None
    assert "Traceback" not in proc.stderr
