"""benchmarks/gpu_check.py where there is no GPU: the script prints every line as SKIP with
torch's reason and exits 0, or 3 under --require-gpu; the arithmetic the lines judge by, the
engine harness (a profiled run included) and the table are checked here on the CPU.
test_gpu_check_lines.py makes each line fail; test_gpu_check_budget.py covers the budgets, the
deadline and MIG."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from bench.run.endpoint.environment import cpu_name
from benchmarks.gpu_checks import engine_checks, quality_checks, run_checks
from benchmarks.gpu_checks.device_time import step_spans
from benchmarks.gpu_checks.engine_runs import (
    build,
    median_forward_s,
    prompts,
    run_greedy,
    run_profiled,
)
from benchmarks.gpu_checks.figures import decode_mbu
from benchmarks.gpu_checks.rows import Row, passed, render_line, render_table, to_json
from benchmarks.gpu_checks.runner import CHECKS
from perfmodel import cache
from perfmodel.hardware import get_gpu
from perfmodel.presets import get_preset
from perfmodel.roofline import Batch, CostModel, Precision
from perfmodel.roofs import table_roofs
from tests.support.cache import isolated_cache
from tests.support.calibration import save_calibration
from tests.support.paths import REPO_ROOT

needs_no_gpu = pytest.mark.skipif(
    torch.cuda.is_available(), reason="a CUDA device is here: the script runs its checks"
)


@needs_no_gpu
def test_without_cuda_every_line_is_skipped_with_the_reason(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_check.py"), "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert [row["check"] for row in doc["rows"]] == [name for name, _, _ in CHECKS]
    assert doc["counts"] == {"PASS": 0, "MISS": 0, "SKIP": len(CHECKS)}
    # torch's own reason (a CPU build here: "Torch not compiled with CUDA enabled").
    assert all(row["detail"].startswith("no usable CUDA device: ") for row in doc["rows"])
    assert "Torch not compiled with CUDA enabled" in doc["rows"][0]["detail"]
    # Each line printed as it finished, then the table: two SKIPs per check.
    for name, _, _ in CHECKS:
        assert name.split(":")[0][:30] in done.stdout
    assert done.stdout.count("SKIP") == 2 * len(CHECKS)


@needs_no_gpu
def test_require_gpu_exits_non_zero_naming_torchs_reason(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_check.py"), "--require-gpu"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 3, done
    assert "--require-gpu: no usable CUDA device: Torch not compiled with CUDA enabled" in (
        done.stderr
    )


def _decode_steps(forward_s: float, num_seqs: int, context: int) -> pd.DataFrame:
    zeros = {"num_prefill_tokens": 0, "num_prefill_seqs": 0}
    return pd.DataFrame(
        [{**zeros, "num_decode_seqs": num_seqs, "num_decode_tokens": num_seqs,
          "num_seqs": num_seqs, "context_tokens": context, "decode_context_tokens": context,
          "attn_pairs": context, "forward_s": forward_s}]
    )  # fmt: skip


def test_mbu_is_the_analytic_bytes_over_the_step_time_and_the_roof() -> None:
    config = get_preset("llama-3-8b")
    roofs = table_roofs(get_gpu("h200"), "bf16")
    analytic = {
        "model_config": config.to_dict(),
        "precision": Precision.for_model(config).to_dict(),
        "tp": 1,
        "roofs": roofs.to_dict(),
    }
    # 32 sequences, 4,096 tokens of context among them, in 8 ms.
    got = decode_mbu(_decode_steps(0.008, 32, 4096), analytic, 32)
    want = CostModel(config).step(Batch(32, 32, 32, 4096 - 32, 4096)).bytes
    assert got["bytes"] == pytest.approx(want)
    assert got["mbu"] == pytest.approx(want / 0.008 / roofs.bytes_per_s)
    # Batch 1 of Llama-3-8B reads its ~16 GB of bf16 weights per token: at the H200's
    # 4.8 TB/s, a 4 ms step is most of the roof, a 10 ms one well under the target.
    fast = decode_mbu(_decode_steps(0.004, 1, 512), analytic, 1)["mbu"]
    slow = decode_mbu(_decode_steps(0.010, 1, 512), analytic, 1)["mbu"]
    assert 0.75 < fast < 1.0 and slow < 0.4
    # Steps of another batch size, and runs without roofs, give no MBU.
    assert decode_mbu(_decode_steps(0.008, 32, 4096), analytic, 1)["steps"] == 0
    assert decode_mbu(_decode_steps(0.008, 1, 64), {**analytic, "roofs": None}, 1)["mbu"] is None


def test_the_engine_harness_runs_a_greedy_batch_and_records_its_steps() -> None:
    engine = build({"model": "tiny", "dtype": "float32", "device": "cpu", "seed": 0})
    run = run_greedy(engine, prompts(3, 16, 4096), 5)
    assert [len(t) for t in run.tokens] == [5, 5, 5]
    assert run.steps["num_decode_seqs"].iloc[-1] == 3 and len(run.steps) == 5
    assert median_forward_s(run.steps, "decode") > 0
    assert run.analytic["model_config"]["name"] == "tiny"


def test_a_profiled_run_has_one_range_per_step_and_steps_that_sample_nothing() -> None:
    engine = build({"model": "tiny", "dtype": "float32", "device": "cpu", "seed": 0,
                    "enable_chunked_prefill": True, "max_num_batched_tokens": 16})  # fmt: skip
    profiled = run_profiled(engine, prompts(2, 40, 4096), 3)
    steps = len(profiled.run.steps)
    assert len(profiled.sampled) == steps and not all(profiled.sampled) and any(profiled.sampled)
    spans = step_spans(profiled.trace, steps)
    # On the CPU no step launches device work: each truth is its profiler range.
    assert all(s.device_end_us is None and s.truth_s > 0 for s in spans)
    assert [s.start_us for s in spans] == sorted(s.start_us for s in spans)


def test_rows_print_as_one_table_and_as_json() -> None:
    rows = [
        passed("decode MBU", True, "MBU 0.81 (>= 0.75)", mbu=0.81),
        passed("timing", False, "+3.0% (within 2%)"),
        Row("nsys", "SKIP", detail="nsys is not on PATH"),
    ]
    text = render_table(rows, "GPU check: test")
    assert "PASS" in text and "MISS" in text and "nsys is not on PATH" in text
    doc = json.loads(to_json(rows, {"device": "test"}))
    assert doc["counts"] == {"PASS": 1, "MISS": 1, "SKIP": 1}
    assert doc["rows"][0]["values"] == {"mbu": 0.81}
    line = render_line(Row("nsys", "SKIP", detail="nsys is not on PATH", seconds=0.25))
    assert line == "SKIP  nsys  (0.2 s)\n      nsys is not on PATH"
    with pytest.raises(ValueError, match="status must be one of"):
        Row("x", "OK")  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_engine_lines_run_end_to_end_with_the_tiny_preset_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The 8B target replaced by the tiny preset on the CPU (roofs: a calibration of this CPU):
    # the engine lines run their whole code path and give judged rows; only CUDA graphs need
    # their setting.
    isolated_cache(monkeypatch, tmp_path / "cache")
    save_calibration(cache.calibration_path(), cpu_name())
    tiny = {"model": "tiny", "device": "cpu", "dtype": "float32", "seed": 0,
            "max_model_len": 256, "kv_cache_memory_bytes": 16 * 2**20}  # fmt: skip
    monkeypatch.setattr(engine_checks, "TARGET", tiny)
    monkeypatch.setattr(engine_checks, "PROMPT_TOKENS", 16)
    monkeypatch.setattr(engine_checks, "DECODE_TOKENS", 6)
    monkeypatch.setattr(engine_checks, "TIMING_CHUNK", 16)
    ref = engine_checks.Reference()
    rows = {
        "batch 1": engine_checks.check_decode_batch_1(ref, "batch 1"),
        "batch 32": engine_checks.check_decode_batch_32(ref, "batch 32"),
        "timing": engine_checks.check_timing_truth(ref, "timing"),
        "int8": quality_checks.check_int8(ref, "int8"),
        "spec": quality_checks.check_speculation(ref, "spec"),
    }
    assert all(row.status in ("PASS", "MISS") for row in rows.values()), rows
    assert rows["batch 1"].values["steps"] == 5 and rows["batch 1"].values["mbu"] > 0
    assert rows["batch 32"].values["steps"] == 5 and rows["batch 32"].values["ratio"] > 0
    kinds = rows["timing"].values["kinds"]
    assert kinds["sampling"]["steps"] > 0 and kinds["not sampling"]["steps"] > 0, kinds
    # int8 on the tiny preset: right (near its emulation), at a small cost against float32.
    assert rows["int8"].status == "PASS", rows["int8"]
    assert rows["int8"].values["right"], rows["int8"]
    assert 0 < rows["int8"].values["rel_logit_error"] < 0.2, rows["int8"]
    assert rows["int8"].values["decode_time_ratio"] > 0
    # A draft that is the target, in fp32 on the CPU: every draft token accepted.
    assert rows["spec"].status == "PASS", rows["spec"]
    assert rows["spec"].values["tokens_identical"] and rows["spec"].values["draft_tokens"] > 0
    if engine_checks.cuda_graphs_available() is not None:
        row = engine_checks.check_cuda_graphs(ref, "graphs")
        assert row.status == "SKIP" and "setting not available" in row.detail


@pytest.mark.slow
def test_the_probed_run_line_reads_the_run_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Its `bench run` on the tiny preset on the CPU: the run folder has MFU and MBU (roofs: a
    # calibration of this CPU) but no GPU series or energy, and the line says which are missing.
    isolated_cache(monkeypatch, tmp_path / "cache")
    save_calibration(cache.calibration_path(), cpu_name())
    tiny = run_checks.SCENARIO.replace('preset = "llama-3-8b"', 'preset = "tiny"')
    tiny = tiny.replace('device = "cuda"', 'device = "cpu"').replace("users = 8", "users = 2")
    tiny = tiny.replace('dtype = "bfloat16"', 'dtype = "float32"')
    monkeypatch.setattr(run_checks, "SCENARIO", tiny)
    monkeypatch.setattr(run_checks, "PROBED_REQUESTS", 6)
    monkeypatch.setattr(run_checks, "KV_CACHE_BYTES", 64 * 2**20)
    row = run_checks.check_probed_run(engine_checks.Reference(), "probed run")
    assert row.status == "MISS", row
    assert row.figure == "missing: GPU series, energy per token", row
    assert 0 < row.values["mfu"] < 1 and 0 < row.values["mbu"] < 1


def test_nvtx_range_names_are_read_from_nsys_stats_csv() -> None:
    report = (
        "Processing [engine.sqlite] with [nvtx_sum.py]...\n"
        '"Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)",'
        '"Max (ns)","StdDev (ns)","Style","Range"\n'
        '61.2,1000,10,100.0,100.0,90,110,5.0,"PushPop","llm-perf-lab:decode"\n'
        '30.1,500,2,250.0,250.0,240,260,10.0,"PushPop","llm-perf-lab:prefill"\n'
        '8.7,100,1,100.0,100.0,100,100,0.0,"PushPop",":step"\n'
    )
    assert run_checks.nvtx_range_names(report) == {"decode", "prefill", "step"}
    assert run_checks.nvtx_range_names("SKIPPED: engine.sqlite does not contain NV Tools") == set()
