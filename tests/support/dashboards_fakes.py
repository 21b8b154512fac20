"""Fake-but-realistic run folders for the dashboard tests, written through
results.folder.run_folder.

A closed loop of ``users`` users is simulated with a seeded generator: each request waits for
its user's previous one, streams one chunk per token (some chunks carry two) at a jittered
inter-token latency, and a few fail (HTTP 500, a refused connection) or are cancelled at the end.
Steps, samples, the summary and a GPU are each optional, to test what a page says without them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from perfmodel.presets import get_preset
from results.folder.engine_steps import STEPS_SCHEMA
from results.folder.records import ChunkRecord, RequestRecord
from results.folder.run_folder import RunFolder, load_run
from results.run_summary import summarize_run
from tests.support.run_json import fake_run_json

H100 = "NVIDIA H100 80GB HBM3"
# Roofs as run.json's "analytic" gives them (results.figures.analytic): an A100 in BF16, ridge 156
# FLOP/B.
A100_ROOFS = {
    "name": "NVIDIA A100 80GB",
    "source": "test",
    "compute_dtype": "bf16",
    "flops_per_s": 312e12,
    "bytes_per_s": 2.0e12,
}
NASTY_ERROR = '<script>alert("x")</script> upstream said %{x} & "no"'


def _records(users: int, n: int, rng: np.random.Generator, errors: bool) -> list[RequestRecord]:
    ready = np.zeros(users)
    records: list[RequestRecord] = []
    for i in range(n):
        user = int(np.argmin(ready))
        scheduled = float(ready[user])
        sent = scheduled + float(rng.uniform(0.0002, 0.002))
        rid = f"req-{i:04d}"
        out = int(rng.integers(8, 33))
        prompt = int(rng.integers(16, 65))
        failing = errors and i in (5, 23)
        if failing:
            done = sent + 0.01
            http, msg = (500, NASTY_ERROR) if i == 5 else (None, "connection refused")
            records.append(
                RequestRecord(
                    rid,
                    user,
                    scheduled,
                    sent,
                    None,
                    done,
                    prompt,
                    0,
                    "usage",
                    "error",
                    msg,
                    http,
                    [],
                )
            )
            ready[user] = done
            continue
        t = sent + float(rng.uniform(0.02, 0.08))
        first = t
        chunks, index, left = [], 0, out
        while left > 0:
            k = 2 if left >= 2 and rng.random() < 0.1 else 1
            # Kernel-stamped, read 0.2-1 ms later (no draw: the other figures keep their data).
            chunks.append(ChunkRecord(rid, index, t, k, read_s=t + 0.0002 * (1 + index % 5)))
            index, left = index + 1, left - k
            t += float(rng.gamma(4.0, 0.0025)) * k
        done = chunks[-1].t_s + 0.001
        records.append(
            RequestRecord(
                rid,
                user,
                scheduled,
                sent,
                first,
                done,
                prompt,
                out,
                "usage",
                "ok",
                None,
                200,
                chunks,
                stamps="kernel",
            )
        )
        ready[user] = done
    if errors:
        last = records[-1]
        records[-1] = RequestRecord(
            last.request_id,
            last.user_id,
            last.scheduled_s,
            last.sent_s,
            last.first_token_s,
            last.done_s,
            last.prompt_tokens,
            last.output_tokens,
            "usage",
            "cancelled",
            "cancelled at the run's duration",
            200,
            last.chunks,
        )
    return records


def _steps(requests: pd.DataFrame, rng: np.random.Generator, step_s: float) -> pd.DataFrame:
    end = float(np.nanmax(requests["done_s"]))
    starts = np.arange(0.0, end, step_s)
    sent = requests["sent_s"].to_numpy()
    done = requests["done_s"].to_numpy()
    running = np.array([int(np.sum((sent <= t) & (done > t))) for t in starts])
    prefill = np.where(rng.random(starts.size) < 0.08, rng.integers(16, 200, starts.size), 0)
    decode = np.maximum(running - (prefill > 0), 0)
    frame: dict[str, Any] = {
        name: np.zeros(starts.size, dtype=np.int64) for name in STEPS_SCHEMA.names
    }
    frame.update(
        step=np.arange(starts.size),
        start_s=starts,
        end_s=starts + step_s * 0.9,
        forward_s=np.full(starts.size, step_s * 0.8),
        num_seqs=running,
        num_prefill_seqs=(prefill > 0).astype(np.int64),
        num_decode_seqs=decode,
        num_prefill_tokens=prefill,
        num_decode_tokens=decode,
        context_tokens=running * 60 + prefill,
        attn_pairs=running * 60 + prefill * prefill // 2,
        kv_blocks_used=running * 4,
        kv_blocks_total=np.full(starts.size, 512),
        num_running=running,
        num_waiting=np.zeros(starts.size, dtype=np.int64),
    )
    return pd.DataFrame(frame)


def _samples(end_s: float, gpu: bool) -> pd.DataFrame:
    rows: list[tuple[float, str, str, float, str]] = []
    for t in np.arange(-0.5, end_s + 0.5, 0.1):
        wave = 0.5 + 0.4 * np.sin(t)
        rows += [
            (t, "cpu", "system_cpu_pct", 40 + 30 * wave, ""),
            (t, "cpu", "process_cpu_pct", 90 * wave, json.dumps({"process": "engine"})),
            (
                t,
                "engine",
                "kv_cache_usage",
                0.3 * wave,
                json.dumps({"metric": "vllm:kv_cache_usage_perc"}),
            ),
            (t, "engine", "num_requests_waiting", float(int(3 * wave)), ""),
        ]
        if gpu:
            g = json.dumps({"gpu": "0"})
            rows += [
                (t, "nvml", "gpu_util_pct", 100 * wave, g),
                (t, "nvml", "power_w", 300 + 300 * wave, g),
                (t, "nvml", "energy_j", 1000 + 500 * t, g),
                (t, "gpm", "dram_bw_util_pct", 70 * wave, g),
                (t, "gpm", "dram_bytes_per_s", 3.35e12 * 0.7 * wave, g),
                (t, "gpm", "sm_util_pct", 80 * wave, g),
                (t, "gpm", "tensor_util_pct", 50 * wave, g),
            ]
    return pd.DataFrame(rows, columns=["t_s", "source", "name", "value", "labels"])


def make_run(
    root: Path,
    *,
    users: int = 8,
    requests: int = 60,
    seed: int = 0,
    steps: bool = True,
    samples: bool = True,
    summary: bool = True,
    gpu: bool = True,
    errors: bool = True,
    analytic: bool = True,
    roofs: dict[str, Any] | None = None,
    attribution: dict[str, Any] | None = None,
    slo: dict[str, float] | None = None,
    warmup_s: float = 0.0,
    step_s: float = 0.01,
    scenario: str = "fake",
) -> Path:
    """Write a run folder under ``root`` and return its path (see the module docstring).

    ``analytic``: write run.json's "analytic" (the tiny preset in BF16, with ``roofs``), from
    which the real summarizer (results.run_summary, when present) computes the attribution;
    ``attribution`` replaces summary.json's.
    """
    rng = np.random.default_rng(seed)
    records = _records(users, requests, rng, errors)
    folder = RunFolder.create(root, scenario, "reference")
    req = folder.write_requests(records)
    folder.write_tokens(records)
    description = {
        "model_config": get_preset("tiny").to_dict(),
        "dtype": "bfloat16",
        "device": "cuda:0" if gpu else "cpu",
        "kv_cache_dtype": "bfloat16",
    }
    folder.write_run_json(
        fake_run_json(
            folder.run_id,
            scenario={
                "name": scenario,
                "users": users,
                "num_requests": requests,
                "warmup_s": warmup_s,
                "cooldown_s": 0.0,
                "slo": slo or {},
            },
            engine={"adapter": "reference", "model": "tiny", "description": description},
            hardware={"cpu": "Fake CPU", "gpus": [H100] if gpu else []},
            git_commit="0123456789abcdef",
            **({"analytic": _analytic(roofs)} if analytic else {}),
        )
    )
    if steps:
        folder.write_steps(_steps(req, rng, step_s))
    if samples:
        frame = _samples(float(np.nanmax(req["done_s"])), gpu)
        table = pa.Table.from_pandas(frame, preserve_index=False)
        pq.write_table(table, folder.path / "samples.parquet")
    if summary:
        result = summarize_run(load_run(folder.path))
        if attribution is not None:
            result["attribution"] = attribution
        folder.write_summary(result)
    return folder.path


def _analytic(roofs: dict[str, Any] | None) -> dict[str, Any]:
    bf16 = {"weight_dtype": "bf16", "kv_dtype": "bf16", "activation_dtype": "bf16"}
    config = get_preset("tiny").to_dict()
    return {
        "model_config": config,
        "precision": bf16,
        "tp": 1,
        "roofs": roofs,
        "notes": [] if roofs else ["no roofs given to the fake run"],
    }
