"""vllm-cpu serving the other APIs to `bench run`: the Responses API and Anthropic Messages on
its generate runner (the shared vLLM of tests/engine_adapters/conftest.py), embeddings and
rerank on a vLLM of its own with ``--runner pooling`` over the same tiny model (vLLM 0.32 turns
the causal LM into an embedding model, and serves rerank on it as a bi-encoder: the cosine of
the query's and each document's embedding).

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh); skipped with that
reason otherwise. Each run is 10 requests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine_adapters.launch_command import launch_plan, start_engine
from engine_adapters.registry import get_adapter
from results.folder.run_folder import RunData, load_run
from tests.support.real_engines import VLLM_CPU_MARKS, VLLM_PYTHON, SharedVllm, tiny_model

pytestmark = VLLM_CPU_MARKS
REQUESTS = 10
SCENARIO = """
name = "vllm-{api}"
api = "{api}"
users = 2
num_requests = {requests}
ignore_eos = true
seed = 4
{extra}
[input_len]
kind = "uniform"
low = 16
high = 48
[output_len]
kind = "fixed"
value = 12
"""


def _run(tmp: Path, url: str, model_dir: Path, api: str, extra: str = "") -> tuple[RunData, Any]:
    path = tmp / f"{api}.toml"
    path.write_text(SCENARIO.format(api=api, requests=REQUESTS, extra=extra))
    opts = RunOptions(
        load_scenario(path), url, "vllm", None, str(model_dir), tmp / "runs", live=False
    )
    with open(os.devnull, "w") as sink:
        folder, summary = run_benchmark(opts, Console(file=sink))
    return load_run(folder), summary


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_vllm_cpu_streams_responses_and_messages(
    tmp_path: Path, shared_vllm: SharedVllm, api: str
) -> None:
    data, summary = _run(tmp_path, shared_vllm.base_url, shared_vllm.model_dir, api)
    assert summary["counts"]["all"]["ok"] == REQUESTS, summary["errors"]
    assert summary["ttft_ms"]["count"] == REQUESTS and summary["itl_ms"]["count"] > 0
    assert summary["tokens"]["output_tokens_source"] == "usage"
    requests = data.requests
    # vLLM's own counts, in each API's names, read into the same columns.
    assert (requests["usage_prompt_tokens"] >= requests["client_prompt_tokens"]).all()
    assert (requests["usage_output_tokens"] == requests["output_tokens"]).all()
    assert (requests["output_tokens"] >= 1).all() and (requests["output_tokens"] <= 12).all()
    chunks = data.tokens.groupby("request_id")["n_tokens"].sum()
    assert (chunks.reindex(requests["request_id"]).to_numpy() == requests["output_tokens"]).all()
    assert "pooling" not in summary


@pytest.fixture(scope="module")
def pooling_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    adapter = get_adapter("vllm")
    model_dir = tiny_model(tmp_path_factory.mktemp("pooling") / "model")
    args = ["--runner", "pooling", "--dtype", "bfloat16", "--max-model-len", "512"]
    plan = launch_plan(adapter, model=str(model_dir), executable=str(VLLM_PYTHON), extra_args=args)
    with start_engine(adapter, plan) as engine:
        yield engine.base_url, model_dir


@pytest.mark.parametrize(("api", "inputs"), [("embeddings", 2), ("rerank", 3)])
def test_vllm_cpu_pooling_runner_gives_pooling_figures(
    tmp_path: Path, pooling_vllm: tuple[str, Path], api: str, inputs: int
) -> None:
    url, model_dir = pooling_vllm
    extra = f"inputs_per_request = {inputs}\n"
    data, summary = _run(tmp_path, url, model_dir, api, extra)
    assert summary["counts"]["all"]["ok"] == REQUESTS, summary["errors"]
    for absent in ("ttft_ms", "itl_ms", "tpot_ms", "per_user_tps"):
        assert absent not in summary
    pooling = summary["pooling"]
    assert pooling["inputs"] == REQUESTS * inputs and pooling["inputs_per_s"] > 0
    requests = data.requests
    # vLLM counts every input's tokens (a BOS each), the query's too for rerank.
    assert (requests["usage_prompt_tokens"] >= requests["client_prompt_tokens"]).all()
    assert pooling["input_tokens"] == int(requests["usage_prompt_tokens"].sum())
    assert data.tokens.empty
