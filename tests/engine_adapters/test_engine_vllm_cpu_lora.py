"""vllm-cpu serving the tiny model and two LoRA adapters of it, driven by one `bench run` whose
``[[models]]`` splits the requests among the three: each request's model recorded, every figure
given per model.

The adapters are made here with peft (random weights: ``init_lora_weights=False``, so each
changes the model's output) on the tiny Llama's q_proj and v_proj, rank 8, and served with
``--enable-lora --lora-modules a=DIR b=DIR --max-lora-rank 8``. Needs the engine cache's vllm-cpu
(benchmarks/engines/install-vllm-cpu.sh) and peft (the test extra); skipped with the reason
otherwise. It starts its own vllm-cpu, since the shared one serves no adapters.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine_adapters.launch_command import launch_plan, start_engine
from engine_adapters.registry import get_adapter
from results.folder.run_folder import load_run
from tests.support.real_engines import SHARED_VLLM_ARGS, VLLM_CPU_MARKS, VLLM_PYTHON, tiny_model

pytestmark = VLLM_CPU_MARKS

peft = pytest.importorskip("peft", reason="peft is not installed (pip install -e '.[test]')")

# 30 requests over the base model and the two adapters, 1:1:1 (10 each, exactly).
SCENARIO = """
name = "vllm-lora"
users = 3
num_requests = 30
ignore_eos = true
seed = 11

[input_len]
kind = "uniform"
low = 16
high = 32

[output_len]
kind = "fixed"
value = 16

[[models]]
name = "{base}"

[[models]]
name = "a"

[[models]]
name = "b"
"""


def make_adapter(model_dir: Path, folder: Path, seed: int) -> Path:
    """A rank-8 LoRA adapter of ``model_dir`` on q_proj and v_proj, random weights; its folder."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    config = peft.LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    peft.get_peft_model(model, config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def lora_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """vllm-cpu serving the tiny model and adapters ``a`` and ``b``: its URL, the model folder."""
    folder = tmp_path_factory.mktemp("lora")
    model_dir = tiny_model(folder / "model")
    a = make_adapter(model_dir, folder / "adapter-a", seed=1)
    b = make_adapter(model_dir, folder / "adapter-b", seed=2)
    adapter = get_adapter("vllm")
    lora_args = ["--enable-lora", "--lora-modules", f"a={a}", f"b={b}", "--max-lora-rank", "8"]
    plan = launch_plan(
        adapter, model=str(model_dir), executable=str(VLLM_PYTHON),
        extra_args=[*SHARED_VLLM_ARGS, *lora_args],
    )  # fmt: skip
    with start_engine(adapter, plan) as engine:
        yield engine.base_url, model_dir


def test_a_run_over_the_base_model_and_two_adapters_gives_figures_per_model(
    tmp_path: Path, lora_vllm: tuple[str, Path]
) -> None:
    url, model_dir = lora_vllm
    served = [m["id"] for m in httpx.get(url + "/v1/models", timeout=10).json()["data"]]
    assert {str(model_dir), "a", "b"} <= set(served), served
    path = tmp_path / "lora.toml"
    path.write_text(SCENARIO.format(base=model_dir))
    opts = RunOptions(
        load_scenario(path), url, "vllm", None, str(model_dir), tmp_path / "runs", live=False
    )
    folder, summary = run_benchmark(opts, Console(file=io.StringIO()))
    run = load_run(folder)
    req = run.requests
    assert (req["status"] == "ok").all(), req.loc[req["status"] != "ok", "error"].tolist()
    # The shares' exact counts, each request's model as sent.
    assert Counter(req["model"]) == {str(model_dir): 10, "a": 10, "b": 10}
    by_model = summary["models"]["by_model"]
    assert list(by_model) == [str(model_dir), "a", "b"]
    for name, figures in by_model.items():
        assert figures["counts"]["all"] == {**figures["counts"]["all"], "requests": 10, "ok": 10}
        # ignore_eos: every request generated its 16 tokens, as vLLM's usage counts them.
        assert figures["tokens"]["output_tokens"] == 160, name
        assert figures["throughput"]["output_tok_s"] > 0
        assert figures["ttft_ms"]["p50"] > 0 and figures["tpot_ms"]["p50"] > 0
        assert figures["share"] == pytest.approx(1 / 3)
    assert (
        sum(f["tokens"]["output_tokens"] for f in by_model.values())
        == (summary["tokens"]["output_tokens"])
    )
